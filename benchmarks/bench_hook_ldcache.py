#!/usr/bin/env python3
"""Benchmark: the hook's `configure` (SONAME links + ld cache) as the runtime starts it.

Times whole processes, ``python3 -IS`` as the installed launcher runs the hook, on a
prepared container root: a real image root (``--rootfs``: a copy is made; default: the
simulator's Debian 12 workload image, exported) with five driver-like libraries in its
multiarch directory, arguments as gpunode's runtime passes them (``--link`` per SONAME
link, ``--library`` per library where the tree has that option, ``--folder``). Prints
min and median of RUNS runs (default 50). ``--src`` times another checkout's hook (e.g.
the one that ran ldconfig confined, for a before/after figure); it must run as root.

usage: .venv/bin/python benchmarks/bench_hook_ldcache.py [--runs N] [--src DIR] [--rootfs DIR]
"""

from __future__ import annotations

import argparse
import os
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
    ap.add_argument("--src", default=str(ROOT / "src"), help="the gpunode source tree to time")
    ap.add_argument("--rootfs", help="an image root to copy (default: Debian 12 workload)")
    args = ap.parse_args()
    if args.runs < 1:
        print(f"bench: error: --runs {args.runs} must be >= 1", file=sys.stderr)
        return 2
    src = Path(args.src).resolve()
    if not (src / "gpunode/hook/main.py").is_file():
        print(f"bench: error: --src {src} has no gpunode/hook/main.py", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bench-hook-") as tmp:
        root = Path(tmp) / "rootfs"
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
        hook_args = ["--root", str(root), "configure"]
        new = "--library" in (src / "gpunode/hook/main.py").read_text()
        for name, soname in DRIVER.items():
            if soname != name:
                hook_args += ["--link", f"{name}::{LIBDIR}/{soname}"]
            if new:
                hook_args += ["--library", f"{soname}::{LIBDIR}/{soname}"]
        hook_args += ["--folder", LIBDIR]
        code = (
            f"import sys; sys.path[:0] = [{str(src)!r}]\n"
            "from gpunode.hook.main import main\n"
            f"sys.exit(main({hook_args!r}))\n"
        )
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
        times = []
        for _ in range(args.runs):
            (root / "etc/ld.so.cache").write_bytes(image_cache)
            start = time.perf_counter()
            proc = subprocess.run(
                [sys.executable, "-IS", "-c", code], env=env, capture_output=True, text=True
            )
            times.append(time.perf_counter() - start)
            if proc.returncode != 0:
                print(f"bench: the hook failed: {proc.stderr.strip()}", file=sys.stderr)
                return 1
        empty = []
        for _ in range(args.runs):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-IS", "-c", "pass"], env=env, check=True)
            empty.append(time.perf_counter() - start)
    print(f"hook configure ({'--library' if new else 'ldconfig'}; {src}; {os.uname().machine})")
    print(f"  image cache {len(image_cache)} bytes, {len(DRIVER)} libraries")
    print(
        f"  hook:            min {min(times) * 1e3:6.1f} ms  median "
        f"{statistics.median(times) * 1e3:6.1f} ms  ({args.runs} runs)"
    )
    print(
        f"  python -IS pass: min {min(empty) * 1e3:6.1f} ms  median "
        f"{statistics.median(empty) * 1e3:6.1f} ms"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
