#!/usr/bin/env python3
"""Benchmark: what `gpunode watch` costs a node. Targets: <= 0.5 % of one core at the default
interval (60 s) on an 8-GPU node, <= 40 MiB resident.

Applies the h100x8 profile to temporary paths with the real mock NVML (as the unit tests do,
in a private /dev: needs root and unshare -m; no Docker), then in one process:

* N cycles of `watch once` (the NVML walk, the health judges, the textfile and state
  written): CPU seconds per cycle, extrapolated to an hour at the interval;
* 100,000 kernel-log records from a file (Xid lines, userspace records, 1 MiB lines and
  ordinary kernel lines): wall and CPU time and the peak memory of reading them;
* the process's peak RSS (getrusage ru_maxrss).

usage: python benchmarks/bench_watch.py [--cycles N] [--lines N]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

CPU_TARGET = 0.5  # % of one core
RSS_TARGET_MIB = 40
INTERVAL = 60.0


IDLE_S = 10.0


def _proc_cpu(pid: int) -> float:
    """CPU seconds of process ``pid`` (user + system, /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def burst(path: Path, lines: int) -> None:
    """``lines`` records: 1 in 10 a kernel Xid, 1 in 10 a userspace one, 1 in 1,000 a 1 MiB
    line, the rest ordinary kernel lines."""
    big = b"x" * (1 << 20)
    with open(path, "wb") as fh:
        for i in range(1, lines + 1):
            if i % 1000 == 0:
                fh.write(b"4,%d,%d,-;" % (i, i) + big + b"\n")
            elif i % 10 == 0:
                fh.write(b"3,%d,%d,-;NVRM: Xid (PCI:0000:%02x:00): 31, pid=1, name=p, fault\n"
                         % (i, i, 0x18 + i % 8))  # fmt: skip
            elif i % 10 == 1:
                fh.write(b"14,%d,%d,-;NVRM: Xid (PCI:0000:18:00): 79, forged\n" % (i, i))
            else:
                fh.write(b"6,%d,%d,-;eth0: link up, 100Gbps, full duplex\n" % (i, i))


def inner(work: Path, mock: Path, cycles: int, lines: int) -> int:
    from gpunode.sim.apply import Paths, apply_profile
    from gpunode.sim.profiles import load_profile

    paths = Paths(dev=Path("/dev"), proc_driver=work / "proc", libdir=work / "lib",
                  mock_base=mock, state=work / "state.json", real_system=False)  # fmt: skip
    if "GPUNODE_BENCH_REEXEC" not in os.environ:  # the loader reads LD_LIBRARY_PATH at start
        apply_profile(load_profile("h100x8"), paths)
        os.environ["LD_LIBRARY_PATH"] = str(paths.libdir)
        os.environ["GPUNODE_BENCH_REEXEC"] = "1"
        os.execv(sys.executable, [sys.executable, __file__, "--inner", str(work), str(mock),
                                  str(cycles), str(lines)])  # fmt: skip
    from gpunode.watch import service

    (work / "tf").mkdir(exist_ok=True)
    (work / "kmsg").write_text("6,1,1,-;Linux version\n")
    (work / "boot").write_text("bench\n")
    w = service.Watch("bench", INTERVAL, str(work / "tf/gpunode-watch.prom"), str(work / "st"),
                      str(work / "kmsg"), str(work / "boot"), err=sys.stderr)  # fmt: skip
    w.once()  # imports, the library loaded: a running watch pays them once
    if not w.nvml_up or len(w.gpus) != 8:
        print(f"bench: error: NVML gave {len(w.gpus)} GPU(s), up={w.nvml_up}: {w.problems}")
        return 1
    c0, t0 = cpu(), time.monotonic()
    for _ in range(cycles):
        w.once()
    per_cycle = (cpu() - c0) / cycles
    wall = (time.monotonic() - t0) / cycles
    per_hour = per_cycle * 3600 / INTERVAL
    share = per_hour / 3600 * 100
    rss_cycles = rss_mib()
    print(f"cycle (8 GPUs, mock NVML): {per_cycle * 1000:.1f} ms CPU, {wall * 1000:.1f} ms wall "
          f"(mean of {cycles})")  # fmt: skip
    print(f"at --interval {INTERVAL:.0f}: {per_hour:.2f} CPU s per hour = {share:.3f} % of one "
          f"core (target <= {CPU_TARGET} %)")  # fmt: skip
    print(f"peak RSS after the cycles: {rss_cycles:.1f} MiB (target <= {RSS_TARGET_MIB} MiB)")
    w.follower.close()
    w.follower = None  # the burst is a new file: read_kmsg opens it
    burst(work / "kmsg", lines)
    size = (work / "kmsg").stat().st_size
    c0, t0 = cpu(), time.monotonic()
    w.read_kmsg()
    took, used = time.monotonic() - t0, cpu() - c0
    w.close()
    counted = sum(sum(e[0] for e in g["xids"].values()) for g in w.history.gpus.values())
    expected = lines // 10 - lines // 1000  # the kernel Xid lines
    rss_burst = rss_mib()
    print(f"{lines:,} kmsg records ({size / 2**20:.0f} MiB, {lines // 1000} of 1 MiB): "
          f"{took:.2f} s wall, {used:.2f} s CPU, peak RSS "
          f"{rss_burst:.1f} MiB (+{rss_burst - rss_cycles:.1f})")  # fmt: skip
    # the loop between cycles: `watch run` idle for IDLE_S (its kernel-log poll ticks)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    log = open(work / "idle.err", "w")  # noqa: SIM115 - the private /dev has no /dev/null
    run = subprocess.Popen([sys.executable, "-m", "gpunode", "watch", "run", "--state-dir",
                            str(work / "st-idle"), "--textfile", str(work / "tf/idle.prom"),
                            "--kmsg", str(work / "boot"), "--boot-id-file", str(work / "boot")],
                           env=env, stderr=log)  # fmt: skip
    time.sleep(2)  # start-up and the first cycle
    first = _proc_cpu(run.pid)
    time.sleep(IDLE_S)
    idle = (_proc_cpu(run.pid) - first) / IDLE_S * 100  # % of one core
    run.terminate()
    run.wait(10)
    log.close()
    print(
        f"`watch run` between cycles: {idle:.3f} % of one core (loop ticks over "
        f"{IDLE_S:.0f} s; resolution {100 / os.sysconf('SC_CLK_TCK') / IDLE_S:.2f} %)"
    )
    share += idle
    print(f"total at --interval {INTERVAL:.0f}: {share:.3f} % of one core")
    within = share <= CPU_TARGET and rss_burst <= RSS_TARGET_MIB
    print(
        f"kernel Xids counted: {counted:,} of {expected:,}; "
        + ("within targets" if within else "OVER TARGET")
    )
    return 0 if within and counted == expected else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=20)
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--inner", nargs=4, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        work, mock, cycles, lines = args.inner
        return inner(Path(work), Path(mock), int(cycles), int(lines))
    from gpunode.sim import mocknvml

    with tempfile.TemporaryDirectory(prefix="bench-watch-") as tmp:
        mock = mocknvml.build_library(Path(tmp) / "libnvidia-ml.mock.so")
        script = 'mount -t tmpfs -o mode=755 none /dev && exec "$@"'
        cmd = [
            sys.executable,
            __file__,
            "--inner",
            tmp,
            str(mock),
            str(args.cycles),
            str(args.lines),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
        return subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", *cmd], env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
