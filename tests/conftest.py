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


@pytest.fixture(scope="session")
def collections_path(tmp_path_factory) -> Path:
    """The collection gpunode.gpunode built from this tree and installed as a user installs
    it (scripts/collection: its wheels, ansible-galaxy collection build + install), into a
    directory of its own: ANSIBLE_COLLECTIONS_PATH for the Ansible runs that use it (the
    `ansible` bundle's collections stay found, as they are for a user)."""
    dest = tmp_path_factory.mktemp("collections")
    proc = subprocess.run(
        [str(ROOT / "scripts/collection")],
        env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(dest)},
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (dest / "ansible_collections/gpunode/gpunode/MANIFEST.json").is_file()
    return dest
