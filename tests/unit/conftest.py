"""Fixtures shared by the unit tests of several packages."""

import shutil
import subprocess

import pytest


@pytest.fixture
def real_information() -> str:
    """A real driver's /proc/driver/nvidia/gpus/<bus>/information (A10G, driver 550)."""
    return (
        "Model: \t\t NVIDIA A10G\nIRQ:   \t\t 42\nGPU UUID: \t GPU-82523fd8-3897-f599-d088-ccd04ae45ec1\n"
        "Video BIOS: \t 94.04.42.00.01\nBus Type: \t PCIe\nDMA Size: \t 47 bits\n"
        "DMA Mask: \t 0x7fffffffffff\nBus Location: \t 0000:00:1e.0\nDevice Minor: \t 3\n"
        "GPU Excluded:\t No\n"
    )


@pytest.fixture
def shared_lib(tmp_path):
    """Build a tiny shared library: shared_lib(name, *ldflags) -> its path (gcc needed)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not available")

    def build(name: str, *ldflags: str):
        src = tmp_path / "lib.c"
        src.write_text("int gpunode_test(void) { return 1; }\n")
        out = tmp_path / name
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *ldflags], check=True)
        return out

    return build
