"""`gpunode profile list|show|check`: the simulator's GPU profiles."""

from __future__ import annotations

import argparse

from ..util.command import EXIT_OK, UsageError, print_json, require_simulator


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=["list", "show", "check"])
    p.add_argument("ref", nargs="?", help="built-in profile name or path to a .yaml file")


def run(args: argparse.Namespace) -> int:
    require_simulator("profile")
    from ..sim import profiles

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
        print_json(p.to_dict())
    return EXIT_OK
