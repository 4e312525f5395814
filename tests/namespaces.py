"""Whether this machine lets tests make private namespaces with unshare(1) (shared by the
host-level suites: the mock NVML with a private /dev, the hook's mount work)."""

from __future__ import annotations

import os
import shutil
import subprocess


def unshare_problem(*flags: str, target: str = "/dev") -> str | None:
    """None when `unshare -m FLAGS` may mount a tmpfs on `target`; else why not (one line)."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("unshare") is None:
        return "unshare(1) not found"
    try:
        proc = subprocess.run(
            ["unshare", "-m", *flags, "sh", "-c", f"mount -t tmpfs none {target}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -m failed to run: {exc}"
    if proc.returncode != 0:
        return f"unshare -m / tmpfs mount not permitted: {proc.stderr.strip()}"
    return None
