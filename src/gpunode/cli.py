"""The `gpunode` command line.

Exit codes (stable; roles and scripts rely on them):
  0  success
  1  the operation failed (engine error, node not reachable, ...)
  2  bad input: unknown option, invalid profile or value
  3  no NVIDIA driver on this node (inventory)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_NO_DRIVER = 0, 1, 2, 3


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))


def cmd_inventory(args: argparse.Namespace) -> int:
    from . import inventory

    try:
        inv = inventory.collect(
            proc_root=Path(args.proc_root), dev_root=Path(args.dev_root), use_nvml=not args.no_nvml
        )
    except inventory.NoDriver as exc:
        if args.json:
            _print_json({"schema": inventory.SCHEMA, "error": "no_driver", "detail": str(exc)})
        print(f"gpunode: {exc}", file=sys.stderr)
        return EXIT_NO_DRIVER
    if args.json:
        _print_json(inv.to_dict())
    else:
        print(inventory.format_table(inv))
    return EXIT_OK


def cmd_profile(args: argparse.Namespace) -> int:
    from . import profiles

    if args.action == "list":
        for name in profiles.builtin_names():
            p = profiles.load_profile(name)
            print(f"{name:<14} {p.description}")
        return EXIT_OK
    if not args.ref:
        raise UsageError(f"gpunode profile {args.action}: a profile name or file is required")
    p = profiles.load_profile(args.ref)
    if args.action == "check":
        print(f"{p.source}: ok ({len(p.gpus)} GPU(s))")
    else:
        _print_json(p.to_dict())
    return EXIT_OK


def cmd_sim(args: argparse.Namespace) -> int:
    from .sim import apply as sim_apply

    if args.action == "apply-local":
        from .profiles import load_profile

        if os.geteuid() != 0:
            raise UsageError("gpunode sim apply-local must run as root (it creates device nodes)")
        res = sim_apply.apply_profile(load_profile(args.profile))
        if args.json:
            _print_json({"changed": bool(res.changed), "changes": res.changed})
        else:
            print("\n".join(res.changed) if res.changed else "unchanged")
        return EXIT_OK

    from .sim import cluster, images

    if args.action == "images":
        for release in args.release or list(images.RELEASES):
            images.build("node", release)
        images.build("workload", "bookworm")
        return EXIT_OK
    if args.action == "up":
        inventory = Path(args.inventory)
        art = cluster.Artifacts.build(Path(args.build_dir), Path(args.project))
        nodes = cluster.up(inventory, art)
        print(f"simulated cluster up: {', '.join(n.name for n in nodes)}")
        return EXIT_OK
    if args.action == "down":
        inventory = Path(args.inventory)
        cluster.down(inventory if inventory.exists() else None)
        return EXIT_OK
    if args.action == "apply":
        cluster.apply(args.node, args.profile)
        return EXIT_OK
    raise UsageError(f"unknown sim action {args.action!r}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpunode", description="Provision and validate NVIDIA GPU nodes.")
    p.add_argument("--version", action="version", version=f"gpunode {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    inv = sub.add_parser("inventory", help="driver, CUDA and GPUs on this node")
    inv.add_argument("--json", action="store_true", help="machine-readable output")
    inv.add_argument("--no-nvml", action="store_true", help="read /proc and /dev only")
    inv.add_argument("--proc-root", default="/proc/driver/nvidia", help=argparse.SUPPRESS)
    inv.add_argument("--dev-root", default="/dev", help=argparse.SUPPRESS)
    inv.set_defaults(func=cmd_inventory)

    prof = sub.add_parser("profile", help="GPU profiles for the simulator")
    prof.add_argument("action", choices=["list", "show", "check"])
    prof.add_argument("ref", nargs="?", help="built-in profile name or path to a .yaml file")
    prof.set_defaults(func=cmd_profile)

    sim = sub.add_parser("sim", help="the simulated GPU cluster (development and tests)")
    simsub = sim.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for name, helptext in (
        ("images", "build the node images (debootstrap + docker import, cached)"),
        ("up", "start the nodes of an inventory and apply their profiles"),
        ("down", "remove the nodes and their volumes"),
        ("apply", "apply a profile to a running node"),
        ("apply-local", "apply a profile on this machine (inside a node, as root)"),
    ):
        sp = simsub.add_parser(name, help=helptext)
        sp.set_defaults(func=cmd_sim)
        if name == "apply":
            sp.add_argument("node")
        if name in ("apply", "apply-local"):
            sp.add_argument("profile", help="built-in profile name or path to a .yaml file")
        if name in ("up", "down"):
            sp.add_argument("-i", "--inventory", default="inventories/sim/hosts.yml")
        if name == "up":
            sp.add_argument("--build-dir", default="build", help="where host artifacts go")
            sp.add_argument("--project", default=".", help="gpunode source tree (for the wheel)")
        if name == "images":
            sp.add_argument("--release", action="append", help="Debian release (repeatable)")
        sp.add_argument("--json", action="store_true")
    return p


def _known_errors() -> tuple[type[BaseException], ...]:
    from .profiles import ProfileError
    from .sim.cluster import SimError
    from .sim.docker import DockerError
    from .sim.images import ImageError
    from .sim.mocknvml import MockBuildError

    return (ProfileError, SimError, DockerError, ImageError, MockBuildError, OSError)


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UsageError as exc:
        print(f"gpunode: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from .profiles import ProfileError

        if os.environ.get("GPUNODE_DEBUG"):
            raise
        if isinstance(exc, ProfileError):
            print(f"gpunode: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(exc, _known_errors()):
            print(f"gpunode: error: {exc}", file=sys.stderr)
            return EXIT_FAIL
        print(
            f"gpunode: internal error: {type(exc).__name__}: {exc} "
            "(set GPUNODE_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
