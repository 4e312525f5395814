"""The driver's device nodes: the one stat, the GPU node check."""

from __future__ import annotations

import os
import stat
import types

from gpunode.nvidia import devices


def test_stat_device_under_a_dev_root(tmp_path):
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "nvidiactl").symlink_to("/dev/null")  # a character device
    (tmp_path / "dev" / "nvidia0").write_text("")  # not one
    dev = devices.stat_device("/dev/nvidiactl", str(tmp_path))
    null = os.stat("/dev/null")
    assert dev == devices.Device(
        "/dev/nvidiactl",
        f"{tmp_path}/dev/nvidiactl",
        os.major(null.st_rdev),
        os.minor(null.st_rdev),
        null.st_mode & 0o7777,
        null.st_uid,
        null.st_gid,
    )
    assert devices.stat_device("/dev/nvidia0", str(tmp_path)) is None
    assert devices.stat_device("/dev/nvidia1", str(tmp_path)) is None
    assert devices.under("/", "/dev/x") == "/dev/x" and devices.gpu_node(3) == "/dev/nvidia3"


def test_is_gpu_node():
    null = os.stat("/dev/null")  # 1:3, not the NVIDIA major
    assert not devices.is_gpu_node(null)

    def node(mode, major, minor):
        return types.SimpleNamespace(st_mode=mode, st_rdev=os.makedev(major, minor))

    gpu = node(null.st_mode, devices.NVIDIA_MAJOR, 2)
    assert devices.is_gpu_node(gpu) and devices.is_gpu_node(gpu, 2)
    assert not devices.is_gpu_node(gpu, 3)
    assert not devices.is_gpu_node(node(stat.S_IFREG | 0o644, devices.NVIDIA_MAJOR, 2))
