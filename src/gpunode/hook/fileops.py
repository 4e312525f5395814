"""File primitives relative to a directory fd, never following a link: what the hook
writes into a (hostile) container root, and reads from the host's driver procfs."""

from __future__ import annotations

import os
import stat

from .errors import HookError

MAX_PROC_FILE = 1 << 20


def write_all(fd: int, data: bytes) -> None:
    """os.write until all of ``data`` is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def write_file_at(dir_fd: int, name: str, data: bytes, mode: int = 0o644) -> None:
    """Atomically (temp name + renameat) write ``name`` in ``dir_fd``; never follows links.

    No fsync: what this writes into a container root (ld.so.conf.d, ld.so.cache) is written
    again on each create of the container, so a crash can cost nothing a restart does not
    redo, and an fsync on the image's disk-backed layer costs every GPU start milliseconds.
    """

    def make(tmp: str) -> None:
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            mode,
            dir_fd=dir_fd,
        )
        try:
            os.fchmod(fd, mode)
            write_all(fd, data)
        finally:
            os.close(fd)

    replace_at(dir_fd, name, make)


def replace_at(dir_fd: int, name: str, make) -> None:
    """Put a new entry at ``name`` in ``dir_fd`` atomically: ``make(tmp)`` creates it under a
    temporary name beside it, then rename(2) moves it over ``name`` (replacing a
    non-directory ``name`` itself, never following it). The temporary entry is removed on
    any failure, so nothing half-made is left."""
    tmp = f".{name}.gpunode-{os.urandom(6).hex()}"
    try:
        make(tmp)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise


def split_container_path(path: str) -> tuple[str, str]:
    if "\0" in path or not path.startswith("/"):
        raise HookError(f"path must be absolute: {path!r}")
    parent, _, name = path.rstrip("/").rpartition("/")
    if name in ("", ".", ".."):
        raise HookError(f"invalid path: {path!r}")
    return parent or "/", name


def read_at(dir_fd: int, name: str) -> bytes | None:
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


def create_file_at(dir_fd: int, name: str, data: bytes) -> None:
    fd = os.open(
        name,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o444,
        dir_fd=dir_fd,
    )
    try:
        os.fchmod(fd, 0o444)
        write_all(fd, data)
    finally:
        os.close(fd)


def open_dir_nofollow(dir_fd: int, name: str, flags: int = os.O_PATH) -> int:
    return os.open(name, flags | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
