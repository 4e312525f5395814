"""The result of a validation (schema ``gpunode.validate/v1``, read by gpunode.report).

A check is one verdict: a stable dotted id, a title, the GPU it is about (index and UUID, or
None for node-level checks), a status, one line of detail and how long it took. A check
about a MIG device (mig.isolation) also has ``mig``: the device's n in ``<gpu>:<n>``; its
``gpu`` is the parent GPU's index and its ``uuid`` the MIG device's (``MIG-...``). ``mig`` is
null on every other check.

A GPU carries its board's serial number (``serial``, null where NVML does not tell) and
lists its MIG devices under it (``mig_enabled``, ``mig``: index, uuid, gi, ci,
profile, memory_mib, in NVML's order); a GPU that cannot do MIG has ``mig_enabled`` null.

Exit codes: 0 every check passed (warn and skip allowed), 1 any check failed, 2 validation
could not run (bad input: an expectation, the vars file, the textfile path).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..nvidia import gpu as nvidia_gpu
from ..nvidia.facts import MigFacts
from ..nvidia.health import FAIL, PASS, SKIP, WARN
from ..util.command import EXIT_FAIL, EXIT_OK
from ..util.record import asdict as record_asdict
from ..util.record import factory, record

SCHEMA = "gpunode.validate/v1"
STATUSES = (PASS, WARN, FAIL, SKIP)


@dataclass
class Check:
    id: str
    title: str
    status: str
    detail: str
    gpu: int | None = None
    uuid: str | None = None
    duration_s: float = 0.0
    mig: int | None = None  # n of "<gpu>:<n>" for a check about a MIG device

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status {self.status!r} is not one of {STATUSES}")
        self.detail = " ".join(str(self.detail).split())  # one line, always

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["duration_s"] = round(self.duration_s, 4)
        keys = ("id", "title", "gpu", "mig", "uuid", "status", "detail", "duration_s")
        return {k: d[k] for k in keys}


@record
class GpuRow:
    """A GPU of the node as the result lists it: the versioned schema's names for fields of
    the GPU's record (gpunode.nvidia.gpu.Gpu), mapped by ROW (index: see
    gpunode.validate.gpus). Its MIG devices are the record's (MigFacts: index, uuid, gi, ci,
    profile, memory_mib)."""

    index: int
    uuid: str | None
    model: str | None
    pci_bus_id: str | None
    memory_mib: int | None = None
    minor: int | None = None
    mig_enabled: bool | None = None  # None: the GPU cannot do MIG (or it is not known)
    mig: list[MigFacts] = factory(list)
    serial: str | None = None  # the board's serial number; None where NVML does not tell

    @classmethod
    def of(cls, index: int, gpu: nvidia_gpu.Gpu) -> GpuRow:
        return cls(index, **{name: list(getattr(gpu, field)) if name == "mig"
                             else getattr(gpu, field) for name, field in ROW.items()})  # fmt: skip


# GpuRow field (the schema's name) -> the record's field it shows (tests/unit/validate/
# test_model.py holds the two in step)
ROW = {
    "uuid": "uuid",
    "model": "name",
    "pci_bus_id": "pci_bus_id",
    "memory_mib": "memory_total_mib",
    "minor": "minor",
    "mig_enabled": "mig_mode",
    "mig": "mig_devices",
    "serial": "serial",
}


@dataclass
class Result:
    node: str
    hostname: str
    started: str
    gpunode_version: str
    versions: dict[str, Any] = field(default_factory=dict)
    gpus: list[GpuRow] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    duration_s: float = 0.0

    def summary(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for c in self.checks:
            out[c.status] += 1
        return out

    @property
    def exit_code(self) -> int:
        return EXIT_FAIL if any(c.status == FAIL for c in self.checks) else EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "node": self.node,
            "hostname": self.hostname,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "gpunode_version": self.gpunode_version,
            "versions": self.versions,
            "gpus": [record_asdict(g) for g in self.gpus],
            "checks": [c.to_dict() for c in self.checks],
            "summary": self.summary(),
            "exit_code": self.exit_code,
        }


def titled(checks: list[Check], titles: dict[str, str]) -> Callable[..., Check]:
    """``add = titled(out, TITLES)``, then ``add(id, status, detail, gpu=, uuid=)``: appends
    the check titled from ``titles``, timed from this call (or from the previous add)."""
    last = [time.monotonic()]

    def add(cid: str, status: str, detail: str, **kw: Any) -> Check:
        now = time.monotonic()
        check = Check(cid, titles[cid], status, detail, duration_s=now - last[0], **kw)
        last[0] = now
        checks.append(check)
        return check

    return add
