"""Edits for a container on the fake node: device nodes, mounts, the hook's arguments."""

from __future__ import annotations

import os

import pytest

from gpunode.runtime import edits

from .fake_node import GPUS, VERSION


def test_build_for_compute_utility(disc, devroot):
    e = edits.build(
        disc,
        {"compute", "utility"},
        [GPUS[1]],
        hook_path="/usr/local/bin/gpunode-hook",
        dev_root=str(devroot),
    )
    assert [d.path for d in e.devices] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia1",
    ]
    assert e.devices[1].major == 510
    dests = [m.destination for m in e.mounts]
    assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}" in dests
    assert f"/usr/lib/x86_64-linux-gnu/libnvidia-glcore.so.{VERSION}" not in dests  # graphics
    assert "/usr/bin/nvidia-smi" in dests
    assert all(
        m.options == ("ro", "nosuid", "nodev", "rbind", "rprivate")
        for m in e.mounts
        if "socket" not in m.source
    )
    ipc = next(m for m in e.mounts if m.source.endswith("socket"))
    assert "noexec" in ipc.options and "ro" not in ipc.options
    (hook,) = e.hooks
    assert hook.args[:2] == ("gpunode-hook", "configure")
    assert "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so" in hook.args
    assert hook.args[hook.args.index("--gpu") + 1] == "0000:11:00.0"
    assert hook.env == ("PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GPUNODE_HOOK=1")


def test_hook_makes_the_soname_links_of_the_injected_libraries(disc, devroot):
    e = edits.build(disc, {"utility"}, [GPUS[0]], hook_path="/h", dev_root=str(devroot))
    (hook,) = e.hooks
    links = [hook.args[i + 1] for i, a in enumerate(hook.args) if a == "--link"]
    # only the libraries this container gets (utility: NVML), to the multiarch dir
    lib = "/usr/lib/x86_64-linux-gnu"
    assert links == [f"libnvidia-ml.so.{VERSION}::{lib}/libnvidia-ml.so.1"]
    e = edits.build(
        disc, {"compute"}, [], hook_path="/h", dev_root=str(devroot), rootfs="/nonexistent"
    )
    links = [e.hooks[0].args[i + 1] for i, a in enumerate(e.hooks[0].args) if a == "--link"]
    assert f"libcuda.so.{VERSION}::/usr/lib64/libcuda.so.1" in links
    assert "libcuda.so.1::/usr/lib64/libcuda.so" in links


def test_every_injected_library_gets_an_ld_cache_entry(disc, devroot):
    """--library SONAME::PATH for each library mounted, also where the SONAME is the file
    name (no --link then): the hook writes exactly these into /etc/ld.so.cache."""
    e = edits.build(disc, {"compute", "utility"}, [], hook_path="/h", dev_root=str(devroot))
    args = e.hooks[0].args
    libraries = [args[i + 1] for i, a in enumerate(args) if a == "--library"]
    lib = "/usr/lib/x86_64-linux-gnu"
    assert sorted(libraries) == sorted(
        [
            f"libnvidia-ml.so.1::{lib}/libnvidia-ml.so.1",
            f"libcuda.so.1::{lib}/libcuda.so.1",
            f"libnvidia-ptxjitcompiler.so.{VERSION}::{lib}/libnvidia-ptxjitcompiler.so.{VERSION}",
        ]
    )
    mounted = {m.destination for m in e.mounts if m.destination.startswith(lib)}
    assert len(libraries) == len(mounted)
    links = [args[i + 1] for i, a in enumerate(args) if a == "--link"]
    assert not any("ptxjitcompiler" in link for link in links)


def test_display_adds_modeset_and_graphics(disc, devroot):
    e = edits.build(disc, {"display"}, [], hook_path="/h", dev_root=str(devroot))
    assert "/dev/nvidia-modeset" in [d.path for d in e.devices]
    assert any("glcore" in m.source for m in e.mounts)


def test_missing_gpu_node_is_a_clear_error(disc, devroot):
    os.unlink(devroot / "dev" / "nvidia2")
    with pytest.raises(
        edits.EditError,
        match=r"GPU 2 \(GPU-.*02, 00000000:12:00.0\) has no device node /dev/nvidia2",
    ):
        edits.build(disc, {"utility"}, [GPUS[2]], hook_path="/h", dev_root=str(devroot))


def test_non_debian_image_gets_usr_lib64(disc, devroot, tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    e = edits.build(
        disc, {"utility"}, [], hook_path="/h", dev_root=str(devroot), rootfs=str(rootfs)
    )
    assert e.mounts[0].destination == f"/usr/lib64/libnvidia-ml.so.{VERSION}"
    (rootfs / "etc" / "debian_version").write_text("12.8\n")
    e = edits.build(
        disc, {"utility"}, [], hook_path="/h", dev_root=str(devroot), rootfs=str(rootfs)
    )
    assert e.mounts[0].destination.startswith("/usr/lib/x86_64-linux-gnu/")


def test_hook_args_without_driver_root(disc, devroot):
    e = edits.build(disc, {"compute", "utility"}, [GPUS[0]], hook_path="/h", dev_root=str(devroot))
    (hook,) = e.hooks
    assert "--driver-root" not in hook.args
    # firmware and sockets keep their own paths with the default root
    ipc = next(m for m in e.mounts if m.source.endswith("socket"))
    assert ipc.destination == ipc.source == "/run/nvidia-persistenced/socket"


# ------------------------------------------------------- explicit GPU selection (item 8)


@pytest.mark.parametrize("selected", [[], [1], [0, 2]])
def test_runtime_hook_gets_the_complete_selection(disc, devroot, selected):
    e = edits.build(
        disc, {"utility"}, [GPUS[i] for i in selected], hook_path="/h", dev_root=str(devroot)
    )
    args = list(e.hooks[0].args)
    assert "--gpus-selected" in args and "--proc-driver" in args
    gpus = [args[i + 1] for i, a in enumerate(args) if a == "--gpu"]
    assert gpus == [GPUS[i].procfs_bus_id for i in selected]
