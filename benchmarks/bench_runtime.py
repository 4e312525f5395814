#!/usr/bin/env python3
"""Benchmark: what gpunode's runtime costs per `docker run --rm`, against plain runc.

Starts (or reuses) a simulated Debian 12 node with the 4xA100 profile, registers gpunode
with its Docker engine, and times `docker run --rm IMAGE true` for: runc, gpunode without a
GPU request, gpunode with one GPU, gpunode with all GPUs. Prints the median of RUNS runs
(default 30) per variant and the ratio to runc. Targets: no request <= 1.03x runc,
GPU request <= 1.10x runc.

usage: .venv/bin/python benchmarks/bench_runtime.py [--runs N] [--release bookworm|trixie] [--keep]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpunode.sim import cluster, images  # noqa: E402
from gpunode.sim.docker import docker, exec_  # noqa: E402

TARGETS = {"gpunode, no GPU request": 1.03, "gpunode, one GPU": 1.10, "gpunode, all GPUs": 1.10}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--release", default="bookworm", choices=images.RELEASES)
    ap.add_argument("--keep", action="store_true", help="keep the node afterwards")
    args = ap.parse_args()
    if args.runs < 1:
        print(f"bench: error: --runs {args.runs} must be >= 1", file=sys.stderr)
        return 2
    name = f"gpunode-bench-{args.release}"
    art = cluster.Artifacts.build(ROOT / "build", ROOT, log=lambda *_: None)
    node_tag = images.build("node", args.release, log=lambda *_: None)
    workload = images.build("workload", "bookworm", log=lambda *_: None)
    spec = cluster.NodeSpec(name, args.release, "a100x4")
    cluster.start_node(spec, node_tag, log=lambda *_: None)
    cluster.wait_booted(name)
    cluster.install_gpunode(name, art, log=lambda *_: None)
    cluster.copy_mock(name, art)
    cluster.apply(name, "a100x4", log=lambda *_: None)
    exec_(
        name,
        [
            "sh",
            "-c",
            "gpunode runtime configure docker --json >/dev/null && "
            "systemctl restart docker && for i in $(seq 60); do docker info >/dev/null 2>&1 "
            "&& break; sleep 0.5; done; gpunode runtime refresh >/dev/null",
        ],
    )
    save = subprocess.Popen(["docker", "save", workload], stdout=subprocess.PIPE)
    subprocess.run(
        ["docker", "exec", "-i", name, "docker", "load", "-q"],
        stdin=save.stdout,
        check=True,
        capture_output=True,
    )
    save.wait()
    docker(["cp", str(ROOT / "benchmarks" / "node_bench.py"), f"{name}:/root/node_bench.py"])
    proc = exec_(name, ["python3", "/root/node_bench.py", workload, str(args.runs)], timeout=3600)
    times = json.loads(proc.stdout)
    base = statistics.median(times["runc"])
    print(
        f"docker run --rm {workload} true  (Debian {args.release} node, {args.runs} runs each,"
        " median)"
    )
    print(f"{'variant':<26} {'median ms':>10} {'p90 ms':>8} {'ratio':>7} {'target':>7}")
    ok = True
    for variant, samples in times.items():
        med = statistics.median(samples)
        p90 = sorted(samples)[int(0.9 * (len(samples) - 1))]
        ratio = med / base
        target = TARGETS.get(variant)
        mark = "" if target is None else ("ok" if ratio <= target else "OVER")
        ok &= target is None or ratio <= target
        print(
            f"{variant:<26} {med * 1000:>10.1f} {p90 * 1000:>8.1f} {ratio:>7.3f} "
            f"{'' if target is None else f'{target:.2f}':>7} {mark}"
        )
    if not args.keep:
        cluster.down_names([name], log=lambda *_: None)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
