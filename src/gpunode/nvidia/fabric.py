"""A node's NVSwitch fabric and its fabric manager, as an operator checks them.

An HGX/DGX baseboard (A100, H100, H200) carries NVSwitches; no CUDA program runs on it
(``cudaErrorSystemNotReady``, 802) until NVIDIA's fabric manager (``nv-fabricmanager``,
unit ``nvidia-fabricmanager.service``) of exactly the driver's version has trained the
fabric. What this module reads, all of it what a real node shows:

* the switches on the PCI bus, before or after the driver: vendor 0x10de, class 0x0680xx
  ("other bridge"), a device id of :data:`NVSWITCH_IDS` — gpunode's one table of NVSwitch
  PCI ids (preflight, the driver plan and validation all read it; nothing else may carry a
  copy). Sources (read August 2026; shared/reference/hgx.md section 3): the ids the
  NVSwitch kernel driver accepts (open-gpu-kernel-modules
  ``src/common/nvswitch/kernel/nvswitch.c``): LR10, the A100 generation, 0x1AE8 and
  0x1AF0-0x1AFF (pci.ids: 0x1af1 "GA100 [A100 NVSwitch]"); LS10, the H100/H200
  generation, 0x22A0-0x22A7 for the management endpoint, one per switch (pci.ids: 0x22a3
  "GH100 [H100 NVSwitch]"). LS10's other functions (0x22A8-0x22AB PCI-PCI bridge,
  0x22AC-0x22AF non-transparent bridge) are not switches of their own and are not counted.
  lspci shows the switches as ``Bridge [0680]`` (leptonai/gpud fabric-manager testdata).
  The boards carry 6 (A100) and 4 (H100/H200). Fourth-generation switches (B200, NVLink5)
  have no id in pci.ids or in the driver's list; such a board is known by its GPUs
  (:data:`NVLINK5_GPUS`: pci.ids 10de:2901 "GB100 [B200]", also what
  aws-parallelcluster-cookbook counts) and needs nvlsm and the InfiniBand stack besides FM;
* the switches the driver registered: ``/proc/driver/nvidia-nvswitch/devices/<address>``
  (the test NVIDIA's driver container starts FM by);
* the unit's state (``systemctl is-active``), the installed fabric manager package
  (``nvidia-fabricmanager``, ``nvidia-fabricmanager-<branch>``; RPM
  ``nvidia-fabric-manager``) and FM's own last words in the journal when it exited (the
  version mismatch, NV_WARN_NOTHING_TO_DO);
* on Hopper and later each GPU's fabric state from NVML (the inventory's ``fabric``).

The judgement (gpunode.nvidia.health.fabric_node / fabric_gpu) fails the node and every
GPU row when the service is not active, the package is missing or not at the loaded
driver's version, the driver registered fewer switches than the bus has, or a Hopper+
GPU's fabric is not COMPLETED with Success. A100 GPUs report no fabric state (NVML answers
NOT_SUPPORTED): their readiness is the service and the switch count.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

NVIDIA_VENDOR = 0x10DE
NVSWITCH_CLASS = 0x0680  # PCI class 0x0680xx: bridge, "other"
# The one table of NVSwitch PCI ids (see the module docstring): (generation, first device
# id, last device id) of each switch's management endpoint.
NVSWITCH_IDS: tuple[tuple[str, int, int], ...] = (
    ("LR10", 0x1AE8, 0x1AE8),
    ("LR10", 0x1AF0, 0x1AFF),
    ("LS10", 0x22A0, 0x22A7),
)
# generation -> (the GPUs of its boards, the switches a board has, the id pci.ids names)
GENERATIONS = {"LR10": ("A100", 6, 0x1AF1), "LS10": ("H100/H200", 4, 0x22A3)}
# GPUs whose boards use fourth-generation NVSwitch (NVLink5): device id -> name (pci.ids)
NVLINK5_GPUS: dict[int, str] = {0x2901: "B200"}
UNIT = "nvidia-fabricmanager.service"
PACKAGE_RE = re.compile(r"nvidia-fabric-?manager(-\d+)?")  # not -dev/-devel
PACKAGE_GLOBS = ("nvidia-fabricmanager*", "nvidia-fabric-manager*")
# FM's lines in the journal that say why it exited (hgx.md: both wordings of the mismatch)
FM_EXIT_RE = re.compile(r"driver interface version \S+ do(?:n't|esn't) match|NV_WARN_NOTHING_TO_DO")
_LOG_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)+")  # FM's "[date] [LEVEL] [tid N] "
PROC_SWITCHES = "proc/driver/nvidia-nvswitch/devices"


def generation(device_id: int) -> str | None:
    """The NVSwitch generation of a PCI device id (LR10, LS10), None when it is not one."""
    for gen, lo, hi in NVSWITCH_IDS:
        if lo <= device_id <= hi:
            return gen
    return None


@dataclass
class FabricNode:
    """What the node shows of its NVSwitches and fabric manager (see the module docstring).
    ``None`` where it could not be read (no systemctl, no package manager)."""

    pci: list[tuple[str, int]] = field(default_factory=list)  # (address, device id)
    driver: list[str] | None = None  # /proc/driver/nvidia-nvswitch/devices; None: no tree
    service: str | None = None  # systemctl is-active: active, inactive, failed, ...
    package: tuple[str, str] | None = None  # (name, upstream version) installed
    packages_known: bool = False  # a package manager was asked
    last_words: str | None = None  # FM's exit line from the journal

    @property
    def nvswitch(self) -> bool:
        return bool(self.pci or self.driver)

    @property
    def generation(self) -> str | None:
        gens = {generation(dev) for _, dev in self.pci} - {None}
        return sorted(gens)[0] if gens else None

    def board(self) -> str:
        gen = self.generation
        name = GENERATIONS[gen][0] if gen else "unknown"
        return f"{len(self.pci) or len(self.driver or [])} NVSwitch(es), {name} generation"


def _hex(path: Path) -> int | None:
    try:
        return int(path.read_text().strip(), 16)
    except (OSError, ValueError):
        return None


def pci_functions(root: Path = Path("/")) -> list[tuple[str, int, int]]:
    """NVIDIA's PCI functions in ``<root>/sys/bus/pci/devices``: (address, class, device
    id), by address."""
    base = root / "sys/bus/pci/devices"
    out = []
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for name in entries:
        vendor, klass, device = (_hex(base / name / f) for f in ("vendor", "class", "device"))
        if vendor == NVIDIA_VENDOR and klass is not None and device is not None:
            out.append((name, klass, device))
    return out


def is_switch(klass: int, device: int) -> bool:
    return klass >> 8 == NVSWITCH_CLASS and generation(device) is not None


def pci_switches(root: Path = Path("/")) -> list[tuple[str, int]]:
    """The NVSwitches in PCI sysfs: (address, device id), by address."""
    return [(name, dev) for name, klass, dev in pci_functions(root) if is_switch(klass, dev)]


def nvlink5_gpus(root: Path = Path("/")) -> list[tuple[str, int]]:
    """The GPUs (display/3D class 0x03xxxx) of NVLink5 (B200-class) boards in PCI sysfs."""
    return [(name, dev) for name, klass, dev in pci_functions(root)
            if dev in NVLINK5_GPUS and klass >> 16 == 0x03]  # fmt: skip


def driver_switches(root: Path = Path("/")) -> list[str] | None:
    """The NVSwitches the driver registered, or None when it shows no NVSwitch tree."""
    try:
        return sorted(os.listdir(root / PROC_SWITCHES))
    except OSError:
        return None


def last_words(journal: str) -> str | None:
    """FM's last line in ``journal`` that says why it exited, or None."""
    found = None
    for line in journal.splitlines():
        if FM_EXIT_RE.search(line):
            found = _LOG_PREFIX.sub("", line.strip())
    return found
