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


@dataclass(frozen=True)
class Release:
    """What the simulator knows of a Debian release's node: the one home of these facts
    (images, node settings, the tests' per-release expectations)."""

    name: str  # the codename (its number: gpunode.provision.sources.SUPPORTED)
    # the containerd series its archive carries; checked after debootstrap, so an archive
    # that moved on (forky is testing) fails the build in one line instead of testing
    # something else under the old name
    containerd: str
    # packages only this release needs (see NODE_PACKAGES)
    extra_packages: tuple[str, ...] = ()
    # debootstrap's script for the suite: Debian 12's debootstrap (1.0.128) has no "forky"
    # script; newer ones make it a link to "sid", which is what is named here
    debootstrap_script: str = ""
    # systemd >= 258 refuses a cgroup v1 hierarchy (forky: systemd 262). Such a node gets
    # a cgroup namespace of its own with the unified (v2) hierarchy mounted at
    # /sys/fs/cgroup before systemd starts (cluster.node_settings); on a host whose
    # controllers are all on v1 (hybrid) that hierarchy has no controllers: no memory or
    # CPU limits in the node (cluster.SIM_RUNC drops them from containers' specs), device
    # access through eBPF as on any cgroup v2 system.
    cgroup2: bool = False
    # Docker >= 28 sets disable_ipv6 on each container interface it creates and fails the
    # container when it cannot (26 and 27 obeyed DOCKER_ALLOW_IPV6_ON_IPV4_INTERFACE, which
    # 28 removed); /proc/sys is read-only in a node container, so /proc/sys/net, which holds
    # the node's own network namespace's settings only, is made writable at boot
    net_sysctl_rw: bool = False
    # shell appended to the node's post-install script
    postinstall: str = ""

    @property
    def containerd_version(self) -> tuple[int, int]:
        major, minor = self.containerd.split(".")
        return int(major), int(minor)


# Per release: trixie split the Docker CLI out of docker.io into docker-cli (only a
# Recommends, which debootstrap does not install); forky keeps that split.
RELEASE = {
    r.name: r
    for r in (
        Release("bookworm", containerd="1.6"),
        Release("trixie", containerd="1.7", extra_packages=("docker-cli",)),
        Release(
            "forky",
            containerd="2.1",
            # netavark (podman's networks) runs nft, only recommended
            extra_packages=("docker-cli", "nftables"),
            debootstrap_script="sid",
            cgroup2=True,
            net_sysctl_rw=True,
            # testing's Release files are valid for a week (Valid-Until); a mirror that lags
            # behind (the one these machines reach served a forky weeks old) makes every apt
            # run fail. Signatures are still checked; the archive's versions are checked at
            # build time (check_versions) and by the tests.
            postinstall=(
                "echo 'Acquire::Check-Valid-Until \"false\";' "
                "> /etc/apt/apt.conf.d/99gpunode-sim-valid-until\n"
            ),
        ),
    )
}
RELEASES = tuple(RELEASE)

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
        packages = (*NODE_PACKAGES, *RELEASE[release].extra_packages)
        script = NODE_POSTINSTALL.replace("MIRROR", MIRROR) + RELEASE[release].postinstall
        return Recipe(kind, release, packages, script)
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


def check_versions(release: Release, root: Path) -> None:
    """The node's containerd must be the release's series (Release.containerd): one line
    naming the release, the step and both versions otherwise."""
    proc = subprocess.run(
        ["chroot", str(root), "dpkg-query", "-W", "-f=${Version}", "containerd"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    have = proc.stdout.strip()
    if proc.returncode != 0 or not have:
        why = (proc.stderr.strip().splitlines() or ["no version"])[-1]
        raise ImageError(f"{release.name} node image: checking containerd's version: {why}")
    problem = containerd_problem(release, have)
    if problem:
        raise ImageError(problem)


def containerd_problem(release: Release, have: str) -> str:
    """One line when the Debian version ``have`` of containerd is not the release's series."""
    if have.split(":")[-1].startswith(f"{release.containerd}."):
        return ""
    return (
        f"{release.name} node image: the archive's containerd is {have}, the simulator "
        f"expects {release.containerd}.x (gpunode.sim.images.RELEASE); update that entry "
        "and the tests that rely on it"
    )


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
        if RELEASE[r.release].debootstrap_script:
            cmd.append(RELEASE[r.release].debootstrap_script)
        log(f"{r.tag}: debootstrap {r.release} ({len(r.packages)} packages) ...")
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
            raise ImageError(f"debootstrap {r.release} failed: {' | '.join(tail)}")
        if r.kind == "node":
            check_versions(RELEASE[r.release], root)
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
