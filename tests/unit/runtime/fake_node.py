"""A fake node for the runtime's tests: three A100s, a driver's files (no real files), and
an OCI bundle maker. Device nodes come from the devroot fixture (conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from gpunode.nvidia.facts import GpuFacts

GPUS = tuple(
    GpuFacts(
        index=i,
        minor=i,
        uuid=f"GPU-00000000-0000-4000-8000-00000000000{i}",
        pci_bus_id=f"00000000:{0x10 + i:02X}:00.0",
        name="NVIDIA A100-SXM4-80GB",
        brand="tesla",
        compute_capability="8.0",
    )
    for i in range(3)
)

VERSION = "535.261.03"


def make_bundle(tmp_path, env, extra=None):
    """<tmp>/bundle with a Debian rootfs and a config.json with ``env``; (bundle, its bytes)."""
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "etc").mkdir(parents=True, exist_ok=True)
    (bundle / "rootfs" / "etc" / "debian_version").write_text("12\n")
    spec = {
        "ociVersion": "1.0.2",
        "process": {"env": env, "args": ["true"]},
        "root": {"path": "rootfs"},
        "mounts": [],
        **(extra or {}),
    }
    raw = json.dumps(spec, indent=3).encode()
    (bundle / "config.json").write_bytes(raw)
    return bundle, raw


def ldcache_of_driver_tree(root="/"):
    """What ldconfig -p lists for the driver_tree fixture (as the driver sees it)."""
    return [f"/usr/lib/x86_64-linux-gnu/{n}.so.1" for n in ("libnvidia-ml", "libcuda")]


SRC = Path(__file__).resolve().parents[3] / "src"


def shim_env(conf, path="/usr/bin:/bin", **extra):
    """The environment of a shim subprocess: this checkout's gpunode, runtime.toml `conf`,
    the config cache, first-stage file and prepared edits in the test's own places (the autouse
    fixture's), never /run/gpunode."""
    return {
        "PATH": path,
        "PYTHONPATH": str(SRC),
        "GPUNODE_RUNTIME_CONFIG": str(conf),
        "GPUNODE_RESIDENT_DIR": "",
        "GPUNODE_RUNTIME_CONFIG_CACHE": os.environ["GPUNODE_RUNTIME_CONFIG_CACHE"],
        "GPUNODE_RUNTIME_FIRST_STAGE": os.environ["GPUNODE_RUNTIME_FIRST_STAGE"],
        "GPUNODE_PREPARED_CACHE": os.environ["GPUNODE_PREPARED_CACHE"],
        **extra,
    }


def run_shim(argv, env, cwd=None):
    """`gpunode-container-runtime ARGV` (the shim as a module), its output captured."""
    proc = subprocess.run(
        [sys.executable, "-m", "gpunode.launch.shim", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc
