"""What GPUs and driver a node has (the operator's inventory, `gpunode inventory`, whose
table gpunode.cli.inventory prints): NVML first, /proc/driver/nvidia + /dev as the fallback.

NVML is the authority when it loads (it is what CUDA and every tool sees). When the library
is missing or cannot initialise, the procfs tree the kernel module publishes still tells the
driver version and GPUs, so an operator gets an answer on a node whose userspace is broken.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ..util.record import asdict as record_asdict
from . import health, nvml, procfs, xid
from .busid import BusId
from .devices import is_gpu_node
from .facts import MigFacts, nvml_text

SCHEMA = "gpunode.inventory/v1"


class NoDriver(RuntimeError):
    """Neither NVML nor /proc/driver/nvidia shows an NVIDIA driver."""


@dataclass
class GpuInfo:
    index: int | None
    minor: int | None
    uuid: str | None
    name: str | None
    pci_bus_id: str | None
    # nvmlPciInfo_t.pciDeviceId (device id << 16 | vendor 0x10DE): what a mig-parted
    # device-filter names; None when NVML is not the source
    pci_device_id: int | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    compute_capability: str | None = None
    persistence_mode: bool | None = None
    ecc_mode: bool | None = None
    mig_mode: bool | None = None  # current MIG mode; None: the GPU cannot do MIG
    mig_mode_pending: bool | None = None  # the mode after the next GPU reset
    # its MIG devices in NVML's order (index n of "<gpu>:<n>"), while MIG mode is on
    mig_devices: list[MigFacts] = field(default_factory=list)
    ecc_errors: dict[str, int] = field(default_factory=dict)
    retired_pages: dict[str, Any] = field(default_factory=dict)
    remapped_rows: dict[str, int] = field(default_factory=dict)
    temperature_c: int | None = None
    # Xid errors the kernel log holds for this GPU since boot (gpunode.nvidia.xid), oldest
    # first; None: the log could not be read (Inventory.kernel_log says why)
    xid_errors: list[dict[str, Any]] | None = None
    xid_sources: list[str] = field(default_factory=list)  # where they were looked for
    # links and state read for gpunode.nvidia.health (empty / None: NVML does not report it)
    # gen, max_gen, gpu_max_gen, width, max_width
    pcie_link: dict[str, int] = field(default_factory=dict)
    pcie_replays: int | None = None
    clocks_event_reasons: int | None = None  # nvmlClocksEventReason* bits
    nvlinks: dict[int, bool] = field(default_factory=dict)  # link -> active, the links it has
    fabric: dict[str, Any] = field(default_factory=dict)  # state, status, status_text
    inforom_valid: bool | None = None
    lost: bool = False  # NVML: GPU_IS_LOST (fallen off the bus); nothing else could be read
    # The kernel lists it, but /dev/nvidia<minor> is missing: why (NVML cannot show it; only
    # Inventory.every_gpu gives such records, Inventory.gpus never does)
    missing: str | None = None

    @property
    def health(self) -> list[str]:
        """Its health flags (gpunode.nvidia.health decides them; empty: healthy)."""
        return health.flags(self)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: record_asdict(getattr(self, f.name)) for f in fields(self)}
        del d["lost"], d["missing"]  # shown as the flag fallen_off_bus; missing: `problems`
        d["health"] = self.health
        return d


@dataclass
class Inventory:
    source: str
    driver_version: str | None
    cuda_driver_version: str | None
    nvml_version: str | None
    gpus: list[GpuInfo]
    problems: list[dict[str, Any]] = field(default_factory=list)
    hostname: str = field(default_factory=socket.gethostname)
    kernel_log: str | None = None  # why the kernel log could not be read (None: it was)

    def every_gpu(self) -> list[GpuInfo]:
        """Every GPU the node has: NVML's (lost ones included) and those the kernel lists
        whose device node is missing (``missing`` set), in PCI bus order when every bus id
        is known (the order NVML and CUDA enumerate by default)."""
        out = list(self.gpus) + [
            GpuInfo(None, p.get("minor"), p.get("uuid"), None, p.get("pci_bus_id"),
                    missing=p.get("detail") or "device node missing")
            for p in self.problems
            if p.get("issue") == "device_node_missing"
        ]  # fmt: skip
        if all(g.pci_bus_id for g in out):
            out.sort(key=lambda g: g.pci_bus_id.upper())
        return out

    @property
    def healthy(self) -> bool:
        return not self.problems and all(not g.health for g in self.gpus)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "hostname": self.hostname,
            "source": self.source,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "nvml_version": self.nvml_version,
            "gpu_count": len(self.gpus),
            "gpus": [g.to_dict() for g in self.gpus],
            "problems": self.problems,
            "kernel_log_error": self.kernel_log,
            "healthy": self.healthy,
        }


def device_node_ok(minor: int, dev_root: Path = Path("/dev")) -> bool:
    try:
        st = os.stat(dev_root / f"nvidia{minor}")
    except OSError:
        return False
    return is_gpu_node(st, minor)


def _nvml_gpu(pynvml: Any, index: int, h: Any, error: Exception | None) -> GpuInfo:
    if h is None:
        if isinstance(error, pynvml.NVMLError_GpuIsLost):
            return GpuInfo(index, None, None, None, None, lost=True)
        raise error  # type: ignore[misc]

    def opt(fn: Any, *args: Any) -> Any:
        try:
            return fn(h, *args)
        except pynvml.NVMLError_NotSupported:
            return None

    facts = nvml.gpu_facts(pynvml, index, h)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    pci_device_id = getattr(pynvml.nvmlDeviceGetPciInfo(h), "pciDeviceId", None)
    gpu = GpuInfo(
        index=index,
        minor=facts.minor,
        uuid=facts.uuid,
        name=facts.name,
        pci_bus_id=facts.pci_bus_id,
        pci_device_id=pci_device_id if isinstance(pci_device_id, int) else None,
        memory_total_mib=mem.total // (1024 * 1024),
        memory_used_mib=mem.used // (1024 * 1024),
        compute_capability=facts.compute_capability or None,
    )
    persistence = opt(pynvml.nvmlDeviceGetPersistenceMode)
    gpu.persistence_mode = None if persistence is None else bool(persistence)
    ecc = opt(pynvml.nvmlDeviceGetEccMode)
    gpu.ecc_mode = None if ecc is None else bool(ecc[0])
    gpu.mig_mode, gpu.mig_mode_pending = nvml.mig_modes(pynvml, h) or (None, None)
    gpu.mig_devices = list(facts.mig)
    gpu.temperature_c = opt(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
    if gpu.ecc_mode:
        for kind, err in (("corrected", 0), ("uncorrected", 1)):
            for scope, counter in (("volatile", 0), ("aggregate", 1)):
                value = opt(pynvml.nvmlDeviceGetTotalEccErrors, err, counter)
                if value is not None:
                    gpu.ecc_errors[f"{kind}_{scope}"] = int(value)
    sbe = opt(
        pynvml.nvmlDeviceGetRetiredPages,
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    )
    dbe = opt(
        pynvml.nvmlDeviceGetRetiredPages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    pending = opt(pynvml.nvmlDeviceGetRetiredPagesPendingStatus)
    if sbe is not None or dbe is not None or pending is not None:
        gpu.retired_pages = {
            "single_bit": len(sbe or []),
            "double_bit": len(dbe or []),
            "pending": bool(pending),
        }
    rows = opt(pynvml.nvmlDeviceGetRemappedRows)
    if rows is not None:
        corr, unc, is_pending, failure = (int(x) for x in rows)
        gpu.remapped_rows = {
            "correctable": corr,
            "uncorrectable": unc,
            "pending": is_pending,
            "failure": failure,
        }
    _read_links(pynvml, h, gpu)
    return gpu


def _read_links(nv: Any, h: Any, gpu: GpuInfo) -> None:
    """PCIe link, replays, clock event reasons, NVLink, fabric and InfoROM into ``gpu``.
    A call NVML does not support on this GPU (NOT_SUPPORTED), or that the bindings or the
    driver do not have (FUNCTION_NOT_FOUND), leaves its field empty: the check skips."""
    absent = tuple(
        getattr(nv, n) for n in ("NVMLError_NotSupported", "NVMLError_FunctionNotFound")
        if hasattr(nv, n)
    )  # fmt: skip

    def get(name: str, *args: Any) -> Any:
        fn = getattr(nv, name, None)
        try:
            return None if fn is None else fn(h, *args)
        except absent:
            return None

    for key, name in (("gen", "CurrPcieLinkGeneration"), ("max_gen", "MaxPcieLinkGeneration"),
                      ("gpu_max_gen", "GpuMaxPcieLinkGeneration"),
                      ("width", "CurrPcieLinkWidth"), ("max_width", "MaxPcieLinkWidth")):  # fmt: skip
        value = get(f"nvmlDeviceGet{name}")
        if value is not None:
            gpu.pcie_link[key] = int(value)
    gpu.pcie_replays = get("nvmlDeviceGetPcieReplayCounter")
    # ...ClocksThrottleReasons: the deprecated name, all that older bindings and drivers have
    gpu.clocks_event_reasons = get("nvmlDeviceGetCurrentClocksEventReasons")
    if gpu.clocks_event_reasons is None:
        gpu.clocks_event_reasons = get("nvmlDeviceGetCurrentClocksThrottleReasons")
    for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
        try:  # NOT_SUPPORTED / INVALID_ARGUMENT: the GPU has no such link
            gpu.nvlinks[link] = bool(nv.nvmlDeviceGetNvLinkState(h, link))
        except (nv.NVMLError_NotSupported, nv.NVMLError_InvalidArgument, *absent):
            continue
        except AttributeError:
            break
    gpu.fabric = _fabric(nv, h, absent)
    try:
        nv.nvmlDeviceValidateInforom(h)
        gpu.inforom_valid = True
    except nv.NVMLError_CorruptedInforom:
        gpu.inforom_valid = False
    except (AttributeError, *absent):
        gpu.inforom_valid = None


def _fabric(nv: Any, h: Any, absent: tuple[type, ...]) -> dict[str, Any]:
    """nvmlDeviceGetGpuFabricInfoV (v2), else nvmlDeviceGetGpuFabricInfo: {} when neither
    reports a fabric (no NVSwitch, pre-Hopper). pynvml hands the structure over as given:
    it must be passed by reference."""
    info: Any = None
    mismatch = getattr(nv, "NVMLError_ArgumentVersionMismatch", AttributeError)
    try:
        info = nv.c_nvmlGpuFabricInfo_v2_t()
        info.version = nv.nvmlGpuFabricInfo_v2
        nv.nvmlDeviceGetGpuFabricInfoV(h, nv.byref(info))
    except (AttributeError, mismatch, *absent):
        try:
            info = nv.c_nvmlGpuFabricInfo_t()
            nv.nvmlDeviceGetGpuFabricInfo(h, nv.byref(info))
        except (AttributeError, *absent):
            return {}
    if not info.state:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
        return {}
    status = int(info.status)
    text = nvml_text(nv.nvmlErrorString(status)) if status else "Success"
    return {"state": int(info.state), "status": status, "status_text": text}


def from_nvml() -> Inventory:
    """Inventory through NVML. Raises NoDriver when NVML cannot be loaded or initialised."""
    try:
        with nvml.Session() as nv:
            driver, cuda = nvml.system(nv)
            nvml_version = nvml_text(nv.nvmlSystemGetNVMLVersion())
            gpus = [_nvml_gpu(nv, i, h, error) for i, h, error in nvml.handles(nv)]
    except nvml.NvmlError as exc:
        raise NoDriver(str(exc)) from None
    return Inventory("nvml", driver, cuda, nvml_version, gpus)


def from_procfs(
    proc_root: str | os.PathLike = procfs.PROC_DRIVER_NVIDIA, dev_root: Path = Path("/dev")
) -> Inventory:
    version, proc_gpus = procfs.read_driver(proc_root)
    if version is None:
        raise NoDriver(f"{proc_root}/version is missing: no NVIDIA kernel driver is loaded")
    gpus = []
    for pg in sorted(proc_gpus, key=lambda g: g.bus_id):
        if pg.minor is None or not device_node_ok(pg.minor, dev_root):
            continue
        gpus.append(
            GpuInfo(
                index=len(gpus),
                minor=pg.minor,
                uuid=pg.uuid,
                name=pg.model,
                pci_bus_id=BusId.parse(pg.bus_id).nvml,
            )
        )
    return Inventory("procfs", version, None, None, gpus)


def _cross_check(inv: Inventory, proc_root: str | os.PathLike, dev_root: Path) -> None:
    """Find GPUs the kernel module knows but that are unusable, and fill in lost GPUs."""
    _, proc_gpus = procfs.read_driver(proc_root)
    proc_sorted = sorted(proc_gpus, key=lambda g: g.bus_id)
    usable = [g for g in proc_sorted if g.minor is not None and device_node_ok(g.minor, dev_root)]
    for pg in proc_sorted:
        if pg not in usable:
            inv.problems.append(
                {
                    "issue": "device_node_missing",
                    "detail": f"/dev/nvidia{pg.minor} is missing or not a 195:{pg.minor} device",
                    "uuid": pg.uuid,
                    "pci_bus_id": BusId.parse(pg.bus_id).nvml,
                    "minor": pg.minor,
                }
            )
    if len(usable) == len(inv.gpus):
        for gpu, pg in zip(inv.gpus, usable, strict=True):
            if gpu.uuid is None:  # lost: NVML gave no handle, the kernel still knows it
                gpu.uuid, gpu.name, gpu.minor = pg.uuid, pg.model, pg.minor
                gpu.pci_bus_id = BusId.parse(pg.bus_id).nvml


def attach_xid_errors(inv: Inventory, kernel_log: str = xid.KMSG) -> None:
    """Each GPU's Xid errors from the kernel log (read once); an Xid for a bus no GPU of the
    inventory has becomes a problem (``xid_unmatched``), so none goes unseen."""
    try:
        events = xid.parse_log(xid.read_kernel_log(kernel_log))
    except xid.LogUnreadable as exc:
        inv.kernel_log = f"the kernel log cannot be read: {exc}"
        return
    gpus = inv.every_gpu()
    for gpu in inv.gpus:
        gpu.xid_errors = []
        gpu.xid_sources.append("the kernel log since boot")
    for event in events:
        entry = {"xid": event.xid, "kind": event.kind, "verdict": event.verdict,
                 "pid": event.pid, "process": event.process, "message": event.message,
                 "source": "kernel log"}  # fmt: skip
        owner = next((g for g in gpus if g.pci_bus_id and event.matches(g.pci_bus_id)), None)
        if owner is not None and owner.xid_errors is not None:
            owner.xid_errors.append(entry)
        elif owner is None:
            inv.problems.append(
                {"issue": "xid_unmatched", "pci_bus_id": event.bus.nvml, "xid": event.xid,
                 "verdict": event.verdict,
                 "detail": f"Xid {event.xid} on {event.bus.procfs}, a bus no GPU here has: "
                           f"{event.message or 'no message'}"}
            )  # fmt: skip


def attach_xid_events(inv: Inventory, events: list[tuple[str, int, int | None, int | None]],
                      what: str) -> None:  # fmt: skip
    """Xid events NVML delivered (gpunode.nvidia.xidevents: bus id, code, GPU and compute
    instance of a MIG device) added to the GPUs' Xid errors; ``what`` names the watch
    ("NVML events while validating"). One that was also in the kernel log when it was read
    counts twice: the log is read once, right after the watch starts."""
    for gpu in inv.gpus:
        if gpu.lost:
            continue
        if gpu.xid_errors is None:
            gpu.xid_errors = []
        gpu.xid_sources.append(what)
    for bus, code, gi, ci in events:
        owner = next((g for g in inv.gpus if g.pci_bus_id == bus and not g.lost), None)
        kind, verdict, _ = xid.classify(code)
        where = f" (MIG GPU instance {gi}, compute instance {ci})" if gi is not None else ""
        entry = {"xid": code, "kind": kind, "verdict": verdict, "pid": "", "process": "",
                 "message": f"delivered by NVML{where}", "source": "nvml"}  # fmt: skip
        if owner is not None:
            owner.xid_errors.append(entry)
        else:
            inv.problems.append({"issue": "xid_unmatched", "pci_bus_id": bus, "xid": code,
                                 "verdict": verdict,
                                 "detail": f"Xid {code} delivered by NVML for {bus}, a bus no "
                                           "GPU here has"})  # fmt: skip


def collect(
    proc_root: str | os.PathLike = procfs.PROC_DRIVER_NVIDIA,
    dev_root: Path = Path("/dev"),
    use_nvml: bool = True,
    kernel_log: str | None = xid.KMSG,
) -> Inventory:
    """NVML when it works, else procfs, then the kernel log's Xid errors (``kernel_log``
    None: not read). Raises NoDriver when neither shows a driver."""
    inv = _collect(proc_root, dev_root, use_nvml)
    if kernel_log is not None:
        attach_xid_errors(inv, kernel_log)
    return inv


def _collect(proc_root: str | os.PathLike, dev_root: Path, use_nvml: bool) -> Inventory:
    nvml_error = None
    if use_nvml:
        try:
            inv = from_nvml()
        except NoDriver as exc:
            nvml_error = str(exc)
        else:
            _cross_check(inv, proc_root, dev_root)
            return inv
    try:
        inv = from_procfs(proc_root, dev_root)
    except NoDriver as exc:
        reason = f"{nvml_error}; {exc}" if nvml_error else str(exc)
        raise NoDriver(f"no NVIDIA driver found ({reason})") from None
    if nvml_error:
        inv.problems.append({"issue": "nvml_unavailable", "detail": nvml_error})
    _cross_check(inv, proc_root, dev_root)
    return inv
