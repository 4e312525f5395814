"""The Linux system calls the hook needs and Python's os module lacks, through ctypes:
mount(2) and umount2 (for /proc/driver/nvidia, gpunode.hook.procdriver)."""

from __future__ import annotations

import ctypes
import os

# mount(2) flags
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _b(s: str | None) -> bytes | None:
    return None if s is None else os.fsencode(s)


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None):
    _check(
        _libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)),
        f"mount {fstype or source or ''} on {target}",
    )


def umount2(target: str, flags: int) -> None:
    _check(_libc.umount2(_b(target), flags), f"umount {target}")
