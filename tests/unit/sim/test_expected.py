"""`gpunode sim check-report`: a cluster report judged against the faults the inventory's
profiles inject (the demo's last step)."""

from __future__ import annotations

import json

import pytest
import yaml

from gpunode.cli.main import main
from gpunode.report import results
from gpunode.sim.expected import compare, injected

from ..report.synthetic import result

HOSTS = {"a100": "a100x4", "t4": "t4x2-faulty", "cpu": "nogpu"}


@pytest.fixture
def inventory(tmp_path):
    hosts = {
        n: {"gpunode_sim_release": "bookworm", "gpunode_sim_profile": p} for n, p in HOSTS.items()
    }
    f = tmp_path / "hosts.yml"
    f.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return f


def report(t4_faults: dict) -> dict:
    cpu = {"node": "cpu", "no_gpu": True, "checks": []}
    docs = [result("a100", "A100", 4), result("t4", "T4", 2, t4_faults), cpu]
    return results.merge([(f"{d['node']}.json", results.check_result(d, "x")) for d in docs])


ECC = {("gpu.ecc_uncorrectable", 1): ("fail", "12 volatile uncorrected ECC errors")}


def test_the_injected_faults_by_node_and_pci_ordered_gpu(inventory):
    faults = injected(inventory)
    assert faults["t4"] == {0: [], 1: ["ecc_uncorrectable", "retired_pages_pending"]}
    assert faults["a100"] == {i: [] for i in range(4)} and faults["cpu"] == {}


@pytest.mark.parametrize(
    ("t4_faults", "problem"),
    [
        (ECC, None),
        ({}, "t4: GPU 1 has faults ecc_uncorrectable, retired_pages_pending; no check shows them"),
        (
            {**ECC, ("gpu.lost", 0): ("fail", "lost")},
            "t4: GPU 0 (no fault injected): gpu.lost fail",
        ),
        ({**ECC, ("engine.active", None): ("fail", "down")}, "t4: engine.active fail: down"),
    ],
)
def test_compare_names_every_difference(inventory, t4_faults, problem):
    assert compare(report(t4_faults), injected(inventory)) == ([problem] if problem else [])


def test_check_report_cli(inventory, tmp_path, capsys):
    f = tmp_path / "report.json"
    f.write_text(json.dumps(report(ECC)))
    assert main(["sim", "check-report", "-i", str(inventory), str(f)]) == 0
    out = capsys.readouterr().out
    assert "t4 GPU 1: ecc_uncorrectable, retired_pages_pending" in out
    f.write_text(json.dumps(report({})))
    assert main(["sim", "check-report", "-i", str(inventory), str(f)]) == 1
    assert "no check shows them" in capsys.readouterr().out
    f.write_text("{}")
    assert main(["sim", "check-report", "-i", str(inventory), str(f)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"gpunode: error: sim check-report: {f}: not a gpunode.report/v1 report.json"]
