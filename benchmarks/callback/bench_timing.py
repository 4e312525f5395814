# Callback for benchmarks/bench_site.py --profile: where a playbook run's time goes, per
# task and per host. Written to $BENCH_TIMING_OUT at the end of the run:
#   tasks by wall time (from a task's start to the next one's, as profile_tasks counts),
#   with how many hosts ran, skipped or included it;
#   per host: the host-tasks it was given and the seconds from each one's start in its
#   worker to its result (min / median / max over the hosts), skipped ones apart.
from __future__ import annotations

import os
import statistics
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
    name: bench_timing
    type: aggregate
    short_description: per-task and per-host timing for benchmarks/bench_site.py
    description: writes the tasks by wall time and each host's task time to $BENCH_TIMING_OUT
    requirements: [enabled in the configuration (bench_site.py sets it)]
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_timing"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._tasks: dict[str, list] = {}  # uuid -> [name, wall, {status: hosts}]
        self._order: list[str] = []
        self._current: str | None = None
        self._started_at = 0.0
        self._host_start: dict[tuple[str, str], float] = {}
        self._host_time: dict[str, dict[str, float]] = {}
        self._host_count: dict[str, dict[str, int]] = {}
        self._run_start = time.monotonic()

    def _close_task(self) -> None:
        if self._current is not None:
            self._tasks[self._current][1] += time.monotonic() - self._started_at

    def _start_task(self, task) -> None:
        self._close_task()
        uuid = task._uuid
        if uuid not in self._tasks:
            self._tasks[uuid] = [task.get_name(), 0.0, {}]
            self._order.append(uuid)
        self._current = uuid
        self._started_at = time.monotonic()

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._start_task(task)

    def v2_playbook_on_handler_task_start(self, task):
        self._start_task(task)

    def v2_runner_on_start(self, host, task):
        self._host_start[(host.get_name(), task._uuid)] = time.monotonic()

    def _result(self, result, status: str) -> None:
        host = result._host.get_name()
        uuid = result._task._uuid
        began = self._host_start.pop((host, uuid), None)
        kind = "skipped" if status == "skipped" else "run"
        if began is not None:
            times = self._host_time.setdefault(host, {"run": 0.0, "skipped": 0.0})
            times[kind] += time.monotonic() - began
        counts = self._host_count.setdefault(host, {"run": 0, "skipped": 0})
        counts[kind] += 1
        if uuid in self._tasks:
            seen = self._tasks[uuid][2]
            seen[status] = seen.get(status, 0) + 1

    def v2_runner_on_ok(self, result):
        self._result(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._result(result, "failed")

    def v2_runner_on_skipped(self, result):
        self._result(result, "skipped")

    def v2_runner_on_unreachable(self, result):
        self._result(result, "unreachable")

    def v2_playbook_on_stats(self, stats):
        self._close_task()
        self._current = None
        out = os.environ.get("BENCH_TIMING_OUT")
        if not out:
            return
        total = time.monotonic() - self._run_start
        lines = [f"run {total:.1f} s; tasks by wall time (s, hosts ok/skipped):"]
        for uuid in sorted(self._order, key=lambda u: -self._tasks[u][1]):
            name, wall, seen = self._tasks[uuid]
            lines.append(
                f"{wall:7.2f}  {seen.get('ok', 0):>3}/{seen.get('skipped', 0):<3} {name[:90]}"
            )
        if self._host_time:
            run = sorted(t["run"] for t in self._host_time.values())
            skip = sorted(t["skipped"] for t in self._host_time.values())
            nrun = sorted(c["run"] for c in self._host_count.values())
            nskip = sorted(c["skipped"] for c in self._host_count.values())
            lines.insert(
                1,
                f"per host ({len(run)}): tasks run {nrun[0]}-{nrun[-1]}, skipped "
                f"{nskip[0]}-{nskip[-1]}; seconds from a task's start in its worker to its "
                f"result, summed: run min {run[0]:.1f} median {statistics.median(run):.1f} "
                f"max {run[-1]:.1f}, skipped median {statistics.median(skip):.1f}",
            )
        with open(out, "w") as f:
            f.write("\n".join(lines) + "\n")
