"""Xid errors: the driver's error reports in the kernel log, read back and judged.

The driver logs each one as a kernel message (``NVRM`` prefix, bus id without the function)::

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.

Where the log comes from: ``/dev/kmsg``, the kernel's ring buffer as records
(``prio,seq,usec,flags;message``, one record per read, continuation lines starting with a
blank), read without waiting: what the kernel still holds since boot. A plain text log
(``dmesg`` output, a journal export, kern.log) is read line by line.

Only the driver may raise a verdict, and the log holds text others chose: any writer of
/dev/kmsg (a root daemon, a pod given the device) adds records, and kernel lines print
user-chosen strings (a memcg OOM line prints the cgroup path, which an unprivileged user
names in a delegated subtree). So a record counts only if the kernel wrote it, facility 0:
``prio`` below 8 (the kernel forces a userspace write onto LOG_USER or the facility it
names, never 0), and only if its message *starts* with the driver's ``NVRM: Xid (PCI:``.
A plain-text line counts only with that prefix right after the line's own header: a dmesg
timestamp (``[  9.123456]``, ``-T``'s date, ``-r``'s ``<prio>`` below 8, ``-x``'s ``kern``
facility), a syslog/journal timestamp and host with the ``kernel:`` tag, or nothing. A
plain-text export cannot tell the kernel's lines from a process that tags itself
``kernel`` (``logger -t kernel``): read /dev/kmsg (the default) or ``journalctl -k``
(kernel transport only) where that matters.

The kernel also writes text others chose at facility 0 at the start of a record: a
netfilter ``LOG`` rule's prefix (iptables: 29 characters, nft: 127), set by whoever holds
CAP_NET_ADMIN in the host network namespace (a hostNetwork pod given NET_ADMIN). The kernel
follows the prefix with the packet's fields, always starting ``IN=<interface> OUT=<interface> ``
(then MAC=, SRC=, DST=, PROTO=… or ARP's, nf_log_syslog.c); the driver's Xid lines never
carry them. So a message holding ``IN=… OUT=… `` (interface names: at most 15 characters, no
blank) is netfilter's and never an Xid, wherever it stands (a longer prefix may put it in
``name=``). What that costs: a process named to hold ``IN= OUT= `` (a name is 15
characters) hides its own Xid from the log; NVML's events (gpunode.nvidia.xidevents) still
report it while validate runs. NVML's Xid events (gpunode.nvidia.xidevents)
need no log at all: the driver delivers them to a registered process, so ``validate`` takes
the ones raised while it runs from NVML; the history before it (the log since boot) has no
second source, NVML delivering only events raised after registration.

Classes follow NVIDIA's Xid catalogue: the codes NVIDIA's device plugin ignores because an
application caused them (13, 31, 43, 45, 68, 109) only warn; memory, bus, NVLink, GSP and
every other code fail the GPU.
"""

from __future__ import annotations

import errno
import os
import re

from ..util.record import record
from .busid import BusId

KMSG = "/dev/kmsg"
_MAX_LOG_BYTES = 16 * 1024 * 1024  # the kernel's ring buffer is at most a few MiB

_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2})(?:\.[0-7])?\): "
    r"(?P<xid>\d{1,5})(?P<rest>.*)"
)
_PID = re.compile(r"\bpid=(?P<pid>'?[^,\s']*'?)")
_NAME = re.compile(r"\bname=(?P<name>[^,]*)")
# netfilter's LOG record: the prefix, then "IN=%s OUT=%s " (nf_log_dump_packet_common)
_NETFILTER = re.compile(r"IN=\S{0,15} OUT=\S{0,15}(?: |$)")
_KMSG_RECORD = re.compile(r"(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<text>.*)")
KERNEL_PRIO_END = 8  # prio = facility << 3 | level: below 8 is facility 0, the kernel's own
# What may come before the driver's text on a plain-text line (see the module docstring):
# dmesg -r's <prio>, dmesg -x's "kern  :warn  : ", a syslog/journal header (classic or
# ISO-8601 time, host, the kernel tag), a bracketed time (dmesg, kern.log), dmesg's caller.
_PLAIN_HEADER = re.compile(
    r"(?:<(?P<prio>\d{1,10})>)?"
    r"(?:kern *:[a-z]+ *: )?"
    r"(?:(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d|\d{4}-\d\d-\d\dT[\d:.,+-]{8,40}Z?) \S{1,255} "
    r"kernel: )?"
    r"(?:\[[\w .:+-]{1,40}\] )?"
    r"(?:\[ *[TC]\d{1,10}\] )?"
    r"(?=NVRM: Xid \(PCI:)"
)

# (class, verdict, what to do)
_APPLICATION = (
    "application",
    "warn",
    "an application error (bad kernel, page fault, timeout); look at the process named; the GPU "
    "itself is not suspect unless it repeats across jobs",
)
_CLASSES: dict[int, tuple[str, str, str]] = {
    13: _APPLICATION,
    31: _APPLICATION,
    43: _APPLICATION,
    45: _APPLICATION,
    68: _APPLICATION,
    109: _APPLICATION,
    48: ("memory", "fail", "double-bit ECC error: drain the node and reset the GPU"),
    63: ("memory", "fail", "ECC page retirement or row remap pending: drain, then reset the GPU"),
    64: (
        "memory",
        "fail",
        "page retirement or row remap failed: drain and reset; RMA if it repeats",
    ),
    92: ("memory", "fail", "high single-bit ECC error rate: drain and reset; RMA if it repeats"),
    94: ("memory", "fail", "contained ECC error: restart the affected applications, then reset"),
    95: ("memory", "fail", "uncontained ECC error: drain the node and reset the GPU"),
    79: (
        "bus",
        "fail",
        "GPU has fallen off the bus: drain, reboot, check PCIe seating/power/cooling",
    ),
    74: ("nvlink", "fail", "NVLink error: drain, reset the GPUs of the link; check the fabric"),
    119: ("gsp", "fail", "GSP RPC timeout: drain and reset the GPU (reboot if reset fails)"),
    120: ("gsp", "fail", "GSP error: drain and reset the GPU (reboot if reset fails)"),
}
_OTHER = (
    "other",
    "fail",
    "a driver error: drain the node, reset the GPU and look it up in NVIDIA's Xid catalogue",
)


def classify(xid: int) -> tuple[str, str, str]:
    """(class, verdict "warn"/"fail", what to do) of an Xid code."""
    return _CLASSES.get(xid, _OTHER)


@record(frozen=True)
class XidEvent:
    bus: BusId  # function 0: the log names domain:bus:device only
    xid: int
    pid: str = ""
    process: str = ""
    message: str = ""  # the driver's text after the code
    usec: int | None = None  # since boot, for /dev/kmsg records

    @property
    def kind(self) -> str:
        return classify(self.xid)[0]

    @property
    def verdict(self) -> str:
        return classify(self.xid)[1]

    def matches(self, bus_id: str) -> bool:
        """Whether this event is about the GPU at ``bus_id`` (any form BusId parses)."""
        try:
            gpu = BusId.parse(bus_id)
        except ValueError:
            return False
        return (gpu.domain, gpu.bus, gpu.device) == (self.bus.domain, self.bus.bus, self.bus.device)


def parse_line(text: str, usec: int | None = None) -> XidEvent | None:
    """The Xid event a kernel message reports: one that starts with the driver's prefix and
    is not a netfilter LOG record (see the module docstring)."""
    m = _XID.match(text)
    if m is None or _NETFILTER.search(text, m.end("xid")):
        return None
    bus = BusId.parse(m["bus"] + ".0")
    rest = m["rest"].lstrip(",").strip()
    pid = _PID.search(rest)
    name = _NAME.search(rest)
    message = rest
    for found in (pid, name):
        if found is not None:
            message = message.replace(found.group(0), "")
    message = message.strip(" ,")
    return XidEvent(
        bus,
        int(m["xid"]),
        pid=pid["pid"].strip("'") if pid else "",
        process=name["name"].strip() if name else "",
        message=message,
        usec=usec,
    )


def kmsg_record(line: str) -> tuple[int, XidEvent | None] | None:
    """One /dev/kmsg record (``prio,seq,usec,flags;message``, its first line): (its sequence
    number, the Xid event it reports or None); None when the line is not a record (a
    continuation line, or numbers longer than the kernel writes). A record userspace wrote
    (prio of 8 and above) reports none (see the module docstring)."""
    m = _KMSG_RECORD.fullmatch(line)
    if m is None or len(m["prio"]) > 10 or len(m["seq"]) > 20 or len(m["usec"]) > 20:
        return None
    seq = int(m["seq"])
    if int(m["prio"]) >= KERNEL_PRIO_END:
        return seq, None
    return seq, parse_line(m["text"], int(m["usec"]))


def parse_log(text: str) -> list[XidEvent]:
    """Every Xid event the driver logged, in order: /dev/kmsg records (a text whose first
    line is one; then every other line, a record's continuation, is skipped) or plain-text
    lines (see the module docstring for what counts)."""
    events = []
    lines = text.splitlines()
    records = bool(lines) and _KMSG_RECORD.fullmatch(lines[0]) is not None
    for line in lines:
        if records:  # a continuation line or a record userspace wrote gives no event
            found = kmsg_record(line)
            if found is not None and found[1] is not None:
                events.append(found[1])
            continue
        h = _PLAIN_HEADER.match(line)
        if h is None or (h["prio"] is not None and int(h["prio"]) >= KERNEL_PRIO_END):
            continue
        event = parse_line(line[h.end() :])
        if event is not None:
            events.append(event)
    return events


class LogUnreadable(RuntimeError):
    """The kernel log cannot be read (permission, no such file); one line."""


def read_kernel_log(path: str = KMSG) -> str:
    """What the kernel's log holds now, without waiting for more: /dev/kmsg is read one
    record per read() until EAGAIN (a record the buffer overwrote meanwhile, EPIPE, is
    skipped); a regular file is read whole."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise LogUnreadable(f"{path}: {exc.strerror or exc}") from None
    chunks: list[bytes] = []
    total = 0
    try:
        while total < _MAX_LOG_BYTES:
            try:
                data = os.read(fd, 65536)
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue
                if exc.errno == errno.EAGAIN:
                    break
                raise LogUnreadable(f"{path}: {exc.strerror or exc}") from None
            if not data:
                break
            chunks.append(data)
            total += len(data)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8", "replace")
