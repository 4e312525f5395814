"""`gpunode inventory`: print what GPUs and driver this node has (gpunode.nvidia.inventory)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..nvidia import procfs, xid
from ..nvidia.inventory import SCHEMA, NoDriver, collect, format_table
from ..util.command import EXIT_NO_DRIVER, EXIT_OK, fail, print_json

# --------------------------------------------------------------------------- command


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-nvml", action="store_true", help="read /proc and /dev only")
    p.add_argument("--proc-root", default=procfs.PROC_DRIVER_NVIDIA, help=argparse.SUPPRESS)
    p.add_argument("--dev-root", default="/dev", help=argparse.SUPPRESS)
    p.add_argument("--kernel-log", default=xid.KMSG, help=argparse.SUPPRESS)


def run(args: argparse.Namespace) -> int:
    try:
        inv = collect(
            proc_root=Path(args.proc_root),
            dev_root=Path(args.dev_root),
            use_nvml=not args.no_nvml,
            kernel_log=args.kernel_log,
        )
    except NoDriver as exc:
        if args.json:
            print_json({"schema": SCHEMA, "error": "no_driver", "detail": str(exc)})
        return fail(exc, EXIT_NO_DRIVER)
    if args.json:
        print_json(inv.to_dict())
    else:
        print(format_table(inv))
    return EXIT_OK
