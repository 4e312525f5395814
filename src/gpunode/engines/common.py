"""What configuring any engine shares: the result, the errors, and the file rules.

Behaves like `nvidia-ctk runtime configure`, with these differences (see
container-toolkit.md section 5):

* every other setting is kept, including other ``features`` keys in daemon.json, and the
  operator's key order (new keys are appended; nothing is sorted);
* files are replaced atomically (temp file in the same directory, fsync, ``os.replace``) with
  the old mode and owner;
* backups: the first time gpunode replaces an existing file, the file as it was is kept as
  ``<path>.gpunode-backup``, and an existing backup is never overwritten, so however many runs
  follow it holds the operator's original, not gpunode's own earlier output (a file gpunode
  created has no backup, until a later run changes it: then the backup is gpunode's first
  output). Remove the backup to have the next changing run take a new one;
* runs are serialized: an exclusive flock on ``<path>.gpunode-lock`` (beside the real file,
  removed on release) is held across read, validate and replace, so concurrent runs with
  different options keep each other's change;
* a config path that is a symlink is followed (the link stays); a dangling one is refused,
  and no directory is ever created for a symlink's target;
* nothing is written when the result is semantically unchanged, so Ansible can use
  ``changed`` from :meth:`ConfigureResult.to_dict`;
* daemon.json is checked with ``dockerd --validate`` (Docker >= 23) before it is replaced;
* invalid input raises :class:`EngineConfigError` (one line naming the file) and leaves every
  file untouched.
"""

from __future__ import annotations

import contextlib
import difflib
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass

from ..util import files, tool

VALIDATE_TIMEOUT = 60
BACKUP_SUFFIX = ".gpunode-backup"
LOCK_SUFFIX = ".gpunode-lock"
RUNTIME_PATH = "/usr/local/bin/gpunode-container-runtime"


class EngineConfigError(ValueError):
    """An engine config cannot be read or changed safely; the message is one line.

    As such it is bad input (a config file or path the operator must fix; CLI exit 2); the
    subclass :class:`EngineRunError` is a failure that is not the input's fault."""


class EngineRunError(EngineConfigError):
    """The change could not be made although the input may be fine: a file cannot be read,
    a tool the change needs is missing or could not run (CLI exit 1)."""


@dataclass(frozen=True)
class Registration:
    """What gets registered: the runtime's name and executable, and whether it becomes the
    default runtime and CDI is switched on (neither is ever switched back off)."""

    runtime_name: str = "gpunode"
    runtime_path: str = RUNTIME_PATH
    set_default: bool = False
    cdi: bool = False


@dataclass
class ConfigureResult:
    path: str
    changed: bool
    backup: str | None
    content: str  # the main file's content after the run (what would be written on dry_run)
    validated: str | None = None  # e.g. "dockerd --validate: ok"; None when not run
    drop_in: str | None = None  # containerd only
    drop_in_content: str | None = None  # containerd only
    dry_run: bool = False
    before: str | None = None  # the main file's content before the run (None: missing)
    drop_in_before: str | None = None  # containerd only

    def to_dict(self) -> dict:
        return asdict(self)

    def diff(self) -> str:
        """Unified diffs of each file the run changes (would change, on a dry run); empty
        when nothing changes."""
        out = []
        pairs = [(self.path, self.before, self.content)]
        if self.drop_in is not None:
            pairs.append((self.drop_in, self.drop_in_before, self.drop_in_content or ""))
        for path, before, after in pairs:
            if (before or "") == after and before is not None:
                continue
            out.extend(
                difflib.unified_diff(
                    (before or "").splitlines(keepends=True),
                    after.splitlines(keepends=True),
                    f"{path} (before)" if before is not None else "/dev/null",
                    f"{path} (after)",
                )
            )
        return "".join(line if line.endswith("\n") else line + "\n" for line in out)


def prepare(path: str, reg: Registration) -> str:
    """The file to change for ``path`` (a symlink's target), once the registration is valid."""
    if not reg.runtime_name or not reg.runtime_path:
        raise EngineConfigError(f"{path}: runtime name and path must not be empty")
    return real_path(path)


def _dangling(link: str) -> EngineConfigError:
    return EngineConfigError(
        f"{link}: symbolic link to {os.readlink(link)}, which does not exist; "
        "create the target or remove the link; left unchanged"
    )


def real_path(path: str) -> str:
    """Follow a symlinked config to its target, so the link itself is not replaced; refuse a
    link whose target does not exist (writing there would create directories anywhere)."""
    if not os.path.islink(path):
        return path
    real = os.path.realpath(path)
    if not os.path.exists(real):
        raise _dangling(path)
    return real


def makedirs(directory: str) -> None:
    """Create ``directory`` and missing parents (mkdir never follows a dangling symlink; the
    error names it)."""
    try:
        os.makedirs(directory, mode=0o755, exist_ok=True)
    except OSError as exc:
        d = directory
        while d != os.path.dirname(d):
            if os.path.islink(d) and not os.path.exists(d):
                raise _dangling(d) from exc
            d = os.path.dirname(d)
        where = exc.filename or directory
        why = "it is not a directory" if isinstance(exc, FileExistsError) else exc.strerror
        raise EngineConfigError(f"{where}: cannot create the directory ({why})") from exc


@contextlib.contextmanager
def locked(real: str, dry_run: bool):
    """Hold ``<real>.gpunode-lock`` across read, validate and replace (not for a dry run,
    which writes nothing, not even the config's directory)."""
    if dry_run:
        yield
        return
    makedirs(os.path.dirname(real) or ".")
    with files.Lock(real + LOCK_SUFFIX):
        yield


def read(path: str) -> tuple[bytes | None, os.stat_result | None]:
    try:
        with open(path, "rb") as f:
            return f.read(), os.fstat(f.fileno())
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise EngineRunError(f"{path}: cannot read ({exc.strerror})") from exc


def decode(path: str, data: bytes | None) -> str:
    if data is None:
        return ""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EngineConfigError(
            f"{path}: not valid UTF-8 (byte {exc.start}); left unchanged"
        ) from exc


def replace_with_backup(
    path: str,
    content: str,
    old: bytes | None,
    old_stat: os.stat_result | None,
    validate: Callable[[str], None] | None = None,
) -> str | None:
    """Atomically replace ``path``. The first time an existing file is replaced, its bytes
    are kept as ``<path>.gpunode-backup``; an existing backup is never overwritten, so it keeps
    the operator's original. Returns the backup's path when ``path`` existed."""
    backup = path + BACKUP_SUFFIX if old is not None else None

    def before_replace(tmp: str) -> None:
        if validate is not None:
            validate(tmp)
        if backup is not None and not os.path.lexists(backup):
            write(backup, old, old_stat)

    write(path, content.encode("utf-8"), old_stat, before_replace)
    return backup


def write(
    path: str,
    data: bytes,
    like: os.stat_result | None,
    before_replace: Callable[[str], None] | None = None,
) -> None:
    """Replace ``path`` atomically and durably, keeping the mode and owner of ``like``."""
    files.write_atomic(
        path, data, skip_if_same=False, like=like, before_replace=before_replace, sync_dir=True
    )


def run_tool(
    path: str | None, what: str, argv: list[str], timeout: float = VALIDATE_TIMEOUT
) -> tool.Ran:
    """Run a tool (an engine's, systemctl) through gpunode.util.tool; it not running or not
    finishing is an EngineRunError naming ``what`` — and, when it runs for the change of
    ``path``, that path, left unchanged."""
    ran = tool.run(argv, timeout=timeout)
    if ran.failed:
        message = f"{what} could not run ({ran.failed})"
        raise EngineRunError(f"{path}: {message}; left unchanged" if path else message)
    return ran
