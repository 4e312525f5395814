"""The NVIDIA driver: module loaded, loaded = installed package = pinned version, packages
held, nouveau not loaded, nvidia-persistenced active.

A node whose kernel is not its own (a container, such as the simulated nodes) has no
/sys/module/nvidia: the module checks are skipped with that reason, and the loaded version
is the one the driver publishes in /proc/driver/nvidia/version."""

from __future__ import annotations

import re

import pytest

from gpunode.nvidia.procfs import parse_version

# the package whose version is the driver's, per platform (as the nvidia_driver role's plan)
VERSION_PACKAGES = ("libnvidia-ml1", "libnvidia-compute-*", "nvidia-driver-cuda-libs")


def upstream(version: str) -> str:
    """535.261.03-1~deb12u1 -> 535.261.03; 1:550.163.01-0ubuntu1 -> 550.163.01."""
    return re.sub(r"^\d+:", "", version).split("-")[0]


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


def installed_driver(node) -> dict[str, str]:
    pats = " ".join(f"'{p}'" for p in VERSION_PACKAGES)
    if node.has("dpkg-query"):
        out = node.run(
            f"dpkg-query -W -f='${{db:Status-Abbrev}} ${{Package}} ${{Version}}\\n' {pats}"
        )
        rows = [ln.split() for ln in out.stdout.splitlines()]
        return {r[1]: upstream(r[2]) for r in rows if len(r) == 3 and r[0] == "ii"}
    out = node.run("rpm -q --qf '%{NAME} %{VERSION}\\n' nvidia-driver-cuda-libs")
    return dict(ln.split() for ln in out.stdout.splitlines() if out.rc == 0)


def test_loaded_equals_installed_equals_pinned(node):
    loaded = loaded_version(node)
    installed = installed_driver(node)
    assert installed, (
        f"{node.name}: no driver package installed ({', '.join(VERSION_PACKAGES)}); "
        "provision the node (nvidia_driver role)"
    )
    for pkg, version in installed.items():
        assert version == loaded, f"{node.name}: {pkg} {version} installed, {loaded} loaded"
    pin = node.vars.get("nvidia_driver_version") or ""
    if pin:
        assert loaded == pin, f"{node.name}: {loaded} loaded, {pin} pinned (nvidia_driver_version)"


def test_driver_packages_held(node):
    if not node.vars.get("nvidia_driver_hold", True):
        pytest.skip(f"{node.name}: nvidia_driver_hold is false")
    installed = installed_driver(node)
    assert installed, f"{node.name}: no driver package installed"
    if node.has("apt-mark"):
        held = set(node.ok("apt-mark showhold").split())
    else:
        held = {ln.split("-0:")[0] for ln in node.ok("dnf versionlock list").splitlines()}
    missing = sorted(set(installed) - held)
    assert not missing, f"{node.name}: driver packages not held: {', '.join(missing)}"


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
