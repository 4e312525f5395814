"""A watch cycle's Snapshot, decided from the GPU records and the Xid history: what the
textfile shows (gpunode.watch.metrics renders it) and node-problem-detector's verdict.

The GPU checks are gpunode.nvidia.health's judges (``verdicts``, the same validate runs);
the Xid check reads the watch's history (the kernel's Xid records since boot) as validate
reads the kernel log. When NVML is down (the inventory fell back to /proc/driver/nvidia),
every check but gpu.device_node is skipped, as validate skips them.

gpunode_node_fabric_trained: on an NVSwitch node validate's node.fabric_manager judgement
(health.fabric_node: the fabric manager's unit and package at the loaded driver's version,
the switches registered, every Hopper+ GPU's fabric trained); on a node whose GPUs report
a fabric state without switches found on PCI, the GPUs' states; absent otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..nvidia import health, xid
from ..nvidia.fabric import FabricNode
from ..nvidia.gpu import Gpu, XidError
from .history import History

CAUSES = ("nvml", "kmsg", "history", "textfile")
HEALTH_VALUE = {health.PASS: 0, health.WARN: 1, health.FAIL: 2}
NPD_OK, NPD_PROBLEM, NPD_UNKNOWN = 0, 1, 2
MESSAGE_MAX = 80  # what node-problem-detector shows of a check's output is short
XID_SOURCE = "the kernel log since boot (gpunode watch's history)"


@dataclass
class GpuState:
    """One GPU's series: its labels and values."""

    index: str
    uuid: str
    bus_id: str
    model: str
    serial: str
    key: str  # its key in the history
    health: list[tuple[str, int]] = field(default_factory=list)  # (check id, 0/1/2)
    lost: bool = False
    xid_last: int = 0
    xid_counts: dict[int, int] = field(default_factory=dict)
    xid_fatal: bool = False
    failed: list[str] = field(default_factory=list)  # check ids that fail

    def labels(self) -> dict[str, str]:
        return {"gpu": self.index, "uuid": self.uuid, "bus_id": self.bus_id, "model": self.model}


@dataclass
class Snapshot:
    node: str
    interval: float
    heartbeat: float
    nvml_up: bool
    problems: dict[str, str]  # cause -> the line said
    gpus: list[GpuState]
    fabric_trained: bool | None
    healthy: bool
    message: str  # node-problem-detector's line

    def content(self) -> tuple:
        """What the textfile shows apart from the heartbeat (a change is written at once)."""
        return (self.nvml_up, sorted(self.problems), self.gpus, self.fabric_trained, self.healthy)


def key_of(gpu: Gpu) -> str:
    """A GPU's key in the history: its UUID, else its bus."""
    return gpu.uuid or f"pci:{gpu.pci_bus_id}"


def bus_key(event: xid.XidEvent, gpus: list[Gpu]) -> str:
    """The history key of the GPU an Xid is about (``pci:<bus>`` when no GPU is there)."""
    owner = next((g for g in gpus if g.pci_bus_id and event.matches(g.pci_bus_id)), None)
    return key_of(owner) if owner is not None else f"pci:{event.bus.nvml}"


def labels_of(index: int, gpu: Gpu) -> dict:
    return {"index": index, "bus_id": gpu.pci_bus_id, "model": gpu.name, "serial": gpu.serial}


def fatal(code: int) -> bool:
    """An Xid gpunode's table fails (drain, reset: gpunode.nvidia.xid's classes)."""
    return xid.classify(code)[1] == health.FAIL


def short(code: int) -> str:
    """A few words for an Xid code: its class's text up to the first ``:;(``."""
    text = xid.classify(code)[2]
    for stop in ":;(":
        text = text.split(stop, 1)[0]
    return text.strip()


def _xid_errors(history: History, key: str) -> list[XidError]:
    """The history's Xids of a GPU as its record's xid_errors (one per code, by last seen)."""
    gpu = history.gpus.get(key)
    if gpu is None:
        return []
    out = []
    for code, _ in sorted(gpu["xids"].items(), key=lambda i: i[1][2]):
        kind, verdict, _ = xid.classify(int(code))
        out.append(XidError(int(code), kind, verdict, "", "", "", "kernel log"))
    return out


def _text(value: object) -> str:
    return "" if value is None else str(value)


def snapshot(node: str, interval: float, now: float, gpus: list[Gpu], nvml_up: bool,
             history: History, problems: dict[str, str],
             fabric: tuple[FabricNode | None, str | None] = (None, None)) -> Snapshot:  # fmt: skip
    """The Snapshot of a cycle: ``gpus`` every GPU the inventory found (every_gpu, PCI bus
    order; lost and device-node-missing ones included), ``nvml_up`` whether NVML answered,
    ``problems`` the watch's own (cause -> line), ``fabric`` an NVSwitch node's switches and
    fabric manager (gpunode.validate.fabric.collect; None elsewhere) and the loaded
    driver's version: judged by health.fabric_node, validate's node.fabric_manager."""
    states: list[GpuState] = []
    trained_gpus: list[bool] = []
    for i, g in enumerate(gpus):
        key = key_of(g)
        g.xid_errors = _xid_errors(history, key)
        g.xid_sources = [XID_SOURCE]
        verdicts = health.verdicts(g)
        if not nvml_up and g.missing is None:
            verdicts = [v for v in verdicts if v[0] == "gpu.device_node"]
        st = GpuState(
            str(i), _text(g.uuid), _text(g.pci_bus_id), _text(g.name), _text(g.serial), key
        )
        st.health = [(c, HEALTH_VALUE[s]) for c, s, _ in verdicts if s in HEALTH_VALUE]
        st.failed = [c for c, s, _ in verdicts if s == health.FAIL]
        st.lost = g.lost
        if g.fabric is not None:
            trained_gpus.append(
                all(s != health.FAIL for c, s, _ in verdicts if c == "gpu.fabric_manager")
            )
        states.append(st)
    known = {st.key for st in states}
    for key, seen in history.gpus.items():  # GPUs gone from NVML and the driver's list
        if key not in known:
            states.append(GpuState(_text(seen.get("index")), "" if key.startswith("pci:") else key,
                                   _text(seen.get("bus_id") or key.removeprefix("pci:")),
                                   _text(seen.get("model")), _text(seen.get("serial")), key))  # fmt: skip
    for st in states:
        st.xid_counts = history.codes(st.key)
        st.xid_last = history.last(st.key)
        st.xid_fatal = any(fatal(c) for c in st.xid_counts)
        st.lost = st.lost or 79 in st.xid_counts
    trained = all(trained_gpus) if trained_gpus else None
    fabric_node, driver_version = fabric
    if fabric_node is not None and getattr(fabric_node, "nvswitch", False):
        _cid, status, _detail = health.fabric_node(fabric_node, driver_version, gpus)
        trained = status != health.FAIL and trained is not False
    healthy = (
        nvml_up
        and trained is not False
        and not any(st.failed or st.xid_fatal or st.lost for st in states)
    )
    snap = Snapshot(node, interval, now, nvml_up, dict(problems), states, trained, healthy, "")
    snap.message = message(snap, history)
    return snap


def message(snap: Snapshot, history: History) -> str:
    """node-problem-detector's one line: the worst finding, or OK."""
    text = f"OK: {len(snap.gpus)} GPU(s) healthy"
    if not snap.nvml_up:
        text = f"NVML: {snap.problems.get('nvml') or 'does not answer'}"
    else:
        for st in snap.gpus:
            where = f"GPU {st.index or '?'} ({st.bus_id or st.uuid or '?'})"
            if st.xid_fatal:
                seen = history.gpus.get(st.key, {}).get("xids", {})
                code = max((int(c) for c in seen if fatal(int(c))), key=lambda c: seen[str(c)][2])
                text = f"{where}: Xid {code} ({short(code)})"
            elif st.lost:
                text = f"{where}: fallen off the bus"
            elif st.failed:
                text = f"{where}: {', '.join(st.failed)} failed"
            else:
                continue
            break
        else:
            if snap.fabric_trained is False:
                text = "NVSwitch fabric not trained"
    return text if len(text) <= MESSAGE_MAX else text[: MESSAGE_MAX - 3] + "..."


def npd_verdict(doc: object, now: float, max_age: float | None) -> tuple[int, str]:
    """node-problem-detector's (exit code, line) from the state file the watch writes
    each cycle (``state_document``): unknown when missing, not ours, or older than
    ``max_age`` (None: three intervals)."""
    if not isinstance(doc, dict) or not isinstance(doc.get("time"), int | float):
        return NPD_UNKNOWN, "gpunode watch: no state (is gpunode-watch running?)"
    interval = doc.get("interval") if isinstance(doc.get("interval"), int | float) else 60
    limit = 3 * interval if max_age is None else max_age
    age = now - doc["time"]
    if age > limit:
        return NPD_UNKNOWN, f"gpunode watch: state is {age:.0f} s old (limit {limit:.0f} s)"
    text = str(doc.get("message") or "")[:MESSAGE_MAX]
    return (NPD_OK if doc.get("healthy") is True else NPD_PROBLEM), text


def state_document(snap: Snapshot) -> dict:
    return {"schema": "gpunode.watch-state/v1", "node": snap.node, "time": snap.heartbeat,
            "interval": snap.interval, "healthy": snap.healthy, "message": snap.message,
            "nvml_up": snap.nvml_up, "problems": snap.problems}  # fmt: skip
