"""The resident service (gpunode.runtime.resident) and the sh first stage's conversation
with it: a GPU create served without a Python start-up gives the container what the
Python runtime gives it; whatever the service cannot serve (no --pid-file, its code
changed, stopping) goes to the Python runtime before anything is changed; a caller it
must not trust (another user, another mount namespace), a directory that is not root's
and requests that are not requests get nothing; a service that stops answering or a
worker that dies ends the create with one error line, never a wait for ever.

The node, the fake low-level runtime and the "container" are test_shim_create's; the
first stage is the generated sh, its Python runtime a launcher that leaves a mark.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpunode.runtime import firststage, resident

from .fake_node import SRC, make_bundle
from .test_shim_create import BUS, in_container, node  # noqa: F401 - node is a fixture


def _wait_for(check, what, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def start_service(directory: Path, src: Path = SRC) -> subprocess.Popen:
    log = open(directory.parent / "resident.log", "ab")  # noqa: SIM115 - the service's
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpunode.runtime.resident", "--dir", str(directory)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src)},
        stdout=log,
        stderr=log,
    )
    _wait_for(lambda: (directory / "pid").exists() or proc.poll() is not None, "the service")
    assert proc.poll() is None, (directory.parent / "resident.log").read_text()
    return proc


@pytest.fixture
def service(node):  # noqa: F811 - node is test_shim_create's fixture
    tmp_path, env = node
    directory = tmp_path / "resident"
    proc = start_service(directory)
    yield tmp_path, env, directory, proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(10)


def first_stage(tmp_path, env, directory, create_opts=("--pid-file", "PIDFILE"), extra=None,
                background=False):  # fmt: skip
    """The generated first stage running `create [opts] --bundle B ctr` for a one-GPU
    request (GPUs 0 and 2), the resident service at ``directory``."""
    python = tmp_path / "python-runtime"
    if not python.exists():
        python.write_text(
            f'#!/bin/sh\n: > "$PYTHON_MARK"\nexec {sys.executable} -m gpunode.runtime.shim "$@"\n'
        )
        python.chmod(0o755)
        (tmp_path / "gpunode-container-runtime").write_text(firststage.dispatcher(str(python)))
        (tmp_path / "gpunode-container-runtime").chmod(0o755)
    bundle, _ = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0,2"])
    (bundle / "rootfs/proc").mkdir(exist_ok=True)
    opts = [o.replace("PIDFILE", str(tmp_path / "ctr.pid")) for o in create_opts]
    argv = [str(tmp_path / "gpunode-container-runtime"), "create", *opts,
            "--bundle", str(bundle), "ctr"]  # fmt: skip
    env = env | {
        "GPUNODE_RESIDENT_DIR": str(directory),
        "PYTHON_MARK": str(tmp_path / "python-ran"),
        **(extra or {}),
    }
    if background:
        return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def calls(tmp_path):
    path = tmp_path / "calls"
    return path.read_text().splitlines() if path.exists() else []


def python_ran(tmp_path):
    return (tmp_path / "python-ran").exists()


def test_a_gpu_create_is_served_by_the_service_as_the_python_runtime_serves_it(service):
    tmp_path, env, directory, proc = service
    run = first_stage(tmp_path, env, directory)
    assert run.returncode == 0, run.stderr
    assert not python_ran(tmp_path)
    (call,) = calls(tmp_path)  # the runtime got the caller's argv, unchanged
    assert call.split() == ["create", "--pid-file", str(tmp_path / "ctr.pid"), "--bundle",
                            str(tmp_path / "bundle"), "ctr"]  # fmt: skip
    out = in_container(tmp_path, "ls /proc/driver/nvidia/gpus").split()
    assert out == [BUS[0], BUS[2]]
    log = (tmp_path / "gpunode.log").read_text()
    assert " timing create ctr " in log and "GPUs [0, 2]" in log
    # the conversation's FIFOs are gone once it is over
    _wait_for(lambda: sorted(p.name for p in directory.iterdir()) == ["pid", "requests"],
              "the FIFOs' removal")  # fmt: skip
    assert proc.poll() is None


def test_creates_one_after_another_get_their_own_gpus(service):
    tmp_path, env, directory, _ = service
    assert first_stage(tmp_path, env, directory).returncode == 0
    bundle, _ = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=1"])
    for pid in (tmp_path / "pids").read_text().split():
        os.kill(int(pid), signal.SIGKILL)
    run = subprocess.run(
        [str(tmp_path / "gpunode-container-runtime"), "create", "--pid-file",
         str(tmp_path / "ctr2.pid"), "--bundle", str(bundle), "ctr2"],
        env=env | {"GPUNODE_RESIDENT_DIR": str(directory),
                   "PYTHON_MARK": str(tmp_path / "python-ran")},
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert in_container(tmp_path, "ls /proc/driver/nvidia/gpus").split() == [BUS[1]]
    assert not python_ran(tmp_path)


@pytest.mark.parametrize(("extra", "status"), [({"FAKE_RC": "7"}, 7),
                                               ({"FAKE_SIGNAL": "TERM"}, 143)])  # fmt: skip
def test_the_runtimes_exit_status_is_passed_on(service, extra, status):
    tmp_path, env, directory, _ = service
    run = first_stage(tmp_path, env, directory, extra=extra)
    assert run.returncode == status
    assert not python_ran(tmp_path)
    assert len(calls(tmp_path)) == 1  # no delete: the runtime's own failure is its own


def test_without_a_pid_file_the_python_runtime_serves_it(service):
    tmp_path, env, directory, _ = service
    run = first_stage(tmp_path, env, directory, create_opts=())
    assert run.returncode == 0, run.stderr
    assert python_ran(tmp_path)
    (call,) = calls(tmp_path)  # once: the service changed nothing before it declined
    assert call.split()[:2] == ["create", "--pid-file"]


@pytest.mark.parametrize("opts", [["--preserve-fds", "0"], ["--preserve-fds=0"]])
def test_a_create_passing_fds_on_goes_to_the_python_runtime(service, opts):
    """The fds a caller passes on (--preserve-fds) are not the first stage's to use for
    its conversation: such a create goes to the Python runtime, untouched."""
    tmp_path, env, directory, _ = service
    run = first_stage(tmp_path, env, directory,
                      create_opts=("--pid-file", "PIDFILE", *opts))  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert python_ran(tmp_path)
    assert not [p for p in directory.iterdir() if p.name.endswith((".r", ".w"))]


def test_a_failure_after_the_runtimes_create_is_one_line_and_deletes_the_container(service):
    tmp_path, env, directory, _ = service
    # the container's /proc/driver/nvidia is already a mount: refused (test_shim_create)
    env = env | {"FAKE_CONTAINER": env["FAKE_CONTAINER"].replace(
        "&& touch", "&& mount -t tmpfs x /proc/driver/nvidia && touch")}  # fmt: skip
    run = first_stage(tmp_path, env, directory)
    assert run.returncode == 1
    (line,) = run.stderr.splitlines()
    assert line.startswith("gpunode-container-runtime: error: /proc/driver/nvidia")
    assert [c.split()[0] for c in calls(tmp_path)] == ["create", "delete"]
    assert not python_ran(tmp_path)


def test_a_directory_that_is_not_roots_is_not_used(service):
    tmp_path, env, directory, _ = service
    os.chown(directory, 65534, 65534)
    run = first_stage(tmp_path, env, directory)
    assert run.returncode == 0, run.stderr
    assert python_ran(tmp_path)
    assert not [p for p in directory.iterdir() if p.name.endswith((".r", ".w"))]


def _ask(directory: Path, caller: int, argc: int, timeout: float = 10.0, kind: str = "") -> str:
    """Talk to the service as a first stage would, for ``caller``: its first answer."""
    r, w = directory / f"{caller}.r", directory / f"{caller}.w"
    os.mkfifo(r, 0o600)
    os.mkfifo(w, 0o600)
    fr = os.open(r, os.O_RDWR)
    fw = os.open(w, os.O_RDWR)
    try:
        req = os.open(directory / "requests", os.O_WRONLY | os.O_NONBLOCK)
        os.write(req, f"{kind} {caller} {argc}\n".encode())
        os.close(req)
        ready, _, _ = select.select([fr], [], [], timeout)
        return os.read(fr, 4096).decode().strip() if ready else "(no answer)"
    finally:
        os.close(fr)
        os.close(fw)


@pytest.mark.parametrize(
    "wrap",
    [
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"],
        ["unshare", "-m", "--propagation", "private"],
    ],
    ids=["another user", "another mount namespace"],
)
def test_a_caller_it_must_not_trust_gets_no_create(service, wrap):
    """Were the FIFO writable by others, a process of another user (or in a mount
    namespace of its own, where the bundle path means something else) naming itself the
    caller of a GPU create is still not served: the child declines before reading
    config.json, the bundle is untouched and no runtime runs."""
    tmp_path, env, directory, _ = service
    bundle, raw = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0,2"])
    args = ["create", "--pid-file", str(tmp_path / "x.pid"), "--bundle", str(bundle), "ctr"]
    # setpriv and unshare exec the sh: its pid is the caller's
    caller = subprocess.Popen([*wrap, "sh", "-c", "sleep 30; :", "sh", *args],
                              env=env)  # fmt: skip
    try:
        cmdline = Path(f"/proc/{caller.pid}/cmdline")
        _wait_for(lambda: cmdline.read_bytes().endswith(b"ctr\0"), "the caller")
        pid = caller.pid
        assert _ask(directory, pid, len(args)) == "python"
    finally:
        caller.kill()
        caller.wait()
    assert (bundle / "config.json").read_bytes() == raw
    assert calls(tmp_path) == []


def test_requests_that_are_not_requests_are_dropped_and_the_next_is_served(service):
    tmp_path, env, directory, proc = service
    req = os.open(directory / "requests", os.O_WRONLY)
    junk = [b"x" * 5000, b"\n", b"abc 1\n", b"99999999999999 1\n", b"1 2 3\n", b"0 1\n",
            b"1 99\n", b"-5 1\n", b"x" * 4100, b"\n12"]  # fmt: skip
    os.write(req, b"".join(junk))  # ends unterminated: the next request is still one
    os.close(req)
    run = first_stage(tmp_path, env, directory)
    assert run.returncode == 0, run.stderr
    assert not python_ran(tmp_path)
    assert proc.poll() is None


def test_a_service_that_stops_answering_fails_the_create_in_time(service):
    tmp_path, env, directory, proc = service
    proc.send_signal(signal.SIGSTOP)
    try:
        t = time.monotonic()
        run = first_stage(tmp_path, env, directory, extra={"GPUNODE_RESIDENT_TIMEOUT": "1"})
        took = time.monotonic() - t
    finally:
        proc.send_signal(signal.SIGCONT)
    assert run.returncode == 1
    (line,) = run.stderr.splitlines()
    assert "resident service" in line and "did not answer in 1 s" in line
    assert took < 30
    assert calls(tmp_path) == []
    assert not [p for p in directory.iterdir() if p.name.endswith((".r", ".w"))]


def test_a_worker_that_dies_gets_its_caller_one_error_line(service):
    tmp_path, env, directory, proc = service
    slow = tmp_path / "slow-runc"
    slow.write_text(f'#!/bin/sh\n: > "{tmp_path}/slow"\nsleep 2\nexec {tmp_path}/fake-runc "$@"\n')
    slow.chmod(0o755)
    conf = Path(env["GPUNODE_RUNTIME_CONFIG"])
    conf.write_text(conf.read_text().replace(str(tmp_path / "fake-runc"), str(slow)))
    run = first_stage(tmp_path, env, directory, background=True)
    _wait_for(lambda: (tmp_path / "slow").exists(), "the runtime's start")
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
    assert len(children) == 1
    os.kill(int(children[0]), signal.SIGKILL)
    _out, err = run.communicate(timeout=30)
    assert run.returncode == 1
    (line,) = err.splitlines()
    assert line == ("gpunode-container-runtime: error: gpunode's resident service: "
                    "its worker ended (-9)")  # fmt: skip
    assert proc.poll() is None


def test_new_code_is_never_run_by_the_old_service(node, tmp_path):  # noqa: F811
    """gpunode reinstalled under a running service: the next create goes to the (new)
    Python runtime and the service exits, for systemd to start the new code."""
    tmp_path, env = node
    src = tmp_path / "src"
    shutil.copytree(SRC / "gpunode", src / "gpunode",
                    ignore=shutil.ignore_patterns("__pycache__", "sim"))  # fmt: skip
    directory = tmp_path / "resident"
    proc = start_service(directory, src)
    try:
        shim = src / "gpunode/runtime/shim.py"
        shim.write_text(shim.read_text())  # a new file of the same content: reinstalled
        os.utime(shim, ns=(0, time.time_ns() + 10**9))
        run = first_stage(tmp_path, env, directory)
        assert run.returncode == 0, run.stderr
        assert python_ran(tmp_path)
        assert proc.wait(10) == 0
        assert not (directory / "pid").exists()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_stopping_hands_pending_requests_to_the_python_runtime(service):
    tmp_path, env, directory, proc = service
    proc.send_signal(signal.SIGSTOP)
    run = first_stage(tmp_path, env, directory, background=True)
    _wait_for(lambda: any(p.name.endswith(".r") for p in directory.iterdir()), "the request")
    time.sleep(0.2)  # the request written into the FIFO
    proc.send_signal(signal.SIGTERM)
    proc.send_signal(signal.SIGCONT)
    _out, err = run.communicate(timeout=30)
    assert run.returncode == 0, err
    assert python_ran(tmp_path)
    assert proc.wait(10) == 0


def test_the_service_refuses_a_directory_it_does_not_own(tmp_path):
    directory = tmp_path / "resident"
    directory.mkdir()
    os.chown(directory, 65534, 65534)
    run = subprocess.run(
        [sys.executable, "-m", "gpunode.runtime.resident", "--dir", str(directory)],
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(SRC)},
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.strip() == (
        f"gpunode-runtime-resident: error: {directory} is not a directory of uid 0"
    )
    assert list(directory.iterdir()) == []


def test_the_first_stage_and_the_unit_know_where_the_service_is():
    """resident.DIR has two copies: the first stage's (rendered from it) and the role's
    unit's ExecStopPost (a template cannot import it)."""
    text = firststage.dispatcher("/usr/local/bin/gpunode-container-runtime.py")
    assert f"svc=${{GPUNODE_RESIDENT_DIR-{resident.DIR}}}" in text
    unit = Path(SRC).parent / "roles/gpu_container_runtime/templates/gpunode-runtime-resident.service.j2"
    assert f"ExecStopPost=/bin/rm -f {resident.DIR}/{resident.PID_FILE}\n" in unit.read_text()


def test_conversations_of_callers_that_are_gone_are_cleared_at_start(tmp_path):
    directory = tmp_path / "resident"
    directory.mkdir(mode=0o700)
    gone = subprocess.Popen(["true"])
    gone.wait()
    alive = os.getpid()
    for name in (f"{gone.pid}.r", f"{gone.pid}.w", f"{alive}.r", "notes.r"):
        (directory / name).write_text("")
    proc = start_service(directory)
    try:
        names = sorted(p.name for p in directory.iterdir())
        assert names == sorted([f"{alive}.r", "notes.r", "pid", "requests"])
    finally:
        proc.terminate()
        proc.wait(10)


def test_creates_side_by_side_each_get_their_own_answer(service):
    """Four GPU creates at once, each with its own bundle, GPUs and runtime status: each
    first stage gets its own conversation (FIFOs named by its pid, one worker each)."""
    tmp_path, env, directory, proc = service
    first_stage(tmp_path, env, directory)  # writes the first stage and its launcher
    for pid in (tmp_path / "pids").read_text().split():
        os.kill(int(pid), signal.SIGKILL)
    runs = []
    for i, (gpus, rc) in enumerate([("0", 0), ("1", 3), ("2", 0), ("0,1", 5)]):
        work = tmp_path / f"c{i}"
        work.mkdir()
        bundle, _ = make_bundle(work, [f"NVIDIA_VISIBLE_DEVICES={gpus}"])
        (bundle / "rootfs/proc").mkdir()
        argv = [str(tmp_path / "gpunode-container-runtime"), "create", "--pid-file",
                str(work / "ctr.pid"), "--bundle", str(bundle), f"ctr{i}"]  # fmt: skip
        run_env = env | {
            "GPUNODE_RESIDENT_DIR": str(directory),
            "PYTHON_MARK": str(work / "python-ran"),
            "FAKE_RC": str(rc),
            "FAKE_PIDS": str(work / "pids"),
            "FAKE_READY": str(work / "ready"),
            "FAKE_CONTAINER": env["FAKE_CONTAINER"].replace(str(tmp_path / "ready"),
                                                            str(work / "ready")),
        }  # fmt: skip
        runs.append((work, gpus, rc, subprocess.Popen(
            argv, env=run_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)))  # fmt: skip
    try:
        for work, gpus, rc, run in runs:
            _out, err = run.communicate(timeout=60)
            assert run.returncode == rc, err
            assert not (work / "python-ran").exists()
            if rc == 0:
                pid = (work / "pids").read_text().split()[0]
                seen = subprocess.run(["nsenter", "-t", pid, "-m", "ls", "/proc/driver/nvidia/gpus"],
                                      capture_output=True, text=True, check=True).stdout.split()  # fmt: skip
                assert seen == [BUS[int(g)] for g in gpus.split(",")]
    finally:
        for work, *_ in runs:
            for pid in (work / "pids").read_text().split() if (work / "pids").exists() else []:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    assert proc.poll() is None


# ---------------------------------------------------------------- the hooks' first stages


def hook_stages(tmp_path: Path) -> dict[str, Path]:
    """gpunode-hook's and nvidia-cdi-hook's first stages, each with a Python launcher that
    leaves a mark (tmp_path/python-ran) and runs the hook as the real launcher does."""
    out = {}
    nvcli = "import sys; from gpunode.hook.nvcli import main; sys.exit(main())"
    for name, (launcher, kind) in firststage.HOOK_STAGES.items():
        python = tmp_path / launcher
        cmd = (f"{sys.executable} -c {shlex.quote(nvcli)} \"$@\"" if kind == "nvhook"
               else f"{sys.executable} -m gpunode.hook \"$@\"")  # fmt: skip
        python.write_text(f'#!/bin/sh\n: > "{tmp_path}/python-ran"\nexec {cmd}\n')
        python.chmod(0o755)
        stage = tmp_path / name
        stage.write_text(firststage.hook_stage(name, str(python), kind))
        stage.chmod(0o755)
        out[name] = stage
    return out


@pytest.fixture
def hook_service(tmp_path):
    directory = tmp_path / "resident"
    proc = start_service(directory)
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "a").mkdir(parents=True)
    (bundle / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    state = {"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1,
             "bundle": str(bundle), "annotations": {}}  # fmt: skip
    yield tmp_path, directory, proc, bundle / "rootfs", json.dumps(state)
    if proc.poll() is None:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(10)


def run_as_runc_runs_a_hook(stage, args, state, directory, inside="", after="", wrap=()):
    """The stage as runc runs a createContainer hook: in a mount and PID namespace of its
    own (the host's /proc still mounted), the OCI state on stdin; ``inside`` runs in that
    mount namespace before the hook, ``after`` after it (its output after "--- after")."""
    script = (f'set -e; {inside or "true"}; set +e; "$@"; rc=$?; echo "--- after"; '
              f'{after or "true"}; exit "$rc"')  # fmt: skip
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(SRC),
           "GPUNODE_RESIDENT_DIR": str(directory), "LC_ALL": "C"}  # fmt: skip
    return subprocess.run(
        [*wrap, "unshare", "-m", "-p", "-f", "sh", "-c", script, "sh", str(stage), *args],
        input=state, capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("name", ["gpunode-hook", "nvidia-cdi-hook"])
def test_a_hook_is_run_by_the_service_in_the_callers_mount_namespace(hook_service, name):
    """The link is made where the hook's own namespace has a tmpfs over the rootfs's /a:
    the worker entered that namespace (the host's /a stays empty), and no Python started."""
    tmp_path, directory, _proc, rootfs, state = hook_service
    stage = hook_stages(tmp_path)[name]
    run = run_as_runc_runs_a_hook(
        stage, ["create-symlinks", "--link", "b::/a/l"], state, directory,
        inside=f"mount -t tmpfs hookns {rootfs}/a",
        after=f"readlink {rootfs}/a/l",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("--- after\n")[1].strip() == "b"  # in the hook's namespace
    assert list((rootfs / "a").iterdir()) == []  # not in the host's
    assert not (tmp_path / "python-ran").exists()


def test_a_hooks_error_is_its_own_line_on_its_own_stderr(hook_service):
    tmp_path, directory, _proc, _rootfs, _state = hook_service
    stage = hook_stages(tmp_path)["gpunode-hook"]
    run = run_as_runc_runs_a_hook(stage, ["create-symlinks", "--link", "b::/a/l"], "not json",
                                  directory)  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.startswith("gpunode-hook: create-symlinks: invalid OCI state"), run.stderr
    assert run.stderr.count("\n") == 1
    assert not (tmp_path / "python-ran").exists()


def test_a_hook_of_another_user_is_not_run(hook_service):
    """Were the FIFO writable by others, a hook request naming a process of another user
    is still declined before anything (its stdio, its namespace) is touched."""
    _tmp_path, directory, _proc, _rootfs, _state = hook_service
    caller = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               "sh", "-c", "exec 4</dev/null 5>/dev/null 6>/dev/null; sleep 30; :",
                               "sh", "create-symlinks"])  # fmt: skip
    try:
        cmdline = Path(f"/proc/{caller.pid}/cmdline")
        _wait_for(lambda: cmdline.read_bytes().endswith(b"create-symlinks\0"), "the caller")
        assert _ask(directory, caller.pid, 1, kind="hook") == "python"
    finally:
        caller.kill()
        caller.wait()
