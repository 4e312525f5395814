"""CUDA: each version the inventory pins (cuda_toolkit_versions) is installed, and every
installed version is compatible with the loaded driver under the inventory's policy
(cuda_toolkit_compat_policy), by the shared table (gpunode.provision.cuda.gate)."""

from __future__ import annotations

import pytest

from gpunode.provision.cuda import gate, is_datacenter
from gpunode.provision.versions import major_minor
from gpunode.validate.versions import cuda_installed

from .conftest import node_inventory
from .test_driver import loaded_version


def datacenter(node) -> bool | None:
    gpus = node_inventory(node)["gpus"]
    return all(is_datacenter(g["name"] or "", g.get("brand", "")) for g in gpus) if gpus else None


def test_pinned_cuda_versions_installed(node):
    want = [major_minor(str(v)) for v in node.vars.get("cuda_toolkit_versions") or []]
    if not want:
        pytest.skip(f"{node.name}: no cuda_toolkit_versions in the inventory")
    installed = cuda_installed(node.family(), node.runner)
    missing = [v for v in want if v not in installed]
    assert not missing, (
        f"{node.name}: CUDA {', '.join(missing)} expected but not installed "
        f"(installed: {', '.join(installed) or 'none'})"
    )


def test_installed_cuda_compatible_with_the_driver(node):
    installed = cuda_installed(node.family(), node.runner)
    if not installed:
        pytest.skip(f"{node.name}: no CUDA toolkit installed")
    driver = loaded_version(node)
    policy = node.vars.get("cuda_toolkit_compat_policy", "strict")
    dc = datacenter(node) if policy == "forward" else None
    for cuda in installed:
        verdict = gate(cuda, driver, policy, datacenter=dc)
        assert verdict.ok, f"{node.name}: {verdict.message}"
