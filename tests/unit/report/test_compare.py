"""`gpunode report --previous PATH` (issue 28): what changed since the previous report (new
failures with the checks newly failing, fixed nodes, nodes added and gone), from the previous
report's directory or report.json, or the previous run's result files; a bad one is one line
naming it, exit 2, and nothing written."""

from __future__ import annotations

import json

import pytest

from gpunode.cli.main import main
from gpunode.report import build, overview

from .synthetic import FAULTY, result, write_cluster
from .test_html_scale import EVIL_NODE, Tree


@pytest.fixture
def runs(tmp_path):
    """The previous run (the small cluster: the T4 node fails, sim-down unreachable) and
    this one: the T4 node fixed, the A100 node newly failing, a new failing node, sim-down
    still down."""
    before = write_cluster(tmp_path / "before")
    now = write_cluster(tmp_path / "now")
    (now / f"{FAULTY}.json").write_text(json.dumps(result(FAULTY, "Tesla T4", 2)))
    bad = result("sim-a100-bookworm", "NVIDIA A100-SXM4-80GB", 4,
                 {("gpu.lost", 2): ("fail", "GPU has fallen off the bus")})  # fmt: skip
    (now / "sim-a100-bookworm.json").write_text(json.dumps(bad))
    new = result(EVIL_NODE, "Tesla T4", 1, {("gpu.lost", 0): ("fail", "lost")})
    (now / "new.json").write_text(json.dumps(new))
    return before, now


def test_changes_new_failures_fixed_added(runs, tmp_path):
    before, now = runs
    prev = build.model_from([str(before)])
    model = build.model_from([str(now)])
    ch = overview.changes(model["nodes"], prev["nodes"])
    # in page order: failing nodes by name
    assert ch["new"] == [{"node": EVIL_NODE, "checks": ["gpu.lost"]},
                         {"node": "sim-a100-bookworm", "checks": ["gpu.lost"]}]  # fmt: skip
    assert ch["fixed"] == [FAULTY] and ch["still"] == ["sim-down"]
    assert ch["added"] == [EVIL_NODE] and ch["gone"] == []
    gone = overview.changes(model["nodes"][:1], prev["nodes"])["gone"]
    assert gone == sorted(
        n["node"] for n in prev["nodes"] if n["node"] != model["nodes"][0]["node"]
    )


@pytest.mark.parametrize("form", ["report dir", "report.json", "results dir", "results file"])
def test_cli_previous_report_or_results(runs, tmp_path, capsys, form):
    before, now = runs
    old = tmp_path / "old-reports"
    assert main(["report", str(before), "-o", str(old), "-q"]) == 1
    previous = {"report dir": old, "report.json": old / "report.json", "results dir": before,
                "results file": before / f"{FAULTY}.json"}[form]  # fmt: skip
    out = tmp_path / "reports"
    assert main(["report", str(now), "-o", str(out), "--previous", str(previous)]) == 1
    said = capsys.readouterr().out
    changes = json.loads((out / "report.json").read_text())["changes"]
    assert changes["previous"]["source"] == str(previous)
    if form == "results file":  # only the T4 node before: the others are new
        assert said.count("since the previous report: 3 new failure(s), 1 resolved (per check "
                          "and GPU); 3 node(s) newly failing, 1 fixed") == 1  # fmt: skip
        return
    assert ("since the previous report: 2 new failure(s), 1 resolved (per check and GPU); "
            "2 node(s) newly failing, 1 fixed") in said  # fmt: skip
    page = (out / "index.html").read_text()
    assert "<img" not in page  # the new node's hostile name stays text in the changes too
    root = Tree(page).root
    box = root.by_id("changes")
    new = box.by_id("new-failures")
    assert [a.content() for a in new.all("a")] == [EVIL_NODE, "sim-a100-bookworm"]
    assert new.content().count("(gpu.lost)") == 2
    assert [a.content() for a in box.by_id("fixed").all("a")] == [FAULTY]
    # each name links to its node on the page
    for a in box.all("a"):
        assert root.by_id(a.attrs["href"][1:]).attrs["data-node"] == a.content()


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda p: p / "nothing", "no such file or directory"),
        (lambda p: _write(p / "x.json", "{not json"), "is not JSON (Expecting property name"),
        (lambda p: _write(p / "d" / "a.json", '{"node": "x", "schema": "gpunode.validate/v1"}'),
         "neither a report (report.json) nor result files: "),
        (lambda p: _write(p / "r" / "report.json", '{"schema": "other/v1"}'),
         "schema is \"other/v1\"; expected 'gpunode.report/v1'"),
        (lambda p: _write(p / "report.json", '{"schema": "gpunode.report/v1", "nodes": 3}'),
         "nodes is not a list of the report's nodes"),
        (lambda p: _write(p / "report.json", "\xff"), "is not JSON"),
    ],
)  # fmt: skip
def test_cli_bad_previous_is_one_line_exit_2(runs, tmp_path, capsys, make, says):
    _, now = runs
    bad = make(tmp_path)
    out = tmp_path / "o"
    assert main(["report", str(now), "-o", str(out), "--previous", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"previous report {bad}: " in err
    assert says in err and "Traceback" not in err
    assert not out.exists()


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text.encode("latin-1"))
    return path.parent if path.parent.name in ("r", "d") else path


def test_no_previous_no_changes_section(runs, tmp_path):
    _, now = runs
    assert main(["report", str(now), "-o", str(tmp_path / "o"), "-q"]) == 1
    page = (tmp_path / "o" / "index.html").read_text()
    assert 'id="changes"' not in page
    assert "changes" not in json.loads((tmp_path / "o" / "report.json").read_text())


XID13 = "Xid 13 at 2026-11-22T07:50:00Z: graphics engine exception"


def test_a_new_failure_on_a_failing_node_is_new_per_check_and_gpu(tmp_path, capsys):
    """GPU 1 of the node failed gpu.xid before; now GPU 3 does too (a new fatal Xid) and
    GPU 1's ECC failure is gone: the node is still failing, and the change shows per check
    and GPU in report.json, first in summary.md, and on the page."""
    from .synthetic import ALL_GPU_CHECKS, ALL_NODE_CHECKS, XID79

    def doc(faults):
        return result("gpu-x", "NVIDIA H100 80GB HBM3", 4, faults, ALL_NODE_CHECKS,
                      ALL_GPU_CHECKS)  # fmt: skip

    before, now = tmp_path / "before", tmp_path / "now"
    for d, faults in ((before, {("gpu.xid", 1): ("fail", XID79),
                                ("gpu.ecc_uncorrectable", 1): ("fail", "3 uncorrected")}),
                      (now, {("gpu.xid", 1): ("fail", XID79), ("gpu.xid", 3): ("fail", XID13)})):
        d.mkdir()
        (d / "gpu-x.json").write_text(json.dumps(doc(faults)))
    prev, model = build.model_from([str(before)]), build.model_from([str(now)])
    ch = overview.changes(model["nodes"], prev["nodes"])
    assert ch["new"] == [] and ch["still"] == ["gpu-x"]  # the node failed both times
    got = [(e["change"], e["node"], e["check"], e["gpu"], e["status"]) for e in ch["failures"]]
    assert got == [("new", "gpu-x", "gpu.xid", 3, "fail"),
                   ("resolved", "gpu-x", "gpu.ecc_uncorrectable", 1, "pass")]  # fmt: skip
    assert ch["failures"][0]["detail"] == XID13 and ch["failures"][0]["was"] == "0"
    assert ch["failures"][1]["was"] == "3 uncorrected"
    # the same report again: nothing changed
    assert overview.changes(model["nodes"], model["nodes"])["failures"] == []

    out = tmp_path / "reports"
    assert main(["report", str(now), "-o", str(out), "--previous", str(before)]) == 1
    assert "1 new failure(s), 1 resolved (per check and GPU); 0 node(s) newly failing" in (
        capsys.readouterr().out)  # fmt: skip
    saved = json.loads((out / "report.json").read_text())["changes"]["failures"]
    assert saved == ch["failures"]
    md = (out / "summary.md").read_text().splitlines()
    assert md[2] == "## Since the previous report"
    assert "- new: gpu-x gpu.xid (GPU 3): Xid 13 at" in "\n".join(md[:8])
    assert ("- resolved: gpu-x gpu.ecc\\_uncorrectable (GPU 1): pass now (0); was: 3 "
            "uncorrected") in md  # fmt: skip
    assert md.index("## Since the previous report") < md.index("## Failures and warnings") \
        < md.index("## Nodes")  # fmt: skip
    root = Tree((out / "index.html").read_text()).root
    assert root.by_id("check-changes").content() == "per check and GPU: 1 new failure, 1 resolved"
    assert root.by_id("new-failures").content() == "no node newly failing"
    rows = [[td.content() for td in tr.all("td")]
            for tr in root.by_id("failure-changes").all("tr") if "data-change" in tr.attrs]  # fmt: skip
    assert [r[:4] for r in rows] == [["new", "gpu-x", "gpu.xid", "GPU 3"],
                                     ["resolved", "gpu-x", "gpu.ecc_uncorrectable", "GPU 1"]]  # fmt: skip


def test_a_resolved_failure_needs_the_check_to_have_run(runs):
    """A node unreachable now: its earlier failures are not resolved (nothing ran)."""
    before, _ = runs
    prev = build.model_from([str(before)])
    down = {"node": FAULTY, "status": "fail", "unreachable": True,
            "checks": [{"id": "node.reachable", "title": "Node reachable", "gpu": None,
                        "mig": None, "status": "fail", "detail": "ssh"}]}  # fmt: skip
    got = overview.failure_changes([down], prev["nodes"])
    assert [(e["change"], e["check"]) for e in got] == [("new", "node.reachable")]
