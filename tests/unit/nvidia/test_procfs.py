"""Reading (and the hook's patching of) the /proc/driver/nvidia formats."""

import os

from gpunode.nvidia import procfs
from gpunode.nvidia.gpu import Gpu

PARAMS = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"


def test_parse_real_version_lines():
    open_line = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
        "(dvs-builder@U22-I3-B17-02-5)  Tue Sep 23 09:55:41 UTC 2025\nGCC version:  gcc\n"
    )
    prop_line = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.135  Fri Jan 10 2025\n"
    assert procfs.parse_version(open_line) == "580.95.05"
    assert procfs.parse_version(prop_line) == "550.135"
    assert procfs.parse_version("garbage\n") is None


def test_parse_real_information(real_information):
    info = procfs.parse_information(real_information)
    assert info["GPU UUID"] == "GPU-82523fd8-3897-f599-d088-ccd04ae45ec1"
    assert info["Device Minor"] == "3"
    assert info["Bus Location"] == "0000:00:1e.0"


def test_disable_modify_device_files():
    def off(params: bytes) -> bytes:
        return procfs.set_param(params, "ModifyDeviceFiles", "0")

    assert off(PARAMS.encode()).decode() == PARAMS.replace(
        "ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0"
    )
    assert off(b"A: 1\n") == b"A: 1\nModifyDeviceFiles: 0\n"


def test_read_driver(tmp_path, real_information):
    assert procfs.read_driver(tmp_path / "none") == (None, [])
    (tmp_path / "version").write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.135  X\n"
    )
    for name in ("0000:00:1e.0", "0000:07:00.0"):
        os.makedirs(tmp_path / "gpus" / name)
    (tmp_path / "gpus/0000:00:1e.0/information").write_text(real_information)
    version, gpus = procfs.read_driver(str(tmp_path))
    assert version == "550.135"
    # a GPU directory without an information file is skipped, one not named as a bus id too;
    # each GPU is the record NVML's walk fills, with what the kernel tells
    os.makedirs(tmp_path / "gpus" / "stray")
    (tmp_path / "gpus/stray/information").write_text(real_information)
    version, gpus = procfs.read_driver(str(tmp_path))
    assert gpus == [
        Gpu(index=None, minor=3, uuid="GPU-82523fd8-3897-f599-d088-ccd04ae45ec1",
            name="NVIDIA A10G", pci_bus_id="00000000:00:1E.0")
    ]  # fmt: skip
