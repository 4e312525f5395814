"""Atomic file writes: a temporary file in the same directory, fsync, rename."""

from __future__ import annotations

import os


def write_atomic(
    path: str | os.PathLike, data: bytes, mode: int = 0o644, *, skip_if_same: bool = True
) -> bool:
    """Write `data` to `path` (unless, with skip_if_same, it already holds exactly that);
    True when written.

    Readers see the old file or the new one, never a half-written one; a failure leaves
    no temporary file behind. Callers that know the content changed pass
    skip_if_same=False to spare the read.
    """
    path = os.fspath(path)
    if skip_if_same:
        try:
            with open(path, "rb") as fh:
                if fh.read() == data:
                    return False
        except OSError:
            pass
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # O_CREAT honours the umask
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    return True


class Lock:
    """``with Lock(path):`` holds an exclusive flock on the lock file ``path`` (created 0600,
    never through a symlink) and removes it on release, so nothing is left beside the file
    it guards.

    Removing a lock file is safe because an acquirer checks, once it holds the flock, that
    ``path`` still names the inode it locked; if a releasing holder removed it meanwhile, it
    opens the new file and waits again.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self.fd = -1

    def __enter__(self) -> Lock:
        import fcntl  # not on the container start path

        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                held = os.fstat(fd)
                try:
                    now = os.stat(self.path, follow_symlinks=False)
                except FileNotFoundError:
                    now = None
            except BaseException:
                os.close(fd)
                raise
            if now is not None and (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino):
                self.fd = fd
                return self
            os.close(fd)  # removed by the previous holder: lock the new file

    def __exit__(self, *exc: object) -> None:
        try:
            os.unlink(self.path)  # while still holding the flock
        except FileNotFoundError:
            pass
        finally:
            os.close(self.fd)
            self.fd = -1
