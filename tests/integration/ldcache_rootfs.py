"""Root filesystems of real images for the ld.so.cache tests: only what the loader tests need
(etc, the loader and libc, ldconfig, sh), kept as small tarballs under
``$GPUNODE_CACHE/ldcache`` (default ``~/.cache/gpunode/ldcache``) so that later runs, and CI
with that cache, extract them in a second.

* bookworm (glibc 2.36) and trixie (glibc 2.41): from the simulator's own images
  (gpunode.sim.images: the workload image, the trixie node image), ``docker export``-ed.
* bullseye (glibc 2.31, whose ldconfig writes the compat format): ``debootstrap
  --variant=minbase`` from the Debian mirror (gpunode.sim.images.MIRROR). The tarball is
  keyed on that recipe (BULLSEYE_RECIPE), so a changed recipe rebuilds it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

from gpunode.sim import images

BULLSEYE_RECIPE = ("1", "bullseye", "minbase", images.MIRROR)
KEEP_PREFIXES = (
    "etc/",
    "lib/x86_64-linux-gnu/",
    "usr/lib/x86_64-linux-gnu/",
    "lib64/",
    "usr/lib64/",
)
KEEP_EXACT = {
    "etc",
    "bin",
    "sbin",
    "lib",
    "lib64",
    "usr",
    "usr/bin",
    "usr/sbin",
    "usr/lib",
    "usr/lib64",
    "lib/x86_64-linux-gnu",
    "usr/lib/x86_64-linux-gnu",
    "sbin/ldconfig",
    "sbin/ldconfig.real",
    "usr/sbin/ldconfig",
    "usr/sbin/ldconfig.real",
    "bin/sh",
    "bin/dash",
    "bin/true",
    "usr/bin/sh",
    "usr/bin/dash",
    "usr/bin/true",
}
# Never needed and large in the node images.
SKIP_PREFIXES = (
    "usr/lib/x86_64-linux-gnu/dri/",
    "usr/lib/x86_64-linux-gnu/perl",
    "usr/lib/x86_64-linux-gnu/gconv/",
)


def cache_dir() -> Path:
    d = images.cache_dir() / "ldcache"
    d.mkdir(parents=True, exist_ok=True)
    return d


def _wanted(name: str) -> bool:
    name = name.removeprefix("./").rstrip("/")
    if name in KEEP_EXACT:
        return True
    return name.startswith(KEEP_PREFIXES) and not name.startswith(SKIP_PREFIXES)


def _subset(src: tarfile.TarFile, out: Path) -> None:
    partial = out.with_suffix(".partial")
    with tarfile.open(partial, "w") as dst:
        for member in src:
            if not _wanted(member.name):
                continue
            member.name = member.name.removeprefix("./")
            fh = src.extractfile(member) if member.isfile() else None
            dst.addfile(member, fh)
    os.replace(partial, out)


def from_image(tag: str) -> Path:
    """The subset tarball of a Docker image (exported once)."""
    out = cache_dir() / f"{tag.replace('/', '_').replace(':', '_')}.tar"
    if out.exists():
        return out
    cid = subprocess.run(
        ["docker", "create", tag, "/bin/true"], capture_output=True, text=True, check=True
    ).stdout.strip()
    try:
        proc = subprocess.Popen(["docker", "export", cid], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        with tarfile.open(fileobj=proc.stdout, mode="r|") as src:
            _subset(src, out)
        if proc.wait() != 0:
            out.unlink()
            raise RuntimeError(f"docker export of {tag} failed")
    finally:
        subprocess.run(["docker", "rm", cid], capture_output=True, check=False)
    return out


def bullseye() -> Path:
    """The subset tarball of a bullseye minbase debootstrap (built once; minutes)."""
    digest = hashlib.sha256("\0".join(BULLSEYE_RECIPE).encode()).hexdigest()[:12]
    out = cache_dir() / f"bullseye-minbase-{digest}.tar"
    if out.exists():
        return out
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed (scripts/setup installs it)")
    with tempfile.TemporaryDirectory(dir=cache_dir(), prefix=".bullseye-") as tmp:
        root = Path(tmp) / "rootfs"
        proc = subprocess.run(
            ["debootstrap", "--variant=minbase", "bullseye", str(root), images.MIRROR],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise RuntimeError(f"debootstrap bullseye from {images.MIRROR} failed: {tail}")
        full = Path(tmp) / "full.tar"
        subprocess.run(
            ["tar", "--numeric-owner", "-C", str(root), "-cf", str(full), "."], check=True
        )
        with tarfile.open(full) as src:
            _subset(src, out)
    return out


def extract(tarball: Path, dest: Path) -> Path:
    dest.mkdir(parents=True)
    subprocess.run(["tar", "--numeric-owner", "-C", str(dest), "-xf", str(tarball)], check=True)
    return dest
