"""A fake MIG node for the runtime's tests: three GPUs (two with MIG mode on), a driver root
holding the driver's capability access files and mig-minors, a dev root with the GPU and
cap nodes. The caps major (237) and the minors are deliberately not the simulator's or
the real driver's numbering: product code must read and stat them, never compute them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from gpunode.nvidia.facts import GpuFacts, MigFacts, NodeFacts
from gpunode.runtime.discovery import Discovery, DriverFiles

from .fake_node import VERSION

CAPS_MAJOR = 237


def _mig(index, gi, ci, tag, profile="3g.40gb"):
    return MigFacts(index, f"MIG-{tag}{index}00000-0000-5000-8000-000000000000", gi, ci, profile)


# GPU 0 (minor 0): MIG on; device 1 has GI 7 (n is a position, not a GI id).
# GPU 1 (minor 1): MIG off, a full GPU.
# GPU 2 (minor 4: its NVML index is not its minor): MIG on, one GI with two CIs.
GPUS = (
    GpuFacts(
        0,
        0,
        "GPU-aaaa0000-0000-4000-8000-000000000000",
        "00000000:07:00.0",
        "NVIDIA A100-SXM4-80GB",
        "tesla",
        "8.0",
        True,
        (_mig(0, 1, 0, "a"), _mig(1, 7, 0, "a", "1g.10gb")),
    ),
    GpuFacts(
        1,
        1,
        "GPU-bbbb1111-1111-4111-8111-111111111111",
        "00000000:0F:00.0",
        "NVIDIA A100-SXM4-80GB",
        "tesla",
        "8.0",
    ),
    GpuFacts(
        2,
        4,
        "GPU-cccc2222-2222-4222-8222-222222222222",
        "00000000:41:00.0",
        "NVIDIA H100 80GB HBM3",
        "tesla",
        "9.0",
        True,
        (_mig(0, 2, 0, "c", "1c.4g.40gb"), _mig(1, 2, 1, "c", "3c.4g.40gb")),
    ),
)
NODE = NodeFacts(VERSION, "12.2", GPUS)


def _table() -> dict[str, int]:
    caps = [
        c
        for minor in (0, 1, 4)
        for gi in range(1, 9)
        for c in (
            f"gpu{minor}/mig/gi{gi}/access",
            *(f"gpu{minor}/mig/gi{gi}/ci{ci}/access" for ci in range(2)),
        )
    ]
    return {"config": 11, "monitor": 12} | {c: 700 - 7 * i for i, c in enumerate(caps)}


_MINORS = _table()


def cap_minor(cap: str) -> int:
    """The minor this fake driver gives a capability (arbitrary, only read back)."""
    return _MINORS[cap]


def all_caps(gpus=GPUS) -> list[str]:
    out = []
    for g in gpus:
        for m in g.mig:
            gi = f"gpu{g.minor}/mig/gi{m.gi}/access"
            ci = f"gpu{g.minor}/mig/gi{m.gi}/ci{m.ci}/access"
            out += [c for c in (gi, ci) if c not in out]
    return out


def access_text(minor: int, mode: int = 292) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def make_driver_root(root: Path, gpus=GPUS) -> Path:
    """<root>/proc/driver/nvidia/capabilities (config, monitor, every GI and CI of
    ``gpus``), /proc/driver/nvidia-caps/mig-minors (static: every cap of GPUs minor 0..4)."""
    caps = root / "proc/driver/nvidia/capabilities"
    (caps / "mig").mkdir(parents=True, exist_ok=True)
    (caps / "mig/config").write_text(access_text(cap_minor("config"), 256))
    (caps / "mig/monitor").write_text(access_text(cap_minor("monitor"), 292))
    for cap in all_caps(gpus):
        f = caps / cap
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(access_text(cap_minor(cap)))
    lines = ["config 11", "monitor 12"]
    for minor in (0, 1, 4):
        for gi in range(1, 9):
            lines.append(f"gpu{minor}/gi{gi}/access {cap_minor(f'gpu{minor}/mig/gi{gi}/access')}")
            for ci in range(2):
                c = f"gpu{minor}/mig/gi{gi}/ci{ci}/access"
                lines.append(f"gpu{minor}/gi{gi}/ci{ci}/access {cap_minor(c)}")
    (root / "proc/driver/nvidia-caps").mkdir(parents=True, exist_ok=True)
    (root / "proc/driver/nvidia-caps/mig-minors").write_text("\n".join(lines) + "\n")
    return root


def make_dev_root(root: Path, gpus=GPUS) -> Path:
    """<root>/dev with the control nodes, /dev/nvidia<minor> per GPU and a cap node per
    capability of ``gpus`` (mknod: needs root)."""
    dev = root / "dev"
    (dev / "nvidia-caps").mkdir(parents=True, exist_ok=True)
    nodes = [("nvidiactl", 195, 255), ("nvidia-uvm", 510, 0), ("nvidia-uvm-tools", 510, 1)]
    nodes += [(f"nvidia{g.minor}", 195, g.minor) for g in gpus]
    for cap in ["config", "monitor", *all_caps(gpus)]:
        nodes.append((f"nvidia-caps/nvidia-cap{cap_minor(cap)}", CAPS_MAJOR, cap_minor(cap)))
    for name, major, minor in nodes:
        if not (dev / name).exists():
            os.mknod(dev / name, stat.S_IFCHR | 0o444, os.makedev(major, minor))
    return root


def discovery_of(driver_root: Path, node: NodeFacts = NODE, from_cache=False) -> Discovery:
    lib = "/usr/lib/x86_64-linux-gnu"
    files = DriverFiles(
        libraries={"utility": [f"{driver_root}{lib}/libnvidia-ml.so.{VERSION}"]},
        root=str(driver_root),
    )
    return Discovery(node, files, key={}, from_cache=from_cache)
