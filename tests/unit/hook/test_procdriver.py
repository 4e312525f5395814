"""mount-proc-driver: the container's /proc/driver/nvidia shows only its GPUs.

The hook runs as a subprocess (as runc would run it). Everything mount-related runs in a
private mount namespace (``unshare -m``), with a shell snippet after the hook inspecting
the result in the same namespace. Every hostile case also checks that nothing appeared
in, or changed in, the host directory the image tried to point the hook at.
"""

from __future__ import annotations

import os
import shlex
import stat

import pytest

from gpunode.hook import procdriver
from gpunode.hook.errors import HookError

from ..helpers import snapshot
from .helpers import run_hook

GPUS = ("0000:07:00.0", "0000:0f:00.0", "0000:41:00.0")

PARAMS = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\nDeviceFileUID: 0\n"


@pytest.fixture
def driver_root(tmp_path):
    d = tmp_path / "driver-root"
    nv = d / "proc/driver/nvidia"
    for bus in GPUS:
        (nv / "gpus" / bus).mkdir(parents=True)
        (nv / "gpus" / bus / "information").write_text(f"Bus Location: {bus}\n")
    (nv / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15\n")
    (nv / "params").write_text(PARAMS)
    (nv / "registry").write_text('Binary: ""\n')
    return d


@pytest.fixture
def proc_rootfs(rootfs):
    (rootfs / "proc/driver/nvidia/gpus").mkdir(parents=True)
    for bus in GPUS:  # the container's procfs view shows every host GPU
        (rootfs / "proc/driver/nvidia/gpus" / bus).mkdir()
    return rootfs


def test_mount_proc_driver(needs_unshare, proc_rootfs, driver_root):
    nv = proc_rootfs / "proc/driver/nvidia"
    q = shlex.quote(str(nv))
    after = (
        f"ls {q}/gpus; cat {q}/params; cat {q}/gpus/*/information; "
        f"(echo x > {q}/params) 2>/dev/null && echo WRITE-OK; "
        f"touch {q}/new 2>/dev/null && echo CREATE-OK; "
        f"(echo x > {q}/gpus/0000:07:00.0/information) 2>/dev/null && echo GPU-WRITE-OK; "
        f"stat -c '%a' {q}; findmnt -no OPTIONS {q}; findmnt -no OPTIONS {q}/gpus/0000:07:00.0"
    )
    rc, out, err = run_hook(
        "mount-proc-driver",
        "--root",
        str(proc_rootfs),
        "--driver-root",
        str(driver_root),
        "--gpu",
        "00000000:07:00.0",
        "--gpu",
        "0000:41:00.0",
        after=after,
    )
    assert rc == 0, err
    lines = out.split("--- after\n", 1)[1].splitlines()
    assert lines[:2] == ["0000:07:00.0", "0000:41:00.0"]
    assert "ModifyDeviceFiles: 0" in lines and "ModifyDeviceFiles: 1" not in lines
    assert "ResmanDebugLevel: 4294967295" in lines
    assert "Bus Location: 0000:07:00.0" in lines and "Bus Location: 0000:41:00.0" in lines
    assert not {"WRITE-OK", "CREATE-OK", "GPU-WRITE-OK"} & set(lines)
    assert "555" in lines
    opts = [ln for ln in lines if ln.startswith("ro,")]
    assert len(opts) == 2 and all({"nosuid", "nodev", "noexec"} <= set(o.split(",")) for o in opts)
    # Outside the namespace nothing changed.
    assert sorted(p.name for p in (nv / "gpus").iterdir()) == sorted(GPUS)
    assert not (nv / "params").exists()
    assert (driver_root / "proc/driver/nvidia/params").read_text() == PARAMS


def test_mount_proc_driver_32bit_domain_dir(needs_unshare, proc_rootfs, driver_root):
    gpus = driver_root / "proc/driver/nvidia/gpus"
    (gpus / "0000:0f:00.0").rename(gpus / "00000000:0f:00.0")
    rc, out, err = run_hook(
        "mount-proc-driver",
        "--root",
        str(proc_rootfs),
        "--driver-root",
        str(driver_root),
        "--gpu",
        "0000:0f:00.0",
        after=f"ls {shlex.quote(str(proc_rootfs))}/proc/driver/nvidia/gpus",
    )
    assert rc == 0, err
    assert out.split("--- after\n", 1)[1].split() == ["00000000:0f:00.0"]


@pytest.mark.parametrize("evil", ["proc", "proc/driver", "proc/driver/nvidia"])
def test_mount_proc_driver_refuses_symlinks(needs_unshare, rootfs, driver_root, host, evil):
    # The image replaces a component of /proc/driver/nvidia with a symlink to the host.
    parent = (rootfs / evil).parent
    parent.mkdir(parents=True, exist_ok=True)
    (host / "driver/nvidia/gpus").mkdir(parents=True)
    (rootfs / evil).symlink_to(
        host
        if evil == "proc"
        else host / "driver"
        if evil == "proc/driver"
        else host / "driver/nvidia"
    )
    # Also plant the same tree inside the rootfs so in-root resolution would succeed.
    (rootfs / str(host).lstrip("/") / "driver/nvidia/gpus").mkdir(parents=True)
    before = snapshot(host)
    rc, out, err = run_hook(
        "mount-proc-driver",
        "--root",
        str(rootfs),
        "--driver-root",
        str(driver_root),
        "--gpu",
        GPUS[0],
        after=f"findmnt -rn -o TARGET | grep -F {shlex.quote(str(host))} || true",
    )
    assert rc == 1
    assert err.startswith("gpunode-hook: mount-proc-driver: refusing"), err
    assert out.split("--- after\n", 1)[1].strip() == ""  # nothing mounted
    assert snapshot(host) == before


def test_mount_proc_driver_skips_without_driver_dir(needs_unshare, rootfs, driver_root):
    (rootfs / "proc").mkdir()
    rc, _, err = run_hook(
        "mount-proc-driver",
        "--root",
        str(rootfs),
        "--driver-root",
        str(driver_root),
        "--gpu",
        GPUS[0],
        after="true",
    )
    assert rc == 0
    assert "skipping" in err


def test_mount_proc_driver_unknown_gpu_mounts_nothing(needs_unshare, proc_rootfs, driver_root):
    nv = shlex.quote(str(proc_rootfs / "proc/driver/nvidia"))
    rc, out, err = run_hook(
        "mount-proc-driver",
        "--root",
        str(proc_rootfs),
        "--driver-root",
        str(driver_root),
        "--gpu",
        GPUS[0],
        "--gpu",
        "0000:99:00.0",
        after=f"findmnt -n {nv} || echo NOMOUNT",
    )
    assert rc == 1 and "0000:99:00.0" in err
    assert "NOMOUNT" in out


@pytest.mark.parametrize("selected", [True, False])
def test_configure_gpus_selected_none_shows_no_gpu(
    needs_unshare, proc_rootfs, driver_root, selected
):
    """NVIDIA_VISIBLE_DEVICES=none in a container that has a /dev/nvidia0 anyway (privileged
    or --device): the runtime passes --gpus-selected with no --gpu, and the filtered
    /proc/driver/nvidia shows no GPU. Without the flag (a CDI hook) the device nodes decide."""
    for i, bus in enumerate(GPUS):
        with open(driver_root / "proc/driver/nvidia/gpus" / bus / "information", "a") as fh:
            fh.write(f"Device Minor: \t {i}\n")
    (proc_rootfs / "dev").mkdir()
    os.mknod(proc_rootfs / "dev/nvidia0", stat.S_IFCHR | 0o666, os.makedev(195, 0))
    flags = ["--gpus-selected"] if selected else []
    rc, out, err = run_hook(
        "configure",
        "--root",
        str(proc_rootfs),
        "--driver-root",
        str(driver_root),
        *flags,
        "--proc-driver",
        after=f"ls {shlex.quote(str(proc_rootfs))}/proc/driver/nvidia/gpus",
    )
    assert rc == 0, err
    shown = out.split("--- after\n", 1)[1].split()
    assert shown == ([] if selected else [GPUS[0]])


def test_busid_candidates():
    assert procdriver.busid_candidates("00000000:07:00.0") == ["00000000:07:00.0", "0000:07:00.0"]
    assert procdriver.busid_candidates("0000:0F:00.0") == ["00000000:0f:00.0", "0000:0f:00.0"]
    assert procdriver.busid_candidates("00010000:07:00.1") == ["00010000:07:00.1"]
    for bad in ("0000:07:00", "../0000:07:00.0", "0000:07:00.0/..", ""):
        with pytest.raises(HookError):
            procdriver.busid_candidates(bad)


# --------------------------------------------------------------------------- MIG


def _mig_caps(driver_root):
    """gpu0 (07:00.0) has GI 1 (CI 0) and GI 7 (CI 0), each access file naming its minor."""
    caps = driver_root / "proc/driver/nvidia/capabilities"
    (caps / "mig").mkdir(parents=True)
    (caps / "mig/config").write_text("DeviceFileMinor: 1\nDeviceFileMode: 256\n")
    minors = {}
    for n, cap in enumerate(
        ("gpu0/mig/gi1/access", "gpu0/mig/gi1/ci0/access", "gpu0/mig/gi7/access",
         "gpu0/mig/gi7/ci0/access")
    ):  # fmt: skip
        (caps / cap).parent.mkdir(parents=True, exist_ok=True)
        minors[cap] = 40 + 3 * n
        (caps / cap).write_text(f"DeviceFileMinor: {minors[cap]}\nDeviceFileMode: 292\n")
    return minors


def test_mount_proc_driver_mig_access_files(needs_unshare, proc_rootfs, driver_root):
    """A MIG device's GI and CI access files, bound read-only at their paths; nothing of
    GPU 0's other GPU instance."""
    _mig_caps(driver_root)
    nv = shlex.quote(str(proc_rootfs / "proc/driver/nvidia"))
    rc, out, err = run_hook(
        "mount-proc-driver",
        "--root",
        str(proc_rootfs),
        "--driver-root",
        str(driver_root),
        "--gpu",
        GPUS[0],
        "--mig-cap",
        "gpu0/mig/gi7/access",
        "--mig-cap",
        "gpu0/mig/gi7/ci0/access",
        after=(
            f"cd {nv}/capabilities && find . | sort; cat gpu0/mig/gi7/ci0/access; "
            f"(echo x > gpu0/mig/gi7/access) 2>/dev/null && echo WRITE-OK; "
            f"findmnt -no OPTIONS {nv}/capabilities/gpu0/mig/gi7/ci0/access"
        ),
    )
    assert rc == 0, err
    lines = out.split("--- after\n", 1)[1].splitlines()
    assert lines[:7] == [
        ".",
        "./gpu0",
        "./gpu0/mig",
        "./gpu0/mig/gi7",
        "./gpu0/mig/gi7/access",
        "./gpu0/mig/gi7/ci0",
        "./gpu0/mig/gi7/ci0/access",
    ]
    assert "DeviceFileMinor: 49" in lines and "WRITE-OK" not in lines
    assert {"ro", "nosuid", "nodev", "noexec"} <= set(lines[-1].split(","))


def test_mount_proc_driver_mig_caps_all(needs_unshare, proc_rootfs, driver_root):
    _mig_caps(driver_root)
    nv = shlex.quote(str(proc_rootfs / "proc/driver/nvidia"))
    rc, out, err = run_hook(
        "mount-proc-driver",
        "--root",
        str(proc_rootfs),
        "--driver-root",
        str(driver_root),
        "--mig-caps-all",
        after=f"cd {nv}/capabilities && find . -name access -o -name config | sort",
    )
    assert rc == 0, err
    assert out.split("--- after\n", 1)[1].split() == [
        "./gpu0/mig/gi1/access",
        "./gpu0/mig/gi1/ci0/access",
        "./gpu0/mig/gi7/access",
        "./gpu0/mig/gi7/ci0/access",
        "./mig/config",
    ]


@pytest.mark.parametrize(
    ("cap", "error"),
    [
        ("gpu0/mig/gi3/access", "MIG capability gpu0/mig/gi3/access not found in "),
        ("../gpus/x/access", "invalid MIG capability '../gpus/x/access'"),
        ("gpu0/mig/gi1/../access", "invalid MIG capability"),
        ("gpu0/mig/config", "invalid MIG capability"),
    ],
)
def test_mount_proc_driver_bad_mig_cap_is_one_line(
    needs_unshare, proc_rootfs, driver_root, cap, error
):
    _mig_caps(driver_root)
    nv = shlex.quote(str(proc_rootfs / "proc/driver/nvidia"))
    rc, out, err = run_hook(
        "mount-proc-driver",
        "--root",
        str(proc_rootfs),
        "--driver-root",
        str(driver_root),
        "--mig-cap",
        cap,
        after=f"findmnt -n {nv} || echo NOMOUNT",
    )
    assert rc == 1 and error in err and len(err.strip().splitlines()) == 1
    assert "NOMOUNT" in out


def test_cdi_hook_finds_mig_caps_from_the_container_s_cap_nodes(
    needs_unshare, proc_rootfs, driver_root
):
    """The CDI path: the container's /dev/nvidia-caps nodes say which access files it gets
    (a MIG device's CDI entry gives the parent node and its GI and CI cap nodes)."""
    minors = _mig_caps(driver_root)
    for i, bus in enumerate(GPUS):
        with open(driver_root / "proc/driver/nvidia/gpus" / bus / "information", "a") as fh:
            fh.write(f"Device Minor: \t {i}\n")
    (proc_rootfs / "dev/nvidia-caps").mkdir(parents=True)
    os.mknod(proc_rootfs / "dev/nvidia0", stat.S_IFCHR | 0o666, os.makedev(195, 0))
    for cap in ("gpu0/mig/gi7/access", "gpu0/mig/gi7/ci0/access"):
        m = minors[cap]
        os.mknod(
            proc_rootfs / f"dev/nvidia-caps/nvidia-cap{m}", stat.S_IFCHR | 0o444, os.makedev(237, m)
        )
    assert procdriver.mig_caps_from_container_devices(str(proc_rootfs), str(driver_root)) == [
        "gpu0/mig/gi7/access",
        "gpu0/mig/gi7/ci0/access",
    ]
    nv = shlex.quote(str(proc_rootfs / "proc/driver/nvidia"))
    rc, out, err = run_hook(
        "configure",
        "--root",
        str(proc_rootfs),
        "--driver-root",
        str(driver_root),
        "--proc-driver",
        after=f"ls {nv}/gpus; cd {nv}/capabilities && find . -name access | sort",
    )
    assert rc == 0, err
    assert out.split("--- after\n", 1)[1].split() == [
        GPUS[0],
        "./gpu0/mig/gi7/access",
        "./gpu0/mig/gi7/ci0/access",
    ]
