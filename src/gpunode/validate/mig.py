"""mig.mode and mig.layout: the node's MIG layout, read from gpunode's inventory (the one NVML
walk, gpunode.nvidia.nvml.mig_devices), against the layout the inventory expects.

The expected layout is a mig-parted v1 config and the name of the selected config (what the
gpu_mig role applies with `gpunode mig apply`)::

    version: v1
    mig-configs:
      all-1g.10gb:
        - devices: all            # or a list of NVML GPU indices: [0, 1]
          mig-enabled: true
          mig-devices: {"1g.10gb": 7}

The file is read by gpunode.mig.config, the parser `gpunode mig apply|assert` use, so
validate accepts and refuses exactly what they do. A GPU no entry selects is not managed
by the config (its mig.layout is a skip saying so); one that two entries select fails
(`gpunode mig apply` refuses such a config).

mig.mode (per GPU that can do MIG, no expectation needed): pass; warn when the pending mode
differs from the current one (the change waits for a GPU reset or a reboot).
mig.layout (per GPU): gpunode.mig.layout.selecting picks the GPU's entry and
gpunode.mig.layout.difference decides, the answers `gpunode mig assert` gives too: MIG mode
(current and pending) and the MIG devices' profile counts equal the config's; a node-level
skip naming the flags and variables when no layout is expected.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..mig import MigConfigError, config
from ..mig.layout import difference, selecting
from ..nvidia import inventory
from ..nvidia.gpu import Gpu
from .model import FAIL, PASS, SKIP, WARN, Check

TITLES = {
    "mig.mode": "MIG mode applied (current = pending)",
    "mig.layout": "MIG layout as the inventory expects",
}
WHERE_MISSING = (
    "--expect-mig-config FILE --expect-mig-name NAME, or gpu_mig_config with gpu_mig_configs "
    "or the gpu_mig role's file on the node"
)


@dataclass(frozen=True)
class Layout:
    """The selected config of a mig-parted file (parsed by gpunode.mig.config, as `gpunode
    mig apply` reads it): what every GPU's MIG layout should be."""

    name: str
    source: str  # the file, or the variable, it came from
    entries: tuple[config.Entry, ...]
    from_file: bool = False


def parse_layout(doc: Any, name: str, source: str) -> Layout:
    """The config ``name`` of a mig-parted v1 document (already loaded from YAML/JSON);
    MigConfigError (one line) for anything gpunode mig would refuse."""
    configs = config.parse(doc, source)
    if name not in configs:
        raise MigConfigError(f"{source}: no config {name!r} under mig-configs; accepted: "
                             f"{', '.join(configs)}")  # fmt: skip
    return Layout(name, source, configs[name])


def load_layout(path: str, name: str) -> Layout:
    """The config ``name`` of the mig-parted file ``path`` (as `gpunode mig` reads it)."""
    return Layout(name, path, config.load(path, name), from_file=True)


def counts_text(counts: dict[str, int] | tuple[tuple[str, int], ...]) -> str:
    """{"1g.10gb": 7, "2g.20gb": 1} -> "7x 1g.10gb, 1x 2g.20gb"; empty: "no MIG devices"."""
    pairs = sorted(counts.items() if isinstance(counts, dict) else counts)
    return ", ".join(f"{n}x {p}" for p, n in pairs if n) or "no MIG devices"


def _on(value: bool | None) -> str:
    return "on" if value else "off"


def evaluate(inv: inventory.Inventory | None, layout: Layout | None) -> list[Check]:
    """mig.mode per MIG-capable GPU and mig.layout per GPU (one node-level skip without a
    layout); GPU indices as gpunode.validate.gpus lists them."""
    checks: list[Check] = []

    def add(cid: str, status: str, detail: str, i: int | None = None,
            g: Gpu | None = None) -> None:  # fmt: skip
        checks.append(Check(cid, TITLES[cid], status, detail, gpu=i,
                            uuid=g.uuid if g else None))  # fmt: skip

    if inv is None:
        add("mig.layout", SKIP, "no NVIDIA driver: no MIG layout to read (see node.driver)")
        return checks
    gpus = list(enumerate(inv.every_gpu()))
    for i, g in gpus:
        if g.mig_mode is None or g.mig_mode_pending is None:
            continue
        if g.mig_mode_pending != g.mig_mode:
            add("mig.mode", WARN, f"MIG mode is {_on(g.mig_mode)}, {_on(g.mig_mode_pending)} "
                f"pending: reset the GPU (nvidia-smi -r -i {g.index}, with no process on it) "
                "or reboot to apply it", i, g)  # fmt: skip
        elif g.mig_mode:
            have = counts_text(g.mig_view().devices)
            add("mig.mode", PASS, f"MIG on: {have}", i, g)
        else:
            add("mig.mode", PASS, "MIG off (the GPU is used whole)", i, g)
    if layout is None:
        add("mig.layout", SKIP, f"no MIG layout expected ({WHERE_MISSING})")
        return checks
    if layout.from_file:
        apply = (f"apply it: gpunode mig apply --config-file {layout.source} "
                 f"--config {layout.name} (what the gpu_mig role runs)")  # fmt: skip
    else:
        apply = f"apply it with the gpu_mig role (gpunode mig apply --config {layout.name})"
    for i, g in gpus:
        if g.missing or g.lost or g.index is None:
            why = "its device node is missing" if g.missing else "NVML lost it"
            add("mig.layout", SKIP, f"{why}: its MIG layout cannot be read (see gpu.*)", i, g)
            continue
        selected = selecting(layout.entries, g.index, g.pci_device_id)
        config_name = f"config {layout.name!r} ({layout.source})"
        if selected is None:
            add("mig.layout", SKIP, f"{config_name} has a device-filter and GPU {g.index}'s "
                "PCI device id is not known (NVML unavailable)", i, g)  # fmt: skip
            continue
        if not selected:
            add("mig.layout", SKIP, f"GPU {g.index} is in no entry of {config_name}: its MIG "
                "layout is not managed", i, g)  # fmt: skip
            continue
        if len(selected) > 1:
            add("mig.layout", FAIL, f"GPU {g.index} is selected by "
                f"{', '.join(e.where for e in selected)} of {config_name}; gpunode mig apply "
                "refuses that: leave it in one entry", i, g)  # fmt: skip
            continue
        entry = selected[0]
        want = counts_text(entry.mig_devices)
        view = g.mig_view()
        # the one answer `gpunode mig assert` gives too (a GPU instance without a compute
        # instance is no MIG device: seen here as a wanted device missing)
        found = difference(view, entry)
        if g.mig_mode is None:
            if found is not None:
                add("mig.layout", FAIL, f"{g.name or 'this GPU'} cannot do MIG but {config_name} "
                    f"expects MIG on with {want}: leave GPU {g.index} out of the entry's "
                    "devices", i, g)  # fmt: skip
            elif entry.mig_enabled:  # as gpunode mig apply: skipped
                add("mig.layout", PASS, f"cannot do MIG: `devices: all` of {config_name} "
                    "leaves it whole", i, g)  # fmt: skip
            else:
                add("mig.layout", PASS, f"no MIG on this GPU, as {config_name} expects", i, g)
        elif found is None:
            add("mig.layout", PASS, f"{want}, as {config_name} expects" if entry.mig_enabled
                else f"MIG off, as {config_name} expects", i, g)  # fmt: skip
        elif g.mig_mode != entry.mig_enabled:
            fix = (f"reset the GPU (nvidia-smi -r -i {g.index}) or reboot: MIG "
                   f"{_on(entry.mig_enabled)} is pending" if g.mig_mode_pending == entry.mig_enabled
                   else apply)  # fmt: skip
            add("mig.layout", FAIL, f"MIG {_on(g.mig_mode)}, {config_name} expects MIG "
                f"{_on(entry.mig_enabled)}: {fix}", i, g)  # fmt: skip
        elif found.mode:  # the mode wanted now, but not after the next GPU reset
            add("mig.layout", FAIL, f"MIG {_on(g.mig_mode)}, {_on(g.mig_mode_pending)} after "
                f"the next GPU reset; {config_name} expects MIG {_on(entry.mig_enabled)}: "
                f"{apply}", i, g)  # fmt: skip
        else:
            add("mig.layout", FAIL, f"found {counts_text(view.devices)}; {config_name} expects {want}: "
                f"{apply}", i, g)  # fmt: skip
    return checks
