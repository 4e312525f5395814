"""NVML, walked in one place for everyone who asks it: runtime discovery (the facts a
container needs) and the operator's inventory (those plus health).

pynvml is imported only when a session opens, never at load time: discovery sits on the
container start path (and runs NVML only when its cache is stale).
"""

from __future__ import annotations

from .facts import GpuFacts, MigFacts, cuda_version_text, nvml_text

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


def gpu_facts(nv: Any, index: int, handle: Any) -> GpuFacts:
    """What the runtime needs of a GPU. Brand and compute capability are optional: an NVML
    that cannot tell gives "unknown" and ""."""
    try:
        brand = BRAND_NAMES.get(nv.nvmlDeviceGetBrand(handle), "unknown")
    except nv.NVMLError:
        brand = "unknown"
    try:
        major, minor = nv.nvmlDeviceGetCudaComputeCapability(handle)
        cc = f"{major}.{minor}"
    except nv.NVMLError:
        cc = ""
    mig_enabled = mig_mode(nv, handle)
    return GpuFacts(
        index=index,
        minor=nv.nvmlDeviceGetMinorNumber(handle),
        uuid=nvml_text(nv.nvmlDeviceGetUUID(handle)),
        pci_bus_id=nvml_text(nv.nvmlDeviceGetPciInfo(handle).busId),
        name=nvml_text(nv.nvmlDeviceGetName(handle)),
        brand=brand,
        compute_capability=cc,
        mig_enabled=mig_enabled,
        mig=mig_devices(nv, handle) if mig_enabled else (),
    )


def mig_mode(nv: Any, handle: Any) -> bool:
    """Whether MIG mode is on now (the current mode; a pending change does not count).
    A GPU that cannot do MIG (NOT_SUPPORTED, or an NVML without the call) is off."""
    try:
        current, _pending = nv.nvmlDeviceGetMigMode(handle)
    except (nv.NVMLError, AttributeError):
        return False
    return bool(current)


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
