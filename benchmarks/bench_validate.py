#!/usr/bin/env python3
"""Benchmark: `gpunode validate` wall time on the 8-GPU node (h100x8, Debian 13), with a
breakdown per check. Target: <= 10 s, most of it the container smoke test.

Starts (or reuses) a simulated trixie node with the h100x8 profile, installs its fabric
manager (the simulated NVIDIA repository's package; it trains the NVSwitch fabric),
registers gpunode as Docker's default runtime, and runs `gpunode validate --json` RUNS
times (default 5): the first run builds the probe image, the later ones reuse it. Prints each run's wall time (as
the operator sees it: `docker exec` of the command) and, for the median run, every check's
duration summed per check id.

usage: .venv/bin/python benchmarks/bench_validate.py [--runs N] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpunode.sim import cluster, images  # noqa: E402
from gpunode.sim.docker import exec_  # noqa: E402

TARGET_S = 10.0
ARGS = ["--expect-gpus", "8", "--runtime-default"]  # no driver package on the node: no pin


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--keep", action="store_true", help="keep the node afterwards")
    args = ap.parse_args()
    if args.runs < 2:
        print(
            f"bench: error: --runs {args.runs} must be >= 2 (one cold, one warm)", file=sys.stderr
        )
        return 2
    name = f"{os.environ.get('GPUNODE_TEST_PREFIX', 'gpunode')}-bench-validate"
    art = cluster.Artifacts.build(ROOT / "build", ROOT, log=lambda *_: None)
    spec = cluster.NodeSpec(name, "trixie", "h100x8")
    cluster.start_node(
        spec, images.build("node", "trixie", log=lambda *_: None), log=lambda *_: None
    )
    try:
        cluster.wait_booted(name)
        cluster.install_gpunode(name, art, log=lambda *_: None)
        cluster.copy_mock(name, art)
        cluster.apply(name, "h100x8", log=lambda *_: None)
        # an HGX board: the fabric manager trains its fabric (validate reads both)
        cluster.install_fabric_manager(name, "550.163.01", ROOT / "build" / "fm",
                                       log=lambda *_: None)  # fmt: skip
        setup = (
            "gpunode runtime configure docker --set-as-default --json >/dev/null && "
            "systemctl restart docker && for i in $(seq 60); do docker info >/dev/null 2>&1 "
            "&& break; sleep 0.5; done; gpunode runtime refresh >/dev/null; "
            "docker rmi -f $(docker images -q gpunode-validate-probe) >/dev/null 2>&1; true"
        )
        exec_(name, ["sh", "-c", setup])
        runs = []
        for i in range(args.runs):
            t0 = time.monotonic()
            proc = exec_(name, ["gpunode", "validate", "--json", *ARGS], check=False, timeout=300)
            wall = time.monotonic() - t0
            result = json.loads(proc.stdout)
            runs.append((wall, result))
            for c in result["checks"]:
                if c["status"] == "fail":
                    print(f"  failed: {c['id']} (GPU {c['gpu']}): {c['detail']}")
            image = next(c["detail"] for c in result["checks"] if c["id"] == "container.image")
            print(f"run {i + 1}: {wall:5.2f} s wall, exit {proc.returncode}, "
                  f"{result['summary']}, image {image}")  # fmt: skip
    finally:
        if not args.keep:
            cluster.down_names([name], log=lambda *_: None)
    warm = sorted(runs[1:], key=lambda r: r[0])
    wall, median = warm[len(warm) // 2]
    per: dict[str, float] = defaultdict(float)
    for c in median["checks"]:
        per[c["id"]] += c["duration_s"]
    print(f"\ngpunode validate on h100x8 (trixie), warm median of {len(warm)}: {wall:.2f} s wall "
          f"({median['duration_s']:.2f} s inside gpunode; target <= {TARGET_S:.0f} s)")  # fmt: skip
    print(f"cold run (probe image built): {runs[0][0]:.2f} s")
    print("breakdown (seconds, summed over GPUs):")
    for cid, s in sorted(per.items(), key=lambda kv: -kv[1]):
        print(f"  {cid:<28} {s:6.3f}")
    rest = wall - sum(per.values())
    print(f"  {'(startup, docker exec)':<28} {rest:6.3f}")
    print(f"median of warm runs: {statistics.median(w for w, _ in runs[1:]):.2f} s")
    return 0 if wall <= TARGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
