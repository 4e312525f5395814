"""What GPUs and driver a node has (the operator's inventory, `gpunode inventory`, whose
table gpunode.cli.inventory prints): NVML first, /proc/driver/nvidia + /dev as the fallback.

NVML is the authority when it loads (it is what CUDA and every tool sees). When the library
is missing or cannot initialise, the procfs tree the kernel module publishes still tells the
driver version and GPUs, so an operator gets an answer on a node whose userspace is broken.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..util.record import replace
from . import health, nvml, procfs, xid
from .devices import is_gpu_node
from .facts import nvml_text
from .gpu import EccErrors, Fabric, Gpu, RemappedRows, RetiredPages, XidError

SCHEMA = "gpunode.inventory/v1"


class NoDriver(RuntimeError):
    """Neither NVML nor /proc/driver/nvidia shows an NVIDIA driver."""


@dataclass
class Inventory:
    source: str
    driver_version: str | None
    cuda_driver_version: str | None
    nvml_version: str | None
    gpus: list[Gpu]
    problems: list[dict[str, Any]] = field(default_factory=list)
    hostname: str = field(default_factory=socket.gethostname)
    kernel_log: str | None = None  # why the kernel log could not be read (None: it was)

    def every_gpu(self) -> list[Gpu]:
        """Every GPU the node has: NVML's (lost ones included) and those the kernel lists
        whose device node is missing (``missing`` set), in PCI bus order when every bus id
        is known (the order NVML and CUDA enumerate by default)."""
        out = list(self.gpus) + [
            Gpu(None, p.get("minor"), p.get("uuid"), None, p.get("pci_bus_id"),
                    missing=p.get("detail") or "device node missing")
            for p in self.problems
            if p.get("issue") == "device_node_missing"
        ]  # fmt: skip
        if all(g.pci_bus_id for g in out):
            out.sort(key=lambda g: g.pci_bus_id.upper())
        return out

    @property
    def healthy(self) -> bool:
        return not self.problems and all(not health.flags(g) for g in self.gpus)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "hostname": self.hostname,
            "source": self.source,
            "driver_version": self.driver_version,
            "cuda_driver_version": self.cuda_driver_version,
            "nvml_version": self.nvml_version,
            "gpu_count": len(self.gpus),
            "gpus": [{**g.to_dict(), "health": health.flags(g)} for g in self.gpus],
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


def _nvml_gpu(pynvml: Any, index: int, h: Any, error: Exception | None) -> Gpu:
    """nvml.read_gpu's record with the counters, links and state health judges."""
    if h is None:
        if isinstance(error, pynvml.NVMLError_GpuIsLost):
            return Gpu(index, None, None, None, None, lost=True)
        raise error  # type: ignore[misc]

    def opt(fn: Any, *args: Any) -> Any:
        try:
            return fn(h, *args)
        except pynvml.NVMLError_NotSupported:
            return None

    gpu = nvml.read_gpu(pynvml, index, h)
    mem = pynvml.nvmlDeviceGetMemoryInfo(h)
    gpu.memory_total_mib = mem.total // (1024 * 1024)
    gpu.memory_used_mib = mem.used // (1024 * 1024)
    persistence = opt(pynvml.nvmlDeviceGetPersistenceMode)
    gpu.persistence_mode = None if persistence is None else bool(persistence)
    ecc = opt(pynvml.nvmlDeviceGetEccMode)
    gpu.ecc_mode = None if ecc is None else bool(ecc[0])
    gpu.temperature_c = opt(pynvml.nvmlDeviceGetTemperature, pynvml.NVML_TEMPERATURE_GPU)
    if gpu.ecc_mode:
        counts = {}
        for kind, err in (("corrected", 0), ("uncorrected", 1)):
            for scope, counter in (("volatile", 0), ("aggregate", 1)):
                value = opt(pynvml.nvmlDeviceGetTotalEccErrors, err, counter)
                counts[f"{kind}_{scope}"] = None if value is None else int(value)
        gpu.ecc_errors = EccErrors(**counts)
    sbe = opt(
        pynvml.nvmlDeviceGetRetiredPages,
        pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
    )
    dbe = opt(
        pynvml.nvmlDeviceGetRetiredPages, pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
    )
    pending = opt(pynvml.nvmlDeviceGetRetiredPagesPendingStatus)
    if sbe is not None or dbe is not None or pending is not None:
        gpu.retired_pages = RetiredPages(len(sbe or []), len(dbe or []), bool(pending))
    rows = opt(pynvml.nvmlDeviceGetRemappedRows)
    if rows is not None:
        gpu.remapped_rows = RemappedRows(*(int(x) for x in rows))
    _read_links(pynvml, h, gpu)
    return gpu


def _read_links(nv: Any, h: Any, gpu: Gpu) -> None:
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
            setattr(gpu.pcie_link, key, int(value))
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


def _fabric(nv: Any, h: Any, absent: tuple[type, ...]) -> Fabric | None:
    """nvmlDeviceGetGpuFabricInfoV (v2), else nvmlDeviceGetGpuFabricInfo: None when neither
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
            return None
    if not info.state:  # NVML_GPU_FABRIC_STATE_NOT_SUPPORTED
        return None
    status = int(info.status)
    text = nvml_text(nv.nvmlErrorString(status)) if status else "Success"
    return Fabric(int(info.state), status, text)


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
    for pg in proc_gpus:
        if pg.minor is None or not device_node_ok(pg.minor, dev_root):
            continue
        gpus.append(replace(pg, index=len(gpus)))
    return Inventory("procfs", version, None, None, gpus)


def _cross_check(inv: Inventory, proc_root: str | os.PathLike, dev_root: Path) -> None:
    """Find GPUs the kernel module knows but that are unusable, and fill in lost GPUs."""
    _, proc_gpus = procfs.read_driver(proc_root)
    usable = [g for g in proc_gpus if g.minor is not None and device_node_ok(g.minor, dev_root)]
    for pg in proc_gpus:
        if pg not in usable:
            inv.problems.append(
                {
                    "issue": "device_node_missing",
                    "detail": f"/dev/nvidia{pg.minor} is missing or not a 195:{pg.minor} device",
                    "uuid": pg.uuid,
                    "pci_bus_id": pg.pci_bus_id,
                    "minor": pg.minor,
                }
            )
    if len(usable) == len(inv.gpus):
        for gpu, pg in zip(inv.gpus, usable, strict=True):
            if gpu.uuid is None:  # lost: NVML gave no handle, the kernel still knows it
                gpu.uuid, gpu.name, gpu.minor = pg.uuid, pg.name, pg.minor
                gpu.pci_bus_id = pg.pci_bus_id


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
        entry = XidError(event.xid, event.kind, event.verdict, event.pid, event.process,
                         event.message, "kernel log")  # fmt: skip
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
        entry = XidError(code, kind, verdict, "", "", f"delivered by NVML{where}", "nvml")
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
