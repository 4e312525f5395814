"""Facts about a node's driver and GPUs, as the runtime needs them.

Kept small and JSON-serialisable: the runtime reads them from the inventory cache on every
container create instead of initialising NVML (see gpunode.runtime.discovery).
"""

from __future__ import annotations

from ..util.record import asdict, factory, fields, record
from .busid import BusId

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any


def nvml_text(value: object) -> str:
    """A string from pynvml, which returns bytes or str depending on the call and version."""
    return value.decode() if isinstance(value, bytes) else str(value)


def cuda_version_text(value: int) -> str:
    """NVML's CUDA driver version integer as MAJOR.MINOR: 12020 -> "12.2"."""
    return f"{value // 1000}.{(value % 1000) // 10}"


@record(frozen=True)
class MigFacts:
    """A MIG device (one compute instance of one GPU instance) of a MIG-enabled GPU."""

    index: int  # n in "<gpu index>:<n>": its position in NVML's list of the GPU's MIG devices
    uuid: str  # MIG-...
    gi: int  # GPU instance id (nvmlDeviceGetGpuInstanceId)
    ci: int  # compute instance id (nvmlDeviceGetComputeInstanceId)
    profile: str = ""  # "3g.40gb", "1c.3g.40gb" (as nvidia-smi names it; "" when unknown)
    memory_mib: int = 0


@record(frozen=True)
class GpuFacts:
    index: int
    minor: int
    uuid: str
    pci_bus_id: str  # NVML form: 00000000:07:00.0
    name: str = ""
    brand: str = ""  # lower-case NVML brand name: "tesla", "geforce", "nvidia", ...
    compute_capability: str = ""  # "8.0"
    mig_enabled: bool = False  # MIG mode (current) is on: the GPU is used only as MIG devices
    mig: tuple[MigFacts, ...] = ()  # its MIG devices, in NVML's order

    @property
    def procfs_bus_id(self) -> str:
        """The /proc/driver/nvidia/gpus directory name: 0000:07:00.0."""
        return BusId.parse(self.pci_bus_id).procfs


@record(frozen=True)
class NodeFacts:
    driver_version: str
    cuda_version: str  # "12.2": what the driver supports (nvmlSystemGetCudaDriverVersion)
    gpus: tuple[GpuFacts, ...] = factory(tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "gpus": [
                {**asdict(g), "mig": [asdict(m) for m in g.mig]} for g in self.gpus
            ],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeFacts:
        """The inverse of to_dict, strict: a missing, extra or mistyped field or an
        unparsable bus id raises KeyError, TypeError or ValueError."""
        gpus = []
        for g in data["gpus"]:
            migs = tuple(_typed(MigFacts, m, _MIG_TYPES) for m in g["mig"])
            gpu = _typed(GpuFacts, {**g, "mig": migs}, _GPU_TYPES)
            gpu.procfs_bus_id  # noqa: B018 - raises ValueError for a bad bus id
            gpus.append(gpu)
        versions = (data["driver_version"], data["cuda_version"])
        if not all(type(v) is str for v in versions):
            raise TypeError("driver_version and cuda_version must be strings")
        return cls(*versions, gpus=tuple(gpus))


_GPU_TYPES = {"index": int, "minor": int, "mig_enabled": bool, "mig": tuple}
_MIG_TYPES = {"index": int, "gi": int, "ci": int, "memory_mib": int}


def _typed(cls: type, data: dict[str, Any], types: dict[str, type]) -> Any:
    """``cls(**data)``, every field of exactly its type (str unless ``types`` says)."""
    made = cls(**data)
    for name in fields(cls):
        want = types.get(name, str)
        if type(getattr(made, name)) is not want:
            raise TypeError(f"{cls.__name__} field {name}: expected {want.__name__}")
    return made
