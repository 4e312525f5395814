"""The simulator's /proc files: what it writes is what the parsers (ours, NVIDIA's toolkit's)
read."""

import re

import pytest

from gpunode.nvidia import procfs
from gpunode.sim import procfs as render
from gpunode.sim.profiles import load_profile

from ...proc_devices import NoNvidiaDevices, get, nvidia_devices


def test_rendered_files_parse_back():
    for name in ("a100x4", "h100x8"):
        p = load_profile(name)
        assert procfs.parse_version(render.render_version(p)) == p.driver.version
        for gpu in p.gpus:
            info = procfs.parse_information(render.render_information(gpu, p))
            assert info["GPU UUID"] == gpu.uuid
            assert info["Model"] == gpu.model
            assert info["Bus Location"] == gpu.bus_id.procfs
            assert int(info["Device Minor"]) == gpu.minor
            assert ("GPU Firmware" in info) == (p.driver.kernel_module == "open")


def test_rendered_information_matches_real_layout(real_information):
    p = load_profile("a100x4")
    lines = render.render_information(p.gpus[0], p).splitlines()
    real = real_information.splitlines()
    # same keys in the same order, same separators
    assert [ln.split(":")[0] for ln in lines] == [ln.split(":")[0] for ln in real]
    assert lines[0].startswith("Model: \t\t ")
    assert lines[2].startswith("GPU UUID: \t ")


def test_params_start_like_the_driver_and_can_say_modify_device_files_off():
    params = procfs.parse_params(render.render_params())
    assert params[:3] == [
        ("ResmanDebugLevel", "4294967295"),
        ("RmLogonRC", "1"),
        ("ModifyDeviceFiles", "1"),
    ]
    off = dict(procfs.parse_params(render.render_params(modify_device_files=False)))
    assert off["ModifyDeviceFiles"] == "0"
    assert params[-1] == ("ExcludedGpus", '""')


# ---------------------------------------------------------------------------------------
# /proc/devices

# A kernel's /proc/devices without an NVIDIA driver (the layout fs/proc/devices.c prints).
KERNEL = (
    "Character devices:\n"
    "  1 mem\n"
    "  4 /dev/vc/0\n"
    "  4 tty\n"
    "  5 /dev/tty\n"
    " 10 misc\n"
    "136 pts\n"
    "226 drm\n"
    "245 hidraw\n"
    "254 gpiochip\n"
    "\n"
    "Block devices:\n"
    "  7 loop\n"
    "  8 sd\n"
    "259 blkext\n"
)


def test_devices_of_a_535_driver_keep_the_kernels_lines_in_order():
    text = render.render_devices(KERNEL, render.driver_chrdevs(load_profile("a100x4")))
    assert text == KERNEL.replace("136 pts\n", "136 pts\n195 nvidia-frontend\n").replace(
        "254 gpiochip\n", "254 gpiochip\n510 nvidia-uvm\n511 nvidia-caps\n"
    )
    devices = nvidia_devices(text)
    assert devices == {"nvidia-frontend": 195, "nvidia-uvm": 510, "nvidia-caps": 511}
    assert get(devices, "nvidia") == 195  # how nvidia-ctk asks for the GPU major


def test_devices_of_a_550_driver_use_the_new_names():
    text = render.render_devices(KERNEL, render.driver_chrdevs(load_profile("h100x8")))
    char = text.split("\n\n")[0].splitlines()[1:]
    assert char[char.index("136 pts") + 1 : char.index("226 drm")] == [
        "195 nvidia",  # minors 0-247, then 254, then 255: the kernel lists by first minor
        "195 nvidia-modeset",
        "195 nvidiactl",
    ]
    devices = nvidia_devices(text)
    assert get(devices, "nvidia") == get(devices, "nvidia-frontend") == 195
    assert (get(devices, "nvidia-uvm"), get(devices, "nvidia-caps")) == (510, 511)
    assert "nvidia-frontend" not in devices
    # the kernel's format: "%3d %s" lines by major, a blank line, the block devices as they were
    majors = [int(line[:3]) for line in char]
    assert majors == sorted(majors)
    assert all(re.fullmatch(r"[ \d]{2}\d \S.*", line) for line in char)
    assert text.endswith("\n\nBlock devices:\n  7 loop\n  8 sd\n259 blkext\n")


def test_no_driver_no_nvidia_lines():
    assert render.driver_chrdevs(load_profile("nogpu")) == []
    assert render.render_devices(KERNEL, []) == KERNEL
    with pytest.raises(NoNvidiaDevices, match="no NVIDIA devices found"):
        nvidia_devices(KERNEL)


def test_a_kernel_without_block_devices():
    # without CONFIG_BLOCK the kernel prints the character devices only
    chrdevs = render.driver_chrdevs(load_profile("a100x4"))
    assert render.render_devices("Character devices:\n  1 mem\n", chrdevs) == (
        "Character devices:\n  1 mem\n195 nvidia-frontend\n510 nvidia-uvm\n511 nvidia-caps\n"
    )


@pytest.mark.parametrize(
    ("kernel", "says"),
    [
        (KERNEL.replace("245 hidraw", "510 hidraw"), "already has '510 hidraw'"),
        (KERNEL.replace("136 pts", "195 nvidia"), "already has '195 nvidia'"),
        (KERNEL.replace("245 hidraw", "240 nvidia-uvm"), "already has '240 nvidia-uvm'"),
        ("Character devices:\n  1 mem", "no 'Character devices:' section"),
        ("", "no 'Character devices:' section"),
        (KERNEL.replace("  1 mem", "mem 1"), "a line 'mem 1'"),
    ],
)
def test_a_kernel_file_that_cannot_take_the_lines_is_one_line_error(kernel, says):
    with pytest.raises(render.DevicesError) as info:
        render.render_devices(kernel, render.driver_chrdevs(load_profile("a100x4")))
    assert says in str(info.value) and "\n" not in str(info.value)
