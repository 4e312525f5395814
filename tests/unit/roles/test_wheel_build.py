"""The gpunode_install role's controller build (tasks/build.yml, "Build gpunode"): the
project's build/lib is emptied before pip builds from it, so a module the source no longer
has cannot ship in the wheel, two builds take turns on the project's lock, and the wheel
nodes get leaves the simulator out."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def build_argv(project: Path, command: list[str]) -> list[str]:
    """The task's argv with the project's paths filled in and pip replaced by `command`."""
    tasks = yaml.safe_load((ROOT / "roles/gpunode_install/tasks/build.yml").read_text())
    block = next(t for t in tasks if t.get("name") == "Build the gpunode wheel on the controller")
    task = next(t for t in block["block"] if t["name"] == "Build gpunode")
    argv = task["ansible.builtin.command"]["argv"]
    assert argv[:2] == ["sh", "-c"]
    lock = argv[3].replace("{{ gpunode_install_project_dir }}", str(project))
    lib = argv[4].replace("{{ gpunode_install_project_dir }}", str(project))
    assert argv[5] == "{{ gpunode_install_controller_python }}"
    return [*argv[:3], lock, lib, *command]


def test_stale_modules_in_build_lib_are_removed_before_the_build(tmp_path):
    stale = tmp_path / "build/lib/gpunode/moved_away.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    out = subprocess.run(
        build_argv(tmp_path, ["sh", "-c", "find build -name '*.py'; echo built"]),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.split() == ["built"], out
    assert (tmp_path / "build/.wheel-build.lock").exists()


def test_two_builds_take_turns_on_the_lock(tmp_path):
    log = tmp_path / "log"
    step = f"echo start >> {log}; sleep 0.5; echo end >> {log}"
    first = subprocess.Popen(build_argv(tmp_path, ["sh", "-c", step]), cwd=tmp_path)
    time.sleep(0.1)
    subprocess.run(build_argv(tmp_path, ["sh", "-c", step]), cwd=tmp_path, check=True)
    first.wait()
    assert log.read_text().split() == ["start", "end", "start", "end"]


def test_the_node_wheel_leaves_the_simulator_out(tmp_path):
    """The wheel the role builds (the task's own argv, pip included) has gpunode's code and
    data but not the simulator: no gpunode/sim/, no C source, no GPU profiles; also from a
    tree whose egg-info (an editable install's) still lists the simulator's files."""
    import shutil
    import zipfile

    from ..helpers import build_node_wheel

    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(
        ROOT / "src", project / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    egg = project / "src/gpunode.egg-info"
    egg.mkdir()
    listed = sorted(
        str(p.relative_to(project)) for p in (project / "src").rglob("*") if p.is_file()
    )
    assert "src/gpunode/sim/mocknvml.c" in listed
    (egg / "SOURCES.txt").write_text("\n".join(listed) + "\n")
    wheel = build_node_wheel(project, tmp_path / "wheels")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpunode/runtime/shim.py" in names and "gpunode/data/cuda-driver-table.json" in names
    assert "gpunode/cli/sim.py" in names  # the subcommand stays: it says the simulator is absent
    simulator = [n for n in names if n.startswith(("gpunode/sim/", "gpunode/data/profiles/"))]
    assert simulator == []
    assert [n for n in names if n.endswith((".c", ".h"))] == []
