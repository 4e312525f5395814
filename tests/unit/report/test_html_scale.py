"""The HTML page at 64 nodes x 8 GPUs (issue 21): failures first, healthy nodes folded, the
summary of which checks fail where, the filter's markup, the Content-Security-Policy, and
hostile values escaped in the new places. The page is read with html.parser (as a browser
tokenizes it), not by regular expressions; headless Chromium runs the filter."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpunode.report import build, html, overview

from .synthetic import (
    ALL_GPU_CHECKS,
    ALL_NODE_CHECKS,
    XID79,
    large_name,
    mig_result,
    result,
    write_large_cluster,
)


class Element:
    def __init__(self, tag: str, attrs: dict, parent: Element | None):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.parts: list[str | Element] = []  # text and elements, in document order

    @property
    def children(self) -> list[Element]:
        return [p for p in self.parts if isinstance(p, Element)]

    def all(self, tag: str | None = None, cls: str | None = None):
        for c in self.children:
            if (tag is None or c.tag == tag) and (
                cls is None or cls in (c.attrs.get("class") or "").split()
            ):
                yield c
            yield from c.all(tag, cls)

    def first(self, tag=None, cls=None) -> Element:
        return next(self.all(tag, cls))

    def own_text(self) -> str:
        return "".join(p for p in self.parts if isinstance(p, str))

    def content(self) -> str:
        return "".join(p if isinstance(p, str) else p.content() for p in self.parts)

    def by_id(self, ident: str) -> Element:
        return next(e for e in self.all() if e.attrs.get("id") == ident)


VOID = {"meta", "br", "col", "img", "input", "link", "hr"}


class Tree(HTMLParser):
    """The page as elements (tags, attributes decoded as a browser decodes them, text)."""

    def __init__(self, page: str):
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {}, None)
        self.at = self.root
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        e = Element(tag, dict(attrs), self.at)
        self.at.parts.append(e)
        if tag not in VOID:
            self.at = e

    def handle_endtag(self, tag):
        e = self.at
        while e is not None and e.tag != tag:
            e = e.parent
        if e is not None and e.parent is not None:
            self.at = e.parent

    def handle_data(self, data):
        self.at.parts.append(data)


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("large")
    model = build.model_from([str(write_large_cluster(tmp / "results"))], "2026-11-22T08:00:00Z")
    page = html.render(model)
    return model, page, Tree(page).root


def nodes_on_page(root: Element) -> list[Element]:
    return list(root.all("details", "node"))


FAILED = {large_name(i) for i in (5, 17, 31, 40, 60)}
WARNED = {large_name(i) for i in (23, 47)}
DOWN = large_name(52)


def test_nodes_worst_first_then_by_name(large):
    model, _, root = large
    shown = [(d.attrs["data-status"], d.attrs["data-node"]) for d in nodes_on_page(root)]
    assert len(shown) == 64
    statuses = [s for s, _ in shown]
    assert statuses == ["fail"] * 5 + ["warn"] * 2 + ["unreachable"] + ["pass"] * 56
    assert {n for s, n in shown if s == "fail"} == FAILED
    assert {n for s, n in shown if s == "warn"} == WARNED and shown[7][1] == DOWN
    for status in ("fail", "warn", "pass"):
        names = [n for s, n in shown if s == status]
        assert names == sorted(names)
    # the model (JSON, Markdown, JUnit) keeps its order by name
    assert [n["node"] for n in model["nodes"]] == sorted(n["node"] for n in model["nodes"])


def test_skip_only_nodes_rank_after_unreachable_and_fold():
    nodes = [
        {"node": "a-pass", "status": "pass", "checks": []},
        {"node": "b-skip", "status": "skip", "checks": []},
        {"node": "c-down", "status": "fail", "unreachable": True, "checks": []},
        {"node": "d-warn", "status": "warn", "checks": []},
        {"node": "e-fail", "status": "fail", "checks": []},
        {"node": "f-error", "status": "fail", "error": "x", "checks": []},
    ]
    assert [n["node"] for n in overview.ordered(nodes)] == [
        "e-fail", "d-warn", "c-down", "f-error", "b-skip", "a-pass"]  # fmt: skip
    assert [overview.folded(n) for n in overview.ordered(nodes)] == [
        False, False, False, False, True, True]  # fmt: skip


def test_healthy_nodes_fold_to_one_line_failing_ones_open(large):
    _, _, root = large
    for d in nodes_on_page(root):
        summary = d.first("summary").content()
        if d.attrs["data-status"] == "pass":
            assert "open" not in d.attrs, d.attrs
            name = re.escape(d.attrs["data-node"])
            assert re.fullmatch(rf"pass{name}8 GPUs · all \d+ checks passed \(\d skipped\)"
                                "validated 2026-11-22T08:00:00Z · 0 s before", summary)  # fmt: skip
        else:
            assert "open" in d.attrs, d.attrs["data-node"]
    by = {d.attrs["data-node"]: d.first("summary").content() for d in nodes_on_page(root)}
    when = "validated 2026-11-22T08:00:00Z · 0 s before"  # the result's start; its age
    # the Xid codes at a glance: a badge per code, with the GPUs that logged it
    assert by[large_name(5)].endswith(f"8 GPUs · fail gpu.xid on GPU 3, 6Xid 79 · GPU 3, 6{when}")
    assert by[large_name(60)].endswith(f"fail mig.isolation on MIG 1:2{when}")
    assert by[large_name(47)].endswith(f"warn gpu.clocks_event on GPU 0, 1, 2, 3, 4, 5, 6, 7{when}")
    assert by[DOWN] == f"unreachable{DOWN}unreachable: Failed to connect to the host via ssh"
    # a folded node holds its GPUs and its checks (each verdict once, or the node above with
    # the same verdicts and details named): no grid of ticks, nothing of it hidden for good
    folded = [d for d in nodes_on_page(root) if d.attrs["data-status"] == "pass"]
    first = folded[0]
    uuids = [td.content() for td in first.first("table", "gpus").all("td", "uuid")]
    assert len(uuids) == 8 and all(u.startswith("GPU-") for u in uuids)
    assert not list(first.all("table", "grid"))
    listed = [
        [td.content() for td in tr.all("td")] for tr in first.first("table", "list").all("tr")
    ]
    assert ["pass", "gpu.xid", "GPU 0-7", "0"] in listed
    same = [d for d in folded if list(d.all("p", "same"))]
    assert len(same) > 40  # 56 healthy nodes, three kinds of check list (fabric skipped, MIG)
    for d in same:
        ref = d.first("p", "same").first("a")
        target = root.by_id(ref.attrs["href"].removeprefix("#"))
        assert target.attrs["data-node"] == ref.content() and list(target.all("table", "list"))


def row_of(td: Element) -> str:
    """The row a grid cell is on, as the panel names it: "node", "GPU 3", "MIG 1:2"."""
    tr = td.parent
    return "node" if "noderow" in tr.attrs["class"].split() else tr.first("th").own_text()


def test_failing_cells_and_rows_marked(large):
    _, _, root = large
    node = next(d for d in nodes_on_page(root) if d.attrs["data-node"] == large_name(5))
    bad = [
        (row_of(td), td.attrs["data-check"])
        for td in node.all("td")
        if td.attrs.get("data-status") == "fail"
    ]
    assert bad == [("node", "gpu.xid"), ("GPU 3", "gpu.xid"), ("GPU 6", "gpu.xid")]
    marked = [th.own_text() for th in node.all("th", "bad")]
    assert marked == [large_name(5), "GPU 3", "GPU 6"]
    cell = next(td for td in node.all("td") if row_of(td) == "GPU 3"
                and td.attrs.get("data-check") == "gpu.xid")  # fmt: skip
    assert cell.attrs["title"] == f"FAIL  GPU 3 {XID79}" and cell.attrs["class"] == "cell s-fail"
    # the GPU row's header: the bus id whole, then the model
    assert [s.content() for s in cell.parent.first("th").all("small")][:2] == [
        "00000000:1F:00.0", "NVIDIA H100 80GB HBM3"]  # fmt: skip
    # the node row's cell of a per-GPU check: the failures, then the GPUs that passed
    node_cell = next(td for td in node.all("td") if row_of(td) == "node"
                     and td.attrs.get("data-check") == "gpu.xid")  # fmt: skip
    assert node_cell.attrs["title"] == (
        f"FAIL  GPU 3 {XID79}\nFAIL  GPU 6 {XID79}\nPASS  GPU 0, GPU 1, GPU 2, GPU 4, GPU 5, GPU 7"
    )


def test_summary_counts_nodes_gpus_and_checks(large):
    model, _, root = large
    nodes = root.by_id("node-counts").content()
    assert nodes == "64 nodes 5 fail 2 warn 1 unreachable 56 pass"
    gpus = root.by_id("gpu-counts").content()
    # failing GPUs: 2 (xid) + 1 (ecc+xid) + 1 (nvlink) + GPU 1 of the MIG node (its MIG device)
    assert gpus == "504 GPUs 5 fail 9 warn 490 pass"
    checks = root.by_id("check-counts").content()
    counts = model["summary"]["checks"]
    assert checks == "checks " + " ".join(f"{v} {k}" for k, v in counts.items())
    rows = {
        tr.attrs["data-problem"]: [td.content() for td in tr.all("td")]
        for tr in root.by_id("problems").all("tr")
        if "data-problem" in tr.attrs
    }
    assert rows["gpu.xid"] == ["fail", "gpu.xid No critical Xid errors", "3 GPUs on 2 nodes",
                               f"{large_name(5)}, {large_name(17)}"]  # fmt: skip
    assert rows["mig.isolation"][2] == "1 MIG device on 1 node"
    assert rows["node.drift_cdi"][2] == "1 node" and rows["node.reachable"][3] == DOWN
    assert rows["gpu.clocks_event"][:3] == ["warn", "gpu.clocks_event No clock slowdown events",
                                           "8 GPUs on 1 node"]  # fmt: skip
    order = list(rows)
    assert [rows[c][0] for c in order] == ["fail"] * 6 + ["warn"] * 2  # failures first
    # each node named links to that node on the page
    anchors = {d.attrs["id"]: d.attrs["data-node"] for d in nodes_on_page(root)}
    for a in root.by_id("problems").all("a"):
        assert anchors[a.attrs["href"].removeprefix("#")] == a.content()


def test_problems_of_a_check_that_both_fails_and_warns():
    def node(name, checks):
        return {"node": name, "status": "fail", "checks": checks}

    def check(status, gpu):
        return {"id": "gpu.xid", "title": "Xid", "status": status, "gpu": gpu, "mig": None}

    nodes = [node("b", [check("fail", 0), check("warn", 1)]), node("a", [check("warn", 0)])]
    (p,) = overview.problems(nodes, [{"id": "gpu.xid"}])
    assert (p["status"], p["text"], p["nodes"], p["warn_text"]) == (
        "fail", "1 GPU on 1 node", ["b"], "2 GPUs on 2 nodes")  # fmt: skip


def test_gpu_less_and_skip_only_nodes_fold_with_their_line():
    from gpunode.report import results

    engine = {"id": "engine.active", "title": "Container engine answers", "status": "pass",
              "detail": "docker 26.1.5 answers"}  # fmt: skip
    cpu = {"node": "cpu", "no_gpu": True, "detail": results.NO_GPU, "checks": [engine]}
    gpu = result("gpu", "Tesla T4", 1)
    for c in gpu["checks"]:
        c["status"] = "skip"
    model = results.merge([("cpu.json", results.check_result(cpu, "cpu.json")),
                           ("gpu.json", results.check_result(gpu, "gpu.json"))],
                          "2026-11-22T09:05:00Z")  # fmt: skip
    root = Tree(html.render(model)).root
    lines = {d.attrs["data-node"]: (d.attrs["data-status"], "open" in d.attrs,
                                    d.first("summary").content()) for d in nodes_on_page(root)}  # fmt: skip
    total = len(gpu["checks"]) + 1  # and node.reachable, which passed
    assert lines == {
        # node.reachable and engine.active passed; every other column a skip saying why
        "cpu": ("pass", False, f"passcpuno GPUs · all 2 checks passed ({total - 2} skipped)"),
        "gpu": ("pass", False, f"passgpu1 GPU · the one check passed ({total - 1} skipped)"
                               "validated 2026-11-22T08:00:00Z · 1 h 05 min before"),
    }
    skip_only = {"node": "s", "status": "skip", "checks": [dict(engine, status="skip", gpu=None)]}
    assert overview.node_line(skip_only) == "no GPUs · no check ran: the one check skipped"


def test_no_problems_says_so(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    (d / "n.json").write_text(json.dumps(result("n1", "Tesla T4", 2)))
    root = Tree(html.render(build.model_from([str(d)], "2026-11-22T08:00:00Z"))).root
    assert root.first("p", "problems-none").content() == "No check failed or warned."
    assert root.by_id("node-counts").content() == "1 node 1 pass"


def test_the_filter_markup(large):
    model, _, root = large
    form = root.by_id("filter")
    assert form.tag == "form" and "hidden" in form.attrs  # the script shows it
    check = form.by_id("f-check")
    values = [o.attrs["value"] for o in check.all("option")]
    assert values == [""] + [c["id"] for c in model["columns"]]
    statuses = [o.attrs["value"] for o in form.by_id("f-status").all("option")]
    assert statuses == ["", "fail warn", "fail", "warn", "skip", "pass"]
    # the filter finds a cell's check by its column: the header names the columns in order
    heads = [th.attrs["data-check"] for th in root.by_id("cols").all("th", "col")]
    assert heads == [c["id"] for c in model["columns"]]
    for tr in root.all("tr"):
        if (tr.attrs.get("class") or "-").split()[0] in ("noderow", "gpurow", "migrow"):
            cells = [c for c in tr.children if c.tag == "td"]
            assert len(cells) == len(heads)
            for td, cid in zip(cells, heads, strict=True):
                assert td.attrs.get("data-check", cid) == cid


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def test_content_security_policy_lets_only_the_pages_own_style_and_script(large):
    _, _, root = large
    meta = next(
        m for m in root.all("meta") if m.attrs.get("http-equiv") == "Content-Security-Policy"
    )
    policy = dict(
        (d.split()[0], d.split()[1:]) for d in meta.attrs["content"].split(";") if d.strip()
    )
    assert policy["default-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    (style,) = root.all("style")
    (script,) = root.all("script")
    assert policy["style-src"] == [_sha256(style.content())]
    assert policy["script-src"] == [_sha256(script.content())]
    assert "unsafe" not in meta.attrs["content"]
    assert not [
        e for e in root.all() if "style" in e.attrs or any(a.startswith("on") for a in e.attrs)
    ]


# ------------------------------------------------------------ hostile values, new places

EVIL_NODE = 'evil"<img src=x onerror=alert(1)>&amp;'
EVIL_CHECK = 'gpu.x"<b>id</b>'
EVIL_TITLE = "Title <script>alert(2)</script> & ' \""
EVIL_DETAIL = "</summary><details open><b>forged</b>"
EVIL_PROFILE = "1g.10gb<i>x</i>"


@pytest.fixture
def hostile(tmp_path) -> tuple[str, Element]:
    d = tmp_path / "r"
    d.mkdir()
    doc = result(EVIL_NODE, "Tesla <u>T4</u>", 2, {("gpu.lost", 1): ("fail", EVIL_DETAIL)},
                 ALL_NODE_CHECKS, [*ALL_GPU_CHECKS, (EVIL_CHECK, EVIL_TITLE)])  # fmt: skip
    for c in doc["checks"]:
        if c["id"] == EVIL_CHECK and c["gpu"] == 0:
            c["status"], c["detail"] = "warn", EVIL_DETAIL
    (d / "a.json").write_text(json.dumps(doc))
    mig = mig_result("mig<s>node</s>", profile_of=lambda n: EVIL_PROFILE, broken=1)
    (d / "b.json").write_text(json.dumps(mig))
    (d / "c.json").write_text(json.dumps(result("ok&node", "T4", 1)))
    page = html.render(build.model_from([str(d)], "2026-11-22T08:00:00Z"))
    return page, Tree(page).root


def test_hostile_values_stay_text_in_the_new_places(hostile):
    page, root = hostile
    # no element made of a value: only the page's own tags, one script, no img/b/i/s/u
    assert {e.tag for e in root.all()} <= {
        "html", "head", "meta", "title", "style", "body", "h1", "p", "span", "b", "table",
        "thead", "tbody", "tr", "th", "td", "a", "form", "label", "select", "option", "div", "input",
        "details", "summary", "small", "script"}  # fmt: skip
    assert len(list(root.all("script"))) == 1 and not list(root.all("img"))
    bold = [e.content() for e in root.all("b")]
    assert bold == ["3 nodes", "5 GPUs", "checks", EVIL_NODE, "mig<s>node</s>", "ok&node"]
    details = {d.attrs["data-node"]: d for d in nodes_on_page(root)}
    assert set(details) == {EVIL_NODE, "mig<s>node</s>", "ok&node"}  # attributes round-trip
    evil = details[EVIL_NODE]
    assert evil.first("summary").content() == (
        f"fail{EVIL_NODE}2 GPUs · fail gpu.lost on GPU 1; warn {EVIL_CHECK} on GPU 0"
        "validated 2026-11-22T08:00:00Z · 0 s before"
    )
    # the summary's problems: the check id, its title, the node named as text
    rows = {tr.attrs["data-problem"]: tr for tr in root.by_id("problems").all("tr")
            if "data-problem" in tr.attrs}  # fmt: skip
    evil_row = rows[EVIL_CHECK]
    assert [td.content() for td in evil_row.all("td")] == [
        "warn", f"{EVIL_CHECK} {EVIL_TITLE}", "1 GPU on 1 node", EVIL_NODE]  # fmt: skip
    assert rows["mig.isolation"].first("a").content() == "mig<s>node</s>"
    # the filter's option, the column header, the cells: the check id as it was
    options = [o.attrs["value"] for o in root.by_id("f-check").all("option")]
    assert EVIL_CHECK in options
    assert EVIL_CHECK in [th.attrs["data-check"] for th in root.by_id("cols").all("th", "col")]
    cell = next(td for td in evil.all("td") if td.attrs.get("data-check") == EVIL_CHECK
                and row_of(td) == "GPU 0")  # fmt: skip
    assert (
        cell.attrs["title"] == f"WARN  GPU 0 {EVIL_DETAIL}"
        and cell.parent.attrs["data-node"] == EVIL_NODE
    )
    # the MIG row: the profile text as text
    mig_rows = [th.content() for th in root.all("th", "mig")]
    assert mig_rows[1].startswith(f"MIG 1:1{EVIL_PROFILE}")
    assert "<b>forged" not in page and "<img" not in page and "<s>node" not in page


def test_no_external_resource(large):
    _, page, root = large
    assert not [e for e in root.all() if {"src", "srcset"} & set(e.attrs)]
    assert all(a.attrs["href"].startswith("#") for a in root.all("a"))
    assert "http://" not in page and "https://" not in page and "<link" not in page


# ---------------------------------------------------------------- Chromium runs the filter


def test_chromium_runs_the_pages_script_under_its_policy(large, tmp_path):
    """The page as written (its CSP in force): the script runs (the filter is shown)."""
    from .test_consumers import _run_chromium

    _, page, _ = large
    path = tmp_path / "index.html"
    path.write_text(page)
    dom = _run_chromium("--virtual-time-budget=3000", "--dump-dom", path.as_uri())
    form = re.search(r'<form class="filter" id="filter"[^>]*>', dom)[0]
    assert "hidden" not in form


FILTER_PROBE = """<script>
var fc = document.getElementById('f-check'), fs = document.getElementById('f-status');
fc.value = 'gpu.xid'; fs.value = 'fail'; fc.dispatchEvent(new Event('change'));
var shown = [], cells = [], rows = [];
document.querySelectorAll('details.node').forEach(function(d){
  if (d.offsetParent !== null || getComputedStyle(d).display !== 'none') {
    if (!d.classList.contains('off')) shown.push(d.getAttribute('data-node') + (d.open ? '+' : '-'));
  }});
document.querySelectorAll('#cols th.col').forEach(function(th){
  if (getComputedStyle(th).display !== 'none') cells.push(th.getAttribute('data-check'));});
document.querySelectorAll('details.node:not(.off) table.grid tr').forEach(function(tr){
  if (getComputedStyle(tr).display !== 'none') rows.push(tr.getAttribute('data-node') + '/' +
     (tr.getAttribute('data-gpu') || 'node'));});
document.body.setAttribute('data-shown', shown.join(','));
document.body.setAttribute('data-cols', cells.join(','));
document.body.setAttribute('data-rows', rows.join(','));
document.body.setAttribute('data-count', document.getElementById('f-count').textContent);
</script></body>"""


def test_chromium_filter_shows_one_check_and_status(large, tmp_path):
    from .test_consumers import ARTIFACTS, _run_chromium, probed_page

    _, page, _ = large
    path = tmp_path / "probe.html"
    path.write_text(probed_page(page, FILTER_PROBE))
    dom = _run_chromium("--virtual-time-budget=3000", "--dump-dom", path.as_uri())
    attr = {
        k: re.search(rf'data-{k}="([^"]*)"', dom)[1] for k in ("shown", "cols", "rows", "count")
    }
    assert attr["shown"] == f"{large_name(5)}+,{large_name(17)}+"  # opened, the rest hidden
    assert attr["cols"] == "gpu.xid"
    assert attr["rows"] == ",".join([f"{large_name(5)}/node", f"{large_name(5)}/3",
                                     f"{large_name(5)}/6", f"{large_name(17)}/node",
                                     f"{large_name(17)}/2"])  # fmt: skip
    assert attr["count"] == "2 of 64 nodes"
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-64x8-filtered.png"
    shot.unlink(missing_ok=True)
    _run_chromium("--window-size=1400,1000", f"--screenshot={shot}", path.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_chromium_screenshot_of_the_large_report(large, tmp_path):
    from .test_consumers import ARTIFACTS, _run_chromium

    _, page, _ = large
    path = tmp_path / "index.html"
    path.write_text(page)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "report-64x8.png"
    shot.unlink(missing_ok=True)
    _run_chromium("--window-size=1400,2000", f"--screenshot={shot}", path.as_uri())
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and Path(shot).stat().st_size > 50_000


CLICK_PROBE = """<script>
document.querySelector('tr[data-problem="mig.isolation"] .ck').click();
var shown = [];
document.querySelectorAll('details.node:not(.off)').forEach(function(d){
  shown.push(d.getAttribute('data-node') + (d.open ? '+' : '-'));});
document.body.setAttribute('data-shown', shown.join(','));
document.body.setAttribute('data-filter', document.getElementById('f-check').value + '|' +
  document.getElementById('f-status').value);
</script></body>"""


def test_chromium_a_check_in_the_summary_filters_to_it(large, tmp_path):
    from .test_consumers import _run_chromium, probed_page

    _, page, _ = large
    path = tmp_path / "probe.html"
    path.write_text(probed_page(page, CLICK_PROBE))
    dom = _run_chromium("--virtual-time-budget=3000", "--dump-dom", path.as_uri())
    assert re.search(r'data-filter="([^"]*)"', dom)[1] == "mig.isolation|fail warn"
    assert re.search(r'data-shown="([^"]*)"', dom)[1] == f"{large_name(60)}+"


# ------------------------------------------------ issue 28: the header, groups, find, warn-only


def test_header_names_ten_failed_nodes_then_a_count():
    summary = {"nodes": 500, "nodes_failed": 25, "failed": [f"n{i:02d}" for i in range(25)]}
    assert html.verdict(summary) == (
        "25 of 500 nodes failed: n00, n01, n02, n03, n04, n05, n06, n07, n08, n09 and 15 more"
    )
    assert html.verdict(summary, None) == "25 of 500 nodes failed"
    assert html.verdict({"nodes": 3, "nodes_failed": 0, "failed": []}) == "all 3 nodes passed"


def test_the_64_node_page_header_and_title(large):
    model, _, root = large
    failed = model["summary"]["failed"]
    assert (
        root.by_id("verdict")
        .content()
        .startswith(f"6 of 64 nodes failed: {', '.join(failed)} · generated")
    )
    assert root.first("title").content() == "gpunode validation: 6 of 64 nodes failed"


def test_groups_by_model_and_driver(large):
    _, _, root = large
    rows = [[td.content() for td in tr.all("td")] for tr in root.by_id("groups").all("tr")
            if "data-group" in tr.attrs]  # fmt: skip
    assert rows == [
        ["NVIDIA H100 80GB HBM3", "535.261.03", "60", "4", "2", "", "", "54"],
        ["NVIDIA A100-SXM4-80GB", "535.261.03", "3", "1", "", "", "", "2"],
        ["unknown (no result)", "unknown", "1", "", "", "1", "", ""],
    ]
    # each node carries its group, as the filter's group select lists them
    groups = {}
    for d in nodes_on_page(root):
        groups.setdefault(d.attrs["data-group"], []).append(d.attrs["data-node"])
    assert {k: len(v) for k, v in groups.items()} == {"0": 60, "1": 3, "2": 1}
    assert groups["2"] == [DOWN]
    options = [o.content() for o in root.by_id("f-group").all("option")]
    assert options[1:] == ["NVIDIA H100 80GB HBM3 · driver 535.261.03 (60)",
                           "NVIDIA A100-SXM4-80GB · driver 535.261.03 (3)",
                           "unknown (no result) · driver unknown (1)"]  # fmt: skip


def test_groups_follow_the_driver_past_64_nodes(tmp_path):
    model = build.model_from([str(write_large_cluster(tmp_path / "r", 130, 2))])
    groups = {(g["model"], g["driver"]): len(g["nodes"]) for g in overview.groups(model["nodes"])}
    assert groups[("NVIDIA H100 80GB HBM3", "550.163.01")] == 60  # nodes 64-127
    assert groups[("NVIDIA H100 80GB HBM3", "535.261.03")] == 62  # 0-63, and 128, 129
    assert sum(groups.values()) == 130


def test_a_node_that_only_warns_on_a_failing_check_is_linked(tmp_path):
    d = tmp_path / "r"
    d.mkdir()
    docs = {"a-fail": {("gpu.lost", 0): ("fail", "lost")},
            "b-warn": {("gpu.lost", 1): ("warn", "flaky")}}  # fmt: skip
    for name, faults in docs.items():
        (d / f"{name}.json").write_text(json.dumps(result(name, "Tesla T4", 2, faults)))
    model = build.model_from([str(d)])
    (p,) = [p for p in overview.problems(model["nodes"], model["columns"]) if p["id"] == "gpu.lost"]
    assert p["nodes"] == ["a-fail"] and p["warn_nodes"] == ["b-warn"]
    root = Tree(html.render(model)).root
    row = next(tr for tr in root.by_id("problems").all("tr") if tr.attrs.get("data-problem"))
    links = {a.content(): a.attrs["href"] for a in row.all("a")}
    assert set(links) == {"a-fail", "b-warn"}
    assert row.first("span", "also").content() == "warn only: b-warn"
    assert root.by_id(links["b-warn"][1:]).attrs["data-node"] == "b-warn"


FIND_PROBE = """<script>
var ff = document.getElementById('f-find');
ff.value = '%s'; ff.dispatchEvent(new Event('input'));
var shown = [], hits = [];
document.querySelectorAll('details.node:not(.off)').forEach(function(d){
  shown.push(d.getAttribute('data-node') + (d.open ? '+' : '-'));});
document.querySelectorAll('tr.hit').forEach(function(tr){
  hits.push(tr.cells[0].firstChild.textContent);});
document.body.setAttribute('data-shown', shown.join(','));
document.body.setAttribute('data-hits', hits.join(','));
document.body.setAttribute('data-healthy', document.getElementById('healthy').open ? 'open' : '');
document.body.setAttribute('data-count', document.getElementById('f-count').textContent);
</script></body>"""


@pytest.mark.parametrize(
    "query, shown, hits",
    [
        # a healthy node's GPU by its UUID: the node and its fold opened, the GPU's row marked
        ("gpu-00000000-0003", f"{large_name(0)}+", "GPU 3"),
        # a failing node's GPU by its bus id, in upper or lower case
        ("00000000:1f:00.0", None, None),
        # nodes by part of their name
        ("r04-n1", ",".join(f"{large_name(i)}+" for i in [60, *range(57, 60), *range(61, 64)]),
         ""),
    ],
)  # fmt: skip
def test_chromium_find_by_node_gpu_uuid(large, tmp_path, query, shown, hits):
    from .test_consumers import _run_chromium, probed_page

    _, page, _ = large
    path = tmp_path / "probe.html"
    path.write_text(probed_page(page, FIND_PROBE % query))
    dom = _run_chromium("--virtual-time-budget=3000", "--dump-dom", path.as_uri())
    attr = {k: re.search(rf'data-{k}="([^"]*)"', dom)[1] for k in ("shown", "hits", "healthy",
                                                                   "count")}  # fmt: skip
    if shown is None:  # every node has a GPU 3 at that bus id: all shown, each row marked
        assert attr["count"] == "63 of 64 nodes" and set(attr["hits"].split(",")) == {"GPU 3"}
        return
    assert attr["shown"] == shown and attr["hits"] == hits
    assert attr["healthy"] == "open"
