"""`gpunode inventory`: print what GPUs and driver this node has (gpunode.nvidia.inventory)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..nvidia import health, procfs, xid
from ..nvidia.gpu import Gpu
from ..nvidia.inventory import SCHEMA, Inventory, NoDriver, collect
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


# --------------------------------------------------------------------------- table


def format_table(inv: Inventory) -> str:
    """The inventory as `gpunode inventory` prints it: a line for the driver, one per GPU
    with its MIG devices under it, one per problem."""
    cuda = inv.cuda_driver_version or "unknown"
    lines = [
        f"{inv.hostname}: NVIDIA driver {inv.driver_version}, CUDA {cuda} "
        f"(source: {inv.source}), {len(inv.gpus)} GPU(s)"
    ]
    header = (
        f"{'IDX':>3}  {'MINOR':>5}  {'PCI BUS ID':<16}  {'UUID':<40}  {'MEMORY':>9}  NAME / HEALTH"
    )
    if inv.gpus:
        lines.append(header)
    for g in inv.gpus:
        mem = f"{g.memory_total_mib} MiB" if g.memory_total_mib is not None else "-"
        flags = health.flags(g)
        shown = ", ".join(flags) if flags else "ok"
        lines.append(
            f"{g.index if g.index is not None else '-':>3}  "
            f"{g.minor if g.minor is not None else '-':>5}  {g.pci_bus_id or '-':<16}  "
            f"{g.uuid or '-':<40}  {mem:>9}  {g.name or '-'} [{shown}]{mig_mode(g)}"
        )
        for m in g.mig_devices:  # under their GPU, named as a container requests them
            lines.append(
                f"{f'{g.index}:{m.index}':>10}  {'':<16}  {m.uuid:<40}  "
                f"{f'{m.memory_mib} MiB':>9}  MIG {m.profile or '?'} (GI {m.gi}, CI {m.ci})"
            )
    for p in inv.problems:
        lines.append(f"problem: {p['issue']}: {p['detail']}")
    return "\n".join(lines)


def mig_mode(g: Gpu) -> str:
    """The GPU line's MIG note: nothing for a GPU that cannot do MIG."""
    if g.mig_mode is None:
        return ""
    now = "on" if g.mig_mode else "off"
    if g.mig_mode_pending is not None and g.mig_mode_pending != g.mig_mode:
        return f" MIG {now} ({'on' if g.mig_mode_pending else 'off'} after a GPU reset)"
    return f" MIG {now}, {len(g.mig_devices)} MIG device(s)" if g.mig_mode else f" MIG {now}"
