from __future__ import annotations

import pytest

from gpunode.validate.model import Check, MigDevice, titled

from .fakes import result


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


def test_mig_devices_under_their_gpu_and_mig_checks_name_the_device():
    r = result([Check("mig.isolation", "MIG", "pass", "ok", gpu=0, uuid="MIG-a", mig=2)])
    r.gpus[0].mig_enabled = True
    r.gpus[0].mig = [MigDevice(2, "MIG-a", 5, 0, "1g.10gb", 9856)]
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
