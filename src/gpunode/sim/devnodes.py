"""The character device nodes the simulated driver makes (as nvidia-modprobe does)."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def ensure_chr(path: Path, major: int, minor: int, mode: int) -> bool:
    """Make ``path`` the character device major:minor with exactly ``mode`` (whatever the
    umask), replacing anything else there; whether it changed."""
    want = os.makedev(major, minor)
    try:
        st = os.lstat(path)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == want and stat.S_IMODE(st.st_mode) == mode:
            return False
        path.unlink()
    except FileNotFoundError:
        pass
    os.mknod(path, stat.S_IFCHR | mode, want)
    os.chmod(path, mode)  # mknod honours the umask
    return True
