"""The Xids each GPU had this boot, kept across a restart of the watch:
``<state-dir>/watch-history.json``.

Per GPU (by UUID; by ``pci:<bus id>`` for an Xid on a bus no GPU known then has, adopted by
the GPU when one shows up there): each Xid code's count, first and last time seen, the last
code, and the labels the GPU had (index, bus id, model, serial), so its series stay when
NVML cannot answer. The file names the boot it is about (/proc/sys/kernel/random/boot_id):
a history of another boot is a fresh start, as the kernel's log is. It also keeps the
sequence number of the last /dev/kmsg record read, so a restarted watch reads the ring
buffer again without counting a record twice, and counts what the kernel logged while the
watch was down.

Bounded: at most MAX_GPUS GPUs and MAX_CODES codes per GPU (the least recent dropped),
counts capped at MAX_COUNT, the file read only up to MAX_BYTES. A file that is not such a
history (corrupt, too big, another schema) is a fresh start, said by ``load``.
"""

from __future__ import annotations

import json
import os

from ..util.files import write_atomic

NAME = "watch-history.json"
SCHEMA = "gpunode.watch-history/v1"
MAX_GPUS = 64
MAX_CODES = 64
MAX_COUNT = 2**53  # exact in JSON and in a float sample
MAX_BYTES = 1024 * 1024
BOOT_ID = "/proc/sys/kernel/random/boot_id"
LABELS = ("index", "bus_id", "model", "serial")


def boot_id(path: str = BOOT_ID) -> str:
    """This boot's id ("" when it cannot be read: then every start is the same boot)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(64).decode("ascii", "replace").strip()
    except OSError:
        return ""


class History:
    """What ``to_json`` writes: {schema, boot_id, kmsg_seq, gpus: {key: {labels..., last,
    xids: {code: [count, first, last]}}}}."""

    def __init__(self, boot: str, kmsg_seq: int | None = None, gpus: dict | None = None) -> None:
        self.boot_id = boot
        self.kmsg_seq = kmsg_seq
        self.gpus: dict[str, dict] = gpus or {}

    def add(self, key: str, code: int, when: float, seen: dict | None = None) -> None:
        """An Xid ``code`` of the GPU ``key`` at ``when`` (Unix time); ``seen``: its labels."""
        gpu = self.gpus.get(key)
        if gpu is None:
            if len(self.gpus) >= MAX_GPUS:
                del self.gpus[min(self.gpus, key=lambda k: self.gpus[k]["time"])]
            gpu = self.gpus[key] = {n: None for n in LABELS} | {"last": 0, "time": when, "xids": {}}
        for name, value in (seen or {}).items():
            gpu[name] = value
        xids = gpu["xids"]
        entry = xids.get(str(code))
        if entry is None:
            if len(xids) >= MAX_CODES:
                del xids[min(xids, key=lambda c: xids[c][2])]
            entry = xids[str(code)] = [0, when, when]
        entry[0] = min(entry[0] + 1, MAX_COUNT)
        entry[2] = when
        gpu["last"], gpu["time"] = code, when

    def adopt(self, key: str, bus_id: str, seen: dict) -> bool:
        """Entries kept by bus (``pci:<bus>``) merged into the GPU ``key`` now at that bus,
        and its labels refreshed; True when something changed."""
        orphan = self.gpus.pop(f"pci:{bus_id}", None)
        for code, (count, first, last) in sorted(
            (orphan or {"xids": {}})["xids"].items(), key=lambda i: i[1][2]
        ):
            self.add(key, int(code), last, seen)
            entry = self.gpus[key]["xids"][code]
            entry[0] = min(entry[0] - 1 + count, MAX_COUNT)
            entry[1] = min(entry[1], first)
        gpu = self.gpus.get(key)
        if gpu is not None and any(gpu.get(n) != v for n, v in seen.items()):
            gpu.update(seen)
            return True
        return orphan is not None

    def codes(self, key: str) -> dict[int, int]:
        """{code: count} of the GPU ``key``, by code."""
        gpu = self.gpus.get(key)
        return (
            {}
            if gpu is None
            else {int(c): e[0] for c, e in sorted(gpu["xids"].items(), key=lambda i: int(i[0]))}
        )

    def last(self, key: str) -> int:
        gpu = self.gpus.get(key)
        return 0 if gpu is None else gpu["last"]

    def to_json(self) -> bytes:
        doc = {
            "schema": SCHEMA,
            "boot_id": self.boot_id,
            "kmsg_seq": self.kmsg_seq,
            "gpus": self.gpus,
        }
        return (json.dumps(doc, sort_keys=True) + "\n").encode()


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 2**63


def _valid(doc: object) -> str | None:
    """Why ``doc`` is not a history (None: it is one)."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        return f"not a {SCHEMA} document"
    if not isinstance(doc.get("boot_id"), str) or not isinstance(doc.get("gpus"), dict):
        return "boot_id or gpus missing"
    if doc.get("kmsg_seq") is not None and not (
        _number(doc["kmsg_seq"]) and isinstance(doc["kmsg_seq"], int)
    ):
        return "kmsg_seq is not a number"
    if len(doc["gpus"]) > MAX_GPUS:
        return f"more than {MAX_GPUS} GPUs"
    for key, gpu in doc["gpus"].items():
        if (
            not isinstance(gpu, dict)
            or not isinstance(gpu.get("xids"), dict)
            or len(gpu["xids"]) > MAX_CODES
        ):
            return f"GPU {key[:60]}: no Xid table"
        if not (_number(gpu.get("last")) and _number(gpu.get("time"))):
            return f"GPU {key[:60]}: last or time is not a number"
        for name in LABELS:
            if not (
                gpu.get(name) is None
                or (isinstance(gpu[name], str | int) and not isinstance(gpu[name], bool))
            ):
                return f"GPU {key[:60]}: {name} is not a label"
        for code, entry in gpu["xids"].items():
            if not (code.isdigit() and len(code) <= 6 and isinstance(entry, list) and len(entry) == 3
                    and all(_number(v) for v in entry) and isinstance(entry[0], int)):  # fmt: skip
                return f"GPU {key[:60]}: Xid {code[:20]} is not [count, first, last]"
    return None


def load(path: str, boot: str) -> tuple[History, str | None]:
    """The history at ``path`` for the boot ``boot``: (history, why it is a fresh start
    when the file was there but unusable, else None). A missing file, or another boot's, is a
    fresh start without a word."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return History(boot), None
    except OSError as exc:
        return History(boot), f"{path}: cannot be read ({exc.strerror or exc}); starting afresh"
    try:
        with os.fdopen(fd, "rb") as fh:
            data = fh.read(MAX_BYTES + 1)
    except OSError as exc:
        return History(boot), f"{path}: cannot be read ({exc.strerror or exc}); starting afresh"
    if len(data) > MAX_BYTES:
        return History(boot), f"{path}: larger than {MAX_BYTES} bytes; starting afresh"
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return History(boot), f"{path}: corrupt (not JSON); starting afresh"
    why = _valid(doc)
    if why is not None:
        return History(boot), f"{path}: corrupt ({why}); starting afresh"
    if doc["boot_id"] != boot:
        return History(boot), None  # another boot: what the kernel logged then is gone too
    return History(boot, doc["kmsg_seq"], doc["gpus"]), None


def save(path: str, history: History) -> None:
    """Replace the history atomically (raises OSError; the old file is then untouched)."""
    write_atomic(path, history.to_json(), 0o644, skip_if_same=False, durable=True)
