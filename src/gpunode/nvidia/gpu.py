"""The one typed record of what the driver says about a GPU: identity, MIG mode and devices,
counters, links and state. The NVML walk (gpunode.nvidia.nvml.read_gpu, counters added by
gpunode.nvidia.inventory) fills it, procfs (gpunode.nvidia.procfs.read_driver) fills the
same record when NVML is unusable, and every reader takes it: the health judges
(gpunode.nvidia.health), `gpunode inventory`, validate.

Two shapes are derived from it, not copied by hand (each held in step by a unit test):

* ``Gpu.facts()``: the runtime's cached GpuFacts (gpunode.nvidia.facts), the part a
  container start needs, kept as its own small class because the start path reads it from
  the cache on every ``docker run`` (import budget, cache format);
* validate's result row (gpunode.validate.model.GpuRow), the versioned result schema's
  own names, mapped from these fields by its ROW table.

A sub-record that NVML reports all or nothing of (retired pages, remapped rows, the fabric)
is None when NVML does not report it; one NVML reports field by field (the PCIe link, the
ECC counters) has None in each field it does not report. The inventory's JSON shows each
sub-record as an object of the fields reported ({} for none).
"""

from __future__ import annotations

from ..util.record import asdict, factory, fields, record
from .facts import GpuFacts, MigFacts

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


@record
class PcieLink:
    """The PCIe link now and at most (nvmlDeviceGet{Curr,Max,GpuMax}PcieLink*)."""

    gen: int | None = None
    max_gen: int | None = None  # the most this GPU in this slot can do
    gpu_max_gen: int | None = None  # the most the GPU can do
    width: int | None = None
    max_width: int | None = None


@record
class EccErrors:
    """nvmlDeviceGetTotalEccErrors per kind and counter (None: not reported)."""

    corrected_volatile: int | None = None
    corrected_aggregate: int | None = None
    uncorrected_volatile: int | None = None
    uncorrected_aggregate: int | None = None


@record
class RetiredPages:
    single_bit: int  # pages retired for multiple single-bit errors
    double_bit: int  # pages retired for a double-bit error
    pending: bool  # a retirement waits for the next GPU reset


@record
class RemappedRows:
    correctable: int
    uncorrectable: int
    pending: int  # a remap waits for the next GPU reset
    failure: int  # a remap failed


@record
class Fabric:
    """The NVSwitch fabric as NVML reports it for the GPU (nvmlGpuFabricInfo)."""

    state: int  # nvmlGpuFabricState_t, never NOT_SUPPORTED (then the GPU has no Fabric)
    status: int  # nvmlReturn_t of the training
    status_text: str = ""  # nvmlErrorString(status)


@record
class XidError:
    """One Xid error of the GPU: from the kernel log (gpunode.nvidia.xid) or delivered by
    NVML (gpunode.nvidia.xidevents), with NVIDIA's class and verdict of its code."""

    xid: int
    kind: str  # gpunode.nvidia.xid's class of the code ("bus", "application", ...)
    verdict: str  # "fail" or "warn"
    pid: str
    process: str
    message: str
    source: str  # "kernel log" or "nvml"


@record(frozen=True)
class MigView:
    """A GPU's MIG mode and devices as a MIG layout is judged against them
    (gpunode.mig.layout.difference): ``Gpu.mig_view`` of the record, or `gpunode mig`'s
    own (gpunode.mig.layout.MigGpu.mig_view, its devices from the GPU and compute instances
    it reads)."""

    capable: bool  # the GPU can do MIG
    enabled: bool  # the current mode
    pending: bool  # the mode after the next GPU reset
    # {MIG device profile: count}, a compute instance narrower than its GPU instance named
    # as the driver names such a MIG device ("1c.3g.40gb")
    devices: dict[str, int]


@record
class Gpu:
    index: int | None
    minor: int | None
    uuid: str | None
    name: str | None
    pci_bus_id: str | None  # NVML form: 00000000:07:00.0
    # the board's serial number (nvmlDeviceGetSerial); None where NVML does not tell
    serial: str | None = None
    # nvmlPciInfo_t.pciDeviceId (device id << 16 | vendor 0x10DE): what a mig-parted
    # device-filter names; None when NVML is not the source
    pci_device_id: int | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    compute_capability: str | None = None  # "8.0"
    brand: str | None = None  # lower-case NVML brand name ("tesla", ...); not in the JSON
    persistence_mode: bool | None = None
    ecc_mode: bool | None = None
    mig_mode: bool | None = None  # current MIG mode; None: the GPU cannot do MIG
    mig_mode_pending: bool | None = None  # the mode after the next GPU reset
    # its MIG devices in NVML's order (index n of "<gpu>:<n>"), while MIG mode is on
    mig_devices: list[MigFacts] = factory(list)
    ecc_errors: EccErrors = factory(EccErrors)
    retired_pages: RetiredPages | None = None
    remapped_rows: RemappedRows | None = None
    temperature_c: int | None = None
    # Xid errors the kernel log holds for this GPU since boot (gpunode.nvidia.xid), oldest
    # first; None: the log could not be read (Inventory.kernel_log says why)
    xid_errors: list[XidError] | None = None
    xid_sources: list[str] = factory(list)  # where they were looked for
    pcie_link: PcieLink = factory(PcieLink)
    pcie_replays: int | None = None
    clocks_event_reasons: int | None = None  # nvmlClocksEventReason* bits
    nvlinks: dict[int, bool] = factory(dict)  # link -> active, the links it has
    fabric: Fabric | None = None
    inforom_valid: bool | None = None
    lost: bool = False  # NVML: GPU_IS_LOST (fallen off the bus); nothing else could be read
    # The kernel lists it, but /dev/nvidia<minor> is missing: why (NVML cannot show it; only
    # Inventory.every_gpu gives such records, Inventory.gpus never does)
    missing: str | None = None

    def mig_view(self) -> MigView:
        """Its MIG mode and devices (by profile; "?" where the profile is not known)."""
        devices: dict[str, int] = {}
        for m in self.mig_devices:
            devices[m.profile or "?"] = devices.get(m.profile or "?", 0) + 1
        return MigView(self.mig_mode is not None, bool(self.mig_mode),
                       bool(self.mig_mode_pending), devices)  # fmt: skip

    def facts(self) -> GpuFacts:
        """The runtime's cached facts of this GPU (a GPU NVML reads: not lost, not missing)."""
        return GpuFacts(**{name: get(self) for name, get in FACTS.items()})

    def to_dict(self) -> dict[str, Any]:
        """The inventory's JSON of the GPU, less its health (the inventory adds that)."""
        out: dict[str, Any] = {}
        for name in fields(self):
            if name in NOT_SHOWN:
                continue
            value = getattr(self, name)
            if name in SUB_RECORDS:
                value = {} if value is None else _reported(value)
            out[name] = asdict(value)
        return out


# GpuFacts field -> how the record gives it (tests/unit/nvidia/test_gpu.py: every field)
FACTS = {
    "index": lambda g: g.index,
    "minor": lambda g: g.minor,
    "uuid": lambda g: g.uuid,
    "pci_bus_id": lambda g: g.pci_bus_id,
    "name": lambda g: g.name or "",
    "brand": lambda g: g.brand or "",
    "compute_capability": lambda g: g.compute_capability or "",
    "mig_enabled": lambda g: bool(g.mig_mode),  # the current mode: a pending one is not on
    "mig": lambda g: tuple(g.mig_devices),
}
# Not in the inventory's JSON: lost is shown as the health flag fallen_off_bus, missing as a
# `problems` entry, brand is the runtime's (NVIDIA_REQUIRE_BRAND)
NOT_SHOWN = ("brand", "lost", "missing")
SUB_RECORDS = ("ecc_errors", "retired_pages", "remapped_rows", "pcie_link", "fabric")


def _reported(sub: object) -> dict[str, Any]:
    """A sub-record's fields that hold a value, in field order."""
    return {n: getattr(sub, n) for n in fields(sub) if getattr(sub, n) is not None}
