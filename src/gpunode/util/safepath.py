"""Resolve paths inside a container root without ever leaving it.

Everything here works on file descriptors. A container root is a directory the
container image controls: any component of a path below it may be a symlink (absolute,
or full of ``..``) planted to redirect a privileged writer onto the host. The rules:

* ``open_in_root`` has ``RESOLVE_IN_ROOT`` semantics: absolute symlinks are taken
  relative to the root and ``..`` at the root stays at the root, so the result is always
  a file inside the root. It uses ``openat2(2)`` when the kernel has it and otherwise
  walks the path one component at a time with ``O_PATH|O_NOFOLLOW`` and ``readlinkat``.
* ``open_beneath_no_symlinks`` refuses every symlink and every ``..`` (for places such as
  ``/proc/driver/nvidia`` where a symlink can only mean an attack).
* Callers use the returned fd (as a ``dir_fd``, or as ``/proc/self/fd/N`` for mount(2)),
  never a path string re-resolved later: that check-then-use gap was CVE-2024-0132.
"""

from __future__ import annotations

import errno
import os
import stat

__all__ = [
    "UnsafePath",
    "exists_in_root",
    "mkdir_p_in_root",
    "open_beneath_no_symlinks",
    "open_in_root",
    "proc_fd_path",
]

MAX_SYMLINKS = 40

# openat2(2) resolve flags (linux/openat2.h)
RESOLVE_NO_XDEV = 0x01
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10

# openat2 is 437 on every architecture using the generic syscall table.
_SYS_OPENAT2 = {"x86_64": 437, "aarch64": 437, "ppc64le": 437, "s390x": 437}.get(os.uname().machine)

# ctypes (gpunode.util.cabi) only when openat2 is first called: exists_in_root runs
# before the runtime starts runc's create, and needs none of it.
_CTYPES: tuple | None = None


def _ctypes() -> tuple:
    """(ctypes, libc, struct open_how), loaded once."""
    global _CTYPES
    if _CTYPES is None:
        from . import cabi as ctypes

        class libc:  # what ctypes.CDLL(None, use_errno=True) gave
            syscall = ctypes.libc_function("syscall", ctypes.c_long)

        class OpenHow(ctypes.Structure):
            _fields_ = [
                ("flags", ctypes.c_uint64),
                ("mode", ctypes.c_uint64),
                ("resolve", ctypes.c_uint64),
            ]

        _CTYPES = (ctypes, libc, OpenHow)
    return _CTYPES


class UnsafePath(OSError):
    """A path could not be resolved safely inside the root (symlink, escape, wrong type)."""


# None = not probed yet; tests may set it to False to exercise the fallback walk.
_HAVE_OPENAT2: bool | None = None


def proc_fd_path(fd: int) -> str:
    """The magic-link path of ``fd``; use it as a mount(2) source or target."""
    return f"/proc/self/fd/{int(fd)}"


def _openat2(dir_fd: int, path: str, flags: int, mode: int, resolve: int) -> int:
    """Raw openat2; raises OSError (ENOSYS if the kernel or arch lacks it)."""
    if _SYS_OPENAT2 is None:
        raise OSError(errno.ENOSYS, "openat2 syscall number unknown on this architecture")
    ctypes, libc, open_how = _ctypes()
    tmpfile = getattr(os, "O_TMPFILE", 0)
    wants_mode = flags & os.O_CREAT or (tmpfile and flags & tmpfile == tmpfile)
    how = open_how(flags, mode if wants_mode else 0, resolve)
    raw = os.fsencode(path)
    if b"\0" in raw:
        raise UnsafePath(errno.EINVAL, "path contains NUL", path)
    for _ in range(16):  # EAGAIN: a concurrent rename raced the lookup; retry
        fd = libc.syscall(_SYS_OPENAT2, dir_fd, raw, ctypes.byref(how), ctypes.sizeof(how))
        if fd >= 0:
            return fd
        err = ctypes.get_errno()
        if err in (errno.EAGAIN, errno.EINTR):
            continue
        raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, "openat2 kept racing with renames", path)


def have_openat2() -> bool:
    global _HAVE_OPENAT2
    if _HAVE_OPENAT2 is None:
        try:
            fd = _openat2(-100, "/", os.O_PATH | os.O_CLOEXEC, 0, 0)  # AT_FDCWD
        except OSError as exc:
            _HAVE_OPENAT2 = exc.errno not in (errno.ENOSYS, errno.EPERM)
        else:
            os.close(fd)
            _HAVE_OPENAT2 = True
    return _HAVE_OPENAT2


def _components(path: str) -> list[str]:
    return [c for c in path.split("/") if c not in ("", ".")]


def _walk_in_root(root_fd: int, path: str, flags: int, mode: int, follow_last: bool) -> int:
    """Userspace RESOLVE_IN_ROOT: O_PATH|O_NOFOLLOW one component at a time."""
    if "\0" in path:
        raise UnsafePath(errno.EINVAL, "path contains NUL", path)
    stack = [os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)]
    pending = _components(path)
    links = 0
    try:
        while pending:
            name = pending.pop(0)
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            last = not pending
            cur = stack[-1]
            try:
                fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
            except FileNotFoundError:
                if last and flags & os.O_CREAT:
                    return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=cur)
                raise
            st = os.fstat(fd)
            if stat.S_ISLNK(st.st_mode) and (not last or follow_last):
                os.close(fd)
                links += 1
                if links > MAX_SYMLINKS:
                    raise UnsafePath(errno.ELOOP, "too many levels of symbolic links", path)
                # Whatever the link says now (it may have changed since the open) is
                # itself resolved inside the root, so a race cannot lead outside.
                target = os.readlink(name, dir_fd=cur)
                if target.startswith("/"):
                    while len(stack) > 1:
                        os.close(stack.pop())
                pending[:0] = _components(target)
                continue
            if not last:
                if not stat.S_ISDIR(st.st_mode):
                    os.close(fd)
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
                stack.append(fd)
                continue
            # Final component, not to be followed (or not a symlink).
            want = flags | os.O_NOFOLLOW | os.O_CLOEXEC
            if (flags & ~os.O_CLOEXEC) == os.O_PATH and not (flags & os.O_DIRECTORY):
                return fd
            os.close(fd)
            return os.open(name, want, mode, dir_fd=cur)
        # Path resolved to a directory on the stack (root itself, or via '..' / symlink).
        return os.open(".", flags | os.O_CLOEXEC, mode, dir_fd=stack[-1])
    finally:
        for fd in stack:
            os.close(fd)


def open_in_root(
    root_fd: int,
    path: str,
    flags: int = os.O_PATH,
    *,
    follow_last: bool = False,
    mode: int = 0o644,
) -> int:
    """Open ``path`` inside the directory ``root_fd`` as if ``root_fd`` were "/".

    Symlinks are followed for every component but the last (unless ``follow_last``);
    absolute ones are taken relative to the root and ``..`` never climbs above it.
    Magic links (``/proc/self/...``) are refused. The returned fd is O_CLOEXEC.
    """
    if not follow_last:
        flags |= os.O_NOFOLLOW
    flags |= os.O_CLOEXEC
    if have_openat2():
        try:
            return _openat2(root_fd, path, flags, mode, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS)
        except OSError as exc:
            if exc.errno != errno.ENOSYS:
                raise
    return _walk_in_root(root_fd, path, flags & ~os.O_NOFOLLOW, mode, follow_last)


def exists_in_root(root: str, path: str) -> bool:
    """Whether ``path`` names an entry inside the directory ``root`` (a container root),
    every component but the last resolved inside it as open_in_root does and the last not
    followed (as lstat). Never touches anything outside the root, so the answer tells
    nothing of the host; any error (a missing root, a loop, a file on the way) is False.
    Uses the userspace walk: no ctypes."""
    try:
        root_fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        os.close(_walk_in_root(root_fd, path, os.O_PATH, 0, follow_last=False))
    except OSError:
        return False
    finally:
        os.close(root_fd)
    return True


def open_beneath_no_symlinks(root_fd: int, path: str, flags: int = os.O_PATH) -> int:
    """Open ``path`` below ``root_fd`` refusing any symlink and any ``..`` component.

    Raises UnsafePath for a symlink anywhere on the way (including the last component)
    and for ``..``; FileNotFoundError / NotADirectoryError as usual.
    """
    comps = _components(path)
    if ".." in comps:
        raise UnsafePath(errno.EXDEV, "'..' not allowed", path)
    fd = -1
    if have_openat2():
        try:
            fd = _openat2(
                root_fd,
                "/".join(comps) or ".",
                os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC,
                0,
                RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
            )
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafePath(errno.ELOOP, "symbolic link in path", path) from None
            if exc.errno != errno.ENOSYS:
                raise
    if fd < 0:
        fd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)
        for name in comps:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                os.close(fd)
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
            try:
                nxt = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            finally:
                os.close(fd)
            fd = nxt
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                break  # reported below
    try:
        st = os.fstat(fd)  # O_PATH|O_NOFOLLOW hands back a final symlink itself
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(errno.ELOOP, "symbolic link in path", path)
        if flags & os.O_DIRECTORY and not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
        if (flags & ~(os.O_CLOEXEC | os.O_NOFOLLOW | os.O_DIRECTORY)) == os.O_PATH:
            result, fd = fd, -1
            return result
        # Reopen the very inode we checked (never the path again).
        return os.open(proc_fd_path(fd), (flags & ~os.O_NOFOLLOW) | os.O_CLOEXEC)
    finally:
        if fd >= 0:
            os.close(fd)


def mkdir_p_in_root(root_fd: int, path: str, mode: int = 0o755) -> int:
    """Create ``path`` (and missing parents) inside the root; return an O_PATH dir fd.

    Each missing component is created with mkdirat relative to the securely opened
    parent; existing symlinks are followed with in-root semantics. A dangling symlink
    in the way is an error (as with ``mkdir -p``).
    """
    comps = _components(path)
    parent = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=root_fd)
    try:
        for i, name in enumerate(comps):
            prefix = "/" + "/".join(comps[: i + 1])
            try:
                fd = open_in_root(root_fd, prefix, os.O_PATH | os.O_DIRECTORY, follow_last=True)
            except FileNotFoundError:
                try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
                    os.mkdir(name, mode, dir_fd=parent)
                except FileExistsError:
                    pass
                try:
                    fd = open_in_root(root_fd, prefix, os.O_PATH | os.O_DIRECTORY, follow_last=True)
                except FileNotFoundError:
                    raise UnsafePath(
                        errno.ENOENT, "cannot create directory (dangling symlink?)", prefix
                    ) from None
            os.close(parent)
            parent = fd
        result, parent = parent, -1
        return result
    finally:
        if parent >= 0:
            os.close(parent)
