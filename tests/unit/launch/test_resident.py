"""The resident service (gpunode.launch.resident) and the sh first stage's conversation
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
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpunode.launch import firststage, protocol, resident

from ..runtime.fake_node import SRC, make_bundle
from .test_shim_create import BUS, in_container, node  # noqa: F401 - node is a fixture


def _wait_for(check, what, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def stragglers(directory: Path) -> list[str]:
    """The watchdogs left behind by this test's stages: /bin/sleep processes with one
    argument (the timeout) whose environment names this test's service directory (the stages
    pass theirs on). Another run's watchdogs on the same machine (a suite in another
    checkout) are alive while their stages are, and none of this test's business."""
    mark = f"GPUNODE_RESIDENT_DIR={directory}".encode()
    out = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")[:-1]
            if not (argv and argv[0] == protocol.SLEEP.encode() and len(argv) == 2):
                continue
            if mark not in (proc / "environ").read_bytes().split(b"\0"):
                continue
        except OSError:
            continue
        out.append(f"{proc.name}: {b' '.join(argv).decode()}")
    return out


def start_service(directory: Path, src: Path = SRC) -> subprocess.Popen:
    log = open(directory.parent / "resident.log", "ab")  # noqa: SIM115 - the service's
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpunode.launch.resident", "--dir", str(directory)],
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
            f'#!/bin/sh\n: > "$PYTHON_MARK"\nexec {sys.executable} -m gpunode.launch.shim "$@"\n'
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
    _wait_for(lambda: sorted(p.name for p in directory.iterdir()) == ["pid"],
              "the FIFOs' removal")  # fmt: skip
    # the watchdog ended with the conversation: no sleep of the stage's is left
    assert stragglers(directory) == []
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


# A stand-in for a stage, as far as the service can see one: a process that made and holds
# its conversation's FIFOs (as fds FD_ANSWERS, FD_STATUS) and then execs ``rest`` (same
# pid and start time, the FIFOs still held), whose argv ends with the request's arguments.
# ``skew`` is added to the start time in the FIFOs' names; ``hold`` 0: the FIFOs are made
# but not held (another process, the test, holds them; the caller's fds FD_ANSWERS and
# FD_STATUS are /dev/null).
FAKE_CALLER = """
import os, sys
from gpunode.launch import protocol, resident
directory, skew, hold, ready, *rest = sys.argv[1:]
start = resident.start_time() + int(skew)
base = os.path.join(directory, protocol.conversation(os.getpid(), start))
for suffix, fd in ((protocol.ANSWERS_SUFFIX, protocol.FD_ANSWERS),
                   (protocol.STATUS_SUFFIX, protocol.FD_STATUS)):
    os.mkfifo(base + suffix, 0o600)
    # not holding them, the same fds are open on something else
    os.dup2(os.open(base + suffix if hold == "1" else "/dev/null", os.O_RDWR), fd)
with open(ready + ".tmp", "w") as fh:
    fh.write(f"{os.getpid()} {start}")
os.rename(ready + ".tmp", ready)
os.execvp(rest[0], rest)
"""


class FakeCaller:
    def __init__(self, tmp_path, directory, command, skew=0, hold=True, settled=None):
        """``command``: what the stand-in execs into (its pid's last program); ``settled``:
        a check on /proc/<pid> that holds once that program runs as it should (the
        default: its executable is no longer Python), so that the request is made to the
        process the test means, not to one still on its way there."""
        ready = tmp_path / f"caller-{len(list(tmp_path.glob('caller-*')))}"
        self.directory = directory
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FAKE_CALLER, str(directory), str(skew), "1" if hold else "0",
             str(ready), *command],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHONPATH": str(SRC)},
        )  # fmt: skip
        _wait_for(lambda: ready.exists(), "the caller's FIFOs")
        pid, start = (int(x) for x in ready.read_text().split())
        self.pid, self.start = pid, start
        self.base = directory / protocol.conversation(pid, start)
        python = os.path.realpath(sys.executable)

        def ran():
            try:
                exe = os.readlink(f"/proc/{pid}/exe")
            except OSError:
                return False
            return exe != python and (settled is None or settled(Path(f"/proc/{pid}")))

        _wait_for(ran, "the caller's program")
        self.held = []
        if not hold:  # the conversation's FIFOs held by this test, as a watchdog would
            self.held = [os.open(self.base.with_name(self.base.name + s), os.O_RDWR)
                         for s in (protocol.ANSWERS_SUFFIX, protocol.STATUS_SUFFIX)]  # fmt: skip

    def ask(self, argc, kind=protocol.CREATE, timeout=10.0, start=None):
        """The request made (as a stage makes it) and the first answer, or "(no answer)"."""
        answers = os.open(self.base.with_name(self.base.name + protocol.ANSWERS_SUFFIX),
                          os.O_RDONLY | os.O_NONBLOCK)  # fmt: skip
        try:
            name = protocol.request_name(kind, self.pid, self.start if start is None else start,
                                         argc)  # fmt: skip
            (self.directory / name).write_bytes(b"")
            ready, _, _ = select.select([answers], [], [], timeout)
            return os.read(answers, 4096).decode().strip() if ready else "(no answer)"
        finally:
            os.close(answers)

    def close(self):
        for fd in self.held:
            os.close(fd)
        self.proc.kill()
        self.proc.wait()


@pytest.fixture
def caller(tmp_path):
    made = []

    def make(*args, **kwargs):
        made.append(FakeCaller(tmp_path, *args, **kwargs))
        return made[-1]

    yield make
    for c in made:
        c.close()


def _uid(proc: Path) -> bool:
    return "\t65534\t65534\t65534\t65534" in (proc / "status").read_text()


def _other_mounts(proc: Path) -> bool:
    return os.stat(proc / "ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino


@pytest.mark.parametrize(
    ("wrap", "settled"),
    [
        (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], _uid),
        (["unshare", "-m", "--propagation", "private"], _other_mounts),
    ],
    ids=["another user", "another mount namespace"],
)
def test_a_caller_it_must_not_trust_gets_no_create(service, caller, wrap, settled):
    """A process of another user (or in a mount namespace of its own, where the bundle
    path means something else) that holds a conversation's FIFOs and names itself the
    caller of a GPU create is not served: the worker declines before reading config.json,
    the bundle is untouched and no runtime runs. The request is made only once the caller
    has become what the test means (its user changed, its namespace made), never to
    setpriv or unshare on their way there."""
    tmp_path, _env, directory, _ = service
    bundle, raw = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0,2"])
    args = ["create", "--pid-file", str(tmp_path / "x.pid"), "--bundle", str(bundle), "ctr"]
    c = caller(directory, [*wrap, "sh", "-c", "sleep 30; :", "sh", *args], settled=settled)
    assert c.ask(len(args)) == protocol.PYTHON
    assert (bundle / "config.json").read_bytes() == raw
    assert calls(tmp_path) == []


def test_a_process_that_got_a_callers_pid_is_not_served(service, caller):
    """Pid reuse: the request's start time is the caller's that asked, the process with
    that pid now started at another time (here: it holds the conversation, so only the
    start time tells them apart). Not served: answered ``python``, the bundle untouched."""
    tmp_path, _env, directory, _ = service
    bundle, raw = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0,2"])
    args = ["create", "--pid-file", str(tmp_path / "x.pid"), "--bundle", str(bundle), "ctr"]
    c = caller(directory, ["sh", "-c", "sleep 30; :", "sh", *args], skew=-7)
    assert c.ask(len(args)) == protocol.PYTHON
    assert (bundle / "config.json").read_bytes() == raw
    assert calls(tmp_path) == []


def test_a_process_not_holding_the_conversation_is_not_served(service, caller):
    """The process with the request's pid and start time, which does not hold the
    conversation's FIFOs (a stage that has gone on to exec its Python program, or any
    process whose pid was named while another holds the FIFOs): not served."""
    tmp_path, _env, directory, _ = service
    bundle, raw = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0,2"])
    args = ["create", "--pid-file", str(tmp_path / "x.pid"), "--bundle", str(bundle), "ctr"]
    c = caller(directory, ["sh", "-c", "sleep 30; :", "sh", *args], hold=False)
    assert c.ask(len(args)) == protocol.PYTHON
    assert (bundle / "config.json").read_bytes() == raw
    assert calls(tmp_path) == []


def test_a_conversation_reached_through_a_link_is_not_used(service, caller, tmp_path):
    """The worker opens the conversation's FIFOs without following a link: were the
    answers FIFO a link to one the caller holds, nothing is answered and nothing served."""
    tmp_path, _env, directory, _ = service
    bundle, raw = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0,2"])
    args = ["create", "--pid-file", str(tmp_path / "x.pid"), "--bundle", str(bundle), "ctr"]
    c = caller(directory, ["sh", "-c", "sleep 30; :", "sh", *args])
    answers = c.base.with_name(c.base.name + protocol.ANSWERS_SUFFIX)
    elsewhere = tmp_path / "elsewhere.r"
    os.rename(answers, elsewhere)  # the caller's fd still names this FIFO
    answers.symlink_to(elsewhere)
    reader = os.open(elsewhere, os.O_RDONLY | os.O_NONBLOCK)
    try:
        (directory / protocol.request_name(protocol.CREATE, c.pid, c.start, len(args))).write_bytes(b"")
        ready, _, _ = select.select([reader], [], [], 3)
        assert not ready, os.read(reader, 4096)
    finally:
        os.close(reader)
    assert (bundle / "config.json").read_bytes() == raw
    assert calls(tmp_path) == []


def log_of(tmp_path):
    path = tmp_path / "resident.log"
    return path.read_text() if path.exists() else ""


def test_requests_that_are_not_requests_are_dropped_said_and_the_next_is_served(service):
    tmp_path, env, directory, proc = service
    junk = ["q.x", "q.create.1.2", "q.create.12345678901.1.1", "q.create.1.1.12345",
            "q.create.-5.1.1", "q.hook.1.1.0", "q.other.1.1.1", "q." + "9" * 200,
            "q.create.1.123456789012345678901.1"]  # fmt: skip
    for name in junk:
        (directory / name).write_bytes(b"x" * 100)
    run = first_stage(tmp_path, env, directory)
    assert run.returncode == 0, run.stderr
    assert not python_ran(tmp_path)
    assert proc.poll() is None
    _wait_for(lambda: all(f"ignored {n[:80]!r}: not a request" in log_of(tmp_path)
                          for n in junk), "the service's lines")  # fmt: skip
    assert not [p for p in directory.iterdir() if p.name.startswith(protocol.REQUEST_PREFIX)]


def test_the_directory_is_made_roots_alone(tmp_path):
    """A directory made by someone else with a looser mode is the service's, mode 0700,
    once it runs: no other user can list or reach the conversations."""
    directory = tmp_path / "resident"
    directory.mkdir(mode=0o755)
    os.chmod(directory, 0o755)
    proc = start_service(directory)
    try:
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("pending", [0, 3000], ids=["alone", "behind 3000 unread requests"])
def test_a_service_that_stops_answering_fails_the_create_in_time(service, pending):
    """A stalled service (stopped), alone or with many requests unread before this one (a
    shared requests FIFO once filled up with them and blocked every create for ever): the
    create ends within its timeout with one line, and leaves nothing behind."""
    tmp_path, env, directory, proc = service
    proc.send_signal(signal.SIGSTOP)
    unread = [directory / protocol.request_name(protocol.CREATE, 4000000 + i, 1, 6)
              for i in range(pending)]  # fmt: skip
    try:
        for path in unread:  # more than 64 KiB of request lines, had they been lines
            path.write_bytes(b"")
        t = time.monotonic()
        run = first_stage(tmp_path, env, directory, extra={"GPUNODE_RESIDENT_TIMEOUT": "2"})
        took = time.monotonic() - t
    finally:
        for path in unread:
            path.unlink(missing_ok=True)
        proc.send_signal(signal.SIGCONT)
    assert run.returncode == 1
    (line,) = run.stderr.splitlines()
    assert "resident service" in line and "did not answer in 2 s" in line
    assert took < 15
    assert calls(tmp_path) == []
    assert not [p for p in directory.iterdir() if p.name.startswith(("c.", "q."))]


def test_a_worker_that_dies_gets_its_caller_one_error_line(service):
    """The worker killed while the runtime's create runs: the stage reads end-of-file and
    says so in one line; the service's log says how its worker ended."""
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
    assert line == (f"gpunode-container-runtime: error: gpunode's resident service ({directory}, "
                    f"pid {proc.pid}) ended the conversation without an answer (its log says "
                    "why)")  # fmt: skip
    assert proc.poll() is None
    _wait_for(lambda: f"the worker for caller {run.pid} ended (-9)" in log_of(tmp_path),
              "the service's line")  # fmt: skip


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
        shim = src / "gpunode/launch/shim.py"
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
    _wait_for(lambda: any(p.name.startswith(protocol.REQUEST_PREFIX)
                          for p in directory.iterdir()), "the request")  # fmt: skip
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
        [sys.executable, "-m", "gpunode.launch.resident", "--dir", str(directory)],
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
    """A conversation whose caller is gone (no such pid, or the pid is another process's
    now: another start time) is removed when the service starts; a live caller's and
    files that are not conversations stay."""
    directory = tmp_path / "resident"
    directory.mkdir(mode=0o700)
    gone = subprocess.Popen(["true"])
    gone.wait()
    alive, start = os.getpid(), resident.start_time()
    kept = [protocol.conversation(alive, start) + ".r", "notes.r"]
    for name in (protocol.conversation(gone.pid, 5) + ".r", protocol.conversation(gone.pid, 5) + ".w",
                 protocol.conversation(alive, start + 1) + ".w", *kept):  # fmt: skip
        (directory / name).write_text("")
    proc = start_service(directory)
    try:
        names = sorted(p.name for p in directory.iterdir())
        assert names == sorted([*kept, "pid"])
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


HOOK_ARGS = ["create-symlinks", "--link", "b::/a/l"]
# a process as a hook's stage is while it asks: its stdio saved as fds 4-6, its own arguments
HOOK_CALLER = ["sh", "-c", "exec 4</dev/null 5>/dev/null 6>/dev/null; sleep 30; :",
               "gpunode-hook", *HOOK_ARGS]  # fmt: skip


def test_a_hook_of_another_user_is_not_run(hook_service, caller):
    """A hook request from a process of another user that holds its conversation is
    declined before anything (its stdio, its namespace) is touched."""
    _tmp_path, directory, _proc, rootfs, _state = hook_service
    c = caller(directory, ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           *HOOK_CALLER], settled=_uid)  # fmt: skip
    assert c.ask(len(HOOK_ARGS), kind=protocol.HOOK) == protocol.PYTHON
    assert not (rootfs / "a/l").is_symlink()


@pytest.mark.parametrize("how", ["another start time", "not holding the conversation"])
def test_a_hook_impostor_in_another_mount_namespace_is_not_run(hook_service, caller, how):
    """A root process in a mount namespace of its own (as a container's root is) named as
    a hook's caller: the pid's process started at another time (pid reuse), or it does not
    hold the conversation's FIFOs. The hook does not run there with its arguments."""
    _tmp_path, directory, _proc, rootfs, _state = hook_service
    c = caller(directory, ["unshare", "-m", "--propagation", "private", *HOOK_CALLER],
               skew=-3 if how == "another start time" else 0,
               hold=how != "not holding the conversation", settled=_other_mounts)  # fmt: skip
    # the service's answer, read from the conversation's FIFO: python, nothing run. (Not
    # whether that FIFO still exists afterwards: the service removes it once its worker
    # for the caller has ended, which on a loaded machine can be before the test looks.)
    assert c.ask(len(HOOK_ARGS), kind=protocol.HOOK) == protocol.PYTHON
    assert not (rootfs / "a/l").is_symlink()


def test_the_hooks_first_stage_checks_the_services_directory(hook_service):
    """gpunode-hook's stage with a directory that is not its user's (or a link to the
    real one) does not ask: the Python hook runs, no conversation is made."""
    tmp_path, directory, _proc, _rootfs, state = hook_service
    stage = hook_stages(tmp_path)["gpunode-hook"]
    link = tmp_path / "resident-link"
    link.symlink_to(directory)
    for where, damage in ((link, None), (directory, lambda: os.chown(directory, 65534, 65534))):
        if damage:
            damage()
        (tmp_path / "python-ran").unlink(missing_ok=True)
        run = run_as_runc_runs_a_hook(stage, HOOK_ARGS, state, where)
        assert run.returncode == 0, run.stderr
        assert (tmp_path / "python-ran").exists(), where
        assert not [p for p in directory.iterdir() if p.name.startswith("c.")]


@pytest.mark.parametrize("pid_file", ["dead", "another start time", "no start time"])
@pytest.mark.parametrize("stage", ["gpunode-container-runtime", "gpunode-hook"])
def test_a_service_that_is_not_alive_is_not_asked(service, stage, pid_file):
    """The pid file names a process that is gone, or one whose start time is not the one
    written beside its pid (a pid reused since the service died): neither stage asks (no
    conversation made, no wait for the timeout); the Python program serves at once."""
    tmp_path, env, directory, proc = service
    gone = subprocess.Popen(["true"])
    gone.wait()
    text = {"dead": f"{gone.pid} 1", "another start time": f"{proc.pid} 1",
            "no start time": f"{proc.pid}"}[pid_file]  # fmt: skip
    (directory / "pid").write_text(text + "\n")
    t = time.monotonic()
    if stage == "gpunode-hook":
        hooks = hook_stages(tmp_path)
        rootfs = tmp_path / "bundle/rootfs"
        (rootfs / "a").mkdir(parents=True, exist_ok=True)
        state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 1,
                            "bundle": str(tmp_path / "bundle"), "annotations": {}})  # fmt: skip
        (tmp_path / "bundle/config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
        run = run_as_runc_runs_a_hook(hooks[stage], HOOK_ARGS, state, directory)
        run.stderr = run.stderr.replace("--- after\n", "")
    else:
        run = first_stage(tmp_path, env, directory, extra={"GPUNODE_RESIDENT_TIMEOUT": "20"})
    assert run.returncode == 0, run.stderr
    assert time.monotonic() - t < 15
    assert python_ran(tmp_path)
    assert not [p for p in directory.iterdir() if p.name.startswith(("c.", "q."))]
