"""create-symlinks against hostile container images.

The hook runs as a subprocess (as runc would run it). Everything mount-related runs in a
private mount namespace (``unshare -m``), with a shell snippet after the hook inspecting
the result in the same namespace. Every hostile case also checks that nothing appeared
in, or changed in, the host directory the image tried to point the hook at.
"""

from __future__ import annotations

import os

from gpunode.hook import symlinks

from ..helpers import snapshot
from .helpers import run_hook


def test_create_symlinks_normal_and_idempotent(rootfs):
    link = "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"
    rc, _, err = run_hook("create-symlinks", "--root", str(rootfs), "--link", link)
    assert rc == 0, err
    made = rootfs / "usr/lib/x86_64-linux-gnu/libcuda.so"
    assert os.readlink(made) == "libcuda.so.1"
    ino = made.lstat().st_ino
    rc, _, err = run_hook("create-symlinks", "--root", str(rootfs), "--link", link)
    assert rc == 0, err
    assert made.lstat().st_ino == ino  # same symlink: left alone
    # A regular file in the way is replaced; a directory is an error.
    (rootfs / "usr/lib/libfoo.so").write_text("x")
    (rootfs / "usr/lib/adir").mkdir()
    rc, _, err = run_hook(
        "create-symlinks", "--root", str(rootfs), "--link", "libfoo.so.1::/usr/lib/libfoo.so"
    )
    assert rc == 0, err
    assert os.readlink(rootfs / "usr/lib/libfoo.so") == "libfoo.so.1"
    rc, _, err = run_hook("create-symlinks", "--root", str(rootfs), "--link", "x::/usr/lib/adir")
    assert rc == 1
    assert err.startswith("gpunode-hook: create-symlinks: ") and err.count("\n") == 1
    assert [p.name for p in (rootfs / "usr/lib").iterdir() if p.name.startswith(".")] == []


def test_create_symlinks_absolute_parent_symlink_to_host(rootfs, host):
    (rootfs / "usr/lib/x86_64-linux-gnu").symlink_to(host)
    before = snapshot(host)
    link = "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so"
    rc, _, err = run_hook("create-symlinks", "--root", str(rootfs), "--link", link)
    assert rc == 1  # the in-root target does not exist: refused
    assert "gpunode-hook: create-symlinks:" in err
    assert snapshot(host) == before
    # Once the target exists inside the rootfs, the link lands there, not on the host.
    inside = rootfs / str(host).lstrip("/")
    inside.mkdir(parents=True)
    rc, _, err = run_hook("create-symlinks", "--root", str(rootfs), "--link", link)
    assert rc == 0, err
    assert os.readlink(inside / "libcuda.so") == "libcuda.so.1"
    assert snapshot(host) == before


def test_create_symlinks_relative_dotdot_escape(rootfs, host):
    depth = len(rootfs.parts) + 2
    (rootfs / "usr/lib/x86_64-linux-gnu").symlink_to("../" * depth + str(host).lstrip("/"))
    (rootfs / str(host).lstrip("/")).mkdir(parents=True)
    before = snapshot(host)
    rc, _, err = run_hook(
        "create-symlinks",
        "--root",
        str(rootfs),
        "--link",
        "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so",
        "--link",
        "x::/../../../../" + str(host).lstrip("/") + "/evil",
    )
    assert rc == 0, err
    assert snapshot(host) == before
    assert os.readlink(rootfs / str(host).lstrip("/") / "libcuda.so") == "libcuda.so.1"
    assert os.readlink(rootfs / str(host).lstrip("/") / "evil") == "x"


def test_create_symlinks_never_writes_through_existing_link(rootfs, host):
    (rootfs / "usr/lib/libcuda.so").symlink_to(host / "victim")
    (rootfs / "usr/lib/libnvidia-ml.so").symlink_to(host / "victim")  # same text: kept
    before = snapshot(host)
    rc, _, err = run_hook(
        "create-symlinks",
        "--root",
        str(rootfs),
        "--link",
        "libcuda.so.1::/usr/lib/libcuda.so",
        "--link",
        f"{host / 'victim'}::/usr/lib/libnvidia-ml.so",
    )
    assert rc == 0, err
    assert os.readlink(rootfs / "usr/lib/libcuda.so") == "libcuda.so.1"
    assert (host / "victim").read_text() == "host data\n"
    assert snapshot(host) == before


def test_create_symlink_in_process_both_resolvers(resolver, rootfs, host):
    depth = len(rootfs.parts) + 2
    (rootfs / "usr/lib/x86_64-linux-gnu").symlink_to(host)
    (rootfs / "usr/lib/rel").symlink_to("../" * depth + str(host).lstrip("/"))
    (rootfs / str(host).lstrip("/")).mkdir(parents=True)
    before = snapshot(host)
    root_fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY)
    try:
        assert symlinks.create_symlink(root_fd, "t1", "/usr/lib/x86_64-linux-gnu/l1") == "created"
        assert symlinks.create_symlink(root_fd, "t2", "/usr/lib/rel/l2") == "created"
        assert symlinks.create_symlink(root_fd, "t2", "/usr/lib/rel/l2") == "exists"
        assert symlinks.create_symlink(root_fd, "t3", "/usr/lib/rel/l2") == "replaced"
    finally:
        os.close(root_fd)
    assert snapshot(host) == before
    inside = rootfs / str(host).lstrip("/")
    assert os.readlink(inside / "l1") == "t1" and os.readlink(inside / "l2") == "t3"
