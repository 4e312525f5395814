#!/usr/bin/env python3
"""Benchmark: what gpunode as Docker's default runtime costs a container without a GPU.

The gpu_container_runtime role makes gpunode Docker's default runtime on GPU nodes
(container_engine_runtime_default: true), so that `docker run --gpus all IMAGE` works with
no `--runtime`; then every container on the node starts through gpunode's runtime. This
prints, on one simulated node (Debian 12 by default, 4xA100, gpunode registered with Docker
and the role's runtime.toml, as bench_runtime.py prepares it), `docker run --rm --network
none IMAGE true` with no --runtime while daemon.json's "default-runtime" is runc and while
it is gpunode, in alternating blocks (Docker restarted before each), and inside every block
the same with --runtime runc and --runtime gpunode as controls (interleaved, one warm-up
each). Figures: median, p90, ratio to runc as the default.

usage: .venv/bin/python benchmarks/bench_default_runtime.py [--runs N] [--release R]
           [--node NAME] [--keep]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from bench_runtime import DEBIAN, PROFILE, ms, node_bench, p90_ms, paired_ms, prepare_node, say

from gpunode.sim import cluster, images
from gpunode.sim.docker import DockerError

# issue 28: a container without a GPU request may cost at most this much more than runc
TARGET = 1.02
PLAIN = "docker run IMAGE"


def print_table(times: dict[str, list[float]], workload: str, blocks: int) -> bool:
    base = ms(times[f"runc: {PLAIN}"])
    n = len(times[f"runc: {PLAIN}"])
    print(f"\n`docker run --rm --network none {workload} true`, no GPU; {n} runs per row,")
    print(f"in {blocks} blocks per default runtime (runc, gpunode, runc, ...; Docker restarted")
    print("before each block, the rows of a block interleaved)")
    print(
        f"{'daemon.json default-runtime: command':<52} {'median ms':>9} {'p90 ms':>8} {'ratio':>6}"
    )
    for key, samples in times.items():
        print(f"{key:<52} {ms(samples):>9.1f} {p90_ms(samples):>8.1f} {ms(samples) / base:>6.3f}")
    ratio = ms(times[f"gpunode: {PLAIN}"]) / base
    met = ratio <= TARGET
    print(
        f"\nno GPU, gpunode as default runtime vs runc as default runtime: {ratio:.3f}x "
        f"(+{ms(times[f'gpunode: {PLAIN}']) - base:.1f} ms; issue 28's goal for a container "
        f"without a GPU request: <= {TARGET:.2f}x: {'met' if met else 'NOT met'})"
    )
    # Paired within a round (same block, same daemon): load drift between blocks cancels.
    # Docker's default-runtime only picks the binary, so gpunode as the default is
    # `--runtime gpunode`, and runc as the default is `--runtime runc`.
    print("paired, the median over rounds of the difference within a round (ms, and over")
    print("runc's median):")
    for label, a, b in (
        (
            "gpunode default: plain - --runtime runc",
            f"gpunode: {PLAIN}",
            "gpunode: docker run --runtime runc IMAGE",
        ),
        (
            "runc default: --runtime gpunode - plain",
            "runc: docker run --runtime gpunode IMAGE",
            f"runc: {PLAIN}",
        ),
    ):
        d = paired_ms(times[a], times[b])
        print(f"  {label:<50} {d:>+7.1f} ms  {1 + d / base:.3f}x")
    return met


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=30, help="runs per row (default 30)")
    ap.add_argument("--release", default="bookworm", choices=images.RELEASES)
    ap.add_argument("--node", help="node container name (default gpunode-bench-dflt-RELEASE)")
    ap.add_argument("--keep", action="store_true", help="keep the node afterwards")
    args = ap.parse_args()
    if args.runs < 1:
        print(f"bench: error: --runs {args.runs} must be >= 1", file=sys.stderr)
        return 2
    name = args.node or f"gpunode-bench-dflt-{args.release}"
    say(f"preparing node {name}")
    try:
        workload = prepare_node(name, args.release)
        say(f"docker, 2 default runtimes x 3 commands x {args.runs}")
        result = node_bench(name, "default-runtime", workload, args.runs)
    except (cluster.SimError, DockerError, subprocess.TimeoutExpired) as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            cluster.down_names([name], log=lambda *_: None)
    print(
        f"bench_default_runtime: {DEBIAN[args.release]} ({args.release}) node, profile "
        f"{PROFILE}, {time.strftime('%Y-%m-%d %H:%M %Z')}"
    )
    if "error" in result:
        print(f"NOT MEASURED: {result['error']}")
        return 1
    return 0 if print_table(result["times"], workload, result["blocks"]) else 1


if __name__ == "__main__":
    sys.exit(main())
