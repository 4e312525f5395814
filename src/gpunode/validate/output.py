"""The result as JSON (``--json``), as a table for people, and as a Prometheus textfile for
node_exporter's textfile collector (``--textfile PATH``).

Textfile metrics (gauges; labels node, check, gpu, uuid — gpu and uuid empty for
node-level checks; for a check about a MIG device gpu is ``<gpu>:<n>`` as a container
requests it and uuid the MIG device's, which joins gpunode_mig_device_info):

  gpunode_check_status{node,check,gpu,uuid}         0 pass, 1 warn, 2 fail, -1 skip
  gpunode_check_duration_seconds{node,check,gpu,uuid}
  gpunode_gpu_info{node,gpu,uuid,model,pci_bus_id}  1 per GPU
  gpunode_mig_device_info{node,gpu,mig,profile,uuid,gi,ci}  1 per MIG device
  gpunode_mig_device_memory_bytes{node,gpu,mig,uuid}  its memory
  gpunode_validate_checks{node,status}              how many checks have each status
  gpunode_validate_duration_seconds{node}           wall time of the run
  gpunode_validate_last_run_timestamp_seconds{node} when it started (Unix time)
  gpunode_validate_exit_code{node}                  0 passed, 1 a check failed

Alert on ``gpunode_check_status == 2`` (failed) or ``>= 1`` (failed or warning).
The file is replaced atomically: the collector never reads half a file, and a failed write
leaves the previous one.
"""

from __future__ import annotations

import calendar
import os
import time

from ..util.files import write_atomic
from ..util.promtext import family as _family
from ..util.promtext import labels as _labels
from .model import FAIL, PASS, SKIP, WARN, Result

STATUS_VALUE = {PASS: 0, WARN: 1, FAIL: 2, SKIP: -1}
MARK = {PASS: "ok", WARN: "WARN", FAIL: "FAIL", SKIP: "skip"}


def table(result: Result) -> str:
    s = result.summary()
    v = result.versions
    lines = [
        f"{result.node}: {len(result.gpus)} GPU(s), driver {v.get('driver_loaded') or '-'} "
        f"(installed {v.get('driver_installed') or '-'}, pinned {v.get('driver_pinned') or '-'}), "
        f"CUDA installed {', '.join(v.get('cuda_installed') or []) or '-'}",
        f"{'STATUS':<6}  {'CHECK':<26}  {'GPU':>5}  {'TIME':>6}  DETAIL",
    ]
    for c in result.checks:
        gpu = "-" if c.gpu is None else str(c.gpu) if c.mig is None else f"{c.gpu}:{c.mig}"
        lines.append(
            f"{MARK[c.status]:<6}  {c.id:<26}  {gpu:>5}  {c.duration_s:>5.2f}s  {c.detail}"
        )
    lines.append(
        f"{s['pass']} passed, {s['warn']} warning(s), {s['fail']} failed, {s['skip']} skipped "
        f"in {result.duration_s:.1f}s"
    )
    return "\n".join(lines)


def textfile(result: Result) -> str:
    node = result.node
    out: list[str] = []

    def family(name: str, help_text: str, samples: list[tuple[str, float]]) -> None:
        out.extend(_family(name, help_text, samples))

    def check_labels(c) -> str:
        gpu = "" if c.gpu is None else c.gpu if c.mig is None else f"{c.gpu}:{c.mig}"
        return _labels(node=node, check=c.id, gpu=gpu, uuid=c.uuid or "")

    family(
        "gpunode_check_status",
        "Result of a gpunode validate check: 0 pass, 1 warn, 2 fail, -1 skip.",
        [(check_labels(c), STATUS_VALUE[c.status]) for c in result.checks],
    )
    family(
        "gpunode_check_duration_seconds",
        "How long a gpunode validate check took.",
        [(check_labels(c), round(c.duration_s, 4)) for c in result.checks],
    )
    family(
        "gpunode_gpu_info",
        "A GPU of the node as gpunode validate saw it (always 1).",
        [(_labels(node=node, gpu=g.index, uuid=g.uuid or "", model=g.model or "",
                  pci_bus_id=g.pci_bus_id or ""), 1) for g in result.gpus],
    )  # fmt: skip
    migs = [(g, m) for g in result.gpus for m in g.mig]
    family(
        "gpunode_mig_device_info",
        "A MIG device of a GPU as gpunode validate saw it (always 1); mig is n in <gpu>:<n>.",
        [(_labels(node=node, gpu=g.index, mig=m.index, profile=m.profile, uuid=m.uuid,
                  gi=m.gi, ci=m.ci), 1) for g, m in migs],
    )  # fmt: skip
    family(
        "gpunode_mig_device_memory_bytes",
        "Memory of a MIG device.",
        [(_labels(node=node, gpu=g.index, mig=m.index, uuid=m.uuid), m.memory_mib * 1048576)
         for g, m in migs],
    )  # fmt: skip
    family(
        "gpunode_validate_checks",
        "Number of gpunode validate checks with each status.",
        [(_labels(node=node, status=k), n) for k, n in result.summary().items()],
    )
    family(
        "gpunode_validate_duration_seconds",
        "Wall time of the last gpunode validate run.",
        [(_labels(node=node), round(result.duration_s, 3))],
    )
    started = calendar.timegm(time.strptime(result.started, "%Y-%m-%dT%H:%M:%SZ"))
    family(
        "gpunode_validate_last_run_timestamp_seconds",
        "When the last gpunode validate run started (Unix time).",
        [(_labels(node=node), started)],
    )
    family(
        "gpunode_validate_exit_code",
        "Exit code of the last gpunode validate run: 0 passed, 1 a check failed.",
        [(_labels(node=node), result.exit_code)],
    )
    return "\n".join(out) + "\n"


def check_textfile_path(path: str) -> str | None:
    """Why ``path`` cannot take the textfile (one line), or None. Checked before the run."""
    directory = os.path.dirname(os.path.abspath(path))
    if not path.endswith(".prom"):
        return f"--textfile {path}: node_exporter reads only *.prom files; name it <something>.prom"
    if not os.path.isdir(directory):
        return f"--textfile {path}: directory {directory} does not exist"
    if os.path.isdir(path):
        return f"--textfile {path}: is a directory"
    if not os.access(directory, os.W_OK | os.X_OK):
        return f"--textfile {path}: directory {directory} is not writable"
    return None


def write_textfile(path: str, result: Result) -> None:
    """Replace ``path`` atomically (raises OSError; the old file is then untouched)."""
    write_atomic(path, textfile(result).encode(), 0o644, skip_if_same=False)
