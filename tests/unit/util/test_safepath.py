"""gpunode.util.safepath against hostile container roots, with both resolvers."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from gpunode.util import safepath

from ..helpers import snapshot


def _target(fd: int) -> str:
    return os.readlink(safepath.proc_fd_path(fd))


def test_safepath_absolute_symlink_stays_in_root(resolver, rootfs, host):
    (rootfs / "usr/lib/x86_64-linux-gnu").symlink_to(host)
    (rootfs / str(host).lstrip("/")).mkdir(parents=True)
    root_fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY)
    try:
        fd = safepath.open_in_root(root_fd, "/usr/lib/x86_64-linux-gnu", follow_last=True)
        assert _target(fd) == str(rootfs) + str(host)
        os.close(fd)
        with pytest.raises(FileNotFoundError):
            safepath.open_in_root(root_fd, "/usr/lib/x86_64-linux-gnu/victim")
    finally:
        os.close(root_fd)


def test_safepath_dotdot_clamped_at_root(resolver, rootfs, host):
    depth = len(rootfs.parts) + 3
    (rootfs / "usr/lib/evil").symlink_to("../" * depth + str(host).lstrip("/"))
    root_fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY)
    try:
        for path in ("/usr/lib/evil/victim", "/../../../" + str(host) + "/victim"):
            with pytest.raises(FileNotFoundError):
                safepath.open_in_root(root_fd, path)
        fd = safepath.open_in_root(root_fd, "/../../etc/../..", os.O_PATH | os.O_DIRECTORY)
        assert _target(fd) == str(rootfs)
        os.close(fd)
    finally:
        os.close(root_fd)


def test_safepath_last_component_and_loops(resolver, rootfs, host):
    (rootfs / "etc/link").symlink_to(host / "victim")
    (rootfs / "etc/loop").symlink_to("loop")
    root_fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY)
    try:
        fd = safepath.open_in_root(root_fd, "/etc/link")  # the symlink itself
        assert stat.S_ISLNK(os.fstat(fd).st_mode)
        os.close(fd)
        with pytest.raises(OSError) as exc:
            safepath.open_in_root(root_fd, "/etc/link", os.O_RDONLY)
        assert exc.value.errno == errno.ELOOP
        with pytest.raises(FileNotFoundError):  # followed, but inside the root
            safepath.open_in_root(root_fd, "/etc/link", os.O_RDONLY, follow_last=True)
        with pytest.raises(OSError) as exc:
            safepath.open_in_root(root_fd, "/etc/loop/x")
        assert exc.value.errno == errno.ELOOP
    finally:
        os.close(root_fd)


def test_safepath_mkdir_p(resolver, rootfs, host):
    (rootfs / "lib").symlink_to("usr/lib")
    (rootfs / "dangling").symlink_to(host / "newdir")
    before = snapshot(host)
    root_fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY)
    try:
        fd = safepath.mkdir_p_in_root(root_fd, "/lib/a/b")
        assert _target(fd) == str(rootfs / "usr/lib/a/b")
        os.close(fd)
        with pytest.raises(OSError):
            safepath.mkdir_p_in_root(root_fd, "/dangling/sub")
    finally:
        os.close(root_fd)
    assert snapshot(host) == before


def test_safepath_no_symlinks(resolver, rootfs, host):
    (rootfs / "proc/driver").mkdir(parents=True)
    (rootfs / "proc/driver/nvidia").symlink_to(host)
    root_fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY)
    try:
        fd = safepath.open_beneath_no_symlinks(root_fd, "proc/driver", os.O_PATH | os.O_DIRECTORY)
        os.close(fd)
        for path in ("proc/driver/nvidia", "proc/driver/nvidia/victim", "proc/../etc"):
            with pytest.raises(safepath.UnsafePath):
                safepath.open_beneath_no_symlinks(root_fd, path)
    finally:
        os.close(root_fd)
