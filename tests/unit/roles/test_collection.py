"""The collection gpunode.gpunode as a user installs it (galaxy.yml, scripts/collection):
one version with the Python package, the roles, playbooks and plugins in, the development
tree (tests, simulator, source, build outputs) out, and the wheels gpunode_install installs
by default shipped inside it."""

from __future__ import annotations

import fnmatch
import json
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]


def installed(collections_path: Path) -> Path:
    return collections_path / "ansible_collections/gpunode/gpunode"


def test_one_version_for_the_collection_and_the_package():
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert galaxy["version"] == project["version"]
    assert (galaxy["namespace"], galaxy["name"]) == ("gpunode", "gpunode")


def left_out(path: str) -> bool:
    """Whether ``ansible-galaxy collection build`` leaves the repository's file ``path`` out:
    as its walk does, any directory on the way or the file itself matching (fnmatch, the path
    relative to the root) a build_ignore pattern of galaxy.yml."""
    patterns = yaml.safe_load((ROOT / "galaxy.yml").read_text())["build_ignore"]
    parts = path.split("/")
    on_the_way = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(p, pattern) for p in on_the_way for pattern in patterns)


def test_the_collection_ships_the_alert_rules():
    """monitoring/ (the Prometheus alert rules, their promtool tests, the watch's metric
    list) reaches operators in the collection; the development tree does not."""
    shipped = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "monitoring").iterdir())
    assert "monitoring/gpunode-alerts.yml" in shipped
    assert [p for p in shipped if left_out(p)] == []
    assert left_out("tests/unit/monitoring/test_alert_rules.py")
    assert left_out("src/gpunode/nvidia/health.py")
    assert left_out("roles/nvidia_driver/__pycache__/x.pyc")


def test_what_the_installed_collection_holds(collections_path):
    root = installed(collections_path)
    manifest = json.loads((root / "MANIFEST.json").read_text())
    assert (
        manifest["collection_info"]["version"]
        == yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    )
    files = {f["name"] for f in json.loads((root / "FILES.json").read_text())["files"]}
    tops = {name.split("/", 1)[0] for name in files}
    for want in ("roles", "playbooks", "plugins", "meta", "site.yml", "README.md"):
        assert want in tops, want
    for role in (p.name for p in (ROOT / "roles").iterdir() if p.is_dir()):
        assert f"roles/{role}/tasks/main.yml" in files, role
    for plugin in ("action/direct_command.py", "modules/direct_command.py",
                   "filter/gpunode_result.py", "callback/preload_connections.py"):  # fmt: skip
        assert f"plugins/{plugin}" in files, plugin
    # the development tree stays out (galaxy.yml build_ignore)
    for unwanted in ("src", "tests", "molecule", "benchmarks", "scripts", "build", ".venv",
                     ".git", "ansible.cfg", "pyproject.toml"):  # fmt: skip
        assert unwanted not in tops, unwanted
    assert not [f for f in files if "__pycache__" in f or f.startswith("inventories/sim")]


def test_the_collection_ships_the_wheels_gpunode_install_installs(collections_path):
    """gpunode_install's default wheel directory is the collection's own, which holds
    exactly gpunode's wheel of this version and the nvidia-ml-py requirements-dev.txt pins."""
    defaults = yaml.safe_load((ROOT / "roles/gpunode_install/defaults/main.yml").read_text())
    assert defaults["gpunode_install_wheel_dir"] == "{{ role_path }}/files/wheels"
    version = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]
    pin = next(
        line.split("==", 1)[1].strip()
        for line in (ROOT / "requirements-dev.txt").read_text().splitlines()
        if line.startswith("nvidia-ml-py==")
    )
    wheels = installed(collections_path) / "roles/gpunode_install/files/wheels"
    assert sorted(p.name for p in wheels.iterdir()) == [
        f"gpunode-{version}-py3-none-any.whl",
        f"nvidia_ml_py-{pin}-py3-none-any.whl",
    ]


def test_a_wheel_directory_without_the_wheels_is_one_clear_failure(collections_path, tmp_path):
    """A collection built without scripts/collection (plain `ansible-galaxy collection
    build`) ships no wheels: gpunode_install stops on the controller naming the directory,
    what it holds and what to do, before anything reaches a node."""
    import os
    import subprocess
    import sys

    empty = tmp_path / "wheels"
    empty.mkdir()
    (empty / "gpunode-0.0.1-py3-none-any.whl").write_bytes(b"")
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role:\n"
        "        name: gpunode.gpunode.gpunode_install\n        tasks_from: build\n"
    )
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), str(playbook),
         "-e", f"gpunode_install_wheel_dir={empty}"],
        cwd=tmp_path, capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
             "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_LOCALHOST_WARNING": "0", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0"},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-3000:]
    text = " ".join(proc.stdout.split())
    assert f"gpunode_install_wheel_dir: {empty} must hold one gpunode-*.whl and one" in text
    assert "it holds ['gpunode-0.0.1-py3-none-any.whl']" in text, text[-2000:]
    assert "build it with scripts/collection" in text
