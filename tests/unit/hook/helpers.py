"""Running gpunode-hook as runc runs it: a subprocess with a clean environment, for mount
work inside a private mount namespace (``unshare -m``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ...namespaces import unshare_problem

SRC = Path(__file__).resolve().parents[3] / "src"

CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(SRC), "LC_ALL": "C"}

HOOK = [sys.executable, "-m", "gpunode.hook"]


def nvidia_hook(name: str) -> list[str]:
    """NVIDIA's hook command line (gpunode.hook.nvcli) run with argv[0] *name*, as the
    launcher of that name runs it (``nvidia-cdi-hook``; ``nvidia-ctk`` then wants ``hook``)."""
    code = (
        f"import sys; sys.argv[0] = {name!r}; from gpunode.hook.nvcli import main; sys.exit(main())"
    )
    return [sys.executable, "-c", code]


LIBZ = Path("/usr/lib/x86_64-linux-gnu/libz.so.1.2.13")


UNSHARE_PROBLEM = unshare_problem("-p", "-f", target="/mnt")


def run_hook(
    *args: str,
    env: dict | None = None,
    stdin: str | None = None,
    before: str = "",
    after: str = "",
    hook: list[str] = HOOK,
):
    """Run the hook; with ``before``/``after``, inside ``unshare -m`` between those shell
    snippets (``before`` must succeed).

    Returns (returncode of the hook, stdout, stderr).
    """
    cmd = [*hook, *args]
    full_env = {**CLEAN_ENV, **(env or {})}
    if before or after:
        script = (
            f"set -e; {before or 'true'}; set +e; "
            + '"$@"; rc=$?; echo "--- after"; '
            + (after or "true")
            + '\nexit "$rc"'
        )
        cmd = ["unshare", "-m", "sh", "-c", script, "sh", *cmd]
    proc = subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, env=full_env, timeout=120, check=False
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr
