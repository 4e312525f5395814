"""The start path under stress (issue 34): thousands of GPU creates and hook runs through
their sh first stages and the resident service, several at once, with the machine's
cores kept busy besides. Every one must end in under 2 s and with its own answer, and no
process a stage started (its watchdog) may be left when the stage is gone — one that
held the caller's stdio kept runc waiting 30 s (0.3-1.1 % of hook runs under load before
this was fixed). A run's time is taken until its stdout and stderr reach end-of-file, as
runc waits for them: a straggler holding them would show as a slow run.

The watchdogs get a timeout (TIMEOUT) no other process here uses, so that any left over
is found by its command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpunode.launch import protocol

from ..runtime.fake_node import make_bundle
from .test_resident import first_stage, hook_stages, service  # noqa: F401 - fixture
from .test_shim_create import node  # noqa: F401 - fixture

TIMEOUT = "29"
HOOK_RUNS = 2000
CREATE_RUNS = 1000
PARALLEL = 4
SLOW = 2.0


def watchdogs(directory: Path) -> list[str]:
    """This test's stages' watchdogs alive now: ``/bin/sleep 29`` whose environment names
    this test's service directory (the stages pass theirs on to the watchdog). Only this
    test's: other runs on the machine (a suite in another checkout) have watchdogs of their
    own, alive while their stages are, which are none of this test's business."""
    want = [protocol.SLEEP.encode(), TIMEOUT.encode()]
    mark = f"GPUNODE_RESIDENT_DIR={directory}".encode()
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if (proc / "cmdline").read_bytes().split(b"\0")[:-1] == want and mark in (
                    proc / "environ"
                ).read_bytes().split(b"\0"):
                    out.append(proc.name)
    return out


@pytest.fixture
def busy_machine():
    """Every core kept busy while the test runs (the load the stall was seen under)."""
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
               for _ in range(os.cpu_count() or 2)]  # fmt: skip
    yield
    for b in burners:
        b.kill()
        b.wait()


def timed(argv, env, stdin=None, cwd=None):
    t = time.monotonic()
    run = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True, cwd=cwd,
                         timeout=120, check=False)  # fmt: skip
    return time.monotonic() - t, run


def test_thousands_of_hooks_and_creates_leave_no_straggler_and_none_is_slow(
    service,  # noqa: F811 - test_resident's fixture
    busy_machine,
):
    tmp_path, env, directory, proc = service
    env = env | {"GPUNODE_RESIDENT_DIR": str(directory), "GPUNODE_RESIDENT_TIMEOUT": TIMEOUT,
                 "PYTHON_MARK": str(tmp_path / "python-ran")}  # fmt: skip
    # the hooks: gpunode-hook's stage making a link in a container root, as runc runs it
    stage = hook_stages(tmp_path)["gpunode-hook"]
    (tmp_path / "python-ran").unlink(missing_ok=True)
    roots = tmp_path / "roots"

    def hook(i):
        root = roots / str(i % 50)
        state = json.dumps({"ociVersion": "1.0.2", "id": f"c{i}", "status": "creating",
                            "pid": 1, "bundle": str(root), "annotations": {}})  # fmt: skip
        return timed([str(stage), "create-symlinks", "--link", f"b::/l{i}"], env, state)

    for i in range(50):
        (roots / str(i) / "rootfs").mkdir(parents=True)
        (roots / str(i) / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    # the creates: the runtime's stage for a one-GPU container, each with its own bundle
    # and "container" (killed once created)
    first_stage(tmp_path, env, directory)  # writes the stage and its Python launcher
    for pid in (tmp_path / "pids").read_text().split():
        os.kill(int(pid), signal.SIGKILL)
    runtime = str(tmp_path / "gpunode-container-runtime")

    def create(i):
        work = tmp_path / "c" / str(i)
        work.mkdir(parents=True)
        bundle, _ = make_bundle(work, [f"NVIDIA_VISIBLE_DEVICES={i % 3}"])
        (bundle / "rootfs/proc").mkdir()
        run_env = env | {
            "FAKE_PIDS": str(work / "pids"),
            "FAKE_READY": str(work / "ready"),
            "FAKE_CONTAINER": env["FAKE_CONTAINER"].replace(str(tmp_path / "ready"),
                                                            str(work / "ready")),
        }  # fmt: skip
        try:
            return timed([runtime, "create", "--pid-file", str(work / "ctr.pid"), "--bundle",
                          str(bundle), f"ctr{i}"], run_env)  # fmt: skip
        finally:
            for pid in (work / "pids").read_text().split() if (work / "pids").exists() else []:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)

    slow, failed = [], []
    jobs = [("hook", i) for i in range(HOOK_RUNS)] + [("create", i) for i in range(CREATE_RUNS)]
    jobs.sort(key=lambda j: j[1] * (CREATE_RUNS if j[0] == "hook" else HOOK_RUNS))  # interleaved
    with ThreadPoolExecutor(PARALLEL) as pool:
        for (kind, i), (took, run) in (
            zip(jobs, pool.map(lambda j: (hook if j[0] == "hook" else create)(j[1]), jobs),
                strict=True)):  # fmt: skip
            if run.returncode != 0:
                failed.append(f"{kind} {i}: rc {run.returncode}: {run.stderr.strip()}")
            if took > SLOW:
                slow.append(f"{kind} {i}: {took:.2f} s")
    time.sleep(0.5)
    after = watchdogs(directory)
    assert failed == [], f"{len(failed)} failed: {failed[:5]}"
    assert slow == [], f"{len(slow)} of {len(jobs)} runs took over {SLOW} s: {slow[:10]}"
    assert after == [], f"watchdogs left behind: {after}"
    assert not (tmp_path / "python-ran").exists()  # every one served by the service
    assert proc.poll() is None
    print(f"{HOOK_RUNS} hooks and {CREATE_RUNS} creates, {PARALLEL} at a time on a busy "
          f"machine: none failed, none over {SLOW} s, no watchdog left")
