"""The /dev/char links of the driver's nodes: found missing, made once, relative, atomic.

Device nodes cannot be made without CAP_MKNOD in every test environment, so a fake /dev
holds real character devices copied from what the machine has (/dev/null's numbers stand
in for the driver's: only the kind of file and its numbers matter)."""

from __future__ import annotations

import os
import stat

import pytest

from gpunode.nvidia import devchar


def _chr(path, major, minor):
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
    except PermissionError:
        pytest.skip(f"cannot mknod here (no CAP_MKNOD): {path}")


@pytest.fixture
def dev(tmp_path):
    d = tmp_path / "dev"
    (d / "nvidia-caps").mkdir(parents=True)
    _chr(d / "nvidia0", 195, 0)
    _chr(d / "nvidiactl", 195, 255)
    _chr(d / "nvidia-caps" / "nvidia-cap1", 511, 1)
    (d / "nvidia-notadevice").write_text("")
    (d / "null-ish").write_text("")
    return d


def test_every_driver_node_is_found_and_linked_once(dev):
    assert [(os.path.relpath(p, dev), ma, mi) for p, ma, mi in devchar.driver_nodes(str(dev))] == [
        ("nvidia-caps/nvidia-cap1", 511, 1),
        ("nvidia0", 195, 0),
        ("nvidiactl", 195, 255),
    ]
    made = devchar.create(str(dev), dry_run=True)
    assert made == [f"{dev}/char/511:1", f"{dev}/char/195:0", f"{dev}/char/195:255"]
    assert not (dev / "char").exists()  # a dry run makes nothing
    assert devchar.create(str(dev)) == made
    assert os.readlink(dev / "char" / "195:0") == "../nvidia0"
    assert os.readlink(dev / "char" / "511:1") == "../nvidia-caps/nvidia-cap1"
    assert devchar.missing(str(dev)) == [] and devchar.create(str(dev)) == []


def test_a_link_to_something_else_is_replaced(dev):
    (dev / "char").mkdir()
    os.symlink("../nvidiactl", dev / "char" / "195:0")  # wrong target
    assert (f"{dev}/char/195:0", f"{dev}/nvidia0") in devchar.missing(str(dev))
    devchar.create(str(dev))
    assert os.readlink(dev / "char" / "195:0") == "../nvidia0"
    assert not [n for n in os.listdir(dev / "char") if "gpunode" in n]  # no temporary left
