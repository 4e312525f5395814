from __future__ import annotations

import pytest

from gpunode.nvidia.facts import MigFacts
from gpunode.nvidia.gpu import Gpu
from gpunode.util.record import fields
from gpunode.validate.model import ROW, Check, GpuRow, titled

from .fakes import healthy_gpu, mig_gpu, result


def test_detail_is_one_line_and_status_is_checked():
    assert Check("a", "A", "pass", "two\nlines  here").detail == "two lines here"
    with pytest.raises(ValueError, match="status 'ok' is not one of"):
        Check("a", "A", "ok", "x")


def test_summary_and_exit_code():
    r = result()
    assert r.summary() == {"pass": 1, "warn": 1, "fail": 1, "skip": 1}
    assert r.exit_code == 1
    r.checks = [c for c in r.checks if c.status != "fail"]
    assert r.exit_code == 0  # warn and skip allowed


def test_contract_fields():
    d = result().to_dict()
    assert d["schema"] == "gpunode.validate/v1"
    assert list(d) == ["schema", "node", "hostname", "started", "duration_s", "gpunode_version",
                       "versions", "gpus", "checks", "summary", "exit_code"]  # fmt: skip
    assert list(d["checks"][1]) == ["id", "title", "gpu", "mig", "uuid", "status", "detail",
                                    "duration_s"]  # fmt: skip
    assert d["checks"][0]["gpu"] is None and d["checks"][0]["uuid"] is None
    assert d["checks"][1]["mig"] is None
    assert d["gpus"][0]["pci_bus_id"] == "00000000:07:00.0"
    assert d["gpus"][0]["mig_enabled"] is None and d["gpus"][0]["mig"] == []
    assert list(d["gpus"][0]) == ["index", "uuid", "model", "pci_bus_id", "memory_mib", "minor",
                                  "mig_enabled", "mig", "serial"]  # fmt: skip


def test_the_result_row_is_the_records_fields_under_the_schemas_names():
    """The versioned schema keeps its own names (model, memory_mib, mig_enabled, mig); ROW
    maps each to the GPU record's field, and nothing else fills the row."""
    assert list(fields(GpuRow)) == ["index", *ROW]
    assert set(ROW.values()) <= set(fields(Gpu))
    gpu = mig_gpu(1, profiles=("3g.40gb",))
    row = GpuRow.of(5, gpu).__dict__
    assert row == {"index": 5, **{name: getattr(gpu, field) for name, field in ROW.items()}}
    assert row["model"] == "NVIDIA A100-SXM4-80GB" and row["memory_mib"] == 81920
    assert row["mig_enabled"] is True and row["mig"][0].profile == "3g.40gb"
    assert GpuRow.of(0, healthy_gpu(0)).mig_enabled is None
    assert GpuRow.of(0, healthy_gpu(0, serial="1654922001234")).serial == "1654922001234"
    assert GpuRow.of(0, healthy_gpu(0)).serial is None  # NVML did not tell


def test_mig_devices_under_their_gpu_and_mig_checks_name_the_device():
    r = result([Check("mig.isolation", "MIG", "pass", "ok", gpu=0, uuid="MIG-a", mig=2)])
    r.gpus[0].mig_enabled = True
    r.gpus[0].mig = [MigFacts(2, "MIG-a", 5, 0, "1g.10gb", 9856)]
    d = r.to_dict()
    assert d["gpus"][0]["mig"] == [{"index": 2, "uuid": "MIG-a", "gi": 5, "ci": 0,
                                    "profile": "1g.10gb", "memory_mib": 9856}]  # fmt: skip
    assert (d["checks"][0]["gpu"], d["checks"][0]["mig"], d["checks"][0]["uuid"]) == (0, 2, "MIG-a")


def test_titled_adds_title_and_time_between_adds():
    out = []
    add = titled(out, {"a": "A", "b": "B"})
    add("a", "pass", "x")
    add("b", "fail", "y", gpu=1, uuid="GPU-1")
    assert [(c.id, c.title) for c in out] == [("a", "A"), ("b", "B")] and out[1].gpu == 1
    assert all(c.duration_s >= 0 for c in out)
