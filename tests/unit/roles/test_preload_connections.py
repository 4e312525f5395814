"""plugins/callback/preload_connections.py: at a play's start the controller imports the
connection plugin its hosts use (so Ansible's forked workers inherit it instead of each
importing it again), and the project's ansible.cfg enables it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DOCKER_API = "ansible_collections.community.docker.plugins.connection.docker_api"

# A play over an inventory whose hosts use community.docker.docker_api (as inventories/sim
# does), a second host on a templated connection, which is left alone; prints whether the
# plugin's module is imported before and after the callback saw the play start.
SCRIPT = f"""
import sys
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play import Play
from ansible.plugins.loader import callback_loader, init_plugin_loader
from ansible.vars.manager import VariableManager

init_plugin_loader()
loader = DataLoader()
inventory = InventoryManager(loader=loader, sources=[sys.argv[1]])
manager = VariableManager(loader=loader, inventory=inventory)
play = Play.load({{"hosts": "nodes", "gather_facts": False, "tasks": []}},
                 variable_manager=manager, loader=loader)
callback_loader.add_directory({str(ROOT / "plugins/callback")!r})
callback = callback_loader.get("preload_connections")
before = {DOCKER_API!r} in sys.modules
callback.v2_playbook_on_play_start(play)
print(before, {DOCKER_API!r} in sys.modules)
"""

INVENTORY = """
all:
  children:
    nodes:
      hosts:
        node-a: {ansible_connection: community.docker.docker_api}
        node-b: {ansible_connection: "{{ 'lo' ~ 'cal' }}"}
"""


def test_the_hosts_connection_plugin_is_imported_at_play_start(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(INVENTORY)
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(inventory)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "True"], proc.stdout + proc.stderr


def test_the_projects_config_enables_it(tmp_path, collections_path):
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-config"), "dump", "--only-changed"],
        cwd=tmp_path,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_COLLECTIONS_PATH": str(collections_path)},
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    enabled = [ln for ln in proc.stdout.splitlines() if ln.startswith("CALLBACKS_ENABLED")]
    assert enabled and "gpunode.gpunode.preload_connections" in enabled[0], proc.stdout
    # and the name resolves to the installed collection's plugin
    doc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-doc"), "-t", "callback", "--json",
         "gpunode.gpunode.preload_connections"],
        cwd=tmp_path, env={**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(collections_path)},
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert doc.returncode == 0, doc.stderr
    assert str(collections_path) in doc.stdout, doc.stdout
