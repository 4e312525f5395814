"""Shared fixtures.

Host-level tests run the mock NVML inside a private mount namespace (`unshare -m`) whose
/dev is an empty tmpfs, so they can create /dev/nvidia* nodes without touching the host.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpunode.sim import mocknvml

from .namespaces import unshare_problem

ROOT = Path(__file__).resolve().parents[1]


UNSHARE_PROBLEM = unshare_problem()


@pytest.fixture(scope="session")
def mock_lib(tmp_path_factory) -> Path:
    return mocknvml.build_library(tmp_path_factory.mktemp("mock") / "libnvidia-ml.mock.so")


@pytest.fixture
def private_dev():
    """Run a command with a private, empty /dev (tmpfs) in its own mount namespace."""
    if UNSHARE_PROBLEM:
        print(f"SKIP reason: {UNSHARE_PROBLEM}", file=sys.stderr)
        pytest.skip(f"needs unshare -m as root: {UNSHARE_PROBLEM}")

    def run(cmd: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        script = 'mount -t tmpfs -o mode=755 none /dev && exec "$@"'
        return subprocess.run(
            ["unshare", "-m", "sh", "-c", script, "sh", *cmd],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT / "src"), **(env or {})},
            check=False,
            timeout=120,
        )

    return run
