"""After the refused converge the node is exactly as before: no driver or CUDA packages,
the operator's daemon.json unchanged, no gpunode runtime configuration."""

from __future__ import annotations

import json
import os

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("all")


def test_no_nvidia_or_cuda_package(host):
    listed = host.check_output("dpkg-query -W -f '${db:Status-Abbrev} ${Package}\\n'")
    installed = [line.split()[1] for line in listed.splitlines() if line.startswith("ii")]
    assert not [p for p in installed if "nvidia" in p or "cuda" in p or p.startswith("libcuda")]
    assert host.check_output("apt-mark showhold") == ""


def test_engine_configuration_untouched(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert config == {
        "log-level": "warn",
        "default-shm-size": "256M",
        "log-opts": {"max-size": "10m"},
    }
    assert not host.file("/etc/gpunode/runtime.toml").exists
    assert not host.file("/etc/cdi/nvidia.yaml").exists
