"""Linking gpunode's executables into a bin directory on PATH (used by the runtime role).

``nvidia-container-runtime-hook`` is linked only where NVIDIA's toolkit is absent: Docker's
``--gpus`` needs an executable of that name on dockerd's PATH, and gpunode (as the runtime)
replaces the hook it inserts. Where NVIDIA's hook exists, it is left alone.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

EXECUTABLES = ("gpunode", "gpunode-hook", "gpunode-container-runtime")
NVIDIA_HOOK = "nvidia-container-runtime-hook"


def _link(target: Path, link: Path, changes: list[str]) -> None:
    if link.is_symlink() and os.readlink(link) == str(target):
        return
    tmp = link.with_name(f".{link.name}.gpunode-tmp")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target)
    os.replace(tmp, link)
    changes.append(f"linked {link} -> {target}")


def install_links(prefix: Path, bindir: Path) -> dict:
    changes: list[str] = []
    prefix.mkdir(parents=True, exist_ok=True)
    for name in EXECUTABLES:
        _link(bindir / name, prefix / name, changes)
    ours = prefix / NVIDIA_HOOK
    other = shutil.which(NVIDIA_HOOK, path="/usr/bin:/usr/sbin:/bin:/sbin")
    if other is None or Path(other).resolve() == (bindir / NVIDIA_HOOK).resolve():
        _link(bindir / NVIDIA_HOOK, ours, changes)
    nvidia = "absent" if other is None else other
    return {"changed": bool(changes), "changes": changes, "nvidia_toolkit_hook": nvidia}
