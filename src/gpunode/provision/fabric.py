"""NVSwitch baseboards (HGX/DGX) before the driver: what PCI shows, and the fabric manager.

An 8-GPU SXM baseboard on NVSwitch runs no CUDA program (cudaErrorSystemNotReady, 802)
until NVIDIA's Fabric Manager (``nv-fabricmanager``, unit ``nvidia-fabricmanager.service``)
has trained the fabric, and FM runs only at exactly the driver's version (it exits on a
mismatch). So the driver plan has to know about the switches before the driver is there,
from PCI sysfs — the test below is generic: whatever lists NVIDIA functions in
``<root>/sys/bus/pci/devices`` is read the same way.

This module holds the one table of PCI ids gpunode uses for that (``NVSWITCH_IDS``,
``NVLINK5_GPUS``); nothing else may carry its own copy. Sources (read August 2026, see
docs/provisioning.md "NVSwitch nodes" and shared/reference/hgx.md §3):

* NVSwitch device ids the NVSwitch kernel driver accepts, per generation:
  open-gpu-kernel-modules src/common/nvswitch/kernel/nvswitch.c —
  LR10 (A100 generation) 0x1AE8 and 0x1AF0-0x1AFF; LS10 (H100/H200 generation)
  0x22A0-0x22AF (management endpoint, PCI-PCI bridge, non-transparent bridge functions).
  pci.ids names 10de:1af1 "GA100 [A100 NVSwitch]" and 10de:22a3 "GH100 [H100 NVSwitch]".
* lspci shows them as ``Bridge [0680]``: PCI class 0x0680xx, "other bridge"
  (leptonai/gpud fabric-manager testdata lspci.nn.a100).
* Fourth-generation (B200, NVLink5) switches have no id in pci.ids or in the driver's list;
  NVIDIA's driver container recognises that path by InfiniBand VPD (``SW_MNG``), and it
  needs the NVLink Subnet Manager (``nvlsm``) and the InfiniBand stack besides FM. gpunode
  recognises such a board by its GPUs instead: pci.ids 10de:2901 "GB100 [B200]" (also what
  aws-parallelcluster-cookbook counts), and refuses it: not supported yet.

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

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

from . import ProvisionError

NVIDIA_VENDOR = 0x10DE
NVSWITCH_CLASS = 0x0680  # PCI class 0x0680xx: bridge, "other"
# (generation, first device id, last device id, the GPUs of that generation's boards)
NVSWITCH_IDS: tuple[tuple[str, int, int, str], ...] = (
    ("LR10", 0x1AE8, 0x1AE8, "A100"),
    ("LR10", 0x1AF0, 0x1AFF, "A100"),
    ("LS10", 0x22A0, 0x22AF, "H100/H200"),
)
# GPUs whose boards use fourth-generation NVSwitch (NVLink5): device id -> name (pci.ids)
NVLINK5_GPUS: dict[int, str] = {0x2901: "B200"}
FM_SERVICE = "nvidia-fabricmanager"
FM_UNVERSIONED_FROM = 580  # NVIDIA's repositories: nvidia-fabricmanager (no branch) from here


def nvswitch_generation(device_id: int) -> tuple[str, str] | None:
    """(generation, GPUs) of an NVSwitch PCI device id, None when it is not one."""
    for gen, lo, hi, gpus in NVSWITCH_IDS:
        if lo <= device_id <= hi:
            return gen, gpus
    return None


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


def _hex(path: Path) -> int | None:
    try:
        return int(path.read_text().strip(), 16)
    except (OSError, ValueError):
        return None


def scan(root: Path = Path("/")) -> Fabric:
    """The NVIDIA functions in ``<root>/sys/bus/pci/devices`` that make a fabric."""
    base = root / "sys/bus/pci/devices"
    fabric = Fabric()
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return fabric
    for name in entries:
        vendor, klass, device = (_hex(base / name / f) for f in ("vendor", "class", "device"))
        if vendor != NVIDIA_VENDOR or klass is None or device is None:
            continue
        gen = nvswitch_generation(device)
        if gen and klass >> 8 == NVSWITCH_CLASS:
            fabric.nvswitches.append(
                {"bus_id": name, "device_id": f"0x{device:04x}", "generation": gen[0],
                 "gpus": gen[1]}
            )  # fmt: skip
        elif device in NVLINK5_GPUS and klass >> 16 == 0x03:
            fabric.nvlink5_gpus.append(
                {"bus_id": name, "device_id": f"0x{device:04x}", "name": NVLINK5_GPUS[device]}
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
