"""Helpers shared by the unit tests of several packages."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest


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


def cc(out: Path, source: str, *flags: str) -> Path:
    """Compile C ``source`` with the host's gcc into ``out`` (the source beside it)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not available")
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-O1", "-o", str(out), str(src), *flags], check=True)
    return out
