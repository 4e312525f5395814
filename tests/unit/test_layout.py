"""The package layout's rules (docs/architecture.md): the flow reads in one direction, and
no flat module is left beside the packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "gpunode"
# What each package may import from gpunode (every import, lazy ones included).
MAY_USE = {
    "util": {"util"},
    "nvidia": {"util", "nvidia"},
    # the shim does the hook's work in-process (the hook never imports the runtime)
    "runtime": {"util", "nvidia", "hook", "runtime"},
    "hook": {"util", "nvidia", "hook", ""},  # "": gpunode itself, for __version__
    "sim": {"util", "nvidia", "sim"},
    "provision": {"util", "nvidia", "provision", ""},
    "report": {"util", "report"},
    "cli": {"util", "nvidia", "runtime", "sim", "provision", "report", "cli", ""},
    # validate sits above cli: it reuses the inventory and the engines' daemon.json rules;
    # cli/main.py names it only as a string in the lazy table.
    "validate": {"util", "nvidia", "provision", "cli", "validate", ""},
    # the CRI client stands beside the engines, talking to them as kubelet does
    "cri": {"util", "cri"},
}


def gpunode_imports(path: Path) -> set[str]:
    """The gpunode packages a module imports, as names under gpunode ("" for gpunode)."""
    out = set()
    here = path.relative_to(PKG).parts[:-1]  # the module's package, under gpunode
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = here[: len(here) - node.level + 1]
            target = [*base, *(node.module.split(".") if node.module else [])]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("gpunode"):
            target = node.module.split(".")[1:]
        elif isinstance(node, ast.Import):
            names = [a.name.split(".") for a in node.names]
            out |= {(n[1:] or [""])[0] for n in names if n[0] == "gpunode"}
            continue
        else:
            continue
        out.add(target[0] if target else "")
    return out


@pytest.mark.parametrize("package", sorted(MAY_USE))
def test_imports_flow_one_way(package):
    bad = {}
    for path in sorted((PKG / package).rglob("*.py")):
        extra = gpunode_imports(path) - MAY_USE[package]
        if extra:
            bad[str(path.relative_to(PKG))] = sorted(extra)
    assert bad == {}, f"{package} may only use {sorted(MAY_USE[package])}"


def test_no_flat_modules_beside_the_packages():
    flat = sorted(p.name for p in PKG.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py"]
    packages = sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").is_file())
    assert packages == sorted(MAY_USE)
