"""Timing loop run *inside* a simulated node (its own python3): `docker run --rm` per variant.

usage: node_bench.py IMAGE RUNS
Variants are interleaved (round-robin) so drift in machine load hits them equally.
Prints JSON: {variant: [seconds, ...]}.
"""

import json
import subprocess
import sys
import time

image, runs = sys.argv[1], int(sys.argv[2])
VARIANTS = {
    "runc": ["--runtime", "runc"],
    "gpunode, no GPU request": ["--runtime", "gpunode"],
    "gpunode, one GPU": ["--runtime", "gpunode", "-e", "NVIDIA_VISIBLE_DEVICES=0"],
    "gpunode, all GPUs": ["--runtime", "gpunode", "-e", "NVIDIA_VISIBLE_DEVICES=all"],
}
times = {k: [] for k in VARIANTS}
for args in VARIANTS.values():  # warm-up: page cache, image layers, inventory cache
    subprocess.run(
        ["docker", "run", "--rm", "--network", "none", *args, image, "true"],
        check=True,
        capture_output=True,
    )
for _ in range(runs):
    for name, args in VARIANTS.items():
        start = time.perf_counter()
        subprocess.run(
            ["docker", "run", "--rm", "--network", "none", *args, image, "true"],
            check=True,
            capture_output=True,
        )
        times[name].append(time.perf_counter() - start)
print(json.dumps(times))
