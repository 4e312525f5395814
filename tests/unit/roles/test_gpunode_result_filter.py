"""plugins/filter/gpunode_result.py: the roles' one reading of a gpunode --json run (its
JSON, or a failed result carrying its stderr), found by Ansible through the project's
ansible.cfg, and the only place the suite spells that reading."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location(
    "gpunode_result", ROOT / "plugins/filter/gpunode_result.py"
)
plugin = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plugin)


def test_json_is_the_result():
    run = {"rc": 1, "stdout": '  {"ok": false, "converged": true, "message": "m"}\n', "stderr": "x"}
    assert plugin.gpunode_result(run, converged=False) == {
        "ok": False,
        "converged": True,
        "message": "m",
    }


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ({"rc": 2, "stdout": "", "stderr": "  gpunode: bad value\n"}, "gpunode: bad value"),
        ({"rc": 1, "stdout": "Traceback ...", "stderr": ""}, "no output"),
        ({"rc": 127}, "no output"),
        (None, "no output"),
    ],
)
def test_anything_else_is_a_failure_with_its_stderr(run, message):
    assert plugin.gpunode_result(run, has_gpu=False) == {
        "ok": False,
        "has_gpu": False,
        "message": message,
    }


def test_ansible_finds_it_in_the_installed_collection(tmp_path, collections_path):
    """Run from elsewhere with no ansible.cfg: the roles' vars name it as any playbook can,
    gpunode.gpunode.gpunode_result."""
    expr = ("{{ {'stdout': '', 'stderr': 'boom'} | gpunode.gpunode.gpunode_result(converged=false)"
            " | to_json }}")  # fmt: skip
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible"), "localhost", "-m", "ansible.builtin.debug",
         "-a", f"msg={expr}", "-o"],
        cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(tmp_path / "none.cfg"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
             "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0", "ANSIBLE_LOCALHOST_WARNING": "0"},
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    msg = re.search(r'"msg": (".*")', proc.stdout)
    assert msg, proc.stdout
    assert json.loads(json.loads(msg[1])) == {"ok": False, "converged": False, "message": "boom"}


def test_no_role_or_playbook_spells_the_reading_itself():
    # a run's stderr as the message of a failed result, the five copies this filter replaced
    spelled = re.compile(r"stderr\s*\|\s*default\(''\)\s*\|\s*trim\)\s*or\s*'no output'")
    files = [*ROOT.joinpath("roles").rglob("*.yml"), *ROOT.joinpath("playbooks").rglob("*")]
    found = [
        str(p.relative_to(ROOT)) for p in files if p.is_file() and spelled.search(p.read_text())
    ]
    assert found == []
