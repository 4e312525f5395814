"""update-ldcache: the confined ldconfig against hostile container images.

The hook runs as a subprocess (as runc would run it). Everything mount-related runs in a
private mount namespace (``unshare -m``), with a shell snippet after the hook inspecting
the result in the same namespace. Every hostile case also checks that nothing appeared
in, or changed in, the host directory the image tried to point the hook at.
"""

from __future__ import annotations

import ctypes
import os
import shlex
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpunode.cli import install
from gpunode.runtime import edits, oci

from ..helpers import snapshot
from .helpers import CLEAN_ENV, HOOK, LIBZ, SRC, _cc, run_hook


@pytest.fixture
def ld_rootfs(rootfs):
    if not LIBZ.exists():
        pytest.skip(f"{LIBZ} not on this host")
    shutil.copy("/etc/ld.so.conf", rootfs / "etc/ld.so.conf")
    (rootfs / "etc/ld.so.conf.d").mkdir()
    for d in ("opt/fake", "usr/lib/x86_64-linux-gnu", "proc", "sys", "dev", "tmp"):
        (rootfs / d).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    shutil.copy(LIBZ, rootfs / "opt/fake" / LIBZ.name)
    return rootfs


def _ldcache_args(root: Path, ldconfig: Path | str) -> list[str]:
    return [
        "update-ldcache",
        "--root",
        str(root),
        "--folder",
        "/opt/fake",
        "--ldconfig-path",
        str(ldconfig),
    ]


def _cache_paths(cache: Path) -> list[str]:
    out = subprocess.run(
        ["ldconfig", "-p", "-C", str(cache)], capture_output=True, text=True, check=True
    ).stdout
    return [ln.rsplit("=> ", 1)[1] for ln in out.splitlines() if "=> " in ln]


def test_update_ldcache(needs_unshare, ld_rootfs):
    before = snapshot(ld_rootfs)
    rc, _, err = run_hook("update-ldcache", "--root", str(ld_rootfs), "--folder", "/opt/fake")
    assert rc == 0, err
    conf = ld_rootfs / "etc/ld.so.conf.d/00-gpunode.conf"
    assert "/opt/fake\n" in conf.read_text()
    assert stat.S_IMODE(conf.stat().st_mode) == 0o644
    cache = ld_rootfs / "etc/ld.so.cache"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o644
    assert "/opt/fake/libz.so.1" in _cache_paths(cache)
    # ldconfig ran with -X on a read-only view: it made no SONAME link and no aux cache;
    # the rootfs changed only by the two files the hook wrote.
    after = snapshot(ld_rootfs)
    changed = {p for p in after if before.get(p) != after[p]} | (set(before) - set(after))
    root = str(ld_rootfs)
    assert changed == {root + "/etc", root + "/etc/ld.so.conf.d", str(conf), str(cache)}


def test_configure_makes_soname_links_for_the_cache(needs_unshare, ld_rootfs):
    rc, _, err = run_hook(
        "configure",
        "--root",
        str(ld_rootfs),
        "--link",
        f"{LIBZ.name}::/opt/fake/libz.so.1",
        "--folder",
        "/opt/fake",
    )
    assert rc == 0, err
    assert os.readlink(ld_rootfs / "opt/fake/libz.so.1") == LIBZ.name
    assert "/opt/fake/libz.so.1" in _cache_paths(ld_rootfs / "etc/ld.so.cache")


def test_update_ldcache_creates_missing_ld_so_conf(needs_unshare, ld_rootfs):
    (ld_rootfs / "etc/ld.so.conf").unlink()
    shutil.rmtree(ld_rootfs / "etc/ld.so.conf.d")
    rc, _, err = run_hook("update-ldcache", "--root", str(ld_rootfs), "--folder", "/opt/fake")
    assert rc == 0, err
    assert "ld.so.conf.d" in (ld_rootfs / "etc/ld.so.conf").read_text()
    assert "/opt/fake/libz.so.1" in _cache_paths(ld_rootfs / "etc/ld.so.cache")


def test_update_ldcache_hostile_confdir_and_cache_symlinks(needs_unshare, ld_rootfs, host):
    shutil.rmtree(ld_rootfs / "etc/ld.so.conf.d")
    (ld_rootfs / "etc/ld.so.conf.d").symlink_to(host)
    (ld_rootfs / "etc/ld.so.cache").symlink_to(host / "victim")
    before = snapshot(host)
    rc, _, err = run_hook("update-ldcache", "--root", str(ld_rootfs), "--folder", "/opt/fake")
    assert rc == 1  # rootfs/<host> does not exist: the drop-in cannot be placed
    assert err.startswith("gpunode-hook: update-ldcache: ")
    assert snapshot(host) == before
    # With the symlinked directory existing inside the rootfs, everything stays inside.
    (ld_rootfs / str(host).lstrip("/")).mkdir(parents=True)
    rc, _, err = run_hook("update-ldcache", "--root", str(ld_rootfs), "--folder", "/opt/fake")
    assert rc == 0, err
    assert (ld_rootfs / str(host).lstrip("/") / "00-gpunode.conf").is_file()
    assert not (ld_rootfs / "etc/ld.so.cache").is_symlink()  # replaced, never followed
    assert snapshot(host) == before
    assert (host / "victim").read_text() == "host data\n"


STANDIN_C = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>
extern char **environ;
static FILE *out;
static void report(const char *what, int ok) {
  fprintf(out, "%s=%s\n", what, ok ? "ok" : strerrorname_np(errno));
}
static int try_read(int fd) {
  if (fd < 0) return 0;
  char buf[64] = "";
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n < 0) return 0;
  buf[strcspn(buf, "\n")] = 0;
  fprintf(out, "leaked=%s\n", buf);
  return 1;
}
static int try_write(int fd) {
  if (fd < 0) return 0;
  ssize_t n = write(fd, "pwned\n", 6);
  close(fd);
  return n == 6;
}
int main(int argc, char **argv) {
  struct stat st;
  const char *cache = NULL;
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "-C")) cache = argv[i + 1];
  if (stat("/fail", &st) == 0) {
    fprintf(stderr, "ldconfig: warning: something\nldconfig: boom\n");
    return 3;
  }
  if (stat("/wait", &st) == 0) {  /* until the test has looked at the hook */
    struct timespec ts = {0, 20000000};
    for (int i = 0; i < 1000 && stat("/go", &st) != 0; i++) nanosleep(&ts, NULL);
  }
  if (!cache || !(out = fopen(cache, "w"))) return 9;
  int n = 0;
  for (char **e = environ; *e; e++) n++;
  char cwd[256] = "";
  if (!getcwd(cwd, sizeof cwd)) cwd[0] = '?';
  fprintf(out, "uid=%d\ngid=%d\ngroups=%d\nenv=%d\npid=%d\ncwd=%s\n", (int)geteuid(),
          (int)getegid(), getgroups(0, NULL), n, (int)getpid(), cwd);
  for (int i = 0; i < argc; i++) fprintf(out, "arg=%s\n", argv[i]);
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2] = {{0}};
  syscall(SYS_capget, &h, d);
  unsigned long long bnd = 0, amb = 0;
  for (int c = 0; c < 64 && prctl(PR_CAPBSET_READ, c, 0, 0, 0) >= 0; c++) {
    if (prctl(PR_CAPBSET_READ, c, 0, 0, 0) == 1) bnd |= 1ULL << c;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, c, 0, 0) == 1) amb |= 1ULL << c;
  }
#define CAP64(f) ((unsigned long long)d[1].f << 32 | d[0].f)
  fprintf(out, "cap_eff=%llx\ncap_prm=%llx\ncap_inh=%llx\ncap_bnd=%llx\ncap_amb=%llx\n",
          CAP64(effective), CAP64(permitted), CAP64(inheritable), bnd, amb);
  fprintf(out, "no_new_privs=%d\nseccomp=%d\n", prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0),
          prctl(PR_GET_SECCOMP, 0, 0, 0, 0));
  struct rlimit nofile, nproc;
  getrlimit(RLIMIT_NOFILE, &nofile);
  getrlimit(RLIMIT_NPROC, &nproc);
  fprintf(out, "nofile=%ld\nnproc=%ld\n", (long)nofile.rlim_cur, (long)nproc.rlim_cur);
  fprintf(out, "host_visible=%d\n", stat(HOSTDIR, &st) == 0);
  fprintf(out, "proc_self=%d\nsys_empty=%d\n", stat("/proc/self", &st) == 0,
          stat("/sys/kernel", &st) != 0);

  /* (a) read host files: plainly through the volume, and by handle (the handle of a
     0600 file elsewhere on the volume's filesystem, prepared by the test) */
  report("read_volume_secret", try_read(open("/vol/secret", O_RDONLY)));
  struct { unsigned int bytes; int type; unsigned char h[128]; } fh;
  int hf = open("/handle.bin", O_RDONLY);
  int got = hf >= 0 ? (int)read(hf, &fh, sizeof fh) : -1;
  if (hf >= 0) close(hf);
  int vol = open("/vol", O_RDONLY | O_DIRECTORY);
  report("read_host_by_handle",
         got > 8 && vol >= 0 && try_read(open_by_handle_at(vol, (void *)&fh, O_RDONLY)));
  struct { unsigned int bytes; int type; unsigned char h[128]; } mine = {128, 0, {0}};
  int mount_id;
  report("name_to_handle_at",
         name_to_handle_at(AT_FDCWD, "/etc/ld.so.conf", (void *)&mine, &mount_id, 0) == 0);
  /* (b) write through the rw volume, and into the rootfs itself */
  report("write_volume_new", try_write(open("/vol/new", O_WRONLY | O_CREAT | O_EXCL, 0666)));
  report("write_volume_existing", try_write(open("/vol/shared", O_WRONLY | O_APPEND)));
  report("write_rootfs", try_write(open("/tmp/new", O_WRONLY | O_CREAT | O_EXCL, 0666)));
  /* (c) mounts, other processes, the kernel */
  report("mount", mount("none", "/tmp", "tmpfs", 0, NULL) == 0);
  report("umount", umount2("/vol", MNT_DETACH) == 0);
  report("add_key", syscall(SYS_add_key, "user", "gpunode-test", "x", 1, -2) >= 0);
  pid_t child = fork();
  if (child == 0) _exit(0);
  if (child > 0) waitpid(child, NULL, 0);
  report("fork", child > 0);
  report("ptrace", ptrace(PTRACE_TRACEME, 0, 0, 0) == 0);
  report("unshare_user", unshare(CLONE_NEWUSER) == 0);
  fclose(out);
  return 0;
}
"""

BLOCKED = {
    "read_volume_secret": "EACCES",  # uid drop: nobody cannot read a 0600 root file
    "read_host_by_handle": "EPERM",  # seccomp (and no CAP_DAC_READ_SEARCH)
    "name_to_handle_at": "EPERM",  # seccomp: unprivileged callers may use it otherwise
    "write_volume_new": "EROFS",  # the read-only view (the directory is 0777)
    "write_volume_existing": "EROFS",  # (the file is 0666)
    "write_rootfs": "EROFS",  # (/tmp is 1777)
    "mount": "EPERM",
    "umount": "EPERM",
    "add_key": "EPERM",  # seccomp
    "fork": "EPERM",  # seccomp (then RLIMIT_NPROC)
    "ptrace": "EPERM",  # seccomp
    "unshare_user": "EPERM",  # seccomp
}


@pytest.fixture
def standin(tmp_path, host):
    out = tmp_path / "ldconfig-standin"
    try:
        return _cc(out, STANDIN_C, "-static", f'-DHOSTDIR="{host}"')
    except subprocess.CalledProcessError:
        pytest.skip("cannot link a static test binary (is libc6-dev's libc.a installed?)")


def _handle_of(path: Path) -> bytes:
    """name_to_handle_at(path): struct file_handle as bytes."""
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(8 + 128)
    ctypes.c_uint32.from_buffer(buf).value = 128
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, os.fsencode(path), buf, ctypes.byref(mount_id), 0) != 0:
        pytest.skip(f"no file handles on this filesystem: {os.strerror(ctypes.get_errno())}")
    size = 8 + ctypes.c_uint32.from_buffer(buf).value
    return buf.raw[:size]


def _open_by_handle(mount_dir: Path, handle: bytes) -> bytes:
    libc = ctypes.CDLL(None, use_errno=True)
    mfd = os.open(mount_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fd = libc.open_by_handle_at(mfd, ctypes.create_string_buffer(handle), os.O_RDONLY)
        assert fd >= 0, os.strerror(ctypes.get_errno())
        with os.fdopen(fd, "rb") as fh:
            return fh.read()
    finally:
        os.close(mfd)


def _report(rootfs: Path) -> tuple[dict[str, str], list[str]]:
    lines = (rootfs / "etc/ld.so.cache").read_text().splitlines()
    info = dict(ln.split("=", 1) for ln in lines if not ln.startswith("arg="))
    return info, [ln[4:] for ln in lines if ln.startswith("arg=")]


def test_confined_ldconfig_cannot_reach_the_host(needs_unshare, ld_rootfs, standin, tmp_path):
    # A host directory bind-mounted read-write into the container (a volume), holding a
    # 0600 root file and a world-writable file; on the same filesystem, outside the
    # volume, another 0600 host file whose handle the attacker knows.
    vol = tmp_path / "volume"
    vol.mkdir(mode=0o777)
    vol.chmod(0o777)
    (vol / "secret").write_text("volume secret\n")
    (vol / "secret").chmod(0o600)
    (vol / "shared").write_text("shared\n")
    (vol / "shared").chmod(0o666)
    hostsecret = tmp_path / "host-secret"
    hostsecret.write_text("host secret\n")
    hostsecret.chmod(0o600)
    handle = _handle_of(hostsecret)
    assert _open_by_handle(vol, handle) == b"host secret\n"  # the handle does work
    (ld_rootfs / "handle.bin").write_bytes(handle)
    (ld_rootfs / "vol").mkdir()
    (ld_rootfs / "sys/kernel").mkdir()
    host_before, vol_before = snapshot(tmp_path / "hostdir"), snapshot(vol)
    rc, _, err = run_hook(
        "configure",
        "--root",
        str(ld_rootfs),
        "--folder",
        "/opt/fake",
        "--folder",
        "/usr/local/nvidia/lib64",
        "--ldconfig-path",
        str(standin),
        env={"SECRET": "1", "LD_PRELOAD": ""},
        before=f"mount --bind {shlex.quote(str(vol))} {shlex.quote(str(ld_rootfs / 'vol'))}",
    )
    assert rc == 0, err
    info, args = _report(ld_rootfs)
    attempts = {k: info[k] for k in BLOCKED}
    assert attempts == BLOCKED
    assert "leaked" not in info
    assert (info["uid"], info["gid"], info["groups"]) == ("65534", "65534", "0")
    caps = {k: info[k] for k in ("cap_eff", "cap_prm", "cap_inh", "cap_bnd", "cap_amb")}
    assert caps == dict.fromkeys(caps, "0")  # no capability in any set
    assert info["no_new_privs"] == "1" and info["seccomp"] == "2"
    assert args == [
        "ldconfig",
        "-X",
        "-C",
        "/dev/ld.so.cache",
        "/opt/fake",
        "/usr/local/nvidia/lib64",
    ]
    assert info["env"] == "0"
    assert info["pid"] == "1"  # own PID namespace
    assert info["cwd"] == "/"
    assert info["host_visible"] == "0"  # host files invisible: pivot_root'ed
    assert info["proc_self"] == "0" and info["sys_empty"] == "1"
    assert (info["nofile"], info["nproc"]) == ("64", "0")
    assert snapshot(tmp_path / "hostdir") == host_before and snapshot(vol) == vol_before
    assert (vol / "shared").read_text() == "shared\n"
    assert list((ld_rootfs / "tmp").iterdir()) == []


def test_hook_works_outside_the_container_root(needs_unshare, ld_rootfs, standin, tmp_path):
    """runc starts hooks with the container's root as working directory; the hook leaves
    it at once (nothing it does may resolve relative to image-controlled directories).
    Run as installed (the -IS launcher) and as runc does; look at its cwd mid-work."""
    launcher = tmp_path / "gpunode-hook"
    launcher.write_text(
        install.LAUNCHER.format(
            python=sys.executable, paths=repr(str(SRC)), module=install.LAUNCHERS["gpunode-hook"]
        )
    )
    launcher.chmod(0o755)
    (ld_rootfs / "wait").touch()  # the stand-in waits for /go: the hook is mid-run
    proc = subprocess.Popen(
        [str(launcher), *_ldcache_args(ld_rootfs, standin)],
        cwd=ld_rootfs,
        env=CLEAN_ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
        for _ in range(1000):
            if proc.poll() is not None or children.read_text().strip():
                break
            time.sleep(0.01)
        cwd = os.readlink(f"/proc/{proc.pid}/cwd")
    finally:
        (ld_rootfs / "go").touch()
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert cwd == "/"


def test_image_ld_preload_never_reaches_the_hook(needs_unshare, ld_rootfs, tmp_path):
    """CVE-2025-23266: runc runs createContainer hooks with the container root as cwd and,
    for a hook without "env", with the container's environment. An image setting
    LD_PRELOAD=/proc/self/cwd/evil.so then runs its code in the (host, root) hook. The
    runtime's spec must give the hook its own environment."""
    marker = tmp_path / "preload-ran"
    _cc(
        ld_rootfs / "evil.so",
        "#include <fcntl.h>\n#include <unistd.h>\n"
        "__attribute__((constructor)) static void init(void) {\n"
        f'  int fd = open("{marker}", O_CREAT | O_WRONLY, 0644);\n'
        "  if (fd >= 0) close(fd);\n}\n",
        "-shared",
        "-fPIC",
    )
    image_env = ["PATH=/usr/bin:/bin", "LD_PRELOAD=/proc/self/cwd/evil.so"]
    spec = {"process": {"env": image_env}, "root": {"path": str(ld_rootfs)}}
    e = edits.Edits(
        hooks=[edits.Hook("/usr/local/bin/gpunode-hook", ("gpunode-hook", "configure"))]
    )
    oci.apply(spec, e)
    (hook_entry,) = spec["hooks"]["createContainer"]

    def run_as_runc(env: list[str]) -> None:
        args = [*hook_entry["args"][1:], "--root", str(ld_rootfs), "--folder", "/opt/fake"]
        subprocess.run(
            [*HOOK, *args],
            cwd=ld_rootfs,
            env=dict(kv.split("=", 1) for kv in env) | {"PYTHONPATH": str(SRC)},
            capture_output=True,
            check=False,
        )

    run_as_runc(image_env)  # the exploit is real: with the image's env, it fires
    assert marker.exists()
    marker.unlink()
    run_as_runc(hook_entry.get("env", image_env))  # runc: no "env" = the container's
    assert not marker.exists()


def test_update_ldcache_failure_is_one_line(needs_unshare, ld_rootfs, standin):
    (ld_rootfs / "fail").touch()
    rc, _, err = run_hook(*_ldcache_args(ld_rootfs, standin))
    assert rc == 1
    assert err == "gpunode-hook: update-ldcache: ldconfig failed (exit 3): ldconfig: boom\n"
    assert not (ld_rootfs / "etc/ld.so.cache").exists()


def test_update_ldcache_refuses_dynamic_or_script_ldconfig(ld_rootfs, tmp_path):
    script = tmp_path / "ldconfig.sh"
    script.write_text("#!/bin/sh\ntouch /pwned\n")
    script.chmod(0o755)
    for exe in ("/bin/true", str(script)):
        rc, _, err = run_hook(*_ldcache_args(ld_rootfs, exe))
        assert rc == 1
        assert "refusing" in err or "not an ELF" in err
    assert not (ld_rootfs / "pwned").exists()
