"""The cluster report as one self-contained HTML page: a node-by-check grid (a row per node,
a row per GPU under it for the per-GPU checks, a row per MIG device under its GPU for the
checks about that MIG device), coloured by status, details on click.

At 64 nodes x 8 GPUs and more (issue 21): nodes ordered failures first and healthy ones
folded to one summary line (overview.py; <details>, no script needed), a summary at the
top (nodes and GPUs by status, which checks fail where), a filter by check and status.
At 500 (issue 28): a folded node has no grid, only its GPUs and its checks each verdict
once (or a link to a node above with the same), the healthy nodes in one closed fold, the
header names 10 failed nodes, groups by GPU model and driver, a find by node, GPU, bus id
or UUID, and what changed since a previous report (model["changes"], build.compare;
issue 37: also per check and GPU, each failure new or resolved, a table):
13 MB -> 2 MB, a 2 s load -> 0.6 s in Chromium (benchmarks/bench_report.py).

No external assets and no framework: inline CSS, and a few dozen lines of JS (the details
panel, the filter and find), both allowed by hash in the page's Content-Security-Policy and nothing
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
table.grid{border-collapse:collapse;margin:0;table-layout:fixed}
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
.grid th.gpu small.bus{font-family:monospace;font-size:.8em;margin-left:.5em}
.problems .also{color:#555;font-size:.92em}
#groups td{text-align:right}#groups td:first-child,#groups td:nth-child(2){text-align:left}
details.groups{margin:.4em 0}details.groups>summary{font-weight:600}
details.healthy>summary{font-weight:600;padding:.3em 0}
details.node{content-visibility:auto;contain-intrinsic-size:auto 2em}
.changes ul{margin:.2em 0 .6em;padding-left:1.4em}.changes b{padding:0 .4em;border-radius:3px}
.when{color:#555;font-size:.85em;margin-left:.6em}.badge.xid{margin-left:.4em}
.grid th small.serial{font-family:monospace;font-size:.8em}
table.diff{border-collapse:collapse;margin:.2em 0 .6em;font-size:.9em}
.diff td,.diff th{border:1px solid #e0e0e0;padding:.1em .5em;text-align:left}
table.gpus,table.list{border-collapse:collapse;margin:.3em 0 .5em 1.2em;font-size:.9em}
.gpus td,.gpus th,.list td,.list th{border:1px solid #e0e0e0;padding:.1em .5em;text-align:left}
.gpus td.uuid{font-family:monospace;font-size:.85em}
.list td:first-child{font-weight:700;text-align:center}p.info{margin:.2em 0 0 1.2em;color:#555}
tr.hit>*{outline:2px solid #1565c0;outline-offset:-2px}
"""

# the details panel (click a cell) and the filter (find, check, status, group); without JS
# the filter stays hidden and every node, row and check is on the page (a cell's title,
# each node's check list)
JS = """
var panel=document.getElementById('panel');
function show(td){
 document.querySelectorAll('td.sel').forEach(function(e){e.classList.remove('sel')});
 td.classList.add('sel');panel.className=td.className.replace(/\\b(cell|sel)\\b/g,'').trim();
 var col=document.getElementById('cols').rows[0].cells[td.cellIndex],tr=td.parentNode,
  row=tr.classList.contains('noderow')?'node':tr.cells[0].firstChild.textContent;
 panel.textContent=tr.getAttribute('data-node')+' · '+row+' · '+
  col.getAttribute('title')+' ('+col.getAttribute('data-check')+')\\n'+td.getAttribute('title');}
function cell(e){var td=e.target.closest('td.cell[data-status]');if(td)show(td);}
var grid=document.getElementById('grid');grid.addEventListener('click',cell);
grid.addEventListener('keydown',function(e){if(e.key==='Enter')cell(e)});
document.querySelectorAll('td.s-fail[data-status],td.s-warn[data-status]').forEach(
 function(td){td.tabIndex=0});
var form=document.getElementById('filter'),fc=document.getElementById('f-check'),
 fs=document.getElementById('f-status'),ff=document.getElementById('f-find'),
 fg=document.getElementById('f-group'),count=document.getElementById('f-count');
var ids=[].map.call(document.querySelectorAll('#cols th.col'),
 function(th){return th.getAttribute('data-check')});
var nodes=[].slice.call(document.querySelectorAll('details.node')),
 healthy=document.getElementById('healthy')||document.createElement('i');
nodes.forEach(function(d){d.setAttribute('data-open',d.open?'1':'')});
function text(e){return e.textContent.toLowerCase()}
function filter(){
 was=true;var chk=fc.value,st=fs.value?fs.value.split(' '):null,q=ff.value.trim().toLowerCase(),
  grp=fg.value,ck=!!(chk||st),on=!!(ck||q||grp),used={},shown=0,inHealthy=false;
 function hit(td,i){var s=td.getAttribute('data-status');
  return !!s&&(!chk||ids[i-1]===chk)&&(!st||st.indexOf(s)>=0);}
 nodes.forEach(function(d){
  var any=!ck,found=!q,rows=d.querySelectorAll('table.grid tr, table.gpus tr');
  if(q&&d.getAttribute('data-node').toLowerCase().indexOf(q)>=0)found=true;
  var mine=!!q&&d.getAttribute('data-node').toLowerCase().indexOf(q)>=0;
  if(q||d.querySelector('tr.hit'))rows.forEach(function(tr){
   var f=!!q&&text(tr).indexOf(q)>=0;tr.classList.toggle('hit',f&&!mine);found=found||f;});
  if(ck){
   d.querySelectorAll('table.grid tr').forEach(function(tr){
    var m=false;
    for(var i=1;i<tr.cells.length;i++){if(hit(tr.cells[i],i)){m=true;used[i]=true;}}
    tr.classList.toggle('off',!m&&!tr.classList.contains('noderow'));any=any||m;});
   var same=d.querySelector('p.same'),own=!same,list=(own?d:document.getElementById(
    'node-'+same.getAttribute('data-same'))).querySelectorAll('table.list tr');
   [].forEach.call(list,function(tr,j){
    if(!j)return;var c=tr.cells[1].textContent,s=tr.cells[0].textContent,
     m=(!chk||c===chk)&&(!st||st.indexOf(s)>=0);
    if(m)used[ids.indexOf(c)+1]=true;if(own)tr.classList.toggle('off',!m);any=any||m;});
  }else d.querySelectorAll('tr.off').forEach(function(tr){tr.classList.remove('off')});
  var show=any&&found&&(!grp||d.getAttribute('data-group')===grp);
  d.classList.toggle('off',on&&!show);
  d.open=on?show&&(ck||!!q||d.getAttribute('data-open')==='1'):d.getAttribute('data-open')==='1';
  if(show||!on)shown++;if(show&&on&&healthy.contains(d))inHealthy=true;});
 if(healthy.tagName)healthy.open=on?inHealthy:false;
 document.querySelectorAll('table.grid tr').forEach(function(tr){
  for(var i=1;i<tr.cells.length;i++)tr.cells[i].classList.toggle('off',ck&&!used[i]);});
 count.textContent=on?shown+' of '+nodes.length+' nodes':'';}
document.querySelectorAll('tr[data-problem] .ck').forEach(function(b){
 b.addEventListener('click',function(){
  fc.value=b.parentNode.parentNode.getAttribute('data-problem');fs.value='fail warn';
  filter();form.scrollIntoView();});});
document.querySelectorAll('tr[data-group] .ck').forEach(function(b){
 b.addEventListener('click',function(){
  fg.value=b.parentNode.parentNode.getAttribute('data-group');filter();form.scrollIntoView();});});
var was=false;  // the page loads unfiltered unless the browser kept a field's value
function filtered(){if(fc.value||fs.value||fg.value||ff.value||was){was=true;filter();}}
[fc,fs,fg].forEach(function(e){e.addEventListener('change',filtered)});
ff.addEventListener('input',filtered);
form.hidden=false;filtered();
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


def _node_info(n: dict) -> list[str]:
    """What a node's header says under its name: why it has no result, or its driver, CUDA,
    toolkit, gpunode and GPU models."""
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
    return lines


def _node_header(n: dict) -> str:
    small = "".join(f"<small>{escape(t)}</small>" for t in _node_info(n))
    bad = _mark(n["status"])
    return f'<th class="node{bad}" scope="row">{escape(n["node"])}{small}</th>'


def _cell(col: dict, checks: list[dict]) -> str:
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
    # the node and row are the row's (data-node, its header), for the panel to name
    return (
        f'<td class="cell s-{status}" data-status="{status}" data-check="{escape(col["id"])}" '
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
        cells.append(_cell(col, checks))
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
        # the bus id first, whole; the model after it (cut with an ellipsis if it must be)
        info = " · ".join(escape(str(x)) for x in (g.get("model"), mig) if x)
        bus = escape(str(g.get("pci_bus_id") or ""))
        uuid = escape(str(g.get("uuid") or ""))
        full = " · ".join(x for x in (bus, info, uuid) if x)
        serial = escape(str(g.get("serial") or ""))
        if serial:
            full += f" · S/N {serial}"
        head = (
            f'<th class="gpu{bad}" scope="row" title="{full}">{escape(label)}'
            f"{_xid_badges(overview.xids(n, i))}"
            f'<small class="bus">{bus}</small><small>{info}</small>'
            f'<small class="uuid">{uuid}</small>'
            + (f'<small class="serial">S/N {serial}</small>' if serial else "")
            + "</th>"
        )
        cells = []
        for col in columns:
            if col["per_gpu"]:
                cells.append(_cell(col, by.get((col["id"], i, None), [])))
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
            _cell(col, by.get((col["id"], i, k), []))
            if col["per_gpu"] else NONE
            for col in columns
        ]  # fmt: skip
        rows.append(f'<tr class="migrow" data-node="{escape(node)}" data-gpu="{i}" '
                    f'data-mig="{k}">{head}{"".join(cells)}</tr>')  # fmt: skip
    return rows


def _ranges(indices: list[int]) -> str:
    """0, 1, 2, 3, 5 -> "0-3, 5"."""
    out: list[str] = []
    for i in sorted(indices):
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)


def _on(checks: list[dict]) -> str:
    """Where a group of verdicts was checked: "node", "GPU 0-7", "MIG 1:0, 1:1"."""
    gpus = [c["gpu"] for c in checks if c["gpu"] is not None and c.get("mig") is None]
    migs = [f"{c['gpu']}:{c['mig']}" for c in checks if c.get("mig") is not None]
    parts = (
        (["node"] if any(c["gpu"] is None for c in checks) else [])
        + ([f"GPU {_ranges(gpus)}"] if gpus else [])
        + ([f"MIG {', '.join(migs)}"] if migs else [])
    )
    return " · ".join(parts)


def _gpu_list(n: dict) -> str:
    """A folded node's versions and GPUs (and MIG devices): index, bus id (a MIG device's
    profile and memory), UUID, and the model where the node's GPUs differ."""
    info = f'<p class="info">{escape(" · ".join(_node_info(n)))}</p>'
    gpus = n.get("gpus") or []
    mixed = len({g.get("model") for g in gpus}) > 1
    rows = []
    for g in gpus:
        model = f"<td>{escape(str(g.get('model') or ''))}</td>" if mixed else ""
        mig = " · MIG on" if g.get("mig_enabled") else ""
        rows.append(
            f"<tr><td>{escape(_gpu_label(g))}</td><td>{escape(str(g.get('pci_bus_id') or ''))}"
            f'{mig}</td><td class="uuid">{escape(str(g.get("uuid") or ""))}</td>'
            f'<td class="serial">{escape(str(g.get("serial") or ""))}</td>{model}</tr>'
        )
        for m in g.get("mig") or []:
            mem = f" · {m['memory_mib']} MiB" if isinstance(m.get("memory_mib"), int) else ""
            rows.append(
                f"<tr><td>MIG {escape(str(g.get('index', '?')))}:{escape(str(m['index']))}</td>"
                f"<td>{escape(str(m.get('profile') or ''))}{mem}</td>"
                f'<td class="uuid">{escape(str(m.get("uuid") or ""))}</td><td></td>'
                f"{'<td></td>' if mixed else ''}</tr>"
            )
    if not rows:
        return info
    return (f'{info}<table class="gpus"><tr><th>GPU</th><th>bus id</th><th>UUID</th>'
            f"<th>serial</th>{'<th>model</th>' if mixed else ''}</tr>{''.join(rows)}</table>")  # fmt: skip


def _check_list(n: dict) -> str:
    """A folded node's checks, each verdict once with where it was checked (its GPUs that
    gave the same verdict and detail on one row): what its grid's cells would say."""
    groups: dict[tuple[str, str, str], list[dict]] = {}
    for c in n["checks"]:
        groups.setdefault((c["id"], c["status"], c["detail"]), []).append(c)
    rows = "".join(
        f'<tr><td class="s-{st}">{st}</td><td>{escape(cid)}</td><td>{escape(_on(cs))}</td>'
        f"<td>{escape(detail)}</td></tr>"
        for (cid, st, detail), cs in groups.items()
    )
    return (
        '<table class="checks list"><tr><th>status</th><th>check</th><th>on</th>'
        f"<th>detail</th></tr>{rows}</table>"
    )


def _node(
    i: int, n: dict, columns: list[dict], group: int, seen: dict[str, tuple[int, str]]
) -> str:
    """One node: a <details> whose summary is its one line (open unless it is healthy:
    overview.folded). An open node holds its grid rows and its list of checks; a folded
    one its GPUs and its checks, each verdict once (a grid of ticks per healthy node is
    what made the page 13 MB at 500 nodes)."""
    k = overview.kind(n)
    folded = overview.folded(n)
    line = escape(overview.node_line(n))
    if folded:
        checks = _check_list(n)
        first, name = seen.setdefault(checks, (i, n["node"]))
        if first != i:  # the same verdicts and details as a node above: named, not repeated
            checks = (
                f'<p class="same" data-same="{first}">every check as on '
                f'<a href="#node-{first}">{escape(name)}</a>: the same verdicts, the same '
                "details</p>"
            )
        inner = f"{_gpu_list(n)}{checks}"
    else:
        rows = "\n".join(_rows(n, columns))
        inner = (f'<table class="grid"><tbody>\n{rows}\n</tbody></table>\n<details class="all">'
                 f"<summary>the checks of {escape(n['node'])}, each verdict once</summary>"
                 f"{_check_list(n)}</details>")  # fmt: skip
    return (
        f'<details class="node k-{k}" id="node-{i}" data-node="{escape(n["node"])}" '
        f'data-status="{k}" data-group="{group}"{"" if folded else " open"}><summary>'
        f'<span class="badge s-{k}">{k}</span><b>{escape(n["node"])}</b>'
        f'<span class="line">{line}</span>{_xid_badges(overview.xids(n), True)}{_when(n)}'
        f"</summary>\n{inner}</details>"
    )


def _when(n: dict) -> str:
    """When the node was validated (its result's start) and how long before the report."""
    said = overview.validated(n)
    if not said:
        return ""
    age = overview.age_text(n.get("age_s"))
    return (f'<span class="when" title="{escape(said)}">validated '
            f"{escape(str(n['started']))} · {escape(age)} before</span>")  # fmt: skip


def _xid_badges(xids: list[dict], where: bool = False) -> str:
    """A badge per Xid code of the gpu.xid failures and warnings ("Xid 79"), the GPUs that
    logged it in its tooltip (``where``: also after the code)."""
    out = []
    for e in xids:
        gpus = ", ".join(str(g) for g in e["gpus"])
        on = f" on GPU {gpus}" if gpus else ""
        shown = f"Xid {e['code']}" + (f" · GPU {gpus}" if where and gpus else "")
        out.append(f'<span class="badge xid s-{e["status"]}" data-xid="{e["code"]}" '
                   f'title="gpu.xid {e["status"]}: Xid {e["code"]}{on}">{escape(shown)}</span>')  # fmt: skip
    return "".join(out)


def _plural(k: int, what: str) -> str:
    return f"{k} {what}{'' if k == 1 else 's'}"


def _links(names: list[str], anchors: dict[str, int], most: int = 12) -> str:
    """The nodes named, each a link to it on the page: the first ``most``, then a count."""
    links = ", ".join(
        f'<a href="#node-{anchors[name]}">{escape(name)}</a>' for name in names[:most]
    )
    more = len(names) - most
    return links + (f" and {more} more" if more > 0 else "")


def _groups(groups: list[dict]) -> str:
    """The nodes by GPU model and driver: a row per group, counts by standing."""
    if not groups:
        return ""
    kinds = overview.RANKS
    rows = "".join(
        f'<tr data-group="{i}"><td><span class="ck" title="show only this group">'
        f"{escape(g['model'])}</span></td><td>{escape(g['driver'])}</td>"
        f"<td>{len(g['nodes'])}</td>"
        + "".join(f'<td class="{f"s-{k}" if g["kinds"][k] and k != "pass" else ""}">'
                  f"{g['kinds'][k] or ''}</td>" for k in kinds)
        + "</tr>"
        for i, g in enumerate(groups)
    )  # fmt: skip
    head = "".join(f"<th>{k}</th>" for k in kinds)
    return (
        '<details class="groups" open><summary>Nodes by GPU model and driver '
        f"({_plural(len(groups), 'group')})</summary>"
        '<table class="problems" id="groups"><thead><tr><th>GPU model</th><th>driver</th>'
        f"<th>nodes</th>{head}</tr></thead><tbody>{rows}</tbody></table></details>"
    )


def _changes(changes: dict | None, anchors: dict[str, int]) -> str:
    """What changed since the previous report: the nodes newly failing (with the checks
    newly failing), fixed nodes, the nodes added and gone, then each failure new or
    resolved per node, check and GPU (a table)."""
    if not changes:
        return ""
    prev = changes["previous"]
    items = []
    new = changes["new"]
    if new:
        links = ", ".join(
            f'<a href="#node-{anchors[e["node"]]}">{escape(e["node"])}</a>'
            + (f" ({escape(', '.join(e['checks']))})" if e["checks"] else "")
            for e in new[:30]
        )
        more = f" and {len(new) - 30} more" if len(new) > 30 else ""
        items.append(f'<li id="new-failures"><b class="s-fail">{_plural(len(new), "node")} '
                     f"newly failing</b> {links}{more}</li>")  # fmt: skip
    else:
        items.append('<li id="new-failures">no node newly failing</li>')
    per_check = [e["change"] for e in changes.get("failures") or []]
    items.append(f'<li id="check-changes">per check and GPU: '
                 f"{_plural(per_check.count('new'), 'new failure')}, "
                 f"{per_check.count('resolved')} resolved</li>")  # fmt: skip
    fixed = changes["fixed"]
    items.append(
        f'<li id="fixed"><b class="s-pass">{len(fixed)} fixed</b> {_links(fixed, anchors, 30)}</li>'
        if fixed else '<li id="fixed">no node fixed</li>'
    )  # fmt: skip
    if changes["still"]:
        items.append(f"<li>{len(changes['still'])} still failing</li>")
    if changes["added"]:
        items.append(f"<li>{_plural(len(changes['added']), 'node')} not in the previous report: "
                     f"{_links(changes['added'], anchors)}</li>")  # fmt: skip
    if changes["gone"]:
        gone = ", ".join(escape(g) for g in changes["gone"][:12])
        more = f" and {len(changes['gone']) - 12} more" if len(changes["gone"]) > 12 else ""
        items.append(f"<li>{_plural(len(changes['gone']), 'node')} gone since: {gone}{more}</li>")
    return (
        f'<div class="changes" id="changes"><h2>Since the previous report '
        f"(generated {escape(str(prev['generated']))}, {escape(str(prev['source']))})</h2>"
        f"<ul>{''.join(items)}</ul>{_diff(changes.get('failures') or [], anchors)}</div>"
    )


DIFF_ROWS = 200  # the per-check changes shown; report.json has them all


def _diff(failures: list[dict], anchors: dict[str, int]) -> str:
    """A row per failure new or resolved since the previous report: node, check, GPU (or
    MIG device), the detail now and then."""
    if not failures:
        return ""
    rows = []
    for e in failures[:DIFF_ROWS]:
        cls = "s-fail" if e["change"] == "new" else "s-pass"
        was = "" if e["was"] is None else escape(e["was"])
        rows.append(
            f'<tr data-change="{e["change"]}"><td><b class="{cls}">{e["change"]}</b></td>'
            f'<td><a href="#node-{anchors[e["node"]]}">{escape(e["node"])}</a></td>'
            f"<td>{escape(e['check'])}</td><td>{escape(overview.where(e)) or '—'}</td>"
            f"<td>{escape(e['status'])}: {escape(e['detail'])}</td><td>{was}</td></tr>"
        )
    more = len(failures) - DIFF_ROWS
    tail = f"<p>and {more} more (report.json: changes.failures)</p>" if more > 0 else ""
    return (
        '<table class="diff" id="failure-changes"><thead><tr><th>change</th><th>node</th>'
        "<th>check</th><th>GPU</th><th>now</th><th>then</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>{tail}"
    )


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
        links = _links(p["nodes"], anchors)
        also = f" (warn: {escape(p['warn_text'])})" if p["warn_text"] else ""
        if p["warn_nodes"]:  # the nodes that only warn on it, linked too
            links += f'<br><span class="also">warn only: {_links(p["warn_nodes"], anchors)}</span>'

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


def _filter(columns: list[dict], groups: list[dict]) -> str:
    """The filter (shown by the script): text found in a node (its name, its GPUs' models,
    bus ids and UUIDs), one check, one status, one group of model and driver."""
    options = "".join(
        f'<option value="{escape(c["id"])}">{escape(c["id"])}</option>' for c in columns
    )
    statuses = [("", "any status"), ("fail warn", "fail or warn"), ("fail", "fail"),
                ("warn", "warn"), ("skip", "skip"), ("pass", "pass")]  # fmt: skip
    st = "".join(f'<option value="{v}">{t}</option>' for v, t in statuses)
    group = "".join(
        f'<option value="{i}">{escape(g["model"])} · driver {escape(g["driver"])} '
        f"({len(g['nodes'])})</option>"
        for i, g in enumerate(groups)
    )
    return (
        '<form class="filter" id="filter" hidden><label>Find <input type="search" id="f-find" '
        'placeholder="node, GPU, bus id or UUID" size="28"></label> '
        '<label>check <select id="f-check">'
        f'<option value="">all checks</option>{options}</select></label> '
        f'<label>with status <select id="f-status">{st}</select></label> '
        f'<label>group <select id="f-group"><option value="">all</option>{group}</select>'
        '</label><span id="f-count" role="status"></span></form>'
    )


HEADER_NAMES = 10  # the failed nodes the header names; the summary has them all


def verdict(summary: dict, names: int | None = HEADER_NAMES) -> str:
    """The page's one line: how many nodes failed and the first ``names`` of them."""
    if not summary["failed"]:
        return f"all {summary['nodes']} nodes passed"
    head = f"{summary['nodes_failed']} of {summary['nodes']} nodes failed"
    if names is None:
        return head
    more = len(summary["failed"]) - names
    return f"{head}: {', '.join(summary['failed'][:names])}" + (
        f" and {more} more" if more > 0 else "")  # fmt: skip


def render(model: dict) -> str:
    cols = model["columns"]
    head = "".join(
        f'<th class="col" scope="col" data-check="{escape(c["id"])}" '
        f'title="{escape(c["title"])}"><div>{escape(c["id"])}</div></th>'
        for c in cols
    )
    nodes = overview.ordered(model["nodes"])
    anchors = {n["node"]: i for i, n in enumerate(nodes)}
    groups = overview.groups(nodes)
    group_of = {name: i for i, g in enumerate(groups) for name in g["nodes"]}
    seen: dict[str, tuple[int, str]] = {}  # a folded node's check list -> the first node
    shown = [_node(i, n, cols, group_of[n["node"]], seen) for i, n in enumerate(nodes)]
    healthy = sum(overview.folded(n) for n in nodes)
    body = "\n".join(shown[: len(nodes) - healthy])
    if healthy:  # the healthy nodes, last, in one closed fold of their own
        body += (
            f'\n<details class="healthy" id="healthy"><summary>{_plural(healthy, "node")} '
            "passed every check they ran (or skipped it with a reason)</summary>\n"
            + "\n".join(shown[len(nodes) - healthy :])
            + "\n</details>"
        )
    s = model["summary"]
    title = verdict(s, None)
    line = verdict(s)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="{CSP}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpunode validation: {escape(title)}</title>
<style>{CSS}</style></head>
<body>
<h1>GPU cluster validation</h1>
<p class="meta" id="verdict">{escape(line)} · generated {escape(model["generated"])}</p>
{_changes(model.get("changes"), anchors)}
{_summary(model, nodes, anchors)}
{_groups(groups)}
<p class="legend"><span class="s-pass">✔ pass</span><span class="s-warn">! warn</span>
<span class="s-fail">✘ fail</span><span class="s-skip">&ndash; skip</span>
<span class="s-none">· not reported</span> Failing nodes first, healthy nodes folded
(their GPUs and their checks, each verdict once). Click a cell for its details.</p>
{_filter(cols, groups)}
<div id="grid">
<table class="grid" id="cols"><thead><tr><th scope="col">node / GPU</th>{head}</tr></thead></table>
{body}
</div>
<div id="panel" role="status">Click a cell for its details.</div>
<script>{JS}</script>
</body></html>
"""
