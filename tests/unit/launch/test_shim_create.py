"""The shim's create of a GPU container (no hook process): the low-level runtime's create
as a child (argv, --pid-file, exit status), then /proc/driver/nvidia filtered in the created
container's mount namespace, and cleanup when that fails.

The low-level runtime is a fake (sh): on `create` it starts the "container", a process in
a private mount namespace (unshare -m) whose /proc/driver is a tmpfs showing every GPU of
the node, writes its pid to --pid-file and exits with $FAKE_RC.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from gpunode.nvidia.facts import NodeFacts
from gpunode.runtime import discovery

from ..hook.helpers import UNSHARE_PROBLEM
from ..runtime.fake_node import GPUS, VERSION, make_bundle, run_shim, shim_env

BUS = [g.procfs_bus_id for g in GPUS]
LIBDIR = "/usr/lib/x86_64-linux-gnu"
PARAMS = "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n"

FAKE_RUNTIME = r"""#!/bin/sh
echo "$*" >> "$FAKE_LOG"
cmd= pidfile=
prev=
for a in "$@"; do
  case $prev in --pid-file) pidfile=$a ;; esac
  case $a in create|delete) [ -z "$cmd" ] && cmd=$a ;; esac
  prev=$a
done
if [ "$cmd" = create ]; then
  [ -n "$FAKE_SIGNAL" ] && kill -"$FAKE_SIGNAL" $$
  if [ "${FAKE_RC:-0}" = 0 ]; then
    rm -f "$FAKE_READY"
    unshare -m --propagation private sh -c "$FAKE_CONTAINER" </dev/null >/dev/null 2>&1 &
    for i in $(seq 200); do [ -e "$FAKE_READY" ] && break; sleep 0.02; done
    echo $! > "$FAKE_PIDS"
    printf %s $! > "$pidfile"
  fi
  exit "${FAKE_RC:-0}"
fi
if [ "$cmd" = delete ]; then
  for p in $(cat "$FAKE_PIDS" 2>/dev/null); do kill "$p" 2>/dev/null; done
fi
exit 0
"""


@pytest.fixture
def node(tmp_path):
    """A fake node: a driver root with /proc/driver/nvidia, device nodes (links to
    /dev/null, a character device), a valid inventory cache, a fake runtime and a
    runtime.toml naming them."""
    if UNSHARE_PROBLEM:
        pytest.skip(f"needs unshare as root: {UNSHARE_PROBLEM}")
    driver = tmp_path / "driver"
    nv = driver / "proc/driver/nvidia"
    for bus in BUS:
        (nv / "gpus" / bus).mkdir(parents=True)
        (nv / "gpus" / bus / "information").write_text(f"Bus Location: {bus}\n")
    (nv / "version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {VERSION}  Thu Jan  1 2026\n"
    )
    (nv / "params").write_text(PARAMS)
    dev = tmp_path / "devroot" / "dev"
    dev.mkdir(parents=True)
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1", "nvidia2"):
        (dev / name).symlink_to("/dev/null")
    cache = tmp_path / "inventory.json"
    lib = f"{driver}{LIBDIR}/libnvidia-ml.so.{VERSION}"
    files = discovery.DriverFiles(
        root=str(driver),
        libraries={"utility": [lib]},
        sonames={lib: "libnvidia-ml.so.1"},
    )
    key = discovery.cache_key(str(driver))
    discovery.write_cache(
        discovery.Discovery(NodeFacts(VERSION, "12.2", GPUS), files, key), str(cache)
    )
    runtime = tmp_path / "fake-runc"
    runtime.write_text(FAKE_RUNTIME)
    runtime.chmod(0o755)
    conf = tmp_path / "runtime.toml"
    conf.write_text(
        f"runtimes = [{json.dumps(str(runtime))}]\n"
        f"driver-root = {json.dumps(str(driver))}\n"
        f"dev-root = {json.dumps(str(dev.parent))}\n"
        f"cache-file = {json.dumps(str(cache))}\n"
        f"log-file = {json.dumps(str(tmp_path / 'gpunode.log'))}\n"
        'log-level = "debug"\n'
    )
    ready = tmp_path / "ready"
    # the container: its own /proc/driver showing every GPU (as a real procfs does)
    mkdirs = " ".join(f"/proc/driver/nvidia/gpus/{b}" for b in BUS)
    container = (
        f"mount -t tmpfs fakeproc /proc/driver && mkdir -p {mkdirs} && "
        f"touch {shlex.quote(str(ready))} && exec sleep 60"
    )
    env = shim_env(
        conf,
        "/usr/sbin:/usr/bin:/sbin:/bin",
        FAKE_LOG=str(tmp_path / "calls"),
        FAKE_PIDS=str(tmp_path / "pids"),
        FAKE_READY=str(ready),
        FAKE_CONTAINER=container,
    )
    yield tmp_path, env
    for pid in (tmp_path / "pids").read_text().split() if (tmp_path / "pids").exists() else []:
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def create(tmp_path, env, global_opts=(), create_opts=(), extra_env=None):
    """`gpunode-container-runtime [global_opts] create [create_opts] --bundle B ctr`."""
    bundle, _ = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0,2"])
    (bundle / "rootfs/proc").mkdir(exist_ok=True)
    args = [*global_opts, "create", *create_opts, "--bundle", str(bundle), "ctr"]
    proc = run_shim(args, env | (extra_env or {}), tmp_path)
    calls = (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []
    return proc, bundle, calls


def in_container(tmp_path, script):
    pid = (tmp_path / "pids").read_text().split()[0]
    return subprocess.run(
        ["nsenter", "-t", pid, "-m", "sh", "-c", script],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_create_filters_proc_in_the_created_container(node):
    tmp_path, env = node
    proc, bundle, calls = create(tmp_path, env, ["--root", "/run/fake"])
    assert proc.returncode == 0, proc.stderr
    # runc got the same argv, plus a --pid-file of the shim's own right after `create`
    (call,) = calls
    words = call.split()
    assert words[:4] == ["--root", "/run/fake", "create", "--pid-file"]
    assert words[5:] == ["--bundle", str(bundle), "ctr"]
    assert not os.path.exists(words[4])  # removed afterwards
    assert [p.name for p in bundle.iterdir() if p.name.endswith(".pid")] == []
    spec = json.loads((bundle / "config.json").read_text())
    assert "hooks" not in spec  # no hook process
    out = in_container(
        tmp_path,
        "ls /proc/driver/nvidia/gpus; cat /proc/driver/nvidia/params; "
        "findmnt -no OPTIONS /proc/driver/nvidia; "
        f"findmnt -no OPTIONS /proc/driver/nvidia/gpus/{BUS[0]}; "
        "touch /proc/driver/nvidia/x 2>/dev/null && echo WRITABLE; true",
    ).splitlines()
    assert out[:2] == [BUS[0], BUS[2]]
    assert "ModifyDeviceFiles: 0" in out and "ModifyDeviceFiles: 1" not in out
    opts = [o.split(",") for o in out if o.startswith("ro,")]
    assert len(opts) == 2 and all({"nosuid", "nodev", "noexec"} <= set(o) for o in opts)
    assert "WRITABLE" not in out
    # the host's tree is untouched, the shim's own namespace too
    assert sorted(os.listdir(tmp_path / "driver/proc/driver/nvidia/gpus")) == sorted(BUS)
    assert "nvidia" not in os.listdir("/proc/driver")
    log = (tmp_path / "gpunode.log").read_text()
    (timing,) = [ln for ln in log.splitlines() if " timing create " in ln]
    fields = timing.split(" timing create ", 1)[1].split()
    assert fields[0] == "ctr"
    names = ["config", "spec", "spawn", "symlinks", "ldcache", "sources", "wait", "proc",
             "total"]  # fmt: skip
    assert [f.split("=")[0] for f in fields[1:]] == names
    assert all(f.split("=")[1].replace(".", "", 1).isdigit() for f in fields[1:])
    # one clock, marks in order: the phases add up to the total (issue 34)
    ms = [float(f.split("=")[1]) for f in fields[1:]]
    assert abs(sum(ms[:-1]) - ms[-1]) < 0.01 * len(ms)


def test_create_keeps_the_callers_pid_file(node):
    tmp_path, env = node
    pid_file = tmp_path / "caller.pid"
    proc, _bundle, calls = create(tmp_path, env, create_opts=["--pid-file", str(pid_file)])
    assert proc.returncode == 0, proc.stderr
    assert calls[0].split().count("--pid-file") == 1
    assert pid_file.read_text() == (tmp_path / "pids").read_text().split()[0]


@pytest.mark.parametrize(
    ("extra", "status"), [({"FAKE_RC": "7"}, 7), ({"FAKE_SIGNAL": "TERM"}, 143)]
)
def test_create_passes_the_runtimes_exit_status_on(node, extra, status):
    tmp_path, env = node
    proc, bundle, calls = create(tmp_path, env, extra_env=extra)
    assert proc.returncode == status
    assert len(calls) == 1  # no delete: the runtime's own failure is its to clean up
    assert [p.name for p in bundle.iterdir() if p.name.endswith(".pid")] == []
    assert "timing create" not in (tmp_path / "gpunode.log").read_text()


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_post_create_failure_deletes_the_container_with_one_error_line(node, log_format):
    """The container's /proc/driver/nvidia is a symlink (planted by the image): refused,
    the container deleted with the caller's global options, one line everywhere."""
    tmp_path, env = node
    env = env | {
        "FAKE_CONTAINER": env["FAKE_CONTAINER"].replace(
            "mkdir -p",
            "mkdir -p /proc/driver/elsewhere/gpus && ln -s elsewhere "
            "/proc/driver/nvidia && mkdir -p",
        )
    }
    runc_log = tmp_path / "runc.log"
    opts = ["--root", "/run/fake", "--log", str(runc_log), "--log-format", log_format]
    proc, _bundle, calls = create(tmp_path, env, opts)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith("gpunode-container-runtime: error: /proc/driver/nvidia: refusing"), line
    assert calls[1].split() == [*opts, "delete", "--force", "ctr"]
    (logged,) = runc_log.read_text().splitlines()
    message = line.removeprefix("gpunode-container-runtime: error: ")
    assert message in logged and "error" in logged
    assert f"error {message}" in (tmp_path / "gpunode.log").read_text()


def test_rootfs_failure_while_the_runtime_creates_deletes_the_container(node):
    """The rootfs files are written while the runtime's create runs: when that fails (the
    library directory is a file in the image), the create waits for the runtime, deletes
    the container it made and fails with one line naming the path."""
    tmp_path, env = node
    bundle, _ = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    (bundle / "rootfs/proc").mkdir(exist_ok=True)
    (bundle / "rootfs/usr/lib").mkdir(parents=True)
    (bundle / "rootfs" / LIBDIR.lstrip("/")).write_text("not a directory\n")
    runc_log = tmp_path / "runc.log"
    argv = ["--log", str(runc_log), "create", "--bundle", str(bundle), "ctr"]
    proc = run_shim(argv, env)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(f"gpunode-container-runtime: error: {LIBDIR}/libnvidia-ml.so.1: "), line
    calls = (tmp_path / "calls").read_text().splitlines()
    assert [c.split()[-3:] for c in calls] == [
        ["--bundle", str(bundle), "ctr"],
        ["delete", "--force", "ctr"],
    ]
    assert line.removeprefix("gpunode-container-runtime: error: ") in runc_log.read_text()
    assert [p.name for p in bundle.iterdir() if p.name.endswith(".pid")] == []
    assert "timing create" not in (tmp_path / "gpunode.log").read_text()


@pytest.mark.parametrize(
    "destination", [f"{LIBDIR}/libnvidia-ml.so.1", "/etc/ld.so.cache", "/etc//ld.so.conf.d"]
)
def test_a_mount_over_a_rootfs_file_gets_the_files_before_the_runtime_starts(node, destination):
    """An operator's mount onto a path the rootfs step writes (a SONAME link, /etc/ld.so.*):
    runc would make its target while the shim replaced it by rename, so for such a spec
    the files are written before the runtime's create starts (as the wrapper sees)."""
    tmp_path, env = node
    mount = {"destination": destination, "type": "bind", "source": "/dev/null"}
    bundle, _ = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], {"mounts": [mount]})
    (bundle / "rootfs/proc").mkdir(exist_ok=True)
    link = bundle / "rootfs" / LIBDIR.lstrip("/") / "libnvidia-ml.so.1"
    wrapper = tmp_path / "wrapper"
    wrapper.write_text(
        f"#!/bin/sh\n[ -L {shlex.quote(str(link))} ] && echo LINK >> {tmp_path}/seen\n"
        f'exec {tmp_path}/fake-runc "$@"\n'
    )
    wrapper.chmod(0o755)
    conf = Path(env["GPUNODE_RUNTIME_CONFIG"])
    conf.write_text(conf.read_text().replace(str(tmp_path / "fake-runc"), str(wrapper)))
    argv = ["create", "--bundle", str(bundle), "ctr"]
    proc = run_shim(argv, env)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "seen").read_text() == "LINK\n"
    assert os.readlink(link) == f"libnvidia-ml.so.{VERSION}"


def test_post_create_unknown_gpu_deletes_the_container(node):
    """A host GPU directory gone since discovery (the cache still lists it): the sources,
    opened while the runtime creates the container, fail; nothing is mounted and the
    container is deleted."""
    tmp_path, env = node
    shutil.rmtree(tmp_path / "driver/proc/driver/nvidia/gpus" / BUS[2])
    proc, _bundle, calls = create(tmp_path, env)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert f"GPU {BUS[2]} not found" in line, line
    assert calls[-1].split()[-3:] == ["delete", "--force", "ctr"]


def test_post_create_refuses_a_proc_driver_nvidia_already_mounted_over(node):
    tmp_path, env = node
    env = env | {
        "FAKE_CONTAINER": env["FAKE_CONTAINER"].replace(
            "touch ", "mount -t tmpfs planted /proc/driver/nvidia && touch "
        )
    }
    proc, _, calls = create(tmp_path, env)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.endswith("/proc/driver/nvidia is already mounted over in the container"), line
    assert calls[-1].split()[-3:] == ["delete", "--force", "ctr"]


def test_rootfs_writes_stay_inside_a_hostile_root(node):
    """The image's library directory is an absolute symlink to a host directory: the
    SONAME link and the ld cache land in the image's own tree, the host dir stays empty."""
    tmp_path, env = node
    host = tmp_path / "hostlib"
    host.mkdir()
    bundle, _ = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    rootfs = bundle / "rootfs"
    (rootfs / "usr/lib").mkdir(parents=True)
    (rootfs / str(host).lstrip("/")).mkdir(parents=True)
    (rootfs / LIBDIR.lstrip("/")).symlink_to(host)
    (rootfs / "etc/ld.so.cache").symlink_to(tmp_path / "host-ld.so.cache")
    proc = run_shim(["create", "--bundle", str(bundle), "c"], env)
    assert proc.returncode == 0, proc.stderr
    assert list(host.iterdir()) == []
    assert not (tmp_path / "host-ld.so.cache").exists()
    inside = rootfs / str(host).lstrip("/")
    assert os.readlink(inside / "libnvidia-ml.so.1") == f"libnvidia-ml.so.{VERSION}"
    cache = (rootfs / "etc/ld.so.cache").read_bytes()
    assert b"libnvidia-ml.so.1" in cache and not (rootfs / "etc/ld.so.cache").is_symlink()
