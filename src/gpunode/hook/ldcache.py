"""``update-ldcache``: the container's ld.so.conf drop-in and an /etc/ld.so.cache built by
the host's ldconfig, confined.

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
"""

from __future__ import annotations

import errno
import fcntl
import os
import resource
import select
import signal
import stat
import sys
import time

from ..util import elf
from ..util.safepath import mkdir_p_in_root, open_beneath_no_symlinks, proc_fd_path
from .errors import HookError, debug, describe
from .fileops import write_all, write_file_at
from .linux import (
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUTS,
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_RDONLY,
    MS_REC,
    PR_SET_PDEATHSIG,
    drop_privileges,
    execveat_empty,
    install_seccomp,
    make_tree_readonly,
    mount,
    pivot_root,
    prctl,
    seccomp_program,
    umount2,
    unshare,
)
from .state import open_root

LDSO_CONF_DROPIN = "00-gpunode.conf"
LDCONFIG_CANDIDATES = ("/sbin/ldconfig.real", "/sbin/ldconfig", "/usr/sbin/ldconfig")
LDCONFIG_TIMEOUT = 30.0
# ldconfig runs as nobody:nogroup with no capability at all (see the module docstring).
LDCONFIG_UID = LDCONFIG_GID = 65534
LDCACHE_MAX = 16 << 20  # the private tmpfs ldconfig writes into, and what we read back
LDCACHE_NAME = "ld.so.cache"


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
                os.write(wfd, f"no usable cache from ldconfig: {describe(exc)}\n".encode())
                os._exit(125)
            write_all(cache_fd, data)
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
            raise HookError(f"/etc: {describe(exc)}") from None
        try:
            if folders:
                try:
                    conf_fd = mkdir_p_in_root(root_fd, "/etc/ld.so.conf.d")
                except OSError as exc:
                    raise HookError(f"/etc/ld.so.conf.d: {describe(exc)}") from None
                try:
                    body = "# Generated by gpunode-hook\n" + "".join(f"{f}\n" for f in folders)
                    write_file_at(conf_fd, LDSO_CONF_DROPIN, body.encode())
                except OSError as exc:
                    raise HookError(
                        f"/etc/ld.so.conf.d/{LDSO_CONF_DROPIN}: {describe(exc)}"
                    ) from None
                finally:
                    os.close(conf_fd)
                # An image without /etc/ld.so.conf would never read the drop-in.
                try:
                    os.stat("ld.so.conf", dir_fd=etc_fd, follow_symlinks=False)
                except FileNotFoundError:
                    try:
                        write_file_at(etc_fd, "ld.so.conf", b"include /etc/ld.so.conf.d/*.conf\n")
                    except OSError as exc:
                        raise HookError(f"/etc/ld.so.conf: {describe(exc)}") from None
            cache, output = run_ldconfig_confined(root_path, root_fd, ldconfig, folders)
            try:
                write_file_at(etc_fd, LDCACHE_NAME, cache)
            except OSError as exc:
                raise HookError(f"/etc/{LDCACHE_NAME}: {describe(exc)}") from None
        finally:
            os.close(etc_fd)
    finally:
        os.close(root_fd)
    if output and debug():
        print(output, file=sys.stderr)
    return 0
