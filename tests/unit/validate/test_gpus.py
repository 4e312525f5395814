from __future__ import annotations

import pytest

from gpunode.validate import gpus
from gpunode.validate.expect import Expectations

from .fakes import UUIDS, healthy_gpu, inventory


def run(inv, expect_gpus=4, no_driver=None):
    listing, checks = gpus.evaluate(inv, no_driver, Expectations(gpus=expect_gpus), 0.1)
    grid: dict = {}
    for c in checks:
        grid.setdefault(c.gpu, {})[c.id] = c
    return listing, grid


def test_healthy_node_passes_every_gpu_check():
    listing, grid = run(inventory())
    assert [g.uuid for g in listing] == UUIDS
    for i in range(4):
        assert {c.status for c in grid[i].values()} == {"pass"}
        assert list(grid[i]) == gpus.GPU_CHECKS
    assert grid[None]["node.gpu_count"].status == "pass"
    assert grid[None]["node.gpu_count"].duration_s == 0.1  # the inventory walk


FAULTS = [
    ({"lost": True}, "gpu.lost", "fail"),
    ({"ecc_errors": {"uncorrected_volatile": 3}}, "gpu.ecc_uncorrectable", "fail"),
    ({"retired_pages": {"single_bit": 0, "double_bit": 2, "pending": True}},
     "gpu.retired_pages_pending", "fail"),
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": 0, "failure": 1}},
     "gpu.row_remap_failure", "fail"),
    ({"remapped_rows": {"correctable": 0, "uncorrectable": 1, "pending": 1, "failure": 0}},
     "gpu.row_remap_failure", "warn"),
    ({"persistence_mode": False}, "gpu.persistence", "warn"),
]  # fmt: skip


@pytest.mark.parametrize(("fault", "check", "status"), FAULTS)
def test_a_fault_shows_on_that_gpu_only(fault, check, status):
    g = [healthy_gpu(i) for i in range(4)]
    g[2] = healthy_gpu(2, **fault)
    _, grid = run(inventory(g))
    assert grid[2][check].status == status and grid[2][check].uuid == UUIDS[2]
    others = [c for gpu, cs in grid.items() if gpu != 2 for c in cs.values()]
    assert {c.status for c in others} == {"pass"}
    bad = [c.id for c in grid[2].values() if c.status in ("fail", "warn")]
    assert bad == [check]


def test_missing_device_node_keeps_indices_in_bus_order():
    g = [healthy_gpu(i) for i in (0, 1, 3)]
    for gpu, nvml_index in zip(g, range(3), strict=True):
        gpu.index = nvml_index  # NVML numbers the three it shows 0..2
    problem = {"issue": "device_node_missing", "detail": "/dev/nvidia2 is missing or not a 195:2 device",
               "uuid": UUIDS[2], "pci_bus_id": "00000000:47:00.0", "minor": 2}  # fmt: skip
    listing, grid = run(inventory(g, [problem]))
    assert [x.uuid for x in listing] == UUIDS and [x.index for x in listing] == [0, 1, 2, 3]
    assert grid[2]["gpu.device_node"].status == "fail"
    assert "/dev/nvidia2" in grid[2]["gpu.device_node"].detail
    assert {c.status for c in grid[2].values()} == {"fail", "skip"}
    assert grid[3]["gpu.lost"].uuid == UUIDS[3] and grid[None]["node.gpu_count"].status == "pass"


def test_unsupported_features_skip_with_reason():
    g = healthy_gpu(0, ecc_mode=False, retired_pages={}, remapped_rows={}, persistence_mode=None,
                    pcie_link={}, pcie_replays=None, clocks_event_reasons=None, nvlinks={},
                    fabric={}, inforom_valid=None, xid_errors=None)  # fmt: skip
    _, grid = run(inventory([g]), expect_gpus=1)
    assert {k: c.status for k, c in grid[0].items()} == {
        "gpu.lost": "pass", "gpu.device_node": "pass", "gpu.ecc_uncorrectable": "skip",
        "gpu.retired_pages_pending": "skip", "gpu.row_remap_failure": "skip",
        "gpu.persistence": "skip", "gpu.pcie_link": "skip", "gpu.pcie_replay": "skip",
        "gpu.clocks_event": "skip", "gpu.nvlink": "skip", "gpu.fabric_manager": "skip",
        "gpu.inforom": "skip", "gpu.xid": "skip"}  # fmt: skip
    assert grid[0]["gpu.ecc_uncorrectable"].detail == "ECC is disabled"


def test_count_mismatch_and_missing_expectation():
    _, grid = run(inventory(), expect_gpus=8)
    assert grid[None]["node.gpu_count"].status == "fail"
    assert grid[None]["node.gpu_count"].detail == "4 GPU(s), expected 8"
    _, grid = run(inventory(), expect_gpus=None)
    assert grid[None]["node.gpu_count"].status == "skip"
    assert "--expect-gpus" in grid[None]["node.gpu_count"].detail


def test_nvml_unavailable_fails_once_and_skips_health():
    inv = inventory([healthy_gpu(0)], [{"issue": "nvml_unavailable", "detail": "NVML cannot be initialised: x"}],
                    source="procfs")  # fmt: skip
    _, grid = run(inv, expect_gpus=1)
    assert grid[None]["node.nvml"].status == "fail"
    assert grid[0]["gpu.ecc_uncorrectable"].detail == "NVML unavailable"
    assert grid[0]["gpu.device_node"].status == "pass"


def test_no_driver():
    listing, grid = run(None, expect_gpus=4, no_driver="no NVIDIA driver found (x)")
    assert listing == [] and grid[None]["node.driver"].status == "fail"
    assert grid[None]["node.gpu_count"].status == "fail"
    _, grid = run(None, expect_gpus=0, no_driver="no NVIDIA driver found (x)")
    assert {c.status for c in grid[None].values()} == {"pass"}  # a CPU node expected to be one
