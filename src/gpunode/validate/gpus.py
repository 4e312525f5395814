"""node.gpu_count and the per-GPU health checks, from gpunode's inventory (the one NVML walk,
gpunode.nvidia.inventory over gpunode.nvidia.nvml) — validate reads no NVML itself.

GPU index: the GPUs are listed in PCI bus order, the order NVML and CUDA enumerate them by
default, counting every GPU the node has: those NVML shows (lost ones included) and those
the kernel module lists whose ``/dev/nvidia<minor>`` is missing (NVML cannot show them). On
a healthy node the index is NVML's; with a GPU missing its device node, the GPUs after it
keep the index they have when the node is whole (NVML would number them one lower), so a
report names the same GPU whatever else is broken. The UUID is always given when known.

GPU count: every GPU the node has (as above) against the expected count; a lost GPU or a
missing device node fails its own checks, not the count, so each fault shows once.

node.xid: an Xid the driver logged (or NVML delivered) for a bus none of the node's GPUs
has. A GPU that fell off the bus so completely that neither NVML nor the kernel module
lists it any more leaves exactly this behind, and no GPU row could show it: the check
names the bus, at the Xid's own verdict (an application Xid warns, any other fails).
"""

from __future__ import annotations

import time

from ..nvidia import health, inventory, xid
from ..nvidia.fabric import FabricNode
from ..nvidia.gpu import Gpu
from .expect import Expectations
from .model import FAIL, PASS, SKIP, WARN, Check, GpuRow

TITLES = {
    "node.driver": "NVIDIA driver present",
    "node.nvml": "NVML usable",
    "node.gpu_count": "GPU count",
    "node.xid": "Xid errors on a bus no GPU has (a GPU gone from the bus)",
    "node.fabric_manager": "Fabric manager at the driver's version, NVSwitch fabric trained",
    **health.CHECKS,
}
GPU_CHECKS = list(health.CHECKS)


def listed(gpus: list[Gpu]) -> list[GpuRow]:
    """The result's GPU list: every GPU of the node (Inventory.every_gpu), indexed in order."""
    return [GpuRow.of(i, g) for i, g in enumerate(gpus)]


def evaluate(
    inv: inventory.Inventory | None,
    no_driver: str | None,
    expect: Expectations,
    seconds: float,
    fabric_node: FabricNode | None = None,
) -> tuple[list[GpuRow], list[Check]]:
    """The checks for a collected inventory (or the NoDriver reason); ``seconds``: how long
    the inventory took, counted to node.gpu_count (the walk every GPU check reads).
    ``fabric_node``: the node's NVSwitches and fabric manager (gpunode.validate.fabric);
    on an NVSwitch node node.fabric_manager judges them and every GPU's gpu.fabric_manager
    row carries the fabric manager's problems (gpunode.nvidia.health.fabric_gpu)."""
    checks: list[Check] = []

    def add(cid: str, status: str, detail: str, gpu: GpuRow | None = None, t: float = 0.0) -> None:
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
    gpus = inv.every_gpu()
    listing = listed(gpus)
    found = len(gpus)
    if expect.gpus is None:
        add("node.gpu_count", SKIP, f"{found} GPU(s); no expected count given "
            "(--expect-gpus, gpunode_expected_gpus)", t=seconds)  # fmt: skip
    else:
        st = PASS if found == expect.gpus else FAIL
        add("node.gpu_count", st, f"{found} GPU(s), expected {expect.gpus}", t=seconds)
    add("node.xid", *_unmatched_xids(inv))
    problems: list[str] = []
    if fabric_node is not None:
        add(*health.fabric_node(fabric_node, inv.driver_version, gpus))
        problems = health.fabric_problems(fabric_node, inv.driver_version)
    for g, entry in zip(gpus, listing, strict=True):
        start = time.monotonic()
        verdicts = health.verdicts(g)
        if fabric_node is not None:
            verdicts = [health.fabric_gpu(g, v, fabric_node, problems)
                        if v[0] == "gpu.fabric_manager" else v for v in verdicts]  # fmt: skip
        if nvml_problem and g.missing is None:
            verdicts = [(c, SKIP, "NVML unavailable") if c != "gpu.device_node" else (c, s, d)
                        for c, s, d in verdicts]  # fmt: skip
        t = (time.monotonic() - start) / len(verdicts)
        for cid, status, detail in verdicts:
            add(cid, status, detail, entry, t)
    return listing, checks


def _unmatched_xids(inv: inventory.Inventory) -> tuple[str, str]:
    found = [p for p in inv.problems if p.get("issue") == "xid_unmatched"]
    if not found:
        if inv.kernel_log is not None:
            return SKIP, inv.kernel_log
        return PASS, "every Xid logged is on one of the node's GPUs"
    buses = list(dict.fromkeys(p["pci_bus_id"] for p in found))
    worst = next((p for p in found if p.get("verdict") == FAIL), found[-1])
    status = FAIL if worst.get("verdict") == FAIL else WARN
    what = xid.classify(worst["xid"])[2] if "xid" in worst else ""
    return status, (
        f"{len(found)} Xid error(s) on {', '.join(buses)}, a bus none of the node's GPUs has "
        f"(a GPU gone from NVML and the driver's list): {worst['detail']}"
        + (f" — {what}" if what else "")
    )


def collect() -> tuple[inventory.Inventory | None, str | None, float]:
    start = time.monotonic()
    try:
        inv = inventory.collect()
    except inventory.NoDriver as exc:
        return None, str(exc), time.monotonic() - start
    return inv, None, time.monotonic() - start
