"""Matching-version check, preflight facts from a fake host, the CLI's exit codes."""

from __future__ import annotations

import json

import pytest

from gpunode.cli.main import main as cli_main
from gpunode.provision import matching, preflight


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


D12 = ["--distro", "debian", "--release", "12", "--driver-branch", "535"]


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--cuda", "12.7"],
            "gpunode: error: cuda_toolkit_versions: CUDA '12.7' is not a known release",
        ),
        (
            [
                "--distro",
                "ubuntu",
                "--release",
                "24.04",
                "--driver-branch",
                "515",
                "--driver-source",
                "cuda-repo",
            ],
            "gpunode: error: nvidia_driver_branch: 515 is not available from NVIDIA's CUDA repository",
        ),
        (
            [
                *D12,
                "--driver-version",
                "535.2x",
            ],
            "gpunode: error: nvidia_driver_version: '535.2x' is not a driver version",
        ),
        (
            # the gate speaks before the package plan (which would say "ships CUDA 11.8 only")
            [
                "--cuda",
                "12.4",
                "--driver-version",
                "535.261.03",
                *D12,
            ],
            "gpunode: error: cuda_toolkit_versions: CUDA 12.4 needs NVIDIA driver >= 550.54.14 (strict policy)",
        ),
    ],
)
def test_validate_cli_one_line_exit_2(capsys, argv, line):
    assert cli_main(["provision", "validate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(line) and err.count("\n") == 1


def test_validate_cli_ok_json(capsys):
    assert (
        cli_main(
            [
                "provision",
                "validate",
                "--json",
                "--cuda",
                "11.8",
                "--driver-version",
                "535.261.03",
                "--distro",
                "debian",
                "--release",
                "12",
                "--driver-branch",
                "535",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True and out["changed"] is False


def test_cuda_gate_cli_exit_1_with_driver(capsys):
    assert (
        cli_main(["provision", "cuda-gate", "--cuda", "12.4", "--driver", "535.261.03", "--json"])
        == 1
    )
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is False and "550.54.14" in out["message"]


def test_driver_check_cli_reads_the_loaded_module_and_packages(tmp_path, monkeypatch, capsys):
    """`provision driver-check` end to end through the CLI: the loaded module from procfs,
    the package from the package manager, NVML from the inventory (here: no driver)."""
    from gpunode.nvidia import inventory
    from gpunode.provision import packages

    def no_driver(**_kw):
        raise inventory.NoDriver("no NVIDIA driver: /proc/driver/nvidia is missing")

    monkeypatch.setattr(inventory, "collect", no_driver)
    monkeypatch.setattr(packages, "installed", lambda family, name: "535.261.03-1")
    version = tmp_path / "version"
    version.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.247.01  Tue Jun 10 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    argv = ["provision", "driver-check", "--package", "libnvidia-ml1", "--pin", "535.261.03"]
    code = cli_main([*argv, "--proc-version", str(version), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code != 0 and out["ok"] is False
    assert out["loaded"] == "535.247.01" and out["installed"] == "535.261.03-1"
    assert "535.247.01" in out["message"] and "535.261.03" in out["message"]


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
