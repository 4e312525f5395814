"""The four outputs from one model, and the set written as one (nothing lost on failure)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from gpunode.cli.main import main
from gpunode.report import build, html, junit, markdown

from .synthetic import FAULTY, FAULTY_GPU, write_cluster


@pytest.fixture
def model(tmp_path):
    return build.model_from([str(write_cluster(tmp_path / "results"))], "2026-11-22T08:00:00Z")


def cells(page: str) -> dict[tuple[str, str, str], str]:
    """(node, row, check) -> status, from the grid's rows (a row's node is its data-node,
    its name its header's first text, "node" for the node's own row) and cells."""
    out = {}
    for tr in re.finditer(r'<tr class="(\w+)[^"]*" data-node="([^"]+)"[^>]*>(.*?)</tr>', page, re.S):
        row = "node" if tr[1] == "noderow" else re.match(r"<th[^>]*>([^<]*)", tr[3])[1]
        for m in re.finditer(r'data-status="(\w+)" data-check="([^"]+)"', tr[3]):
            out[(tr[2], row, m[2])] = m[1]
    return out


def folded_checks(page: str, node: str) -> list[tuple[str, str, str]]:
    """A folded node's check list: (status, check, where) of each verdict."""
    d = re.search(rf'<details class="node k-\w+" [^>]*data-node="{node}".*?</details>', page, re.S)
    return re.findall(r'<tr><td class="s-(\w+)">\w+</td><td>([^<]*)</td><td>([^<]*)</td>', d[0])


def test_html_grid_cells_and_faulty_gpu_row(model):
    page = html.render(model)
    got = cells(page)
    assert got[(FAULTY, f"GPU {FAULTY_GPU}", "gpu.ecc_uncorrectable")] == "fail"
    assert got[(FAULTY, "GPU 0", "gpu.ecc_uncorrectable")] == "pass"
    assert got[(FAULTY, "node", "gpu.ecc_uncorrectable")] == "fail"  # node row sums GPUs up
    assert got[(FAULTY, "GPU 0", "gpu.persistence")] == "warn"
    assert got[("sim-down", "node", "node.reachable")] == "fail"
    # the healthy node is folded: no grid, its checks each verdict once with where
    assert not [k for k in got if k[0] == "sim-a100-bookworm"]
    healthy = folded_checks(page, "sim-a100-bookworm")
    assert ("skip", "container.cuda", "node") in healthy
    assert ("pass", "gpu.ecc_uncorrectable", "GPU 0-3") in healthy
    assert {st for st, _, _ in healthy} == {"pass", "skip"} and len(healthy) > 8
    # the GPU row's header: one line, its bus id whole, model and UUID a tooltip
    assert re.search(r'<th class="gpu bad" scope="row" title="00000000:0F:00.0 · Tesla T4 · GPU-'
                     r'[^"]+">GPU 1<small class="bus">00000000:0F:00.0</small><small>Tesla T4',
                     page)  # fmt: skip
    assert "http://" not in page and "https://" not in page and "<link" not in page
    assert "535.261.03" in page and "4x NVIDIA A100-SXM4-80GB" in page


def test_html_escapes_node_text(model):
    model["nodes"][0]["checks"][1]["detail"] = '<script>alert("x")</script>'
    page = html.render(model)
    assert '<script>alert("x")' not in page and "&lt;script&gt;" in page


def test_junit_one_testcase_per_node_and_check(model):
    root = ET.fromstring(junit.render(model))
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert set(suites) == {"sim-a100-bookworm", FAULTY, "sim-down"}
    t4 = suites[FAULTY]
    failed = [c.get("name") for c in t4.iter("testcase") if c.find("failure") is not None]
    assert failed == [f"gpu.ecc_uncorrectable[gpu{FAULTY_GPU}]"]
    assert t4.get("failures") == "1" and t4.get("skipped") == "1"
    down = [c.get("name") for c in suites["sim-down"].iter("testcase")]
    assert down == ["node.reachable"]
    total = sum(len(n["checks"]) for n in model["nodes"])
    assert root.get("tests") == str(total) == str(len(list(root.iter("testcase"))))


def test_markdown_summary(model):
    md = markdown.render(model)
    assert "**2 of 3 nodes failed**: sim-down, sim-t4-bookworm." in md
    assert f"- {FAULTY}: fail gpu.ecc\\_uncorrectable (GPU {FAULTY_GPU}): 12 volatile" in md
    assert "| sim-down | unreachable |" in md


def test_cli_writes_the_set_and_exits_1_on_a_failed_node(tmp_path, capsys):
    results = write_cluster(tmp_path / "r")
    out = tmp_path / "reports"
    assert main(["report", str(results), "-o", str(out)]) == 1
    assert sorted(os.listdir(out)) == sorted(build.FILES)
    assert capsys.readouterr().out.strip().endswith(f"report: {out}/index.html")
    merged = json.loads((out / "report.json").read_text())
    assert merged["schema"] == "gpunode.report/v1" and len(merged["nodes"]) == 3


def test_cli_exit_0_when_all_passed(tmp_path):
    results = write_cluster(tmp_path / "r")
    (results / "sim-t4-bookworm.json").unlink()
    (results / "sim-down.json").unlink()
    assert main(["report", str(results), "-o", str(tmp_path / "o"), "-q"]) == 0


def test_malformed_file_one_line_exit_2(tmp_path, capsys):
    results = write_cluster(tmp_path / "r")
    (results / "zz.json").write_text('{"node": "x", "schema": "gpunode.validate/v1"}')
    assert main(["report", str(results), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err == f"gpunode: error: {results}/zz.json: checks is null; expected a list of checks\n"
    assert not (tmp_path / "o").exists()


def test_unwritable_report_dir_keeps_the_old_report(tmp_path, capsys):
    results = write_cluster(tmp_path / "r")
    out = tmp_path / "reports"
    main(["report", str(results), "-o", str(out), "-q"])
    before = {f: (out / f).read_bytes() for f in build.FILES}
    (results / "sim-down.json").unlink()  # a different report would replace every file
    out.chmod(0o555)
    try:
        if os.access(out, os.W_OK):  # root: take away writing another way
            os.chmod(out, 0o755)
            (out / "junit.xml").unlink()
            (out / "junit.xml").mkdir()  # a file of the set cannot be replaced
            before.pop("junit.xml")
        assert main(["report", str(results), "-o", str(out)]) == 2
    finally:
        out.chmod(0o755)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpunode: error: report directory {out} ")
    assert "nothing was changed there" in err[0]
    assert {f: (out / f).read_bytes() for f in before} == before
    assert sorted(p for p in os.listdir(out) if p.startswith(".")) == []


def test_report_dir_is_a_file(tmp_path, capsys):
    results = write_cluster(tmp_path / "r")
    (tmp_path / "f").write_text("x")
    assert main(["report", str(results), "-o", str(tmp_path / "f")]) == 2
    assert "report directory" in capsys.readouterr().err


def test_usage_errors(tmp_path, capsys):
    assert main(["report"]) == 2
    assert main(["report", "--run"]) == 2
    assert main(["report", "--run", "-i", str(tmp_path / "none.yml")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == f"gpunode: error: report: inventory {tmp_path}/none.yml does not exist"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run the CLI as another user")
def test_report_dir_not_writable_for_the_user(tmp_path):
    """As an operator without write access to the report directory: one line, exit 2, the
    old report intact and nothing left behind."""
    import shutil
    import subprocess
    import sys
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="gpunode-report-"))
    try:
        base.chmod(0o755)
        results = write_cluster(base / "r")
        out = base / "reports"
        build.write(build.model_from([str(results)]), str(out))
        before = {f: (out / f).read_bytes() for f in build.FILES}
        for p in [results, *results.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        (results / "sim-down.json").unlink()
        src = Path(__file__).resolve().parents[3] / "src"
        proc = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
             "-m", "gpunode", "report", str(results), "-o", str(out)],
            env={"PYTHONPATH": str(src), "PATH": os.environ["PATH"]},
            capture_output=True, text=True, check=False, cwd="/",
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr == (
            f"gpunode: error: report directory {out} cannot be written (Permission denied); "
            "nothing was changed there\n"
        )
        assert {f: (out / f).read_bytes() for f in build.FILES} == before
        assert sorted(os.listdir(out)) == sorted(build.FILES)
    finally:
        shutil.rmtree(base)


def test_html_gpu_less_node_header_names_the_reason_not_unknown_versions():
    """A node without NVIDIA GPU has no driver, CUDA or gpunode to report: its row header
    says why (engine only), not "driver ? · CUDA max ?"."""
    from gpunode.report import results

    engine = {"id": "engine.active", "title": "Container engine answers", "status": "pass",
              "detail": "docker 26.1.5 answers"}  # fmt: skip
    cpu = {"node": "cpu", "no_gpu": True, "detail": results.NO_GPU, "checks": [engine]}
    model = results.merge([("cpu.json", results.check_result(cpu, "cpu.json"))])
    page = html.render(model)
    # folded (it passed): the line under its name is the info paragraph of its fold
    header = re.search(r'data-node="cpu".*?<p class="info">(.*?)</p>', page, re.S).group(1)
    assert results.NO_GPU in header
    assert "?" not in header and "driver" not in header


# ---------------------------------------------------------------- MIG devices under their GPU


@pytest.fixture
def mig_model(tmp_path):
    from .synthetic import write_mig_cluster

    return build.model_from([str(write_mig_cluster(tmp_path / "r"))], "2026-11-22T08:00:00Z")


def test_results_keep_mig_devices_and_the_mig_of_checks(mig_model):
    from .synthetic import MIG_NODE

    n = next(n for n in mig_model["nodes"] if n["node"] == MIG_NODE)
    assert [m["profile"] for m in n["gpus"][1]["mig"]] == ["3g.40gb", "2g.20gb", "1g.10gb"]
    iso = [(c["gpu"], c["mig"], c["status"]) for c in n["checks"] if c["id"] == "mig.isolation"]
    assert iso == [(1, 0, "pass"), (1, 1, "pass"), (1, 2, "fail")]
    assert all(c["mig"] is None for c in n["checks"] if c["id"] != "mig.isolation")
    col = next(c for c in mig_model["columns"] if c["id"] == "mig.isolation")
    assert col["per_gpu"] is True
    other = next(n for n in mig_model["nodes"] if n["node"] == "sim-a100-bookworm")
    assert all(g["mig"] == [] for g in other["gpus"])  # results without MIG keys still read


def test_html_mig_rows_under_their_gpu(mig_model):
    page = html.render(mig_model)
    rows = re.findall(r'<tr class="(\w+)[^"]*" data-node="sim-a100-mig"(?: data-gpu="(\d)")?'
                      r'(?: data-mig="(\d)")?', page)  # fmt: skip
    assert rows == [("noderow", "", ""), ("gpurow", "0", ""), ("gpurow", "1", ""),
                    ("migrow", "1", "0"), ("migrow", "1", "1"), ("migrow", "1", "2")]  # fmt: skip
    mig_row = re.search(r'<tr class="migrow" data-node="sim-a100-mig" data-gpu="1" '
                        r'data-mig="2">(.*?)</tr>', page, re.S).group(1)  # fmt: skip
    assert re.search(r'<th class="mig bad" scope="row" title="MIG-[^"]+">MIG 1:2<small>1g.10gb · '
                     r"30720 MiB · GI 3 · CI 0", mig_row)  # fmt: skip
    assert cells(page)[("sim-a100-mig", "MIG 1:2", "mig.isolation")] == "fail"
    gpu_row = re.search(r'<tr class="gpurow" data-node="sim-a100-mig" data-gpu="1">(.*?)</tr>',
                        page, re.S).group(1)  # fmt: skip
    assert 'data-check="mig.isolation"' not in gpu_row  # each verdict on its own row
    assert "<td>mig.isolation</td><td>MIG 1:2</td><td>1:2: NVML lists MIG devices" in page


def test_junit_and_markdown_name_the_mig_device(mig_model):
    root = ET.fromstring(junit.render(mig_model))
    suite = next(s for s in root if s.get("name") == "sim-a100-mig")
    names = [c.get("name") for c in suite.iter("testcase")]
    assert "mig.isolation[gpu1:0]" in names and "mig.layout[gpu1]" in names
    failed = [c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failed == ["mig.isolation[gpu1:2]"]
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["gpu1:1"].startswith("MIG 2g.20gb MIG-")
    text = markdown.render(mig_model)
    assert "## MIG devices" in text
    assert "| sim-a100-mig | 1 NVIDIA A100-SXM4-80GB | 1:2 | 1g.10gb | 30720 MiB |" in text
    assert "- sim-a100-mig: fail mig.isolation (MIG 1:2): 1:2: NVML lists" in text


@pytest.mark.parametrize(
    ("doc_change", "message"),
    [
        (lambda d: d["gpus"][1].update(mig="x"), "gpus[1].mig is \"x\"; expected a list of MIG"),
        (lambda d: d["gpus"][1]["mig"][0].update(index="0"),
         'gpus[1].mig[0].index is "0"; expected the MIG device\'s n'),
        (lambda d: d["checks"][-1].update(mig=True), "mig is true; expected a MIG device's n"),
        (lambda d: d["checks"][-1].update(gpu=None), "mig is 2; expected a MIG device's n"),
    ],
)  # fmt: skip
def test_malformed_mig_is_one_line(tmp_path, doc_change, message):
    from gpunode.report.results import ResultError, load

    from .synthetic import mig_result

    doc = mig_result()
    doc_change(doc)
    path = tmp_path / "n.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ResultError) as err:
        load(str(path))
    assert message in str(err.value) and "\n" not in str(err.value)
