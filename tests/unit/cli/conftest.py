"""Fixtures of the CLI's tests."""

from __future__ import annotations

import os

import pytest

from gpunode.nvidia.facts import GpuFacts, NodeFacts
from gpunode.runtime import discovery
from gpunode.runtime.discovery import Discovery, DriverFiles

GPU = GpuFacts(
    0, 0, "GPU-00000000-0000-4000-8000-000000000000", "00000000:10:00.0", "Tesla T4", "tesla", "7.5"
)


@pytest.fixture
def fake_node(tmp_path, monkeypatch):
    import stat

    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(dev / "nvidiactl", stat.S_IFCHR | 0o666, os.makedev(195, 255))
    os.mknod(dev / "nvidia0", stat.S_IFCHR | 0o666, os.makedev(195, 0))
    cfg_file = tmp_path / "runtime.toml"
    cfg_file.write_text(f'dev-root = "{tmp_path}"\ncache-file = "{tmp_path}/cache.json"\n')
    disc = Discovery(
        NodeFacts("535.261.03", "12.2", (GPU,)),
        DriverFiles(libraries={"utility": ["/usr/lib/libnvidia-ml.so.535.261.03"]}),
        key={},
    )
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    return cfg_file
