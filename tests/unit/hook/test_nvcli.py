"""NVIDIA's hook command line served by gpunode-hook (gpunode.hook.nvcli): every subcommand
the CDI specs of NVIDIA's device plugin call, in both forms (``nvidia-cdi-hook SUB`` and
``nvidia-ctk hook SUB``), run as runc runs a hook (a subprocess with a clean environment);
hostile images get what gpunode's own subcommands give them: nothing outside their root."""

from __future__ import annotations

import json
import os
import shlex
import signal
import stat
import struct

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
        (["create-symlinks", "--folder", "/x"], ["unrecognized argument '--folder'"]),
        (["update-ldcache", "--folder"], ["--folder needs a value"]),
        (["chmod", "--mode", "755", "--bogus"], ["unrecognized argument '--bogus' for chmod"]),
        (["--bogus", "create-symlinks"], ["create-symlinks: unrecognized argument '--bogus'"]),
    ],
)
def test_bad_command_lines_are_one_line(form, rootfs, args, words):
    """A hook gpunode serves, given an option it does not take: one line, exit 1, as
    NVIDIA's (its OnUsageError returns the flag error when the first word is a known hook)."""
    rc, _, err = nv(form, "--root", str(rootfs), *args)
    one_line_error(rc, err, *words)
    assert err.startswith("nvidia-ctk hook: " if form == "nvidia-ctk" else "nvidia-cdi-hook: ")


@pytest.mark.parametrize(
    "args, what",
    [
        (["noop-from-the-future", "--new-flag", "x"], "unsupported hook 'noop-from-the-future'"),
        (["--root", "ROOT", "update-ldcache2", "--folder", "/usr/lib"], "unsupported hook 'update-ldcache2'"),
        (["--new-global-flag", "x" * 500], "unsupported hook '" + "x" * 60 + "'"),
        ([], "no hook given"),
    ],
)
def test_an_unknown_hook_is_a_warning_and_exit_0(form, rootfs, args, what):
    """As NVIDIA's (cmd/nvidia-cdi-hook/commands: "Unsupported CDI hook", nil), so that a
    spec from a newer or older generator never fails every container: one line naming the
    hook and what gpunode serves, exit 0, nothing read (no OCI state on stdin, none needed)
    and nothing changed."""
    before = snapshot(rootfs)
    args = [str(rootfs) if a == "ROOT" else a for a in args]
    rc, out, err = nv(form, *args)
    assert (rc, out) == (0, ""), err
    assert err.count("\n") == 1 and len(err) < 400, err
    assert err.startswith(("nvidia-ctk hook: " if form == "nvidia-ctk" else "nvidia-cdi-hook: ")
                          + "warning: " + what), err  # fmt: skip
    assert "gpunode serves create-symlinks," in err and "create-soname-symlinks" in err, err
    assert snapshot(rootfs) == before


def test_help_is_still_help(form):
    rc, out, err = nv(form, "--help")
    assert rc == 0 and "chmod --mode MODE --path PATH..." in out, err
    assert "create-soname-symlinks --folder DIR..." in out


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


# ------------------------------------------------------------------ chmod


def mode_of(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_chmod(form, rootfs):
    """NVIDIA's generator's call: --mode 755 on the device folders; a missing path is
    skipped, as NVIDIA's skips it."""
    for name, mode in (("dri", 0o700), ("nvidia-caps", 0o711)):
        (rootfs / "dev" / name).mkdir(parents=True)
        os.chmod(rootfs / "dev" / name, mode)
    rc, _, err = nv(
        form,
        "chmod",
        "--root",
        str(rootfs),
        "--mode",
        "755",
        "--path",
        "/dev/dri",
        "--path=/dev/nvidia-caps",
        "--path",
        "/dev/not-there",
    )
    assert (rc, err) == (0, "")
    assert mode_of(rootfs / "dev/dri") == mode_of(rootfs / "dev/nvidia-caps") == 0o755


def test_chmod_without_a_path_changes_nothing(form, rootfs, tmp_path):
    """The argv NVIDIA's generator writes with ``--enable-hook chmod`` for a full GPU without
    DRM nodes (internal/discover/hooks.go creates an enabled chmod even with no folder):
    ``chmod --mode 755`` alone, run as runc runs it (the OCI state on stdin). As NVIDIA's
    ("No paths specified; exiting"): exit 0, silent, nothing changed."""
    for name in ("dri", "nvidia-caps"):
        (rootfs / "dev" / name).mkdir(parents=True)
        os.chmod(rootfs / "dev" / name, 0o700)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(json.dumps({"root": {"path": str(rootfs)}}))
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": str(bundle)})
    before = snapshot(rootfs)
    rc, out, err = run_hook(
        *FORMS[form], "chmod", "--mode", "755", hook=nvidia_hook(form), stdin=state
    )
    assert (rc, out, err) == (0, "", "")
    assert snapshot(rootfs) == before
    assert mode_of(rootfs / "dev/dri") == mode_of(rootfs / "dev/nvidia-caps") == 0o700


@pytest.mark.parametrize("how", ["absolute-symlink", "dotdot"])
def test_chmod_resolves_inside_the_root(form, rootfs, host, how):
    """Guards the in-root resolution: /dev an image symlink to a host directory, or a path
    climbing out with `..`: the container's own entry changes, the host's never."""
    (host / "dri").mkdir()
    os.chmod(host / "dri", 0o700)
    inside = rootfs / str(host)[1:] / "dri"
    inside.mkdir(parents=True)
    os.chmod(inside, 0o700)
    if how == "absolute-symlink":
        (rootfs / "dev").symlink_to(host)
        path = "/dev/dri"
    else:
        path = "/../../../../../.." + str(host) + "/dri"
    before = snapshot(host)
    rc, _, err = nv(form, "chmod", "--root", str(rootfs), "--mode", "755", "--path", path)
    assert (rc, err) == (0, "")
    assert mode_of(host / "dri") == 0o700
    assert snapshot(host) == before
    assert mode_of(inside) == 0o755


@pytest.mark.parametrize("target", ["in-root", "host"])
def test_chmod_never_follows_a_symlink_at_the_last_component(form, rootfs, host, target):
    """Guards the no-follow of the last component: /dev/dri an image symlink to a file of
    the container (or a host path, which in-root resolution alone would take to the
    container's copy): left as it is, said in one line, exit 0; neither file changes."""
    secret = rootfs / "etc/secret"
    secret.write_text("secret\n")
    os.chmod(secret, 0o600)
    (rootfs / str(host)[1:]).mkdir(parents=True)
    os.link(secret, rootfs / str(host)[1:] / "victim")  # the in-root copy of the host path
    os.chmod(host / "victim", 0o600)
    (rootfs / "dev").mkdir()
    (rootfs / "dev/dri").symlink_to("/etc/secret" if target == "in-root" else host / "victim")
    rc, _, err = nv(form, "chmod", "--root", str(rootfs), "--mode", "755", "--path", "/dev/dri")
    assert mode_of(secret) == mode_of(host / "victim") == 0o600
    assert rc == 0 and err.count("\n") == 1, err
    assert "/dev/dri is a symbolic link in the container; not followed" in err


@pytest.mark.parametrize(
    "mode",
    ["0o755", "+755", " 755", "755 ", "7_55", "8", "4755", "1000", "", "rwxr-xr-x", "0x1ed",
     "\u0667\u0665\u0665", "-1", "9" * 5000],
)  # fmt: skip
def test_chmod_mode_is_strict(form, rootfs, mode):
    """Guards the strict mode: octal digits only, at most 777 (Python's int(x, 8) would
    take 0o755, +755, 7_55 and spaces); anything else one line naming it and what is
    accepted, exit 1, nothing changed."""
    (rootfs / "dev/dri").mkdir(parents=True)
    os.chmod(rootfs / "dev/dri", 0o700)
    rc, _, err = nv(form, "chmod", "--root", str(rootfs), f"--mode={mode}", "--path", "/dev/dri")
    one_line_error(rc, err, "chmod: invalid --mode", "want octal permission bits, 0 to 777")
    assert len(err) < 200, err
    assert mode_of(rootfs / "dev/dri") == 0o700


def test_chmod_takes_octal_as_nvidias(form, rootfs):
    (rootfs / "dev/dri").mkdir(parents=True)
    for mode, want in (("0755", 0o755), ("00000750", 0o750), ("0", 0), ("777", 0o777)):
        rc, _, err = nv(form, "chmod", "--root", str(rootfs), "--mode", mode, "--path", "/dev/dri")
        assert (rc, err) == (0, "")
        assert mode_of(rootfs / "dev/dri") == want


def test_chmod_without_mode_is_one_line(form, rootfs):
    rc, _, err = nv(form, "chmod", "--root", str(rootfs), "--path", "/dev/dri")
    one_line_error(rc, err, "chmod: --mode is required")


# ------------------------------------------------------------------ create-soname-symlinks


def tiny_elf(soname: str | None, pad: int = 0) -> bytes:
    """A minimal 64-bit little-endian shared object: one PT_LOAD over the whole file, a
    PT_DYNAMIC of *pad* DT_DEBUG entries, then DT_STRTAB, DT_SONAME (when *soname*), DT_NULL;
    the string table after it."""
    dyn_off = 64 + 2 * 56
    entries = [(21, 0)] * pad + [(5, 0)] + ([(14, 1)] if soname else []) + [(0, 0)]
    str_off = dyn_off + 16 * len(entries)
    entries[pad] = (5, str_off)
    strtab = b"\0" + (soname or "").encode() + b"\0"
    size = str_off + len(strtab)
    head = struct.pack("<4sBBB9xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 3, 62, 1, 0, 64, 0, 0,
                       64, 56, 2, 0, 0, 0)  # fmt: skip
    phdrs = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, size, size, 0x1000)
    phdrs += struct.pack("<IIQQQQQQ", 2, 6, dyn_off, dyn_off, dyn_off, 16 * len(entries),
                         16 * len(entries), 8)  # fmt: skip
    dyn = b"".join(struct.pack("<qQ", t, v) for t, v in entries)
    return head + phdrs + dyn + strtab


def soname_links(folder) -> dict[str, str]:
    return {p.name: os.readlink(p) for p in sorted(folder.iterdir()) if p.is_symlink()}


def test_create_soname_symlinks(form, rootfs):
    """As `ldconfig -N -n DIR`: each library's SONAME link beside it, the highest version
    of a SONAME winning; a library named as its SONAME, one without SONAME, a text file
    and a directory get none; a stale link is replaced, a regular file at a SONAME kept
    (one line); a missing folder skipped; --ldconfig-path accepted."""
    lib = rootfs / LIB[1:]
    lib.mkdir(parents=True)
    (lib / "libfoo.so.1.2.3").write_bytes(tiny_elf("libfoo.so.1"))
    (lib / "libfoo.so.1.10.0").write_bytes(tiny_elf("libfoo.so.1"))
    (lib / "libbar.so.2").write_bytes(tiny_elf("libbar.so.2"))
    (lib / "libnone.so").write_bytes(tiny_elf(None))
    (lib / "libtext.so.1.0").write_text("INPUT(-lc)\n")
    (lib / "libdir.so.4.0").mkdir()
    (lib / f"libnvidia-ml.so.{VERSION}").write_bytes(tiny_elf("libnvidia-ml.so.1"))
    (lib / "libnvidia-ml.so.1").symlink_to("libnvidia-ml.so.1.0-stale")
    (lib / "libkeep.so.5.0").write_bytes(tiny_elf("libkeep.so.5"))
    (lib / "libkeep.so.5").write_text("the image's own file\n")
    rc, _, err = nv(
        form,
        "create-soname-symlinks",
        "--root",
        str(rootfs),
        "--folder",
        LIB,
        "--folder=/usr/lib/not-there",
        "--ldconfig-path",
        "/sbin/ldconfig",
    )
    assert rc == 0, err
    assert soname_links(lib) == {
        "libfoo.so.1": "libfoo.so.1.10.0",
        "libnvidia-ml.so.1": f"libnvidia-ml.so.{VERSION}",
    }
    assert (lib / "libkeep.so.5").read_text() == "the image's own file\n"
    assert err.count("\n") == 1 and f"{LIB}/libkeep.so.5 is not a symbolic link" in err, err


def test_create_soname_symlinks_of_a_real_library(form, rootfs, shared_lib):
    built = shared_lib(f"libnvidia-ml.so.{VERSION}", "-Wl,-soname,libnvidia-ml.so.1")
    (rootfs / "usr/lib" / built.name).write_bytes(built.read_bytes())
    rc, _, err = nv(form, "create-soname-symlinks", "--root", str(rootfs), "--folder", "/usr/lib")
    assert (rc, err) == (0, "")
    assert soname_links(rootfs / "usr/lib") == {"libnvidia-ml.so.1": built.name}


def test_create_soname_symlinks_folder_resolves_inside_the_root(form, rootfs, host):
    """Guards the in-root resolution of the folders: a folder that is an image symlink to
    a host directory (or climbs out with `..`) is the container's own copy of that path;
    the host's libraries are neither read nor linked, the host directory unchanged."""
    (host / "libevil.so.1.0").write_bytes(tiny_elf("libevil.so.1"))
    (rootfs / "usr/lib/evil").symlink_to(host)
    inside = rootfs / str(host)[1:]
    inside.mkdir(parents=True)
    (inside / "libok.so.2.0").write_bytes(tiny_elf("libok.so.2"))
    before = snapshot(host)
    for folder in ("/usr/lib/evil", "/../../../../../.." + str(host)):
        rc, _, err = nv(form, "create-soname-symlinks", "--root", str(rootfs), "--folder", folder)
        assert (rc, err) == (0, "")
        assert snapshot(host) == before
    assert soname_links(inside) == {"libok.so.2": "libok.so.2.0"}


def test_create_soname_symlinks_replaces_a_link_never_follows_it(form, rootfs, host):
    """An image's SONAME entry that is a symlink to a host file: replaced itself (a new
    link under a temporary name, renamed over it), the host file untouched."""
    (rootfs / "usr/lib/libfoo.so.1.0").write_bytes(tiny_elf("libfoo.so.1"))
    (rootfs / "usr/lib/libfoo.so.1").symlink_to(host / "victim")
    before = snapshot(host)
    rc, _, err = nv(form, "create-soname-symlinks", "--root", str(rootfs), "--folder", "/usr/lib")
    assert (rc, err) == (0, "")
    assert soname_links(rootfs / "usr/lib") == {"libfoo.so.1": "libfoo.so.1.0"}
    assert snapshot(host) == before
    assert not [p for p in (rootfs / "usr/lib").iterdir() if "gpunode" in p.name]


def test_create_soname_symlinks_reads_regular_files_only(rootfs, host):
    """Guards the no-follow of what is read: a library entry that is a symlink (to a host
    library) or a FIFO is not read (O_NOFOLLOW, O_NONBLOCK, fstat), whichever way it is
    reached; the FIFO never blocks the hook."""
    from gpunode.hook import sonamelinks

    (host / "libhost.so.9.0").write_bytes(tiny_elf("libhost.so.9"))
    lib = rootfs / "usr/lib"
    (lib / "libhost.so.9.0").symlink_to(host / "libhost.so.9.0")
    os.mkfifo(lib / "libfifo.so.1.0")
    (lib / "libok.so.3.0").write_bytes(tiny_elf("libok.so.3"))
    fd = os.open(lib, os.O_RDONLY | os.O_DIRECTORY)
    old = signal.signal(signal.SIGALRM, lambda *a: pytest.fail("blocked on a FIFO"))
    signal.alarm(10)
    try:
        assert sonamelinks.read_soname(fd, "libhost.so.9.0") is None
        assert sonamelinks.read_soname(fd, "libfifo.so.1.0") is None
        assert sonamelinks.read_soname(fd, "libok.so.3.0") == "libok.so.3"
        assert sonamelinks.folder_sonames(fd, "/usr/lib", [10]) == {"libok.so.3": "libok.so.3.0"}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        os.close(fd)


def test_create_soname_symlinks_reads_each_file_bounded(rootfs, monkeypatch):
    """Guards the bounded read of each file: whatever a library's program headers claim,
    at most MAX_HEADER_TABLE bytes of its dynamic segment are read; a SONAME entry past
    them counts as none (no link)."""
    from gpunode.hook import sonamelinks
    from gpunode.util import elf

    pad = sonamelinks.MAX_HEADER_TABLE // 16 + 10
    (rootfs / "usr/lib/libbig.so.1.0").write_bytes(tiny_elf("libbig.so.1", pad=pad))
    (rootfs / "usr/lib/libsmall.so.2.0").write_bytes(tiny_elf("libsmall.so.2", pad=10))
    reads = []
    real = os.pread

    def pread(fd, n, offset):
        reads.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(elf.os, "pread", pread)
    fd = os.open(rootfs / "usr/lib", os.O_RDONLY | os.O_DIRECTORY)
    try:
        found = sonamelinks.folder_sonames(fd, "/usr/lib", [10])
    finally:
        os.close(fd)
    assert found == {"libsmall.so.2": "libsmall.so.2.0"}
    assert max(reads) <= sonamelinks.MAX_HEADER_TABLE


def test_create_soname_symlinks_reads_a_bounded_number_of_files(rootfs, monkeypatch):
    """Guards the bound on the files read in a run: more libraries than MAX_LIBRARIES in
    the folders is one line, exit 1, not a read of them all."""
    from gpunode.hook import sonamelinks
    from gpunode.hook.args import NVIDIA_OPTIONS, parse_args
    from gpunode.hook.errors import HookError

    for i in range(3):
        (rootfs / "usr/lib" / f"lib{i}.so.1.0").write_bytes(tiny_elf(f"lib{i}.so.1"))
    args = parse_args(["create-soname-symlinks", "--folder", "/usr/lib"], NVIDIA_OPTIONS)
    monkeypatch.setattr(sonamelinks, "MAX_LIBRARIES", 2)
    with pytest.raises(HookError, match=r"^more than 2 libraries in the folders$"):
        sonamelinks.cmd_create_soname_symlinks(args, str(rootfs))
    monkeypatch.setattr(sonamelinks, "MAX_LIBRARIES", 3)
    assert sonamelinks.cmd_create_soname_symlinks(args, str(rootfs)) == 0
    assert len(soname_links(rootfs / "usr/lib")) == 3
