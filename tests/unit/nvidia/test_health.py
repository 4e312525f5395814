"""gpunode.nvidia.health: one verdict per check and GPU, the inventory's flags derived from
those verdicts, so `gpunode inventory` and `gpunode validate` cannot disagree."""

from __future__ import annotations

import pytest

from gpunode.nvidia import health
from gpunode.nvidia.gpu import Gpu, XidError
from gpunode.nvidia.inventory import Inventory

from ..validate.fakes import healthy_gpu

XID79 = XidError(79, "bus", "fail", "1", "python3", "GPU has fallen off the bus.", "kernel log")
XID13 = XidError(13, "application", "warn", "2", "app", "Graphics Exception", "kernel log")

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
    ({"pcie_link": {"gen": 4, "max_gen": 4, "width": 8, "max_width": 16}}, "gpu.pcie_link",
     "fail", ["pcie_link_degraded"]),  # an SXM module (the fake's A100-SXM4)
    ({"pcie_link": {"gen": 4, "max_gen": 4, "width": 8, "max_width": 16},
      "name": "NVIDIA A100 80GB PCIe", "fabric": None}, "gpu.pcie_link", "warn",
     ["pcie_link_degraded"]),
    ({"pcie_replays": 9}, "gpu.pcie_replay", "warn", ["pcie_replays"]),
    ({"clocks_event_reasons": 0x8}, "gpu.clocks_event", "fail", ["clocks_hw_slowdown"]),
    ({"clocks_event_reasons": 0x40}, "gpu.clocks_event", "fail", ["clocks_hw_slowdown"]),
    ({"clocks_event_reasons": 0x80 | 0x4}, "gpu.clocks_event", "fail", ["clocks_hw_slowdown"]),
    ({"clocks_event_reasons": 0x20}, "gpu.clocks_event", "warn", ["clocks_sw_thermal"]),
    ({"nvlinks": {0: True, 1: False, 2: True}}, "gpu.nvlink", "fail", ["nvlink_down"]),
    ({"fabric": {"state": 3, "status": 999, "status_text": "Unknown Error"}},
     "gpu.fabric_manager", "fail", ["fabric_manager_failed"]),
    ({"fabric": {"state": 1, "status": 0}}, "gpu.fabric_manager", "fail",
     ["fabric_manager_failed"]),
    ({"fabric": {"state": 2, "status": 0}}, "gpu.fabric_manager", "warn",
     ["fabric_manager_training"]),
    ({"inforom_valid": False}, "gpu.inforom", "fail", ["inforom_corrupt"]),
]  # fmt: skip


def test_every_check_is_judged_by_its_entry_in_the_table():
    """One judge per check, in CHECKS order, and nothing decided before the table: a GPU
    NVML cannot read gets each judge's own verdict or the skip READS_NVML gives."""
    assert list(health.JUDGES) == list(health.CHECKS)
    assert set(health.CHECKS) - {"gpu.lost", "gpu.device_node"} == health.READS_NVML
    assert {c for c, _ in health.FLAGS} <= set(health.CHECKS)


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
    assert health.flags(gpu) == flags
    shown = Inventory("nvml", "535.261.03", "12.2", "12.535.261.03", [gpu]).to_dict()["gpus"][0]
    assert shown["health"] == flags and "lost" not in shown and list(shown)[-1] == "health"


def test_a_lost_gpu_fails_once_and_skips_the_rest():
    got = health.verdicts(Gpu(0, None, None, None, None, lost=True))
    assert [(c, s) for c, s, _ in got] == [("gpu.lost", "fail")] + [
        (c, "skip") for c in list(health.CHECKS)[1:]
    ]


def test_a_gpu_without_its_device_node():
    gpu = Gpu(None, 3, "GPU-x", None, "00000000:4E:00.0",
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
    gpus = [healthy_gpu(0, pci_bus_id="00000000:07:00.0"), healthy_gpu(1, pci_bus_id="00000000:47:00.0")]
    problem = {"issue": "device_node_missing", "detail": "/dev/nvidia1 is missing", "uuid": "GPU-m",
               "pci_bus_id": "00000000:0F:00.0", "minor": 1}  # fmt: skip
    inv = Inventory("nvml", "535.261.03", "12.2", "12.535.261.03", gpus, [problem])
    every = inv.every_gpu()
    assert [g.pci_bus_id for g in every] == ["00000000:07:00.0", "00000000:0F:00.0", "00000000:47:00.0"]
    assert every[1].missing == "/dev/nvidia1 is missing" and inv.gpus == gpus  # usable ones only
    assert health.flags(every[1]) == [] and not inv.healthy  # a problem, not a flag


def verdict(check, **fault):
    return {c: (s, d) for c, s, d in health.verdicts(healthy_gpu(0, **fault))}[check]


NO_FABRIC = {"state": 0, "status": 0}  # nvmlGpuFabricState NOT_SUPPORTED: no NVSwitch baseboard


@pytest.mark.parametrize(
    ("name", "fabric", "status"),
    [
        ("NVIDIA A100-SXM4-80GB", NO_FABRIC, "fail"),
        ("Tesla V100-SXM2-32GB", None, "fail"),
        ("NVIDIA H100 80GB HBM3", NO_FABRIC, "fail"),  # SXM5; its card is "H100 PCIe"
        ("NVIDIA B200", None, "fail"),
        ("NVIDIA Graphics Device", {"state": 3, "status": 0}, "fail"),  # on an NVSwitch fabric
        ("NVIDIA H100 PCIe", NO_FABRIC, "warn"),
        ("NVIDIA H100 NVL", NO_FABRIC, "warn"),
        ("NVIDIA H200 NVL", None, "warn"),
        ("NVIDIA A100 80GB PCIe", None, "warn"),
        ("Tesla T4", None, "warn"),
    ],
)
def test_pcie_width_below_the_maximum_fails_on_an_sxm_module_and_warns_on_a_card(
    name, fabric, status
):
    """DCGM fails a width drop on SXM/HGX boards; on a card it is a warning, and the detail
    says the node still passes. Whatever the load."""
    for reasons in (0x1, 0x0, None):
        got, detail = verdict(
            "gpu.pcie_link",
            clocks_event_reasons=reasons,
            name=name,
            fabric=fabric,
            pcie_link={"gen": 4, "max_gen": 4, "width": 8, "max_width": 16},
        )
        assert got == status and "x8 of x16" in detail and "DCGM_FR_PCIE_WIDTH" in detail
        assert ("the node still passes validation" in detail) == (status == "warn"), detail
        assert ("SXM module" in detail) == (status == "fail"), detail


def test_pcie_generation_below_the_maximum_is_normal_only_while_idle():
    link = {"gen": 1, "max_gen": 4, "width": 16, "max_width": 16}
    status, detail = verdict("gpu.pcie_link", pcie_link=link, clocks_event_reasons=0x1)
    assert status == "pass" and "Gen1 of Gen4 while idle" in detail
    status, detail = verdict("gpu.pcie_link", pcie_link=link, clocks_event_reasons=0x0)
    assert status == "warn" and "under load" in detail and "DCGM_FR_PCIE_GENERATION" in detail
    status, detail = verdict("gpu.pcie_link", pcie_link=link, clocks_event_reasons=None)
    assert status == "warn" and "cannot tell" in detail


def test_pcie_link_at_the_maximum_and_a_slower_slot():
    assert verdict("gpu.pcie_link") == ("pass", "Gen4 x16, the maximum")
    link = {"gen": 4, "max_gen": 4, "gpu_max_gen": 5, "width": 16, "max_width": 16}
    status, detail = verdict("gpu.pcie_link", pcie_link=link)
    assert status == "pass" and "slot limits the GPU's Gen5 to Gen4" in detail
    assert verdict("gpu.pcie_link", pcie_link={"width": 16, "max_width": 16}) == (
        "pass", "x16, the maximum")  # fmt: skip


def test_pcie_replays_threshold():
    assert verdict("gpu.pcie_replay", pcie_replays=health.PCIE_REPLAY_WARN)[0] == "pass"
    status, detail = verdict("gpu.pcie_replay", pcie_replays=health.PCIE_REPLAY_WARN + 1)
    assert status == "warn" and "DCGM_FR_PCI_REPLAY_RATE" in detail


def test_clock_reasons_are_named_and_normal_ones_pass():
    normal = 0x1 | 0x2 | 0x4 | 0x10 | 0x100
    status, detail = verdict("gpu.clocks_event", clocks_event_reasons=normal)
    assert status == "pass"
    assert detail == ("no slowdown (GPU idle, application clocks setting, SW power cap, "
                      "sync boost, display clock setting)")  # fmt: skip
    assert verdict("gpu.clocks_event", clocks_event_reasons=0) == ("pass", "no slowdown (none)")
    status, detail = verdict("gpu.clocks_event", clocks_event_reasons=0x8 | 0x40 | 0x20)
    assert status == "fail" and "HW slowdown, HW thermal slowdown" in detail
    assert "DCGM_FR_CLOCKS_EVENT_VIOLATION" in detail
    assert health.clock_reason_names(0x1 | 0x8000) == ["GPU idle", "0x8000"]


def test_nvlink_names_the_links_down():
    links = dict.fromkeys(range(18), True) | {3: False, 17: False}
    status, detail = verdict("gpu.nvlink", nvlinks=links)
    assert status == "fail" and detail.startswith("NVLink 3, 17 down (2 of 18 links)")
    assert "DCGM_FR_NVLINK_DOWN" in detail
    assert verdict("gpu.nvlink") == ("pass", "all 12 links up")
    assert verdict("gpu.nvlink", nvlinks={}) == ("skip", "the GPU has no NVLink")


def test_fabric_manager_states():
    assert verdict("gpu.fabric_manager")[0] == "pass"
    assert verdict("gpu.fabric_manager", fabric=None)[0] == "skip"
    assert verdict("gpu.fabric_manager", fabric={"state": 0, "status": 0})[0] == "skip"
    status, detail = verdict("gpu.fabric_manager",
                             fabric={"state": 3, "status": 999, "status_text": "Unknown Error"})
    assert status == "fail" and "(Unknown Error)" in detail
    assert "DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR" in detail
    status, detail = verdict("gpu.fabric_manager", fabric={"state": 1, "status": 0})
    assert status == "fail" and "nvidia-fabricmanager" in detail


def test_inforom():
    assert verdict("gpu.inforom")[0] == "pass"
    assert verdict("gpu.inforom", inforom_valid=None)[0] == "skip"
    assert "DCGM_FR_CORRUPT_INFOROM" in verdict("gpu.inforom", inforom_valid=False)[1]


def test_every_new_check_names_its_dcgm_counterpart_in_its_title():
    for check in ("gpu.pcie_link", "gpu.pcie_replay", "gpu.clocks_event", "gpu.nvlink",
                  "gpu.fabric_manager", "gpu.inforom"):  # fmt: skip
        assert "DCGM_FR_" in health.CHECKS[check]


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
