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


def build_node_wheel(project: Path, out: Path) -> Path:
    """gpunode's wheel built from ``project`` into ``out`` exactly as the gpunode_install role
    builds it on the controller (tasks/build.yml: its argv, files/build-wheels.py)."""
    import sys

    import yaml

    root = Path(__file__).resolve().parents[2]
    role = root / "roles/gpunode_install"
    tasks = yaml.safe_load((role / "tasks/build.yml").read_text())
    task = next(t for t in tasks if t.get("name") == "Build the gpunode wheel on the controller")
    values = {
        "{{ gpunode_install_project_dir }}": str(project),
        "{{ gpunode_install_controller_python }}": sys.executable,
        "{{ gpunode_install_build_dir }}": str(out),
        "{{ role_path }}": str(role),
    }
    argv = []
    for arg in task["ansible.builtin.command"]["argv"]:
        for placeholder, value in values.items():
            arg = arg.replace(placeholder, value)
        assert "{{" not in arg, arg
        argv.append(arg)
    subprocess.run(argv, check=True, env={**os.environ, **task.get("environment", {})},
                   cwd=out.parent, stdout=subprocess.DEVNULL)  # fmt: skip
    (wheel,) = out.glob("gpunode-*.whl")
    return wheel
