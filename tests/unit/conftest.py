"""Fixtures shared by the unit tests of several packages."""

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
