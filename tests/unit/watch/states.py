"""The watch's state documents (<state-dir>/watch-state.json) as `gpunode watch check` reads
them, written by the watch itself (one cycle over fake GPUs and a file of kernel records, as
test_service.py runs it): healthy, or with GPU 1 fallen off the bus (Xid 79)."""

from __future__ import annotations

from pathlib import Path

from gpunode.nvidia.gpu import Gpu
from gpunode.watch import service

BUS = ("00000000:18:00.0", "00000000:D8:00.0")
XID79 = "NVRM: Xid (PCI:0000:d8:00): 79, pid=1, name=python3, GPU has fallen off the bus."
FAILING_LINE = f"GPU 1 ({BUS[1]}): Xid 79 (GPU has fallen off the bus)"
HEALTHY_LINE = "OK: 2 GPU(s) healthy"


def gpus() -> tuple[list[Gpu], bool, None]:
    return [Gpu(i, i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", bus, serial=f"132{i}",
                persistence_mode=True) for i, bus in enumerate(BUS)], True, None  # fmt: skip


def write_state(root: Path, *, failing: bool) -> Path:
    """A state directory under ``root`` holding one cycle's state; returns it."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "tf").mkdir(exist_ok=True)
    (root / "boot_id").write_text("boot-1\n")
    records = "6,1,10,-;Linux version 6.1\n" + (f"3,2,20,-;{XID79}\n" if failing else "")
    (root / "kmsg").write_text(records)
    w = service.Watch("n1", interval=30, textfile=str(root / "tf/w.prom"),
                      state_dir=str(root / "st"), kmsg=str(root / "kmsg"),
                      boot_id_file=str(root / "boot_id"), gpus=gpus,
                      fabric=lambda: (None, None), nvml_timeout=2)  # fmt: skip
    try:
        w.once()
    finally:
        w.close()
    return root / "st"
