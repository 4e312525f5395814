"""`gpunode provision`'s subcommands through the CLI (cli/provision.py): bad input one line
with exit 2, a failed check exit 1, JSON results, `validate --batch`."""

from __future__ import annotations

import io
import json

import pytest

from gpunode.cli.main import main as cli_main

D12 = ["--distro", "debian", "--release", "12", "--driver-branch", "535"]
# a platform with its architecture (validate --batch)
D12_X86 = ["--distro", "debian", "--release", "12", "--arch", "x86_64"]


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


def test_validate_batch_judges_each_host(monkeypatch, capsys):
    hosts = {
        "good": ["--cuda=11.8", "--driver-version=535.261.03", "--driver-branch=535", *D12_X86],
        "bad": ["--cuda=12.4", "--driver-version=535.261.03", *D12_X86],
        "pin": ["--driver-version=535.x", *D12_X86],
    }
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(hosts)))
    assert cli_main(["provision", "validate", "--batch", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["hosts"]["good"]["ok"] is True
    assert out["hosts"]["bad"] == {
        "ok": False,
        "message": "cuda_toolkit_versions: CUDA 12.4 needs NVIDIA driver >= 550.54.14 (strict policy)"
        + out["hosts"]["bad"]["message"].split("(strict policy)", 1)[1],
    }
    assert out["hosts"]["pin"]["message"].startswith("nvidia_driver_version: ")
    assert out["message"] == "invalid inventory values on bad, pin"


@pytest.mark.parametrize("stdin", ["not json", '{"h": "--cuda=11.8"}', "[]"])
def test_validate_batch_bad_input_is_one_line(monkeypatch, capsys, stdin):
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    assert cli_main(["provision", "validate", "--batch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpunode: error: --batch: stdin ") and err.count("\n") == 1
