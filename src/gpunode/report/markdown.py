"""The cluster report as a short Markdown summary: a line per node, then the failures and
warnings with their details."""

from __future__ import annotations

from collections import Counter


def _where(c: dict) -> str:
    return c["id"] if c["gpu"] is None else f"{c['id']} (GPU {c['gpu']})"


def render(model: dict) -> str:
    s = model["summary"]
    counts = ", ".join(f"{v} {k}" for k, v in s["checks"].items())
    if s["failed"]:
        verdict = f"**{s['nodes_failed']} of {s['nodes']} nodes failed**: {', '.join(s['failed'])}."
    else:
        verdict = f"All {s['nodes']} nodes passed."
    out = ["# GPU cluster validation", "", f"{verdict} Checks: {counts}.", ""]
    out += ["| node | status | driver | CUDA | GPUs |", "| --- | --- | --- | --- | --- |"]
    for n in model["nodes"]:
        v = n.get("versions") or {}
        models = Counter(g.get("model") or "unknown" for g in n.get("gpus") or [])
        gpus = ", ".join(f"{c}x {m}" for m, c in models.items()) or "—"
        cuda = ", ".join(v.get("cuda_installed") or []) or "—"
        status = "unreachable" if n.get("unreachable") else n["status"]
        status = "could not run" if n.get("error") else status
        out.append(
            f"| {n['node']} | {status} | {v.get('driver_loaded') or '—'} | {cuda} | {gpus} |"
        )
    problems = [
        f"- {n['node']}: {c['status']} {_where(c)}: {c['detail']}"
        for n in model["nodes"]
        for c in n["checks"]
        if c["status"] in ("fail", "warn")
    ]
    if problems:
        out += ["", "## Failures and warnings", "", *problems]
    return "\n".join(out).replace("|  |", "| — |") + "\n"
