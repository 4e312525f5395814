"""NVSwitch baseboards (HGX/DGX) before the driver: what PCI shows, and the fabric manager.

An 8-GPU SXM baseboard on NVSwitch runs no CUDA program (cudaErrorSystemNotReady, 802)
until NVIDIA's Fabric Manager (``nv-fabricmanager``, unit ``nvidia-fabricmanager.service``)
has trained the fabric, and FM runs only at exactly the driver's version (it exits on a
mismatch). So the driver plan has to know about the switches before the driver is there,
from PCI sysfs — the test below is generic: whatever lists NVIDIA functions in
``<root>/sys/bus/pci/devices`` is read the same way.

The NVSwitch PCI id table and the reading of PCI sysfs are gpunode.nvidia.fabric's (the
one table: validation reads the same one after the driver); this module turns them into
what the plan needs: the switches by generation, NVLink5 (B200-class) boards refused
(not supported yet: they need the NVLink Subnet Manager and the InfiniBand stack besides
FM), and the fabric manager's package names.

Package names (NVIDIA/gpu-driver-container ubuntu22.04 and debian13 install.sh,
gpu-driver-container PR #451 and issue #585; Ubuntu's archive, packages.ubuntu.com):

* NVIDIA's apt repositories: ``nvidia-fabricmanager-<branch>`` up to 575; from 580 the real
  package is ``nvidia-fabricmanager`` (``nvidia-fabricmanager-580`` is only a virtual name
  it provides, which apt cannot install at a version).
* NVIDIA's RPM repositories: ``nvidia-fabric-manager`` up to 575, ``nvidia-fabricmanager``
  from 580.
* Ubuntu's archive (multiverse): ``nvidia-fabricmanager-<branch>`` for every branch, paired
  with the ``-server`` driver of the same version.
* Debian's archive has no fabric manager: a Debian-archive driver can only get one from
  NVIDIA's repository, configured by the operator (NVIDIA's names above).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..nvidia import fabric as nvfabric
from . import ProvisionError

FM_SERVICE = nvfabric.UNIT.removesuffix(".service")
FM_UNVERSIONED_FROM = 580  # NVIDIA's repositories: nvidia-fabricmanager (no branch) from here
# `provision fabric-wait --timeout` (gpunode.validate.fabric.wait): the role variable that
# sets it and its upper bound (nvidia_driver_fabric_wait_timeout: 1..3600 seconds)
WAIT_VARIABLE = "nvidia_driver_fabric_wait_timeout"
WAIT_MAX_S = 3600


def nvswitch_generation(device_id: int) -> tuple[str, str] | None:
    """(generation, GPUs) of an NVSwitch PCI device id, None when it is not one."""
    gen = nvfabric.generation(device_id)
    return (gen, nvfabric.GENERATIONS[gen][0]) if gen else None


@dataclass
class Fabric:
    """The NVSwitch fabric PCI shows: its switches and any NVLink5 (B200-class) GPUs."""

    nvswitches: list[dict] = field(default_factory=list)  # bus_id, device_id, generation
    nvlink5_gpus: list[dict] = field(default_factory=list)  # bus_id, device_id, name

    @property
    def generation(self) -> str:
        gens = sorted({s["generation"] for s in self.nvswitches})
        return "+".join(gens)

    @property
    def gpus(self) -> str:
        return "+".join(sorted({s["gpus"] for s in self.nvswitches}))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["count"] = len(self.nvswitches)
        d["generation"] = self.generation
        d["boards"] = self.gpus
        return d

    def describe(self) -> str:
        return f"{len(self.nvswitches)} {self.generation} NVSwitches ({self.gpus} baseboard)"


def scan(root: Path = Path("/")) -> Fabric:
    """The NVIDIA functions in ``<root>/sys/bus/pci/devices`` that make a fabric
    (gpunode.nvidia.fabric's table)."""
    fabric = Fabric()
    for name, device in nvfabric.pci_switches(root):
        gen, gpus = nvswitch_generation(device)
        fabric.nvswitches.append(
            {"bus_id": name, "device_id": f"0x{device:04x}", "generation": gen, "gpus": gpus}
        )
    for name, device in nvfabric.nvlink5_gpus(root):
        fabric.nvlink5_gpus.append(
            {"bus_id": name, "device_id": f"0x{device:04x}", "name": nvfabric.NVLINK5_GPUS[device]}
        )
    return fabric


def refuse_nvlink5(fabric: Fabric) -> None:
    """B200-class boards: refused in one line, before anything is planned or changed."""
    if not fabric.nvlink5_gpus:
        return
    names = sorted({g["name"] for g in fabric.nvlink5_gpus})
    ids = sorted({g["device_id"] for g in fabric.nvlink5_gpus})
    raise ProvisionError(
        f"this node has {len(fabric.nvlink5_gpus)} {'/'.join(names)} GPU(s) (PCI 10de:"
        f"{', 10de:'.join(i[2:] for i in ids)}): their NVLink5 fabric needs the NVLink Subnet "
        "Manager (nvlsm) and the InfiniBand stack besides the fabric manager, which gpunode "
        "does not set up: not supported yet (supported NVSwitch boards: A100, H100/H200); "
        "nothing was changed"
    )


def fm_package(family: str, distro: str, source: str, branch: str) -> str:
    """The fabric manager's package for a driver branch, from where the driver comes."""
    b = int(branch)
    if family == "dnf":
        return "nvidia-fabricmanager" if b >= FM_UNVERSIONED_FROM else "nvidia-fabric-manager"
    if source == "distro" and distro == "ubuntu":
        return f"nvidia-fabricmanager-{branch}"
    return "nvidia-fabricmanager" if b >= FM_UNVERSIONED_FROM else f"nvidia-fabricmanager-{branch}"


def seconds(text: str, maximum: float | None = None, whole: bool = False) -> float:
    """A wait's seconds from the command line or the inventory: a number above 0 (with
    ``whole``, a whole number from 1 to ``maximum``), at most ``maximum`` when given.
    ValueError naming the value and what is accepted."""
    if whole:
        want = f"a whole number of seconds from 1 to {maximum:g}"
    else:
        want = "a number of seconds above 0" + (f", at most {maximum:g}" if maximum else "")
    try:
        value = float(str(text).strip())
    except ValueError:
        value = math.nan
    ok = math.isfinite(value) and value > 0 and (maximum is None or value <= maximum)
    if ok and whole and (value != int(value) or value < 1):
        ok = False
    if not ok:
        raise ValueError(f"{str(text)!r} is not {want}")
    return value
