"""The NVIDIA driver: module loaded, loaded = installed package = pinned version, packages
held, nouveau not loaded, nvidia-persistenced active.

A node whose kernel is not its own (a container, such as the simulated nodes) has no
/sys/module/nvidia: the module checks are skipped with that reason, and the loaded version
is the one the driver publishes in /proc/driver/nvidia/version."""

from __future__ import annotations

import pytest

from gpunode.nvidia.procfs import parse_version
from gpunode.provision.versions import driver_of_package
from gpunode.validate.expect import Expectations
from gpunode.validate.versions import driver_package


def no_module_reason(node) -> str | None:
    if node.host.file("/sys/module/nvidia").exists:
        return None
    return f"{node.name}: no /sys/module/nvidia (the kernel is not this node's, e.g. a container)"


def test_module_loaded_is_the_pinned_version(node):
    reason = no_module_reason(node)
    if reason:
        pytest.skip(reason)
    loaded = node.host.file("/sys/module/nvidia/version").content_string.strip()
    pin = node.vars.get("nvidia_driver_version") or ""
    assert loaded, f"{node.name}: /sys/module/nvidia/version is empty"
    if pin:
        assert loaded == pin, f"{node.name}: module {loaded} loaded, {pin} pinned"


def loaded_version(node) -> str:
    f = node.host.file("/proc/driver/nvidia/version")
    assert f.exists, f"{node.name}: no /proc/driver/nvidia/version: no NVIDIA driver loaded"
    version = parse_version(f.content_string)
    assert version, f"{node.name}: /proc/driver/nvidia/version has no version"
    return version


def installed_driver(node) -> tuple[str, str | None]:
    """(the package whose version is the driver's, its driver version or None), found as
    `gpunode validate` finds it, with the queries run on the node."""
    package, version = driver_package(node.family(), Expectations(), node.runner)
    return package, driver_of_package(version) if version else None


def test_loaded_equals_installed_equals_pinned(node):
    loaded = loaded_version(node)
    package, installed = installed_driver(node)
    assert installed, f"{node.name}: {package} is not installed; run the nvidia_driver role"
    assert installed == loaded, f"{node.name}: {package} {installed} installed, {loaded} loaded"
    pin = node.vars.get("nvidia_driver_version") or ""
    if pin:
        assert loaded == pin, f"{node.name}: {loaded} loaded, {pin} pinned (nvidia_driver_version)"


def test_driver_packages_held(node):
    if not node.vars.get("nvidia_driver_hold", True):
        pytest.skip(f"{node.name}: nvidia_driver_hold is false")
    package, installed = installed_driver(node)
    assert installed, f"{node.name}: {package} is not installed; run the nvidia_driver role"
    if node.has("apt-mark"):
        held = node.ok("apt-mark showhold").split()
    else:
        held = [
            ln.rsplit("-", 2)[0].split(":")[-1] for ln in node.ok("dnf versionlock list").split()
        ]
    assert package in held, f"{node.name}: the driver package {package} is not held"


def test_nouveau_not_loaded(node):
    """The kernel lists each loaded module under /sys/module (a container shares its
    host's kernel and sees the host's)."""
    assert not node.host.file("/sys/module/nouveau").exists, f"{node.name}: nouveau is loaded"


def test_persistenced_active(node):
    """nvidia-persistenced runs where the driver's kernel module is the node's own; a node
    in a container has no module of its own to keep initialised."""
    reason = no_module_reason(node)
    if reason:
        pytest.skip(reason)
    svc = node.host.service("nvidia-persistenced")
    assert svc.is_running, f"{node.name}: nvidia-persistenced is not running"
