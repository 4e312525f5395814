"""Preflight facts from a fake host: GPUs, OS and architecture, the kernel module, disk,
containerd's CDI."""

from __future__ import annotations

import pytest

from gpunode.provision import preflight


def _host(tmp_path, os_id="debian", ver="12", pci=(), gpus=(), efi=None, files=()):
    (tmp_path / "etc").mkdir(parents=True)
    (tmp_path / "etc/os-release").write_text(f'ID={os_id}\nVERSION_ID="{ver}"\n')
    for i, (vendor, klass, dev) in enumerate(pci):
        d = tmp_path / f"sys/bus/pci/devices/0000:0{i}:00.0"
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(klass + "\n")
        (d / "device").write_text(dev + "\n")
    for g in gpus:
        (tmp_path / "proc/driver/nvidia/gpus" / g).mkdir(parents=True)
    if efi is not None:
        d = tmp_path / "sys/firmware/efi/efivars"
        d.mkdir(parents=True)
        (d / preflight.SECURE_BOOT_VAR).write_bytes(b"\x06\x00\x00\x00" + bytes([efi]))
    for f in files:
        (tmp_path / f).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f).write_text("")
    return tmp_path


def test_gpu_from_pci_sysfs(tmp_path):
    root = _host(
        tmp_path,
        pci=[
            ("0x10de", "0x030200", "0x20b2"),
            ("0x10de", "0x040300", "0x1aef"),
            ("0x8086", "0x030000", "0x1234"),
        ],
    )
    f = preflight.collect(
        root, kernel="6.1.0-1-amd64", arch="x86_64", kernel_module=False, min_free_mib=0
    )
    assert f.has_gpu and [g["device_id"] for g in f.gpus_pci] == ["0x20b2"]
    assert f.ok and f.secure_boot == "disabled"


def test_gpu_from_driver_only(tmp_path):
    f = preflight.collect(
        _host(tmp_path, gpus=["0000:07:00.0"]),
        kernel="k",
        arch="x86_64",
        min_free_mib=0,
        kernel_module=False,
    )
    assert f.has_gpu and f.gpus_driver == ["0000:07:00.0"]
    g = preflight.collect(_host(tmp_path / "x"), kernel="k", arch="x86_64", min_free_mib=0)
    assert not g.has_gpu and g.ok


def test_unsupported_os_and_arch(tmp_path):
    f = preflight.collect(
        _host(tmp_path, "debian", "11"), kernel="k", arch="x86_64", min_free_mib=0
    )
    assert not f.ok and "operating system debian 11 is not supported" in f.to_dict()["message"]
    g = preflight.collect(_host(tmp_path / "a"), kernel="k", arch="riscv64", min_free_mib=0)
    assert "architecture riscv64 is not supported" in g.to_dict()["message"]


def test_debian_testing_is_known_by_its_codename(tmp_path):
    """Debian 14 (testing) has no VERSION_ID in os-release, only VERSION_CODENAME."""
    root = _host(tmp_path)
    (root / "etc/os-release").write_text("ID=debian\nVERSION_CODENAME=forky\n")
    f = preflight.collect(root, kernel="k", arch="x86_64", min_free_mib=0)
    assert (f.distro, f.release, f.supported) == ("debian", "14", True), f.to_dict()
    (root / "etc/os-release").write_text("ID=debian\nVERSION_CODENAME=duke\n")
    g = preflight.collect(root, kernel="k", arch="x86_64", min_free_mib=0)
    assert "operating system debian duke is not supported" in g.to_dict()["message"]


def test_kernel_module_checks(tmp_path):
    root = _host(
        tmp_path,
        gpus=["0000:07:00.0"],
        efi=1,
        files=["usr/bin/nvidia-uninstall", "sys/module/nouveau/x"],
    )
    f = preflight.collect(root, kernel="6.1.0-9-amd64", arch="x86_64", min_free_mib=0)
    msg = f.to_dict()["message"]
    assert not f.ok and f.secure_boot == "enabled" and f.nouveau_loaded
    assert "Secure Boot is enabled" in msg and "nvidia-uninstall" in msg
    checks = {p.check: p.fatal for p in f.problems}
    assert checks == {"conflict": True, "headers": False, "secure_boot": True, "nouveau": False}
    signed = preflight.collect(
        root, kernel="6.1.0-9-amd64", arch="x86_64", min_free_mib=0, secure_boot_signing=True
    )
    assert "secure_boot" not in {p.check for p in signed.problems}
    (root / "lib/modules/6.1.0-9-amd64/build").mkdir(parents=True)
    assert "headers" not in {
        p.check
        for p in preflight.collect(
            root, kernel="6.1.0-9-amd64", arch="x86_64", min_free_mib=0
        ).problems
    }


def test_disk(tmp_path):
    f = preflight.collect(_host(tmp_path), kernel="k", arch="x86_64", min_free_mib=10**9)
    assert not f.ok and "gpu_preflight_min_free_mib" in f.to_dict()["message"]


@pytest.mark.parametrize(
    ("version", "cdi", "refused"),
    [("1.6.20~ds1", True, True), ("1.7.0", True, False), ("1.7.24~ds1", True, False),
     ("1.6.20~ds1", False, False)],
)  # fmt: skip
def test_containerd_without_cdi_is_a_fatal_preflight_problem(tmp_path, version, cdi, refused):
    """gpu_container_runtime would enable CDI in containerd: < 1.7 stops the run before any
    change, naming the knob."""
    exe = tmp_path / "bin/containerd"
    exe.parent.mkdir()
    exe.write_text(
        f"#!/bin/sh\necho 'containerd github.com/containerd/containerd {version} {version}-1'\n"
    )
    exe.chmod(0o755)
    f = preflight.collect(_host(tmp_path / "root"), kernel="k", arch="x86_64",
                          kernel_module=False, min_free_mib=0, containerd_cdi=cdi,
                          containerd=str(exe))  # fmt: skip
    problems = [p for p in f.problems if p.check == "containerd_cdi"]
    assert bool(problems) is refused and f.ok is not refused
    if refused:
        msg = problems[0].message
        assert problems[0].fatal and "\n" not in msg
        assert msg.startswith("containerd 1.6.20 has no CDI (enable_cdi needs containerd >= 1.7.0")
        assert "set gpu_container_runtime_containerd_cdi: false" in msg
