"""gpunode.nvidia.health: one verdict per check and GPU, the inventory's flags derived from
those verdicts, so `gpunode inventory` and `gpunode validate` cannot disagree."""

from __future__ import annotations

import pytest

from gpunode.nvidia import health
from gpunode.nvidia.inventory import GpuInfo

from ..validate.fakes import healthy_gpu

XID79 = {"xid": 79, "kind": "bus", "verdict": "fail", "pid": "1", "process": "python3",
         "message": "GPU has fallen off the bus."}  # fmt: skip
XID13 = {"xid": 13, "kind": "application", "verdict": "warn", "pid": "2", "process": "app",
         "message": "Graphics Exception"}  # fmt: skip

FAULTS = [
    ({"lost": True}, "gpu.lost", "fail", ["fallen_off_bus"]),
    ({"ecc_errors": {"uncorrected_volatile": 3}}, "gpu.ecc_uncorrectable", "fail",
     ["ecc_uncorrectable"]),
    ({"retired_pages": {"single_bit": 0, "double_bit": 2, "pending": True}},
     "gpu.retired_pages_pending", "fail", ["retired_pages_pending"]),
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": 0, "failure": 1}},
     "gpu.row_remap_failure", "fail", ["row_remap_failure"]),
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": 1, "failure": 0}},
     "gpu.row_remap_failure", "warn", ["row_remap_pending"]),
    ({"persistence_mode": False}, "gpu.persistence", "warn", ["persistence_off"]),
    ({"xid_errors": [XID79]}, "gpu.xid", "fail", ["xid_error"]),
    ({"xid_errors": [XID13, XID13]}, "gpu.xid", "warn", ["xid_application_error"]),
]  # fmt: skip


def test_a_healthy_gpu_passes_every_check_and_has_no_flag():
    got = health.verdicts(healthy_gpu(0))
    assert [c for c, _, _ in got] == list(health.CHECKS)  # every check, in order, once
    assert {s for _, s, _ in got} == {"pass"}
    assert health.flags(healthy_gpu(0)) == []


@pytest.mark.parametrize(("fault", "check", "status", "flags"), FAULTS)
def test_the_flags_are_the_verdicts(fault, check, status, flags):
    gpu = healthy_gpu(0, **fault)
    verdicts = {c: s for c, s, _ in health.verdicts(gpu)}
    assert verdicts[check] == status
    assert health.flags(gpu) == flags == gpu.health
    assert gpu.to_dict()["health"] == flags and "lost" not in gpu.to_dict()


def test_a_lost_gpu_fails_once_and_skips_the_rest():
    got = health.verdicts(GpuInfo(0, None, None, None, None, lost=True))
    assert [(c, s) for c, s, _ in got] == [("gpu.lost", "fail")] + [
        (c, "skip") for c in list(health.CHECKS)[1:]
    ]


def test_a_gpu_without_its_device_node():
    gpu = GpuInfo(None, 3, "GPU-x", None, "00000000:4E:00.0",
                  missing="/dev/nvidia3 is missing or not a 195:3 device")  # fmt: skip
    got = health.verdicts(gpu)
    assert [(c, s) for c, s, _ in got] == [("gpu.lost", "skip"), ("gpu.device_node", "fail")] + [
        (c, "skip") for c in list(health.CHECKS)[2:]
    ]
    assert got[1][2] == "/dev/nvidia3 is missing or not a 195:3 device"


def test_unsupported_counters_skip_with_the_reason():
    gpu = healthy_gpu(0, ecc_mode=None, retired_pages={}, remapped_rows={}, persistence_mode=None)
    got = {c: (s, d) for c, s, d in health.verdicts(gpu)}
    assert got["gpu.ecc_uncorrectable"] == ("skip", "ECC is not supported")
    assert got["gpu.retired_pages_pending"] == ("skip", "page retirement is not supported")
    assert got["gpu.row_remap_failure"][0] == "skip"
    assert got["gpu.persistence"] == ("skip", "persistence mode is not supported")
    assert health.flags(gpu) == []


def test_every_gpu_lists_the_missing_ones_in_bus_order():
    from gpunode.nvidia.inventory import Inventory

    gpus = [healthy_gpu(0, pci_bus_id="00000000:07:00.0"), healthy_gpu(1, pci_bus_id="00000000:47:00.0")]
    problem = {"issue": "device_node_missing", "detail": "/dev/nvidia1 is missing", "uuid": "GPU-m",
               "pci_bus_id": "00000000:0F:00.0", "minor": 1}  # fmt: skip
    inv = Inventory("nvml", "535.261.03", "12.2", "12.535.261.03", gpus, [problem])
    every = inv.every_gpu()
    assert [g.pci_bus_id for g in every] == ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0"]
    assert every[1].missing == "/dev/nvidia1 is missing" and inv.gpus == gpus  # usable ones only
    assert health.flags(every[1]) == [] and not inv.healthy  # a problem, not a flag


def test_xid_detail_counts_codes_and_says_what_the_worst_asks_for():
    gpu = healthy_gpu(0, xid_errors=[XID13, XID79, XID13])
    status, detail = health._judge_xid(gpu.xid_errors)
    assert status == "fail"
    assert detail.startswith("Xid 13 x2, 79; last 79 (bus): GPU has fallen off the bus.")
    assert "drain" in detail
    assert health._judge_xid(None)[0] == "skip"
    assert health._judge_xid([], ["the kernel log since boot"]) == (
        "pass",
        "no Xid error in the kernel log since boot",
    )
