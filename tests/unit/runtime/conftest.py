"""Fixtures of the runtime's tests: device nodes made with mknod under a temporary dev root,
discovery given directly, a containerised driver's tree."""

from __future__ import annotations

import os
import stat

import pytest

from gpunode.nvidia.facts import NodeFacts
from gpunode.runtime.discovery import Discovery, DriverFiles

from .fake_node import GPUS, VERSION


@pytest.fixture
def devroot(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    dev = tmp_path / "dev"
    dev.mkdir()
    for name, major, minor in [
        ("nvidiactl", 195, 255),
        ("nvidia-modeset", 195, 254),
        ("nvidia-uvm", 510, 0),
        ("nvidia-uvm-tools", 510, 1),
        ("nvidia0", 195, 0),
        ("nvidia1", 195, 1),
        ("nvidia2", 195, 2),
    ]:
        os.mknod(dev / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    return tmp_path


@pytest.fixture
def disc(tmp_path):
    lib = "/usr/lib/x86_64-linux-gnu"
    files = DriverFiles(
        libraries={
            "utility": [f"{lib}/libnvidia-ml.so.{VERSION}"],
            "compute": [
                f"{lib}/libcuda.so.{VERSION}",
                f"{lib}/libnvidia-ptxjitcompiler.so.{VERSION}",
            ],
            "graphics": [f"{lib}/libnvidia-glcore.so.{VERSION}"],
        },
        binaries={"utility": ["/usr/bin/nvidia-smi"]},
        firmware=[f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"],
        ipc={"utility": ["/run/nvidia-persistenced/socket"]},
        sonames={
            f"{lib}/libnvidia-ml.so.{VERSION}": "libnvidia-ml.so.1",
            f"{lib}/libcuda.so.{VERSION}": "libcuda.so.1",
            f"{lib}/libnvidia-glcore.so.{VERSION}": "libnvidia-glcore.so.1",
        },
    )
    return Discovery(NodeFacts(VERSION, "12.2", GPUS), files, key={})


@pytest.fixture
def driver_tree(tmp_path):
    """A containerised driver's files under <tmp>/driver, laid out as the driver sees them,
    with an absolute symlink that only resolves correctly inside the driver root."""
    root = tmp_path / "driver"
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    for name in ("libnvidia-ml", "libcuda"):
        (lib / f"{name}.so.{VERSION}").write_bytes(b"\x7fELF")
    (lib / "libnvidia-ml.so.1").symlink_to(f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{VERSION}")
    (lib / "libcuda.so.1").symlink_to(f"libcuda.so.{VERSION}")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_text("#!/bin/sh\n")
    (root / "usr/bin/nvidia-smi").chmod(0o755)
    fw = root / f"lib/firmware/nvidia/{VERSION}"
    fw.mkdir(parents=True)
    (fw / "gsp_ga10x.bin").write_bytes(b"fw")
    (root / "run/nvidia-persistenced").mkdir(parents=True)
    (root / "run/nvidia-persistenced/socket").write_bytes(b"")
    return root
