"""Helpers shared by the unit tests of several packages."""

from __future__ import annotations

import os
import stat
from pathlib import Path


def snapshot(path: Path) -> dict[str, tuple]:
    """Everything under ``path`` (without following links) with type, size, mtime, link."""
    out = {}
    for p in [path, *sorted(path.rglob("*"))]:
        st = p.lstat()
        out[str(p)] = (
            stat.S_IFMT(st.st_mode),
            st.st_size,
            st.st_mtime_ns,
            os.readlink(p) if p.is_symlink() else None,
        )
    return out
