"""What the report shows from the watch's side (issue 37 item 4): when each node was
validated and how old that is at the report's build, the GPU's serial in its row, and the
Xid codes of gpu.xid failures at a glance."""

from __future__ import annotations

import json

import pytest

from gpunode.report import build, markdown, overview

from .synthetic import ALL_GPU_CHECKS, ALL_NODE_CHECKS, result, write_cluster
from .test_html_scale import Tree, nodes_on_page

XIDS = "Xid 79, 48 x2; last 79 (fatal): GPU has fallen off the bus — reset the GPU"


@pytest.fixture
def model(tmp_path):
    d = write_cluster(tmp_path / "r")
    xid = result("gpu-x", "NVIDIA H100 80GB HBM3", 4,
                 {("gpu.xid", 1): ("fail", XIDS),
                  ("gpu.xid", 3): ("fail", "Xid 79 at 2026-11-22T07:12:09Z: fallen off the bus"),
                  ("gpu.xid", 2): ("warn", "Xid 13; last 13 (application): graphics exception")},
                 ALL_NODE_CHECKS, ALL_GPU_CHECKS)  # fmt: skip
    xid["started"] = "2026-11-22T05:30:00Z"
    (d / "gpu-x.json").write_text(json.dumps(xid))
    return build.model_from([str(d)], "2026-11-22T08:00:00Z")


@pytest.mark.parametrize("detail, codes", [
    (XIDS, [79, 48]),  # validate's detail: each code once, its count after it
    ("Xid 79 at 2026-11-22T07:12:09Z: GPU has fallen off the bus", [79]),
    ("Xid 13; last 13 (application): graphics exception", [13]),
    ("no Xid error in the kernel log", []),
])  # fmt: skip
def test_xid_codes_from_the_checks_detail(detail, codes):
    assert overview.xid_codes({"id": "gpu.xid", "status": "fail", "detail": detail}) == codes
    assert overview.xid_codes({"id": "gpu.ecc", "status": "fail", "detail": detail}) == []
    assert overview.xid_codes({"id": "gpu.xid", "status": "pass", "detail": detail}) == []


def test_the_model_has_each_nodes_age_and_the_xids(model):
    nodes = {n["node"]: n for n in model["nodes"]}
    assert nodes["gpu-x"]["age_s"] == 2 * 3600 + 30 * 60
    assert nodes["sim-a100-bookworm"]["age_s"] == 0
    assert "age_s" not in nodes["sim-down"]  # no result: never validated
    assert overview.xids(nodes["gpu-x"]) == [
        {"code": 48, "status": "fail", "gpus": [1]},
        {"code": 79, "status": "fail", "gpus": [1, 3]},
        {"code": 13, "status": "warn", "gpus": [2]},
    ]
    assert [e["code"] for e in overview.xids(nodes["gpu-x"], 3)] == [79]
    assert overview.age_text(9000) == "2 h 30 min" and overview.age_text(200000) == "2 d 7 h"
    assert overview.age_text(-5) == "in the future" and overview.age_text(None) == "?"


def test_the_page_shows_age_serial_and_xid_badges(model):
    from gpunode.report import html

    root = Tree(html.render(model)).root
    details = {d.attrs["data-node"]: d for d in nodes_on_page(root)}
    x = details["gpu-x"]
    when = x.first("summary").first("span", "when")
    assert when.content() == "validated 2026-11-22T05:30:00Z · 2 h 30 min before"
    assert "when" not in [s.attrs.get("class") for s in details["sim-down"].all("span")]
    badges = [b.content() for b in x.first("summary").all("span", "xid")]
    assert badges == ["Xid 48 · GPU 1", "Xid 79 · GPU 1, 3", "Xid 13 · GPU 2"]
    rows = {tr.attrs["data-gpu"]: tr.first("th") for tr in x.all("tr", "gpurow")}
    assert [b.content() for b in rows["3"].all("span", "xid")] == ["Xid 79"]
    assert [b.attrs["data-xid"] for b in rows["1"].all("span", "xid")] == ["48", "79"]
    serials = {i: th.first("small", "serial").content() for i, th in rows.items()}
    g = {str(g["index"]): g["serial"] for n in model["nodes"] if n["node"] == "gpu-x"
         for g in n["gpus"]}  # fmt: skip
    assert serials == {i: f"S/N {s}" for i, s in g.items()}
    # a folded node lists its GPUs' serials
    healthy = details["sim-a100-bookworm"]
    listed = [td.content() for td in healthy.first("table", "gpus").all("td", "serial")]
    assert len(listed) == 4 and all(s.startswith("16549220") for s in listed)


def test_summary_md_node_rows_say_when_and_the_xids(model):
    text = markdown.render(model)
    assert "| node | status | validated | driver | CUDA | GPUs | Xid |" in text
    row = next(line for line in text.splitlines() if line.startswith("| gpu-x |"))
    assert "| 2026-11-22T05:30:00Z (2 h 30 min before) |" in row
    assert row.endswith("| 48 (fail GPU 1), 79 (fail GPU 1, 3), 13 (warn GPU 2) |")
    down = next(line for line in text.splitlines() if line.startswith("| sim-down |"))
    assert down.startswith("| sim-down | unreachable | — |")
