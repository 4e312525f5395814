"""Paths of the project's own files named in the Ansible suite and the docs exist.

roles/, playbooks/, inventories/, docs/ (and the top-level README.md and site.yml) name
gpunode's sources (``src/gpunode/...``) and tests (``tests/...``) in comments and prose; a
rename that leaves one of them behind points readers at nothing. Brace lists
(``mocknvml.{c,py}``) name each file.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ["roles", "playbooks", "inventories", "docs", "README.md", "site.yml"]
NAMED = re.compile(r"(?<![\w/.-])((?:src/gpunode|tests)/[\w./{},-]*[\w}])")


def expand(path: str) -> list[str]:
    """``a/b.{c,py}`` -> ``a/b.c``, ``a/b.py`` (one brace list, as in shells)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [
        out for alt in m[1].split(",") for out in expand(path[: m.start()] + alt + path[m.end() :])
    ]


def named_paths(text: str) -> set[str]:
    return {p for m in NAMED.finditer(text) for p in expand(m[1].rstrip("."))}


def scanned_files() -> list[Path]:
    out = []
    for name in SCANNED:
        top = ROOT / name
        files = [top] if top.is_file() else sorted(p for p in top.rglob("*") if p.is_file())
        out += [p for p in files if p.suffix in {".md", ".yml", ".yaml", ".j2", ".cfg", ".py", ""}]
    return out


def missing(files: list[Path], root: Path = ROOT) -> list[str]:
    return [
        f"{f.relative_to(root)}: {p}"
        for f in files
        for p in sorted(named_paths(f.read_text(errors="replace")))
        if not (root / p).exists()
    ]


def test_there_are_paths_to_check():
    named = {p for f in scanned_files() for p in named_paths(f.read_text(errors="replace"))}
    assert "src/gpunode/runtime/config.py" in named
    assert len(named) > 10


def test_every_named_path_exists():
    assert missing(scanned_files()) == []


@pytest.mark.parametrize(
    ("text", "paths"),
    [
        ("see src/gpunode/config.py).", {"src/gpunode/config.py"}),
        (
            "(`src/gpunode/sim/mocknvml.{c,py}`)",
            {"src/gpunode/sim/mocknvml.c", "src/gpunode/sim/mocknvml.py"},
        ),
        ("checked by tests/unit/roles/test_x.py, and", {"tests/unit/roles/test_x.py"}),
        ("python -m gpunode.sim.x, /opt/src/gpunode/y", set()),
    ],
)
def test_paths_are_read_as_written(text, paths):
    assert named_paths(text) == paths


def test_a_path_that_does_not_exist_is_named(tmp_path):
    (tmp_path / "src/gpunode/runtime").mkdir(parents=True)
    (tmp_path / "src/gpunode/runtime/config.py").write_text("")
    doc = tmp_path / "doc.md"
    doc.write_text("keys: src/gpunode/config.py; rules: src/gpunode/runtime/config.py\n")
    assert missing([doc], root=tmp_path) == ["doc.md: src/gpunode/config.py"]
