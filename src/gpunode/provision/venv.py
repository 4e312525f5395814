"""gpunode into its own virtualenv on the node, from the wheels the role copied there.

`gpunode provision install` runs from those wheels (the role's launcher) with the node's
python3. The virtualenv is (re)installed only when the wheels differ from the ones it was
installed from (their sha256 sums, kept in a stamp file inside the virtualenv), so a
converged node costs one hash of a few MB and no pip run. The executables are then linked
onto PATH by the virtualenv's own gpunode (`runtime install-links`: the launchers it writes
name the virtualenv's Python, not the one running this).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from ..util import files, tool
from . import CheckFailed

STAMP = ".gpunode-wheels.sha256"


def wheels_digest(wheel_dir: Path) -> tuple[list[Path], str]:
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not wheels:
        raise CheckFailed(
            f"no gpunode wheels in {wheel_dir}: copy them there first (gpunode_install)"
        )
    lines = "".join(f"{hashlib.sha256(w.read_bytes()).hexdigest()}  {w.name}\n" for w in wheels)
    return wheels, hashlib.sha256(lines.encode()).hexdigest()


def _run(argv: list[str], what: str, hint: str = "") -> str:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    proc = tool.run(argv, env=env)
    if not proc.ok:
        last = proc.failed or tool.last_line(proc.stderr or proc.stdout) or "no output"
        raise CheckFailed(f"{what} failed (rc {proc.returncode}): {last}{hint}")
    return proc.stdout


def install(venv: Path, wheel_dir: Path, bin_dir: Path, *, dry_run: bool = False) -> dict:
    wheels, digest = wheels_digest(wheel_dir)
    python = venv / "bin/python"
    try:
        current = (venv / STAMP).read_text().strip() == digest and python.exists()
    except OSError:
        current = False
    changes: list[str] = []
    if not current:
        changes.append(f"{venv}: install {', '.join(w.name for w in wheels)}")
        if not dry_run:
            if not python.exists():
                _run(
                    [sys.executable, "-m", "venv", "--system-site-packages", str(venv)],
                    f"creating the virtualenv {venv}",
                    " (Debian/Ubuntu: install python3-venv)",
                )
            _run(
                [str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links",
                 str(wheel_dir), "--force-reinstall", "--no-deps", *map(str, wheels)],
                f"pip install into {venv}",
            )  # fmt: skip
            files.write_atomic(venv / STAMP, (digest + "\n").encode())
    links: dict = {}
    gpunode = venv / "bin/gpunode"
    if dry_run:
        links = {"skipped": "dry run: the links are checked by the real run"}
    else:
        out = _run(
            [str(gpunode), "runtime", "install-links", "--prefix", str(bin_dir), "--json"],
            f"{gpunode} runtime install-links",
        )
        links = json.loads(out)
        changes += links.get("changes", [])
    return {
        "ok": True,
        "changed": bool(changes),
        "changes": changes,
        "venv": str(venv),
        "wheels": digest,
        "links": links,
        "message": "; ".join(changes) if changes else f"gpunode in {venv} is current",
    }
