"""Node images built without any registry: debootstrap a Debian rootfs, `docker import` it.

Each image is tagged with a hash of its recipe (release, packages, mirror, post-install
script). A build whose tag already exists is a no-op; a build whose rootfs tarball is in the
cache (``$GPUNODE_CACHE``, default ``~/.cache/gpunode``) only re-imports it. So the first
build costs a couple of minutes per release and every later one seconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ..util.command import OperationError
from .docker import docker, image_exists

RECIPE_VERSION = "3"
MIRROR = os.environ.get("GPUNODE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
RELEASES = ("bookworm", "trixie")

# What a node needs: systemd as PID 1, python3 for Ansible, container engines to test the
# runtime with (podman needs a network stack named explicitly: debootstrap does not resolve
# virtual packages).
NODE_PACKAGES = [
    "systemd",
    "systemd-sysv",
    "dbus",
    "python3",
    "python3-yaml",
    "python3-venv",
    "python3-apt",
    "docker.io",
    "podman",
    "containernetworking-plugins",
    "iproute2",
    "procps",
    "kmod",
    "ca-certificates",
    "sudo",
    "iptables",
    "pciutils",
]
# Per release: trixie split the Docker CLI out of docker.io into docker-cli (only a
# Recommends, which debootstrap does not install).
NODE_PACKAGES_EXTRA = {"bookworm": [], "trixie": ["docker-cli"]}
# What runs *inside* a node's engine in tests: python3 to drive NVML through pynvml.
WORKLOAD_PACKAGES = ["python3", "ca-certificates"]

NODE_POSTINSTALL = r"""
set -eu
release="$1"
rm -f /etc/apt/sources.list
cat > /etc/apt/sources.list.d/debian.sources <<EOF
Types: deb
URIs: MIRROR
Suites: ${release} ${release}-updates
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: ${release}-security
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
# An empty machine-id makes systemd generate one at first boot, per node.
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id
# Docker >= 26 fails to start bridged containers in a node whose interface has no IPv6.
mkdir -p /etc/systemd/system/docker.service.d
printf '[Service]\nEnvironment=DOCKER_ALLOW_IPV6_ON_IPV4_INTERFACE=1\n' \
  > /etc/systemd/system/docker.service.d/gpunode-sim.conf
# Units that make no sense in a container (no consoles, no udev, no first-boot wizard).
for unit in getty@tty1.service console-getty.service systemd-firstboot.service \
    systemd-udevd.service systemd-udevd-kernel.socket systemd-udevd-control.socket \
    systemd-udev-trigger.service systemd-networkd-wait-online.service; do
  ln -sf /dev/null "/etc/systemd/system/${unit}"
done
echo gpunode-sim > /etc/hostname
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc/* /usr/share/man/*
"""

WORKLOAD_POSTINSTALL = r"""
set -eu
apt-get clean
rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/*
"""


class ImageError(OperationError, RuntimeError):
    pass


@dataclass(frozen=True)
class Recipe:
    kind: str  # "node" or "workload"
    release: str
    packages: tuple[str, ...]
    postinstall: str

    @property
    def digest(self) -> str:
        h = hashlib.sha256()
        for part in (
            RECIPE_VERSION,
            self.kind,
            self.release,
            MIRROR,
            *self.packages,
            self.postinstall,
        ):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()[:12]

    @property
    def tag(self) -> str:
        return f"gpunode-sim/{self.kind}:{self.release}-{self.digest}"


def recipe(kind: str, release: str) -> Recipe:
    if release not in RELEASES:
        raise ImageError(f"unknown Debian release {release!r}; accepted: {', '.join(RELEASES)}")
    if kind == "node":
        packages = tuple(NODE_PACKAGES + NODE_PACKAGES_EXTRA[release])
        return Recipe(kind, release, packages, NODE_POSTINSTALL.replace("MIRROR", MIRROR))
    if kind == "workload":
        return Recipe(kind, release, tuple(WORKLOAD_PACKAGES), WORKLOAD_POSTINSTALL)
    raise ImageError(f"unknown image kind {kind!r}; accepted: node, workload")


def cache_dir() -> Path:
    return Path(os.environ.get("GPUNODE_CACHE", Path.home() / ".cache" / "gpunode"))


def _import(tarball: Path, r: Recipe) -> None:
    changes = ["--change", "ENV container=docker"]
    if r.kind == "node":
        changes += ["--change", 'CMD ["/sbin/init"]']  # stop signal: set by `docker run`
    else:
        changes += ["--change", 'CMD ["/bin/sh"]']
    docker(["import", *changes, str(tarball), r.tag])


def build(kind: str, release: str, log=print) -> str:
    """Ensure the image exists; return its tag."""
    r = recipe(kind, release)
    if image_exists(r.tag):
        log(f"{r.tag}: present")
        return r.tag
    cache = cache_dir() / "images"
    cache.mkdir(parents=True, exist_ok=True)
    tarball = cache / f"{kind}-{release}-{r.digest}.tar"
    if not tarball.exists():
        _debootstrap(r, tarball, log)
    start = time.monotonic()
    _import(tarball, r)
    log(f"{r.tag}: imported from {tarball} in {time.monotonic() - start:.1f}s")
    return r.tag


def _debootstrap(r: Recipe, tarball: Path, log) -> None:
    if os.geteuid() != 0:
        raise ImageError("building node images needs root (debootstrap); run as root")
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed; run: apt-get install debootstrap")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(dir=tarball.parent, prefix=f".{r.kind}-{r.release}-") as tmp:
        root = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap",
            "--variant=minbase",
            "--components=main,contrib,non-free,non-free-firmware",
            f"--include={','.join(r.packages)}",
            r.release,
            str(root),
            MIRROR,
        ]
        log(f"{r.tag}: debootstrap {r.release} ({len(r.packages)} packages) ...")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise ImageError(f"debootstrap {r.release} failed: {' | '.join(tail)}")
        script = root / "tmp" / "gpunode-postinstall.sh"
        script.write_text(r.postinstall)
        proc = subprocess.run(
            ["chroot", str(root), "/bin/sh", "/tmp/gpunode-postinstall.sh", r.release],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            raise ImageError(f"post-install of {r.tag} failed: {proc.stderr.strip()[-300:]}")
        script.unlink()
        partial = tarball.with_suffix(".tar.partial")
        subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(partial), "."],
            check=True,
        )
        os.replace(partial, tarball)
    log(f"{r.tag}: rootfs built in {time.monotonic() - start:.0f}s -> {tarball}")
