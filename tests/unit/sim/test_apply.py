"""Applying a profile: the /proc/devices file (without mounts; the bind mounts over the node's
/proc/devices and each container's are exercised on simulated nodes,
tests/integration/test_sim_node.py)."""

from __future__ import annotations

import os

from gpunode.sim.apply import Paths, Result, apply_proc_devices
from gpunode.sim.profiles import load_profile

from ...proc_devices import get, nvidia_devices
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
