#!/usr/bin/env python3
"""Benchmark: the hook's `configure` (SONAME links + ld cache) as the runtime starts it.

Times whole processes, ``python3 -IS`` as the installed launcher runs the hook, on a
prepared container root: a real image root (``--rootfs``: a copy is made; default: the
simulator's Debian 12 workload image, exported) with five driver-like libraries in its
multiarch directory, arguments as gpunode's runtime passes them (``--link`` per SONAME
link, ``--library`` per library where the tree has that option, ``--folder``). Prints
min and median of RUNS runs (default 50), wall and CPU time (the children's rusage: less
inflated than wall time by other jobs on the machine). ``--src`` times another checkout's
hook (e.g. the one that ran ldconfig confined, for a before/after figure); given twice,
both are timed, interleaved run by run. ``--cdi``: the hook as a CDI spec runs it (the OCI
state on stdin, config.json read for the root) instead of ``--root``. It must run as root.

usage: .venv/bin/python benchmarks/bench_hook_ldcache.py [--runs N] [--src DIR]... [--cdi]
           [--rootfs DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBDIR = "/usr/lib/x86_64-linux-gnu"
VERSION = "535.261.03"
DRIVER = {  # file name -> SONAME
    f"libcuda.so.{VERSION}": "libcuda.so.1",
    f"libnvidia-ml.so.{VERSION}": "libnvidia-ml.so.1",
    f"libnvidia-ptxjitcompiler.so.{VERSION}": "libnvidia-ptxjitcompiler.so.1",
    f"libnvidia-nvvm.so.{VERSION}": "libnvidia-nvvm.so.4",
    f"libnvidia-glcore.so.{VERSION}": f"libnvidia-glcore.so.{VERSION}",
}


def _image_root(dest: Path) -> None:
    sys.path.insert(0, str(ROOT / "src"))
    sys.path.insert(0, str(ROOT / "tests" / "integration"))
    import ldcache_rootfs

    from gpunode.sim import images

    ldcache_rootfs.extract(ldcache_rootfs.from_image(images.build("workload", "bookworm")), dest)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument(
        "--src", action="append", help="a gpunode source tree to time (default: this one's)"
    )
    ap.add_argument("--cdi", action="store_true", help="OCI state on stdin instead of --root")
    ap.add_argument("--rootfs", help="an image root to copy (default: Debian 12 workload)")
    args = ap.parse_args()
    if args.runs < 1:
        print(f"bench: error: --runs {args.runs} must be >= 1", file=sys.stderr)
        return 2
    srcs = [Path(p).resolve() for p in args.src or [str(ROOT / "src")]]
    for src in srcs:
        if not (src / "gpunode/hook/main.py").is_file():
            print(f"bench: error: --src {src} has no gpunode/hook/main.py", file=sys.stderr)
            return 2
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp:
        root = Path(tmp) / "bundle" / "rootfs"
        if args.rootfs:
            shutil.copytree(args.rootfs, root, symlinks=True)
        else:
            _image_root(root)
        for d in ("dev", "proc", "sys"):  # as in a container root (runc made them)
            (root / d).mkdir(exist_ok=True)
        libdir = root / LIBDIR.lstrip("/")
        libz = next(libdir.glob("libz.so.1.*"))
        for name in DRIVER:
            shutil.copy(libz, libdir / name)  # content is not read by the new hook
        image_cache = (root / "etc/ld.so.cache").read_bytes()
        (root.parent / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
        state = json.dumps({"ociVersion": "1.0.2", "id": "bench", "bundle": str(root.parent)})
        codes = []
        for src in srcs:
            hook_args = ["configure"] if args.cdi else ["--root", str(root), "configure"]
            new = "--library" in (src / "gpunode/hook/main.py").read_text()
            for name, soname in DRIVER.items():
                if soname != name:
                    hook_args += ["--link", f"{name}::{LIBDIR}/{soname}"]
                if new:
                    hook_args += ["--library", f"{soname}::{LIBDIR}/{soname}"]
            hook_args += ["--folder", LIBDIR]
            codes.append(
                f"import sys; sys.path[:0] = [{str(src)!r}]\n"
                "from gpunode.hook.main import main\n"
                f"sys.exit(main({hook_args!r}))\n"
            )
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}

        def timed(argv, stdin=""):
            """(wall, CPU) seconds of one run of argv; None when it fails."""
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            proc = subprocess.run(argv, env=env, input=stdin, capture_output=True, text=True)
            wall = time.perf_counter() - start
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if proc.returncode != 0:
                print(f"bench: {argv[-1][:60]!r} failed: {proc.stderr.strip()}", file=sys.stderr)
                return None
            return wall, r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime

        times: list[list[tuple[float, float]]] = [[] for _ in srcs]
        empty = []
        for _ in range(args.runs):  # interleaved: each tree, then the empty interpreter
            for i, code in enumerate(codes):
                (root / "etc/ld.so.cache").write_bytes(image_cache)
                t = timed([sys.executable, "-IS", "-c", code], state if args.cdi else "")
                if t is None:
                    return 1
                times[i].append(t)
            empty.append(timed([sys.executable, "-IS", "-c", "pass"]))
    how = "CDI: OCI state on stdin" if args.cdi else "--root"
    print(f"hook configure ({how}; {os.uname().machine}; {time.strftime('%Y-%m-%d %H:%M %Z')})")
    print(f"  image cache {len(image_cache)} bytes, {len(DRIVER)} libraries, {args.runs} runs")

    def row(label, ts):
        wall, cpu = [t[0] * 1e3 for t in ts], [t[1] * 1e3 for t in ts]
        print(
            f"  {label:<48} wall min {min(wall):6.1f} median {statistics.median(wall):6.1f} ms"
            f"   CPU median {statistics.median(cpu):6.1f} ms"
        )

    for src, ts in zip(srcs, times, strict=True):
        row(str(src), ts)
    row("python -IS -c pass", empty)
    return 0


if __name__ == "__main__":
    sys.exit(main())
