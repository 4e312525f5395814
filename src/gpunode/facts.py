"""Facts about a node's driver and GPUs, as the runtime needs them.

Kept small and JSON-serialisable: the runtime reads them from the inventory cache on every
container create instead of initialising NVML (see gpunode.discover).
"""

from __future__ import annotations

from ._record import asdict, factory, record

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any


@record(frozen=True)
class GpuFacts:
    index: int
    minor: int
    uuid: str
    pci_bus_id: str  # NVML form: 00000000:07:00.0
    name: str = ""
    brand: str = ""  # lower-case NVML brand name: "tesla", "geforce", "nvidia", ...
    compute_capability: str = ""  # "8.0"

    @property
    def procfs_bus_id(self) -> str:
        """The /proc/driver/nvidia/gpus directory name: 0000:07:00.0."""
        dom, _, rest = self.pci_bus_id.partition(":")
        return f"{int(dom, 16):04x}:{rest.lower()}"


@record(frozen=True)
class NodeFacts:
    driver_version: str
    cuda_version: str  # "12.2": what the driver supports (nvmlSystemGetCudaDriverVersion)
    gpus: tuple[GpuFacts, ...] = factory(tuple)

    def to_dict(self) -> dict[str, Any]:
        return {
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "gpus": [asdict(g) for g in self.gpus],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeFacts:
        return cls(
            driver_version=data["driver_version"],
            cuda_version=data["cuda_version"],
            gpus=tuple(GpuFacts(**g) for g in data["gpus"]),
        )
