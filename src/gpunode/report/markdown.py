"""The cluster report as a short Markdown summary: a line per node, then the failures and
warnings with their details.

Names, versions and details come from the nodes' result files and are text, never markup:
each goes through ``md`` (line breaks and control characters become one space; every
character CommonMark or a GFM table gives a meaning — ``|``, ``<``, ``*``, ``[``, a
backslash ... — is backslash-escaped), so no value can end a table cell, add a row or a
list item, or bring raw HTML."""

from __future__ import annotations

import re
from collections import Counter

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
    return md(c["id"]) if c["gpu"] is None else f"{md(c['id'])} (GPU {md(c['gpu'])})"


def render(model: dict) -> str:
    s = model["summary"]
    counts = ", ".join(f"{v} {k}" for k, v in s["checks"].items())
    if s["failed"]:
        failed = ", ".join(md(n) for n in s["failed"])
        verdict = f"**{s['nodes_failed']} of {s['nodes']} nodes failed**: {failed}."
    else:
        verdict = f"All {s['nodes']} nodes passed."
    out = ["# GPU cluster validation", "", f"{verdict} Checks: {counts}.", ""]
    out += ["| node | status | driver | CUDA | GPUs |", "| --- | --- | --- | --- | --- |"]
    for n in model["nodes"]:
        v = n.get("versions") or {}
        models = Counter(g.get("model") or "unknown" for g in n.get("gpus") or [])
        gpus = ", ".join(f"{c}x {md(m)}" for m, c in models.items()) or "—"
        cuda = ", ".join(md(x) for x in v.get("cuda_installed") or []) or "—"
        status = "unreachable" if n.get("unreachable") else md(n["status"])
        status = "could not run" if n.get("error") else status
        driver = md(v.get("driver_loaded")) if v.get("driver_loaded") else "—"
        out.append(f"| {md(n['node'])} | {status} | {driver} | {cuda} | {gpus} |")
    problems = [
        f"- {md(n['node'])}: {md(c['status'])} {_where(c)}: {md(c['detail'])}"
        for n in model["nodes"]
        for c in n["checks"]
        if c["status"] in ("fail", "warn")
    ]
    if problems:
        out += ["", "## Failures and warnings", "", *problems]
    return "\n".join(out).replace("|  |", "| — |") + "\n"
