"""The cluster report as one self-contained HTML page: a node-by-check grid (a row per node,
a row per GPU under it for the per-GPU checks, a row per MIG device under its GPU for the
checks about that MIG device), coloured by status, details on click.

At 64 nodes x 8 GPUs and more (issue 21): nodes ordered failures first and healthy ones
folded to one summary line (overview.py; <details>, no script needed), a summary at the
top (nodes and GPUs by status, which checks fail where), a filter by check and status.

No external assets and no framework: inline CSS, and a few dozen lines of JS (the details
panel, the filter), both allowed by hash in the page's Content-Security-Policy and nothing
else; without JS the filter stays hidden and every cell's tooltip and each node's list of
checks hold the details. Every value from a result goes through html.escape.
"""

from __future__ import annotations

import base64
import hashlib
from collections import Counter
from html import escape

from . import overview
from .results import worst

SYMBOL = {"pass": "✔", "warn": "!", "fail": "✘", "skip": "&ndash;"}

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d1d1f;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1em 0 .3em}
.meta{color:#555;margin:0 0 .6em}
.counts{margin:.2em 0}.counts b{display:inline-block;min-width:5.5em}
.counts span,.totals span,.badge{display:inline-block;padding:0 .5em;margin-right:.3em;
 border-radius:3px;font-weight:600}
.badge{min-width:5.5em;text-align:center;font-size:.85em}
table.problems{border-collapse:collapse;margin:.4em 0 .8em}
.problems td,.problems th{border:1px solid #e0e0e0;padding:.15em .5em;text-align:left;
 vertical-align:top}
.problems th{background:#f3f3f3;font-size:.85em}
.problems td.st{font-weight:700;text-align:center}
.problems td.nodes{max-width:50em}.problems a{color:#1565c0}
.problems .ck{font-family:monospace;cursor:pointer;color:#1565c0;text-decoration:underline}
form.filter{margin:.6em 0;padding:.4em .6em;background:#f3f3f3;border-radius:4px;
 display:inline-block}
form.filter[hidden]{display:none}
#f-count{margin-left:.6em;color:#555}
.off{display:none !important}
#cols{position:sticky;top:0;z-index:2;background:#fff}
table.grid{border-collapse:collapse;margin:0}
.grid th,.grid td{border:1px solid #d0d0d0;padding:.2em .3em;text-align:center;
 box-sizing:border-box}
.grid th:first-child{width:330px;min-width:330px;max-width:330px;overflow-wrap:anywhere}
.grid td,.grid th.col{width:27px;min-width:27px;max-width:27px;height:22px}
.grid thead th{background:#f3f3f3;font-weight:600;font-size:.78em;vertical-align:bottom;
 white-space:nowrap}
.grid thead th.col div{writing-mode:vertical-rl;transform:rotate(180deg);max-height:13em}
.grid th.node{text-align:left;font-weight:600;background:#fafafa}
.grid th.node small{display:block;font-weight:400;color:#555;font-size:.85em}
.grid th.gpu,.grid th.mig{text-align:left;font-weight:400;padding-left:1.6em;background:#fff;
 white-space:nowrap;overflow:hidden;text-overflow:ellipsis;overflow-wrap:normal}
.grid th.mig{padding-left:3em;background:#fbfbfb;font-size:.92em}
.grid th.gpu small,.grid th.mig small{font-weight:400;color:#555;margin-left:.6em}
.grid th.bad{box-shadow:inset 5px 0 0 #c62828;background:#fdecea}
.grid th.warned{box-shadow:inset 5px 0 0 #f9a825;background:#fff8e1}
td.cell{cursor:pointer;font-weight:700}
.s-pass{background:#e3f1e4;color:#2e7d32}
.s-warn{background:#f9a825;color:#1d1d1f}
.s-fail{background:#c62828;color:#fff}
.s-skip{background:#eeeeee;color:#757575}
.s-unreachable{background:#6a1b9a;color:#fff}
.s-none{background:#fafafa;color:#ccc;cursor:default;font-weight:400}
td.s-fail,td.s-warn{font-size:1.05em}
tr.unreachable td.s-none{background:#fbe3e1;color:#c62828}
.grid small.uuid{font-size:.72em;font-family:monospace}
.grid th small.uuid{display:none}
td.cell:focus,td.cell.sel{outline:3px solid #1565c0;outline-offset:-3px}
#panel{position:sticky;bottom:0;z-index:2;background:#fff;border:1px solid #d0d0d0;
 border-left:6px solid #9e9e9e;padding:.5em 1em;margin:.6em 0;min-height:1.4em;
 max-width:70em;max-height:12em;overflow:auto;white-space:pre-wrap}
#panel.s-pass,#panel.s-warn,#panel.s-fail,#panel.s-skip{background:#fff;color:#1d1d1f}
#panel.s-pass{border-left-color:#2e7d32}#panel.s-warn{border-left-color:#f9a825}
#panel.s-fail{border-left-color:#c62828}#panel.s-skip{border-left-color:#9e9e9e}
details{margin:.15em 0}summary{cursor:pointer}
details.node{border-left:4px solid #d0d0d0;padding-left:4px}
#cols{margin-left:8px}
details.k-fail{border-left-color:#c62828}details.k-warn{border-left-color:#f9a825}
details.k-unreachable{border-left-color:#6a1b9a}
details.node>summary{padding:.15em 0}details.node>summary b{margin-right:.4em}
details.node>summary .line{color:#333}
details.k-pass>summary .line,details.k-skip>summary .line{color:#555}
details.all{margin:.2em 0 .6em 1em}details.all>summary{color:#555;font-size:.9em}
table.checks{border-collapse:collapse;margin:.4em 0 .8em 1.2em}
.checks td,.checks th{border:1px solid #e0e0e0;padding:.15em .5em;text-align:left}
.checks td.st{font-weight:700;text-align:center}
.legend span{display:inline-block;padding:0 .5em;margin-right:.3em;border-radius:3px}
"""

# the details panel (click a cell) and the filter; without JS the filter stays hidden and
# every node, row and check is on the page (a cell's title and each node's check list)
JS = """
var panel=document.getElementById('panel');
function show(td){
 document.querySelectorAll('td.sel').forEach(function(e){e.classList.remove('sel')});
 td.classList.add('sel');panel.className=td.className.replace(/\\b(cell|sel)\\b/g,'').trim();
 var col=document.getElementById('cols').rows[0].cells[td.cellIndex];
 panel.textContent=td.getAttribute('data-node')+' · '+td.getAttribute('data-row')+' · '+
  col.getAttribute('title')+' ('+col.getAttribute('data-check')+')\\n'+td.getAttribute('title');}
document.querySelectorAll('td.cell[data-status]').forEach(function(td){
 td.tabIndex=0;td.addEventListener('click',function(){show(td)});
 td.addEventListener('keydown',function(e){if(e.key==='Enter')show(td)});});
var form=document.getElementById('filter'),fc=document.getElementById('f-check'),
 fs=document.getElementById('f-status'),count=document.getElementById('f-count');
var ids=[].map.call(document.querySelectorAll('#cols th.col'),
 function(th){return th.getAttribute('data-check')});
var nodes=[].slice.call(document.querySelectorAll('details.node'));
nodes.forEach(function(d){d.setAttribute('data-open',d.open?'1':'')});
function filter(){
 var chk=fc.value,st=fs.value?fs.value.split(' '):null,on=!!(chk||st),used={},shown=0;
 function hit(td,i){var s=td.getAttribute('data-status');
  return !!s&&(!chk||ids[i-1]===chk)&&(!st||st.indexOf(s)>=0);}
 nodes.forEach(function(d){
  var any=false;
  d.querySelectorAll('table.grid tr').forEach(function(tr){
   var m=false;
   for(var i=1;i<tr.cells.length;i++){if(hit(tr.cells[i],i)){m=true;used[i]=true;}}
   tr.classList.toggle('off',on&&!m&&!tr.classList.contains('noderow'));
   any=any||m;});
  d.classList.toggle('off',on&&!any);
  d.open=on?any:d.getAttribute('data-open')==='1';
  if(any||!on)shown++;});
 document.querySelectorAll('table.grid tr').forEach(function(tr){
  for(var i=1;i<tr.cells.length;i++)tr.cells[i].classList.toggle('off',on&&!used[i]);});
 count.textContent=on?shown+' of '+nodes.length+' nodes':'';}
fc.addEventListener('change',filter);fs.addEventListener('change',filter);
document.querySelectorAll('tr[data-problem] .ck').forEach(function(b){
 b.addEventListener('click',function(){
  fc.value=b.parentNode.parentNode.getAttribute('data-problem');fs.value='fail warn';
  filter();form.scrollIntoView();});});
form.hidden=false;filter();
"""


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


# nothing is fetched (default-src 'none'), and only this page's own style and script run:
# a value that escaped its escaping could not add any
CSP = (
    f"default-src 'none'; style-src {_hash(CSS)}; script-src {_hash(JS)}; "
    "base-uri 'none'; form-action 'none'"
)


NONE = '<td class="s-none"></td>'  # a check not about this row (a node check, on a GPU row)


def _gpu_label(gpu: dict) -> str:
    return f"GPU {gpu.get('index', '?')}"


def where(c: dict) -> str:
    """What a check is about, as a row names it: "", "GPU 1", "MIG 1:0" (<gpu>:<n>)."""
    if c["gpu"] is None:
        return ""
    return f"GPU {c['gpu']}" if c.get("mig") is None else f"MIG {c['gpu']}:{c['mig']}"


def _mark(status: str | None) -> str:
    """The row header's class for a row that failed (bad) or warned (warned)."""
    return {"fail": " bad", "warn": " warned"}.get(status or "", "")


def _node_header(n: dict) -> str:
    v = n.get("versions") or {}
    models = Counter(g.get("model") or "unknown" for g in n.get("gpus") or [])
    lines = []
    if n.get("unreachable") or n.get("error"):
        what = "unreachable" if n.get("unreachable") else "validation could not run"
        lines.append(f"{what}: {n.get('detail', '')}")
    elif n.get("no_gpu"):  # no driver, CUDA or gpunode there to report versions of
        lines.append(n.get("detail") or "no NVIDIA GPU: engine only")
    else:
        driver = v.get("driver_loaded") or "?"
        extra = ""
        if v.get("driver_installed") not in (None, driver):
            extra = f" (installed {v.get('driver_installed')})"
        cuda = ", ".join(v.get("cuda_installed") or []) or "none"
        lines.append(f"driver {driver}{extra} · CUDA max {v.get('cuda_driver_max') or '?'}")
        lines.append(f"toolkit {cuda} · gpunode {n.get('gpunode_version') or '?'}")
        gpus = ", ".join(f"{c}x {m}" for m, c in models.items()) if models else "no GPUs"
        migs = sum(len(g.get("mig") or []) for g in n.get("gpus") or [])
        lines.append(f"{gpus} · {migs} MIG device(s)" if migs else gpus)
    small = "".join(f"<small>{escape(t)}</small>" for t in lines)
    bad = _mark(n["status"])
    return f'<th class="node{bad}" scope="row">{escape(n["node"])}{small}</th>'


def _cell(node: str, label: str, col: dict, checks: list[dict]) -> str:
    if not checks:
        return '<td class="cell s-none" title="not reported">·</td>'
    status = worst(c["status"] for c in checks)
    lines = []
    passed = [c for c in checks if c["status"] == "pass" and c["gpu"] is not None]
    if len(passed) < 2:  # a node row's per-GPU cell names its GPUs that passed in one line
        passed = []
    for c in checks:
        if c in passed:
            continue
        about = f"{where(c)} " if c["gpu"] is not None else ""
        lines.append(f"{c['status'].upper():5} {about}{c['detail']}".rstrip())
    if passed:
        lines.append(f"PASS  {', '.join(where(c) for c in passed)}")
    # the tooltip holds the verdicts; the panel (script) puts the node, row and check first
    text = "\n".join(lines)
    return (
        f'<td class="cell s-{status}" data-status="{status}" data-node="{escape(node)}" '
        f'data-check="{escape(col["id"])}" data-row="{escape(label)}" '
        f'title="{escape(text)}">{SYMBOL[status]}</td>'
    )


def _rows(n: dict, columns: list[dict]) -> list[str]:
    by: dict[tuple[str, int | None], list[dict]] = {}
    for c in n["checks"]:
        by.setdefault((c["id"], c["gpu"], c.get("mig")), []).append(c)
    node = n["node"]
    cells = []
    for col in columns:  # the node row: node checks, and per-GPU checks summed up
        checks = [c for c in n["checks"] if c["id"] == col["id"]]
        cells.append(_cell(node, "node", col, checks))
    kind = "noderow unreachable" if n.get("unreachable") or n.get("error") else "noderow"
    rows = [f'<tr class="{kind}" data-node="{escape(node)}">{_node_header(n)}{"".join(cells)}</tr>']
    indices = sorted(
        {c["gpu"] for c in n["checks"] if c["gpu"] is not None}
        | {g["index"] for g in n.get("gpus") or [] if isinstance(g.get("index"), int)}
    )
    gpus = {g.get("index"): g for g in n.get("gpus") or []}
    for i in indices:
        g = gpus.get(i, {"index": i})
        label = _gpu_label(g)
        row_checks = [c for c in n["checks"] if c["gpu"] == i and c.get("mig") is None]
        bad = _mark(worst(c["status"] for c in row_checks))
        mig = f"MIG on · {len(g.get('mig') or [])} MIG device(s)" if g.get("mig_enabled") else None
        info = " · ".join(escape(str(x)) for x in (g.get("model"), g.get("pci_bus_id"), mig) if x)
        uuid = escape(str(g.get("uuid") or ""))
        head = (
            f'<th class="gpu{bad}" scope="row" title="{uuid}">{escape(label)}<small>{info}</small>'
            f'<small class="uuid">{uuid}</small></th>'
        )
        cells = []
        for col in columns:
            if col["per_gpu"]:
                cells.append(_cell(node, label, col, by.get((col["id"], i, None), [])))
            else:
                cells.append(NONE)
        rows.append(
            f'<tr class="gpurow" data-node="{escape(node)}" data-gpu="{i}">{head}{"".join(cells)}</tr>'
        )
        rows += _mig_rows(n, g, i, columns, by)
    return rows


def _mig_rows(n: dict, g: dict, i: int, columns: list[dict], by: dict) -> list[str]:
    """A row per MIG device of GPU ``i``, under it: its name <gpu>:<n>, profile, memory and
    UUID, and the cells of the checks about it."""
    devices = {m["index"]: m for m in g.get("mig") or [] if isinstance(m.get("index"), int)}
    found = {c["mig"] for c in n["checks"] if c["gpu"] == i and c.get("mig") is not None}
    node = n["node"]
    rows = []
    for k in sorted(set(devices) | found):
        m = devices.get(k, {})
        label = f"MIG {i}:{k}"
        checks = [c for c in n["checks"] if c["gpu"] == i and c.get("mig") == k]
        bad = _mark(worst(c["status"] for c in checks))
        mem = f"{m['memory_mib']} MiB" if isinstance(m.get("memory_mib"), int) else None
        gi_ci = (f"GI {m['gi']} · CI {m['ci']}"
                 if m.get("gi") is not None and m.get("ci") is not None else None)  # fmt: skip
        info = " · ".join(escape(str(x)) for x in (m.get("profile"), mem, gi_ci) if x)
        uuid = escape(str(m.get("uuid") or ""))
        head = (
            f'<th class="mig{bad}" scope="row" title="{uuid}">{escape(label)}<small>{info}</small>'
            f'<small class="uuid">{uuid}</small></th>'
        )
        cells = [
            _cell(node, label, col, by.get((col["id"], i, k), []))
            if col["per_gpu"] else NONE
            for col in columns
        ]  # fmt: skip
        rows.append(f'<tr class="migrow" data-node="{escape(node)}" data-gpu="{i}" '
                    f'data-mig="{k}">{head}{"".join(cells)}</tr>')  # fmt: skip
    return rows


def _gpu_cell(c: dict) -> str:
    if c["gpu"] is None:
        return ""
    return escape(str(c["gpu"]) if c.get("mig") is None else f"{c['gpu']}:{c['mig']}")


def _checks_table(n: dict) -> str:
    """The node's checks as a table, in a closed <details> under its grid rows: every check
    of a node shown open; of a folded one those that did not pass (the skips, with their
    reasons), its passes being in its cells' titles."""
    checks = n["checks"] if not overview.folded(n) else [
        c for c in n["checks"] if c["status"] != "pass"
    ]  # fmt: skip
    if not checks:
        return ""
    what = f"all {_plural(len(checks), 'check')}" if checks is n["checks"] else (
        f"the {_plural(len(checks), 'check')} that did not pass")  # fmt: skip
    rows = "".join(
        f'<tr><td class="st s-{c["status"]}">{c["status"]}</td><td>{escape(c["id"])}</td>'
        f"<td>{_gpu_cell(c)}</td><td>{escape(c['title'])}</td>"
        f"<td>{escape(c['detail'])}</td></tr>"
        for c in checks
    )
    return (
        f'<details class="all"><summary>{what} of '
        f'{escape(n["node"])}</summary><table class="checks"><tr><th>status</th><th>check</th>'
        f"<th>GPU</th><th>title</th><th>detail</th></tr>{rows}</table></details>"
    )


def _node(i: int, n: dict, columns: list[dict]) -> str:
    """One node: a <details> whose summary is its one line (open unless it is healthy:
    overview.folded), holding its grid rows and its list of checks."""
    k = overview.kind(n)
    opened = "" if overview.folded(n) else " open"
    line = escape(overview.node_line(n))
    rows = "\n".join(_rows(n, columns))
    return (
        f'<details class="node k-{k}" id="node-{i}" data-node="{escape(n["node"])}" '
        f'data-status="{k}"{opened}><summary><span class="badge s-{k}">{k}</span>'
        f'<b>{escape(n["node"])}</b><span class="line">{line}</span></summary>\n'
        f'<table class="grid"><tbody>\n{rows}\n</tbody></table>\n{_checks_table(n)}</details>'
    )


def _plural(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


def _summary(model: dict, nodes: list[dict], anchors: dict[str, int]) -> str:
    """Counts of nodes and GPUs by status, the checks by status, and which checks failed or
    warned where."""
    c = overview.counts(nodes)
    node_counts = " ".join(
        f'<span class="s-{k}">{v} {k}</span>' for k, v in c["nodes"].items() if v
    )
    gpu_counts = " ".join(f'<span class="s-{k}">{v} {k}</span>' for k, v in c["gpus"].items() if v)
    totals = " ".join(
        f'<span class="s-{k}">{v} {k}</span>' for k, v in model["summary"]["checks"].items()
    )
    out = [
        f'<p class="counts" id="node-counts"><b>{_plural(c["node_total"], "node")}</b> '
        f"{node_counts}</p>",
        f'<p class="counts" id="gpu-counts"><b>{_plural(c["gpu_total"], "GPU")}</b> '
        f"{gpu_counts}</p>",
        f'<p class="counts totals" id="check-counts"><b>checks</b> {totals}</p>',
    ]
    probs = overview.problems(nodes, model["columns"])
    if not probs:
        out.append('<p class="problems-none">No check failed or warned.</p>')
        return "\n".join(out)
    rows = []
    for p in probs:
        links = ", ".join(
            f'<a href="#node-{anchors[name]}">{escape(name)}</a>' for name in p["nodes"][:12]
        )
        more = len(p["nodes"]) - 12
        if more > 0:
            links += f" and {more} more"
        also = f" (warn: {escape(p['warn_text'])})" if p["warn_text"] else ""
        rows.append(
            f'<tr data-problem="{escape(p["id"])}"><td class="st s-{p["status"]}">{p["status"]}</td>'
            f'<td><span class="ck" title="show only this check">{escape(p["id"])}</span> '
            f'{escape(p["title"])}</td><td class="where">{escape(p["text"])}{also}</td>'
            f'<td class="nodes">{links}</td></tr>'
        )
    out.append(
        '<table class="problems" id="problems"><thead><tr><th>status</th><th>check</th>'
        f"<th>where</th><th>nodes</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return "\n".join(out)


def _filter(columns: list[dict]) -> str:
    """The filter (shown by the script): one check, one status, or both."""
    options = "".join(
        f'<option value="{escape(c["id"])}">{escape(c["id"])}</option>' for c in columns
    )
    statuses = [("", "any status"), ("fail warn", "fail or warn"), ("fail", "fail"),
                ("warn", "warn"), ("skip", "skip"), ("pass", "pass")]  # fmt: skip
    st = "".join(f'<option value="{v}">{t}</option>' for v, t in statuses)
    return (
        '<form class="filter" id="filter" hidden><label>Show check <select id="f-check">'
        f'<option value="">all checks</option>{options}</select></label> '
        f'<label>with status <select id="f-status">{st}</select></label>'
        '<span id="f-count" role="status"></span></form>'
    )


def render(model: dict) -> str:
    cols = model["columns"]
    head = "".join(
        f'<th class="col" scope="col" data-check="{escape(c["id"])}" '
        f'title="{escape(c["title"])}"><div>{escape(c["id"])}</div></th>'
        for c in cols
    )
    nodes = overview.ordered(model["nodes"])
    anchors = {n["node"]: i for i, n in enumerate(nodes)}
    body = "\n".join(_node(i, n, cols) for i, n in enumerate(nodes))
    s = model["summary"]
    verdict = (
        f"{s['nodes_failed']} of {s['nodes']} nodes failed: {', '.join(s['failed'])}"
        if s["failed"]
        else f"all {s['nodes']} nodes passed"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpunode validation: {escape(verdict)}</title>
<style>{CSS}</style></head>
<body>
<h1>GPU cluster validation</h1>
<p class="meta">{escape(verdict)} · generated {escape(model["generated"])}</p>
{_summary(model, nodes, anchors)}
<p class="legend"><span class="s-pass">✔ pass</span><span class="s-warn">! warn</span>
<span class="s-fail">✘ fail</span><span class="s-skip">&ndash; skip</span>
<span class="s-none">· not reported</span> Failing nodes first, healthy nodes folded.
Click a cell for its details.</p>
{_filter(cols)}
<div id="grid">
<table class="grid" id="cols"><thead><tr><th scope="col">node / GPU</th>{head}</tr></thead></table>
{body}
</div>
<div id="panel" role="status">Click a cell for its details.</div>
<script>{JS}</script>
</body></html>
"""
