"""node.gpu_count and the per-GPU health checks, from gpunode's inventory (the one NVML walk,
gpunode.cli.inventory over gpunode.nvidia.nvml) — validate reads no NVML itself.

GPU index: the GPUs are listed in PCI bus order, the order NVML and CUDA enumerate them by
default, counting every GPU the node has: those NVML shows (lost ones included) and those
the kernel module lists whose ``/dev/nvidia<minor>`` is missing (NVML cannot show them). On
a healthy node the index is NVML's; with a GPU missing its device node, the GPUs after it
keep the index they have when the node is whole (NVML would number them one lower), so a
report names the same GPU whatever else is broken. The UUID is always given when known.

GPU count: every GPU the node has (as above) against the expected count; a lost GPU or a
missing device node fails its own checks, not the count, so each fault shows once.
"""

from __future__ import annotations

import time
from typing import Any

from ..cli import inventory
from .expect import Expectations
from .model import FAIL, PASS, SKIP, WARN, Check, Gpu

TITLES = {
    "node.driver": "NVIDIA driver present",
    "node.nvml": "NVML usable",
    "node.gpu_count": "GPU count",
    "gpu.lost": "GPU reachable (not fallen off the bus)",
    "gpu.device_node": "Device node present",
    "gpu.ecc_uncorrectable": "Uncorrectable ECC errors",
    "gpu.retired_pages_pending": "Retired pages pending",
    "gpu.row_remap_failure": "Row remapping",
    "gpu.persistence": "Persistence mode",
}
GPU_CHECKS = [k for k in TITLES if k.startswith("gpu.")]


class NodeGpu:
    """One GPU of the node: its inventory entry (None when NVML cannot show it) or the
    kernel's record of a GPU whose device node is missing."""

    def __init__(self, info: inventory.GpuInfo | None, missing: dict[str, Any] | None = None):
        self.info, self.missing = info, missing

    @property
    def uuid(self) -> str | None:
        return self.info.uuid if self.info else self.missing.get("uuid")

    @property
    def pci_bus_id(self) -> str | None:
        return self.info.pci_bus_id if self.info else self.missing.get("pci_bus_id")

    @property
    def minor(self) -> int | None:
        return self.info.minor if self.info else self.missing.get("minor")


def node_gpus(inv: inventory.Inventory) -> list[NodeGpu]:
    out = [NodeGpu(g) for g in inv.gpus]
    out += [NodeGpu(None, p) for p in inv.problems if p.get("issue") == "device_node_missing"]
    if all(g.pci_bus_id for g in out):
        out.sort(key=lambda g: g.pci_bus_id.upper())
    return out


def listed(gpus: list[NodeGpu]) -> list[Gpu]:
    return [
        Gpu(
            index=i,
            uuid=g.uuid,
            model=(g.info.name if g.info else None),
            pci_bus_id=g.pci_bus_id,
            memory_mib=(g.info.memory_total_mib if g.info else None),
            minor=g.minor,
        )
        for i, g in enumerate(gpus)
    ]


def _verdicts(g: NodeGpu) -> list[tuple[str, str, str]]:
    """(check id, status, detail) for each per-GPU check of one GPU."""
    if g.info is None:
        why = f"NVML cannot show it: /dev/nvidia{g.minor} is missing"
        out = [("gpu.lost", SKIP, why)]
        out.append(("gpu.device_node", FAIL, g.missing.get("detail", why)))
        return out + [(c, SKIP, why) for c in GPU_CHECKS[2:]]
    info = g.info
    node = ("gpu.device_node", PASS, f"/dev/nvidia{info.minor} is a 195:{info.minor} device")
    if "fallen_off_bus" in info.health:
        why = "NVML: GPU is lost (fallen off the bus); cannot be read"
        return [("gpu.lost", FAIL, "NVML reports GPU_IS_LOST: the GPU fell off the bus; drain "
                 "the node and reset or reseat the GPU"), ("gpu.device_node", SKIP, why)] + [
            (c, SKIP, why) for c in GPU_CHECKS[2:]
        ]  # fmt: skip
    out = [("gpu.lost", PASS, "NVML reads the GPU"), node]
    if not info.ecc_mode:
        why = "ECC is disabled" if info.ecc_mode is False else "ECC is not supported"
        out.append(("gpu.ecc_uncorrectable", SKIP, why))
    elif "uncorrected_volatile" not in info.ecc_errors:
        out.append(("gpu.ecc_uncorrectable", SKIP, "NVML gives no uncorrected ECC counter"))
    else:
        n = info.ecc_errors["uncorrected_volatile"]
        agg = info.ecc_errors.get("uncorrected_aggregate")
        text = f"{n} uncorrected (volatile)" + (f", {agg} aggregate" if agg is not None else "")
        out.append(("gpu.ecc_uncorrectable", FAIL if n else PASS, text))
    rp = info.retired_pages
    if not rp:
        out.append(("gpu.retired_pages_pending", SKIP, "page retirement is not supported"))
    else:
        text = f"{rp['single_bit']} single-bit, {rp['double_bit']} double-bit retired"
        if rp["pending"]:
            out.append(("gpu.retired_pages_pending", FAIL,
                        f"page retirement pending: reset the GPU ({text})"))  # fmt: skip
        else:
            out.append(("gpu.retired_pages_pending", PASS, f"none pending ({text})"))
    rr = info.remapped_rows
    if not rr:
        out.append(("gpu.row_remap_failure", SKIP, "row remapping is not supported (pre-Ampere)"))
    else:
        text = f"{rr['correctable']} correctable, {rr['uncorrectable']} uncorrectable remapped"
        if rr["failure"]:
            out.append(("gpu.row_remap_failure", FAIL, f"row remapping failed ({text})"))
        elif rr["pending"]:
            out.append(("gpu.row_remap_failure", WARN, f"remap pending: reset the GPU ({text})"))
        else:
            out.append(("gpu.row_remap_failure", PASS, f"no failure ({text})"))
    if info.persistence_mode is None:
        out.append(("gpu.persistence", SKIP, "persistence mode is not supported"))
    elif info.persistence_mode:
        out.append(("gpu.persistence", PASS, "enabled"))
    else:
        out.append(("gpu.persistence", WARN, "disabled: enable nvidia-persistenced"))
    return out


def evaluate(
    inv: inventory.Inventory | None, no_driver: str | None, expect: Expectations, seconds: float
) -> tuple[list[Gpu], list[Check]]:
    """The checks for a collected inventory (or the NoDriver reason); ``seconds``: how long
    the inventory took, counted to node.gpu_count (the walk every GPU check reads)."""
    checks: list[Check] = []

    def add(cid: str, status: str, detail: str, gpu: Gpu | None = None, t: float = 0.0) -> None:
        checks.append(
            Check(cid, TITLES[cid], status, detail, gpu=gpu.index if gpu else None,
                  uuid=gpu.uuid if gpu else None, duration_s=t)
        )  # fmt: skip

    if inv is None:
        add("node.driver", FAIL if expect.gpus != 0 else PASS, no_driver or "no NVIDIA driver")
        if expect.gpus is None:
            add("node.gpu_count", SKIP, "no GPUs found; no expected count given "
                "(--expect-gpus, gpunode_expected_gpus)", t=seconds)  # fmt: skip
        else:
            st = PASS if expect.gpus == 0 else FAIL
            add("node.gpu_count", st, f"0 GPU(s), expected {expect.gpus}", t=seconds)
        return [], checks
    add("node.driver", PASS, f"driver {inv.driver_version} (source: {inv.source})")
    nvml_problem = next((p for p in inv.problems if p.get("issue") == "nvml_unavailable"), None)
    if nvml_problem:
        add("node.nvml", FAIL, nvml_problem["detail"])
    else:
        add("node.nvml", PASS, f"NVML {inv.nvml_version}")
    gpus = node_gpus(inv)
    listing = listed(gpus)
    found = len(gpus)
    if expect.gpus is None:
        add("node.gpu_count", SKIP, f"{found} GPU(s); no expected count given "
            "(--expect-gpus, gpunode_expected_gpus)", t=seconds)  # fmt: skip
    else:
        st = PASS if found == expect.gpus else FAIL
        add("node.gpu_count", st, f"{found} GPU(s), expected {expect.gpus}", t=seconds)
    for g, entry in zip(gpus, listing, strict=True):
        start = time.monotonic()
        verdicts = _verdicts(g)
        if nvml_problem and g.info is not None:
            verdicts = [(c, SKIP, "NVML unavailable") if c != "gpu.device_node" else (c, s, d)
                        for c, s, d in verdicts]  # fmt: skip
        t = (time.monotonic() - start) / len(verdicts)
        for cid, status, detail in verdicts:
            add(cid, status, detail, entry, t)
    return listing, checks


def collect() -> tuple[inventory.Inventory | None, str | None, float]:
    start = time.monotonic()
    try:
        inv = inventory.collect()
    except inventory.NoDriver as exc:
        return None, str(exc), time.monotonic() - start
    return inv, None, time.monotonic() - start
