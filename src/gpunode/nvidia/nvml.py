"""NVML, walked in one place for everyone who asks it: runtime discovery (the facts a
container needs) and the operator's inventory (those plus health).

pynvml is imported only when a session opens, never at load time: discovery sits on the
container start path (and runs NVML only when its cache is stale).
"""

from __future__ import annotations

from ..util.record import record
from .facts import GpuFacts, MigFacts, cuda_version_text, nvml_text
from .gpu import Gpu

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

# nvmlBrandType_t: the names are what NVIDIA_REQUIRE_BRAND compares against.
BRANDS = {
    "unknown": 0,
    "quadro": 1,
    "tesla": 2,
    "nvs": 3,
    "grid": 4,
    "geforce": 5,
    "titan": 6,
    "nvidiavapps": 7,
    "nvidiavpc": 8,
    "nvidiavcs": 9,
    "nvidiavws": 10,
    "nvidiacloudgaming": 11,
    "quadrortx": 12,
    "nvidiartx": 13,
    "nvidia": 14,
    "geforcertx": 15,
    "titanrtx": 16,
}
BRAND_NAMES = {code: name for name, code in BRANDS.items()}


class NvmlError(RuntimeError):
    """NVML cannot be used (bindings missing, library not loadable, init failed); one line."""


class Session:
    """``with Session(library) as nv:`` an initialised pynvml (``nv``), shut down on exit.

    ``library``: the libnvidia-ml.so.1 to load (a containerised driver's), instead of the
    one the loader finds.
    """

    def __init__(self, library: str | None = None) -> None:
        self.library = library
        self.nv: Any = None

    def __enter__(self) -> Any:
        try:
            import pynvml
        except ImportError as exc:
            raise NvmlError(f"the NVML bindings (nvidia-ml-py) are not installed: {exc}") from None
        if self.library is not None:
            import ctypes

            try:
                pynvml.nvmlLib = ctypes.CDLL(self.library)
            except OSError as exc:
                raise NvmlError(f"cannot load {self.library}: {exc}") from None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise NvmlError(f"NVML cannot be initialised: {exc}") from None
        self.nv = pynvml
        return pynvml

    def __exit__(self, *exc: object) -> None:
        self.nv.nvmlShutdown()


def system(nv: Any) -> tuple[str, str]:
    """(driver version, the CUDA version the driver supports as MAJOR.MINOR)."""
    driver = nvml_text(nv.nvmlSystemGetDriverVersion())
    return driver, cuda_version_text(nv.nvmlSystemGetCudaDriverVersion())


def handles(nv: Any) -> Iterator[tuple[int, Any, Exception | None]]:
    """(index, handle, None) per GPU, or (index, None, the NVMLError) for a GPU NVML gives
    no handle for (a lost GPU: NVMLError_GpuIsLost)."""
    for index in range(nv.nvmlDeviceGetCount()):
        try:
            handle = nv.nvmlDeviceGetHandleByIndex(index)
        except nv.NVMLError as exc:
            yield index, None, exc
            continue
        yield index, handle, None


def read_gpu(nv: Any, index: int, handle: Any) -> Gpu:
    """A GPU's identity and MIG mode and devices: the record every reader takes
    (gpunode.nvidia.gpu; the inventory adds counters and links, `gpunode mig` its GPU
    instance tree). Brand and compute
    capability are optional: an NVML that cannot tell gives "unknown" and None."""
    try:
        brand = BRAND_NAMES.get(nv.nvmlDeviceGetBrand(handle), "unknown")
    except nv.NVMLError:
        brand = "unknown"
    try:
        major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
        cc: str | None = f"{major}.{minor}"
    except nv.NVMLError:
        cc = None
    current, pending = mig_modes(nv, handle) or (None, None)
    try:
        serial: str | None = nvml_text(nv.nvmlDeviceGetSerial(handle)) or None
    except (nv.NVMLError, AttributeError):  # NOT_SUPPORTED on consumer boards
        serial = None
    pci = nv.nvmlDeviceGetPciInfo(handle)
    pci_device_id = getattr(pci, "pciDeviceId", None)
    return Gpu(
        index=index,
        minor=nv.nvmlDeviceGetMinorNumber(handle),
        uuid=nvml_text(nv.nvmlDeviceGetUUID(handle)),
        name=nvml_text(nv.nvmlDeviceGetName(handle)),
        pci_bus_id=nvml_text(pci.busId),
        serial=serial,
        pci_device_id=pci_device_id if isinstance(pci_device_id, int) else None,
        compute_capability=cc,
        brand=brand,
        mig_mode=current,
        mig_mode_pending=pending,
        mig_devices=list(mig_devices(nv, handle)) if current else [],
    )


def gpu_facts(nv: Any, index: int, handle: Any) -> GpuFacts:
    """What the runtime needs of a GPU (and caches): read_gpu's record, its facts."""
    return read_gpu(nv, index, handle).facts()


def mig_modes(nv: Any, handle: Any) -> tuple[bool, bool] | None:
    """(current, pending) MIG mode, or None for a GPU that cannot do MIG (NOT_SUPPORTED, or
    an NVML without the call)."""
    try:
        current, pending = nv.nvmlDeviceGetMigMode(handle)
    except (nv.NVMLError, AttributeError):
        return None
    return bool(current), bool(pending)


def mig_devices(nv: Any, handle: Any) -> tuple[MigFacts, ...]:
    """The MIG devices of a MIG-enabled GPU, in NVML's order: slot i of
    nvmlDeviceGetMigDeviceHandleByIndex is tried for i < nvmlDeviceGetMaxMigDeviceCount
    (NOT_FOUND: an empty slot); a device's index is its position among those found, which
    is what "<gpu>:<n>" names (NVIDIA's semantics: a position, not a GPU instance id)."""
    out: list[MigFacts] = []
    for slot in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nv.NVMLError_NotFound:
            continue
        name = nvml_text(nv.nvmlDeviceGetName(mig))
        out.append(
            MigFacts(
                index=len(out),
                uuid=nvml_text(nv.nvmlDeviceGetUUID(mig)),
                gi=nv.nvmlDeviceGetGpuInstanceId(mig),
                ci=nv.nvmlDeviceGetComputeInstanceId(mig),
                # "NVIDIA A100-SXM4-80GB MIG 3g.40gb": the profile is what follows " MIG "
                profile=name.rpartition(" MIG ")[2] if " MIG " in name else "",
                memory_mib=nv.nvmlDeviceGetMemoryInfo(mig).total // (1024 * 1024),
            )
        )
    return tuple(out)


# ------------------------------------------------------------------ MIG layout (GI / CI)
# The layout of a MIG-capable GPU as NVML describes it: its GPU instance profiles (name,
# slices, valid placements) and its GPU instances with their compute instances. `gpunode
# mig` (gpunode.mig) plans and applies layouts on these; the write calls live there.

# go-nvlib's suffixes for the GPU instance profile indexes that are not plain ones
# (NVML_GPU_INSTANCE_PROFILE_*: REV1 = +me, GFX = +gfx, NO_ME = -me, ALL_ME = +me.all)
_GI_SUFFIX = {
    7: "+me",
    8: "+me",
    10: "+gfx",
    11: "+gfx",
    12: "+gfx",
    13: "-me",
    14: "-me",
    15: "+me.all",
    16: "+me.all",
    17: "+gfx",
}
_MAX_PLACEMENTS = 64


@record(frozen=True)
class GiProfile:
    """A GPU instance profile this GPU offers (nvmlDeviceGetGpuInstanceProfileInfoV)."""

    index: int  # NVML_GPU_INSTANCE_PROFILE_* constant
    id: int  # the profile id create/list calls take (nvidia-smi mig -lgip's ID)
    name: str  # as nvidia-smi prints it: "1g.10gb", "1g.10gb+me"
    slices: int  # compute slices
    instances: int  # how many of it the GPU can hold at most
    memory_mib: int
    placements: tuple = ()  # ((start, size), ...) in memory slots, NVML's order


@record(frozen=True)
class CiState:
    """A compute instance of a GPU instance."""

    id: int
    profile_id: int
    slices: int
    handle: Any = None


@record(frozen=True)
class GiState:
    """A GPU instance as it exists now."""

    id: int
    profile_id: int
    start: int
    size: int
    cis: tuple = ()  # CiState, by id
    handle: Any = None


def _gi_name(info: Any, index: int, total_bytes: int) -> str:
    name = nvml_text(getattr(info, "name", b"") or b"").strip()
    if name:
        # "MIG 1g.10gb" (the V info); nvidia-smi prints what follows "MIG "
        return name[4:] if name.startswith("MIG ") else name
    # no name (the v1 info): go-nvlib's rule, the memory share rounded up to eighths
    gib = -(-total_bytes // 1024**3)
    share = info.memorySizeMB * 1024 * 1024 / total_bytes if total_bytes else 0.0
    share = -(-share * 8 // 1) / 8
    return f"{info.sliceCount}g.{round(share * gib)}gb{_GI_SUFFIX.get(index, '')}"


def _gi_profile_info(nv: Any, handle: Any, index: int) -> Any:
    try:
        return nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, index)  # the V call
    except nv.NVMLError_FunctionNotFound:
        return nv.nvmlDeviceGetGpuInstanceProfileInfo(handle, index, version=1)


def gpu_instance_profiles(nv: Any, handle: Any) -> tuple[GiProfile, ...]:
    """The GPU instance profiles the GPU offers, with their possible placements. Raises the
    NVMLError of a GPU that tells none (MIG not supported, or MIG mode off on a driver that
    answers only with MIG on)."""
    import ctypes

    total = nv.nvmlDeviceGetMemoryInfo(handle).total
    out: list[GiProfile] = []
    first_error: Exception | None = None
    for index in range(nv.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = _gi_profile_info(nv, handle, index)
        except nv.NVMLError as exc:  # NOT_SUPPORTED / INVALID_ARGUMENT: not on this GPU
            first_error = first_error or exc
            continue
        array = (nv.c_nvmlGpuInstancePlacement_t * _MAX_PLACEMENTS)()
        count = ctypes.c_uint(_MAX_PLACEMENTS)
        nv.nvmlDeviceGetGpuInstancePossiblePlacements(handle, info.id, array, ctypes.byref(count))
        placements = tuple((p.start, p.size) for p in array[: count.value])
        out.append(
            GiProfile(
                index=index,
                id=info.id,
                name=_gi_name(info, index, total),
                slices=info.sliceCount,
                instances=info.instanceCount,
                memory_mib=info.memorySizeMB,
                placements=placements,
            )
        )
    if not out and first_error is not None:
        raise first_error
    return tuple(out)


def ci_profiles(nv: Any, gi: Any) -> tuple[tuple[int, int, int], ...]:
    """(index, id, slices) of the compute instance profiles a GPU instance offers."""
    out = []
    for index in range(nv.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = nv.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                gi, index, nv.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
            )
        except nv.NVMLError:
            continue
        out.append((index, info.id, info.sliceCount))
    return tuple(out)


def gpu_instances(nv: Any, handle: Any, profiles: tuple[GiProfile, ...]) -> tuple[GiState, ...]:
    """The GPU's GPU instances (of the given profiles) with their compute instances, by id."""
    import ctypes

    out: list[GiState] = []
    for profile in profiles:
        array = (nv.c_nvmlGpuInstance_t * max(profile.instances, _MAX_PLACEMENTS))()
        count = ctypes.c_uint(len(array))
        nv.nvmlDeviceGetGpuInstances(handle, profile.id, array, ctypes.byref(count))
        for gi in array[: count.value]:
            info = nv.nvmlGpuInstanceGetInfo(gi)
            cis: list[CiState] = []
            for _index, ci_id, slices in ci_profiles(nv, gi):
                carray = (nv.c_nvmlComputeInstance_t * _MAX_PLACEMENTS)()
                ccount = ctypes.c_uint(len(carray))
                nv.nvmlGpuInstanceGetComputeInstances(gi, ci_id, carray, ctypes.byref(ccount))
                for ci in carray[: ccount.value]:
                    cinfo = nv.nvmlComputeInstanceGetInfo(ci)
                    cis.append(CiState(id=cinfo.id, profile_id=ci_id, slices=slices, handle=ci))
            cis.sort(key=lambda c: c.id)
            out.append(
                GiState(
                    id=info.id,
                    profile_id=profile.id,
                    start=info.placement.start,
                    size=info.placement.size,
                    cis=tuple(cis),
                    handle=gi,
                )
            )
    out.sort(key=lambda g: g.id)
    return tuple(out)
