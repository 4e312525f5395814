#!/usr/bin/env python3
"""Benchmark: the rootfs step's ld.so.cache work (parse, merge, sort, write: what the shim and
the hook run) on the worst caches for the sort (tests/unit/util/test_ldsocache.py
``sort_bomb``) and on this host's own cache. Each case runs in a fresh process; prints its
CPU seconds and peak RSS. ``--src`` times another checkout (e.g. main before issue 26: the
one-name cases there took ~280 s and 1-2 GiB at 65,535 entries; give ``--cpu`` to cut them
off).

usage: .venv/bin/python benchmarks/bench_ldcache_hostile.py [--src DIR] [--cpu SECONDS]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROBE = r"""
import resource, sys
cpu = int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
from gpunode.hook import ldcache
ldcache.update_container_cache(sys.argv[1], [("libcuda.so.1", "/usr/lib/libcuda.so.1")], [])
r = resource.getrusage(resource.RUSAGE_SELF)
# VmHWM, not ru_maxrss: that one keeps the forking parent's peak across exec
hwm = next(ln for ln in open("/proc/self/status") if ln.startswith("VmHWM:")).split()[1]
print(f"{r.ru_utime + r.ru_stime:.2f} {int(hwm) // 1024}")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default=str(ROOT / "src"), help="the gpunode source tree to time")
    ap.add_argument("--cpu", type=int, default=600, help="CPU seconds before a case is cut off")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.unit.util.test_ldsocache import SORT_BOMBS, sort_bomb

    cases = {"host": Path("/etc/ld.so.cache").read_bytes()}
    cases.update((kind, sort_bomb(kind)) for kind in SORT_BOMBS)
    print(f"{'case':24} {'file KiB':>9} {'CPU s':>8} {'peak MiB':>9}  note")
    for name, data in cases.items():
        with tempfile.TemporaryDirectory(prefix="bench-ldcache-") as tmp:
            os.makedirs(f"{tmp}/etc")
            Path(f"{tmp}/etc/ld.so.cache").write_bytes(data)
            proc = subprocess.run(
                [sys.executable, "-c", PROBE, tmp, str(args.cpu)],
                capture_output=True, text=True, env={"PYTHONPATH": args.src}, check=False,
            )  # fmt: skip
        if proc.returncode != 0:
            print(f"{name:24} {len(data) >> 10:9} {'>' + str(args.cpu):>8} {'-':>9}  cut off")
            continue
        cpu, peak = proc.stdout.split()
        note = "refused: " + proc.stderr.split("(", 1)[1].split(")")[0] if proc.stderr else ""
        print(f"{name:24} {len(data) >> 10:9} {cpu:>8} {peak:>9}  {note}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
