"""playbooks/inventory.yml prints each simulated node's real inventory.

site.yml as a whole (provisioning, then validation and the cluster report) is tested in
test_provision.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpunode.sim.profiles import load_profile

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def test_inventory_play_reports_every_node(nodes, tmp_path):
    inventory = {
        "all": {
            "children": {"gpu_nodes": {"hosts": {n.name: {} for n in nodes.values()}}},
            "vars": {
                "ansible_connection": "community.docker.docker",
                "ansible_python_interpreter": "/usr/bin/python3",
            },
        }
    }
    inv_file = tmp_path / "hosts.yml"
    inv_file.write_text(yaml.safe_dump(inventory))
    playbook = Path(sys.executable).parent / "ansible-playbook"
    proc = subprocess.run(
        [str(playbook), "-i", str(inv_file), "playbooks/inventory.yml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    out = proc.stdout
    for gpu in load_profile("a100x4").gpus:
        assert out.count(gpu.uuid) == len(nodes), gpu.uuid
    for n in nodes.values():
        assert f"{n.name}: driver 535.261.03, CUDA 12.2, 4 GPU(s), healthy" in out
    assert "changed=0" in out and "failed=0" in out
