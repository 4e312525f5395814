"""The gpunode_install role's controller build (tasks/build.yml, "Build gpunode"): the
project's build/lib is emptied before pip builds from it, so a module the source no longer
has cannot ship in the wheel, and two builds take turns on the project's lock."""

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
