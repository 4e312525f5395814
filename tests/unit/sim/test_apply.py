"""Applying a profile: the /proc/devices file (without mounts; the bind mounts over the node's
/proc/devices and each container's are exercised on simulated nodes,
tests/integration/test_sim_node.py)."""

from __future__ import annotations

import os
import shutil
import stat

import pytest

from gpunode.sim import migstate
from gpunode.sim.apply import Paths, Result, apply_proc_devices
from gpunode.sim.profiles import load_profile, mock_payload

from ...proc_devices import get, nvidia_devices
from .test_mocknvml import built_lib  # noqa: F401  (fixture: the mock does sim apply's MIG part)
from .test_procfs import KERNEL


def paths(tmp_path) -> Paths:
    kernel = tmp_path / "kernel-devices"
    kernel.write_text(KERNEL)
    return Paths(proc_devices=kernel, devices_file=tmp_path / "run" / "devices", real_system=False)


def apply(name: str, where: Paths) -> list[str]:
    res = Result()
    apply_proc_devices(load_profile(name), where, res)
    return res.changed


def test_the_file_follows_the_profile_in_place(tmp_path):
    where = paths(tmp_path)
    out = where.devices_file
    assert apply("a100x4", where) == [f"wrote {out}"]
    assert get(nvidia_devices(out.read_text()), "nvidia") == 195
    assert "195 nvidia-frontend\n" in out.read_text()
    assert oct(os.stat(out).st_mode & 0o777) == "0o444"  # readable by every user
    assert apply("a100x4", where) == []  # idempotent
    inode = os.stat(out).st_ino
    assert apply("h100x8", where) == [f"wrote {out}"]
    # the same file: bind mounts of it (each container's /proc/devices) see the new driver
    assert os.stat(out).st_ino == inode
    assert "195 nvidia\n195 nvidia-modeset\n195 nvidiactl\n" in out.read_text()
    assert "nvidia-frontend" not in out.read_text()
    assert (where.proc_devices).read_text() == KERNEL  # the kernel's file is only read


def test_no_driver_removes_it(tmp_path):
    where = paths(tmp_path)
    apply("a100x4", where)
    assert apply("nogpu", where) == [f"wrote {where.devices_file}", f"removed {where.devices_file}"]
    assert not where.devices_file.exists()
    assert apply("nogpu", where) == []


def test_nothing_outside_a_node_unless_asked(tmp_path):
    where = Paths(proc_devices=tmp_path / "missing", real_system=False)
    assert apply("a100x4", where) == []  # not even read


def test_the_kernel_log_holds_the_drivers_xid_for_each_fault(tmp_path):
    """t4x2-faulty's GPU 1 (bus d8) has uncorrectable ECC: the driver logs Xid 48 for it, and
    gpunode's reader maps it to exactly that GPU; a100x4 logs only the driver's load line."""
    from gpunode.nvidia import xid
    from gpunode.sim.apply import apply_kernel_log

    where = Paths(dev=tmp_path, real_system=False)
    res = Result()
    apply_kernel_log(load_profile("t4x2-faulty"), where, res)
    kmsg = tmp_path / "kmsg"
    assert res.changed == [f"wrote {kmsg}"]
    events = xid.parse_log(xid.read_kernel_log(str(kmsg)))
    assert [(e.xid, e.bus.procfs) for e in events] == [(48, "0000:d8:00.0")]
    assert kmsg.read_text().startswith("6,0,5000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.261.03")
    res = Result()
    apply_kernel_log(load_profile("a100x4"), where, res)
    assert xid.parse_log(kmsg.read_text()) == [] and res.changed == [f"wrote {kmsg}"]
    res = Result()
    apply_kernel_log(load_profile("nogpu"), where, res)
    assert not kmsg.exists() and res.changed == [f"removed {kmsg}"]
# ---- MIG state and footprint (gpunode.sim.migstate, done by the mock's setup.c) ----

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="makes device nodes (mknod)")
MIG_GPU = "GPU-7c41e0a2-5f3b-4d19-a8e6-2b9d0c4f6a51"  # a100x2-mig: minor 0, MIG on
OFF_GPU = "GPU-7c41e0a2-5f3b-4d19-a8e6-2b9d0c4f6a52"  # minor 1, MIG-capable, off


@pytest.fixture
def where(tmp_path, built_lib) -> Paths:  # noqa: F811
    for sub in ("proc/nvidia", "dev", "var"):
        (tmp_path / sub).mkdir(parents=True, exist_ok=True)
    return Paths(
        dev=tmp_path / "dev",
        proc_driver=tmp_path / "proc",
        state=tmp_path / "var" / "profile.json",
        mock_base=built_lib,
        real_system=False,
    )


def apply_mig(name: str, where: Paths) -> list[str]:
    res = Result()
    profile = load_profile(name)
    migstate.apply_mig(profile, mock_payload(profile), where, res)
    return res.changed


def cap_nodes(where: Paths) -> dict[str, tuple[int, int, int]]:
    out = {}
    for node in sorted((where.dev / "nvidia-caps").iterdir()):
        st = os.lstat(node)
        assert stat.S_ISCHR(st.st_mode)
        out[node.name] = (os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_IMODE(st.st_mode))
    return out


def caps_files(where: Paths) -> dict[str, str]:
    caps = where.proc_driver / "nvidia" / "capabilities"
    return {str(p.relative_to(caps)): p.read_text() for p in caps.rglob("*") if p.is_file()}


ACCESS = "DeviceFileMinor: {}\nDeviceFileMode: {}\nDeviceFileModify: 1\n"


@needs_root
def test_mig_state_and_footprint_from_the_profile(where):
    changed = apply_mig("a100x2-mig", where)
    assert changed
    state = (where.proc_driver / ".gpunode-sim" / "mig-state").read_text()
    assert state.splitlines()[0] == "gpunode-sim-mig-state v1"
    assert f"gpu\tuuid={MIG_GPU}\tmode=1\tcounter=0" in state
    assert f"gpu\tuuid={OFF_GPU}\tmode=0\tcounter=0" in state
    assert f"gi\tparent={MIG_GPU}\tid=2\tprofile=9\tstart=4" in state
    assert (
        f"ci\tparent={MIG_GPU}\tgi=2\tid=0\tprofile=2\tstart=0"
        "\tuuid=MIG-0f6b2d84-3a1c-5e97-b2d4-8c1e6a3f9b01" in state
    )
    # the driver's files, in its formats (the MIG contract, section 1)
    files = caps_files(where)
    assert files.pop("mig/config") == ACCESS.format(1, 256)
    assert files.pop("mig/monitor") == ACCESS.format(2, 292)
    assert files == {
        "gpu0/mig/gi2/access": ACCESS.format(21, 292),
        "gpu0/mig/gi2/ci0/access": ACCESS.format(22, 292),
        "gpu0/mig/gi3/access": ACCESS.format(30, 292),
        "gpu0/mig/gi3/ci0/access": ACCESS.format(31, 292),
        "gpu0/mig/gi9/access": ACCESS.format(84, 292),
        "gpu0/mig/gi9/ci0/access": ACCESS.format(85, 292),
    }
    assert (where.proc_driver / "nvidia" / "capabilities" / "gpu1" / "mig").is_dir()
    minors = (where.proc_driver / "nvidia-caps" / "mig-minors").read_text().splitlines()
    # NVIDIA's sample lines (container toolkit, dra-driver) fit the simulator's minors
    for line in (
        "config 1",
        "monitor 2",
        "gpu0/gi0/access 3",
        "gpu0/gi0/ci0/access 4",
        "gpu3/gi3/ci3/access 439",
        "gpu6/gi11/ci7/access 920",
    ):
        assert line in minors
    assert len(minors) == 2 + 32 * 135
    assert cap_nodes(where) == {
        f"nvidia-cap{m}": (511, m, mode)
        for m, mode in (
            (1, 0o400),
            (2, 0o444),
            (21, 0o444),
            (22, 0o444),
            (30, 0o444),
            (31, 0o444),
            (84, 0o444),
            (85, 0o444),
        )
    }
    assert apply_mig("a100x2-mig", where) == []  # idempotent
    # the mock did it and is unloaded again: a later libnvidia-ml.so.1 load here is not it
    with open("/proc/self/maps") as maps:
        assert str(where.mock_base) not in maps.read()


@needs_root
def test_reapplying_keeps_instances_processes_made_another_profile_replaces(where):
    apply_mig("a100x2-mig", where)
    state_file = where.proc_driver / ".gpunode-sim" / "mig-state"
    # what the mock NVML writes after a process enabled MIG on GPU 1 and made a 7g instance
    made = state_file.read_text().replace(
        f"uuid={OFF_GPU}\tmode=0\tcounter=0", f"uuid={OFF_GPU}\tmode=1\tcounter=1"
    ) + (
        f"gi\tparent={OFF_GPU}\tid=0\tprofile=0\tstart=0\n"
        f"ci\tparent={OFF_GPU}\tgi=0\tid=0\tprofile=4\tstart=0"
        "\tuuid=MIG-11111111-2222-3333-4444-555555555555\n"
    )
    state_file.write_text(made)
    changed = apply_mig("a100x2-mig", where)
    assert state_file.read_text() == made  # kept
    assert all("mig-state" not in c for c in changed)
    assert caps_files(where)["gpu1/mig/gi0/ci0/access"] == ACCESS.format(139, 292)
    assert {"nvidia-cap138", "nvidia-cap139"} <= set(cap_nodes(where))
    # another profile replaces the state and its footprint
    apply_mig("a100x4", where)
    assert "\ngi\t" not in state_file.read_text()
    assert set(caps_files(where)) == {"mig/config", "mig/monitor"}
    assert set(cap_nodes(where)) == {"nvidia-cap1", "nvidia-cap2"}
    apply_mig("nogpu", where)
    assert not (where.proc_driver / ".gpunode-sim").exists()
    assert not (where.dev / "nvidia-caps").exists()


@needs_root
def test_mig_mode_survives_a_node_restart(tmp_path, where):
    apply_mig("a100x2-mig", where)
    key = migstate.profile_key(mock_payload(load_profile("a100x2-mig")))
    # a process disabled MIG on GPU 0 and enabled it on GPU 1 (the mock records the modes)
    (tmp_path / "var" / "mig-mode").write_text(f"key\t{key}\n{MIG_GPU}\t0\n{OFF_GPU}\t1\n")
    shutil.rmtree(where.proc_driver / ".gpunode-sim")  # the tmpfs is gone after a restart
    apply_mig("a100x2-mig", where)
    state = (where.proc_driver / ".gpunode-sim" / "mig-state").read_text()
    assert f"uuid={MIG_GPU}\tmode=0\t" in state and f"uuid={OFF_GPU}\tmode=1\t" in state
    assert "\ngi\t" not in state and "\nci\t" not in state  # instances do not survive
    assert set(cap_nodes(where)) == {"nvidia-cap1", "nvidia-cap2"}
