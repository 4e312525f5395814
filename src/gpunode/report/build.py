"""Build the four report files from result files, as one set (util.files.write_set): a
report directory that cannot be written leaves every file already there as it was."""

from __future__ import annotations

import json
import os

from ..util.files import write_set
from . import html, junit, markdown, overview
from .results import REPORT_SCHEMA, ResultError, load, merge, result_files

FILES = ("index.html", "junit.xml", "report.json", "summary.md")


class ReportDirError(OSError):
    """The report directory cannot be created or written: one line naming it."""


def model_from(paths: list[str], generated: str | None = None) -> dict:
    files = result_files(paths)
    return merge([r for f in files for r in load(f)], generated)


def previous_nodes(path: str) -> tuple[str, list[dict]]:
    """The nodes of the previous report to compare with, and when it was generated: ``path``
    is its report directory or report.json (gpunode.report/v1), or the previous run's result
    files (a file or a directory of them). One line naming it when it is none of these."""
    where = f"previous report {path}"
    report = os.path.join(path, "report.json") if os.path.isdir(path) else path
    if not os.path.exists(report) and not os.path.isdir(path):
        raise ResultError(f"{where}: no such file or directory")
    if os.path.isfile(report):
        try:
            with open(report, "rb") as fh:
                doc = json.loads(fh.read())
        except OSError as exc:
            raise ResultError(f"{where}: cannot be read: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
            raise ResultError(f"{where}: is not JSON ({str(exc)[:80]})") from None
        if isinstance(doc, dict) and doc.get("schema") == REPORT_SCHEMA:
            nodes = doc.get("nodes")
            if not isinstance(nodes, list) or not all(_report_node(n) for n in nodes):
                raise ResultError(f"{where}: nodes is not a list of the report's nodes "
                                  "({node, status, checks})")  # fmt: skip
            return str(doc.get("generated") or "?"), nodes
        if isinstance(doc, dict) and "schema" in doc and doc["schema"] != REPORT_SCHEMA and \
                os.path.basename(report) == "report.json":  # fmt: skip
            raise ResultError(f"{where}: schema is {json.dumps(doc['schema'])[:60]}; expected "
                              f"{REPORT_SCHEMA!r}")  # fmt: skip
    try:  # the previous run's result files
        model = model_from([path])
    except ResultError as exc:
        raise ResultError(f"{where}: neither a report (report.json) nor result files: "
                          f"{exc}") from None  # fmt: skip
    return model["generated"], model["nodes"]


def _report_node(n: object) -> bool:
    return (isinstance(n, dict) and isinstance(n.get("node"), str)
            and isinstance(n.get("status"), str) and isinstance(n.get("checks"), list)
            and all(isinstance(c, dict) for c in n["checks"]))  # fmt: skip


def compare(model: dict, previous: str) -> dict:
    """``model`` with what changed since the previous report (overview.changes) as
    ``changes``: {"previous": {"source", "generated"}, "new", "fixed", ...}."""
    generated, nodes = previous_nodes(previous)
    diff = overview.changes(model["nodes"], nodes)
    return {**model, "changes": {"previous": {"source": previous, "generated": generated}, **diff}}


def render_all(model: dict) -> dict[str, bytes]:
    return {
        "index.html": html.render(model).encode(),
        "junit.xml": junit.render(model),
        "report.json": (json.dumps(model, indent=2) + "\n").encode(),
        "summary.md": markdown.render(model).encode(),
    }


def write(model: dict, outdir: str) -> dict[str, str]:
    """All four files into ``outdir``; returns name -> path."""
    files = render_all(model)  # everything is rendered before anything is written
    try:
        write_set(outdir, files)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        if exc.filename and os.path.basename(exc.filename) in files:
            reason += f": {exc.filename}"
        raise ReportDirError(
            f"report directory {outdir} cannot be written ({reason}); nothing was changed there"
        ) from None
    return {name: os.path.join(outdir, name) for name in files}


__all__ = [
    "FILES",
    "ReportDirError",
    "ResultError",
    "compare",
    "model_from",
    "previous_nodes",
    "render_all",
    "write",
]
