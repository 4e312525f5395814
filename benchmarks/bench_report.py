#!/usr/bin/env python3
"""Benchmark: `gpunode report` on synthetic clusters of 8, 64 and 256 nodes x 8 GPUs with
every check of issue 21 (tests/unit/report/synthetic.py: a few failing and warning nodes,
one unreachable, MIG nodes). Prints, per size, the time to read and merge the results, to
render the HTML page and to write the whole set, and the size of each file (index.html,
report.json, junit.xml, summary.md). No simulated nodes: pure Python, a few seconds.

Reference (64 x 8, this machine): index.html ~1.7 MB, rendered in ~0.1 s.

usage: .venv/bin/python benchmarks/bench_report.py [--nodes 8,64,256] [--gpus 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.unit.report.synthetic import write_large_cluster  # noqa: E402

from gpunode.report import build, html  # noqa: E402


def timed(fn, runs: int) -> tuple[float, object]:
    """The median wall time of ``runs`` calls, and the last call's value."""
    times, value = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def bench(nodes: int, gpus: int, runs: int, base: Path) -> dict:
    results = write_large_cluster(base / f"results-{nodes}", nodes, gpus)
    t_merge, model = timed(lambda: build.model_from([str(results)], "2026-11-22T08:00:00Z"), runs)
    t_html, page = timed(lambda: html.render(model), runs)
    out = base / f"reports-{nodes}"
    t_write, _ = timed(lambda: build.write(model, str(out)), runs)
    sizes = {f: os.path.getsize(out / f) for f in build.FILES}
    return {"nodes": nodes, "gpus": nodes * gpus, "merge_s": t_merge, "html_s": t_html,
            "write_s": t_write, "page_bytes": len(page.encode()), "sizes": sizes}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="8,64,256", help="cluster sizes, comma-separated")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    args = ap.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    print(f"{'nodes':>6} {'GPUs':>6} {'merge s':>8} {'html s':>7} {'write s':>8} "
          f"{'index.html':>12} {'per GPU':>8} {'report.json':>12} {'junit.xml':>10} "
          f"{'summary.md':>10}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gpunode-bench-report-") as tmp:
        for n in sizes:
            r = bench(n, args.gpus, args.runs, Path(tmp))
            s = r["sizes"]
            print(f"{r['nodes']:>6} {r['gpus']:>6} {r['merge_s']:>8.3f} {r['html_s']:>7.3f} "
                  f"{r['write_s']:>8.3f} {s['index.html']:>12,} "
                  f"{s['index.html'] // max(r['gpus'], 1):>8,} {s['report.json']:>12,} "
                  f"{s['junit.xml']:>10,} {s['summary.md']:>10,}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
