"""Build the simulator's /proc mechanism (``procdriver.c``).

On a real server the kernel shows ``/proc/driver/nvidia`` and the driver's majors in
``/proc/devices`` in every procfs, so every container has them. A simulated node keeps the
tree on a tmpfs and its /proc/devices as a file bind-mounted over the kernel's, both in its
own mount namespace; ``procdriver.c`` is installed by ``gpunode sim apply`` as the node's
runc and crun (the real ones diverted to ``*.gpunode-real``) and bind-mounts the node's
tree and /proc/devices over each container's from a first prestart hook, before any other
hook runs.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from .mocknvml import compile_c

SOURCE = Path(__file__).resolve().with_name("procdriver.c")
# Where `gpunode sim up` puts the binary in a node; apply installs copies of it.
IN_NODE = Path("/usr/lib/gpunode-sim/gpunode-sim-procdriver")
# The runtimes it stands in front of (Debian's paths); the real ones get this suffix.
RUNTIMES = (Path("/usr/sbin/runc"), Path("/usr/bin/crun"))


def build(dest: Path, cc: str = "cc") -> Path:
    """Compile procdriver.c into a static executable at *dest* (static: it runs on
    nodes of other Debian releases than the host)."""
    return compile_c([SOURCE], dest, ["-static"], cc)


def digest() -> str:
    return hashlib.sha256(SOURCE.read_bytes()).hexdigest()
