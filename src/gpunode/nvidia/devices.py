"""The driver's device nodes: their numbers, which control nodes each capability needs, and
the one stat of a node on the host."""

from __future__ import annotations

import os
import stat

from ..util.record import record

NVIDIA_MAJOR = 195  # the GPUs (minor = the GPU's minor number) and the control nodes
CTL_MINOR = 255  # /dev/nvidiactl
MODESET_MINOR = 254  # /dev/nvidia-modeset
# Control nodes a container gets: always, and per driver capability. nvidia-uvm has a
# dynamic major, so it is stat'ed, never assumed.
CONTROL_NODES = {
    "always": ("/dev/nvidiactl",),
    "compute": ("/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"),
    "display": ("/dev/nvidia-modeset",),
}


def gpu_node(minor: int) -> str:
    """The device node of the GPU with this minor number."""
    return f"/dev/nvidia{minor}"


def under(root: str, path: str) -> str:
    """``path`` (absolute) as seen on the host when its root is ``root``."""
    return path if root in ("", "/") else os.path.join(root, path.lstrip("/"))


@record(frozen=True)
class Device:
    """A character device: where a container sees it, and where it is on the host."""

    path: str  # in the container
    host_path: str
    major: int
    minor: int
    mode: int
    uid: int = 0
    gid: int = 0


def stat_device(path: str, dev_root: str = "/") -> Device | None:
    """Stat a character device on the host; None when missing or not a char device."""
    host = under(dev_root, path)
    try:
        st = os.stat(host)
    except OSError:
        return None
    if not stat.S_ISCHR(st.st_mode):
        return None
    return Device(
        path,
        host,
        os.major(st.st_rdev),
        os.minor(st.st_rdev),
        stat.S_IMODE(st.st_mode),
        st.st_uid,
        st.st_gid,
    )


def is_gpu_node(st: os.stat_result, minor: int | None = None) -> bool:
    """Whether ``st`` is a GPU's device node (of GPU ``minor`` when given)."""
    return (
        stat.S_ISCHR(st.st_mode)
        and os.major(st.st_rdev) == NVIDIA_MAJOR
        and (minor is None or os.minor(st.st_rdev) == minor)
    )
