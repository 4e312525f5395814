"""`gpunode sim images|up|down|apply|apply-local|xid|xid-local|check-report|playbook`: the simulated GPU
cluster (development and tests)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..util.command import (
    EXIT_FAIL,
    EXIT_OK,
    Parser,
    UsageError,
    fail,
    print_json,
    require_simulator,
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    simsub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    for name, helptext in (
        ("images", "build the node images (debootstrap + docker import, cached)"),
        ("up", "start the nodes of an inventory and apply their profiles"),
        ("down", "remove the nodes and their volumes"),
        ("apply", "apply a profile to a running node"),
        ("apply-local", "apply a profile on this machine (inside a node, as root)"),
        ("check-report", "does a cluster report show exactly the faults the profiles inject?"),
        ("xid", "raise an Xid on a GPU of a running node, as the driver reports one"),
        ("xid-local", "raise an Xid on this machine (inside a node, as root)"),
        (
            "playbook",
            "ansible-playbook on the simulated nodes; a rerun with the same inputs must not "
            "change what provisioning did (gpunode.sim.rerun)",
        ),
    ):
        sp = simsub.add_parser(name, help=helptext)
        if name in ("apply", "xid"):
            sp.add_argument("node")
        if name in ("xid", "xid-local"):
            sp.add_argument("bus", help="the GPU's PCI bus id, e.g. 0000:07:00.0")
            sp.add_argument("code", help="the Xid, e.g. 79")
        if name in ("apply", "apply-local"):
            sp.add_argument("profile", help="built-in profile name or path to a .yaml file")
        if name in ("up", "down", "check-report", "playbook"):
            sp.add_argument("-i", "--inventory", default="inventories/sim/hosts.yml")
        if name == "check-report":
            sp.add_argument(
                "report", help="report.json of `gpunode report` / playbooks/validate.yml"
            )
        if name == "up":
            sp.add_argument("--build-dir", default="build", help="where host artifacts go")
            sp.add_argument("--project", default=".", help="gpunode source tree (for the wheel)")
        if name == "images":
            sp.add_argument("--release", action="append", help="Debian release (repeatable)")
        if name == "playbook":
            sp.add_argument("--project", default=".", help="gpunode source tree")
            sp.add_argument("playbook", help="e.g. site.yml")
            sp.add_argument(
                "ansible_args", nargs=argparse.REMAINDER, help="more ansible-playbook arguments"
            )
            continue
        sp.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    require_simulator("sim")
    if args.action == "apply-local":
        from ..sim import apply as sim_apply
        from ..sim.profiles import load_profile

        if os.geteuid() != 0:
            raise UsageError("gpunode sim apply-local must run as root (it creates device nodes)")
        res = sim_apply.apply_profile(load_profile(args.profile))
        if args.json:
            print_json({"changed": bool(res.changed), "changes": res.changed})
        else:
            print("\n".join(res.changed) if res.changed else "unchanged")
        return EXIT_OK

    if args.action == "xid-local":
        from ..sim.xidraise import raise_xid

        if os.geteuid() != 0:
            raise UsageError("gpunode sim xid-local must run as root (it writes the driver's log)")
        line = raise_xid(args.bus, args.code)
        print_json({"logged": line}) if args.json else print(line)
        return EXIT_OK
    if args.action == "check-report":
        return check_report(Path(args.inventory), args.report, args.json)
    if args.action == "playbook":
        return playbook(
            Path(args.inventory), Path(args.project), [args.playbook, *args.ansible_args]
        )

    from ..sim import cluster, images

    if args.action == "images":
        for release in args.release or list(images.RELEASES):
            images.build("node", release)
        images.build("workload", "bookworm")
        return EXIT_OK
    if args.action == "up":
        inventory = Path(args.inventory)
        cluster.check_profiles(cluster.read_inventory(inventory))  # before anything is built
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
    if args.action == "xid":
        print(cluster.raise_xid(args.node, args.bus, args.code))
        return EXIT_OK
    raise UsageError(f"unknown sim action {args.action!r}")


def playbook(inventory: Path, project: Path, ansible_args: list[str]) -> int:
    from ..sim import rerun

    if any(a in ("-i", "--inventory", "--inventory-file") or a.startswith(("-i", "--inventory="))
           for a in ansible_args):  # fmt: skip
        raise UsageError(
            "sim playbook: give the inventory once, before the playbook (-i INVENTORY PLAYBOOK "
            "...): it names the nodes to judge and ansible-playbook's inventory"
        )
    if not inventory.is_file():
        raise UsageError(f"sim playbook: inventory {inventory} is not a file")
    if not (project / rerun.PROVISION_PLAYBOOK).is_file():
        raise UsageError(
            f"sim playbook: {project} has no {rerun.PROVISION_PLAYBOOK} (--project: the gpunode tree)"
        )
    try:
        return rerun.run_playbook(inventory, ansible_args, project)
    except rerun.RerunError as exc:
        return fail(f"sim playbook: {exc}", EXIT_FAIL)


def check_report(inventory: Path, report: str, as_json: bool) -> int:
    """Exit 0 when the report shows exactly the injected faults, 1 when not."""
    import json

    from ..report.results import REPORT_SCHEMA
    from ..sim.cluster import SimError
    from ..sim.expected import compare, describe, injected

    try:
        with open(report, encoding="utf-8") as fh:
            model = json.load(fh)
    except OSError as exc:
        raise UsageError(f"sim check-report: {report}: cannot be read ({exc.strerror})") from None
    except ValueError as exc:
        raise UsageError(f"sim check-report: {report}: not JSON ({exc})") from None
    if not isinstance(model, dict) or model.get("schema") != REPORT_SCHEMA:
        raise UsageError(f"sim check-report: {report}: not a {REPORT_SCHEMA} report.json")
    try:
        expected = injected(inventory)
    except SimError as exc:
        raise UsageError(f"sim check-report: {exc}") from None
    problems = compare(model, expected)
    faults = describe(expected)
    if as_json:
        print_json({"ok": not problems, "injected": faults, "problems": problems})
    elif problems:
        print("the report does not show the simulated cluster as injected:")
        print("\n".join(f"  {p}" for p in problems))
    else:
        shown = "; ".join(faults) or "no faults injected"
        print(f"report as injected: failed where the profiles inject faults ({shown}), "
              "every other node and GPU passed")  # fmt: skip
    return EXIT_OK if not problems else EXIT_FAIL
