"""Xid errors as NVML delivers them: ``nvmlEventTypeXidCriticalError`` events.

The kernel log (gpunode.nvidia.xid) holds every Xid since boot; NVML's event sets deliver
the ones raised after a process registered for them, with the GPU's handle and, on a MIG
device, its GPU and compute instance ids. ``gpunode validate`` watches while it works, so an
Xid its own smoke-test containers provoke is reported even where the kernel log cannot be
read. NVIDIA's device plugin watches the same events (and ignores the application ones).
"""

from __future__ import annotations

from typing import Any

from . import nvml
from .busid import BusId
from .facts import nvml_text

XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
NOT_MIG = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of an event not from a MIG device


class XidWatch:
    """``with XidWatch() as w: ...; events = w.drain()``: every GPU that supports Xid events
    registered at entry; ``drain()`` returns the events delivered since, as
    (NVML bus id, xid, gpu instance id or None, compute instance id or None), never waiting.
    ``unavailable`` says why nothing is watched (no NVML, no GPU supports the events)."""

    def __init__(self, library: str | None = None) -> None:
        self._session = nvml.Session(library)
        self._nv: Any = None
        self._set: Any = None
        self.watched: list[str] = []  # bus ids
        self.unavailable: str | None = None

    def __enter__(self) -> XidWatch:
        try:
            self._nv = nv = self._session.__enter__()
        except nvml.NvmlError as exc:
            self.unavailable = str(exc)
            return self
        try:
            self._set = nv.nvmlEventSetCreate()
            for _index, handle, _error in nvml.handles(nv):
                if handle is None:
                    continue
                try:
                    if not nv.nvmlDeviceGetSupportedEventTypes(handle) & XID_CRITICAL:
                        continue
                    nv.nvmlDeviceRegisterEvents(handle, XID_CRITICAL, self._set)
                except nv.NVMLError:
                    continue
                self.watched.append(nvml_text(nv.nvmlDeviceGetPciInfo(handle).busId))
        except nv.NVMLError as exc:
            self.unavailable = f"NVML events cannot be used: {exc}"
        if not self.watched and self.unavailable is None:
            self.unavailable = "no GPU delivers Xid events through NVML"
        return self

    def drain(self) -> list[tuple[str, int, int | None, int | None]]:
        if self._set is None or not self.watched:
            return []
        nv = self._nv
        out = []
        for _ in range(10000):  # a storm of events is cut off, never waited on
            try:
                data = nv.nvmlEventSetWait_v2(self._set, 0)
            except nv.NVMLError:  # TIMEOUT: none left (any other error: stop as well)
                break
            if not data.eventType & XID_CRITICAL:
                continue
            try:
                bus = nvml_text(nv.nvmlDeviceGetPciInfo(data.device).busId)
            except nv.NVMLError:
                continue
            gi = None if data.gpuInstanceId == NOT_MIG else int(data.gpuInstanceId)
            ci = None if data.computeInstanceId == NOT_MIG else int(data.computeInstanceId)
            out.append((BusId.parse(bus).nvml, int(data.eventData), gi, ci))
        return out

    def __exit__(self, *exc: object) -> None:
        if self._nv is None:
            return
        if self._set is not None:
            try:  # noqa: SIM105 - contextlib is not worth loading here
                self._nv.nvmlEventSetFree(self._set)
            except self._nv.NVMLError:
                pass
        self._session.__exit__(*exc)
