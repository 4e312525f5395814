"""Build the four report files from result files, as one set (util.files.write_set): a
report directory that cannot be written leaves every file already there as it was."""

from __future__ import annotations

import json
import os

from ..util.files import write_set
from . import html, junit, markdown
from .results import ResultError, load, merge, result_files

FILES = ("index.html", "junit.xml", "report.json", "summary.md")


class ReportDirError(OSError):
    """The report directory cannot be created or written: one line naming it."""


def model_from(paths: list[str], generated: str | None = None) -> dict:
    files = result_files(paths)
    return merge([r for f in files for r in load(f)], generated)


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


__all__ = ["FILES", "ReportDirError", "ResultError", "model_from", "render_all", "write"]
