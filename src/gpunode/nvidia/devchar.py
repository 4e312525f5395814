"""The ``/dev/char/<major>:<minor>`` symlinks of the driver's device nodes.

udev makes these links for the devices it creates; the NVIDIA nodes are made by
nvidia-modprobe (or by hand), so nothing links them. systemd resolves a container's
``DeviceAllow=`` entries through ``/dev/char``: with the systemd cgroup driver, a
``systemctl daemon-reload`` re-applies the device rules of running containers, and every
NVIDIA node without its link is dropped from them — NVML in the container then fails with
"Unknown Error" (NVIDIA's container toolkit notes this; its fix is the same links,
``nvidia-ctk system create-dev-char-symlinks``).
"""

from __future__ import annotations

import contextlib
import os
import stat

CHAR_DIR = "char"  # under /dev


def driver_nodes(dev_root: str = "/dev") -> list[tuple[str, int, int]]:
    """(path, major, minor) of every NVIDIA character device under ``dev_root``, sorted."""
    found = []
    for sub in ("", "nvidia-caps"):
        base = os.path.join(dev_root, sub) if sub else dev_root
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for name in names:
            if not name.startswith("nvidia"):
                continue
            path = os.path.join(base, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISCHR(st.st_mode):
                found.append((path, os.major(st.st_rdev), os.minor(st.st_rdev)))
    return sorted(found)


def link_path(dev_root: str, major: int, minor: int) -> str:
    return os.path.join(dev_root, CHAR_DIR, f"{major}:{minor}")


def _points_at(link: str, target: str) -> bool:
    try:
        return os.path.samefile(link, target) and os.path.islink(link)
    except OSError:
        return False


def missing(dev_root: str = "/dev") -> list[tuple[str, str]]:
    """(link, node) for every driver node whose /dev/char link is absent or points
    elsewhere."""
    return [
        (link_path(dev_root, major, minor), path)
        for path, major, minor in driver_nodes(dev_root)
        if not _points_at(link_path(dev_root, major, minor), path)
    ]


def create(dev_root: str = "/dev", *, dry_run: bool = False) -> list[str]:
    """Make the missing links (relative, as udev makes them: ``../nvidia0``), each replaced
    atomically (a temporary link renamed over); the links made, in order."""
    made = []
    for link, node in missing(dev_root):
        made.append(link)
        if dry_run:
            continue
        os.makedirs(os.path.dirname(link), mode=0o755, exist_ok=True)
        target = os.path.relpath(node, os.path.dirname(link))
        tmp = f"{link}.gpunode-{os.getpid()}"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        os.symlink(target, tmp)
        os.replace(tmp, link)
    return made
