"""A simulated Debian 12 node uses the simulated NVIDIA CUDA repository exactly as an
operator uses NVIDIA's: the key from the repository's root into a keyring file, a sources
line with signed-by, apt-get update; apt then sees NVIDIA's branches, versions and the
fabric manager's naming (per branch up to 575, unversioned from 580)."""

from __future__ import annotations

import os
import shlex
import shutil

import pytest

from gpunode.sim import cluster, fabric, nvidiarepo

from .conftest import Node, start_nodes

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def served(tmp_path_factory, image_tags):
    tmp = tmp_path_factory.mktemp("nvrepo")
    sim = tmp / "sim"  # the simulator's FM stand-in, unit and config (rendered per package)
    sim.mkdir()
    shutil.copytree(fabric.STANDIN_DIR, sim / "fabricmanager")
    repo = nvidiarepo.build(tmp / "cache", sim_dir=sim, log=lambda *_: None)
    # world-readable for the server (pytest's tmp directories are 0700)
    for path in (tmp, tmp / "cache"):
        path.chmod(0o755)
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    name = f"{prefix}-nvidia-repo"
    address = nvidiarepo.serve(repo, image_tags["node-bookworm"], log=lambda *_: None, name=name)
    yield nvidiarepo.endpoint(repo, address, "debian12")
    nvidiarepo.stop(name)


@pytest.fixture(scope="module")
def bookworm(artifacts, image_tags):
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    spec = cluster.NodeSpec(f"{prefix}-nvrepo-bookworm", "bookworm", "h100x8")
    start_nodes([spec], artifacts, image_tags)
    yield Node(spec.name, spec.release, image_tags["workload-bookworm"])
    if not os.environ.get("GPUNODE_KEEP_NODES"):
        cluster.down_names([spec.name], log=lambda *_: None)


def versions(madison: str) -> list[str]:
    return [line.split("|")[1].strip() for line in madison.splitlines() if "|" in line]


def test_node_adds_the_repository_as_an_operator_would(served, bookworm):
    keyring = "/etc/apt/keyrings/nvidia-cuda.asc"
    fetch = f"import urllib.request as u; u.urlretrieve({served.key_url!r}, {keyring!r})"
    bookworm.sh(
        f"install -d -m 0755 /etc/apt/keyrings && python3 -c {shlex.quote(fetch)} && "
        f"echo {shlex.quote(served.line)} > /etc/apt/sources.list.d/nvidia-cuda.list"
    )
    update = bookworm.sh("apt-get update 2>&1", timeout=600)
    base = served.url.rstrip("/")  # as apt prints a flat repository
    ours = [ln for ln in update.stdout.splitlines() if base in ln]
    assert ours and not any(ln.startswith(("Err", "W:", "E:")) for ln in ours), update.stdout
    assert "NO_PUBKEY" not in update.stdout and "not signed" not in update.stdout

    madison = bookworm.sh("apt-cache madison cuda-drivers-570").stdout
    assert sorted(versions(madison)) == ["570.124.06-1", "570.172.08-1"]
    assert all(base in ln for ln in madison.splitlines())
    assert sorted(versions(bookworm.sh("apt-cache madison cuda-drivers-580").stdout)) == [
        "580.105.08-1",
        "580.65.06-1",
    ]

    # up to 575 the fabric manager is named per branch and installs at an exact version
    dry = bookworm.sh("apt-get install --dry-run -y nvidia-fabricmanager-570=570.124.06-1")
    assert "Inst nvidia-fabricmanager-570 (570.124.06-1 " in dry.stdout
    # from 580 nvidia-fabricmanager-580 is only virtual: no version of it can be asked for
    virtual = bookworm.sh(
        "apt-get install --dry-run -y nvidia-fabricmanager-580=580.65.06-1 2>&1", check=False
    )
    assert virtual.returncode != 0
    dry = bookworm.sh("apt-get install --dry-run -y nvidia-fabricmanager=580.65.06-1")
    assert "Inst nvidia-fabricmanager (580.65.06-1 " in dry.stdout

    # NVIDIA's nvidia-smi of a version Debian ships too is the real binary (taken from
    # Debian's package): on this H100 node (driver 550.163.01) it lists the profile's GPUs
    bookworm.sh("DEBIAN_FRONTEND=noninteractive apt-get install -y nvidia-smi=550.163.01-1 "
                "libnvidia-ml1=550.163.01-1", timeout=600)  # fmt: skip
    listed = bookworm.sh("nvidia-smi -L").stdout.splitlines()
    assert len(listed) == 8 and all(" NVIDIA H100 80GB HBM3 (UUID: GPU-" in ln for ln in listed)
    bookworm.sh("apt-get purge -y nvidia-smi libnvidia-ml1 >/dev/null")

    # signed-by another key (Debian's): apt refuses the repository
    wrong = served.line.replace(keyring, "/usr/share/keyrings/debian-archive-keyring.gpg")
    bookworm.sh(f"echo {shlex.quote(wrong)} > /etc/apt/sources.list.d/nvidia-cuda.list")
    refused = bookworm.sh("apt-get update 2>&1", check=False, timeout=600)
    assert "NO_PUBKEY" in refused.stdout and base in refused.stdout, refused.stdout
