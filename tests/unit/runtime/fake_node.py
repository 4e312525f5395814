"""A fake node for the runtime's tests: three A100s, a driver's files (no real files), and
an OCI bundle maker. Device nodes come from the devroot fixture (conftest.py)."""

from __future__ import annotations

import json

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
