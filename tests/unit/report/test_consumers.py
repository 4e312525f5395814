"""Real consumers read the report: a JUnit library (junitparser) parses the XML and it
validates against the common JUnit schema (junit-10.xsd, see README.md); headless Chromium
renders the page, its computed cell colours are checked and a screenshot is saved as a test
artifact under build/artifacts/."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import xmlschema
from junitparser import JUnitXml

from gpunode.report import build

from .synthetic import FAULTY, FAULTY_GPU, write_cluster

HERE = Path(__file__).parent
ARTIFACTS = Path(__file__).resolve().parents[3] / "build" / "artifacts"
RGB = {  # pass and skip pale, so that fail and warn stand out at 64 nodes x 8 GPUs
    "pass": "rgb(227, 241, 228)",
    "warn": "rgb(249, 168, 37)",
    "fail": "rgb(198, 40, 40)",
    "skip": "rgb(238, 238, 238)",
}
CSP_META = re.compile(r'<meta http-equiv="Content-Security-Policy" content="[^"]*">')


def probed_page(page: str, probe: str) -> str:
    """The page with a probe script before </body>: its Content-Security-Policy (which
    lets only the page's own script run) taken out, the probe's job being to look."""
    assert CSP_META.search(page)
    return CSP_META.sub("", page).replace("</body>", probe)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("report")
    model = build.model_from([str(write_cluster(tmp / "results"))], "2026-11-22T08:00:00Z")
    build.write(model, str(tmp / "reports"))
    return tmp / "reports"


def test_junit_parsed_by_junitparser(report):
    xml = JUnitXml.fromfile(str(report / "junit.xml"))
    suites = {s.name: s for s in xml}
    assert set(suites) == {"sim-a100-bookworm", FAULTY, "sim-down"}
    failing = [(s.name, c.name) for s in xml for c in s if not c.is_passed and not c.is_skipped]
    assert failing == [
        ("sim-down", "node.reachable"),
        (FAULTY, f"gpu.ecc_uncorrectable[gpu{FAULTY_GPU}]"),
    ]
    t4 = suites[FAULTY]
    assert (t4.tests, t4.failures, t4.skipped, t4.errors) == (1 + 8 + 2 * 5, 1, 1, 0)
    skipped = [c for c in t4 if c.is_skipped]
    assert [c.name for c in skipped] == ["container.cuda"]
    assert "cuInit" in skipped[0].result[0].message
    merged = json.loads((report / "report.json").read_text())
    assert sum(s.tests for s in xml) == sum(len(n["checks"]) for n in merged["nodes"])


def test_junit_valid_against_the_common_schema(report):
    schema = xmlschema.XMLSchema(str(HERE / "junit-10.xsd"))
    schema.validate(str(report / "junit.xml"))  # raises with the offending element


def test_schema_rejects_what_it_should():
    """The schema is not vacuous: a testsuite without its required counts fails."""
    schema = xmlschema.XMLSchema(str(HERE / "junit-10.xsd"))
    assert not schema.is_valid('<testsuites><testsuite name="x"/></testsuites>')
    assert not schema.is_valid(
        '<testsuite name="x" tests="1" failures="0" errors="0" time="1.23456"/>'
    )


def _chromium() -> str:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium not found: run scripts/setup (Debian package chromium)", False)
    return exe


def _run_chromium(*args: str) -> str:
    proc = subprocess.run(
        [
            _chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


PROBE = """<script>
document.querySelectorAll('td.cell').forEach(function(td){
  var tr = td.parentNode;
  td.setAttribute('data-bg', getComputedStyle(td).backgroundColor);
  td.setAttribute('data-where', tr.getAttribute('data-node') + '|' +
    (tr.classList.contains('noderow') ? 'node' : tr.cells[0].firstChild.textContent));});
var bad = document.querySelector('tr.gpurow[data-gpu="%d"] td.cell.s-fail');
bad.click();
var p = document.getElementById('panel');
document.body.setAttribute('data-panel', p.textContent);
document.body.setAttribute('data-panel-class', p.className);
</script></body>"""


def test_chromium_renders_the_grid_with_its_colours(report, tmp_path):
    page = (report / "index.html").read_text()
    probed = tmp_path / "probe.html"
    probed.write_text(probed_page(page, PROBE % FAULTY_GPU))
    dom = _run_chromium("--virtual-time-budget=2000", "--dump-dom", probed.as_uri())
    cells = re.findall(
        r'<td class="cell s-(\w+)( sel)?" data-status="(\w+)" data-check="([^"]+)"'
        r'[^>]*data-bg="([^"]+)" data-where="([^"|]+)\|([^"]+)"',
        dom,
    )
    assert len(cells) > 20, dom[:2000]
    for cls, _, status, check, bg, node, row in cells:
        assert cls == status and bg == RGB[status], (node, row, check, status, bg)
    by = {(node, row, check): status for _, _, status, check, _, node, row in cells}
    assert by[(FAULTY, f"GPU {FAULTY_GPU}", "gpu.ecc_uncorrectable")] == "fail"
    assert by[(FAULTY, "GPU 0", "gpu.ecc_uncorrectable")] == "pass"
    assert by[("sim-down", "node", "node.reachable")] == "fail"
    assert by[(FAULTY, "node", "container.cuda")] == "skip"
    # the healthy node is folded to its check list: no grid of ticks
    assert not {s for (n, _, _), s in by.items() if n == "sim-a100-bookworm"}
    # a click on the failed cell shows its details in the panel
    panel = re.search(r'data-panel="([^"]*)"', dom)[1]
    assert f"{FAULTY} · GPU {FAULTY_GPU} · Uncorrectable ECC errors" in panel
    assert "12 volatile uncorrected ECC errors" in panel
    assert re.search(r'data-panel-class="s-fail"', dom)


def test_chromium_screenshot_artifact(report):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report.png"
    shot.unlink(missing_ok=True)
    _run_chromium(
        "--window-size=1400,1000", f"--screenshot={shot}", (report / "index.html").as_uri()
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


# ------------------------------------------------ hostile names and details (issue 17.7)

HOSTILE_DETAIL = (
    "esc \x1b[31mred\x1b[0m nul \x00 bell \x07 ff \x0c vt \x0b surrogate \ud800 fffe \ufffe"
    " | forged | cell |\n| forged-node | pass | 1 | 2 | 3 |\n"
    "<img src=x onerror=alert(1)> *bold* _em_ [link](http://x) `code` ~~gone~~ &lt;b&gt;"
)
HOSTILE_NODE = "node|x<b>*y*</b>"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory) -> Path:
    from .synthetic import result

    tmp = tmp_path_factory.mktemp("hostile")
    doc = result(
        HOSTILE_NODE, "Tesla T4 | <i>x</i>", 2, {("gpu.lost", 1): ("fail", HOSTILE_DETAIL)}
    )
    doc["hostname"] = "host\x01name"
    (tmp / "results").mkdir()
    (tmp / "results" / "n.json").write_text(json.dumps(doc))
    model = build.model_from([str(tmp / "results")], "2026-11-22T08:00:00Z")
    build.write(model, str(tmp / "reports"))
    return tmp / "reports"


def test_junit_with_control_characters_still_parses_and_validates(hostile):
    """Before: ElementTree wrote the control characters as they were and no XML parser
    (junitparser, CI systems) would read junit.xml at all."""
    xml = JUnitXml.fromfile(str(hostile / "junit.xml"))
    (suite,) = list(xml)
    assert suite.name == HOSTILE_NODE
    (failed,) = [c for c in suite if not c.is_passed and not c.is_skipped]
    message = failed.result[0].message
    assert "esc [31mred[0m nul  bell  ff  vt  surrogate \ufffd fffe  | forged" in message
    assert "<img src=x onerror=alert(1)>" in message  # text, as written: escaped by XML
    xmlschema.XMLSchema(str(HERE / "junit-10.xsd")).validate(str(hostile / "junit.xml"))


def test_markdown_values_stay_text_in_their_cell(hostile):
    """Before: names and details went into summary.md raw; a `|` split cells, a newline
    forged a table row, and HTML went through. Rendered by markdown-it (CommonMark + GFM
    tables), the table keeps one row per node of seven cells, the values are text."""
    from markdown_it import MarkdownIt

    text = (hostile / "summary.md").read_text()
    page = MarkdownIt("commonmark").enable("table").enable("strikethrough").render(text)
    body = page.split("<tbody>")[1].split("</tbody>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", body, re.S)
    assert len(rows) == 1, body
    cells = re.findall(r"<td>(.*?)</td>", rows[0], re.S)
    assert len(cells) == 7 and cells[0] == "node|x&lt;b&gt;*y*&lt;/b&gt;", cells
    assert cells[5] == "2x Tesla T4 | &lt;i&gt;x&lt;/i&gt;"
    assert "forged-node" not in body
    # the problem list: one item, the detail on one line, no markup made of it
    items = re.findall(r"<li>(.*?)</li>", page, re.S)
    assert len(items) == 1 and "\n" not in items[0]
    assert page.count("<strong>") == 1  # the verdict's own
    for tag in ("<img", "<em>", "<a ", "<code>", "<del>", "<b>", "<i>"):
        assert tag not in page, tag
    assert "&lt;img src=x onerror=alert(1)&gt; *bold* _em_ [link](http://x) `code`" in items[0]
    assert "&amp;lt;b&amp;gt;" in items[0]  # an entity in a detail stays the text "&lt;b&gt;"


# ------------------------------------------------ MIG devices (issue 20)

HOSTILE_PROFILE = "1g.10gb | x\n| forged | row |<b>\x01"


@pytest.fixture(scope="module")
def mig_report(tmp_path_factory) -> Path:
    from .synthetic import MIG_NODE, mig_result

    tmp = tmp_path_factory.mktemp("mig")
    write_cluster(tmp / "results")
    doc = mig_result(profile_of=lambda n: HOSTILE_PROFILE if n == 1 else ["3g.40gb", "", "1g.10gb"][n],
                     broken=2)  # fmt: skip
    (tmp / "results" / f"{MIG_NODE}.json").write_text(json.dumps(doc))
    model = build.model_from([str(tmp / "results")], "2026-11-22T08:00:00Z")
    build.write(model, str(tmp / "reports"))
    return tmp / "reports"


def test_junit_with_mig_devices_parses_and_validates(mig_report):
    from .synthetic import MIG_NODE

    xml = JUnitXml.fromfile(str(mig_report / "junit.xml"))
    suite = next(s for s in xml if s.name == MIG_NODE)
    names = [c.name for c in suite]
    assert [n for n in names if n.startswith("mig.isolation")] == [
        "mig.isolation[gpu1:0]", "mig.isolation[gpu1:1]", "mig.isolation[gpu1:2]"]  # fmt: skip
    failing = [c.name for c in suite if not c.is_passed and not c.is_skipped]
    assert failing == ["mig.isolation[gpu1:2]"]
    xmlschema.XMLSchema(str(HERE / "junit-10.xsd")).validate(str(mig_report / "junit.xml"))


def test_markdown_mig_table_keeps_its_cells(mig_report):
    from markdown_it import MarkdownIt

    text = (mig_report / "summary.md").read_text()
    page = MarkdownIt("commonmark").enable("table").render(text)
    tables = page.split("<table>")
    assert len(tables) == 3  # the nodes, the MIG devices
    mig = tables[2].split("<tbody>")[1].split("</tbody>")[0]
    rows = re.findall(r"<tr>(.*?)</tr>", mig, re.S)
    assert len(rows) == 3, mig
    cells = [re.findall(r"<td>(.*?)</td>", r, re.S) for r in rows]
    assert all(len(c) == 7 for c in cells), cells
    assert [c[2] for c in cells] == ["1:0", "1:1", "1:2"]
    assert cells[1][3] == "1g.10gb | x | forged | row |&lt;b&gt;"
    assert [c[6] for c in cells] == ["pass", "pass", "fail"]
    assert "<b>" not in page


def test_chromium_shows_mig_devices_under_their_gpu(mig_report, tmp_path):
    probe = """<script>
var rows = [];
document.querySelectorAll('tr[data-node="sim-a100-mig"]').forEach(function(tr){
  var th = tr.querySelector('th'); var r = th.getBoundingClientRect();
  rows.push([tr.className, th.firstChild.textContent, Math.round(r.top), Math.round(r.left),
             Math.round(parseFloat(getComputedStyle(th).paddingLeft))].join('|'));});
document.body.setAttribute('data-rows', rows.join(';'));
</script></body>"""
    probed = tmp_path / "probe.html"
    probed.write_text(probed_page((mig_report / "index.html").read_text(), probe))
    dom = _run_chromium("--virtual-time-budget=2000", "--dump-dom", probed.as_uri())
    rows = [r.split("|") for r in re.search(r'data-rows="([^"]*)"', dom)[1].split(";")]
    assert [(r[0], r[1]) for r in rows] == [
        ("noderow", "sim-a100-mig"), ("gpurow", "GPU 0"), ("gpurow", "GPU 1"),
        ("migrow", "MIG 1:0"), ("migrow", "MIG 1:1"), ("migrow", "MIG 1:2")]  # fmt: skip
    tops = [int(r[2]) for r in rows]
    assert tops == sorted(tops)  # in that order on the page: MIG devices under their GPU
    pad = {r[0]: int(r[4]) for r in rows}
    assert pad["migrow"] > pad["gpurow"]  # indented under it
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-mig.png"
    shot.unlink(missing_ok=True)
    _run_chromium("--window-size=1600,1200", f"--screenshot={shot}",
                  (mig_report / "index.html").as_uri())  # fmt: skip
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_promtool_reads_the_textfile_with_mig_devices(tmp_path):
    """The validate textfile of a node with MIG devices (hostile profile text included)
    passes `promtool check metrics` (Debian package prometheus)."""
    from gpunode.util.record import replace
    from gpunode.validate import output

    from ..validate.fakes import mig_result

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool not found: run scripts/setup (Debian package prometheus)", False)
    r = mig_result()
    r.gpus[1].mig[1] = replace(r.gpus[1].mig[1], profile=HOSTILE_PROFILE)
    text = output.textfile(r)
    assert "gpunode_mig_device_info{" in text
    proc = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
