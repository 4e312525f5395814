"""Raising an Xid on a simulated node, as the driver reports one: a kernel log record in the
node's ``/dev/kmsg`` (which gpunode.nvidia.xid reads) and an event in the node's event log,
which the mock NVML delivers to every process registered for ``nvmlEventTypeXidCriticalError``
on that GPU (gpunode.nvidia.xidevents). ``gpunode sim xid NODE BUS CODE``.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from ..nvidia.busid import BusId
from ..util.command import UsageError
from .migstate import EVENT_NAME, PROC_DRIVER, SIM_DIR
from .procfs import XID_OF_FAULT

KMSG = Path("/dev/kmsg")
EVENT_LOG = Path(PROC_DRIVER) / SIM_DIR / EVENT_NAME  # the mock reads it as migstate.h's EVENT_LOG
_TEXTS = {code: (pid, name, text) for code, pid, name, text in XID_OF_FAULT.values()}


def _append(path: Path, text: str) -> None:
    """Append under an exclusive lock: two raisers never interleave a line."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o444)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def raise_xid(bus: str, code: str, kmsg: Path = KMSG, events: Path = EVENT_LOG) -> str:
    """Log Xid ``code`` for the GPU at ``bus`` and queue its NVML event; the kernel line."""
    try:
        where = BusId.parse(bus)
    except ValueError:
        raise UsageError(f"sim xid: bus id {bus!r} is not [domain:]bus:device.function") from None
    if not (code.isascii() and code.isdigit() and 0 < int(code) < 65536):
        raise UsageError(f"sim xid: Xid {code!r} is not a number from 1 to 65535")
    if not events.parent.is_dir():
        raise UsageError(f"sim xid: {events.parent} is missing: no simulated driver is loaded here")
    pid, name, text = _TEXTS.get(int(code), ("'<unknown>'", "<unknown>", "simulated Xid"))
    line = (
        f"NVRM: Xid (PCI:{where.domain:04x}:{where.bus:02x}:{where.device:02x}): {int(code)}, "
        f"pid={pid}, name={name}, {text}"
    )
    if kmsg.is_file():  # the simulator's log (a real /dev/kmsg is a character device)
        seq = sum(1 for _ in kmsg.open(encoding="utf-8", errors="replace"))
        _append(kmsg, f"4,{seq},{5_000_000 + 1_000_000 * seq},-;{line}\n")
    _append(events, f"xid\tbus={where.nvml}\tcode={int(code)}\n")
    return line
