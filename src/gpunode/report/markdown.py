"""The cluster report as a short Markdown summary: what changed since the previous report
(--previous: each failure new and resolved, per node, check and GPU), the failures and
warnings with their details, then a line per node (when it was validated and how long
before the report, the Xid codes of its gpu.xid failures and warnings) and the MIG devices
under their GPU (when a node has any).

Names, versions and details come from the nodes' result files and are text, never markup:
each goes through ``md`` (line breaks and control characters become one space; every
character CommonMark or a GFM table gives a meaning — ``|``, ``<``, ``*``, ``[``, a
backslash ... — is backslash-escaped), so no value can end a table cell, add a row or a
list item, or bring raw HTML."""

from __future__ import annotations

import re
from collections import Counter

from . import overview
from .results import worst

_BREAKS = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# CommonMark's backslash escapes cover all ASCII punctuation; these are the characters that
# open or close something inline (code, emphasis, links: no `]` means no `](`, HTML,
# entities, GFM strikethrough) or a table cell. A value never starts a line, so line-start
# markers (#, -, 1.) need nothing.
_SPECIAL = re.compile(r"([\\`*_\[\]<>|~&])")


def md(value) -> str:
    """``value`` as literal Markdown text on one line (see the module docstring)."""
    return _SPECIAL.sub(r"\\\1", _BREAKS.sub(" ", str(value)))


def _where(c: dict) -> str:
    if c["gpu"] is None:
        return md(c["id"])
    if c.get("mig") is None:
        return f"{md(c['id'])} (GPU {md(c['gpu'])})"
    return f"{md(c['id'])} (MIG {md(c['gpu'])}:{md(c['mig'])})"


def _mig_table(model: dict) -> list[str]:
    """A row per MIG device, under its GPU: node, GPU, <gpu>:<n>, profile, memory, UUID and
    the worst verdict of the checks about it (mig.isolation)."""
    rows = []
    for n in model["nodes"]:
        for g in n.get("gpus") or []:
            for m in g.get("mig") or []:
                i, k = g.get("index"), m.get("index")
                checks = [c["status"] for c in n["checks"]
                          if c["gpu"] == i and c.get("mig") == k]  # fmt: skip
                status = worst(checks) or "—"
                mem = f"{md(m['memory_mib'])} MiB" if m.get("memory_mib") is not None else "—"
                gpu = f"{md(i)} {md(g.get('model') or '')}".strip()
                rows.append(f"| {md(n['node'])} | {gpu} | {md(i)}:{md(k)} | "
                            f"{md(m.get('profile') or '—')} | {mem} | {md(m.get('uuid') or '—')} "
                            f"| {md(status)} |")  # fmt: skip
    if not rows:
        return []
    return ["", "## MIG devices", "",
            "| node | GPU | MIG device | profile | memory | UUID | status |",
            "| --- | --- | --- | --- | --- | --- | --- |", *rows]  # fmt: skip


CHANGES_SHOWN = 200  # the per-check changes listed; report.json has them all


def _changes(model: dict) -> list[str]:
    """What changed since the previous report (--previous), first: each failure new and
    each resolved, per node, check and GPU; then the nodes fixed, added and gone."""
    ch = model.get("changes")
    if not ch:
        return []
    prev = ch["previous"]
    failures = ch.get("failures") or []
    new = [e for e in failures if e["change"] == "new"]
    resolved = [e for e in failures if e["change"] == "resolved"]
    out = ["## Since the previous report", "",
           f"Previous report: {md(prev['source'])}, generated {md(prev['generated'])}. "
           f"**{len(new)} new failure{'' if len(new) == 1 else 's'}**, {len(resolved)} "
           f"resolved; {len(ch['fixed'])} node(s) fixed, {len(ch['still'])} still failing.", ""]  # fmt: skip
    for e in failures[:CHANGES_SHOWN]:
        on = overview.where(e)
        head = f"- {e['change']}: {md(e['node'])} {md(e['check'])}" + (f" ({md(on)})" if on else "")
        if e["change"] == "new":
            out.append(f"{head}: {md(e['detail'])}")
        else:
            out.append(f"{head}: {md(e['status'])} now ({md(e['detail'])}); was: {md(e['was'])}")
    if len(failures) > CHANGES_SHOWN:
        out.append(f"- and {len(failures) - CHANGES_SHOWN} more (report.json: changes.failures)")
    if ch["added"]:
        out += ["", f"Not in the previous report: {', '.join(md(n) for n in ch['added'])}."]
    if ch["gone"]:
        out += ["", f"Gone since: {', '.join(md(n) for n in ch['gone'])}."]
    return [*out, ""]


def render(model: dict) -> str:
    s = model["summary"]
    counts = ", ".join(f"{v} {k}" for k, v in s["checks"].items())
    if s["failed"]:
        failed = ", ".join(md(n) for n in s["failed"])
        verdict = f"**{s['nodes_failed']} of {s['nodes']} nodes failed**: {failed}."
    else:
        verdict = f"All {s['nodes']} nodes passed."
    out = ["# GPU cluster validation", "", *_changes(model), f"{verdict} Checks: {counts}.", ""]
    problems = [
        f"- {md(n['node'])}: {md(c['status'])} {_where(c)}: {md(c['detail'])}"
        for n in model["nodes"]
        for c in n["checks"]
        if c["status"] in ("fail", "warn")
    ]
    if problems:
        out += ["## Failures and warnings", "", *problems, ""]
    out += ["## Nodes", "", "| node | status | validated | driver | CUDA | GPUs | Xid |",
            "| --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for n in model["nodes"]:
        v = n.get("versions") or {}
        models = Counter(g.get("model") or "unknown" for g in n.get("gpus") or [])
        gpus = ", ".join(f"{c}x {md(m)}" for m, c in models.items()) or "—"
        cuda = ", ".join(md(x) for x in v.get("cuda_installed") or []) or "—"
        status = "unreachable" if n.get("unreachable") else md(n["status"])
        status = "could not run" if n.get("error") else status
        driver = md(v.get("driver_loaded")) if v.get("driver_loaded") else "—"
        when = "—"
        if n.get("started"):  # the result's start, and how long before the report
            when = f"{md(n['started'])} ({md(overview.age_text(n.get('age_s')))} before)"
        xids = ", ".join(f"{e['code']} ({md(e['status'])}"
                         + (f" GPU {', '.join(str(g) for g in e['gpus'])})" if e["gpus"] else ")")
                         for e in overview.xids(n)) or "—"  # fmt: skip
        out.append(f"| {md(n['node'])} | {status} | {when} | {driver} | {cuda} | {gpus} | {xids} |")
    out += _mig_table(model)
    return "\n".join(out).replace("|  |", "| — |") + "\n"
