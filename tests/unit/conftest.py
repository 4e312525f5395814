"""Fixtures shared by the unit tests of several packages."""

import os
import shutil
import subprocess

import pytest

from gpunode.nvidia.facts import GpuFacts, NodeFacts
from gpunode.runtime import discovery
from gpunode.runtime.discovery import Discovery, DriverFiles
from gpunode.util import safepath


@pytest.fixture
def real_information() -> str:
    """A real driver's /proc/driver/nvidia/gpus/<bus>/information (A10G, driver 550)."""
    return (
        "Model: \t\t NVIDIA A10G\nIRQ:   \t\t 42\nGPU UUID: \t GPU-82523fd8-3897-f599-d088-ccd04ae45ec1\n"
        "Video BIOS: \t 94.04.42.00.01\nBus Type: \t PCIe\nDMA Size: \t 47 bits\n"
        "DMA Mask: \t 0x7fffffffffff\nBus Location: \t 0000:00:1e.0\nDevice Minor: \t 3\n"
        "GPU Excluded:\t No\n"
    )


@pytest.fixture
def shared_lib(tmp_path):
    """Build a tiny shared library: shared_lib(name, *ldflags) -> its path (gcc needed)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc not available")

    def build(name: str, *ldflags: str):
        src = tmp_path / "lib.c"
        src.write_text("int gpunode_test(void) { return 1; }\n")
        out = tmp_path / name
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src), *ldflags], check=True)
        return out

    return build


@pytest.fixture
def host(tmp_path):
    """A host directory the hostile images aim at, with a victim file in it."""
    d = tmp_path / "hostdir"
    d.mkdir()
    (d / "victim").write_text("host data\n")
    return d


@pytest.fixture
def rootfs(tmp_path):
    r = tmp_path / "rootfs"
    (r / "etc").mkdir(parents=True)
    (r / "usr/lib").mkdir(parents=True)
    return r


@pytest.fixture(params=["openat2", "walk"])
def resolver(request, monkeypatch):
    """Both ways gpunode.util.safepath resolves: openat2(2), and its own walk."""
    if request.param == "walk":
        monkeypatch.setattr(safepath, "_HAVE_OPENAT2", False)
    elif not safepath.have_openat2():
        pytest.skip("openat2 not available on this kernel")
    return request.param


@pytest.fixture(autouse=True)
def _parsed_config_cache(tmp_path_factory, monkeypatch):
    """runtime.toml's parsed form (gpunode.runtime.config.PARSED_CACHE), the sh first
    stage's file (FIRST_STAGE) and the prepared edits (gpunode.runtime.prepared.PREPARED)
    go to a temporary place in every test, never to the machine's /run/gpunode;
    subprocesses that build their own environment take them from os.environ
    ["GPUNODE_RUNTIME_CONFIG_CACHE"], ["GPUNODE_RUNTIME_FIRST_STAGE"] and
    ["GPUNODE_PREPARED_CACHE"]; the sh first stage looks for no resident service."""
    run = tmp_path_factory.mktemp("run")
    monkeypatch.setenv("GPUNODE_RUNTIME_CONFIG_CACHE", str(run / "runtime-toml.json"))
    monkeypatch.setenv("GPUNODE_RUNTIME_FIRST_STAGE", str(run / "first-stage"))
    monkeypatch.setenv("GPUNODE_PREPARED_CACHE", str(run / "prepared.json"))
    # no resident service (gpunode.launch.resident) unless a test starts its own
    monkeypatch.setenv("GPUNODE_RESIDENT_DIR", "")


GPU = GpuFacts(
    0, 0, "GPU-00000000-0000-4000-8000-000000000000", "00000000:10:00.0", "Tesla T4", "tesla", "7.5"
)


@pytest.fixture
def fake_node(tmp_path, monkeypatch):
    """Device nodes under tmp_path, runtime.toml there, and discovery answering one T4
    (the CLI's and the engines' tests)."""
    import stat

    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(dev / "nvidiactl", stat.S_IFCHR | 0o666, os.makedev(195, 255))
    os.mknod(dev / "nvidia0", stat.S_IFCHR | 0o666, os.makedev(195, 0))
    cfg_file = tmp_path / "runtime.toml"
    cfg_file.write_text(f'dev-root = "{tmp_path}"\ncache-file = "{tmp_path}/cache.json"\n')
    disc = Discovery(
        NodeFacts("535.261.03", "12.2", (GPU,)),
        DriverFiles(libraries={"utility": ["/usr/lib/libnvidia-ml.so.535.261.03"]}),
        key={},
    )
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    return cfg_file
