"""tests/infra/smi.py, which reads nvidia-smi's views and compares them with NVML, held to
recordings of the real nvidia-smi on simulated nodes (nvidia-smi/README.md): each
comparison agrees with the inventory recorded beside the output, and names the difference
once the inventory says something else (so the checks tests/infra/test_nvidia_smi.py and
tests/integration run can fail)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from tests.infra import smi

REC = Path(__file__).with_name("nvidia-smi")


def rec(profile: str, view: str) -> str:
    return (REC / f"{profile}.{view}").read_text()


def inventory(profile: str) -> dict:
    return json.loads(rec(profile, "inventory.json"))


@pytest.mark.parametrize("profile", ["t4x2-faulty", "a100x2-mig", "h100x8-degraded"])
def test_recorded_views_agree_with_nvml(profile):
    inv = inventory(profile)
    assert smi.compare_listing(rec(profile, "L.txt"), inv) == []
    assert smi.compare_query(rec(profile, "query.csv"), inv) == []
    assert smi.compare_xml(rec(profile, "q.xml"), inv) == []
    assert smi.compare_topo(rec(profile, "topo.txt"), inv) == []
    assert smi.compare_nvlink(rec(profile, "nvlink.txt"), inv) == []


def test_parsers_read_the_views():
    gpus = smi.listing(rec("a100x2-mig", "L.txt"))
    assert [(g["index"], g["name"]) for g in gpus] == [(0, "NVIDIA A100-SXM4-80GB")] * 1 + [
        (1, "NVIDIA A100-SXM4-80GB")
    ]
    assert [m[0] for m in gpus[0]["migs"]] == ["3g.40gb", "2g.20gb", "1g.10gb"] and not gpus[1][
        "migs"
    ]
    cols, rows = smi.topo(rec("h100x8-degraded", "topo.txt"))
    assert cols == [f"GPU{i}" for i in range(8)] and rows["GPU4"][0] == "NV17"
    assert rows["GPU0"][0] == "X" and rows["GPU0"][1] == "NV18"
    links = smi.nvlink_status(rec("h100x8-degraded", "nvlink.txt"))
    assert sorted(links) == list(range(8)) and links[4][0] == "<inactive>"
    assert (
        links[4][1] == "26.562 GB/s" and smi.nvlink_status(rec("t4x2-faulty", "nvlink.txt")) == {}
    )
    assert smi.gi_rows(rec("a100x2-mig", "lgi.txt")) == [(0, "1g.10gb", 9), (0, "2g.20gb", 3),
                                                         (0, "3g.40gb", 2)]  # fmt: skip
    assert smi.ci_rows(rec("a100x2-mig", "lci.txt")) == [(0, 2, "3g.40gb", 0), (0, 3, "2g.20gb", 0),
                                                         (0, 9, "1g.10gb", 0)]  # fmt: skip
    assert smi.csv_rows(rec("t4x2-faulty", "query.csv"))[1][6] == "2"  # GPU 1's ECC errors


def changed(profile: str, change) -> dict:
    inv = copy.deepcopy(inventory(profile))
    change(inv)
    return inv


def test_each_comparison_names_what_nvml_says_otherwise():
    t4 = "t4x2-faulty"
    # another UUID for GPU 1; another ECC count; no pending retirement; another name
    inv = changed(
        t4, lambda i: i["gpus"][1].update(uuid="GPU-00000000-0000-0000-0000-000000000000")
    )
    assert "-L UUIDs" in smi.compare_listing(rec(t4, "L.txt"), inv)[0]
    inv = changed(t4, lambda i: i["gpus"][1]["ecc_errors"].update(uncorrected_volatile=0))
    assert smi.compare_query(rec(t4, "query.csv"), inv)[0].startswith("--query-gpu GPU 1:")
    assert "uncorrectable ECC" in smi.compare_xml(rec(t4, "q.xml"), inv)[0]
    inv = changed(t4, lambda i: i["gpus"][1]["retired_pages"].update(pending=False))
    assert "retired pages" in smi.compare_xml(rec(t4, "q.xml"), inv)[0]
    inv = changed(t4, lambda i: i["gpus"][0].update(name="Tesla T5"))
    assert len(smi.compare_listing(rec(t4, "L.txt"), inv)) == 1
    assert "not well-formed" in smi.compare_xml("<nvidia_smi_log><gpu>", inventory(t4))[0]
    # a MIG device NVML has that nvidia-smi does not list, and one instance less
    mig = "a100x2-mig"
    inv = changed(mig, lambda i: i["gpus"][0]["mig_devices"].pop())
    assert "MIG devices" in smi.compare_listing(rec(mig, "L.txt"), inv)[0]
    diffs = smi.compare_mig(rec(mig, "lgi.txt"), rec(mig, "lci.txt"), inv)
    assert [d.split(":")[0] for d in diffs] == ["mig -lgi", "mig -lci"]
    # NVLinks: another link down than nvidia-smi shows; a GPU without NVLink in NVML
    h100 = "h100x8-degraded"
    inv = changed(h100, lambda i: i["gpus"][4]["nvlinks"].update({"0": True, "1": False}))
    assert smi.compare_nvlink(rec(h100, "nvlink.txt"), inv) == [
        "nvlink -s GPU 4: inactive [0], NVML down [1]"
    ]
    inv = changed(h100, lambda i: i["gpus"][2].update(nvlinks={}))
    assert "GPU2/GPU0" in " ".join(smi.compare_topo(rec(h100, "topo.txt"), inv))
    # the fabric: trained per NVML, not started per nvidia-smi
    inv = changed(h100, lambda i: i["gpus"][0]["fabric"].update(state=3))
    assert (
        "fabric state: nvidia-smi Not Started, NVML Completed"
        in smi.compare_xml(rec(h100, "q.xml"), inv)[0]
    )
