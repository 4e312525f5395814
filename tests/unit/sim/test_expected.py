"""`gpunode sim check-report`: a cluster report judged against the faults the inventory's
profiles inject (the demo's last step)."""

from __future__ import annotations

import json

import pytest
import yaml

from gpunode.cli.main import main
from gpunode.report import results
from gpunode.sim.expected import compare, describe, gpu_faults, injected, shows
from gpunode.sim.profiles import load_profile

from ..report.synthetic import ALL_GPU_CHECKS as ALL
from ..report.synthetic import ALL_NODE_CHECKS as ALL_NODES
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
    docs = [result("a100", "A100", 4), result("t4", "T4", 2, t4_faults, gpu_checks=ALL), cpu]
    return results.merge([(f"{d['node']}.json", results.check_result(d, "x")) for d in docs])


ECC = {("gpu.ecc_uncorrectable", 1): ("fail", "12 volatile uncorrected ECC errors")}
# what t4x2-faulty's GPU 1 (ecc_uncorrectable, retired_pages_pending) must show: the ECC
# error's Xid 48 too (profiles.FAULTS)
T4_FAULTY = {**ECC, ("gpu.xid", 1): ("fail", "Xid 48"),
             ("gpu.retired_pages_pending", 1): ("fail", "pending")}  # fmt: skip


def test_the_injected_faults_by_node_and_pci_ordered_gpu(inventory):
    faults = injected(inventory)
    assert faults["t4"] == {0: [], 1: ["ecc_uncorrectable", "retired_pages_pending"]}
    assert faults["a100"] == {i: [] for i in range(4)} and faults["cpu"] == {}


@pytest.mark.parametrize(
    ("t4_faults", "problem"),
    [
        (T4_FAULTY, None),
        ({}, "t4: GPU 1 has faults ecc_uncorrectable, retired_pages_pending; no check shows them"),
        # every fault has its checks: one of them bad is not enough
        (ECC, "t4: GPU 1 has faults ecc_uncorrectable, retired_pages_pending: shows "
              "gpu.ecc_uncorrectable fail; expected gpu.ecc_uncorrectable fail, "
              "gpu.retired_pages_pending fail, gpu.xid fail"),
        (
            {**T4_FAULTY, ("gpu.lost", 0): ("fail", "lost")},
            "t4: GPU 0 (no fault injected): gpu.lost fail",
        ),
        ({**T4_FAULTY, ("engine.active", None): ("fail", "down")}, "t4: engine.active fail: down"),
    ],
)
def test_compare_names_every_difference(inventory, t4_faults, problem):
    assert compare(report(t4_faults), injected(inventory)) == ([problem] if problem else [])


def test_check_report_cli(inventory, tmp_path, capsys):
    f = tmp_path / "report.json"
    f.write_text(json.dumps(report(T4_FAULTY)))
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


def h100_report(shown: dict[int, dict[str, str]]) -> tuple[dict, dict]:
    """A report of one h100x8-degraded node whose GPUs show ``shown`` (GPU -> check ->
    status) beside passing checks, and what its profile injects."""
    doc = result("h100", "H100", 8)
    if shown.get(6, {}).get("gpu.fabric_manager"):  # the node sums GPU 6's fabric up
        doc["checks"].append({"id": "node.fabric_manager", "title": "FM", "gpu": None,
                              "uuid": None, "status": "fail", "detail": "x", "duration_s": 0.0})  # fmt: skip
    for i, checks in shown.items():
        for cid, status in checks.items():
            doc["checks"].append({"id": cid, "title": cid, "gpu": i, "uuid": None,
                                  "status": status, "detail": "x", "duration_s": 0.0})  # fmt: skip
    model = results.merge([("h100.json", results.check_result(doc, "x"))])
    profile = load_profile("h100x8-degraded")
    gpus = sorted(profile.gpus, key=lambda g: g.bus_id.nvml.lower())
    return model, {"h100": {i: gpu_faults(g) for i, g in enumerate(gpus)}}


EXACT = {
    0: {"gpu.pcie_link": "fail"}, 1: {"gpu.pcie_replay": "warn"},
    2: {"gpu.clocks_event": "fail"}, 3: {"gpu.clocks_event": "warn"}, 4: {"gpu.nvlink": "fail"},
    5: {"gpu.inforom": "fail"}, 6: {"gpu.fabric_manager": "fail"},
}  # fmt: skip


def test_the_link_faults_must_show_exactly_their_check_and_status():
    assert compare(*h100_report(EXACT)) == []
    wrong = {**EXACT, 3: {"gpu.clocks_event": "fail"}, 4: {"gpu.nvlink": "fail", "gpu.lost": "fail"}}
    assert compare(*h100_report(wrong)) == [
        "h100: GPU 3 has faults clocks_sw_thermal: shows gpu.clocks_event fail; expected "
        "gpu.clocks_event warn",
        "h100: GPU 4 has faults nvlink_down: shows gpu.lost fail, gpu.nvlink fail; expected "
        "gpu.nvlink fail",
    ]
    # an SXM module's width drop that only warns (the node would pass) is a wrong verdict
    assert compare(*h100_report({**EXACT, 0: {"gpu.pcie_link": "warn"}})) == [
        "h100: GPU 0 has faults pcie_link_degraded: shows gpu.pcie_link warn; expected "
        "gpu.pcie_link fail"
    ]
    assert compare(*h100_report({**EXACT, 7: {"gpu.nvlink": "fail"}})) == [
        "h100: GPU 7 (no fault injected): gpu.nvlink fail"
    ]
    assert shows(["clocks_sw_thermal", "clocks_hw_slowdown"]) == {"gpu.clocks_event": "fail"}
    assert shows(["nvlink_down", "ecc_uncorrectable"]) == {
        "gpu.nvlink": "fail", "gpu.ecc_uncorrectable": "fail", "gpu.xid": "fail"}
    lines = describe(h100_report(EXACT)[1])
    assert lines[0] == "h100 GPU 0: pcie_link_degraded (gpu.pcie_link fail)" and len(lines) == 7
    assert shows(["pcie_link_degraded (PCIe card)"]) == {"gpu.pcie_link": "warn"}


def test_a_fault_the_node_sums_up_must_show_on_the_node_row_too():
    """fabric_manager_failed (a GPU's fabric training failed) fails node.fabric_manager
    besides that GPU's row (profiles.FAULTS' node entry): the judge asks for both, and
    takes neither alone."""
    gpu_row = {("gpu.fabric_manager", 1): ("fail", "fabric training failed")}
    node_row = {("node.fabric_manager", None): ("fail", "1 of 2 GPUs' fabric not trained")}
    want = {"t4": {0: [], 1: ["fabric_manager_failed"]}}

    def model(faults):
        node_checks = [*ALL_NODES, ("node.fabric_manager", "Fabric manager")]
        doc = result("t4", "T4", 2, faults, node_checks=node_checks, gpu_checks=ALL)
        return results.merge([("t4.json", results.check_result(doc, "x"))])

    assert compare(model({**gpu_row, **node_row}), want) == []
    assert compare(model(gpu_row), want) == [
        "t4: its GPUs' faults must show node.fabric_manager fail; the report does not"]  # fmt: skip
    assert compare(model(node_row), {"t4": {0: [], 1: []}}) == [
        "t4: node.fabric_manager fail: 1 of 2 GPUs' fabric not trained"]  # fmt: skip
