"""The NVSwitch fabric of an HGX/DGX node: the fabric manager enabled and running at exactly
the loaded driver's version, its package held, every switch registered by the driver, the
fabric trained. A node without NVSwitches is skipped with that reason.

The switches are found as an operator (and gpunode.nvidia.fabric, the one table of their
PCI ids) finds them: NVIDIA functions of class 0x0680 with an NVSwitch device id in
/sys/bus/pci/devices; the driver's own list is /proc/driver/nvidia-nvswitch/devices."""

from __future__ import annotations

import json

import pytest

from gpunode.nvidia import fabric
from gpunode.provision.versions import upstream

from .test_driver import loaded_version

PCI = (
    'for d in /sys/bus/pci/devices/*; do echo "${d##*/} $(cat "$d/vendor") $(cat "$d/class") '
    '$(cat "$d/device")"; done'
)


def pci_switches(node) -> list[str]:
    found = []
    for line in node.ok(PCI).splitlines():
        parts = line.split()
        if len(parts) != 4:
            continue
        addr, vendor, cls, device = parts
        if (int(vendor, 16) == fabric.NVIDIA_VENDOR and int(cls, 16) >> 8 == fabric.NVSWITCH_CLASS
                and fabric.generation(int(device, 16))):  # fmt: skip
            found.append(addr)
    return found


@pytest.fixture
def hgx(node):
    switches = pci_switches(node)
    if not switches:
        pytest.skip(f"{node.name}: no NVSwitch on the PCI bus: no fabric manager needed")
    return node, switches


def fm_package(node) -> tuple[str, str] | None:
    """The installed fabric manager package (not -dev) and its upstream version."""
    if node.has("dpkg-query"):
        out = node.run(r"dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n' "
                       "'nvidia-fabricmanager*' 'nvidia-fabric-manager*'").stdout  # fmt: skip
        rows = [ln.split() for ln in out.splitlines()]
        # the status abbreviation's second letter is the state: i = installed ("ii", or
        # "hi" when held); "un" rows (known, not installed) have no version
        rows = [(r[0], r[1]) for r in rows if len(r) == 3 and r[2][1:2] == "i"]
    else:
        out = node.run("rpm -q --qf '%{NAME} %{VERSION}-%{RELEASE}\\n' nvidia-fabric-manager "
                       "nvidia-fabricmanager").stdout  # fmt: skip
        rows = [tuple(ln.split()) for ln in out.splitlines() if len(ln.split()) == 2]
    for name, version in rows:
        if fabric.PACKAGE_RE.fullmatch(name):
            return name, upstream(version)
    return None


def test_fabric_manager_runs_at_the_loaded_drivers_version(hgx):
    node, _ = hgx
    svc = node.host.service(fabric.UNIT.removesuffix(".service"))
    assert svc.is_enabled, f"{node.name}: {fabric.UNIT} is not enabled"
    assert svc.is_running, f"{node.name}: {fabric.UNIT} is not running"
    pkg = fm_package(node)
    assert pkg, f"{node.name}: no fabric manager package installed; run the nvidia_driver role"
    loaded = loaded_version(node)
    assert pkg[1] == loaded, f"{node.name}: {pkg[0]} {pkg[1]} installed, driver {loaded} loaded"


def test_fabric_manager_package_held(hgx):
    node, _ = hgx
    if not node.vars.get("nvidia_driver_hold", True):
        pytest.skip(f"{node.name}: nvidia_driver_hold is false")
    pkg = fm_package(node)
    assert pkg, f"{node.name}: no fabric manager package installed"
    if node.has("apt-mark"):
        held = node.ok("apt-mark showhold").split()
    else:
        held = [ln.rsplit("-", 2)[0].split(":")[-1]
                for ln in node.ok("dnf versionlock list").split()]  # fmt: skip
    assert pkg[0] in held, f"{node.name}: the fabric manager package {pkg[0]} is not held"


def test_the_driver_registered_every_switch(hgx):
    node, switches = hgx
    listed = node.run(f"ls /{fabric.PROC_SWITCHES}").stdout.split()
    assert sorted(listed) == sorted(switches), (
        f"{node.name}: the driver registered {listed}, the PCI bus has {switches}")  # fmt: skip


def test_the_fabric_is_trained(hgx):
    """gpunode validate's fabric rows (the node's and each GPU's): none fails or warns."""
    node, _ = hgx
    out = node.run(f"{node.gpunode()} validate --json --engine none").stdout
    checks = [c for c in json.loads(out)["checks"] if c["id"].endswith("fabric_manager")]
    assert any(c["id"] == "node.fabric_manager" for c in checks), checks
    bad = [f"{c['id']}[{c['gpu']}] {c['status']}: {c['detail']}" for c in checks
           if c["status"] in ("fail", "warn")]  # fmt: skip
    assert not bad, f"{node.name}: " + "; ".join(bad)
