"""What the cluster report of a simulated cluster must show: each GPU with faults in its
node's profile a failed (or warning) GPU row on exactly that node and GPU, bad in exactly
the checks profiles.FAULTS names for its faults (and on the node's own rows what a fault
sums up there: node.fabric_manager), every other GPU and node passing, GPU-less
nodes a row of skips. `gpunode sim check-report` (the demo's last step) and the
integration tests judge a report with it.

GPU indices are PCI bus order over the profile's GPUs, as `gpunode validate` numbers them.
"""

from __future__ import annotations

from pathlib import Path

from .cluster import SimError, read_inventory
from .profiles import FAULTS, ProfileError, load_profile

BAD = ("fail", "warn")
CARD = " (PCIe card)"  # a fault judged apart on a PCIe card (profiles.Fault.on_card) ends so


def shows(faults: list[str]) -> dict[str, str]:
    """check id -> status the GPU's faults (as gpu_faults names them) must show: each fault's
    entry in profiles.FAULTS, the one table; two faults on one check: the worse status."""
    want: dict[str, str] = {}
    for f in faults:
        fault = FAULTS[f.removesuffix(CARD)]
        table = fault.on_card if f.endswith(CARD) and fault.on_card else fault.shows
        for check, status in table.items():
            want[check] = "fail" if "fail" in (status, want.get(check)) else status
    return want


def node_shows(faults: list[str]) -> dict[str, str]:
    """check id -> status the node's own rows must show for its GPUs' faults (a fault's
    ``node`` entry in profiles.FAULTS: node.fabric_manager sums up the GPUs' fabric)."""
    want: dict[str, str] = {}
    for f in faults:
        for check, status in (FAULTS[f.removesuffix(CARD)].node or {}).items():
            want[check] = "fail" if "fail" in (status, want.get(check)) else status
    return want


def injected(inventory: Path) -> dict[str, dict[int, list[str]]]:
    """node -> {GPU index: its faults} for every simulated node of the inventory (GPUs
    without faults are listed with an empty list; a GPU-less node has no entry)."""
    out: dict[str, dict[int, list[str]]] = {}
    for spec in read_inventory(inventory):
        try:
            profile = load_profile(spec.profile)
        except ProfileError as exc:
            raise SimError(f"{inventory}: host {spec.name}: {exc}") from None
        gpus = sorted(profile.gpus, key=lambda g: g.bus_id.nvml.lower())
        out[spec.name] = {i: gpu_faults(g) for i, g in enumerate(gpus)}
    return out


def gpu_faults(gpu) -> list[str]:
    """The GPU's faults; on a PCIe card one judged apart there (profiles.Fault.on_card)
    named with CARD after it. A card is a GPU whose model does not say SXM and that is not
    on an NVSwitch baseboard (the profile's fabric: NVLinks on compute capability 9.0+):
    the profiles' SXM GPUs are named "...-SXM..." (A100, V100) or sit on one (H100 80GB
    HBM3)."""
    card = "SXM" not in gpu.model.upper() and not gpu.fabric
    return sorted(f + CARD if card and FAULTS[f].on_card else f for f in gpu.faults)


def compare(model: dict, expected: dict[str, dict[int, list[str]]]) -> list[str]:
    """The ways the report (gpunode.report/v1 model) differs from the injected faults; one
    line each, empty when it shows exactly them."""
    problems: list[str] = []
    nodes = {n["node"]: n for n in model.get("nodes", [])}
    for name, gpus in sorted(expected.items()):
        n = nodes.get(name)
        if n is None:
            problems.append(f"{name}: not in the report")
            continue
        node_want = node_shows([f for faults in gpus.values() for f in faults])
        node_got = {c["id"]: c for c in n["checks"] if c["gpu"] is None and c["status"] in BAD}
        for cid, c in sorted(node_got.items()):
            if node_want.get(cid) != c["status"]:
                problems.append(f"{name}: {cid} {c['status']}: {c['detail']}")
        for cid, status in sorted(node_want.items()):
            if cid not in node_got:
                problems.append(
                    f"{name}: its GPUs' faults must show {cid} {status}; the report does not"
                )
        if not gpus:  # no GPU: a row of skips (and the engine check) that passes
            if not n.get("no_gpu"):
                problems.append(f"{name}: no GPU in its profile but not reported as GPU-less")
            continue
        seen = {c["gpu"] for c in n["checks"] if c["gpu"] is not None}
        if seen != set(gpus):
            problems.append(f"{name}: GPU rows {sorted(seen)}, profile has {sorted(gpus)}")
        for i, faults in sorted(gpus.items()):
            bad = [c for c in n["checks"] if c["gpu"] == i and c["status"] in BAD]
            if faults and not bad:
                problems.append(
                    f"{name}: GPU {i} has faults {', '.join(faults)}; no check shows them"
                )
            for c in bad if not faults else []:
                problems.append(f"{name}: GPU {i} (no fault injected): {c['id']} {c['status']}")
            want = shows(faults)
            got = {c["id"]: c["status"] for c in bad}
            if faults and bad and got != want:
                problems.append(
                    f"{name}: GPU {i} has faults {', '.join(faults)}: shows {_checks(got)}; "
                    f"expected {_checks(want)}"
                )
    return problems


def _checks(statuses: dict[str, str]) -> str:
    return ", ".join(f"{c} {s}" for c, s in sorted(statuses.items())) or "nothing"


def describe(expected: dict[str, dict[int, list[str]]]) -> list[str]:
    """One line per injected fault: what the report is meant to show red."""
    return [
        f"{name} GPU {i}: {', '.join(faults)}"
        + (f" ({_checks(want)})" if (want := shows(faults)) else "")
        for name, gpus in sorted(expected.items())
        for i, faults in sorted(gpus.items())
        if faults
    ]
