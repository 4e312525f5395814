"""`gpunode inventory` on the host, with a private /dev, a profile applied to temporary
paths by the simulator's own code, and the real mock NVML loaded by pynvml; its table."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from gpunode.cli.inventory import format_table, mig_mode
from gpunode.nvidia.facts import MigFacts
from gpunode.nvidia.gpu import Gpu
from gpunode.nvidia.inventory import Inventory
from gpunode.sim.profiles import load_profile

from ..nvidia.test_inventory import gpus

APPLY_THEN_INVENTORY = textwrap.dedent(
    """
    import json, os, subprocess, sys
    from pathlib import Path
    from gpunode.sim import fabric
    from gpunode.sim.profiles import load_profile
    from gpunode.sim.apply import Paths, apply_profile
    from gpunode.cli.main import main

    tmp, profile, mock, remove, *flags = sys.argv[1:]
    paths = Paths(dev=Path("/dev"), proc_driver=Path(tmp, "proc"), libdir=Path(tmp, "lib"),
                  mock_base=Path(mock), state=Path(tmp, "state.json"), real_system=False)
    first = apply_profile(load_profile(profile), paths)
    again = apply_profile(load_profile(profile), paths)
    assert first.changed and not again.changed, again.changed
    for minor in filter(None, remove.split(",")):
        os.unlink(f"/dev/nvidia{minor}")
    # the node's fabric manager has trained the NVSwitch fabric, as on a provisioned HGX
    # node: the state the mock reads on the driver's /proc/driver (gpunode.sim.fabric)
    subprocess.run(["mount", "-t", "tmpfs", "none", "/proc/driver"], check=True)
    state = fabric.state_file(Path("/proc/driver"))
    state.parent.mkdir()
    state.write_text(fabric.STATE_FORMAT % fabric.COMPLETED)
    os.environ["LD_LIBRARY_PATH"] = str(paths.libdir)
    os.execv(sys.executable, [sys.executable, "-m", "gpunode", "inventory",
             "--proc-root", str(paths.proc_driver / "nvidia"), *flags])
    """
)


def inventory(private_dev, tmp_path, mock_lib, profile, remove="", flags=("--json",)):
    work = tmp_path / f"run{len(list(tmp_path.glob('run*')))}"
    work.mkdir()
    script = work / "child.py"
    script.write_text(APPLY_THEN_INVENTORY)
    return private_dev(
        [sys.executable, str(script), str(work), profile, str(mock_lib), remove, *flags]
    )


def test_nvml_inventory_reports_exactly_the_profile(private_dev, tmp_path, mock_lib):
    proc = inventory(private_dev, tmp_path, mock_lib, "a100x4")
    assert proc.returncode == 0, proc.stderr
    inv = json.loads(proc.stdout)
    p = load_profile("a100x4")
    assert inv["source"] == "nvml"
    assert inv["driver_version"] == "535.261.03"
    assert inv["cuda_driver_version"] == "12.2"
    assert inv["nvml_version"] == "12.535.261.03"
    assert [g["uuid"] for g in inv["gpus"]] == [g.uuid for g in p.gpus]
    assert [g["pci_bus_id"] for g in inv["gpus"]] == [g.bus_id.nvml for g in p.gpus]
    assert [g["memory_total_mib"] for g in inv["gpus"]] == [81920] * 4
    assert [g["minor"] for g in inv["gpus"]] == [0, 1, 2, 3]
    assert [g["serial"] for g in inv["gpus"]] == [g.serial for g in p.gpus]
    assert inv["healthy"] is True and inv["problems"] == []


def test_removed_device_node_hides_the_gpu_and_is_reported(private_dev, tmp_path, mock_lib):
    proc = inventory(private_dev, tmp_path, mock_lib, "a100x4", remove="2")
    inv = json.loads(proc.stdout)
    p = load_profile("a100x4")
    assert [g["uuid"] for g in inv["gpus"]] == [p.gpus[i].uuid for i in (0, 1, 3)]
    assert [g["index"] for g in inv["gpus"]] == [0, 1, 2]
    assert inv["problems"][0]["issue"] == "device_node_missing"
    assert inv["problems"][0]["uuid"] == p.gpus[2].uuid
    assert inv["healthy"] is False


def test_faults_show_as_health_flags(private_dev, tmp_path, mock_lib):
    inv = json.loads(inventory(private_dev, tmp_path, mock_lib, "t4x2-faulty").stdout)
    assert inv["gpus"][0]["health"] == []
    # the double-bit errors were also logged by the driver as Xid 48 (the simulated /dev/kmsg)
    assert set(inv["gpus"][1]["health"]) == {
        "ecc_uncorrectable",
        "retired_pages_pending",
        "xid_error",
    }
    assert [e["xid"] for e in inv["gpus"][1]["xid_errors"]] == [48] and inv["gpus"][0][
        "xid_errors"
    ] == []
    assert inv["gpus"][1]["ecc_errors"]["uncorrected_volatile"] == 2
    assert inv["gpus"][1]["retired_pages"] == {"single_bit": 0, "double_bit": 2, "pending": True}


def test_every_fault_kind_is_detected(private_dev, tmp_path, mock_lib):
    profile = tmp_path / "allfaults.yaml"
    profile.write_text(
        textwrap.dedent("""
        name: allfaults
        driver: {version: "550.163.01", cuda_version: "12.4"}
        defaults: {model: NVIDIA H100 80GB HBM3, memory_mib: 81559, compute_capability: "9.0"}
        gpus:
          - {uuid: GPU-00000000-0000-4000-8000-000000000000, bus_id: "0000:10:00.0"}
          - {uuid: GPU-00000000-0000-4000-8000-000000000001, bus_id: "0000:11:00.0", faults: [fallen_off_bus]}
          - {uuid: GPU-00000000-0000-4000-8000-000000000002, bus_id: "0000:12:00.0", faults: [row_remap_failure]}
          - {uuid: GPU-00000000-0000-4000-8000-000000000003, bus_id: "0000:13:00.0", faults: [persistence_off]}
          - {uuid: GPU-00000000-0000-4000-8000-000000000004, bus_id: "0000:14:00.0", faults: [device_node_missing]}
          - {uuid: GPU-00000000-0000-4000-8000-000000000005, bus_id: "0000:15:00.0", faults: [ecc_uncorrectable]}
          - {uuid: GPU-00000000-0000-4000-8000-000000000006, bus_id: "0000:16:00.0", faults: [retired_pages_pending]}
        """)
    )
    inv = json.loads(inventory(private_dev, tmp_path, mock_lib, str(profile)).stdout)
    health = {g["uuid"][-1]: g["health"] for g in inv["gpus"]}
    assert health == {
        "0": [],
        "1": ["fallen_off_bus"],
        "2": ["row_remap_failure"],
        "3": ["persistence_off"],
        "5": ["ecc_uncorrectable", "xid_error"],
        "6": ["retired_pages_pending"],
    }
    # the lost GPU has no NVML handle; the kernel's view fills in who it is
    lost = next(g for g in inv["gpus"] if g["health"] == ["fallen_off_bus"])
    assert lost["pci_bus_id"] == "00000000:11:00.0"
    assert [p["uuid"][-1] for p in inv["problems"]] == ["4"]


def test_procfs_fallback_when_nvml_is_missing(private_dev, tmp_path, mock_lib):
    proc = inventory(
        private_dev, tmp_path, mock_lib, "h100x8", remove="5", flags=("--json", "--no-nvml")
    )
    inv = json.loads(proc.stdout)
    p = load_profile("h100x8")
    assert inv["source"] == "procfs"
    assert inv["driver_version"] == "550.163.01"
    assert inv["cuda_driver_version"] is None
    assert [g["uuid"] for g in inv["gpus"]] == [g.uuid for g in p.gpus if g.minor != 5]


def test_no_driver_is_one_line_and_exit_3(private_dev, tmp_path, mock_lib):
    proc = inventory(private_dev, tmp_path, mock_lib, "nogpu", flags=())
    assert proc.returncode == 3
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpunode: error: no NVIDIA driver found")
    proc = inventory(private_dev, tmp_path, mock_lib, "nogpu", flags=("--json",))
    assert proc.returncode == 3
    assert json.loads(proc.stdout)["error"] == "no_driver"


def test_human_table(private_dev, tmp_path, mock_lib):
    proc = inventory(private_dev, tmp_path, mock_lib, "t4x2-faulty", flags=())
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert "NVIDIA driver 535.261.03, CUDA 12.2 (source: nvml), 2 GPU(s)" in lines[0]
    assert "Tesla T4 [ok]" in lines[2]
    assert "[ecc_uncorrectable, retired_pages_pending, xid_error]" in lines[3]


@pytest.mark.parametrize("argv", [["inventory", "--bogus"], ["profile", "show", "zzz"], ["sim"]])
def test_bad_arguments_exit_2_with_one_line(argv, capsys):
    from gpunode.cli.main import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gpunode: error:")


def test_link_and_state_faults_show_as_health_flags(private_dev, tmp_path, mock_lib):
    """h100x8-degraded through the real mock NVML: each GPU's one fault is its one flag, and
    the values NVML gave are in the JSON."""
    proc = inventory(private_dev, tmp_path, mock_lib, "h100x8-degraded")
    assert proc.returncode == 0, proc.stderr
    gpus = json.loads(proc.stdout)["gpus"]
    assert [g["health"] for g in gpus] == [
        ["pcie_link_degraded"], ["pcie_replays"], ["clocks_hw_slowdown"], ["clocks_sw_thermal"],
        ["nvlink_down"], ["inforom_corrupt"], ["fabric_manager_failed"], [],
    ]  # fmt: skip
    assert gpus[0]["pcie_link"] == {"gen": 5, "max_gen": 5, "gpu_max_gen": 5, "width": 8,
                                    "max_width": 16}  # fmt: skip
    assert gpus[1]["pcie_replays"] == 120 and gpus[2]["clocks_event_reasons"] == 0x8
    assert gpus[4]["nvlinks"] == {str(i): i != 0 for i in range(18)}
    assert gpus[6]["fabric"] == {"state": 3, "status": 999, "status_text": "Unknown Error"}
    assert gpus[5]["inforom_valid"] is False and gpus[7]["inforom_valid"] is True
    healthy = json.loads(inventory(private_dev, tmp_path, mock_lib, "t4x2-faulty").stdout)
    t4 = healthy["gpus"][0]
    assert (t4["nvlinks"], t4["fabric"], t4["clocks_event_reasons"]) == ({}, {}, 1)


def test_mig_devices_under_their_gpu_in_the_table():
    a100, t4 = gpus()
    text = format_table(
        Inventory("nvml", "535.261.03", "12.2", "12.535", [a100, t4], hostname="n1")
    )
    lines = text.splitlines()
    assert lines[2].endswith("NVIDIA A100-SXM4-80GB [ok] MIG on, 3 MIG device(s)")
    assert lines[3].split() == ["0:0", "MIG-00000000-0000-0000-0000-000000000000", "40192",
                                "MiB", "MIG", "3g.40gb", "(GI", "1,", "CI", "0)"]  # fmt: skip
    assert lines[5].split()[0] == "0:2" and "1c.3g.40gb" in lines[5]
    assert lines[6].endswith("Tesla T4 [ok]")  # no MIG: no note


def test_pending_mode_shows_in_the_table():
    g = Gpu(0, 0, "GPU-a", "A100", "00000000:07:00.0", mig_mode=False, mig_mode_pending=True)
    assert mig_mode(g) == " MIG off (on after a GPU reset)"
    g.mig_mode, g.mig_mode_pending = True, True
    g.mig_devices = [MigFacts(0, "MIG-x", 1, 0, "7g.80gb", 81920)]
    assert mig_mode(g) == " MIG on, 1 MIG device(s)"
