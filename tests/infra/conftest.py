"""testinfra suites that prove provisioned GPU nodes, usable against any inventory:

    pytest --hosts=ansible://gpu_nodes --ansible-inventory=INVENTORY tests/infra/<suite>

Expectations come from the inventory variables the provisioning roles use
(nvidia_driver_version, nvidia_driver_hold, cuda_toolkit_versions,
cuda_toolkit_compat_policy, gpu_container_runtime_docker_default, ...), read through
testinfra's ansible backend. Without --hosts the suites are not collected: they prove nodes
of an inventory, not this machine (scripts/test runs tests/ without one).
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

ROLE_DEFAULTS = (
    Path(__file__).resolve().parents[2] / "roles/gpu_container_runtime/defaults/main.yml"
)


def pytest_ignore_collect(collection_path, config):
    if not config.getoption("hosts", None):
        return True
    return None


class Node:
    """A testinfra host with the inventory's variables and a few helpers."""

    def __init__(self, host):
        self.host = host
        self.vars = host.ansible.get_variables()
        self.name = self.vars.get("inventory_hostname", "?")

    def run(self, cmd: str):
        return self.host.run(cmd)

    def ok(self, cmd: str) -> str:
        r = self.host.run(cmd)
        assert r.rc == 0, f"{self.name}: `{cmd}` exited {r.rc}: {r.stderr.strip()}"
        return r.stdout

    def has(self, cmd: str) -> bool:
        return self.host.run(f"command -v {shlex.quote(cmd)}").rc == 0

    def json_file(self, path: str):
        f = self.host.file(path)
        if not f.exists:
            return None
        return json.loads(f.content_string)

    def runner(self, argv) -> tuple[int, str, str]:
        """gpunode.provision.packages.Runner on the node: the package queries of
        `gpunode validate` run through testinfra."""
        r = self.host.run(" ".join(shlex.quote(a) for a in argv))
        return r.rc, r.stdout, r.stderr

    def family(self) -> str | None:
        """apt or dnf, as gpunode.validate.versions.family() decides on the node itself."""
        if self.has("dpkg-query"):
            return "apt"
        return "dnf" if self.has("rpm") else None

    def gpunode(self) -> str:
        argv = self.vars.get("gpunode_cli_argv") or ["/usr/local/bin/gpunode"]
        return " ".join(shlex.quote(a) for a in argv)


@pytest.fixture
def node(host) -> Node:
    return Node(host)


def node_inventory(node: Node) -> dict:
    """The node's own view of its GPUs (`gpunode inventory --json`)."""
    return json.loads(node.ok(f"{node.gpunode()} inventory --json"))


def truth(value) -> bool:
    """An inventory boolean as Ansible's `bool` filter reads it (also "true", "yes")."""
    return str(value).strip().lower() in ("true", "yes", "1", "on")


def docker_default_wanted(node: Node) -> bool:
    """gpunode as Docker's default runtime: the inventory's value (the role's own name wins,
    as in gpu_container_runtime), else that role's default."""
    for key in ("gpu_container_runtime_docker_default", "container_engine_runtime_default"):
        if key in node.vars:
            return truth(node.vars[key])
    return truth(yaml.safe_load(ROLE_DEFAULTS.read_text())["container_engine_runtime_default"])
