"""gpunode-hook and gpunode.safepath against hostile container images.

The hook runs as a subprocess (as runc would run it). Everything mount-related runs in a
private mount namespace (``unshare -m``), with a shell snippet after the hook inspecting
the result in the same namespace. Every hostile case also checks that nothing appeared
in, or changed in, the host directory the image tried to point the hook at.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpunode import hook, install
from gpunode.runtime import edits, oci
from gpunode.util import safepath

SRC = Path(__file__).resolve().parents[2] / "src"
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(SRC), "LC_ALL": "C"}
HOOK = [sys.executable, "-m", "gpunode.hook"]
LIBZ = Path("/usr/lib/x86_64-linux-gnu/libz.so.1.2.13")


def _unshare_problem() -> str | None:
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("unshare") is None:
        return "unshare(1) not found"
    proc = subprocess.run(
        ["unshare", "-m", "-p", "-f", "sh", "-c", "mount -t tmpfs none /mnt"],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return f"unshare not permitted: {proc.stderr.strip()}"
    return None


UNSHARE_PROBLEM = _unshare_problem()


@pytest.fixture
def needs_unshare():
    if UNSHARE_PROBLEM:
        print(f"SKIP reason: {UNSHARE_PROBLEM}", file=sys.stderr)
        pytest.skip(f"needs unshare as root: {UNSHARE_PROBLEM}")


def run_hook(
    *args: str,
    env: dict | None = None,
    stdin: str | None = None,
    before: str = "",
    after: str = "",
):
    """Run the hook; with ``before``/``after``, inside ``unshare -m`` between those shell
    snippets (``before`` must succeed).

    Returns (returncode of the hook, stdout, stderr).
    """
    cmd = [*HOOK, *args]
    full_env = {**CLEAN_ENV, **(env or {})}
    if before or after:
        script = (
            f"set -e; {before or 'true'}; set +e; "
            + '"$@"; rc=$?; echo "--- after"; '
            + (after or "true")
            + '\nexit "$rc"'
        )
        cmd = ["unshare", "-m", "sh", "-c", script, "sh", *cmd]
    proc = subprocess.run(
        cmd, input=stdin, capture_output=True, text=True, env=full_env, timeout=120, check=False
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr


def snapshot(path: Path) -> dict[str, tuple]:
    """Everything under ``path`` (without following links) with type, size, mtime, link."""
    out = {}
    for p in [path, *sorted(path.rglob("*"))]:
        st = p.lstat()
        out[str(p)] = (
            stat.S_IFMT(st.st_mode),
            st.st_size,
            st.st_mtime_ns,
            os.readlink(p) if p.is_symlink() else None,
        )
    return out


@pytest.fixture
def host(tmp_path):
    """A host directory the hostile images aim at, with a victim file in it."""
    d = tmp_path / "hostdir"
    d.mkdir()
    (d / "victim").write_text("host data\n")
    return d


@pytest.fixture
def rootfs(tmp_path):
    r = tmp_path / "rootfs"
    (r / "etc").mkdir(parents=True)
    (r / "usr/lib").mkdir(parents=True)
    return r


def _cc(out: Path, source: str, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not available")
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(["gcc", "-O1", "-o", str(out), str(src), *flags], check=True)
    return out


# ----------------------------------------------------------------------- safepath


@pytest.fixture(params=["openat2", "walk"])
def resolver(request, monkeypatch):
    if request.param == "walk":
        monkeypatch.setattr(safepath, "_HAVE_OPENAT2", False)
    elif not safepath.have_openat2():
        pytest.skip("openat2 not available on this kernel")
    return request.param


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


# ------------------------------------------------------------------ create-symlinks


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
        assert hook.create_symlink(root_fd, "t1", "/usr/lib/x86_64-linux-gnu/l1") == "created"
        assert hook.create_symlink(root_fd, "t2", "/usr/lib/rel/l2") == "created"
        assert hook.create_symlink(root_fd, "t2", "/usr/lib/rel/l2") == "exists"
        assert hook.create_symlink(root_fd, "t3", "/usr/lib/rel/l2") == "replaced"
    finally:
        os.close(root_fd)
    assert snapshot(host) == before
    inside = rootfs / str(host).lstrip("/")
    assert os.readlink(inside / "l1") == "t1" and os.readlink(inside / "l2") == "t3"


def test_bundle_state_on_stdin(tmp_path, rootfs):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    os.symlink("../rootfs", bundle / "rootfs")
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = {
        "ociVersion": "1.0.2",
        "id": "c1",
        "status": "creating",
        "pid": 1,
        "bundle": str(bundle),
        "annotations": {},
    }
    rc, _, err = run_hook("create-symlinks", "--link", "b::/a/l", stdin=json.dumps(state))
    assert rc == 0, err
    assert os.readlink(rootfs / "a/l") == "b"
    rc, _, err = run_hook("create-symlinks", "--link", "b::/a/l", stdin="not json")
    assert rc == 1 and err.startswith("gpunode-hook: create-symlinks: invalid OCI state")


@pytest.mark.parametrize(
    "args",
    [
        ["create-symlinks", "--link", "nocolons"],
        ["create-symlinks", "--link", "a::relative/link"],
        ["create-symlinks", "--link", "a::/"],
        ["update-ldcache", "--folder", "relative"],
        ["update-ldcache", "--folder", "/ok\n/evil"],
        ["mount-proc-driver", "--gpu", "../../etc"],
        ["configure", "--driver-root", "relative/dir", "--proc-driver"],
        ["configure", "--ldconfig-path", "sbin/ldconfig", "--folder", "/x"],
        ["bogus"],
        [],
    ],
)
def test_bad_arguments_are_one_line_errors(rootfs, args):
    rc, _out, err = run_hook(*args, "--root", str(rootfs))
    assert rc == 1
    assert err.startswith("gpunode-hook: ") and err.count("\n") == 1, err


def test_version():
    rc, out, _ = run_hook("--version")
    assert rc == 0 and out.startswith("gpunode-hook ")


# ------------------------------------------------------------------- update-ldcache


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


# A static stand-in for ldconfig that acts as a compromised one: it reports who it is and
# tries to reach the host, writing its report where ldconfig writes the cache (-C), which
# the hook copies to the rootfs's /etc/ld.so.cache.
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

# What the stand-in must find (errno names): every attempt fails, each for the reason
# its protection gives.
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
        install.LAUNCHER.format(python=sys.executable, paths=repr(str(SRC)), module="gpunode.hook")
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


def test_seccomp_program_shape():
    prog = hook.seccomp_program(0xC000003E, 0)
    ins = [struct.unpack_from("=HBBI", prog, i) for i in range(0, len(prog), 8)]
    assert ins[:4] == [
        (0x20, 0, 0, 4),
        (0x15, 1, 0, 0xC000003E),
        (0x06, 0, 0, 0x80000000),
        (0x20, 0, 0, 0),
    ]
    assert ins[-2:] == [(0x06, 0, 0, 0x7FFF0000), (0x06, 0, 0, 0x50000 | errno.EPERM)]
    eperm = len(ins) - 1
    denied = {
        k for i, (code, jt, _, k) in enumerate(ins[4:], 4) if code == 0x15 and i + 1 + jt == eperm
    }
    assert {
        304,
        303,
        165,
        166,
        101,
        155,
        272,
        308,
        321,
        250,
        248,
        249,
        246,
        175,
        313,
        298,
        323,
    } <= denied
    assert 322 not in denied  # execveat: the hook's own exec of ldconfig


# ---------------------------------------------------------------- mount-proc-driver

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


# ------------------------------------------------------------------------ helpers


def test_busid_candidates():
    assert hook.busid_candidates("00000000:07:00.0") == ["00000000:07:00.0", "0000:07:00.0"]
    assert hook.busid_candidates("0000:0F:00.0") == ["00000000:0f:00.0", "0000:0f:00.0"]
    assert hook.busid_candidates("00010000:07:00.1") == ["00010000:07:00.1"]
    for bad in ("0000:07:00", "../0000:07:00.0", "0000:07:00.0/..", ""):
        with pytest.raises(hook.HookError):
            hook.busid_candidates(bad)
