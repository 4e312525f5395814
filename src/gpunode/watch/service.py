"""`gpunode watch`'s process: the loop (``Watch.run``), one cycle (``Watch.once``) and
node-problem-detector's check (``check``).

The loop follows the kernel log (gpunode.watch.kmsg) with a short poll, so a new Xid is in
the textfile well within a second, and every interval starts an NVML cycle (the inventory's
one NVML walk, then gpunode.nvidia.health's judges through gpunode.watch.state) in a worker
thread: an NVML call that hangs holds only that thread; the loop marks NVML down once the
cycle is past its timeout and goes on (no second worker starts while one hangs). Each
cause of trouble (nvml, kmsg, history, textfile) is one line on stderr when it starts or
changes and one when it is over, and gpunode_watch_problem{cause} while it lasts; nothing
the node writes or breaks ends the loop; SIGTERM and SIGINT end it with exit 0.

Files: the textfile (replaced atomically: when its content changes, and at every interval
for the heartbeat, which is the one series that changes every interval), and in the state
directory the history (gpunode.watch.history), the state node-problem-detector's check reads
(watch-state.json) and the lock one running watch holds (watch.lock). A textfile directory
that is a symlink or not writable is the problem ``textfile``, never written.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from ..nvidia import xid
from ..util.files import make_dirs, write_atomic
from . import history, metrics, state
from .kmsg import Follower

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..nvidia.gpu import Gpu

INTERVAL = 60.0
TEXTFILE = "/var/lib/node_exporter/textfile_collector/gpunode-watch.prom"
STATE_DIR = "/var/lib/gpunode"
STATE = "watch-state.json"
FIRST_READ_XIDS = 4096  # Xid records kept from the first read of the log (what it holds)
LOCK = "watch.lock"
NVML_TIMEOUT_MAX = 30.0
TICK_S = 0.2  # the longest the loop waits on the kernel log: Xid to textfile, SIGTERM to exit


class WatchError(RuntimeError):
    """The watch cannot start (another one runs, the state directory is unusable); one line."""


def read_gpus() -> tuple[list[Gpu], bool, str | None]:
    """One NVML cycle: (every GPU, NVML answered, why not). The inventory's walk: NVML, else
    /proc/driver/nvidia (then NVML is down); no driver at all is no GPU."""
    from ..nvidia import inventory

    try:
        inv = inventory.collect(kernel_log=None)
    except inventory.NoDriver as exc:
        return [], False, str(exc)
    except Exception as exc:  # an NVML error on one GPU's call ends the walk: NVML is down
        return [], False, f"NVML failed: {type(exc).__name__}: {exc}"
    down = next((p for p in inv.problems if p.get("issue") == "nvml_unavailable"), None)
    return inv.every_gpu(), down is None, None if down is None else down["detail"]


def read_fabric() -> tuple[object | None, str | None]:
    """The node's NVSwitches and fabric manager as validate's node.fabric_manager reads them
    (gpunode.validate.fabric.collect: PCI, the driver's list, the unit, the package), and the
    loaded driver's version that the package must match. (None, None) without a driver."""
    from ..nvidia import procfs
    from ..validate import fabric

    try:
        with open(os.path.join(procfs.PROC_DRIVER_NVIDIA, "version"), encoding="utf-8",
                  errors="replace") as f:  # fmt: skip
            version = procfs.parse_version(f.read(65536))
    except OSError:
        version = None
    node = fabric.collect()
    return (node if node.nvswitch else None), version


class Watch:
    def __init__(self, node: str, interval: float = INTERVAL, textfile: str = TEXTFILE,
                 state_dir: str = STATE_DIR, kmsg: str = xid.KMSG,
                 boot_id_file: str = history.BOOT_ID,
                 gpus: Callable[[], tuple[list[Gpu], bool, str | None]] = read_gpus,
                 fabric: Callable[[], tuple[object | None, str | None]] = read_fabric,
                 nvml_timeout: float | None = None, err=None) -> None:  # fmt: skip
        self.node, self.interval, self.textfile = node, float(interval), textfile
        self.state_dir, self.kmsg_path = state_dir, kmsg
        self.history_path = os.path.join(state_dir, history.NAME)
        self.read_gpus = gpus
        self.read_fabric = fabric
        self.fabric: tuple[object | None, str | None] = (None, None)
        self.nvml_timeout = nvml_timeout or min(self.interval, NVML_TIMEOUT_MAX)
        self.err = err or sys.stderr
        self.problems: dict[str, str] = {}
        self.gpus: list[Gpu] = []
        self.nvml_up = False
        self.last_content: tuple | None = None
        self.stop = False
        self.follower: Follower | None = None
        self.kmsg_fresh = False  # the next read is the first since the log was opened
        self.worker: threading.Thread | None = None
        self.worker_started = 0.0
        self.result: tuple | None = None
        self.lock = lock_state_dir(state_dir)  # before the history is read or written
        self.history, why = history.load(self.history_path, history.boot_id(boot_id_file))
        if why is not None:  # said once; a problem only while it cannot be rewritten
            print(f"gpunode watch: history: {why}", file=self.err, flush=True)
            self.save_history()
        self.open_kmsg()

    # ----------------------------------------------------------------- problems

    def problem(self, cause: str, line: str | None) -> None:
        """Set (``line``) or clear (None) a cause; one line on stderr per change."""
        if self.problems.get(cause) == line:
            return
        if line is None:
            del self.problems[cause]
            print(f"gpunode watch: {cause}: recovered", file=self.err, flush=True)
        else:
            self.problems[cause] = line
            print(f"gpunode watch: {cause}: {line}", file=self.err, flush=True)

    # ----------------------------------------------------------------- kernel log

    def open_kmsg(self) -> None:
        try:
            self.follower = Follower(self.kmsg_path)
            self.kmsg_fresh = True
        except OSError as exc:
            self.follower = None
            self.problem("kmsg", f"{self.kmsg_path}: cannot be read ({exc.strerror or exc})")
        else:
            self.problem("kmsg", None)

    def read_kmsg(self) -> bool:
        """The kernel log's new records into the history; True when an Xid was added.

        The first read after opening the log covers what it holds: when even its newest
        record is older than the history's last one, the log started again under the same
        boot id (a simulated node's restart; a ring buffer cleared by ``dmesg -C`` keeps
        its numbers, so a real node does not do that) and is read from its start."""
        if self.follower is None:
            self.open_kmsg()
            if self.follower is None:
                return False
        first, self.kmsg_fresh = self.kmsg_fresh, False
        hist = self.history
        found_first: list[tuple[int, object]] = []  # the first read's Xid records (bounded)
        top = None
        added = False
        try:
            for line in self.follower.records():
                found = xid.kmsg_record(line)
                if found is None:
                    continue
                seq, event = found
                if first:
                    top = seq if top is None else max(top, seq)
                    if event is not None and len(found_first) < FIRST_READ_XIDS:
                        found_first.append((seq, event))
                    continue
                added |= self.count(seq, event)
        except OSError as exc:
            self.follower.close()
            self.follower = None
            self.problem("kmsg", f"{self.kmsg_path}: cannot be read ({exc.strerror or exc})")
        if first and top is not None:
            if hist.kmsg_seq is not None and top < hist.kmsg_seq:
                print(f"gpunode watch: kmsg: the kernel log starts again (its newest record "
                      f"{top} is before the last one read, {hist.kmsg_seq}): read from its "
                      "start", file=self.err, flush=True)  # fmt: skip
                hist.kmsg_seq = None
            for seq, event in found_first:
                added |= self.count(seq, event)
            hist.kmsg_seq = max(top, hist.kmsg_seq or 0)
        if added or first:
            self.save_history()
        return added

    def count(self, seq: int, event) -> bool:
        """One kernel record: counted once per boot (the history's last sequence number)."""
        hist = self.history
        if hist.kmsg_seq is not None and seq <= hist.kmsg_seq:
            return False  # read before (this boot): counted then
        hist.kmsg_seq = seq
        if event is None:
            return False
        key = state.bus_key(event, self.gpus)
        index = next((i for i, g in enumerate(self.gpus) if state.key_of(g) == key), None)
        seen = state.labels_of(index, self.gpus[index]) if index is not None else None
        hist.add(key, event.xid, time.time(), seen)
        return True

    def save_history(self) -> None:
        try:
            make_dirs(self.state_dir)
            history.save(self.history_path, self.history)
        except OSError as exc:
            self.problem(
                "history", f"{self.history_path}: cannot be written ({exc.strerror or exc})"
            )
        else:
            self.problem("history", None)

    # ----------------------------------------------------------------- NVML

    def start_nvml(self) -> None:
        def work() -> None:
            gpus = self.read_gpus()
            try:  # the fabric's facts beside NVML's (an NVSwitch node's node.fabric_manager)
                fab, fab_why = self.read_fabric(), None
            except Exception as exc:  # never the end of the watch: said, as cause fabric
                fab, fab_why = (None, None), f"the fabric manager's facts: {type(exc).__name__}: {exc}"
            self.result = (*gpus, fab, fab_why)

        self.result = None
        self.worker = threading.Thread(target=work, name="gpunode-watch-nvml", daemon=True)
        self.worker_started = time.monotonic()
        self.worker.start()

    def take_nvml(self) -> None:
        """The finished cycle's GPUs applied (the worker has ended)."""
        gpus, up, why, fab, fab_why = self.result or (
            [], False, "NVML cycle gave no answer", (None, None), None)  # fmt: skip
        self.worker, self.result = None, None
        self.gpus, self.nvml_up, self.fabric = gpus, up, fab
        self.problem("fabric", fab_why)
        self.problem("nvml", None if up else why or "NVML does not answer")
        changed = False
        for i, g in enumerate(gpus):
            if g.uuid and g.pci_bus_id:
                changed |= self.history.adopt(g.uuid, g.pci_bus_id, state.labels_of(i, g))
        if changed:
            self.save_history()

    def nvml_hung(self) -> None:
        self.nvml_up = False
        waited = time.monotonic() - self.worker_started
        self.problem("nvml", f"NVML has not answered for {self.nvml_timeout:.0f} s (hung)"
                     if waited < 2 * self.nvml_timeout else "NVML still hangs")  # fmt: skip

    # ----------------------------------------------------------------- output

    def textfile_problem(self) -> str | None:
        directory = os.path.dirname(os.path.abspath(self.textfile))
        if not self.textfile.endswith(".prom"):
            return f"{self.textfile}: node_exporter reads only *.prom files"
        if os.path.islink(directory):
            return f"{directory} is a symlink: not written"
        if not os.path.isdir(directory):
            return f"{directory} does not exist"
        if not os.access(directory, os.W_OK | os.X_OK):
            return f"{directory} is not writable"
        return None

    def write(self, heartbeat: bool) -> state.Snapshot:
        """The snapshot written: the textfile when its content changed or ``heartbeat``, and
        the state node-problem-detector reads."""
        why = self.textfile_problem()
        self.problem("textfile", why)
        snap = state.snapshot(self.node, self.interval, time.time(), self.gpus, self.nvml_up,
                              self.history, self.problems, self.fabric)  # fmt: skip
        content = snap.content()
        if not heartbeat and content == self.last_content:
            return snap
        if why is None:
            try:
                write_atomic(self.textfile, metrics.render(snap).encode(), 0o644,
                             skip_if_same=False, durable=False)  # fmt: skip
            except OSError as exc:
                self.problem(
                    "textfile", f"{self.textfile}: cannot be written ({exc.strerror or exc})"
                )
                snap = state.snapshot(self.node, self.interval, snap.heartbeat, self.gpus,
                                      self.nvml_up, self.history, self.problems,
                                      self.fabric)  # fmt: skip
        self.last_content = snap.content()
        try:
            make_dirs(self.state_dir)
            doc = json.dumps(state.state_document(snap)).encode()
            write_atomic(os.path.join(self.state_dir, STATE), doc, 0o644, skip_if_same=False,
                         durable=False)  # fmt: skip
        except OSError as exc:
            self.problem("history", f"{self.state_dir}: cannot be written ({exc.strerror or exc})")
        return snap

    # ----------------------------------------------------------------- the two modes

    def once(self) -> state.Snapshot:
        """One cycle: NVML (within its timeout), the kernel log's records available now, the
        files written."""
        self.start_nvml()
        self.worker.join(self.nvml_timeout)
        if self.worker.is_alive():
            self.nvml_hung()
        else:
            self.take_nvml()
        self.read_kmsg()
        return self.write(heartbeat=True)

    def run(self) -> int:
        """The loop, until SIGTERM or SIGINT (exit 0)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._stop)
        next_cycle = time.monotonic()
        while not self.stop:
            now = time.monotonic()
            if self.worker is not None and not self.worker.is_alive():
                self.take_nvml()
                self.write(heartbeat=True)
            if now >= next_cycle:
                next_cycle = now + self.interval
                if self.worker is None:
                    self.start_nvml()
                else:  # the last cycle's NVML still hangs: the heartbeat says so
                    self.nvml_hung()
                    self.write(heartbeat=True)
            elif (self.worker is not None and self.nvml_up
                  and now - self.worker_started > self.nvml_timeout):  # fmt: skip
                self.nvml_hung()
                self.write(heartbeat=True)
            if self.read_kmsg():
                self.write(heartbeat=False)
            wait = min(TICK_S, max(0.0, next_cycle - time.monotonic()))
            if self.follower is not None:
                self.follower.wait(wait)
            else:
                time.sleep(wait)
        return 0

    def _stop(self, *_: object) -> None:
        self.stop = True

    def close(self) -> None:
        """The kernel log closed and the lock released."""
        if self.follower is not None:
            self.follower.close()
            self.follower = None
        if self.lock >= 0:
            os.close(self.lock)
            self.lock = -1


def lock_state_dir(state_dir: str) -> int:
    """The running watch's lock (an fd holding flock on <state-dir>/watch.lock); WatchError
    when another watch holds it or the directory is unusable."""
    import fcntl

    path = os.path.join(state_dir, LOCK)
    try:
        make_dirs(state_dir)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise WatchError(
            f"--state-dir {state_dir}: cannot lock {path} ({exc.strerror or exc})"
        ) from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise WatchError(
            f"another gpunode watch runs with --state-dir {state_dir} ({path} is locked)"
        ) from None
    return fd


def check(state_dir: str, max_age: float | None, now: float | None = None) -> tuple[int, str]:
    """node-problem-detector's check: (exit code 0/1/2, one line) from the watch's state."""
    path = os.path.join(state_dir, STATE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            doc = json.loads(fh.read(65536))
    except (OSError, ValueError):
        doc = None
    return state.npd_verdict(doc, time.time() if now is None else now, max_age)
