"""The node's NVIDIA PCI functions as the kernel shows them in ``/sys/bus/pci/devices``.

NVIDIA's tools find GPUs there, not through NVML: ``nvidia-ctk system
create-dev-char-symlinks --create-all`` counts them (go-nvlib's nvpci: every entry's
``vendor``, then for NVIDIA's ``class``, ``device``, ``numa_node``, ``subsystem_*``,
``driver``, ``iommu_group``, ``resource``), NVIDIA's device plugin reads a GPU's
``numa_node`` for its topology hints, and gpunode's preflight looks for vendor 0x10de with a
display class. A simulated node's sysfs is the host kernel's, so :mod:`gpunode.sim.apply`
mounts a tmpfs over the node's ``/sys/bus/pci/devices`` holding

* the kernel's entries (symlinks into ``/sys/devices``, copied as the kernel made them),
  except the host's own NVIDIA functions (the host's GPUs are not this node's) and any at
  an address the profile gives a GPU (the node's PCI bus is the profile's there);
* a directory per GPU and per NVSwitch its NVLinks reach (gpunode.sim.profiles
  ``nvlink_peers``) with the attribute files rendered here.

The kernel's entries are symlinks to the device's directory in the PCI tree
(``/sys/devices/pci0000:00/…``); the simulator's are plain directories, since the host's
``/sys/devices`` cannot gain entries. Readers that open ``<entry>/<attribute>`` (all of
the above) cannot tell. ``driver`` is the kernel's symlink to ``/sys/bus/pci/drivers/nvidia``,
which the host, without NVIDIA's module, lacks: ``readlink`` names the driver, resolving it
fails as for an unbound function (nvpci then reports no driver). The tree above the GPUs
(host bridges, switches) is the profile's (``pci_switches``), answered by NVML, not shown
here. Containers of the node get their own sysfs and see the host's entries only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ..nvidia.busid import BusId
from .profiles import NVSWITCH_CLASS, Gpu, Profile, nvswitches

NVIDIA_VENDOR = 0x10DE
# Data-center GPUs are 3D controllers (display-capable boards: 0x030000, VGA); NVML's
# nvmlDeviceGetPciInfoExt in the mock says the same.
GPU_CLASS = 0x030200
REVISION = 0xA1
DRIVER_LINK = "../../drivers/nvidia"  # from /sys/bus/pci/devices/<address>/
# GT/s per PCIe generation, as the kernel writes {current,max}_link_speed
LINK_SPEEDS = {1: "2.5", 2: "5.0", 3: "8.0", 4: "16.0", 5: "32.0", 6: "64.0"}
# struct resource flags: memory, size-aligned; 64-bit prefetchable
MEM32 = 0x00040200
MEM64_PREFETCH = 0x0014220C
RESOURCE_LINES = 13  # 6 BARs, the ROM, the SR-IOV and bridge windows


@dataclass(frozen=True)
class Function:
    """One PCI function the simulated driver owns: its address and attribute files."""

    address: str  # the kernel's form, the entry's name: 0000:07:00.0
    files: dict[str, str]
    config: bytes


def _bar_base(bus: BusId) -> int:
    # 2 TiB of address space per bus number (a GPU has a bus of its own): the registers'
    # BARs at the start, the framebuffer's (up to 1 TiB) in the upper half
    return (1 << 48) + (bus.bus << 41) + (bus.device << 34)


def _resource(bars: list[tuple[int, int, int]]) -> str:
    """The ``resource`` file: start, end, flags per line; unused lines are zero."""
    lines = []
    by_index = {index: (start, size, flags) for index, (start, size, flags) in enumerate(bars)}
    for i in range(RESOURCE_LINES):
        start, size, flags = by_index.get(i, (0, 0, 0))
        end = start + size - 1 if size else 0
        lines.append(f"0x{start:016x} 0x{end:016x} 0x{flags:016x}")
    return "\n".join(lines) + "\n"


def _config(
    device: int, klass: int, sub_vendor: int, sub_device: int, bars: list, irq: int
) -> bytes:
    """The first 256 bytes of the function's configuration space (type 0 header, no
    capability list): what ``config`` reads and lspci decodes."""
    data = bytearray(256)
    struct.pack_into("<HHHH", data, 0, NVIDIA_VENDOR, device, 0x0006, 0x0000)  # mem, master
    struct.pack_into("<I", data, 8, (klass << 8) | REVISION)
    for i, (start, size, flags) in enumerate(bars):
        if not size:
            continue
        low = start & 0xFFFFFFF0 | (0xC if flags == MEM64_PREFETCH else 0x0)
        struct.pack_into("<I", data, 0x10 + 4 * i, low)
        if flags == MEM64_PREFETCH:
            struct.pack_into("<I", data, 0x10 + 4 * (i + 1), start >> 32)
    struct.pack_into("<HH", data, 0x2C, sub_vendor, sub_device)
    struct.pack_into("<BB", data, 0x3C, irq & 0xFF, 1)  # interrupt line, pin INTA
    return bytes(data)


def _function(
    bus: BusId,
    device: int,
    klass: int,
    subsystem: int,
    numa_node: int,
    irq: int,
    bars: list[tuple[int, int, int]],
    link: tuple[int, int, int, int] | None,
) -> Function:
    sub_vendor, sub_device = subsystem & 0xFFFF, subsystem >> 16  # NVML's pciSubSystemId
    modalias = (
        f"pci:v{NVIDIA_VENDOR:08X}d{device:08X}sv{sub_vendor:08X}sd{sub_device:08X}"
        f"bc{klass >> 16:02X}sc{(klass >> 8) & 0xFF:02X}i{klass & 0xFF:02X}"
    )
    files = {
        "vendor": f"0x{NVIDIA_VENDOR:04x}",
        "device": f"0x{device:04x}",
        "subsystem_vendor": f"0x{sub_vendor:04x}",
        "subsystem_device": f"0x{sub_device:04x}",
        "class": f"0x{klass:06x}",
        "revision": f"0x{REVISION:02x}",
        "numa_node": str(numa_node),
        "irq": str(irq),
        "enable": "1",
        "modalias": modalias,
        "uevent": "\n".join(
            [
                "DRIVER=nvidia",
                f"PCI_CLASS={klass:X}",
                f"PCI_ID={NVIDIA_VENDOR:04X}:{device:04X}",
                f"PCI_SUBSYS_ID={sub_vendor:04X}:{sub_device:04X}",
                f"PCI_SLOT_NAME={bus.procfs}",
                f"MODALIAS={modalias}",
            ]
        ),
    }
    if link:
        gen, gen_max, width, width_max = link
        files |= {
            "current_link_speed": f"{LINK_SPEEDS.get(gen, '2.5')} GT/s PCIe",
            "max_link_speed": f"{LINK_SPEEDS.get(gen_max, '2.5')} GT/s PCIe",
            "current_link_width": str(width),
            "max_link_width": str(width_max),
        }
    files = {name: text + "\n" for name, text in files.items()}
    files["resource"] = _resource(bars)
    config = _config(device, klass, sub_vendor, sub_device, bars, irq)
    return Function(bus.procfs, files, config)


def gpu_function(gpu: Gpu) -> Function:
    base = _bar_base(gpu.bus_id)
    bar1 = 1 << max(28, (gpu.memory_mib * 1024 * 1024 - 1).bit_length())  # >= the memory
    bars = [
        (base, 16 << 20, MEM32),  # BAR0: registers
        (base + (1 << 40), bar1, MEM64_PREFETCH),  # BAR1 (+ the upper half): the framebuffer
        (0, 0, 0),
        (base + (1 << 32), 32 << 20, MEM64_PREFETCH),  # BAR3
    ]
    return _function(
        gpu.bus_id,
        gpu.pci_device_id,
        GPU_CLASS,
        gpu.pci_subsystem_id or NVIDIA_VENDOR,
        gpu.numa_node,
        gpu.irq,
        bars,
        (gpu.pcie_gen, gpu.pcie_gen, gpu.pcie_trained_width, gpu.pcie_width),
    )


def nvswitch_function(bus: BusId, device: int, numa_node: int) -> Function:
    bars = [(_bar_base(bus), 32 << 20, MEM32)]
    return _function(bus, device, NVSWITCH_CLASS, NVIDIA_VENDOR, numa_node, 0, bars, None)


def functions(profile: Profile) -> list[Function]:
    """Every NVIDIA PCI function of the profile's node, by address: its GPUs and the
    NVSwitches they link to."""
    out = [gpu_function(g) for g in profile.gpus]
    out += [nvswitch_function(bus, device, numa) for bus, device, numa in nvswitches(profile)]
    return sorted(out, key=lambda f: f.address)
