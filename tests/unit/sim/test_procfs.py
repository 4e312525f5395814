"""The simulator's /proc/driver/nvidia files: what it writes is what the parsers read."""

from gpunode.nvidia import procfs
from gpunode.sim import procfs as render
from gpunode.sim.profiles import load_profile


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
