"""The Linux system calls the hook needs and Python's os module lacks, through ctypes
(gpunode.util.cabi: _ctypes without ctypes/__init__.py's ~4 ms):
setns, umount2 and the new mount API (fsopen, fsconfig, fsmount, open_tree, move_mount,
mount_setattr), with which gpunode.hook.procdriver makes and attaches mounts by fd, never
through a ``/proc/self/fd`` path (which does not resolve from another PID namespace's
procfs, as in a created container's mount namespace). Linux >= 5.12."""

from __future__ import annotations

import errno
import os

from ..util import cabi as ctypes

MNT_DETACH = 2
CLONE_NEWNS = 0x00020000

AT_SYMLINK_NOFOLLOW = 0x100
AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
# linux/mount.h
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x04
MOVE_MOUNT_T_EMPTY_PATH = 0x40
FSOPEN_CLOEXEC = FSMOUNT_CLOEXEC = 1
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_CREATE = 6
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
MOUNT_ATTR_LOCKED_DOWN = (
    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC
)

# The same numbers on every architecture (the generic table, added in 5.2 and 5.12).
_NR = {
    "open_tree": 428,
    "move_mount": 429,
    "fsopen": 430,
    "fsconfig": 431,
    "fsmount": 432,
    "mount_setattr": 442,
}


class _Libc:
    """The libc functions used here, errno kept (ctypes.CDLL(None, use_errno=True)'s)."""

    syscall = ctypes.libc_function("syscall", ctypes.c_long)
    umount2 = ctypes.libc_function("umount2")
    setns = ctypes.libc_function("setns")


_libc = _Libc


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            raise OSError(err, f"{what}: the kernel lacks it (Linux 5.12+ is needed)")
        raise OSError(err, f"{what}: {os.strerror(err)}")
    return ret


def _b(s: str | None) -> bytes | None:
    return None if s is None else os.fsencode(s)


def _syscall(name: str, *args) -> int:
    return _check(_libc.syscall(_NR[name], *args), name)


def umount2(target: str, flags: int) -> None:
    _check(_libc.umount2(_b(target), flags), f"umount {target}")


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]


def mount_setattr(fd: int, set_flags: int) -> None:
    """Set MOUNT_ATTR_* flags on the mount at ``fd`` (attached or detached)."""
    attr = _MountAttr(set_flags, 0, 0, 0)
    _syscall(
        "mount_setattr",
        ctypes.c_int(fd),
        b"",
        ctypes.c_uint(AT_EMPTY_PATH),
        ctypes.byref(attr),
        ctypes.c_size_t(ctypes.sizeof(attr)),
    )


def open_tree_clone(dir_fd: int) -> int:
    """A detached bind mount of the directory ``dir_fd``; the fd is close-on-exec."""
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW
    return _syscall("open_tree", ctypes.c_int(dir_fd), b"", ctypes.c_uint(flags))


def move_mount(from_fd: int, to_fd: int) -> None:
    """Attach (or move) the mount at ``from_fd`` onto the directory ``to_fd``."""
    _syscall(
        "move_mount",
        ctypes.c_int(from_fd),
        b"",
        ctypes.c_int(to_fd),
        b"",
        ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH),
    )


def new_fs_mount(fstype: str, options: dict[str, str], attrs: int) -> int:
    """A new, detached mount of a ``fstype`` filesystem (fsopen, fsconfig, fsmount) with
    mount attributes ``attrs``; returns its fd (close-on-exec)."""
    fs = _syscall("fsopen", _b(fstype), ctypes.c_uint(FSOPEN_CLOEXEC))
    try:
        for key, value in options.items():
            _syscall(
                "fsconfig",
                ctypes.c_int(fs),
                ctypes.c_uint(FSCONFIG_SET_STRING),
                _b(key),
                _b(value),
                ctypes.c_int(0),
            )
        _syscall("fsconfig", ctypes.c_int(fs), ctypes.c_uint(FSCONFIG_CMD_CREATE), None, None, 0)
        return _syscall(
            "fsmount", ctypes.c_int(fs), ctypes.c_uint(FSMOUNT_CLOEXEC), ctypes.c_uint(attrs)
        )
    finally:
        os.close(fs)
