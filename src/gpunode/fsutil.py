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
