"""The cluster report as one self-contained HTML page: a node-by-check grid (a row per node,
a row per GPU under it for the per-GPU checks, a row per MIG device under its GPU for the
checks about that MIG device), coloured by status, details on click.

No external assets and no framework: inline CSS, and a dozen lines of JS that show a cell's
details in a panel; without JS each node's <details> list below the grid has them all.
"""

from __future__ import annotations

from collections import Counter
from html import escape

from .results import worst

SYMBOL = {"pass": "✔", "warn": "!", "fail": "✘", "skip": "&ndash;"}

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d1d1f;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}
.meta{color:#555;margin:0 0 1em}
.totals span{display:inline-block;padding:.15em .6em;margin-right:.4em;border-radius:3px}
table.grid{border-collapse:collapse;margin:1em 0}
.grid th,.grid td{border:1px solid #d0d0d0;padding:.25em .5em;text-align:center}
.grid thead th{background:#f3f3f3;font-weight:600;font-size:.78em;vertical-align:bottom;
 white-space:nowrap}
.grid thead th.col div{writing-mode:vertical-rl;transform:rotate(180deg);max-height:13em}
.grid th.node{text-align:left;white-space:nowrap;font-weight:600;background:#fafafa}
.grid th.node small,.grid th.gpu small{display:block;font-weight:400;color:#555}
.grid th.gpu{text-align:left;font-weight:400;padding-left:1.6em;background:#fff;
 white-space:nowrap}
.grid th.mig{text-align:left;font-weight:400;padding-left:3em;background:#fbfbfb;
 white-space:nowrap;font-size:.92em}
.grid th.mig small{display:block;font-weight:400;color:#555}
.grid tr.gpurow th.gpu.bad,.grid tr.migrow th.mig.bad{box-shadow:inset 4px 0 0 #c62828}
.grid tr.noderow th.node.bad{box-shadow:inset 4px 0 0 #c62828}
td.cell{min-width:1.6em;cursor:pointer;font-weight:700}
.s-pass{background:#2e7d32;color:#fff}
.s-warn{background:#f9a825;color:#1d1d1f}
.s-fail{background:#c62828;color:#fff}
.s-skip{background:#9e9e9e;color:#fff}
.s-none{background:#f5f5f5;color:#bbb;cursor:default;font-weight:400}
tr.unreachable td.s-none{background:#fbe3e1;color:#c62828}
.grid small.uuid{font-size:.72em;font-family:monospace}
td.cell:focus,td.cell.sel{outline:3px solid #1565c0;outline-offset:-3px}
#panel{border:1px solid #d0d0d0;border-left:6px solid #9e9e9e;padding:.6em 1em;
 margin:1em 0;min-height:2.6em;max-width:70em;white-space:pre-wrap}
#panel.s-pass,#panel.s-warn,#panel.s-fail,#panel.s-skip{background:#fff;color:#1d1d1f}
#panel.s-pass{border-left-color:#2e7d32}#panel.s-warn{border-left-color:#f9a825}
#panel.s-fail{border-left-color:#c62828}#panel.s-skip{border-left-color:#9e9e9e}
details{margin:.4em 0}summary{cursor:pointer;font-weight:600}
table.checks{border-collapse:collapse;margin:.4em 0 .8em 1.2em}
.checks td,.checks th{border:1px solid #e0e0e0;padding:.15em .5em;text-align:left}
.checks td.st{font-weight:700;text-align:center}
.legend span{display:inline-block;padding:0 .5em;margin-right:.3em;border-radius:3px}
"""

JS = """
var panel=document.getElementById('panel');
function show(td){
 document.querySelectorAll('td.sel').forEach(function(e){e.classList.remove('sel')});
 td.classList.add('sel');panel.className=td.className.replace(/\\b(cell|sel)\\b/g,'').trim();
 panel.textContent=td.getAttribute('data-detail');}
document.querySelectorAll('td.cell[data-detail]').forEach(function(td){
 td.tabIndex=0;td.addEventListener('click',function(){show(td)});
 td.addEventListener('keydown',function(e){if(e.key==='Enter')show(td)});});
"""


def _gpu_label(gpu: dict) -> str:
    return f"GPU {gpu.get('index', '?')}"


def where(c: dict) -> str:
    """What a check is about, as a row names it: "", "GPU 1", "MIG 1:0" (<gpu>:<n>)."""
    if c["gpu"] is None:
        return ""
    return f"GPU {c['gpu']}" if c.get("mig") is None else f"MIG {c['gpu']}:{c['mig']}"


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
    bad = " bad" if n["status"] == "fail" else ""
    return f'<th class="node{bad}" scope="row">{escape(n["node"])}{small}</th>'


def _cell(node: str, label: str, col: dict, checks: list[dict]) -> str:
    if not checks:
        return '<td class="cell s-none" title="not reported">·</td>'
    status = worst(c["status"] for c in checks)
    lines = []
    for c in checks:
        about = f"{where(c)} " if c["gpu"] is not None else ""
        lines.append(f"{c['status'].upper():5} {about}{c['detail']}".rstrip())
    detail = "\n".join(lines)
    head = f"{node} · {label} · {col['title']} ({col['id']})"
    text = f"{head}\n{detail}"
    return (
        f'<td class="cell s-{status}" data-status="{status}" data-node="{escape(node)}" '
        f'data-check="{escape(col["id"])}" data-row="{escape(label)}" title="{escape(text)}" '
        f'data-detail="{escape(text)}">{SYMBOL[status]}</td>'
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
        bad = " bad" if worst(c["status"] for c in row_checks) == "fail" else ""
        mig = f"MIG on · {len(g.get('mig') or [])} MIG device(s)" if g.get("mig_enabled") else None
        info = " · ".join(escape(str(x)) for x in (g.get("model"), g.get("pci_bus_id"), mig) if x)
        uuid = escape(str(g.get("uuid") or ""))
        head = (
            f'<th class="gpu{bad}" scope="row">{escape(label)}<small>{info}</small>'
            f'<small class="uuid">{uuid}</small></th>'
        )
        cells = []
        for col in columns:
            if col["per_gpu"]:
                cells.append(_cell(node, label, col, by.get((col["id"], i, None), [])))
            else:
                cells.append('<td class="cell s-none">·</td>')
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
        bad = " bad" if worst(c["status"] for c in checks) == "fail" else ""
        mem = f"{m['memory_mib']} MiB" if isinstance(m.get("memory_mib"), int) else None
        gi_ci = (f"GI {m['gi']} · CI {m['ci']}"
                 if m.get("gi") is not None and m.get("ci") is not None else None)  # fmt: skip
        info = " · ".join(escape(str(x)) for x in (m.get("profile"), mem, gi_ci) if x)
        uuid = escape(str(m.get("uuid") or ""))
        head = (
            f'<th class="mig{bad}" scope="row">{escape(label)}<small>{info}</small>'
            f'<small class="uuid">{uuid}</small></th>'
        )
        cells = [
            _cell(node, label, col, by.get((col["id"], i, k), []))
            if col["per_gpu"] else '<td class="cell s-none">·</td>'
            for col in columns
        ]  # fmt: skip
        rows.append(f'<tr class="migrow" data-node="{escape(node)}" data-gpu="{i}" '
                    f'data-mig="{k}">{head}{"".join(cells)}</tr>')  # fmt: skip
    return rows


def _gpu_cell(c: dict) -> str:
    if c["gpu"] is None:
        return ""
    return escape(str(c["gpu"]) if c.get("mig") is None else f"{c['gpu']}:{c['mig']}")


def _details(n: dict) -> str:
    rows = "".join(
        f'<tr><td class="st s-{c["status"]}">{c["status"]}</td><td>{escape(c["id"])}</td>'
        f"<td>{_gpu_cell(c)}</td><td>{escape(c['title'])}</td>"
        f"<td>{escape(c['detail'])}</td></tr>"
        for c in n["checks"]
    )
    opened = " open" if n["status"] == "fail" else ""
    return (
        f'<details{opened}><summary class="s-{n["status"]}-text">{escape(n["node"])}: '
        f'{n["status"]}</summary><table class="checks"><tr><th>status</th><th>check</th>'
        f"<th>GPU</th><th>title</th><th>detail</th></tr>{rows}</table></details>"
    )


def render(model: dict) -> str:
    cols = model["columns"]
    head = "".join(
        f'<th class="col" scope="col" title="{escape(c["title"])}"><div>{escape(c["id"])}</div></th>'
        for c in cols
    )
    body = "\n".join(r for n in model["nodes"] for r in _rows(n, cols))
    s = model["summary"]
    totals = " ".join(f'<span class="s-{k}">{v} {k}</span>' for k, v in s["checks"].items())
    verdict = (
        f"{s['nodes_failed']} of {s['nodes']} nodes failed: {', '.join(s['failed'])}"
        if s["failed"]
        else f"all {s['nodes']} nodes passed"
    )
    details = "\n".join(_details(n) for n in model["nodes"])
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>gpunode validation: {escape(verdict)}</title>
<style>{CSS}</style></head>
<body>
<h1>GPU cluster validation</h1>
<p class="meta">{escape(verdict)} · generated {escape(model["generated"])}</p>
<p class="totals">{totals}</p>
<table class="grid" id="grid">
<thead><tr><th scope="col">node / GPU</th>{head}</tr></thead>
<tbody>
{body}
</tbody></table>
<p class="legend"><span class="s-pass">✔ pass</span><span class="s-warn">! warn</span>
<span class="s-fail">✘ fail</span><span class="s-skip">&ndash; skip</span>
<span class="s-none">· not reported</span> Click a cell for its details.</p>
<div id="panel" role="status">Click a cell for its details.</div>
<h2>Checks per node</h2>
{details}
<script>{JS}</script>
</body></html>
"""
