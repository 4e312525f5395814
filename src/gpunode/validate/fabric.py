"""node.fabric_manager's facts: what an NVSwitch node shows of its switches, its fabric
manager's unit and package, read as an operator would (gpunode.nvidia.fabric says what and
why; gpunode.nvidia.health.fabric_node and fabric_gpu judge them).

A node without NVSwitches is asked nothing more. On one with them: ``systemctl is-active``
for the unit, its journal (this boot) for FM's last words when it is not active, and the
package manager for the installed fabric manager package (dpkg-query or rpm, as
validate's driver.version_match asks them: gpunode.validate.versions).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from ..nvidia import fabric
from ..nvidia.fabric import FabricNode
from ..provision import packages
from ..provision.versions import upstream
from . import versions


def collect(
    root: Path = Path("/"),
    runner: packages.Runner = packages.run,
    which: Callable[[str], str | None] = shutil.which,
) -> FabricNode:
    node = FabricNode(pci=fabric.pci_switches(root), driver=fabric.driver_switches(root))
    if not node.nvswitch:
        return node
    if which("systemctl"):
        _rc, out, _ = runner(["systemctl", "is-active", fabric.UNIT])
        # nothing on stdout: no systemd to ask (a container, a chroot): unknown, not down
        node.service = out.strip().splitlines()[-1] if out.strip() else None
        if node.service != "active" and which("journalctl"):
            argv = ["journalctl", "-u", fabric.UNIT, "-b", "-n", "50", "-o", "cat", "--no-pager"]
            node.last_words = fabric.last_words(runner(argv)[1])
    fam = "apt" if which("dpkg-query") else "dnf" if which("rpm") else None
    if fam is not None:
        node.packages_known = True
        for name, version in versions._query(fam, fabric.PACKAGE_GLOBS, runner):
            if fabric.PACKAGE_RE.fullmatch(name):
                node.package = (name, upstream(version))
    return node
