"""The driver's identity on this node: what changes when the NVIDIA driver changes.

The driver root, the version in ``/proc/driver/nvidia/version`` (the loaded kernel
module) and the identity (device, inode, mtime, size) of ``libnvidia-ml.so.1`` and of
``/etc/ld.so.cache``. Discovery's inventory cache (gpunode.runtime.discovery) and the
prepared edits (gpunode.runtime.prepared) are both keyed on it. Kept apart from
discovery so a GPU create served from prepared edits computes it without importing
discovery.
"""

from __future__ import annotations

import os

from ..nvidia.devices import under
from ..nvidia.procfs import parse_version

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any

NVML_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib")


def ident(path: str) -> list[int] | None:
    """(device, inode, mtime in ns, size) of `path` (symlinks followed), None if missing."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size]


def cache_key(driver_root: str = "/") -> dict[str, Any]:
    try:
        with open(under(driver_root, "/proc/driver/nvidia/version")) as fh:
            kernel = parse_version(fh.readline())
    except OSError:
        kernel = None
    # Only an identity to compare: a plain stat, no symlink walk inside the driver root.
    nvml = next(
        (p for d in NVML_DIRS if os.path.exists(p := under(driver_root, f"{d}/libnvidia-ml.so.1"))),
        None,
    )
    return {
        "driver_root": driver_root,
        "kernel_driver": kernel,
        "nvml": ident(nvml) if nvml else None,
        "ldcache": ident(under(driver_root, "/etc/ld.so.cache")),
    }
