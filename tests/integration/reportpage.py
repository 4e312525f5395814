"""The report page's grid read back as the integration tests judge it: which cells of a
node have a status, by row ("node", "GPU <n>") and check. The page's markup is
gpunode.report.html's; a row carries its node (``data-node``) and GPU (``data-gpu``), a cell
its status and check."""

from __future__ import annotations

import html
import re

_ROW = re.compile(r'<tr class="(\w+)[^"]*" data-node="([^"]*)"(?: data-gpu="(\d+)")?[^>]*>')
_CELL = re.compile(r'data-status="(\w+)" data-check="([^"]+)"')


def cells(page: str, node: str, status: str) -> set[tuple[str, str]]:
    """(row, check) of every cell of ``node`` with ``status``; MIG rows are left out."""
    found: set[tuple[str, str]] = set()
    rows = list(_ROW.finditer(page))
    for i, m in enumerate(rows):
        kind, name, gpu = m.group(1), html.unescape(m.group(2)), m.group(3)
        if name != node or kind not in ("noderow", "gpurow"):
            continue
        end = rows[i + 1].start() if i + 1 < len(rows) else len(page)
        row = "node" if kind == "noderow" else f"GPU {gpu}"
        for c in _CELL.finditer(page, m.end(), end):
            if c.group(1) == status:
                found.add((row, html.unescape(c.group(2))))
    return found
