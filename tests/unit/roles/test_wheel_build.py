"""gpunode_install's files/build-wheels.py, the one recipe for gpunode's wheels: the role's
controller build and the simulator's both run it (so a simulated node's gpunode is the
role's, byte for byte). The project's build/lib is emptied before pip builds from it, the
timestamps are fixed, OUT ends up with exactly the wheels to install, and two builds take
turns on the project's lock. pip is a stand-in here (a `pip` package first on PYTHONPATH),
except in the last test: the wheel nodes get, built for real, leaves the simulator out."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from gpunode.sim.cluster import RoleInstall

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "roles/gpunode_install/files/build-wheels.py"
FAKE_PIP = """\
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_PIP_LOG"], "a") as log:
    log.write(json.dumps({"args": args, "epoch": os.environ.get("SOURCE_DATE_EPOCH"),
                          "build_lib": os.path.exists("build/lib")}) + "\\n")
time.sleep(float(os.environ.get("FAKE_PIP_SLEEP", "0")))
if os.environ.get("FAKE_PIP_FAIL"):
    print("ERROR: something broke\\nERROR: the last line", file=sys.stderr)
    sys.exit(1)
if args[0] == "wheel":
    out = args[args.index("-w") + 1]
    open(os.path.join(out, "gpunode-0.2.0-py3-none-any.whl"), "w").write("new")
elif args[0] == "download":
    version = args[-1].split("==")[1]
    out = args[args.index("-d") + 1]
    open(os.path.join(out, "nvidia_ml_py-%s-py3-none-any.whl" % version), "w").write("nvml")
"""


def project(tmp_path: Path, pin: str = "13.615.71") -> Path:
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    (proj / "pyproject.toml").write_text("[project]\nname = 'gpunode'\n")
    (proj / "requirements-dev.txt").write_text(f"pyyaml==6.0.2\nnvidia-ml-py=={pin}\n")
    fake = tmp_path / "fakepip/pip"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text(FAKE_PIP)
    return proj


def build(tmp_path: Path, out: Path, **env: str) -> subprocess.CompletedProcess:
    proj = tmp_path / "proj"
    return subprocess.run(
        [sys.executable, str(SCRIPT), str(proj), str(out)],
        cwd=proj,
        capture_output=True,
        text=True,
        check=False,
        env=os.environ
        | {"PYTHONPATH": str(tmp_path / "fakepip"), "FAKE_PIP_LOG": str(tmp_path / "pip.log")}
        | env,
    )


def pip_calls(tmp_path: Path) -> list[dict]:
    return [json.loads(ln) for ln in (tmp_path / "pip.log").read_text().splitlines()]


def test_role_and_simulator_build_with_this_script():
    tasks = yaml.safe_load((ROOT / "roles/gpunode_install/tasks/build.yml").read_text())
    task = next(t for t in tasks if t.get("name") == "Build the gpunode wheel on the controller")
    argv = task["ansible.builtin.command"]["argv"]
    assert argv[:2] == [
        "{{ gpunode_install_controller_python }}",
        "{{ role_path }}/files/build-wheels.py",
    ]
    assert RoleInstall.read(ROOT).build_script == SCRIPT


def test_builds_from_an_empty_build_lib_with_fixed_timestamps(tmp_path):
    proj = project(tmp_path)
    stale = proj / "build/lib/gpunode/moved_away.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpunode-0.1.0-py3-none-any.whl").write_text("an older version")
    (out / "nvidia_ml_py-12.535.133-py3-none-any.whl").write_text("another pin's")

    proc = build(tmp_path, out)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "wheels": ["gpunode-0.2.0-py3-none-any.whl", "nvidia_ml_py-13.615.71-py3-none-any.whl"],
        "downloaded": ["nvidia_ml_py-13.615.71-py3-none-any.whl"],
    }
    assert sorted(p.name for p in out.iterdir()) == json.loads(proc.stdout)["wheels"]
    wheel, download = pip_calls(tmp_path)
    assert wheel["args"][:3] == ["wheel", "--no-deps", "--no-build-isolation"]
    assert wheel["args"][-1] == str(proj)
    assert not wheel["build_lib"] and wheel["epoch"] == "315532800"
    assert download["args"][0] == "download" and download["args"][-1] == "nvidia-ml-py==13.615.71"
    assert (proj / "build/.wheel-build.lock").exists()

    # the pinned nvidia-ml-py is there: built again, nothing downloaded
    again = build(tmp_path, out)
    assert json.loads(again.stdout)["downloaded"] == []
    assert [c["args"][0] for c in pip_calls(tmp_path)] == ["wheel", "download", "wheel"]


def test_a_failing_pip_is_one_line_and_leaves_out_as_it_was(tmp_path):
    project(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpunode-0.1.0-py3-none-any.whl").write_text("old")
    proc = build(tmp_path, out, FAKE_PIP_FAIL="1")
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == (
        "build-wheels: building the gpunode wheel failed (pip exit 1): ERROR: the last line\n"
    )
    assert [p.name for p in out.iterdir()] == ["gpunode-0.1.0-py3-none-any.whl"]


def test_bad_arguments_are_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), str(tmp_path / "out")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr == (
        f"build-wheels: {tmp_path} is not gpunode's source tree (no pyproject.toml)\n"
    )


def test_two_builds_take_turns_on_the_lock(tmp_path):
    project(tmp_path)
    slow = {"FAKE_PIP_SLEEP": "0.5"}
    first = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(tmp_path / "proj"), str(tmp_path / "a")],
        env=os.environ
        | {"PYTHONPATH": str(tmp_path / "fakepip"), "FAKE_PIP_LOG": str(tmp_path / "pip.log")}
        | slow,
        stdout=subprocess.DEVNULL,
    )
    log = tmp_path / "pip.log"
    deadline = time.monotonic() + 30
    while not (log.exists() and log.read_text()) and time.monotonic() < deadline:
        time.sleep(0.02)  # the first build is in its pip run, holding the lock
    second = build(tmp_path, tmp_path / "b", **slow)
    first.wait()
    assert first.returncode == 0 and second.returncode == 0, second.stderr
    # the second's pip ran only after the whole first build (its wheel and its download)
    assert [c["args"][0] for c in pip_calls(tmp_path)] == ["wheel", "download"] * 2


def test_the_node_wheel_leaves_the_simulator_out(tmp_path):
    """The wheel the role builds (the task's own argv, pip included) has gpunode's code and
    data but not the simulator: no gpunode/sim/, no C source, no GPU profiles; also from a
    tree whose egg-info (an editable install's) still lists the simulator's files."""
    import shutil
    import zipfile

    from ..helpers import build_node_wheel

    project = tmp_path / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md", "requirements-dev.txt"):
        shutil.copy(ROOT / name, project / name)
    shutil.copytree(
        ROOT / "src", project / "src", ignore=shutil.ignore_patterns("*.egg-info", "__pycache__")
    )
    egg = project / "src/gpunode.egg-info"
    egg.mkdir()
    listed = sorted(
        str(p.relative_to(project)) for p in (project / "src").rglob("*") if p.is_file()
    )
    assert "src/gpunode/sim/mocknvml/mig.c" in listed
    (egg / "SOURCES.txt").write_text("\n".join(listed) + "\n")
    wheel = build_node_wheel(project, tmp_path / "wheels")
    names = zipfile.ZipFile(wheel).namelist()
    assert "gpunode/launch/shim.py" in names and "gpunode/data/cuda-driver-table.json" in names
    assert "gpunode/launch/dispatcher.sh" in names  # install-links renders it on the node
    assert "gpunode/launch/hookstage.sh" in names  # and the hooks' first stages
    assert "gpunode/launch/resident.sh" in names
    assert "gpunode/cli/sim.py" in names  # the subcommand stays: it says the simulator is absent
    simulator = [n for n in names if n.startswith(("gpunode/sim/", "gpunode/data/profiles/"))]
    assert simulator == []
    assert [n for n in names if n.endswith((".c", ".h"))] == []
