#!/usr/bin/env python3
"""Benchmark: wall time of site.yml on a simulated cluster, first and second run, and of
each molecule scenario (`molecule test -s NAME`).

Starts NODES simulated nodes (default 16) with mixed profiles — Debian 12 4xA100, Debian 13
8xH100, Debian 12 2xT4 (one faulty GPU), Debian 13 without GPU, in turn — runs
`ansible-playbook site.yml` twice against them (the second run must report zero changed;
target <= 120 s) and then the molecule scenarios one after the other. Package downloads go
to the shared apt cache (~/.cache/gpunode/apt), so only the very first run on a machine
downloads packages. Exits 1 when a run fails, when the second run changes anything or
misses its target, or when a molecule scenario fails.

usage: .venv/bin/python benchmarks/bench_site.py [--nodes N] [--forks F] [--prefix P]
                                                  [--no-molecule] [--keep]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpunode.sim import cluster  # noqa: E402

MIX = [
    ("bookworm", "a100x4"),
    ("trixie", "h100x8"),
    ("bookworm", "t4x2-faulty"),
    ("trixie", "nogpu"),
]
SECOND_RUN_TARGET_S = 120


def recap_changed(stdout: str) -> int:
    return sum(int(n) for n in re.findall(r"^\S+\s*:\s*ok=\d+\s+changed=(\d+)", stdout, re.M))


def timed(cmd: list[str], env: dict | None = None) -> tuple[float, subprocess.CompletedProcess]:
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, env=env)
    return time.monotonic() - start, proc


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=16)
    ap.add_argument("--forks", type=int, default=16, help="ansible-playbook --forks")
    ap.add_argument("--prefix", default=os.environ.get("GPUNODE_TEST_PREFIX", "bench"))
    ap.add_argument("--no-molecule", action="store_true", help="site.yml only")
    ap.add_argument("--keep", action="store_true", help="keep the nodes afterwards")
    args = ap.parse_args()
    if args.nodes < 1 or args.forks < 1:
        print("bench_site: error: --nodes and --forks must be >= 1", file=sys.stderr)
        return 2
    bindir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "GPUNODE_TEST_PREFIX": args.prefix}
    hosts = {
        f"{args.prefix}-site-{i:02d}": {
            "gpunode_sim_release": MIX[i % len(MIX)][0],
            "gpunode_sim_profile": MIX[i % len(MIX)][1],
        }
        for i in range(args.nodes)
    }
    results: list[tuple[str, float, str]] = []
    status = 0
    with tempfile.TemporaryDirectory(prefix="bench-site-") as tmp:
        inv = Path(tmp)
        (inv / "hosts.yml").write_text(
            yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}})
        )
        (inv / "group_vars").symlink_to(ROOT / "inventories/sim/group_vars")
        art = cluster.Artifacts.build(ROOT / "build", ROOT, log=lambda *_: None)
        start = time.monotonic()
        cluster.down_names(list(hosts), log=lambda *_: None)
        cluster.up(inv / "hosts.yml", art, log=lambda *_: None)
        print(f"{args.nodes} simulated nodes up in {time.monotonic() - start:.0f} s", flush=True)
        try:
            # site.yml validates last; the mix's faulty T4 GPUs fail validation on purpose,
            # so validation's verdict does not fail the run (the report goes to the tmp dir)
            playbook = [str(bindir / "ansible-playbook"), "-i", str(inv), "-f", str(args.forks),
                        "-e", "gpunode_validate_fail=false",
                        "-e", f"gpunode_validate_report_dir={inv}/reports"]  # fmt: skip
            for label in ("site.yml first run", "site.yml second run"):
                took, proc = timed([*playbook, "site.yml"], env)
                changed = recap_changed(proc.stdout)
                verdict = "ok" if proc.returncode == 0 else f"FAILED (rc {proc.returncode})"
                if label.endswith("second run"):
                    if changed:
                        verdict += f", {changed} changed (expected 0)"
                        status = 1
                    verdict += f", target <= {SECOND_RUN_TARGET_S} s" + (
                        "" if took <= SECOND_RUN_TARGET_S else " NOT MET"
                    )
                    if took > SECOND_RUN_TARGET_S:
                        status = 1  # as bench_runtime.py: a missed target is a failed run
                if proc.returncode != 0:
                    status = 1
                    print(proc.stdout[-3000:] + proc.stderr[-2000:], file=sys.stderr)
                results.append((label, took, f"{verdict}; {changed} changed"))
                print(f"{label:<34} {took:7.1f} s  {results[-1][2]}", flush=True)
        finally:
            if not args.keep:
                cluster.down_names(list(hosts), log=lambda *_: None)
    if not args.no_molecule:
        molecule = str(bindir / "molecule")
        for scenario in sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml")):
            took, proc = timed([molecule, "test", "-s", scenario], env)
            verdict = "passed" if proc.returncode == 0 else f"FAILED (rc {proc.returncode})"
            if proc.returncode != 0:
                status = 1
                print(proc.stdout[-3000:] + proc.stderr[-2000:], file=sys.stderr)
            results.append((f"molecule {scenario}", took, verdict))
            print(f"{'molecule test -s ' + scenario:<34} {took:7.1f} s  {verdict}", flush=True)
    print("\nsummary")
    for label, took, verdict in results:
        print(f"  {label:<32} {took:7.1f} s  {verdict}")
    return status


if __name__ == "__main__":
    sys.exit(main())
