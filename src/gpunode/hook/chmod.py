"""NVIDIA's ``chmod --mode MODE --path PATH...``: each PATH of the container set to MODE,
resolved inside its root (gpunode.util.safepath.open_in_root: its symlinks taken relative
to the root, ``..`` stopping there) and never through a symlink at its last component.

NVIDIA's hook (cmd/nvidia-cdi-hook/chmod, deprecated and off by default since v1.18; its
generator passes ``--mode 755`` and the device folders /dev/dri, /dev/nvidia-caps, for
rootless podman on crun) joins the root and PATH as host paths and chmods them following
every symlink, so an image's ``/dev/dri -> /etc`` would have it chmod the host's /etc.
Here the one inode PATH names inside the root is checked and changed through its O_PATH
fd: a symlink there is left as it is, in one line on stderr.

As NVIDIA's: a missing PATH is skipped, so is one already in MODE, and a permission error
is ignored (a whole /dev bind-mounted read-only). No --path at all is nothing to do, exit 0
(NVIDIA's "No paths specified; exiting"): what its generator writes, ``chmod --mode 755``
alone, for a full GPU without DRM nodes once ``--enable-hook chmod`` is given
(internal/discover/hooks.go creates an enabled chmod even with no folder). MODE is strict: octal digits only, at
most 0777 (NVIDIA's parses octal and then drops anything but the permission bits; a
setuid/setgid/sticky MODE is refused here rather than dropped); anything else is one line
naming it, exit 1, nothing changed.
"""

from __future__ import annotations

import os
import stat
import sys

from ..util.safepath import open_in_root, proc_fd_path
from .errors import PROG, HookError, describe
from .state import open_root

OCTAL = frozenset("01234567")
MAX_MODE = 0o777


def parse_mode(text: str | None) -> int:
    """--mode's value as permission bits: octal digits only, 0 to 777 (755, 0755)."""
    if text is None:
        raise HookError("--mode is required (octal permission bits, 0 to 777, such as 755)")
    if not (0 < len(text) <= 16 and OCTAL.issuperset(text)) or int(text, 8) > MAX_MODE:
        shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
        raise HookError(
            f"invalid --mode {shown} (want octal permission bits, 0 to 777, such as 755)"
        )
    return int(text, 8)


def chmod_in_root(root_fd: int, path: str, mode: int) -> str:
    """Set ``path`` (container path) to ``mode``; returns what it did ("changed",
    "unchanged", "missing", "symlink", "denied")."""
    try:
        fd = open_in_root(root_fd, path, os.O_PATH)  # the last component not followed
    except (FileNotFoundError, NotADirectoryError):
        return "missing"
    except OSError as exc:
        raise HookError(f"--path {path}: {describe(exc)}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISLNK(st.st_mode):
            print(
                f"{PROG}: chmod: {path} is a symbolic link in the container; not followed, "
                "left as it is",
                file=sys.stderr,
            )
            return "symlink"
        if stat.S_IMODE(st.st_mode) == mode:
            return "unchanged"
        # The inode checked above, through its fd's magic link: never PATH again.
        os.chmod(proc_fd_path(fd), mode)
        return "changed"
    except PermissionError:
        return "denied"
    except OSError as exc:
        raise HookError(f"--path {path}: {describe(exc)}") from None
    finally:
        os.close(fd)


def cmd_chmod(args, root_path: str) -> int:
    mode = parse_mode(args.mode)
    for path in args.path:
        if not path.strip() or "\0" in path:
            raise HookError(f"invalid --path {path!r}")
    root_fd = open_root(root_path)
    try:
        for path in args.path:
            chmod_in_root(root_fd, path, mode)
    finally:
        os.close(root_fd)
    return 0
