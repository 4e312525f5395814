"""The simulator's /proc files, rendered from a profile in the kernel's and the driver's
formats: /proc/driver/nvidia (nv-procfs.c; gpunode.nvidia.procfs reads them, and the real
driver's, back) and /proc/devices with the majors a loaded driver registers."""

from __future__ import annotations

import re

from ..nvidia.devices import NVIDIA_MAJOR
from ..util.command import OperationError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .profiles import Gpu, Profile

# nvidia-caps (registered by nvidia.ko) and nvidia-uvm (nvidia-uvm.ko, loaded after it) ask
# the kernel for dynamic majors (alloc_chrdev_region). The kernel hands out 254 down to 234
# first, then 511 down to 384 (fs/char_dev.c, find_dynamic_major). Which of the first range
# are free differs per host (its own drivers hold some, and a node shows the host's
# /proc/devices), so the simulator takes the first two of the second range, in load order:
# no host driver holds them unless the first range is used up (a collision is an error),
# and the node container's device-cgroup rules (cluster.node_settings) can name them. The
# driver's other regions (nvidia-nvlink, nvidia-nvswitch, nvidia-caps-imex-channels) are not
# simulated.
CAPS_MAJOR = 511
UVM_MAJOR = 510
# From the 545 branch on, the driver registers its GPUs, NVKMS and the control device as
# "nvidia", "nvidia-modeset" and "nvidiactl" (kernel-open/nvidia/nv.c, nvidia-modeset-linux.c);
# before, all of major 195 was one "nvidia-frontend" (NVIDIA's 550.40.07 notes: 'Changed the
# name visible in /proc/devices ... from "nvidia-frontend" to "nvidia" and "nvidiactl"';
# first seen in 545.29.02). NVIDIA's container toolkit accepts either name for major 195.
RENAMED_IN_BRANCH = 545

_DEVICES_LINE = re.compile(r" *(\d+) (\S.*)")


class DevicesError(OperationError, RuntimeError):
    """The kernel's /proc/devices cannot take the simulated driver's lines."""


# The leading integer parameters of a real driver's params file, in the driver's order
# (nvidia-modprobe reads only these leading "Key: int" lines, so order matters).
PARAMS: list[tuple[str, str]] = [
    ("ResmanDebugLevel", "4294967295"),
    ("RmLogonRC", "1"),
    ("ModifyDeviceFiles", "1"),
    ("DeviceFileUID", "0"),
    ("DeviceFileGID", "0"),
    ("DeviceFileMode", "438"),
    ("InitializeSystemMemoryAllocations", "1"),
    ("UsePageAttributeTable", "4294967295"),
    ("EnableMSI", "1"),
    ("EnablePCIeGen3", "0"),
    ("MemoryPoolSize", "0"),
    ("KMallocHeapMaxSize", "0"),
    ("VMallocHeapMaxSize", "0"),
    ("IgnoreMMIOCheck", "0"),
    ("TCEBypassMode", "0"),
    ("EnableStreamMemOPs", "0"),
    ("EnableUserNUMAManagement", "1"),
    ("NvLinkDisable", "0"),
    ("RmProfilingAdminOnly", "1"),
    ("PreserveVideoMemoryAllocations", "0"),
    ("EnableS0ixPowerManagement", "0"),
    ("S0ixPowerManagementVideoMemoryThreshold", "256"),
    ("DynamicPowerManagement", "3"),
    ("DynamicPowerManagementVideoMemoryThreshold", "200"),
    ("RegisterPCIDriver", "1"),
    ("EnablePCIERelaxedOrderingMode", "0"),
    ("EnableResizableBar", "0"),
    ("EnableGpuFirmware", "18"),
    ("EnableGpuFirmwareLogs", "2"),
    ("EnableDbgBreakpoint", "0"),
    ("OpenRmEnableUnsupportedGpus", "1"),
    ("DmaRemapPeerMmio", "1"),
    ("RegistryDwords", '""'),
    ("RegistryDwordsPerDevice", '""'),
    ("RmMsg", '""'),
    ("GpuBlacklist", '""'),
    ("TemporaryFilePath", '""'),
    ("ExcludedGpus", '""'),
]


def render_version(profile: Profile) -> str:
    assert profile.driver is not None
    v = profile.driver.version
    if profile.driver.kernel_module == "open":
        nvrm = (
            f"NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build  "
            "(pbuilder@debian)  Thu Jan  1 00:00:00 UTC 2026"
        )
    else:
        nvrm = f"NVIDIA UNIX x86_64 Kernel Module  {v}  Thu Jan  1 00:00:00 UTC 2026"
    return f"NVRM version: {nvrm}\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14+deb12u1) \n"


def render_params(modify_device_files: bool = True) -> str:
    lines = []
    for key, value in PARAMS:
        if key == "ModifyDeviceFiles":
            value = "1" if modify_device_files else "0"
        lines.append(f"{key}: {value}")
    return "\n".join(lines) + "\n"


def render_information(gpu: Gpu, profile: Profile) -> str:
    # Labels with the exact spacing nv-procfs.c prints (tabs and spaces differ per key).
    rows = [
        ("Model: \t\t ", gpu.model),
        ("IRQ:   \t\t ", str(gpu.irq)),
        ("GPU UUID: \t ", gpu.uuid),
        ("Video BIOS: \t ", gpu.vbios.lower()),
        ("Bus Type: \t ", "PCIe"),
        ("DMA Size: \t ", "47 bits"),
        ("DMA Mask: \t ", "0x7fffffffffff"),
        ("Bus Location: \t ", gpu.bus_id.procfs),
        ("Device Minor: \t ", str(gpu.minor)),
    ]
    if profile.driver is not None and profile.driver.kernel_module == "open":
        rows.append(("GPU Firmware: \t ", profile.driver.version))
    rows.append(("GPU Excluded:\t ", "No"))
    return "".join(f"{label}{value}\n" for label, value in rows)


def driver_chrdevs(profile: Profile) -> list[tuple[int, str]]:
    """The character-device regions a loaded driver of this profile registers, as
    (major, name) in the order /proc/devices lists them (by major, then first minor)."""
    if profile.driver is None:
        return []
    if int(profile.driver.version.split(".")[0]) >= RENAMED_IN_BRANCH:
        gpu = [
            (NVIDIA_MAJOR, "nvidia"),
            (NVIDIA_MAJOR, "nvidia-modeset"),
            (NVIDIA_MAJOR, "nvidiactl"),
        ]
    else:
        gpu = [(NVIDIA_MAJOR, "nvidia-frontend")]
    return [*gpu, (UVM_MAJOR, "nvidia-uvm"), (CAPS_MAJOR, "nvidia-caps")]


def render_devices(kernel: str, chrdevs: list[tuple[int, str]]) -> str:
    """The kernel's /proc/devices text with the driver's character devices added.

    The kernel's format (fs/proc/devices.c): "Character devices:", one "%3d %s" line per
    registered region in major order, a blank line, "Block devices:" and its lines. The
    kernel's own lines are kept as they are.
    """
    lines = kernel.split("\n")
    try:
        start = lines.index("Character devices:")
        blank = lines.index("", start)
    except ValueError:
        raise DevicesError(
            "the kernel's /proc/devices has no 'Character devices:' section ended by a blank "
            "line; cannot add the simulated driver's majors"
        ) from None
    ours = {major for major, _ in chrdevs}
    merged: list[tuple[int, str]] = []
    for line in lines[start + 1 : blank]:
        match = _DEVICES_LINE.fullmatch(line)
        if match is None:
            raise DevicesError(f"the kernel's /proc/devices has a line {line!r} not '%3d name'")
        major, name = int(match[1]), match[2]
        if major in ours or name.startswith("nvidia"):
            raise DevicesError(
                f"the kernel's /proc/devices already has {line.strip()!r}: the simulated driver "
                f"registers majors {', '.join(map(str, sorted(ours)))} and nvidia* names "
                "(is a real NVIDIA driver loaded on the host?)"
            )
        merged.append((major, line))
    merged += [(major, f"{major:3d} {name}") for major, name in chrdevs]
    merged.sort(key=lambda entry: entry[0])  # stable: same-major lines keep their order
    body = [line for _, line in merged]
    return "\n".join(lines[: start + 1] + body + lines[blank:])


# The driver's Xid report per fault (nv.c prints "NVRM: Xid (PCI:%04x:%02x:%02x): %d, ...";
# since the 470 branch with "pid=..., name=..." of the process involved, '<unknown>' when
# none is). A fault that also shows through NVML (a lost GPU, uncorrectable ECC) gets the Xid
# the driver logs when it happens, so the log and NVML tell one story.
XID_OF_FAULT = {
    "fallen_off_bus": (79, "'<unknown>'", "<unknown>", "GPU has fallen off the bus."),
    "ecc_uncorrectable": (48, "4211", "python3", "An uncorrectable double bit error (DBE) has "
                          "been detected on GPU in the framebuffer at partition 0, subpartition 0."),
    "xid_application_error": (13, "4211", "python3", "Graphics SM Warp Exception on (GPC 0, TPC 0, "
                        "SM 0): Out Of Range Address"),
    "xid_error": (74, "'<unknown>'", "<unknown>", "NVLink: fatal error detected on link 3(0x0, "
                   "0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"),
}  # fmt: skip


def render_kmsg(profile: Profile) -> str:
    """The kernel log a node with this driver shows, as /dev/kmsg records
    (``prio,seq,usec,flags;text``): the driver's load line, then an Xid per fault that the
    driver reports (XID_OF_FAULT), GPUs in bus order."""
    assert profile.driver is not None
    records = [(6, f"NVRM: loading {render_version(profile).splitlines()[0][len('NVRM version: '):]}")]
    for gpu in sorted(profile.gpus, key=lambda g: g.bus_id.nvml):
        b = gpu.bus_id
        where = f"PCI:{b.domain:04x}:{b.bus:02x}:{b.device:02x}"
        for fault in sorted(gpu.faults & XID_OF_FAULT.keys()):
            code, pid, name, text = XID_OF_FAULT[fault]
            records.append((4, f"NVRM: Xid ({where}): {code}, pid={pid}, name={name}, {text}"))
    return "".join(
        f"{prio},{seq},{5_000_000 + 1_000_000 * seq},-;{text}\n"
        for seq, (prio, text) in enumerate(records)
    )
