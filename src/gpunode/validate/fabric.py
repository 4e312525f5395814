"""node.fabric_manager's facts: what an NVSwitch node shows of its switches, its fabric
manager's unit and package, read as an operator would (gpunode.nvidia.fabric says what and
why; gpunode.nvidia.health.fabric_node and fabric_gpu judge them).

A node without NVSwitches is asked nothing more. On one with them: ``systemctl is-active``
for the unit, its journal (this boot) for FM's last words when it is not active, and the
package manager for the installed fabric manager package (dpkg-query or rpm, as
validate's driver.version_match asks them: gpunode.validate.versions).

``wait`` is `gpunode provision fabric-wait` (the nvidia_driver role's bounded wait after it
started the fabric manager): these facts and the NVML inventory's GPUs collected again and
again and judged by validate's own verdict (health.fabric_node) until it passes, fails in
a way no wait heals (:func:`heals_by_waiting`), or the time is up.
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from ..nvidia import fabric, health, inventory
from ..nvidia.fabric import FabricNode
from ..nvidia.gpu import Gpu
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


# ---------------------------------------------------------------------------------------
# the bounded wait (gpunode provision fabric-wait)


@dataclasses.dataclass
class Waited:
    """How a fabric wait ended: ``ready`` (the verdict passed, or no NVSwitch), the verdict's
    detail (or why there was none), the seconds waited, the collections judged, and
    ``outcome``: no_nvswitch, ready, failed (no wait heals it), timeout or no_driver."""

    ready: bool
    nvswitch: bool
    detail: str
    waited_s: float
    polls: int
    outcome: str


def heals_by_waiting(node: FabricNode, driver_version: str | None, gpus: list[Gpu]) -> bool:
    """Whether a failed node.fabric_manager verdict can still turn by itself: its only
    problems are the unit still ``activating`` and GPUs whose fabric is NOT_STARTED or
    IN_PROGRESS (the fabric manager starting and training). Anything else fabric_problems
    finds (the unit failed or inactive, the package missing or at another version than the
    loaded driver, switches the driver lacks) or a GPU trained with an error stays until
    someone acts. fabric_problems itself decides: it judges the node as if the unit were
    already active."""
    activating = node.service == "activating"
    as_started = dataclasses.replace(node, service="active") if activating else node
    if health.fabric_problems(as_started, driver_version):
        return False
    waiting = (health.FABRIC_NOT_STARTED, health.FABRIC_IN_PROGRESS)
    untrained = [g for g in gpus if g.fabric is not None
                 and (g.fabric.state != health.FABRIC_COMPLETED or g.fabric.status)]  # fmt: skip
    return all(g.fabric.state in waiting for g in untrained) and bool(untrained or activating)


def _gpus() -> tuple[str | None, list[Gpu]]:
    """The loaded driver's version and every GPU from gpunode's NVML inventory (no kernel
    log: no Xid is judged here). NVML is required: only it reports the GPUs' fabric."""
    inv = inventory.collect(kernel_log=None)
    unusable = next((p for p in inv.problems if p.get("issue") == "nvml_unavailable"), None)
    if unusable:
        raise inventory.NoDriver(
            f"NVML is not usable ({unusable['detail']}): the GPUs' fabric state cannot be read"
        )
    return inv.driver_version, inv.every_gpu()


def wait(
    timeout: float,
    interval: float,
    collect_node: Callable[[], FabricNode] | None = None,
    collect_gpus: Callable[[], tuple[str | None, list[Gpu]]] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Waited:
    """Collect the node's fabric facts and NVML GPUs and judge them with health.fabric_node
    (validate's node.fabric_manager) every ``interval`` seconds until the verdict passes
    (or warns: the node passes), fails in a way no wait heals, or ``timeout`` seconds have
    passed. A node without NVSwitch is ready at once, without asking NVML. ``collect_node``
    and ``collect_gpus`` default to :func:`collect` and the NVML inventory's driver version
    and GPUs; ``clock`` and ``sleep`` are the time the wait counts and spends."""
    collect_node = collect_node or collect
    collect_gpus = collect_gpus or _gpus
    start = clock()
    polls = 0
    while True:
        node = collect_node()
        polls += 1
        if not node.nvswitch:
            _, _, detail = health.fabric_node(node, None, [])
            return Waited(True, False, detail, clock() - start, polls, "no_nvswitch")
        try:
            driver_version, gpus = collect_gpus()
        except inventory.NoDriver as exc:
            return Waited(False, True, str(exc), clock() - start, polls, "no_driver")
        _, status, detail = health.fabric_node(node, driver_version, gpus)
        waited = clock() - start
        if status != health.FAIL:
            return Waited(True, True, detail, waited, polls, "ready")
        if not heals_by_waiting(node, driver_version, gpus):
            return Waited(False, True, detail, waited, polls, "failed")
        if waited >= timeout:
            return Waited(False, True, detail, waited, polls, "timeout")
        sleep(min(interval, timeout - waited))
