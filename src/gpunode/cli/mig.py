"""`gpunode mig apply|assert|export`: MIG layouts in mig-parted's format (gpunode.mig).

Exit codes: 0 ok (assert: applied), 1 failed or not applied (not root, an NVML call
failed, assert: a difference), 2 bad input (the file, a layout a GPU cannot hold),
3 no NVIDIA driver (NVML cannot be used)."""

from __future__ import annotations

import argparse
import sys

from ..util.command import EXIT_FAIL, EXIT_NO_DRIVER, EXIT_OK, Parser, fail, print_json

NOT_APPLIED = "selected configuration not currently applied"


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    for name, helptext in (
        ("apply", "make the node's MIG layout the named config"),
        ("assert", "exit 0 when the named config is applied, 1 with its first difference"),
    ):
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("--config-file", "-f", required=True, help="a mig-parted v1 file")
        sp.add_argument("--config", "-c", required=True, help="the config under mig-configs")
        if name == "apply":
            sp.add_argument("--dry-run", action="store_true", help="change nothing, say what")
            sp.add_argument("--lock-file", default=None, help=argparse.SUPPRESS)
        sp.add_argument("--json", action="store_true", help="machine-readable output")
    ex = sub.add_parser("export", help="the current layout as a mig-parted v1 document")
    ex.add_argument("--json", action="store_true", help="JSON instead of YAML")


def run(args: argparse.Namespace) -> int:
    from ..mig import apply, config
    from ..nvidia.nvml import NvmlError, Session

    entries = config.load(args.config_file, args.config) if args.action != "export" else ()
    try:
        session = Session()
        nv = session.__enter__()
    except NvmlError as exc:
        return fail(exc, EXIT_NO_DRIVER)
    try:
        if args.action == "apply":
            kw = {"lock_file": args.lock_file} if args.lock_file else {}
            out = apply.apply(nv, args.config, entries, dry_run=args.dry_run, **kw)
            if args.json:
                print_json(out)
            else:
                _print_apply(out)
            return EXIT_OK
        if args.action == "assert":
            left = apply.check(nv, entries)
            if args.json:
                print_json({"applied": left is None, "config": args.config, "difference": left})
            if left is not None:
                print(f"{NOT_APPLIED}: {left}", file=sys.stderr if args.json else sys.stdout)
                return EXIT_FAIL
            if not args.json:
                print(f"selected configuration {args.config} is applied")
            return EXIT_OK
        doc = apply.export(nv)
        if args.json:
            print_json(doc)
        else:
            import yaml

            sys.stdout.write(yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
        return EXIT_OK
    except nv.NVMLError as exc:  # a read that failed: one line, not a traceback
        return fail(f"NVML: {exc}", EXIT_FAIL)
    finally:
        session.__exit__(None, None, None)


def _print_apply(out: dict) -> None:
    verb = "would change" if out["dry_run"] else "changed"
    for gpu in out["gpus"]:
        if gpu["changed"]:
            print(f"GPU {gpu['index']} ({gpu['uuid']}): {verb}")
    if out["diff"]:
        sys.stdout.write(out["diff"])
    if not out["changed"]:
        print(f"config {out['config']}: already applied, nothing changed")
