"""The simulated NVSwitch fabric (gpunode.sim.fabric): the driver's switches in
/proc/driver/nvidia-nvswitch, the one fabric state (the stand-in writes it, the mock reads
it, a driver load removes it) and the fabric manager stand-in, run as NVIDIA's would be."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpunode.sim import fabric, migstate, procfs
from gpunode.sim.apply import Paths, apply_profile
from gpunode.sim.profiles import load_profile

from .test_mocknvml import (  # noqa: F401  (built_lib, pynvml_ready: fixtures)
    built_lib,
    install_lib,
    needs_unshare,
    pynvml_ready,
)

ROOT = Path(__file__).resolve().parents[3]


def standin_module():
    """The stand-in script loaded as a module (it has no .py suffix)."""
    loader = importlib.machinery.SourceFileLoader("nv_fabricmanager", str(fabric.STANDIN))
    spec = importlib.util.spec_from_loader("nv_fabricmanager", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_standin_spells_the_state_as_the_module_defines_it():
    fm = standin_module()
    assert f"{migstate.PROC_DRIVER}/{migstate.SIM_DIR}/{fabric.STATE_NAME}" == fm.STATE_FILE
    assert f"{migstate.PROC_DRIVER}/{migstate.SIM_DIR}" == fm.STATE_DIR
    assert fm.STATE_FORMAT == fabric.STATE_FORMAT
    assert (fm.IN_PROGRESS, fm.COMPLETED) == (fabric.IN_PROGRESS, fabric.COMPLETED)
    assert f"{migstate.PROC_DRIVER}/{fabric.NVSWITCH_PROC}/devices" == fm.NVSWITCH_DEVICES
    assert (fm.MISMATCH, fm.NOTHING_TO_DO) == (fabric.MISMATCH, fabric.NOTHING_TO_DO)
    assert (fm.PID_FILE, fm.DEFAULT_CONFIG) == (fabric.PID_FILE, fabric.CONFIG)
    assert fm.FM_VERSION == fabric.VERSION_PLACEHOLDER


def test_the_unit_is_nvidias():
    unit = fabric.UNIT.read_text()
    assert fabric.UNIT.name == fabric.UNIT_NAME
    assert f"ExecStart={fabric.BINARY} -c {fabric.CONFIG}\n" in unit
    assert "Type=forking\n" in unit and f"PIDFile={fabric.PID_FILE}\n" in unit
    assert (fabric.STANDIN_DIR / "fabricmanager.cfg").read_text().count("DAEMONIZE=1\n") == 1


def test_render_standin_bakes_the_version_in(tmp_path):
    text = fabric.render_standin("550.163.01")
    assert 'FM_VERSION = "550.163.01"\n' in text and fabric.VERSION_PLACEHOLDER not in text
    with pytest.raises(ValueError, match=r"550\.x"):
        fabric.render_standin("550.x")
    # the source tree's copy is no fabric manager of any version
    proc = subprocess.run([sys.executable, str(fabric.STANDIN), "-c", "/dev/null"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 1 and "not built into a package" in proc.stderr


def test_the_drivers_nvswitch_tree():
    """procfs_nvswitch.c's files: permissions, one devices/<address>/information a switch."""
    h100 = fabric.proc_tree(load_profile("h100x8"))
    a100 = fabric.proc_tree(load_profile("a100x4"))
    t4 = fabric.proc_tree(load_profile("t4x2-faulty"))
    assert h100.pop("nvidia-nvswitch/permissions") == "DeviceFileMode: 438\n"
    assert sorted(h100) == [f"nvidia-nvswitch/devices/0000:{b}:00.0/information"
                            for b in ("e3", "e4", "e5", "e6")]  # fmt: skip
    assert set(h100.values()) == {"BIOS Version: N/A\n"}
    assert list(a100) == ["nvidia-nvswitch/permissions"]  # HGX A100 4-GPU: no NVSwitch
    assert list(t4) == ["nvidia-nvswitch/permissions"]  # no switch: devices/ stays empty


# ---------------------------------------------------------------------------------------
# sim apply: the tree, and a driver load resets the fabric


@pytest.fixture
def node(tmp_path, built_lib) -> Paths:  # noqa: F811
    for sub in ("proc", "dev", "var", "lib"):
        (tmp_path / sub).mkdir()
    return Paths(dev=tmp_path / "dev", proc_driver=tmp_path / "proc", libdir=tmp_path / "lib",
                 state=tmp_path / "var" / "profile.json", mock_base=built_lib,
                 real_system=False)  # fmt: skip


def trained(where: Paths) -> None:
    state = fabric.state_file(where.proc_driver)
    state.parent.mkdir(exist_ok=True)
    state.write_text(fabric.STATE_FORMAT % fabric.COMPLETED)


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="sim apply makes device nodes")


@needs_root
def test_apply_shows_the_switches_and_a_driver_load_resets_the_fabric(node):
    switches = node.proc_driver / "nvidia-nvswitch" / "devices"
    apply_profile(load_profile("h100x8"), node)
    assert sorted(p.name for p in switches.iterdir()) == [
        "0000:e3:00.0", "0000:e4:00.0", "0000:e5:00.0", "0000:e6:00.0"]  # fmt: skip
    assert fabric.read_state(node.proc_driver) == fabric.NOT_STARTED
    trained(node)
    # the same profile again: the driver stays loaded, the fabric trained (no change at all)
    assert apply_profile(load_profile("h100x8"), node).changed == []
    assert fabric.read_state(node.proc_driver) == fabric.COMPLETED
    # another profile is another driver load: untrained until FM runs again
    changed = apply_profile(load_profile("h100x8-degraded"), node).changed
    assert fabric.read_state(node.proc_driver) == fabric.NOT_STARTED
    assert any(c.startswith("reset the NVSwitch fabric") for c in changed)
    # an HGX A100 4-GPU board (direct NVLinks, no NVSwitch) empties the devices; a
    # driver-less node shows no tree
    apply_profile(load_profile("a100x4"), node)
    assert list(switches.iterdir()) == []
    apply_profile(load_profile("t4x2-faulty"), node)
    assert list(switches.iterdir()) == []
    apply_profile(load_profile("nogpu"), node)
    assert not (node.proc_driver / "nvidia-nvswitch").exists()


@needs_root
def test_a_new_driver_version_is_a_driver_load(node):
    profile = load_profile("h100x8")
    apply_profile(profile, node)
    trained(node)
    (node.proc_driver / "nvidia" / "version").write_text("NVRM version: older\n")
    node.state.write_text(json.dumps(profile.to_dict(), indent=2, sort_keys=True) + "\n")
    apply_profile(profile, node)
    assert fabric.read_state(node.proc_driver) == fabric.NOT_STARTED


# ---------------------------------------------------------------------------------------
# the stand-in, run as root in a node-like mount namespace: the driver's tmpfs over
# /proc/driver, a tmpfs /run (its PID file)

DRIVER = "550.163.01"


def node_script(profile: str, fm_version: str, body: str, tmp_path: Path, cfg: str = "") -> str:
    """A shell script for `unshare -m`: a driver of ``profile`` loaded (its /proc/driver
    files as sim apply writes them), the stand-in of ``fm_version`` at $FM with config
    $CFG, then ``body``."""
    p = load_profile(profile)
    files = {"nvidia/version": procfs.render_version(p)} if p.driver else {}
    if p.driver:
        files.update(fabric.proc_tree(p))
    (tmp_path / "nv-fabricmanager").write_text(fabric.render_standin(fm_version))
    (tmp_path / "fabricmanager.cfg").write_text(cfg or "LOG_FILE_NAME=\nDAEMONIZE=1\n")
    setup = ["set -e", "mount -t tmpfs none /proc/driver", "mount -t tmpfs none /run"]
    for name, text in files.items():
        path = f"/proc/driver/{name}"
        setup += [f"mkdir -p {os.path.dirname(path)}",
                  f"printf '%s' {json.dumps(text)} > {path}"]  # fmt: skip
    setup += [f"FM='{sys.executable} {tmp_path / 'nv-fabricmanager'}'",
              f"CFG={tmp_path / 'fabricmanager.cfg'}", "set +e", body]  # fmt: skip
    return "\n".join(setup)


def in_node(script: str) -> subprocess.CompletedProcess:
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True,
                          text=True, check=False, timeout=60)  # fmt: skip


STATE = f"/proc/driver/{migstate.SIM_DIR}/{fabric.STATE_NAME}"


@needs_unshare
def test_a_version_mismatch_exits_1_with_nvidias_line(tmp_path):
    body = f'$FM -c $CFG; echo "exit $?"; cat {STATE} 2>/dev/null || echo "no state"'
    proc = in_node(node_script("h100x8", "550.90.07", body, tmp_path))
    assert proc.stdout.splitlines() == ["exit 1", "no state"], proc.stderr
    line = (
        "fabric manager NVIDIA GPU driver interface version 550.90.07 don't match with "
        "driver version 550.163.01. Please update with matching NVIDIA driver package."
    )
    last = proc.stderr.strip().splitlines()[-1]
    assert " [ERROR] [tid " in last and last.endswith(f"] {line}")


@needs_unshare
def test_no_nvswitch_exits_1_nothing_to_do(tmp_path):
    """a100x2-mig: two A100s joined by NVLink bridges, no NVSwitch (the driver's devices/
    is empty); and a node without a driver at all."""
    body = f'$FM -c $CFG; echo "exit $?"; cat {STATE} 2>/dev/null || echo "no state"'
    proc = in_node(node_script("a100x2-mig", "535.261.03", body, tmp_path))
    assert proc.stdout.splitlines() == ["exit 1", "no state"], proc.stderr
    assert proc.stderr.strip().endswith(fabric.NOTHING_TO_DO)
    proc = in_node(node_script("nogpu", "535.261.03", body, tmp_path))
    assert proc.stdout.splitlines() == ["exit 1", "no state"], proc.stderr
    assert "failed to open NVIDIA GPU driver" in proc.stderr


@needs_unshare
def test_matching_fm_trains_the_fabric_stays_resident_and_leaves_it_trained(tmp_path):
    body = textwrap.dedent(
        f"""
        $FM -c $CFG; echo "exit $?"
        cat {STATE}
        pid=$(cat {fabric.PID_FILE}); kill -0 "$pid" && echo resident
        kill -TERM "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.05; done
        cat {STATE}; test -e {fabric.PID_FILE} || echo "pid file gone"
        """
    )
    proc = in_node(node_script("h100x8", DRIVER, body, tmp_path))
    assert proc.stdout.splitlines() == [
        "exit 0", "state=3", "resident", "state=3", "pid file gone"], proc.stderr  # fmt: skip
    assert "Successfully configured all the available NVSwitches" in proc.stderr


@needs_unshare
def test_training_shows_in_progress_then_completed(tmp_path):
    """In the foreground (DAEMONIZE=0) the state goes IN_PROGRESS, then COMPLETED."""
    body = textwrap.dedent(
        f"""
        $FM -c $CFG & fm=$!
        seen=""; last=""
        for i in $(seq 200); do
            now=$(cat {STATE} 2>/dev/null || echo none)
            [ "$now" != "$last" ] && seen="$seen $now" && last=$now
            [ "$now" = state=3 ] && break
            sleep 0.02
        done
        kill -TERM $fm; wait $fm; echo $seen
        """
    )
    cfg = "LOG_FILE_NAME=\nDAEMONIZE=0\n"
    proc = in_node(node_script("h100x8", DRIVER, body, tmp_path, cfg))
    assert proc.stdout.split()[-2:] == ["state=2", "state=3"], proc.stdout + proc.stderr


PROBE = textwrap.dedent(
    """
    import json, subprocess, sys
    import pynvml as N

    def states():
        out = []
        for i in range(N.nvmlDeviceGetCount()):
            info = N.c_nvmlGpuFabricInfo_v2_t()
            info.version = N.nvmlGpuFabricInfo_v2
            try:
                N.nvmlDeviceGetGpuFabricInfoV(N.nvmlDeviceGetHandleByIndex(i), N.byref(info))
                out.append([info.state, info.status])
            except N.NVMLError as e:
                out.append(type(e).__name__)
        return out

    N.nvmlInit()
    before = states()
    # the resident daemon keeps the stderr it was given (the journal, under systemd)
    fm = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    print(json.dumps({"before": before, "fm": fm.returncode, "after": states()}))
    """
)


@needs_unshare
@pytest.mark.parametrize(
    ("profile", "fm_version", "want"),
    [
        ("h100x8", DRIVER, {"before": [[1, 0]] * 8, "fm": 0, "after": [[3, 0]] * 8}),
        ("h100x8", "550.90.07", {"before": [[1, 0]] * 8, "fm": 1, "after": [[1, 0]] * 8}),
        # A100 answers NOT_SUPPORTED; a100x4 (HGX A100 4-GPU) has no NVSwitch, so FM exits
        # 1 with NV_WARN_NOTHING_TO_DO there, as NVIDIA's does
        ("a100x4", "535.261.03",
         {"before": ["NVMLError_NotSupported"] * 4, "fm": 1,
          "after": ["NVMLError_NotSupported"] * 4}),
    ],
)  # fmt: skip
def test_nvml_sees_what_the_standin_did(
    built_lib,  # noqa: F811
    tmp_path,
    pynvml_ready,  # noqa: F811
    profile,
    fm_version,
    want,
):
    """One process's NVML: untrained, FM runs, trained (or not, on a mismatch; A100: not
    supported either way, FM still runs there)."""
    p = load_profile(profile)
    from gpunode.sim.profiles import mock_payload

    libdir = install_lib(built_lib, mock_payload(p), tmp_path)
    (tmp_path / "probe.py").write_text(PROBE)
    devs = ["mount -t tmpfs none /dev", "mknod /dev/null c 1 3", "mknod /dev/nvidiactl c 195 255"]
    devs += [f"mknod /dev/nvidia{g.minor} c 195 {g.minor}" for g in p.gpus]
    probe = (f"LD_LIBRARY_PATH={libdir} PYTHONPATH= {sys.executable} {tmp_path / 'probe.py'} "
             f"{sys.executable} {tmp_path / 'nv-fabricmanager'} -c {tmp_path / 'fabricmanager.cfg'}")  # fmt: skip
    stop = f"kill $(cat {fabric.PID_FILE} 2>/dev/null) 2>/dev/null; true"  # the resident FM
    script = node_script(profile, fm_version, "\n".join([*devs, probe, stop]), tmp_path)
    proc = in_node(script)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == want
