"""The series `gpunode watch` writes (node_exporter's textfile collector reads
gpunode-watch.prom), named once: METRICS is the contract the alert rules read
(monitoring/, README "Watching a node"); ``render`` writes a Snapshot in the text
exposition format (gpunode.util.promtext, as validate's textfile).

No family here is one of `gpunode validate --textfile`'s (gpunode.validate.output): both
files sit in one textfile directory.
"""

from __future__ import annotations

from ..util.promtext import family, labels
from .state import Snapshot

GPU = ("node", "gpu", "uuid", "bus_id", "model")
# name: (type, labels, help)
METRICS = {
    "gpunode_watch_heartbeat_timestamp_seconds": ("gauge", ("node",),
        "Unix time of the last completed watch cycle (written every interval even when "
        "nothing else changed)."),
    "gpunode_watch_interval_seconds": ("gauge", ("node",), "The configured interval."),
    "gpunode_watch_nvml_up": ("gauge", ("node",),
        "1 when NVML answered in the last cycle, 0 when not (driver gone, NVML error or hang)."),
    "gpunode_watch_problem": ("gauge", ("node", "cause"),
        "1 per current problem the watch could not get past (cause: nvml, kmsg, history, "
        "textfile, fabric); absent when none."),
    "gpunode_gpu_serial_info": ("gauge", (*GPU, "serial"), "1 per GPU (info series)."),
    "gpunode_gpu_health": ("gauge", (*GPU, "check"),
        "0 pass, 1 warn, 2 fail: one per gpunode.nvidia.health GPU check that ran (skips "
        "omitted); check is the check id."),
    "gpunode_gpu_lost": ("gauge", GPU,
        "1 when the GPU has fallen off the bus (NVML GPU_IS_LOST or Xid 79), else 0."),
    "gpunode_gpu_xid_last": ("gauge", GPU,
        "The code of the last Xid the kernel logged for this GPU since boot (0: none), like "
        "DCGM_FI_DEV_XID_ERRORS."),
    "gpunode_gpu_xid_errors_total": ("counter", (*GPU, "xid"), "Xids of that code since boot."),
    "gpunode_gpu_xid_fatal": ("gauge", GPU,
        "1 when an Xid that gpunode's Xid table fails (the fatal ones: drain, reset) was "
        "logged since boot, else 0."),
    "gpunode_node_fabric_trained": ("gauge", ("node",),
        "NVSwitch nodes only: 1 when the fabric is trained (fabric manager at the driver's "
        "version), else 0; absent on nodes without NVSwitch."),
    "gpunode_node_healthy": ("gauge", ("node",),
        "1 when every GPU and node check the watch runs passes or warns, 0 when any fails."),
}  # fmt: skip


def render(snap: Snapshot) -> str:
    """The textfile of a Snapshot. A family without samples (no problem, no NVSwitch, no Xid)
    is left out, HELP and TYPE included."""
    node = snap.node
    samples: dict[str, list[tuple[dict, float]]] = {name: [] for name in METRICS}

    def add(name: str, value: float, **extra: object) -> None:
        samples[name].append(({"node": node, **extra}, value))

    add("gpunode_watch_heartbeat_timestamp_seconds", round(snap.heartbeat, 3))
    add("gpunode_watch_interval_seconds", snap.interval)
    add("gpunode_watch_nvml_up", int(snap.nvml_up))
    for cause in sorted(snap.problems):
        add("gpunode_watch_problem", 1, cause=cause)
    for g in snap.gpus:
        gl = g.labels()
        add("gpunode_gpu_serial_info", 1, **gl, serial=g.serial)
        for check, value in g.health:
            add("gpunode_gpu_health", value, **gl, check=check)
        add("gpunode_gpu_lost", int(g.lost), **gl)
        add("gpunode_gpu_xid_last", g.xid_last, **gl)
        for code, count in g.xid_counts.items():
            add("gpunode_gpu_xid_errors_total", count, **gl, xid=code)
        add("gpunode_gpu_xid_fatal", int(g.xid_fatal), **gl)
    if snap.fabric_trained is not None:
        add("gpunode_node_fabric_trained", int(snap.fabric_trained))
    add("gpunode_node_healthy", int(snap.healthy))
    out: list[str] = []
    for name, (kind, names, help_text) in METRICS.items():
        if samples[name]:
            rows = [(labels(**{n: lab[n] for n in names}), v) for lab, v in samples[name]]
            out.extend(family(name, help_text, rows, kind))
    return "\n".join(out) + "\n"
