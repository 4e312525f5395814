"""The Linux system calls the hook needs and Python's os module lacks, through ctypes:
mount(2), umount2, unshare, setns, pivot_root, the new mount API (fsopen, fsconfig, fsmount,
open_tree, move_mount, mount_setattr: mounts made and moved by fd, without /proc/self/fd
paths), execveat, prctl, capset, and the seccomp filter for the confined ldconfig (see
gpunode.hook.ldcache)."""

from __future__ import annotations

import ctypes
import errno
import os
import struct

# mount(2) flags
MS_RDONLY = 0x1
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_NOEXEC = 0x8
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

AT_EMPTY_PATH = 0x1000
AT_RECURSIVE = 0x8000
AT_SYMLINK_NOFOLLOW = 0x100
# the new mount API (linux/mount.h)
OPEN_TREE_CLONE = 1
OPEN_TREE_CLOEXEC = os.O_CLOEXEC
MOVE_MOUNT_F_EMPTY_PATH = 0x04
MOVE_MOUNT_T_EMPTY_PATH = 0x40
FSOPEN_CLOEXEC = FSMOUNT_CLOEXEC = 1
FSCONFIG_SET_STRING = 1
FSCONFIG_CMD_CREATE = 6
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# Syscall numbers: (x86_64, aarch64); None where the architecture has no such call.
_NR = {
    "execveat": (322, 281),
    # Every call below is denied (EPERM) to ldconfig by the seccomp filter: whatever could
    # reach beyond the container root (file handles, mounts, namespaces, other processes,
    # the kernel), and process creation (ldconfig is a single process).
    "open_by_handle_at": (304, 265),
    "name_to_handle_at": (303, 264),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "mount_setattr": (442, 442),
    "chroot": (161, 51),
    "unshare": (272, 97),
    "setns": (308, 268),
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "bpf": (321, 280),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "reboot": (169, 142),
    "fork": (57, None),
    "vfork": (58, None),
    "clone": (56, 220),
    "clone3": (435, 435),
}
_SECCOMP_DENY = tuple(n for n in _NR if n != "execveat")
_MACHINE = os.uname().machine
_ARCH_INDEX = {"x86_64": 0, "aarch64": 1}.get(_MACHINE)
_AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}.get(_MACHINE)
X32_SYSCALL_BIT = 0x40000000

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


def unshare(flags: int) -> None:
    _check(_libc.unshare(flags), "unshare")


def _nr(name: str) -> int:
    nr = None if _ARCH_INDEX is None else _NR[name][_ARCH_INDEX]
    if nr is None:
        raise OSError(errno.ENOSYS, f"{name}: unsupported architecture {_MACHINE}")
    return nr


def _syscall(name: str, *args) -> int:
    return _check(_libc.syscall(_nr(name), *args), name)


def pivot_root(new_root: str, put_old: str) -> None:
    _syscall("pivot_root", _b(new_root), _b(put_old))


class _MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]


def mount_setattr(fd: int, set_flags: int, recursive: bool = False) -> None:
    """Set MOUNT_ATTR_* flags on the mount at ``fd`` (attached or detached); with
    ``recursive`` on every mount below it too, each keeping its other flags."""
    attr = _MountAttr(set_flags, 0, 0, 0)
    try:
        _syscall(
            "mount_setattr",
            ctypes.c_int(fd),
            b"",
            ctypes.c_uint(AT_EMPTY_PATH | (AT_RECURSIVE if recursive else 0)),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
    except OSError as exc:
        if exc.errno == errno.ENOSYS:
            raise OSError(
                errno.ENOSYS, "mount_setattr: the kernel lacks it (Linux 5.12+)"
            ) from None
        raise


MOUNT_ATTR_LOCKED_DOWN = (
    MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC
)


def make_tree_readonly(fd: int) -> None:
    """Make the mount at ``fd`` and every mount below it read-only, nosuid, nodev and
    noexec: mount_setattr(AT_RECURSIVE), per mount (the host's mounts keep their flags)."""
    mount_setattr(fd, MOUNT_ATTR_LOCKED_DOWN, recursive=True)


def setns(fd: int, nstype: int) -> None:
    _check(_libc.setns(ctypes.c_int(fd), ctypes.c_int(nstype)), "setns")


def open_tree_clone(dir_fd: int, path: str = "") -> int:
    """A detached bind mount of ``path`` under ``dir_fd`` (of ``dir_fd`` itself when
    ``path`` is empty), never following a last symlink; the fd is close-on-exec."""
    flags = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_SYMLINK_NOFOLLOW
    if not path:
        flags |= AT_EMPTY_PATH
    return _syscall("open_tree", ctypes.c_int(dir_fd), _b(path), ctypes.c_uint(flags))


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


def execveat_empty(fd: int, argv: list[str], envp: list[str]) -> None:
    """execveat(fd, "", argv, envp, AT_EMPTY_PATH): exec an fd without needing /proc."""
    c_argv = (ctypes.c_char_p * (len(argv) + 1))(*[os.fsencode(a) for a in argv], None)
    c_envp = (ctypes.c_char_p * (len(envp) + 1))(*[os.fsencode(e) for e in envp], None)
    _syscall("execveat", ctypes.c_int(fd), b"", c_argv, c_envp, ctypes.c_int(AT_EMPTY_PATH))


def prctl(option: int, arg2: int = 0, arg3: int = 0) -> None:
    _check(
        _libc.prctl(
            ctypes.c_int(option),
            ctypes.c_ulong(arg2),
            ctypes.c_ulong(arg3),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        ),
        f"prctl({option})",
    )


def drop_privileges(uid: int, gid: int) -> None:
    """Become ``uid``:``gid`` with no supplementary groups and no capability in any set
    (bounding, permitted, effective, inheritable, ambient), and set no_new_privs."""
    for cap in range(64):  # the bounding set first: dropping it needs CAP_SETPCAP
        if _libc.prctl(PR_CAPBSET_DROP, ctypes.c_ulong(cap), 0, 0, 0) < 0:
            if ctypes.get_errno() == errno.EINVAL:  # beyond CAP_LAST_CAP
                break
            _check(-1, f"drop capability {cap}")
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)  # clears permitted and effective (no SECBIT_KEEP_CAPS)

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]

    hdr = Header(_LINUX_CAPABILITY_VERSION_3, 0)
    _check(_libc.capset(ctypes.byref(hdr), (Data * 2)()), "capset")  # inheritable too
    prctl(PR_SET_NO_NEW_PRIVS, 1)


def seccomp_program(arch: int | None = None, index: int | None = None) -> bytes:
    """The classic BPF filter: kill on a foreign architecture, EPERM for x32 calls and
    every call in _SECCOMP_DENY, allow the rest."""
    arch = _AUDIT_ARCH if arch is None else arch
    index = _ARCH_INDEX if index is None else index
    if arch is None or index is None:
        raise OSError(errno.ENOSYS, f"seccomp: unsupported architecture {_MACHINE}")
    ld, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, JGE, BPF_RET|K
    kill, allow, eperm = 0x80000000, 0x7FFF0000, 0x00050000 | errno.EPERM
    nrs = sorted({_NR[n][index] for n in _SECCOMP_DENY} - {None})
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, kill), (ld, 0, 0, 0)]
    if arch == 0xC000003E:  # x32 system calls share the x86_64 audit arch
        prog.append((jge, len(nrs) + 1, 0, X32_SYSCALL_BIT))
    for i, nr in enumerate(nrs):
        prog.append((jeq, len(nrs) - i, 0, nr))  # to the EPERM return after "allow"
    prog += [(ret, 0, 0, allow), (ret, 0, 0, eperm)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def install_seccomp(program: bytes) -> None:
    """prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, program); needs no_new_privs first."""

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    fprog = Fprog(len(program) // 8, program)
    _check(
        _libc.prctl(ctypes.c_int(PR_SET_SECCOMP), ctypes.c_ulong(2), ctypes.byref(fprog), 0, 0),
        "seccomp",
    )
