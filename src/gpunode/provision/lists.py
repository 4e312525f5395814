"""The package lists the plans resolve against: current enough, or refreshed first.

A plan (`--resolve`) reads versions from the node's package lists, so they must be current:
apt's lists are refreshed (`apt-get update`) when there are none yet, when a sources file
changed after the last update (lists older than a new component or repository miss its
packages), or when they are older than the caller's maximum age. Current lists are left
alone, so a converged node's re-run refreshes nothing (the provisioning roles call the plans
with `--refresh-lists SECONDS`, their `*_apt_cache_valid_time`). dnf refreshes expired
metadata by itself on every query, so there is nothing to do for it here.
"""

from __future__ import annotations

import time
from pathlib import Path

from . import CheckFailed
from .packages import Runner, run

LISTS = "var/lib/apt/lists"
# when the lists were last found current: touched after each refresh here (and by Ubuntu's
# APT::Update::Post-Invoke-Success hook)
STAMP = "var/lib/apt/periodic/update-success-stamp"
SOURCES = ("etc/apt/sources.list", "etc/apt/sources.list.d")


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def apt_stale(max_age: int, root: Path = Path("/"), now: float | None = None) -> str:
    """Why apt's lists need a refresh, or "" when they are current."""
    lists = root / LISTS
    try:
        has_lists = any(p.name.endswith("_Packages") for p in lists.iterdir())
    except OSError:
        has_lists = False
    if not has_lists:
        return "no package lists yet"
    updated = max(t for t in (_mtime(root / STAMP), _mtime(lists), 0.0) if t is not None)
    newest_source = 0.0
    for name in SOURCES:
        path = root / name
        stamps = [_mtime(path)]
        if path.is_dir():
            stamps += [_mtime(p) for p in path.iterdir()]
        newest_source = max([newest_source, *(t for t in stamps if t is not None)])
    if newest_source > updated:
        return "a sources file changed after the last update"
    age = (time.time() if now is None else now) - updated
    if age > max_age:
        return f"the lists are {int(age)} s old (more than {max_age} s)"
    return ""


def refresh(family: str, max_age: int, runner: Runner = run, root: Path = Path("/")) -> dict:
    """Refresh the package lists when they are not current; says whether and why.

    max_age < 0: never refresh (the caller keeps the lists as they are).
    """
    if max_age < 0:
        return {"refreshed": False, "reason": "not asked to refresh"}
    if family != "apt":
        return {"refreshed": False, "reason": "dnf refreshes expired metadata itself"}
    reason = apt_stale(max_age, root)
    if not reason:
        return {"refreshed": False, "reason": "current"}
    rc, _, err = runner(["apt-get", "update", "-q"])
    if rc != 0:
        last = (err.strip().splitlines() or ["no output"])[-1]
        raise CheckFailed(f"apt-get update failed ({reason}): {last}")
    # An update that finds nothing new rewrites no list, so the lists' directory keeps its
    # old mtime; the stamp says when they were last found current (Debian's apt does not
    # write it itself; Ubuntu's update-notifier and Ansible's apt module read the same file).
    stamp = root / STAMP
    try:
        stamp.parent.mkdir(parents=True, exist_ok=True)
        stamp.touch()
    except OSError:
        pass  # a read-only /var/lib/apt: the next call refreshes again, nothing worse
    return {"refreshed": True, "reason": reason}
