"""The matching-version check: NVML's, the loaded module's, the package's and the pin's driver
versions compared, a mismatch named with its fix."""

from __future__ import annotations

from gpunode.provision import matching


def cmp(**kw):
    base = {
        "nvml": "535.261.03",
        "nvml_error": None,
        "loaded": "535.261.03",
        "installed": "535.261.03-1",
        "package": "libnvidia-ml1",
        "pin": "535.261.03",
    }
    return matching.compare(**{**base, **kw})


def test_all_agree():
    m = cmp()
    assert m.ok and not m.reboot_needed


def test_loaded_module_older_than_package_needs_reboot():
    m = cmp(nvml="535.247.01", loaded="535.247.01")
    assert not m.ok and m.reboot_needed
    assert "535.247.01, older than the installed package libnvidia-ml1 535.261.03" in m.message
    assert "reboot the node" in m.message and "modprobe nvidia" in m.message


def test_package_differs_from_pin():
    m = cmp(installed="535.309.01-0+deb12u1", nvml="535.309.01", loaded="535.309.01")
    assert not m.ok and not m.reboot_needed
    assert (
        "installed libnvidia-ml1 is 535.309.01 but the pinned version is 535.261.03: install the pin"
        in m.message
    )


def test_nvml_differs():
    m = cmp(nvml="550.163.01")
    assert (
        not m.ok
        and "NVML reports driver 550.163.01 but the installed package libnvidia-ml1 is 535.261.03"
        in m.message
    )


def test_not_installed():
    assert "is not installed" in cmp(installed=None).message
