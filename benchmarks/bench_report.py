#!/usr/bin/env python3
"""Benchmark: `gpunode report` on synthetic clusters of 16, 100 and 500 nodes x 8 GPUs with
every check of issue 21 (tests/unit/report/synthetic.py: the result files of 64 nodes, a few
failing and warning, one unreachable, MIG nodes, replicated past 64 with every other
replica on a newer driver). Prints, per size, the time to read and merge the results, to
render the HTML page and to write the whole set, the size of each file (index.html,
report.json, junit.xml, summary.md) and, where Chromium is installed, how long headless
Chromium takes to load the page (parse, run its script, lay it out: performance.now() read
at the load event after a forced layout, median of --runs) and how long the page is (px).
No simulated nodes: pure Python and one browser, well under a minute at 500 nodes.

Reference (this machine, 2 shared cores; README's report section has the table):
500 x 8 index.html 13.3 MB and a 3.4 s load before issue 28, 2.0 MB and 0.7 s after.

usage: .venv/bin/python benchmarks/bench_report.py [--nodes 16,100,500] [--gpus 8] [--runs 3]
       [--no-browser]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from tests.unit.report.synthetic import write_large_cluster  # noqa: E402

from gpunode.report import build, html  # noqa: E402

CSP_META = re.compile(r'<meta http-equiv="Content-Security-Policy" content="[^"]*">')
# read at the load event (the page's own script has run), after a forced layout
PROBE = """<script>
window.addEventListener('load', function(){
 var h = document.documentElement.scrollHeight;
 document.body.setAttribute('data-load-ms', performance.now().toFixed(0));
 document.body.setAttribute('data-height', h);});
</script></body>"""


def timed(fn, runs: int) -> tuple[float, object]:
    """The median wall time of ``runs`` calls, and the last call's value."""
    times, value = [], None
    for _ in range(runs):
        t0 = time.perf_counter()
        value = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), value


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def browser_load(page: str, base: Path, runs: int) -> tuple[float, int]:
    """Headless Chromium's load time of ``page`` (ms, median) and the page's height (px).
    The probe needs the page's policy out of the way (it lets only the page's script run)."""
    probed = base / "probe.html"
    probed.write_text(CSP_META.sub("", page).replace("</body>", PROBE))
    loads, height = [], 0
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="gpunode-bench-chromium-") as profile:
            dom = subprocess.run(
                [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
                 f"--user-data-dir={profile}", "--window-size=1400,1000", "--dump-dom",
                 probed.as_uri()],
                capture_output=True, text=True, timeout=300, check=False,
            ).stdout  # fmt: skip
        ms = re.search(r'data-load-ms="(\d+)"', dom)
        if not ms:
            return float("nan"), 0
        loads.append(float(ms[1]))
        height = int(re.search(r'data-height="(\d+)"', dom)[1])
    return statistics.median(loads), height


def bench(nodes: int, gpus: int, runs: int, base: Path, browser: bool) -> dict:
    results = write_large_cluster(base / f"results-{nodes}", nodes, gpus)
    t_merge, model = timed(lambda: build.model_from([str(results)], "2026-11-22T08:00:00Z"), runs)
    t_html, page = timed(lambda: html.render(model), runs)
    out = base / f"reports-{nodes}"
    t_write, _ = timed(lambda: build.write(model, str(out)), runs)
    sizes = {f: os.path.getsize(out / f) for f in build.FILES}
    load, height = browser_load(page, base, runs) if browser else (float("nan"), 0)
    return {"nodes": nodes, "gpus": nodes * gpus, "merge_s": t_merge, "html_s": t_html,
            "write_s": t_write, "page_bytes": len(page.encode()), "sizes": sizes,
            "failed": model["summary"]["nodes_failed"], "load_ms": load, "height": height}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="16,100,500", help="cluster sizes, comma-separated")
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    ap.add_argument("--runs", type=int, default=3, help="runs per figure (median)")
    ap.add_argument("--no-browser", action="store_true", help="skip the Chromium load time")
    args = ap.parse_args()
    sizes = [int(n) for n in args.nodes.split(",")]
    browser = not args.no_browser and chromium() is not None
    if not args.no_browser and not browser:
        print("chromium not found: no load time (scripts/setup installs it)", file=sys.stderr)
    print(f"{'nodes':>6} {'GPUs':>6} {'failed':>6} {'merge s':>8} {'html s':>7} {'write s':>8} "
          f"{'index.html':>12} {'per GPU':>8} {'report.json':>12} {'junit.xml':>10} "
          f"{'summary.md':>10} {'load ms':>8} {'height px':>10}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="gpunode-bench-report-") as tmp:
        for n in sizes:
            r = bench(n, args.gpus, args.runs, Path(tmp), browser)
            s = r["sizes"]
            print(f"{r['nodes']:>6} {r['gpus']:>6} {r['failed']:>6} {r['merge_s']:>8.3f} "
                  f"{r['html_s']:>7.3f} {r['write_s']:>8.3f} {s['index.html']:>12,} "
                  f"{s['index.html'] // max(r['gpus'], 1):>8,} {s['report.json']:>12,} "
                  f"{s['junit.xml']:>10,} {s['summary.md']:>10,} {r['load_ms']:>8.0f} "
                  f"{r['height']:>10,}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
