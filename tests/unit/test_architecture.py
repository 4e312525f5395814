"""The package layout's rules (docs/architecture.md): the flow reads in one direction
between packages (nothing but the CLI imports the CLI, only the simulator's subcommands
import the simulator), no two modules import each other in a circle, no flat module is left
beside the packages, and the module map in docs/architecture.md names every module."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "src" / "gpunode"
# What each package may import from gpunode (every import, lazy ones included).
MAY_USE = {
    "util": {"util"},
    "nvidia": {"util", "nvidia"},
    # the spec pipeline: bundle bytes in, spec and hook arguments out; no process started
    # (its hook arguments are parsed by the hook's own parser)
    "runtime": {"util", "nvidia", "hook", "runtime"},
    # the start path's processes: first stages, the Python runtime's process half, the
    # resident service, NVIDIA's hook stand-in; they carry out what runtime decided and
    # run the hook's work in-process. Nothing but the CLI (install-links) and the engines'
    # setup (where the nvidia-cdi-hook launcher lies) uses it.
    "launch": {"util", "nvidia", "hook", "runtime", "launch"},
    "hook": {"util", "nvidia", "hook", ""},  # "": gpunode itself, for __version__
    "sim": {"util", "nvidia", "sim"},
    "provision": {"util", "nvidia", "provision", ""},
    # MIG layouts: the NVML walker's profiles and instances, its own writes
    "mig": {"util", "nvidia", "mig"},
    "report": {"util", "report"},
    # the engines' editors and the runtime role's setup (runtime.toml, CDI spec, the driver
    # nodes' /dev/char links)
    "engines": {"util", "nvidia", "runtime", "launch", "engines"},
    # validate reuses the inventory and the engines' daemon.json rules, the CRI client for
    # --engine cri, the runtime's config, cache and CDI generator for the drift checks, and
    # gpunode mig's parser of mig-parted files (mig.layout)
    "validate": {"util", "nvidia", "runtime", "provision", "engines", "cri", "mig", "validate",
                 ""},
    # the command line: parsing, output, calling inward. Nothing else imports it.
    "cli": {
        "util", "nvidia", "runtime", "launch", "sim", "provision", "report", "engines", "validate",
        "cli", "mig", "watch", "",
    },
    # the CRI client stands beside the engines, talking to them as kubelet does
    "cri": {"util", "cri"},
    # gpunode watch: the inventory's NVML walk and the health judges, followed over time
    # validate: node.fabric_manager's facts (validate.fabric.collect), read as validate does
    "watch": {"util", "nvidia", "validate", "watch"},
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


def test_only_the_cli_imports_the_cli():
    users = {package for package, uses in MAY_USE.items() if "cli" in uses}
    assert users == {"cli"}


def test_only_the_simulators_subcommands_import_the_simulator():
    # nodes get gpunode without gpunode.sim (tests/unit/roles/test_wheel_build.py)
    users = {
        str(p.relative_to(PKG))
        for p in PKG.rglob("*.py")
        if p.relative_to(PKG).parts[0] != "sim" and "sim" in gpunode_imports(p)
    }
    assert users == {"cli/sim.py", "cli/profile.py"}


def test_no_flat_modules_beside_the_packages():
    flat = sorted(p.name for p in PKG.glob("*.py"))
    assert flat == ["__init__.py", "__main__.py"]
    packages = sorted(p.name for p in PKG.iterdir() if (p / "__init__.py").is_file())
    assert packages == sorted(MAY_USE)


def module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports(path: Path, modules: set[str]) -> set[str]:
    """The gpunode modules a module imports (lazy imports included): ``from P import n``
    names the module P.n when there is one, else P itself."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "gpunode"}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                where = ".".join([*base, *([node.module] if node.module else [])])
            else:
                where = node.module or ""
            if where.split(".")[0] != "gpunode":
                continue
            for alias in node.names:
                sub = f"{where}.{alias.name}"
                out.add(sub if sub in modules else where)
    return out


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), and modules
    importing themselves."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_import_cycles_are_found():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert sorted(import_cycles(graph)) == [["a", "b", "c"], ["e"]]


def test_no_import_cycles_between_modules():
    paths = sorted(PKG.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = {module_name(p): module_imports(p, modules) - {module_name(p)} for p in paths}
    assert import_cycles(graph) == []


def module_map() -> dict[str, set[str]]:
    """docs/architecture.md's module map: package -> the files it names (``x.py``, and
    ``x.{c,py}`` for both)."""
    text = (PKG.parents[1] / "docs" / "architecture.md").read_text()
    block = text.split("```\nsrc/gpunode/\n", 1)[1].split("```", 1)[0]
    listed: dict[str, set[str]] = {}
    package = None
    for line in block.splitlines():
        m = re.match(r"  (\w+)/", line)
        if m:
            package = m[1]
            listed.setdefault(package, set())
            line = line[m.end() :]
        for name, exts in re.findall(r"\b(\w+)\.(\{c,py\}|py\b)", line):
            listed[package] |= {f"{name}.{e}" for e in exts.strip("{}").split(",")}
    return listed


def test_the_module_map_in_architecture_md_is_true():
    listed = module_map()
    present = {
        package: {
            p.name
            for p in (PKG / package).iterdir()
            if p.suffix in (".py", ".c") and not p.name.startswith("__")
        }
        for package in MAY_USE
    }
    assert sorted(listed) == sorted(present), "a package missing from the map (or not one)"
    missing = {k: sorted(present[k] - listed[k]) for k in present if present[k] - listed[k]}
    stale = {k: sorted(listed[k] - present[k]) for k in present if listed[k] - present[k]}
    assert (missing, stale) == ({}, {}), "docs/architecture.md's module map: (missing, stale)"


# ------------------------------------------------ the start path: runtime decides, launch runs
PROCESS_CALLS = re.compile(r"fork|posix_spawn|execv|mkfifo")


def test_the_spec_pipeline_starts_no_process():
    """runtime/ is the pure pipeline (bundle bytes in, spec and hook arguments out): no
    fork, spawn, exec or FIFO anywhere in it; the processes are launch/'s."""
    found = [f"{p.relative_to(PKG)}:{n}: {line.strip()}"
             for p in sorted((PKG / "runtime").rglob("*")) if p.suffix in (".py", ".sh")
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if PROCESS_CALLS.search(line)]  # fmt: skip
    assert found == []


def _private_uses(path: Path) -> list[str]:
    """Names starting with one underscore that ``path`` takes from another gpunode module:
    ``from .x import _y`` and ``x._y`` for a module ``x`` it imported."""
    tree = ast.parse(path.read_text())
    modules, out = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("gpunode")):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"from {node.module} import {alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name.startswith("gpunode")}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules and node.attr.startswith("_")
                and not node.attr.startswith("__")):  # fmt: skip
            out.append(f"{node.value.id}.{node.attr}")
    return out


def test_launch_uses_no_private_name_of_another_module():
    found = {str(p.relative_to(PKG)): _private_uses(p) for p in sorted((PKG / "launch").glob("*.py"))}
    assert {k: v for k, v in found.items() if v} == {}


def test_private_uses_are_found():
    sample = PKG.parent.parent / "tests" / "unit" / "_private_sample.py"
    try:
        sample.write_text("import os\nfrom .shim import _find\nfrom . import shim\n"
                          "shim._wait(1)\nos._exit(0)\n")
        assert _private_uses(sample) == ["from shim import _find", "shim._wait"]
    finally:
        sample.unlink()


def test_the_creates_skeleton_is_short():
    """create_gpu_container reads as the steps of a GPU create (issue 34: at most 70
    lines); the work is in the functions it calls."""
    source = (PKG / "launch" / "shim.py").read_text()
    tree = ast.parse(source)
    (fn,) = [n for n in tree.body
             if isinstance(n, ast.FunctionDef) and n.name == "create_gpu_container"]  # fmt: skip
    assert fn.end_lineno - fn.lineno + 1 <= 70
