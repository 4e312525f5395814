"""Result files read, checked and merged: bad files refused with one line naming the file."""

from __future__ import annotations

import json

import pytest

from gpunode.report import results
from gpunode.report.build import model_from

from .synthetic import FAULTY, FAULTY_GPU, cluster, result, write_cluster


def test_merge_sorts_nodes_adds_reachability_and_counts(tmp_path):
    model = model_from([str(write_cluster(tmp_path / "r"))])
    names = [n["node"] for n in model["nodes"]]
    assert names == ["sim-a100-bookworm", "sim-down", FAULTY]
    status = {n["node"]: n["status"] for n in model["nodes"]}
    assert status == {"sim-a100-bookworm": "pass", "sim-down": "fail", FAULTY: "fail"}
    assert model["summary"]["failed"] == ["sim-down", FAULTY]
    down = model["nodes"][1]
    assert down["unreachable"] and down["checks"][0]["id"] == "node.reachable"
    assert down["checks"][0]["status"] == "fail"
    first = model["nodes"][0]["checks"][0]
    assert (first["id"], first["status"]) == ("node.reachable", "pass")
    cols = {c["id"]: c["per_gpu"] for c in model["columns"]}
    assert cols["gpu.ecc_uncorrectable"] is True and cols["engine.active"] is False
    ecc = [c for c in model["nodes"][2]["checks"] if c["id"] == "gpu.ecc_uncorrectable"]
    assert [(c["gpu"], c["status"]) for c in ecc] == [(0, "pass"), (FAULTY_GPU, "fail")]


def test_summary_counts_are_the_checks_the_results_hold(tmp_path):
    """Counted independently from the documents written: each result's checks, an
    unreachable node's one fail; not the report's own node.reachable pass ("results
    received", one per node with a result: the counts were one pass off per node)."""
    from gpunode.report import markdown

    from .synthetic import mig_result, write_mig_cluster

    docs = [*cluster().values(), mig_result(broken=2)]
    want = dict.fromkeys(results.STATUSES, 0)
    for doc in docs:
        for c in doc.get("checks") or [{"status": "fail"}]:  # unreachable: its one fail
            want[c["status"]] += 1
    assert sum(sum(d["summary"].values()) for d in docs if "summary" in d) == sum(want.values()) - 1
    model = model_from([str(write_mig_cluster(tmp_path / "r"))])
    assert model["summary"]["checks"] == want
    counts = ", ".join(f"{v} {k}" for k, v in want.items())
    assert f"Checks: {counts}." in markdown.render(model)


def test_healthy_node_status_is_its_worst_check():
    model = results.merge([("a.json", results.check_result(result("n", "T4", 1), "a.json"))])
    assert model["nodes"][0]["status"] == "pass"  # container.cuda skipped: allowed
    assert model["summary"]["failed"] == []


BAD = [
    ("[]", "expected a JSON object, found list"),
    ('{"node": "n", "schema": "x/v9", "checks": []}', 'schema is "x/v9"; expected'),
    ('{"schema": "gpunode.validate/v1", "checks": []}', "node is null; expected the node's name"),
    (
        '{"schema": "gpunode.validate/v1", "node": "n", "checks": {}}',
        "checks is {}; expected a list",
    ),
    (
        '{"schema": "gpunode.validate/v1", "node": "n", "checks": [{"id": "a", "status": "ok"}]}',
        'checks[0].status is "ok"; expected one of pass, warn, fail, skip',
    ),
    (
        '{"schema": "gpunode.validate/v1", "node": "n", "checks": [{"status": "pass"}]}',
        "checks[0].id is null; expected a dotted check id",
    ),
    (
        '{"schema": "gpunode.validate/v1", "node": "n", '
        '"checks": [{"id": "a", "status": "pass", "gpu": "1"}]}',
        'checks[0].gpu is "1"; expected a GPU index or null',
    ),
    ("{not json", "is not JSON"),
    ("\xff", "is not JSON"),
]


@pytest.mark.parametrize(("text", "message"), BAD)
def test_malformed_file_is_named_with_the_problem(tmp_path, text, message):
    f = tmp_path / "bad.json"
    f.write_bytes(text.encode("latin-1"))
    with pytest.raises(results.ResultError) as exc:
        results.load(str(f))
    line = str(exc.value)
    assert line.startswith(f"{f}: ") and message in line and "\n" not in line


def test_duplicate_node_names_both_files(tmp_path):
    doc = json.dumps(result("n1", "T4", 1))
    (tmp_path / "a.json").write_text(doc)
    (tmp_path / "b.json").write_text(doc)
    with pytest.raises(results.ResultError, match=r"b\.json: node 'n1' is also in .*a\.json"):
        model_from([str(tmp_path)])


def test_no_files_and_missing_path(tmp_path):
    with pytest.raises(results.ResultError, match="no result files"):
        results.result_files([str(tmp_path)])
    with pytest.raises(results.ResultError, match=r"nope\.json: no such file"):
        results.result_files([str(tmp_path / "nope.json")])


def test_could_not_run_entry_is_a_failed_row():
    doc = results.check_result({"node": "n", "error": "gpunode: error: no Docker"}, "x")
    model = results.merge([("x", doc)])
    ids = [(c["id"], c["status"]) for c in model["nodes"][0]["checks"]]
    assert ids == [("node.reachable", "pass"), ("node.validate", "fail")]
    assert model["nodes"][0]["error"] == "gpunode: error: no Docker"


def test_synthetic_cluster_is_what_the_tests_say():
    assert set(cluster()) == {"sim-a100-bookworm.json", "sim-t4-bookworm.json", "sim-down.json"}


def test_validate_bad_input_json_is_a_failed_row():
    """`gpunode validate --json` with bad input prints {"error": "bad_input", "detail": ...}."""
    doc = {"schema": "gpunode.validate/v1", "node": "n1", "error": "bad_input",
           "detail": "--expect-gpus: 'x' is not a GPU count", "exit_code": 2}  # fmt: skip
    node = results.merge([("x", results.check_result(doc, "x"))])["nodes"][0]
    assert node["status"] == "fail" and node["error"] == "--expect-gpus: 'x' is not a GPU count"
    assert node["checks"][-1]["id"] == "node.validate"


def test_gpu_less_node_is_a_row_of_skips_with_the_reason_and_its_engine_check():
    """A node without NVIDIA GPU (engine only, no gpunode): the playbook's engine check, and
    every other column a skip saying why; the node passes, the engine's failure fails it."""
    engine = {"id": "engine.active", "title": "Container engine answers", "status": "pass",
              "detail": "docker 26.1.5 answers"}  # fmt: skip
    cpu = {"node": "cpu", "no_gpu": True, "detail": results.NO_GPU, "checks": [engine]}
    gpu = results.check_result(result("gpu", "T4", 1), "gpu.json")
    model = results.merge([("cpu.json", results.check_result(cpu, "cpu.json")), ("gpu.json", gpu)])
    row = model["nodes"][0]
    assert row["node"] == "cpu" and row["status"] == "pass"
    by = {c["id"]: c for c in row["checks"]}
    assert set(by) == {c["id"] for c in model["columns"]}  # every column has a cell
    assert by["engine.active"]["status"] == "pass"
    skipped = [c for c in row["checks"] if c["id"] not in ("engine.active", "node.reachable")]
    assert skipped and {(c["status"], c["detail"]) for c in skipped} == {("skip", results.NO_GPU)}
    # the columns keep the validated node's order; GPU-less rows add none
    assert [c["id"] for c in model["columns"]] == [c["id"] for c in model["nodes"][1]["checks"]]
    broken = {**cpu, "checks": [{**engine, "status": "fail", "detail": "docker: not running"}]}
    model = results.merge([("cpu.json", results.check_result(broken, "cpu.json"))])
    assert model["nodes"][0]["status"] == "fail"


@pytest.mark.parametrize(
    ("engine", "status", "detail"),
    [
        ({"name": "docker", "rc": 0, "stdout": "26.1.5\n", "stderr": ""}, "pass",
         "docker 26.1.5 answers"),
        ({"name": "podman", "rc": 125, "stdout": "",
          "stderr": "Error: cannot connect to Podman socket\n"}, "fail",
         "podman: Error: cannot connect to Podman socket (rc 125)"),
    ],
)  # fmt: skip
def test_gpu_less_node_engine_answer_is_judged_here(engine, status, detail):
    """The playbook hands over the engine's answer as it came (gpunode is not on that node);
    the report judges it by engine.active's one rule (gpunode.util.enginecheck)."""
    cpu = {"node": "cpu", "no_gpu": True, "engine": engine}
    row = results.merge([("cpu.json", results.check_result(cpu, "cpu.json"))])["nodes"][0]
    by = {c["id"]: c for c in row["checks"]}
    assert (by["engine.active"]["status"], by["engine.active"]["detail"]) == (status, detail)
    assert by["engine.active"]["title"] == "Container engine answers"
    assert row["status"] == status and row["no_gpu"]


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        (
            "docker",
            'cpu.json: engine is "docker"; expected the engine\'s answer {name, rc, stdout, stderr}',
        ),
        (
            {"name": "docker"},
            "cpu.json: engine.rc is null; expected the engine command's exit status",
        ),
        ({"name": "", "rc": 0}, 'cpu.json: engine.name is ""; expected the engine\'s name'),
    ],
)
def test_gpu_less_node_with_a_malformed_engine_answer_is_refused(engine, message):
    with pytest.raises(results.ResultError) as exc:
        results.check_result({"node": "cpu", "no_gpu": True, "engine": engine}, "cpu.json")
    assert str(exc.value) == message


def results_file(path, entries, schema=results.RESULTS_SCHEMA):
    """A results file (what playbooks/validate.yml writes): every node's entry in one."""
    path.write_text(json.dumps({"schema": schema, "results": entries}))
    return path


def stdin(monkeypatch, data: bytes, tty: bool = False) -> None:
    import io
    import sys

    stream = io.TextIOWrapper(io.BytesIO(data), encoding="utf-8")
    monkeypatch.setattr(stream, "isatty", lambda: tty)
    monkeypatch.setattr(sys, "stdin", stream)


def test_results_file_is_the_same_report_as_the_per_node_files(tmp_path):
    per_node = model_from([str(write_cluster(tmp_path / "r"))], "2026-11-22T08:00:00Z")
    f = results_file(tmp_path / "all.json", list(cluster().values()))
    loaded = results.load(str(f))
    assert [s for s, _ in loaded] == [f"{f} results[{i}]" for i in range(3)]
    combined = model_from([str(f)], "2026-11-22T08:00:00Z")
    strip = [{k: v for k, v in n.items() if k != "source"} for n in combined["nodes"]]
    assert strip == [{k: v for k, v in n.items() if k != "source"} for n in per_node["nodes"]]
    assert {k: v for k, v in combined.items() if k != "nodes"} == {
        k: v for k, v in per_node.items() if k != "nodes"
    }
    # in a directory, beside per-node files of other nodes, it is read as every node's
    d = tmp_path / "d"
    d.mkdir()
    results_file(d / "results.json", [cluster()["sim-down.json"]])
    (d / "n1.json").write_text(json.dumps(result("n1", "T4", 1)))
    assert [n["node"] for n in model_from([str(d)])["nodes"]] == ["n1", "sim-down"]


def test_results_file_from_standard_input(tmp_path, monkeypatch, capsys):
    from gpunode.cli.main import main

    doc = {"schema": results.RESULTS_SCHEMA, "results": list(cluster().values())}
    stdin(monkeypatch, json.dumps(doc).encode())
    out = tmp_path / "o"
    assert main(["report", "-", "-o", str(out), "-q"]) == 1  # a node failed
    merged = json.loads((out / "report.json").read_text())
    assert [n["source"] for n in merged["nodes"]] == [
        "stdin results[0]", "stdin results[2]", "stdin results[1]"]  # fmt: skip
    stdin(monkeypatch, b"", tty=True)  # nobody piped anything in: do not wait for it
    assert main(["report", "-", "-o", str(tmp_path / "o2")]) == 2
    assert capsys.readouterr().err == (
        "gpunode: error: stdin: is a terminal; pipe the results in, or name result files\n"
    )
    with pytest.raises(results.ResultError, match=r"standard input \(-\) is named more than once"):
        results.result_files(["-", str(tmp_path), "-"])


GOOD = result("n-good", "T4", 1)
BAD_ENTRIES = [
    ({"schema": "gpunode.results/v9", "results": [GOOD]},
     'all.json: schema is "gpunode.results/v9"; expected \'gpunode.results/v1\' for a file of results'),
    ({"results": [GOOD]},
     "all.json: schema is null; expected 'gpunode.results/v1' for a file of results"),
    ({"schema": "gpunode.results/v1", "results": []},
     "all.json: results is an empty list; expected a list of the nodes' results"),
    ({"schema": "gpunode.results/v1", "results": {"n": GOOD}},
     "all.json: results is a JSON object; expected a list of the nodes' results"),
    ({"schema": "gpunode.results/v1"},
     "all.json: results is missing or null; expected a list of the nodes' results"),
    # one bad entry among good ones: the file, the entry and its node are named
    ({"schema": "gpunode.results/v1",
      "results": [GOOD, {**GOOD, "node": "n-bad", "checks": [{"id": "a", "status": "ok"}]}]},
     "all.json results[1] (node 'n-bad'): checks[0].status is \"ok\"; expected one of pass, "
     "warn, fail, skip"),
    ({"schema": "gpunode.results/v1", "results": [GOOD, {"checks": []}]},
     "all.json results[1]: node is null; expected the node's name"),
    ({"schema": "gpunode.results/v1", "results": [GOOD, "n2"]},
     "all.json results[1]: expected a JSON object, found str"),
    ({"schema": "gpunode.results/v1", "results": [GOOD, {**GOOD, "schema": "x/v1"}]},
     "all.json results[1] (node 'n-good'): schema is \"x/v1\"; expected 'gpunode.validate/v1'"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "message"), BAD_ENTRIES)
def test_malformed_results_file_names_the_file_and_the_entry(tmp_path, capsys, doc, message):
    from gpunode.cli.main import main

    f = tmp_path / "all.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(results.ResultError) as exc:
        results.load(str(f))
    assert str(exc.value) == f"{tmp_path}/{message}" and "\n" not in str(exc.value)
    out = tmp_path / "o"
    assert main(["report", str(f), "-o", str(out)]) == 2  # nothing is written
    cap = capsys.readouterr()
    assert cap.err == f"gpunode: error: {exc.value}\n" and not out.exists()


def test_results_file_entry_also_in_another_file_names_both(tmp_path):
    f = results_file(tmp_path / "all.json", [GOOD, result("n2", "T4", 1), GOOD])
    with pytest.raises(results.ResultError) as exc:
        model_from([str(f)])
    assert str(exc.value) == f"{f} results[2]: node 'n-good' is also in {f} results[0]"
    (tmp_path / "n2.json").write_text(json.dumps(result("n2", "T4", 1)))
    results_file(f, [GOOD, result("n2", "T4", 1)])
    with pytest.raises(
        results.ResultError, match=r"n2\.json: node 'n2' is also in .*all\.json results\[1\]"
    ):
        model_from([str(tmp_path)])


def test_a_result_file_nested_without_end_is_one_line(tmp_path):
    """A node's result file is the node's to write: 100,000 '[' make json.loads recurse until
    RecursionError, caught as one line (and each string is scanned once: the load is
    linear in the file)."""
    f = tmp_path / "n1.json"
    f.write_text('{"schema": ' + "[" * 100_000)
    with pytest.raises(results.ResultError) as exc:
        results.load(str(f))
    assert "is nested too deeply to be a result" in str(exc.value)
    assert "\n" not in str(exc.value)


def test_the_reports_own_json_is_named_for_what_it_is(tmp_path, capsys):
    """Before: `gpunode report report.json` said "node is null; expected the node's name"."""
    from gpunode.cli.main import main

    out = tmp_path / "o"
    assert main(["report", str(write_cluster(tmp_path / "r")), "-o", str(out), "-q"]) == 1
    report = out / "report.json"
    capsys.readouterr()
    for given in (report, out):  # the file, or the report directory holding it
        assert main(["report", str(given), "-o", str(tmp_path / "o2")]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"gpunode: error: {report}: is a cluster report (schema \"gpunode.report/v1\": "
            "`gpunode report`'s report.json), not results; accepted: a node's `gpunode "
            "validate --json` result (gpunode.validate/v1) or a results file "
            "(gpunode.results/v1, what playbooks/validate.yml writes); a report goes to "
            "--previous\n"
        )
    assert not (tmp_path / "o2").exists()
    doc = json.loads(report.read_text())
    del doc["schema"]  # by its shape too
    report.write_text(json.dumps(doc))
    with pytest.raises(results.ResultError, match=r"is a cluster report \(nodes and summary:"):
        results.load(str(report))


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"schema": "gpunode.report/v2", "nodes": []}, 'is a cluster report (schema "gpunode.'
                                                       'report/v2": `gpunode report`'),
        ({"schema": "x/v9", "checks": []}, 'is a document of schema "x/v9" without a node; '
                                           "accepted: a node's `gpunode validate --json` result"),
        ({"checks": [], "gpus": []}, "is a JSON object with no node and no schema (keys: "
                                     "checks, gpus); accepted: a node's"),
        ({}, "is a JSON object with no node and no schema (keys: none); accepted: a node's"),
    ],
)
def test_an_object_that_names_no_node_is_said_for_what_it_is(tmp_path, doc, message):
    f = tmp_path / "x.json"
    f.write_text(json.dumps(doc))
    with pytest.raises(results.ResultError) as exc:
        results.load(str(f))
    line = str(exc.value)
    assert line.startswith(f"{f}: {message}") and "\n" not in line, line
