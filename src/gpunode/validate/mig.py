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

Its entries are applied in order, so when a GPU is in several the last one is its layout;
a GPU in none is not managed by the config (its mig.layout is a skip saying so).

mig.mode (per GPU that can do MIG, no expectation needed): pass; warn when the pending mode
differs from the current one (the change waits for a GPU reset or a reboot).
mig.layout (per GPU): MIG mode and the MIG devices' profile counts equal the config's; a
node-level skip naming the flags and variables when no layout is expected.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..nvidia import inventory
from .model import FAIL, PASS, SKIP, WARN, Check

TITLES = {
    "mig.mode": "MIG mode applied (current = pending)",
    "mig.layout": "MIG layout as the inventory expects",
}
VERSION = "v1"
ENTRY_KEYS = ("devices", "mig-enabled", "mig-devices")
WHERE_MISSING = (
    "--expect-mig-config FILE --expect-mig-name NAME, or gpu_mig_config with gpu_mig_configs "
    "or gpu_mig_config_file"
)


class LayoutError(ValueError):
    """A mig-parted config that cannot be used: one line naming the value and what is accepted."""


@dataclass(frozen=True)
class Entry:
    devices: tuple[int, ...] | None  # None: all
    enabled: bool
    counts: tuple[tuple[str, int], ...]  # (profile, count), count > 0, sorted

    def covers(self, index: int) -> bool:
        return self.devices is None or index in self.devices


@dataclass(frozen=True)
class Layout:
    """The selected config of a mig-parted file: what every GPU's MIG layout should be."""

    name: str
    source: str  # the file, or the variable, it came from
    entries: tuple[Entry, ...]
    from_file: bool = False

    def for_gpu(self, index: int) -> Entry | None:
        """The entry that decides GPU ``index`` (NVML's index): the last one covering it."""
        found = None
        for e in self.entries:
            if e.covers(index):
                found = e
        return found


def _entry(where: str, item: Any) -> Entry:
    if not isinstance(item, dict):
        raise LayoutError(f"{where}: {json.dumps(item)[:60]} is not a mapping; expected "
                          "{devices: all|[indices], mig-enabled: bool, mig-devices: {profile: count}}")  # fmt: skip
    for key in item:
        if key not in ENTRY_KEYS:
            raise LayoutError(f"{where}: key {key!r} is not supported; accepted: "
                              f"{', '.join(ENTRY_KEYS)}")  # fmt: skip
    devices = item.get("devices")
    if devices == "all":
        indices = None
    elif (isinstance(devices, list) and devices
          and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices)):
        indices = tuple(devices)
    else:
        raise LayoutError(f"{where}.devices: {json.dumps(devices)} is not accepted; expected "
                          "all or a list of GPU indices (integers >= 0)")  # fmt: skip
    enabled = item.get("mig-enabled")
    if not isinstance(enabled, bool):
        raise LayoutError(f"{where}.mig-enabled: {json.dumps(enabled)} is not a boolean; "
                          "expected true or false")  # fmt: skip
    counts = item.get("mig-devices") or {}
    if not isinstance(counts, dict):
        raise LayoutError(f"{where}.mig-devices: {json.dumps(counts)[:60]} is not a mapping; "
                          'expected {profile: count}, e.g. {"1g.10gb": 7}')  # fmt: skip
    for profile, n in counts.items():
        if not isinstance(profile, str) or not profile:
            raise LayoutError(f"{where}.mig-devices: {profile!r} is not a profile name; "
                              'expected one as nvidia-smi names it, e.g. "1g.10gb"')  # fmt: skip
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise LayoutError(f"{where}.mig-devices.{profile}: {json.dumps(n)} is not a count; "
                              "expected an integer >= 0")  # fmt: skip
    if not enabled and any(counts.values()):
        raise LayoutError(f"{where}: mig-devices given with mig-enabled false; "
                          "MIG devices need mig-enabled true")  # fmt: skip
    return Entry(indices, enabled, tuple(sorted((p, n) for p, n in counts.items() if n)))


def parse_layout(doc: Any, name: str, source: str) -> Layout:
    """The config ``name`` of a mig-parted v1 document (already loaded from YAML/JSON)."""
    if not isinstance(doc, dict):
        raise LayoutError(f"{source}: not a mig-parted config (a mapping with version: v1 "
                          "and mig-configs)")  # fmt: skip
    if doc.get("version") != VERSION:
        raise LayoutError(f"{source}: version {json.dumps(doc.get('version'))} is not "
                          f"supported; expected {VERSION}")  # fmt: skip
    configs = doc.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise LayoutError(f"{source}: mig-configs is {json.dumps(configs)[:40]}; expected a "
                          "mapping of config names to lists of entries")  # fmt: skip
    if name not in configs:
        have = ", ".join(sorted(map(str, configs)))
        hint = ("" if all(isinstance(k, str) for k in configs) else
                " (YAML reads unquoted on/off/yes/no as booleans: quote those names)")  # fmt: skip
        raise LayoutError(f"{source}: config {name!r} is not in mig-configs; it has: {have}{hint}")
    entries = configs[name]
    if not isinstance(entries, list) or not entries:
        raise LayoutError(f"{source}: mig-configs.{name} is {json.dumps(entries)[:40]}; "
                          "expected a list of entries")  # fmt: skip
    where = f"{source}: mig-configs.{name}"
    return Layout(name, source, tuple(_entry(f"{where}[{i}]", e) for i, e in enumerate(entries)))


def load_layout(path: str, name: str) -> Layout:
    """The config ``name`` of the mig-parted file ``path`` (YAML or JSON)."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise LayoutError(f"--expect-mig-config {path}: cannot read ({why})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        first = " ".join(str(exc).split())[:160]
        raise LayoutError(f"--expect-mig-config {path}: not valid YAML/JSON ({first})") from None
    layout = parse_layout(doc, name, path)
    return Layout(layout.name, layout.source, layout.entries, from_file=True)


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
            g: inventory.GpuInfo | None = None) -> None:  # fmt: skip
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
            have = counts_text(Counter(m.profile or "?" for m in g.mig_devices))
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
        entry = layout.for_gpu(g.index)
        config = f"config {layout.name!r} ({layout.source})"
        if entry is None:
            add("mig.layout", SKIP, f"GPU {g.index} is in no entry of {config}: its MIG "
                "layout is not managed", i, g)  # fmt: skip
            continue
        want = counts_text(entry.counts)
        if g.mig_mode is None:
            if entry.enabled:
                add("mig.layout", FAIL, f"{g.name or 'this GPU'} cannot do MIG but {config} "
                    f"expects MIG on with {want}: leave GPU {g.index} out of the entry's "
                    "devices", i, g)  # fmt: skip
            else:
                add("mig.layout", PASS, f"no MIG on this GPU, as {config} expects", i, g)
            continue
        if g.mig_mode != entry.enabled:
            fix = (f"reset the GPU (nvidia-smi -r -i {g.index}) or reboot: MIG "
                   f"{_on(entry.enabled)} is pending" if g.mig_mode_pending == entry.enabled
                   else apply)  # fmt: skip
            add("mig.layout", FAIL, f"MIG {_on(g.mig_mode)}, {config} expects MIG "
                f"{_on(entry.enabled)}: {fix}", i, g)  # fmt: skip
            continue
        if not entry.enabled:
            add("mig.layout", PASS, f"MIG off, as {config} expects", i, g)
            continue
        have = Counter(m.profile or "?" for m in g.mig_devices)
        if dict(have) == dict(entry.counts):
            add("mig.layout", PASS, f"{want}, as {config} expects", i, g)
        else:
            add("mig.layout", FAIL, f"found {counts_text(have)}; {config} expects {want}: "
                f"{apply}", i, g)  # fmt: skip
    return checks
