"""Inventories and results for the validate tests."""

from __future__ import annotations

from gpunode.nvidia.gpu import EccErrors, Fabric, Gpu, PcieLink, RemappedRows, RetiredPages
from gpunode.nvidia.inventory import Inventory
from gpunode.validate.model import Check, GpuRow, Result

UUIDS = [f"GPU-0000000{i}-0000-4000-8000-00000000000{i}" for i in range(4)]
BUS = ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0", "00000000:4E:00.0"]


# the record's sub-records, given to healthy_gpu as dicts of their fields ({}: none reported)
SUB_RECORDS = {"ecc_errors": EccErrors, "retired_pages": RetiredPages,
               "remapped_rows": RemappedRows, "pcie_link": PcieLink, "fabric": Fabric}  # fmt: skip


def sub_record(name: str, value):
    """``value`` as the record's field ``name`` holds it: a dict becomes its sub-record ({}: an
    empty one, or None where NVML reports all of it or nothing)."""
    if name not in SUB_RECORDS or not isinstance(value, dict):
        return value
    if not value and name in ("retired_pages", "remapped_rows", "fabric"):
        return None
    return SUB_RECORDS[name](**value)


def healthy_gpu(i: int, **kw) -> Gpu:
    g = Gpu(index=i, minor=i, uuid=UUIDS[i], name="NVIDIA A100-SXM4-80GB",
            pci_bus_id=BUS[i], memory_total_mib=81920, persistence_mode=True,
            ecc_mode=True)  # fmt: skip
    g.ecc_errors = EccErrors(uncorrected_volatile=0, uncorrected_aggregate=0)
    g.retired_pages = RetiredPages(single_bit=0, double_bit=0, pending=False)
    g.remapped_rows = RemappedRows(correctable=0, uncorrectable=0, pending=0, failure=0)
    g.xid_errors = []  # the kernel log was read and holds no Xid for it
    g.pcie_link = PcieLink(gen=4, max_gen=4, gpu_max_gen=4, width=16, max_width=16)
    g.pcie_replays, g.clocks_event_reasons, g.inforom_valid = 0, 0x1, True  # idle
    g.nvlinks = dict.fromkeys(range(12), True)
    g.fabric = Fabric(state=3, status=0, status_text="Success")
    for k, v in kw.items():
        setattr(g, k, sub_record(k, v))
    return g


def inventory(gpus=None, problems=None, source="nvml") -> Inventory:
    gpus = [healthy_gpu(i) for i in range(4)] if gpus is None else gpus
    inv = Inventory(source, "535.261.03", "12.2", "12.535.261.03", gpus, problems or [])
    inv.hostname = "n1"
    return inv


def result(checks=None) -> Result:
    r = Result(node='n"1', hostname="n1", started="2026-11-22T08:00:00Z", gpunode_version="0.1.0")
    r.gpus = [GpuRow(0, UUIDS[0], "NVIDIA A100-SXM4-80GB", BUS[0], 81920, 0)]
    r.checks = checks or [
        Check("node.gpu_count", "GPU count", "pass", "1 GPU(s), expected 1", duration_s=0.05),
        Check("gpu.ecc_uncorrectable", "ECC", "fail", "3 uncorrected", gpu=0, uuid=UUIDS[0]),
        Check("gpu.persistence", "Persistence", "warn", "disabled", gpu=0, uuid=UUIDS[0]),
        Check("container.cuda", "CUDA", "skip", "no CUDA-capable device"),
    ]
    r.duration_s = 4.2
    return r


MIG_UUIDS = [f"MIG-0000000{i}-1111-4000-8000-00000000000{i}" for i in range(8)]


def mig_gpu(i: int, profiles=("3g.40gb", "2g.20gb", "1g.10gb"), pending=None, **kw) -> Gpu:
    """A healthy GPU with MIG on and one MIG device per profile (GI 1, 2, ..., CI 0)."""
    from gpunode.nvidia.facts import MigFacts

    devices = [MigFacts(n, MIG_UUIDS[n + 3 * i], n + 1, 0, p, 10240 * (n + 1))
               for n, p in enumerate(profiles)]  # fmt: skip
    enabled = kw.pop("mig_mode", True)
    return healthy_gpu(i, mig_mode=enabled, mig_devices=devices if enabled else [],
                       mig_mode_pending=enabled if pending is None else pending, **kw)  # fmt: skip


def mig_result() -> Result:
    """result() plus a MIG GPU 1 with two MIG devices, their mig.isolation (the second
    failed) and mig.layout."""
    from gpunode.nvidia.facts import MigFacts

    r = result()
    g = GpuRow(1, UUIDS[1], "NVIDIA A100-SXM4-80GB", BUS[1], 81920, 1, mig_enabled=True)
    g.mig = [MigFacts(0, MIG_UUIDS[0], 1, 0, "3g.40gb", 40192),
             MigFacts(1, MIG_UUIDS[1], 5, 0, "1g.10gb", 9856)]  # fmt: skip
    r.gpus.append(g)
    r.checks += [
        Check("mig.layout", "MIG layout", "pass", "1x 1g.10gb, 1x 3g.40gb", gpu=1, uuid=UUIDS[1]),
        Check("mig.isolation", "MIG isolation", "pass", "exactly", gpu=1, mig=0, uuid=MIG_UUIDS[0]),
        Check("mig.isolation", "MIG isolation", "fail", "1:1: NVML lists MIG devices a, b",
              gpu=1, mig=1, uuid=MIG_UUIDS[1]),
    ]  # fmt: skip
    return r
