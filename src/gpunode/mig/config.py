"""mig-parted's configuration file (version v1), parsed strictly.

    version: v1
    mig-configs:
      all-1g.10gb:
        - devices: all            # or [0, 1]: GPU indexes as NVML orders them
          device-filter: "0x20B210DE"   # optional: PCI device id(s) (nvmlDeviceGetPciInfo's
                                        # pciDeviceId), a string, number or list of them
          mig-enabled: true
          mig-devices:
            "1g.10gb": 7

An entry selects the GPUs that its ``devices`` and ``device-filter`` both match (an index
the node does not have selects nothing, as in mig-parted); a GPU selected by two entries of
one config is refused. Every error is one line naming the key, the value and what is
accepted.
"""

from __future__ import annotations

from typing import Any

from ..util.boundedyaml import MAX_BYTES, MAX_DEPTH, MAX_NODES, YamlError, describe, load_file
from ..util.record import record
from . import MigConfigError

VERSION = "v1"
TOP_KEYS = ("version", "mig-configs")
ENTRY_KEYS = ("devices", "device-filter", "mig-enabled", "mig-devices")


@record(frozen=True)
class Entry:
    """One entry of a config: which GPUs, and the layout they get."""

    where: str  # "mig-configs.all-1g.10gb[0]": for messages
    devices: tuple | None  # GPU indexes; None = all
    device_filter: tuple | None  # PCI device ids (pciDeviceId, vendor in the low 16 bits)
    mig_enabled: bool
    mig_devices: dict  # {profile name: count}, counts > 0

    def selects(self, index: int, pci_device_id: int) -> bool:
        if self.devices is not None and index not in self.devices:
            return False
        return self.device_filter is None or pci_device_id in self.device_filter


def _show(value: Any) -> str:
    # never str(value): a YAML alias nine times per level expands without bound as text
    return describe(value)


def _err(where: str, value: Any, accepted: str) -> MigConfigError:
    return MigConfigError(f"{where}: {_show(value)} is not accepted; accepted: {accepted}")


def _device_id(where: str, value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 1 << 32:
        return value
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            number = int(text, 16) if text.startswith("0x") else -1
        except ValueError:
            number = -1
        if 0 <= number < 1 << 32:
            return number
    raise _err(where, value, 'a PCI device id such as "0x20B210DE" (device id, vendor 10DE)')


def _entry(where: str, raw: Any) -> Entry:
    if not isinstance(raw, dict):
        raise _err(where, raw, "a mapping with keys " + ", ".join(ENTRY_KEYS))
    for key in raw:
        if key not in ENTRY_KEYS:
            raise _err(f"{where}", key, "the keys " + ", ".join(ENTRY_KEYS))
    for key in ("devices", "mig-enabled"):
        if key not in raw:
            raise MigConfigError(f"{where}: missing required key {key!r}")
    devices_raw = raw["devices"]
    devices: tuple | None
    if devices_raw == "all":
        devices = None
    elif (
        isinstance(devices_raw, list)
        and devices_raw
        and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in devices_raw)
    ):
        devices = tuple(devices_raw)
    else:
        raise _err(f"{where}.devices", devices_raw, "all or a list of GPU indexes such as [0, 1]")
    device_filter = None
    if "device-filter" in raw:
        value = raw["device-filter"]
        items = value if isinstance(value, list) else [value]
        if not items:
            raise _err(f"{where}.device-filter", value, "a PCI device id or a list of them")
        device_filter = tuple(_device_id(f"{where}.device-filter", item) for item in items)
    enabled = raw["mig-enabled"]
    if not isinstance(enabled, bool):
        raise _err(f"{where}.mig-enabled", enabled, "true or false")
    mig_devices_raw = raw.get("mig-devices", {})
    if mig_devices_raw is None:
        mig_devices_raw = {}
    if not isinstance(mig_devices_raw, dict):
        raise _err(f"{where}.mig-devices", mig_devices_raw, 'a mapping such as {"1g.10gb": 7}')
    mig_devices: dict[str, int] = {}
    for name, count in mig_devices_raw.items():
        if not isinstance(name, str) or not name:
            raise _err(f"{where}.mig-devices", name, 'profile names such as "1g.10gb"')
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise _err(f"{where}.mig-devices.{name}", count, "a count (0 or more)")
        if count:
            mig_devices[name] = count
    if not enabled and mig_devices:
        raise MigConfigError(
            f"{where}.mig-devices: {_show(mig_devices_raw)} with mig-enabled: false; "
            "accepted: no mig-devices (or {}) when MIG is disabled"
        )
    return Entry(where, devices, device_filter, enabled, mig_devices)


def document(configs: dict[str, Any]) -> dict[str, Any]:
    """The mig-parted document around a `mig-configs` value (name -> entries): what `gpunode
    mig export` prints and what validate reads gpu_mig_configs as. The gpu_mig role's
    template writes the same on the controller (tests/unit/roles/test_gpu_mig_role.py)."""
    return {"version": VERSION, "mig-configs": configs}


def parse(data: Any, source: str = "<config>") -> dict[str, tuple[Entry, ...]]:
    """A loaded mig-parted document as {config name: entries}, or MigConfigError."""
    if not isinstance(data, dict):
        raise _err(source, data, "a mapping with keys version and mig-configs")
    for key in data:
        if key not in TOP_KEYS:
            raise _err(source, key, "the keys version, mig-configs")
    if "version" not in data:
        raise MigConfigError(f"{source}: missing required key 'version'; accepted: version: v1")
    if data["version"] != VERSION:
        raise _err(f"{source}: version", data["version"], VERSION)
    configs = data.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise _err(f"{source}: mig-configs", configs, "a mapping of config names to entry lists")
    out: dict[str, tuple[Entry, ...]] = {}
    for name, entries in configs.items():
        where = f"mig-configs.{name}"
        if not isinstance(entries, list) or not entries:
            raise _err(where, entries, "a list of entries (devices, mig-enabled, mig-devices)")
        out[str(name)] = tuple(_entry(f"{where}[{i}]", e) for i, e in enumerate(entries))
    return out


def load(path: str, name: str) -> tuple[Entry, ...]:
    """The entries of config ``name`` in the file at ``path`` (read within the bounds of
    gpunode.util.boundedyaml: a ConfigMap or a shared repository may hold anything)."""
    try:
        data = load_file(path)
    except YamlError as exc:
        raise MigConfigError(
            f"{exc}; accepted: a mig-parted YAML file (at most {MAX_BYTES} bytes, "
            f"{MAX_NODES} nodes, {MAX_DEPTH} levels deep)"
        ) from None
    configs = parse(data, path)
    if name not in configs:
        raise MigConfigError(
            f"{path}: no config {name!r} under mig-configs; accepted: {', '.join(configs)}"
        )
    return configs[name]
