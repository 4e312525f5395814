"""NVIDIA's hook command line served by gpunode-hook (gpunode.hook.nvcli): every subcommand
the CDI specs of NVIDIA's device plugin call, in both forms (``nvidia-cdi-hook SUB`` and
``nvidia-ctk hook SUB``), run as runc runs a hook (a subprocess with a clean environment);
hostile images get what gpunode's own subcommands give them: nothing outside their root."""

from __future__ import annotations

import json
import os
import shlex
import stat

import pytest

from gpunode.util import ldsocache

from ..helpers import snapshot
from .helpers import nvidia_hook, run_hook

FORMS = {"nvidia-cdi-hook": [], "nvidia-ctk": ["hook"]}
LIB = "/usr/lib/x86_64-linux-gnu"
VERSION = "550.54.15"


@pytest.fixture(params=sorted(FORMS))
def form(request):
    return request.param


def nv(form: str, *args: str, **kwargs):
    """The hook in *form* with *args* (rc, stdout, stderr)."""
    return run_hook(*FORMS[form], *args, hook=nvidia_hook(form), **kwargs)


def cache_of(rootfs) -> dict[str, str]:
    data = (rootfs / "etc/ld.so.cache").read_bytes()
    return {e.soname.decode(): e.path.decode() for e in ldsocache.parse(data, os.uname().machine)}


def one_line_error(rc, err, *words):
    assert rc == 1 and err.count("\n") == 1, err
    assert all(w in err for w in words), err


# ------------------------------------------------------------------ create-symlinks


def test_create_symlinks(form, rootfs):
    rc, _, err = nv(
        form,
        "create-symlinks",
        "--root",
        str(rootfs),
        "--link",
        f"libnvidia-ml.so.{VERSION}::{LIB}/libnvidia-ml.so.1",
        f"--link=libcuda.so.1::{LIB}/libcuda.so",
    )
    assert rc == 0, err
    assert os.readlink(rootfs / LIB[1:] / "libnvidia-ml.so.1") == f"libnvidia-ml.so.{VERSION}"
    assert os.readlink(rootfs / LIB[1:] / "libcuda.so") == "libcuda.so.1"


@pytest.mark.parametrize("how", ["absolute-symlink", "dangling-symlink", "dotdot"])
def test_create_symlinks_never_leaves_the_root(form, rootfs, host, how):
    """A link whose parent is an image symlink to a host directory, or a `..` path: made
    inside the container root (or refused in one line when the symlink resolves to nothing
    there), the host directory untouched."""
    before = snapshot(host)
    if how.endswith("symlink"):
        (rootfs / "evil").symlink_to(host)
        link = "/evil/libx.so"
        if how == "dangling-symlink":
            rc, _, err = nv(form, "create-symlinks", "--root", str(rootfs), "--link", f"v::{link}")
            one_line_error(rc, err, "/evil/libx.so", "dangling symlink")
            assert snapshot(host) == before
            return
        (rootfs / str(host)[1:]).mkdir(parents=True)
    else:
        link = "/../../../../../.." + str(host) + "/libx.so"
    rc, _, err = nv(form, "create-symlinks", "--root", str(rootfs), "--link", f"victim::{link}")
    assert rc == 0, err
    assert snapshot(host) == before
    assert os.readlink(rootfs / str(host)[1:] / "libx.so") == "victim"


def test_create_symlinks_bad_link_is_one_line(form, rootfs):
    rc, _, err = nv(form, "create-symlinks", "--root", str(rootfs), "--link", "no-separator")
    one_line_error(rc, err, "create-symlinks", "invalid --link 'no-separator'")


# ------------------------------------------------------------------ update-ldcache


def driver_libs(rootfs):
    lib = rootfs / LIB[1:]
    lib.mkdir(parents=True, exist_ok=True)
    (lib / f"libnvidia-ml.so.{VERSION}").write_bytes(b"\x7fELF")
    (lib / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{VERSION}")
    (lib / "libcuda.so").symlink_to("libcuda.so.1")  # a dev link: no cache entry
    (lib / "libdir.so.1").mkdir()  # a directory of a SONAME's shape: no entry
    return lib


def test_update_ldcache(form, rootfs):
    driver_libs(rootfs)
    rc, _, err = nv(
        form,
        "update-ldcache",
        "--root",
        str(rootfs),
        "--folder",
        LIB,
        "--ldconfig-path",
        "/sbin/ldconfig",  # accepted, ignored: no ldconfig is run
    )
    assert rc == 0, err
    assert cache_of(rootfs) == {"libnvidia-ml.so.1": f"{LIB}/libnvidia-ml.so.1"}
    assert LIB in (rootfs / "etc/ld.so.conf.d/00-gpunode.conf").read_text().splitlines()


def test_update_ldcache_folder_symlink_resolves_inside_the_root(form, rootfs, host):
    """A folder that is an image symlink to a host directory: read inside the root; the
    host's libraries never reach the cache."""
    (host / "libevil.so.1").write_bytes(b"\x7fELF")
    (rootfs / "usr/lib/evil").symlink_to(host)
    inside = rootfs / str(host)[1:]
    inside.mkdir(parents=True)
    (inside / "libok.so.2").write_bytes(b"\x7fELF")
    before = snapshot(host)
    rc, _, err = nv(form, "update-ldcache", "--root", str(rootfs), "--folder=/usr/lib/evil")
    assert rc == 0, err
    assert cache_of(rootfs) == {"libok.so.2": "/usr/lib/evil/libok.so.2"}
    assert snapshot(host) == before


def test_update_ldcache_relative_folder_is_one_line(form, rootfs):
    rc, _, err = nv(form, "update-ldcache", "--root", str(rootfs), "--folder", "usr/lib")
    one_line_error(rc, err, "update-ldcache", "invalid library folder 'usr/lib'")


# ------------------------------------------------------------------ enable-cuda-compat

COMPAT = "usr/local/cuda-12.6/compat"


def compat_image(rootfs, version="560.35.03"):
    """A CUDA image: /usr/local/cuda a symlink to cuda-12.6, its compat folder holding a
    newer libcuda and its SONAME link."""
    compat = rootfs / COMPAT
    compat.mkdir(parents=True)
    (rootfs / "usr/local/cuda").symlink_to("cuda-12.6")
    (compat / f"libcuda.so.{version}").write_bytes(b"\x7fELF")
    (compat / "libcuda.so.1").symlink_to(f"libcuda.so.{version}")
    lib = driver_libs(rootfs)
    (lib / f"libcuda.so.{VERSION}").write_bytes(b"\x7fELF")
    (lib / "libcuda.so.1").symlink_to(f"libcuda.so.{VERSION}")
    return compat


def compat_then_ldcache(form, rootfs, host_version=VERSION):
    rc, _, err = nv(
        form,
        "enable-cuda-compat",
        "--root",
        str(rootfs),
        f"--host-driver-version={host_version}",
    )
    assert rc == 0, err
    rc, _, err = nv(form, "update-ldcache", "--root", str(rootfs), "--folder", LIB)
    assert rc == 0, err
    return cache_of(rootfs)


def test_enable_cuda_compat_puts_a_newer_compat_folder_first(form, rootfs):
    compat_image(rootfs)
    cache = compat_then_ldcache(form, rootfs)
    assert cache["libcuda.so.1"] == "/usr/local/cuda/compat/libcuda.so.1"
    assert cache["libnvidia-ml.so.1"] == f"{LIB}/libnvidia-ml.so.1"
    conf = rootfs / "etc/ld.so.conf.d"
    assert (conf / "00-gpunode-cuda-compat.conf").read_text() == "/usr/local/cuda/compat\n"
    # the image's own ldconfig reads the compat folder before the driver's
    assert sorted(p.name for p in conf.iterdir())[0] == "00-gpunode-cuda-compat.conf"


def test_enable_cuda_compat_keeps_the_host_driver_when_it_is_as_new(form, rootfs):
    compat_image(rootfs)
    compat_then_ldcache(form, rootfs)  # an earlier start on an older driver
    cache = compat_then_ldcache(form, rootfs, host_version="560.28.03")
    assert cache["libcuda.so.1"] == f"{LIB}/libcuda.so.1"
    assert not (rootfs / "etc/ld.so.conf.d/00-gpunode-cuda-compat.conf").exists()


@pytest.mark.parametrize("hostile", ["directory", "symlink", "compat-dir-to-host", "huge-name"])
def test_enable_cuda_compat_regular_files_only(form, rootfs, host, hostile):
    """Only a regular libcuda.so.X.Y inside the root counts: a directory or a symlink of
    that name, a compat folder pointing at the host, an absurd version: the host driver's
    libcuda stays, and nothing outside the root changes."""
    compat = compat_image(rootfs)
    os.unlink(compat / "libcuda.so.560.35.03")
    if hostile == "directory":
        (compat / "libcuda.so.999.1").mkdir()
    elif hostile == "symlink":
        (host / "libcuda.so.999.1").write_bytes(b"\x7fELF")
        (compat / "libcuda.so.999.1").symlink_to(host / "libcuda.so.999.1")
    elif hostile == "compat-dir-to-host":
        (host / "libcuda.so.999.1").write_bytes(b"\x7fELF")
        (host / "libcuda.so.1").symlink_to("libcuda.so.999.1")
        (compat / "libcuda.so.1").unlink()
        compat.rmdir()
        (rootfs / COMPAT).symlink_to(host)
    else:
        (compat / f"libcuda.so.{'9' * 200}.1").write_bytes(b"\x7fELF")
    before = snapshot(host)
    cache = compat_then_ldcache(form, rootfs)
    assert cache["libcuda.so.1"] == f"{LIB}/libcuda.so.1"
    assert not (rootfs / "etc/ld.so.conf.d/00-gpunode-cuda-compat.conf").exists()
    assert snapshot(host) == before


def test_enable_cuda_compat_huge_host_version_is_one_line(form, rootfs):
    rc, _, err = nv(
        form, "enable-cuda-compat", "--root", str(rootfs), "--host-driver-version=" + "9" * 100000
    )
    one_line_error(rc, err, "enable-cuda-compat", "invalid --host-driver-version")
    assert len(err) < 300, err


def test_enable_cuda_compat_without_version_does_nothing(form, rootfs):
    compat_image(rootfs)
    before = snapshot(rootfs)
    rc, _, err = nv(form, "enable-cuda-compat", "--root", str(rootfs))
    assert rc == 0 and err == "", err
    assert snapshot(rootfs) == before


# ------------------------------------------------------------------ the other two


GPUS = ("0000:07:00.0", "0000:0f:00.0")
PARAMS = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n"


def test_disable_device_node_modification(needs_unshare, form, rootfs, tmp_path):
    """params says ModifyDeviceFiles: 0 in the container, which sees only the GPU whose
    device node it was given (gpunode's mount-proc-driver, CDI mode)."""
    driver = tmp_path / "driver-root"
    nvp = driver / "proc/driver/nvidia"
    for minor, bus in enumerate(GPUS):
        (nvp / "gpus" / bus).mkdir(parents=True)
        (nvp / "gpus" / bus / "information").write_text(
            f"Bus Location: {bus}\nDevice Minor: \t {minor}\n"
        )
    (nvp / "version").write_text(f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {VERSION}\n")
    (nvp / "params").write_text(PARAMS)
    (nvp / "registry").write_text('Binary: ""\n')
    for bus in GPUS:
        (rootfs / "proc/driver/nvidia/gpus" / bus).mkdir(parents=True)
    (rootfs / "dev").mkdir()
    os.mknod(rootfs / "dev/nvidia1", stat.S_IFCHR | 0o666, os.makedev(195, 1))
    q = shlex.quote(str(rootfs / "proc/driver/nvidia"))
    rc, out, err = nv(
        form,
        "disable-device-node-modification",
        "--root",
        str(rootfs),
        "--driver-root",
        str(driver),
        after=f"ls {q}/gpus; cat {q}/params",
    )
    assert rc == 0, err
    lines = out.split("--- after\n", 1)[1].splitlines()
    assert lines[0] == GPUS[1] and GPUS[0] not in lines
    assert "ModifyDeviceFiles: 0" in lines and "ModifyDeviceFiles: 1" not in lines
    assert (nvp / "params").read_text() == PARAMS


def test_update_application_profile_is_a_no_op(form, rootfs):
    before = snapshot(rootfs)
    rc, out, err = nv(form, "update-application-profile", "--root", str(rootfs))
    assert (rc, out, err) == (0, "", "")
    assert snapshot(rootfs) == before


# ------------------------------------------------------------------ the command line


@pytest.mark.parametrize(
    "args, words",
    [
        (["chmod", "--mode", "755"], ["unknown subcommand 'chmod'", "create-symlinks"]),
        (["create-symlinks", "--folder", "/x"], ["unrecognized argument '--folder'"]),
        (["update-ldcache", "--folder"], ["--folder needs a value"]),
        ([], ["missing subcommand"]),
    ],
)
def test_bad_command_lines_are_one_line(form, rootfs, args, words):
    rc, _, err = nv(form, "--root", str(rootfs), *args)
    one_line_error(rc, err, *words)
    assert err.startswith("nvidia-ctk hook: " if form == "nvidia-ctk" else "nvidia-cdi-hook: ")


def test_nvidia_ctk_serves_only_hook(rootfs):
    rc, _, err = run_hook("cdi", "list", hook=nvidia_hook("nvidia-ctk"))
    one_line_error(rc, err, "gpunode serves only `nvidia-ctk hook SUBCOMMAND`; got 'cdi'")


def test_the_container_comes_from_the_oci_state(form, rootfs, tmp_path):
    """As runc runs a CDI hook: no --root, the OCI state on stdin."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"root": {"path": str(rootfs)}}))
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": str(bundle)})
    rc, _, err = run_hook(
        *FORMS[form],
        "create-symlinks",
        "--link",
        "libcuda.so.1::/usr/lib/libcuda.so",
        hook=nvidia_hook(form),
        stdin=state,
    )
    assert rc == 0, err
    assert os.readlink(rootfs / "usr/lib/libcuda.so") == "libcuda.so.1"


def test_update_ldcache_folder_entries_are_bounded(rootfs, monkeypatch):
    """An image folder with more entries than MAX_FOLDER_ENTRIES: one line, not a scan of
    everything (what the hook reads of an image is bounded)."""
    from gpunode.hook import ldcache
    from gpunode.hook.errors import HookError

    for i in range(5):
        (rootfs / "usr/lib" / f"lib{i}.so.1").write_bytes(b"")
    fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY)
    try:
        assert len(ldcache.libraries_in_folders(fd, ["/usr/lib"])) == 5
        monkeypatch.setattr(ldcache, "MAX_FOLDER_ENTRIES", 3)
        with pytest.raises(HookError, match=r"^--folder /usr/lib: more than 3 entries$"):
            ldcache.libraries_in_folders(fd, ["/usr/lib"])
    finally:
        os.close(fd)
