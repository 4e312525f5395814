"""The /proc/driver/nvidia formats: what the simulator writes is what the parsers read."""

from gpunode import procfs
from gpunode.profiles import load_profile

REAL_INFORMATION = (
    "Model: \t\t NVIDIA A10G\nIRQ:   \t\t 42\nGPU UUID: \t GPU-82523fd8-3897-f599-d088-ccd04ae45ec1\n"
    "Video BIOS: \t 94.04.42.00.01\nBus Type: \t PCIe\nDMA Size: \t 47 bits\n"
    "DMA Mask: \t 0x7fffffffffff\nBus Location: \t 0000:00:1e.0\nDevice Minor: \t 3\n"
    "GPU Excluded:\t No\n"
)


def test_parse_real_version_lines():
    open_line = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
        "(dvs-builder@U22-I3-B17-02-5)  Tue Sep 23 09:55:41 UTC 2025\nGCC version:  gcc\n"
    )
    prop_line = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.135  Fri Jan 10 2025\n"
    assert procfs.parse_version(open_line) == "580.95.05"
    assert procfs.parse_version(prop_line) == "550.135"
    assert procfs.parse_version("garbage\n") is None


def test_parse_real_information():
    info = procfs.parse_information(REAL_INFORMATION)
    assert info["GPU UUID"] == "GPU-82523fd8-3897-f599-d088-ccd04ae45ec1"
    assert info["Device Minor"] == "3"
    assert info["Bus Location"] == "0000:00:1e.0"


def test_rendered_files_parse_back():
    for name in ("a100x4", "h100x8"):
        p = load_profile(name)
        assert procfs.parse_version(procfs.render_version(p)) == p.driver.version
        for gpu in p.gpus:
            info = procfs.parse_information(procfs.render_information(gpu, p))
            assert info["GPU UUID"] == gpu.uuid
            assert info["Model"] == gpu.model
            assert info["Bus Location"] == gpu.bus_id.procfs
            assert int(info["Device Minor"]) == gpu.minor
            assert ("GPU Firmware" in info) == (p.driver.kernel_module == "open")


def test_rendered_information_matches_real_layout():
    p = load_profile("a100x4")
    lines = procfs.render_information(p.gpus[0], p).splitlines()
    real = REAL_INFORMATION.splitlines()
    # same keys in the same order, same separators
    assert [ln.split(":")[0] for ln in lines] == [ln.split(":")[0] for ln in real]
    assert lines[0].startswith("Model: \t\t ")
    assert lines[2].startswith("GPU UUID: \t ")


def test_params_start_like_the_driver_and_can_say_modify_device_files_off():
    params = procfs.parse_params(procfs.render_params())
    assert params[:3] == [
        ("ResmanDebugLevel", "4294967295"),
        ("RmLogonRC", "1"),
        ("ModifyDeviceFiles", "1"),
    ]
    off = dict(procfs.parse_params(procfs.render_params(modify_device_files=False)))
    assert off["ModifyDeviceFiles"] == "0"
    assert params[-1] == ("ExcludedGpus", '""')
