"""`gpunode cdi generate`: the node's CDI spec (gpunode.runtime.cdi) to stdout, a file, or
the first of runtime.toml's cdi-spec-dirs."""

from __future__ import annotations

import argparse
import sys

from ..util.command import EXIT_OK, Parser, UsageError, print_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    cdisub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    gen = cdisub.add_parser("generate", help="generate the nvidia.com/gpu CDI spec")
    gen.add_argument("--output", help="write here (e.g. /etc/cdi/nvidia.yaml) instead of stdout")
    gen.add_argument(
        "--install",
        action="store_true",
        help="write nvidia.yaml into the first of cdi-spec-dirs (runtime.toml)",
    )
    gen.add_argument("--format", choices=["yaml", "json"], default="yaml")
    gen.add_argument("--config", help="runtime.toml (default /etc/gpunode/runtime.toml)")
    gen.add_argument("--json", action="store_true", help="report as JSON (with --output)")


def run(args: argparse.Namespace) -> int:
    from ..runtime import cdi, config, plan

    cfg = config.load(args.config)
    spec = plan.cdi_spec(cfg)
    if args.install:
        if args.output:
            raise UsageError("gpunode cdi generate: --install and --output exclude each other")
        args.output = cdi.install_path(cfg.cdi_spec_dirs)
    if args.output:
        changed = cdi.write(spec, args.output)
        if args.json:
            print_json(
                {
                    "changed": changed,
                    "path": args.output,
                    "devices": len(spec["devices"]),
                    "cdiVersion": spec["cdiVersion"],
                }
            )
        else:
            print(
                f"{args.output}: {'written' if changed else 'unchanged'} "
                f"({len(spec['devices'])} devices, cdiVersion {spec['cdiVersion']})"
            )
    else:
        sys.stdout.write(cdi.dump(spec, args.format))
    return EXIT_OK
