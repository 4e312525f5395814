"""The simulator's /proc/driver/nvidia files, rendered from a profile in the driver's
formats (nv-procfs.c); gpunode.nvidia.procfs reads them (and the real driver's) back."""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .profiles import Gpu, Profile

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
