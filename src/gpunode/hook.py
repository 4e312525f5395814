"""gpunode-hook: the OCI ``createContainer`` hook.

runc runs it inside the container's mount namespace after the rootfs and the spec's
mounts are in place but before pivot_root, so "/" is still the host's view and the
container root is just a directory. Everything under that directory belongs to the
image and may be hostile, hence (see docs, section 7 of the toolkit reference):

* every container path is resolved with ``safepath`` and used as an fd, never as a
  string; mounts go onto ``/proc/self/fd/N``;
* files are written to a temporary name and ``renameat``-ed, relative to a directory fd;
* the hook never consults its own environment (PATH, LD_*); binaries by absolute path.
  It leaves the working directory runc gives it (the container root) at once.

ldconfig is the one program that runs on image input (ld.so.conf, every library's ELF
headers), so it is treated as compromised and confined so that it can neither reach the
host nor write anywhere but into one private tmpfs:

* The host binary runs from a sealed memfd copy, ``execveat(AT_EMPTY_PATH)``, empty
  environment; it must be static (no loader or libc from the image).
* New mount/PID/IPC/UTS/net namespaces; in the private mount namespace the container root
  is bind-mounted recursively and *every* mount of that view (the rootfs, volumes, the
  injected libraries) is made read-only, nosuid, nodev, noexec with
  ``mount_setattr(AT_RECURSIVE)`` -- per mount, so the host's and the container's mounts
  keep their flags. /proc and /sys are covered by empty read-only tmpfs mounts; /dev (or,
  for an odd image, /proc) by a small tmpfs owned by ldconfig's uid, the only writable
  place. Then pivot_root: nothing of the host is in view.
* ldconfig runs as ``ldconfig -X -C /dev/ld.so.cache DIR...``: -X makes no links, -C writes
  the cache into the tmpfs; its aux cache write (/var/cache/ldconfig) fails silently on
  the read-only view. The hook makes the links ldconfig used to make: the SONAME link of
  every injected library (``--link``, SONAMEs read at discovery), before ldconfig runs so
  that it finds them.
* ldconfig is PID 1 of the new PID namespace: when it exits, the kernel kills whatever it
  left behind. Our own (trusted) process in that mount namespace then reads
  ld.so.cache from the tmpfs (a regular file, O_NOFOLLOW, at most LDCACHE_MAX bytes) and
  hands it up through a memfd; the hook writes it as /etc/ld.so.cache with the same
  fd-relative atomic write as every other file.
* Credentials: uid/gid 65534 (nobody/nogroup) with no supplementary groups, every
  capability dropped (bounding, permitted, effective, inheritable, ambient), no_new_privs.
  Not the container's own uid: that is root for most images, and without a user
  namespace the container's root is the host's, which owns every host file a volume can
  show. Reading the container's user namespace mappings would also cost the hook a
  config.json parse on every start. nobody suffices: ldconfig only reads world-readable
  libraries and directories and writes into its own tmpfs. In its private PID namespace
  with no /proc it sees no other nobody process, ptrace is denied, and RLIMIT_NPROC 0
  (set after the uid change) forbids forking.
* A seccomp filter (classic BPF, installed last before the exec) kills the process on a
  foreign architecture and answers EPERM to x32 calls, file handles
  (open_by_handle_at, name_to_handle_at), mounts, pivot_root/chroot, namespaces,
  ptrace/process_vm_*, bpf, keyrings, modules, kexec, perf, userfaultfd, io_uring,
  swap, reboot and process creation. Some of these an unprivileged process may otherwise
  make (name_to_handle_at, keyrings, PTRACE_TRACEME, a user namespace, fork); for the
  others it is a second barrier, should a kernel permission check let nobody through.
* rlimits: 10 s CPU, 2 GiB address space, 64 files, LDCACHE_MAX file size, no core.

Subcommands: ``configure`` (all in one run), ``update-ldcache``, ``create-symlinks``,
``mount-proc-driver``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import os
import resource
import select
import signal
import stat
import struct
import sys
import time

from . import __version__, elf
from .safepath import (
    UnsafePath,
    mkdir_p_in_root,
    open_beneath_no_symlinks,
    proc_fd_path,
)

PROG = "gpunode-hook"
SUBCOMMANDS = ("configure", "update-ldcache", "create-symlinks", "mount-proc-driver")
LDSO_CONF_DROPIN = "00-gpunode.conf"
LDCONFIG_CANDIDATES = ("/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig")
LDCONFIG_TIMEOUT = 30.0
MAX_STATE_BYTES = 1 << 20
MAX_PROC_FILE = 1 << 20

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
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
PR_SET_PDEATHSIG = 1
PR_SET_SECCOMP = 22
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
# ldconfig runs as nobody:nogroup with no capability at all (see the module docstring).
LDCONFIG_UID = LDCONFIG_GID = 65534
LDCACHE_MAX = 16 << 20  # the private tmpfs ldconfig writes into, and what we read back
LDCACHE_NAME = "ld.so.cache"

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
_libc.syscall.restype = ctypes.c_long
_libc.mount.argtypes = [
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_char_p,
    ctypes.c_ulong,
    ctypes.c_char_p,
]


class HookError(Exception):
    """A failure reported as one line on stderr (exit 1)."""


# --------------------------------------------------------------------------- syscalls


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


def make_tree_readonly(fd: int) -> None:
    """Make the mount at ``fd`` and every mount below it read-only, nosuid, nodev and
    noexec: mount_setattr(AT_RECURSIVE), per mount (the host's mounts keep their flags)."""

    class MountAttr(ctypes.Structure):
        _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clr", "propagation", "userns_fd")]

    attr = MountAttr(
        MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, 0, 0, 0
    )
    try:
        _syscall(
            "mount_setattr",
            ctypes.c_int(fd),
            b"",
            ctypes.c_uint(AT_EMPTY_PATH | AT_RECURSIVE),
            ctypes.byref(attr),
            ctypes.c_size_t(ctypes.sizeof(attr)),
        )
    except OSError as exc:
        if exc.errno == errno.ENOSYS:
            raise OSError(
                errno.ENOSYS, "mount_setattr: the kernel lacks it (Linux 5.12+)"
            ) from None
        raise


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


# ------------------------------------------------------------------------ root lookup


def _read_state() -> dict:
    raw = b""
    try:
        while len(raw) <= MAX_STATE_BYTES:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            raw += chunk
    except OSError as exc:
        raise HookError(f"cannot read OCI state from stdin: {exc.strerror}") from None
    if len(raw) > MAX_STATE_BYTES:
        raise HookError("OCI state on stdin is too large")
    if not raw.strip():
        raise HookError("no OCI state on stdin (and no --root given)")
    try:
        import json  # only without --root: the runtime passes it, CDI hooks read the state

        state = json.loads(raw)
    except ValueError as exc:
        raise HookError(f"invalid OCI state JSON on stdin: {exc}") from None
    if not isinstance(state, dict):
        raise HookError("OCI state on stdin is not a JSON object")
    return state


def resolve_rootfs(state: dict) -> str:
    """The container rootfs from the OCI state: ``<bundle>/config.json`` root.path."""
    bundle = state.get("bundle")
    if isinstance(bundle, str) and bundle:
        if not bundle.startswith("/"):
            raise HookError(f"bundle path is not absolute: {bundle!r}")
        try:
            with open(os.path.join(bundle, "config.json"), "rb") as fh:
                import json

                config = json.loads(fh.read(16 << 20))
        except (OSError, ValueError) as exc:
            raise HookError(f"cannot read {bundle}/config.json: {exc}") from None
        root = config.get("root") if isinstance(config, dict) else None
        path = root.get("path") if isinstance(root, dict) else None
        if isinstance(path, str) and path:
            return path if path.startswith("/") else os.path.join(bundle, path)
        raise HookError(f"{bundle}/config.json has no root.path")
    # Some runtimes put the rootfs in the state as "root" (crun); use it only as a fallback.
    root = state.get("root")
    if isinstance(root, str) and root.startswith("/"):
        return root
    raise HookError("OCI state has no bundle")


def open_root(path: str) -> int:
    if "\0" in path or not path.startswith("/"):
        raise HookError(f"container root must be an absolute path: {path!r}")
    try:
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(f"cannot open container root {path}: {exc.strerror}") from None


# -------------------------------------------------------------------- file primitives


def write_file_at(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Atomically (temp name + renameat) write ``name`` in ``dir_fd``; never follows links."""
    tmp = f".{name}.gpunode-{os.urandom(6).hex()}"
    fd = os.open(
        tmp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        mode,
        dir_fd=dir_fd,
    )
    try:
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=dir_fd)
        raise


def _split_container_path(path: str) -> tuple[str, str]:
    if "\0" in path or not path.startswith("/"):
        raise HookError(f"path must be absolute: {path!r}")
    parent, _, name = path.rstrip("/").rpartition("/")
    if name in ("", ".", ".."):
        raise HookError(f"invalid path: {path!r}")
    return parent or "/", name


# ------------------------------------------------------------------- create-symlinks


def create_symlink(root_fd: int, target: str, link: str) -> str:
    """Make ``link`` (container path) a symlink with text ``target``. Returns what it did."""
    if not target or "\0" in target:
        raise HookError(f"invalid symlink target {target!r}")
    parent_path, name = _split_container_path(link)
    try:
        dir_fd = mkdir_p_in_root(root_fd, parent_path)
    except OSError as exc:
        raise HookError(f"{link}: cannot open parent directory: {_err(exc)}") from None
    try:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=dir_fd) == target:
                return "exists"
            if stat.S_ISDIR(st.st_mode):
                raise HookError(f"{link}: exists and is a directory")
        tmp = f".{name}.gpunode-{os.urandom(6).hex()}"
        os.symlink(target, tmp, dir_fd=dir_fd)
        try:
            # rename(2) replaces a non-directory LINK itself; it never follows it.
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        return "replaced" if st is not None else "created"
    except OSError as exc:
        raise HookError(f"{link}: {_err(exc)}") from None
    finally:
        os.close(dir_fd)


def cmd_create_symlinks(args, root_path: str) -> int:
    links = []
    for spec in args.link or []:
        parts = spec.split("::")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise HookError(f"invalid --link {spec!r} (want TARGET::LINK)")
        _split_container_path(parts[1])
        links.append((parts[0], parts[1]))
    root_fd = open_root(root_path)
    try:
        for target, link in links:
            create_symlink(root_fd, target, link)
    finally:
        os.close(root_fd)
    return 0


# -------------------------------------------------------------------- update-ldcache


def _is_static_elf(fd: int) -> None:
    """Refuse anything but an ELF without PT_INTERP: a script or dynamic binary would
    run the container's interpreter / loader / libc inside the confined child."""
    try:
        dynamic = elf.has_interp(fd)
    except elf.ElfError:
        raise HookError("host ldconfig is not an ELF executable (a wrapper script?)") from None
    if dynamic:
        raise HookError(
            "host ldconfig is dynamically linked; refusing to run it inside the container root"
        )


def _sealed_copy(path: str) -> int:
    """Copy the host binary at ``path`` into a sealed memfd; return the memfd."""
    try:
        src = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(f"cannot open host ldconfig {path}: {exc.strerror}") from None
    try:
        st = os.fstat(src)
        if not stat.S_ISREG(st.st_mode):
            raise HookError(f"host ldconfig {path} is not a regular file")
        _is_static_elf(src)
        mfd = os.memfd_create("gpunode-ldconfig", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        offset = 0
        while offset < st.st_size:
            n = os.sendfile(mfd, src, offset, st.st_size - offset)
            if n == 0:
                break
            offset += n
        os.fchmod(mfd, 0o555)
        fcntl.fcntl(
            mfd,
            fcntl.F_ADD_SEALS,
            fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SEAL,
        )
        return mfd
    finally:
        os.close(src)


def _find_ldconfig(explicit: str | None) -> str:
    if explicit:
        if not explicit.startswith("/"):
            raise HookError(f"--ldconfig-path must be absolute: {explicit!r}")
        return explicit
    for cand in LDCONFIG_CANDIDATES:
        if os.path.isfile(cand):
            return cand
    raise HookError("no host ldconfig found in " + ", ".join(LDCONFIG_CANDIDATES))


def _mask_dirs(root_fd: int) -> tuple[str, int]:
    """Cover /dev, /proc and /sys of the root with empty tmpfs mounts (in the child's
    private mount namespace). The first of them that is a real directory gets a small
    tmpfs writable by ldconfig's uid, for its output; the others are read-only.
    Returns that directory's container path and an fd of the tmpfs."""
    out: tuple[str, int] | None = None
    for name in ("dev", "proc", "sys"):
        try:
            fd = open_beneath_no_symlinks(root_fd, name, os.O_PATH | os.O_DIRECTORY)
        except OSError:
            continue  # missing, a symlink or not a directory: nothing of the host to hide
        try:
            if out is None:
                mount(
                    "tmpfs",
                    proc_fd_path(fd),
                    "tmpfs",
                    MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    f"mode=0700,uid={LDCONFIG_UID},gid={LDCONFIG_GID},"
                    f"size={LDCACHE_MAX},nr_inodes=16",
                )
                tmp = open_beneath_no_symlinks(root_fd, name, os.O_PATH | os.O_DIRECTORY)
                if os.fstat(tmp).st_dev == os.fstat(fd).st_dev:
                    raise OSError(errno.ESTALE, f"/{name} changed while mounting the tmpfs")
                out = (f"/{name}", tmp)
            else:
                mount(
                    "tmpfs",
                    proc_fd_path(fd),
                    "tmpfs",
                    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    "mode=0555,size=4k",
                )
        finally:
            os.close(fd)
    if out is None:
        raise OSError(errno.ENOENT, "the container has no /dev, /proc or /sys directory")
    return out


def _read_cache(dir_fd: int) -> bytes:
    """ldconfig's output, read by trusted code from the private tmpfs: a regular file
    (never a link, FIFO or device) of at most LDCACHE_MAX bytes."""
    fd = os.open(
        LDCACHE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
    )
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"{LDCACHE_NAME} is not a regular file")
        data = b""
        while len(data) <= LDCACHE_MAX:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > LDCACHE_MAX or not data:
        raise OSError(errno.EFBIG if data else errno.ENODATA, f"{LDCACHE_NAME}: bad size")
    return data


def _ldconfig_child(
    root_path: str,
    root_ino: tuple[int, int],
    mfd: int,
    devnull: int,
    wfd: int,
    cache_fd: int,
    folders: list[str],
) -> None:
    """Runs in the forked child; never returns. Writes ldconfig's cache into ``cache_fd``."""
    try:
        unshare(CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWNET)
        mount(None, "/", None, MS_REC | MS_PRIVATE, None)
        # fds opened before unshare point into the old mount namespace: reopen the root
        # (a trusted, runtime-supplied host path) and check it is the same directory.
        fd = os.open(root_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != root_ino:
            raise OSError(errno.ESTALE, "container root changed under the hook")
        mount(proc_fd_path(fd), proc_fd_path(fd), None, MS_BIND | MS_REC, None)
        os.close(fd)
        root_fd = os.open(root_path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)  # the bind
        make_tree_readonly(root_fd)  # the rootfs and every volume below it
        out_dir, out_fd = _mask_dirs(root_fd)
        os.fchdir(root_fd)
        os.close(root_fd)
        try:
            pivot_root(".", ".")
        except OSError as exc:
            if exc.errno != errno.EINVAL:  # e.g. rootfs on initramfs: chroot instead
                raise
            os.chroot(".")
        else:
            umount2(".", MNT_DETACH)  # the old root, stacked under the new one
        os.chdir("/")
        os.umask(0o022)
        argv = ["ldconfig", "-X", "-C", f"{out_dir}/{LDCACHE_NAME}", *folders]
        pid = os.fork()
        if pid == 0:  # PID 1 of the new PID namespace: becomes ldconfig
            try:
                os.dup2(devnull, 0)
                os.dup2(wfd, 1)
                os.dup2(wfd, 2)
                keep = sorted({0, 1, 2, mfd})
                for lo, hi in zip(keep, [*keep[1:], 1 << 20], strict=True):
                    os.closerange(lo + 1, hi)
                nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
                for res, val in (
                    (resource.RLIMIT_CPU, 10),
                    (resource.RLIMIT_AS, 2 << 30),
                    (resource.RLIMIT_NOFILE, 64),
                    (resource.RLIMIT_FSIZE, LDCACHE_MAX),
                    (resource.RLIMIT_CORE, 0),
                    (resource.RLIMIT_NPROC, nproc),
                ):
                    resource.setrlimit(res, (val, val))
                program = seccomp_program()
                drop_privileges(LDCONFIG_UID, LDCONFIG_GID)
                prctl(PR_SET_PDEATHSIG, signal.SIGKILL)  # after the uid change, which clears it
                # No process creation. Only now: a limit below what the uid's other processes
                # on the host already use would make the kernel fail the execve after
                # setresuid (PF_NPROC_EXCEEDED).
                resource.setrlimit(resource.RLIMIT_NPROC, (0, 0))
                install_seccomp(program)
                execveat_empty(mfd, argv, [])
            except BaseException as exc:
                os.write(2, f"cannot exec ldconfig: {exc}\n".encode(errors="replace"))
            os._exit(127)
        _, status = os.waitpid(pid, 0)
        if os.WIFSIGNALED(status):
            os._exit(128 + os.WTERMSIG(status))
        code = os.waitstatus_to_exitcode(status) & 0xFF
        if code == 0:  # everything in the PID namespace is gone: nothing writes any more
            try:
                data = _read_cache(out_fd)
            except OSError as exc:
                os.write(wfd, f"no usable cache from ldconfig: {_err(exc)}\n".encode())
                os._exit(125)
            view = memoryview(data)
            while view:
                view = view[os.write(cache_fd, view) :]
        os._exit(code)
    except BaseException as exc:
        try:
            os.write(wfd, f"confinement setup failed: {exc}\n".encode(errors="replace"))
        finally:
            os._exit(126)


def run_ldconfig_confined(
    root_path: str, root_fd: int, ldconfig: str, folders: list[str]
) -> tuple[bytes, str]:
    """Run the host ldconfig confined in the container root; returns (the ld.so.cache it
    built, its output)."""
    mfd = _sealed_copy(ldconfig)
    st = os.fstat(root_fd)
    devnull = os.open("/dev/null", os.O_RDWR | os.O_CLOEXEC)
    cache_fd = os.memfd_create("gpunode-ldcache", os.MFD_CLOEXEC)
    rfd, wfd = os.pipe()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            _ldconfig_child(root_path, (st.st_dev, st.st_ino), mfd, devnull, wfd, cache_fd, folders)
            os._exit(126)  # not reached
        os.close(wfd)
        wfd = -1
        out = bytearray()
        deadline = time.monotonic() + LDCONFIG_TIMEOUT
        timed_out = False
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                os.kill(pid, signal.SIGKILL)  # PDEATHSIG takes the namespace's PID 1 along
                break
            ready, _, _ = select.select([rfd], [], [], left)
            if ready:
                chunk = os.read(rfd, 65536)
                if not chunk:
                    break
                if len(out) < 65536:
                    out += chunk
        _, status = os.waitpid(pid, 0)
        cache = os.pread(cache_fd, LDCACHE_MAX + 1, 0) if not timed_out else b""
    finally:
        for fd in (mfd, devnull, cache_fd, rfd, wfd):
            if fd >= 0:
                os.close(fd)
    text = out.decode(errors="replace").strip()
    if timed_out:
        raise HookError(f"ldconfig timed out after {LDCONFIG_TIMEOUT:.0f}s")
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        last = text.splitlines()[-1] if text else ""
        raise HookError(f"ldconfig failed (exit {code}){': ' + last if last else ''}")
    if not cache or len(cache) > LDCACHE_MAX:
        raise HookError("ldconfig produced no usable cache")
    return cache, text


def cmd_update_ldcache(args, root_path: str) -> int:
    folders = []
    for folder in args.folder or []:
        if not folder.startswith("/") or any(c in folder for c in "\0\n\r"):
            raise HookError(f"invalid --folder {folder!r} (must be an absolute path)")
        folder = os.path.normpath(folder)
        if folder not in folders:
            folders.append(folder)
    ldconfig = _find_ldconfig(args.ldconfig_path)
    root_fd = open_root(root_path)
    try:
        try:
            etc_fd = mkdir_p_in_root(root_fd, "/etc")
        except OSError as exc:
            raise HookError(f"/etc: {_err(exc)}") from None
        try:
            if folders:
                try:
                    conf_fd = mkdir_p_in_root(root_fd, "/etc/ld.so.conf.d")
                except OSError as exc:
                    raise HookError(f"/etc/ld.so.conf.d: {_err(exc)}") from None
                try:
                    body = "# Generated by gpunode-hook\n" + "".join(f"{f}\n" for f in folders)
                    write_file_at(conf_fd, LDSO_CONF_DROPIN, body.encode())
                except OSError as exc:
                    raise HookError(f"/etc/ld.so.conf.d/{LDSO_CONF_DROPIN}: {_err(exc)}") from None
                finally:
                    os.close(conf_fd)
                # An image without /etc/ld.so.conf would never read the drop-in.
                try:
                    os.stat("ld.so.conf", dir_fd=etc_fd, follow_symlinks=False)
                except FileNotFoundError:
                    try:
                        write_file_at(etc_fd, "ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n")
                    except OSError as exc:
                        raise HookError(f"/etc/ld.so.conf: {_err(exc)}") from None
            cache, output = run_ldconfig_confined(root_path, root_fd, ldconfig, folders)
            try:
                write_file_at(etc_fd, LDCACHE_NAME, cache)
            except OSError as exc:
                raise HookError(f"/etc/{LDCACHE_NAME}: {_err(exc)}") from None
        finally:
            os.close(etc_fd)
    finally:
        os.close(root_fd)
    if output and _debug():
        print(output, file=sys.stderr)
    return 0


# ------------------------------------------------------------------ mount-proc-driver

_HEX = frozenset("0123456789abcdef")


def busid_candidates(busid: str) -> list[str]:
    """procfs names to try for a PCI bus id (32-bit domain first, then 16-bit).

    Accepts dddd:bb:dd.f with a 4- to 8-digit hex domain (no regex: `re` is avoided on
    the container start path)."""
    text = busid.strip().lower()
    parts = text.split(":")
    ok = len(parts) == 3 and "." in parts[2]
    if ok:
        dom, bus = parts[0], parts[1]
        dev, _, fn = parts[2].partition(".")
        ok = (
            4 <= len(dom) <= 8
            and len(bus) == 2
            and len(dev) == 2
            and len(fn) == 1
            and fn in "01234567"
            and set(dom + bus + dev) <= _HEX
        )
    if not ok:
        raise HookError(f"invalid PCI bus id {busid!r}")
    domain = int(dom, 16)
    rest = f"{bus}:{dev}.{fn}"
    names = [f"{domain:08x}:{rest}"]
    if domain <= 0xFFFF:
        names.append(f"{domain:04x}:{rest}")
    return names


def _read_at(dir_fd: int, name: str) -> bytes | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise HookError(f"host /proc/driver/nvidia/{name} is not a regular file")
        data = b""
        while len(data) < MAX_PROC_FILE:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            data += chunk
        return data
    finally:
        os.close(fd)


def disable_modify_device_files(params: bytes) -> bytes:
    lines = params.decode(errors="replace").splitlines()
    found = False
    for i, line in enumerate(lines):
        key, sep, _ = line.partition(":")
        if sep and key.strip() == "ModifyDeviceFiles":
            lines[i] = "ModifyDeviceFiles: 0"
            found = True
    if not found:
        lines.append("ModifyDeviceFiles: 0")
    return ("\n".join(lines) + "\n").encode()


def _create_file_at(dir_fd: int, name: str, data: bytes) -> None:
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o444,
        dir_fd=dir_fd,
    )
    try:
        os.fchmod(fd, 0o444)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _open_dir_nofollow(dir_fd: int, name: str, flags: int = os.O_PATH) -> int:
    return os.open(name, flags | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)


def cmd_mount_proc_driver(args, root_path: str) -> int:
    driver_root = args.driver_root
    wanted = [busid_candidates(b) for b in args.gpu or []]

    host_dir = os.path.join(driver_root, "proc/driver/nvidia")
    try:
        host_fd = os.open(host_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(f"no NVIDIA driver procfs at {host_dir}: {exc.strerror}") from None
    fds: list[int] = [host_fd]
    try:
        # Host sources first, so that nothing is mounted if one is missing.
        try:
            host_gpus = _open_dir_nofollow(host_fd, "gpus")
            fds.append(host_gpus)
        except FileNotFoundError:
            host_gpus = -1
        sources: list[tuple[str, int]] = []
        for cands in wanted:
            for name in cands:
                try:
                    src = _open_dir_nofollow(host_gpus, name) if host_gpus >= 0 else -1
                except FileNotFoundError:
                    continue
                if src >= 0:
                    fds.append(src)
                    sources.append((name, src))
                    break
            else:
                raise HookError(f"GPU {cands[-1]} not found in {host_dir}/gpus")
        files = {n: _read_at(host_fd, n) for n in ("version", "registry", "params")}
        if files["params"] is not None:
            files["params"] = disable_modify_device_files(files["params"])

        root_fd = open_root(root_path)
        fds.append(root_fd)
        try:
            proc_fd = open_beneath_no_symlinks(root_fd, "proc", os.O_PATH | os.O_DIRECTORY)
            fds.append(proc_fd)
            driver_fd = open_beneath_no_symlinks(proc_fd, "driver", os.O_PATH | os.O_DIRECTORY)
            fds.append(driver_fd)
        except FileNotFoundError:
            print(
                f"{PROG}: mount-proc-driver: no /proc/driver in the container; skipping",
                file=sys.stderr,
            )
            return 0
        except UnsafePath as exc:
            raise HookError(f"refusing /proc/driver in the container: {exc.strerror}") from None
        except NotADirectoryError:
            raise HookError("refusing /proc/driver in the container: not a directory") from None
        try:
            nv_fd = open_beneath_no_symlinks(driver_fd, "nvidia", os.O_PATH | os.O_DIRECTORY)
            fds.append(nv_fd)
        except FileNotFoundError:
            # Every procfs shows the loaded driver's tree; a container whose /proc lacks it
            # while the host has one is not something to paper over.
            raise HookError(
                "the container's /proc has no driver/nvidia although the host has one"
            ) from None
        except UnsafePath as exc:
            raise HookError(
                f"refusing /proc/driver/nvidia in the container: {exc.strerror}"
            ) from None
        except NotADirectoryError:
            raise HookError(
                "refusing /proc/driver/nvidia in the container: not a directory"
            ) from None
        nv_st = os.fstat(nv_fd)
        if nv_st.st_dev != os.fstat(driver_fd).st_dev:
            raise HookError("/proc/driver/nvidia is already mounted over in the container")

        mount(
            "tmpfs",
            proc_fd_path(nv_fd),
            "tmpfs",
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "mode=0555,size=1m,nr_inodes=256",
        )
        try:
            # Look the name up again from its parent: this crosses onto the new mount.
            tmp_fd = _open_dir_nofollow(driver_fd, "nvidia")
            fds.append(tmp_fd)
            tst = os.fstat(tmp_fd)
            if tst.st_dev == nv_st.st_dev or os.listdir(proc_fd_path(tmp_fd)):
                raise HookError("/proc/driver/nvidia changed while mounting the tmpfs")
            for name in ("version", "registry", "params"):
                if files[name] is not None:
                    _create_file_at(tmp_fd, name, files[name])
            os.mkdir("gpus", 0o555, dir_fd=tmp_fd)
            gpus_fd = _open_dir_nofollow(tmp_fd, "gpus")
            fds.append(gpus_fd)
            for name, src in sources:
                os.mkdir(name, 0o555, dir_fd=gpus_fd)
                dst = _open_dir_nofollow(gpus_fd, name)
                fds.append(dst)
                mount(proc_fd_path(src), proc_fd_path(dst), None, MS_BIND, None)
                bound = _open_dir_nofollow(gpus_fd, name)  # the bind mount's root
                fds.append(bound)
                mount(
                    None,
                    proc_fd_path(bound),
                    None,
                    MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    None,
                )
            mount(
                None,
                proc_fd_path(tmp_fd),
                None,
                MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                None,
            )
        except BaseException:
            # Undo: lazily unmount whatever now covers the original directory (our
            # tmpfs, and with it the GPU bind mounts below it).
            with contextlib.suppress(OSError):
                fd = _open_dir_nofollow(driver_fd, "nvidia")
                fds.append(fd)
                if os.fstat(fd).st_dev != nv_st.st_dev:
                    umount2(proc_fd_path(fd), MNT_DETACH)
            raise
    except OSError as exc:
        raise HookError(_err(exc)) from None
    finally:
        for fd in fds:
            os.close(fd)
    return 0


# ------------------------------------------------------------------------- configure


def gpus_from_container_devices(root_path: str, driver_root: str) -> list[str]:
    """Bus ids of the GPUs whose /dev/nvidia<minor> the container was given.

    Used when the hook comes from a CDI spec, which cannot know which of its devices a
    container will get: the device nodes the engine created in the rootfs say so.
    """
    root_fd = open_root(root_path)
    try:
        try:
            dev_fd = open_beneath_no_symlinks(root_fd, "dev", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return []
        try:
            minors = set()
            for name in os.listdir(dev_fd):
                suffix = name[6:]
                if not (name.startswith("nvidia") and suffix.isascii() and suffix.isdigit()):
                    continue
                st = os.stat(name, dir_fd=dev_fd, follow_symlinks=False)
                if stat.S_ISCHR(st.st_mode) and os.major(st.st_rdev) == 195:
                    minors.add(os.minor(st.st_rdev))
        finally:
            os.close(dev_fd)
    finally:
        os.close(root_fd)
    gpus_dir = os.path.join(driver_root, "proc/driver/nvidia/gpus")
    out = []
    for bus in sorted(os.listdir(gpus_dir)) if os.path.isdir(gpus_dir) else []:
        try:
            with open(os.path.join(gpus_dir, bus, "information")) as fh:
                for line in fh:
                    key, _, value = line.partition(":")
                    if key.strip() == "Device Minor" and int(value.strip()) in minors:
                        out.append(bus)
        except (OSError, ValueError):
            continue
    return out


def cmd_configure(args, root_path: str) -> int:
    """All of a container's setup in one process: symlinks, ld cache, /proc/driver/nvidia.

    One invocation instead of three keeps the hook's cost on container start to one
    Python start-up.
    """
    if args.link:
        cmd_create_symlinks(args, root_path)
    if args.folder:
        cmd_update_ldcache(args, root_path)
    if args.proc_driver:
        host = os.path.join(args.driver_root, "proc/driver/nvidia")
        if not os.path.isdir(host):
            print(
                f"{PROG}: configure: {host} not found; /proc/driver/nvidia left as is",
                file=sys.stderr,
            )
            return 0
        if not args.gpus_selected and not args.gpu:  # CDI: the device nodes given say which
            args.gpu = gpus_from_container_devices(root_path, args.driver_root)
        cmd_mount_proc_driver(args, root_path)
    return 0


# ------------------------------------------------------------------------------ main


def _err(exc: OSError) -> str:
    msg = exc.strerror or str(exc)
    if exc.filename:
        msg = f"{msg}: {exc.filename}"
    return msg


def _debug() -> bool:
    # Only switches on tracebacks; nothing security-relevant depends on it.
    return os.environ.get("GPUNODE_DEBUG") == "1"


# Options per subcommand: "list" (repeatable), "value" or "flag". A hand-made parser, not
# argparse: argparse (with re and enum) is most of this program's start-up, which every
# GPU container pays.
_OPTIONS: dict[str, dict[str, str]] = {
    "configure": {
        "--link": "list",
        "--folder": "list",
        "--ldconfig-path": "value",
        "--gpu": "list",
        "--proc-driver": "flag",
        "--gpus-selected": "flag",
        "--driver-root": "value",
    },
    "update-ldcache": {"--folder": "list", "--ldconfig-path": "value"},
    "create-symlinks": {"--link": "list"},
    "mount-proc-driver": {"--gpu": "list", "--driver-root": "value"},
}
_FUNCS = {
    "configure": "cmd_configure",
    "update-ldcache": "cmd_update_ldcache",
    "create-symlinks": "cmd_create_symlinks",
    "mount-proc-driver": "cmd_mount_proc_driver",
}
USAGE = f"""usage: {PROG} [--root ROOTFS] SUBCOMMAND [OPTIONS]
OCI createContainer hook injecting the NVIDIA driver. The container comes from the OCI
state on stdin unless --root names its rootfs.
  configure [--link TARGET::LINK]... [--folder DIR]... [--gpu BUSID]... [--proc-driver]
            [--gpus-selected] [--driver-root DIR] [--ldconfig-path PATH]
            all of the below in one run; --gpus-selected: the --gpu list is the whole
            selection, even empty (else the container's /dev/nvidia<N> nodes decide)
  create-symlinks --link TARGET::LINK...                 create symlinks in the container
  update-ldcache --folder DIR... [--ldconfig-path PATH]  refresh the container's ld cache
  mount-proc-driver --gpu BUSID... [--driver-root DIR]   filter /proc/driver/nvidia
  --version                                              print the version"""


class Args:
    def __init__(self) -> None:
        self.command: str | None = None
        self.version = False
        self.help = False
        self.root: str | None = None
        self.link: list[str] = []
        self.folder: list[str] = []
        self.gpu: list[str] = []
        self.ldconfig_path: str | None = None
        self.proc_driver = False
        self.gpus_selected = False
        self.driver_root = "/"

    @property
    def func(self):
        return globals()[_FUNCS[self.command]]


def parse_args(argv: list[str]) -> Args:
    args = Args()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        table = {"--root": "value"} | (_OPTIONS.get(args.command, {}) if args.command else {})
        if arg in ("-h", "--help"):
            args.help = True
        elif arg == "--version" and args.command is None:
            args.version = True
        elif name in table:
            kind = table[name]
            if kind == "flag":
                if eq:
                    raise HookError(f"{name} takes no value")
                setattr(args, name[2:].replace("-", "_"), True)
            else:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise HookError(f"{name} needs a value")
                    value = argv[i]
                attr = name[2:].replace("-", "_")
                if kind == "list":
                    getattr(args, attr).append(value)
                else:
                    setattr(args, attr, value)
        elif args.command is None and not arg.startswith("-"):
            if arg not in _OPTIONS:
                raise HookError(f"unknown subcommand {arg!r}; accepted: {', '.join(_OPTIONS)}")
            args.command = arg
        else:
            where = f" for {args.command}" if args.command else ""
            raise HookError(f"unrecognized argument {arg!r}{where}")
        i += 1
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if a in SUBCOMMANDS), "hook")
    try:
        os.chdir("/")  # runc starts hooks in the (container-controlled) rootfs
        os.umask(0o022)
        args = parse_args(argv)
        if args.help:
            print(USAGE)
            return 0
        if args.version:
            print(f"{PROG} {__version__}")
            return 0
        if not args.command:
            raise HookError(
                "missing subcommand (configure, update-ldcache, create-symlinks, mount-proc-driver)"
            )
        command = args.command
        if not args.driver_root.startswith("/"):  # before anything is looked up under it
            raise HookError(f"--driver-root must be absolute: {args.driver_root!r}")
        root = args.root
        if root is None:
            root = resolve_rootfs(_read_state())
        return args.func(args, root)
    except HookError as exc:
        print(f"{PROG}: {command}: {exc}", file=sys.stderr)
    except BaseException as exc:
        if _debug():
            raise
        msg = _err(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        print(f"{PROG}: {command}: {' '.join(msg.split())}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
