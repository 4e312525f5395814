#!/usr/bin/env python3
"""Benchmark: cluster validation wall time, `ansible-playbook playbooks/validate.yml` from
start to the report, for a cluster shaped like inventories/sim (a100x4, h100x8-pcie for its
GPU node on Debian 13: validation only, nothing installs a fabric manager here, t4x2-faulty,
nogpu) and for 16 nodes (the same four profiles, four times).

A machine of two cores does not boot 16 systemd node containers (the 13th had not finished
booting after 300 s), so at most --containers node containers (default 4) are started and a
larger cluster is that many inventory hosts spread over them (ansible_host names the
container): every host still runs its own `gpunode validate` and sends its own result, so
the playbook does the full work of N nodes, on a quarter of the hardware.

Starts simulated nodes (prefix GPUNODE_TEST_PREFIX, default gpunode-bench), installs gpunode
with Docker's default runtime set to it, then for each size runs the playbook twice: a cold
run (each node builds its probe image) and a warm one. Prints each run's wall time and the
report's verdict; the nodes are removed afterwards unless --keep.

usage: .venv/bin/python benchmarks/bench_cluster_validate.py [--sizes 4,16] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpunode.sim import cluster, images, profiles  # noqa: E402
from gpunode.sim.docker import exec_  # noqa: E402

SHAPE = [("bookworm", "a100x4"), ("trixie", "h100x8-pcie"), ("bookworm", "t4x2-faulty"),
         ("trixie", "nogpu")]  # fmt: skip
SETUP = (
    "gpunode runtime configure docker --set-as-default --json >/dev/null && "
    "systemctl restart docker && for i in $(seq 60); do docker info >/dev/null 2>&1 "
    "&& break; sleep 0.5; done; gpunode runtime refresh >/dev/null 2>&1; true"
)


def quiet(*_):
    pass


def start(specs: list[cluster.NodeSpec], art: cluster.Artifacts) -> None:
    """Four nodes at a time: on a small machine, 16 systemd boots at once time out."""
    tags = {r: images.build("node", r, log=quiet) for r in {s.release for s in specs}}

    def prepare(s: cluster.NodeSpec) -> None:
        cluster.wait_booted(s.name, timeout=300)
        cluster.tune_node(s.name)
        cluster.install_gpunode(s.name, art, log=quiet)
        cluster.copy_mock(s.name, art)
        cluster.apply(s.name, s.profile, log=quiet)
        exec_(s.name, ["sh", "-c", SETUP], timeout=300)

    for i in range(0, len(specs), 4):
        batch = specs[i : i + 4]
        for s in batch:
            cluster.start_node(s, tags[s.release], log=quiet)
        with ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(prepare, batch))


def run_playbook(hosts: dict[str, dict], tmp: Path) -> tuple[float, dict, int]:
    inv = {
        "all": {
            "vars": {
                "ansible_connection": "community.docker.docker",
                "ansible_python_interpreter": "/usr/bin/python3",
                "gpu_container_runtime_docker_default": True,
            },
            "children": {"gpu_nodes": {"hosts": hosts}},
        }
    }
    f = tmp / "hosts.yml"
    f.write_text(yaml.safe_dump(inv))
    out = tmp / "reports"
    t0 = time.monotonic()
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(f), "-f", "16",
         "playbooks/validate.yml", "-e", f"gpunode_validate_report_dir={out}",
         "-e", "gpunode_validate_fail=false"],  # the faulty T4s fail on purpose
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    return wall, json.loads((out / "report.json").read_text()), proc.returncode


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4,16", help="cluster sizes, comma-separated")
    ap.add_argument("--keep", action="store_true", help="keep the nodes afterwards")
    ap.add_argument("--containers", type=int, default=4, help="node containers to start")
    args = ap.parse_args()
    try:
        sizes = sorted({int(s) for s in args.sizes.split(",")})
    except ValueError:
        print(f"bench: error: --sizes {args.sizes!r}: expected numbers like 4,16", file=sys.stderr)
        return 2
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-bench")
    specs = [
        cluster.NodeSpec(f"{prefix}-c{i:02d}-{SHAPE[i % 4][1]}", *SHAPE[i % 4])
        for i in range(min(max(sizes), args.containers))
    ]
    gpus = {s.profile: len(profiles.load_profile(s.profile).gpus) for s in specs}
    art = cluster.Artifacts.build(ROOT / "build", ROOT, log=quiet)
    cluster.down_names([s.name for s in specs], log=quiet)
    figures = []
    try:
        t0 = time.monotonic()
        start(specs, art)
        print(f"{len(specs)} nodes started and prepared in {time.monotonic() - t0:.0f} s")
        for n in sizes:
            hosts = {
                f"node{i:02d}-{specs[i % len(specs)].profile}": {
                    "ansible_host": specs[i % len(specs)].name,
                    # what an operator's inventory says: a node without GPUs expects none
                    # (validate.yml alone has no preflight to tell it), so it is a row of
                    # skips rather than a failed node
                    "gpunode_expected_gpus": gpus[specs[i % len(specs)].profile],
                }
                for i in range(n)
            }
            for kind in ("cold", "warm"):
                with tempfile.TemporaryDirectory() as tmp:
                    wall, report, rc = run_playbook(hosts, Path(tmp))
                s = report["summary"]
                on = min(n, len(specs))
                print(f"{n:2d} nodes on {on} containers, {kind}: {wall:6.1f} s wall (rc {rc}); "
                      f"{s['nodes_failed']} of {s['nodes']} nodes failed; checks {s['checks']}")  # fmt: skip
                figures.append((n, kind, wall))
    finally:
        if not args.keep:
            cluster.down_names([s.name for s in specs], log=quiet)
    print(
        "\ncluster validation wall time (ansible-playbook playbooks/validate.yml, to the report):"
    )
    for n, kind, wall in figures:
        print(f"  {n:2d} nodes ({kind}, {min(n, len(specs))} node containers): {wall:6.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
