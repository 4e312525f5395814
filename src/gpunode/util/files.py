"""Files written safely: atomic replacement (a temporary file in the same directory, fsync,
rename) and an exclusive lock file for read-modify-write cycles that may race; and the
files the runtime trusts (its caches), read only when nobody else could have written them.

Temporary files get a random name and are created with O_EXCL|O_NOFOLLOW: a name another
user guessed and created first (a file or a link) is never opened, so they cannot own or
redirect what is written. Directories are created 0755 whatever the umask.

Imports only ``os`` at load time: the runtime writes config.json with it on every GPU
container start.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from collections.abc import Callable

DIR_MODE = 0o755
_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def make_dirs(path: str | os.PathLike, mode: int = DIR_MODE) -> None:
    """os.makedirs(path, exist_ok=True), but every directory it creates gets ``mode``
    (less the umask's bits): os.makedirs gives the parents 0777 less the umask, which is
    0777 under umask 0."""
    path = os.path.abspath(os.fspath(path))
    missing = []
    while not os.path.isdir(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    for d in reversed(missing):
        try:
            os.mkdir(d, mode)
        except FileExistsError:
            if not os.path.isdir(d):
                raise


def private_dir(path: str | os.PathLike) -> bool:
    """Create the directory ``path`` (make_dirs, 0755) if missing; True when it is a
    directory (not a link) of this process's effective user that group and others cannot
    write, so that what the runtime keeps in it is its own. False otherwise, and when it
    cannot be created."""
    try:
        make_dirs(path)
        st = os.lstat(path)
    except OSError:
        return False
    return (st.st_mode & 0o170000) == 0o040000 and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def read_owned(path: str, limit: int) -> bytes | None:
    """The bytes of ``path`` when it is a regular file (not a link, never a FIFO's wait) of
    this process's effective user, not writable by group or others, of at most ``limit``
    bytes, in a directory that private_dir would accept; else None (missing, someone
    else's, too big, unreadable). For the caches the runtime trusts: what they hold decides
    what goes into containers, so a file anyone else could have written is not read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if (
            (st.st_mode & 0o170000) != 0o100000
            or st.st_uid != os.geteuid()
            or st.st_mode & 0o022
            or st.st_size > limit
        ):
            return None
        where = os.lstat(os.path.dirname(path) or ".")
        if where.st_uid != os.geteuid() or where.st_mode & 0o022:
            return None
        chunks = []
        left = limit + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data if len(data) <= limit else None


def _create_temp(directory: str, name: str, mode: int) -> tuple[int, str]:
    """A new file beside ``name`` in ``directory``: (fd, path), under a random name
    created exclusively (O_EXCL|O_NOFOLLOW), so no file or link put there first is used."""
    for _ in range(100):
        tmp = os.path.join(directory, f".{name}.{os.urandom(8).hex()}.tmp")
        try:
            return os.open(tmp, _TMP_FLAGS, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(17, "no free temporary name", os.path.join(directory, name))


def write_atomic(
    path: str | os.PathLike,
    data: bytes,
    mode: int = 0o644,
    *,
    skip_if_same: bool = True,
    like: os.stat_result | None = None,
    before_replace: Callable[[str], None] | None = None,
    sync_dir: bool = False,
    durable: bool = True,
) -> bool:
    """Write `data` to `path` (unless, with skip_if_same, it already holds exactly that);
    True when written.

    Readers see the old file or the new one, never a half-written one; a failure leaves
    no temporary file behind. Callers that know the content changed pass
    skip_if_same=False to spare the read.

    * ``like``: the stat of the file being replaced; its mode and owner are kept (``mode``
      is then ignored; the owner is changed only where allowed).
    * ``before_replace(tmp_path)`` runs once the temporary file is complete, before it
      replaces ``path``; if it raises, ``path`` is untouched.
    * ``sync_dir``: fsync the directory after the rename, so the rename itself is durable.
    * ``durable=False``: no fsync of the data either (still atomic for readers): for files
      that do not outlive the machine's uptime in any useful way.
    """
    path = os.fspath(path)
    if skip_if_same:
        try:
            with open(path, "rb") as fh:
                if fh.read() == data:
                    return False
        except OSError:
            pass
    if like is not None:
        mode = like.st_mode & 0o7777
    directory = os.path.dirname(path) or "."
    make_dirs(directory)
    fd, tmp = _create_temp(directory, os.path.basename(path), mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            if like is not None and (like.st_uid, like.st_gid) != (os.geteuid(), os.getegid()):
                try:  # noqa: SIM105 - contextlib is not needed on the start path
                    os.fchown(fh.fileno(), like.st_uid, like.st_gid)
                except PermissionError:
                    pass
            os.fchmod(fh.fileno(), mode)  # O_CREAT honours the umask; chown cleared set-id bits
            if durable:
                os.fsync(fh.fileno())
        if before_replace is not None:
            before_replace(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)
    if sync_dir:
        _fsync_dir(directory)
    return True


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


def write_set(directory: str | os.PathLike, files: dict[str, bytes], mode: int = 0o644) -> None:
    """Write several files of one directory as a set: every file is written to a temporary
    file beside it first, and only when all are complete do they replace the old ones, so
    a failure (a directory that is not writable, a full disk) leaves every old file as it
    was and no temporary file behind."""
    directory = os.fspath(directory)
    make_dirs(directory)
    staged: list[tuple[str, str]] = []
    try:
        for name, data in files.items():
            fd, tmp = _create_temp(directory, name, mode)
            staged.append((tmp, os.path.join(directory, name)))
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fchmod(fh.fileno(), mode)
                os.fsync(fh.fileno())
        for _, path in staged:  # the renames below then cannot fail half-way
            if os.path.isdir(path) and not os.path.islink(path):
                raise IsADirectoryError(21, "Is a directory", path)
        for tmp, path in staged:
            os.replace(tmp, path)
    finally:
        for tmp, _ in staged:
            if os.path.lexists(tmp):
                os.unlink(tmp)
    _fsync_dir(directory)
