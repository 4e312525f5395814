"""A node's NVSwitch fabric and its fabric manager, as an operator checks them.

An HGX/DGX baseboard (A100, H100, H200) carries NVSwitches; no CUDA program runs on it
(``cudaErrorSystemNotReady``, 802) until NVIDIA's fabric manager (``nv-fabricmanager``,
unit ``nvidia-fabricmanager.service``) of exactly the driver's version has trained the
fabric. What this module reads, all of it what a real node shows:

* the switches on the PCI bus: vendor 0x10de, class 0x0680xx ("other bridge"), a device id
  the NVSwitch driver accepts: LR10, the A100 generation (0x1ae8, 0x1af0-0x1aff; pci.ids
  names 0x1af1 "GA100 [A100 NVSwitch]"), or LS10's management endpoints, the H100/H200
  generation (0x22a0-0x22a7; 0x22a3 "GH100 [H100 NVSwitch]") (open-gpu-kernel-modules
  ``src/common/nvswitch/kernel/nvswitch.c``); the boards carry 6 (A100) and 4 (H100/H200);
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

NVIDIA_VENDOR = "0x10de"
NVSWITCH_CLASS = "0x0680"
LR10_IDS = frozenset({0x1AE8, *range(0x1AF0, 0x1B00)})  # A100 generation
LS10_IDS = frozenset(range(0x22A0, 0x22A8))  # H100/H200 generation, management endpoints
GENERATIONS = {"LR10": ("A100", 6), "LS10": ("H100/H200", 4)}  # GPUs, switches a board has
UNIT = "nvidia-fabricmanager.service"
PACKAGE_RE = re.compile(r"nvidia-fabric-?manager(-\d+)?")  # not -dev/-devel
PACKAGE_GLOBS = ("nvidia-fabricmanager*", "nvidia-fabric-manager*")
# FM's lines in the journal that say why it exited (hgx.md: both wordings of the mismatch)
FM_EXIT_RE = re.compile(r"driver interface version \S+ do(?:n't|esn't) match|NV_WARN_NOTHING_TO_DO")
_LOG_PREFIX = re.compile(r"^(?:\[[^\]]*\]\s*)+")  # FM's "[date] [LEVEL] [tid N] "
PROC_SWITCHES = "proc/driver/nvidia-nvswitch/devices"


def generation(device_id: int) -> str | None:
    if device_id in LR10_IDS:
        return "LR10"
    if device_id in LS10_IDS:
        return "LS10"
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


def pci_switches(root: Path = Path("/")) -> list[tuple[str, int]]:
    """The NVSwitches in PCI sysfs, by address."""
    base = root / "sys/bus/pci/devices"
    out = []
    try:
        entries = sorted(os.listdir(base))
    except OSError:
        return out
    for name in entries:
        try:
            vendor = (base / name / "vendor").read_text().strip().lower()
            klass = (base / name / "class").read_text().strip().lower()
            device = int((base / name / "device").read_text().strip(), 16)
        except (OSError, ValueError):
            continue
        if vendor == NVIDIA_VENDOR and klass.startswith(NVSWITCH_CLASS) and generation(device):
            out.append((name, device))
    return out


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
