"""gpunode-runtime-resident: the resident, root-only process that serves GPU creates (and
the hooks' runs) to the sh first stages, so that a GPU container's start pays no Python
start-up.

Why (issue 28): a fresh interpreter and the start path's imports cost a GPU create ~15 ms
of CPU before gpunode's first line of work. This process has paid them once; per request
it forks (~1 ms) and the worker does what the Python program would do in its own process
— the same functions, in the same order (gpunode.launch.shim.create with the
``Conversation`` transport, or the hook's ``main``).

The low-level runtime is still started by the first stage, a child of containerd's shim
(or Docker's): runc's create must inherit the caller's stdio, and the container's init
must be reparented to the caller's subreaper, not to this service. The conversation, its
names and words are gpunode.launch.protocol's (its docstring says it step by step).

Trust. Only root talks to it: DIR is a directory of root's, mode 0700; a stage uses it
only while it is its own user's and the pid file names a live process with the start
time written beside it. A worker serves a caller only once it has proved it (``Caller``):
the process with the request's pid has the request's start time (so it is not a process
that got the pid of a stage that is gone), holds the conversation's two FIFOs as its own
fds ``FD_ANSWERS`` and ``FD_STATUS`` (so it is the stage that made them, not a process
that happens to have its pid: the FIFOs were opened by this worker, by path with
O_NOFOLLOW, and compared by device and inode), runs as this service's user (real,
effective, saved and filesystem uid) and, for a create, in this service's mount
namespace. The proof is made before the caller's argv, environment and working directory
are read and again after, so what was read is the proven process's. A request that is not
proved is answered ``python`` (the stage's Python program serves it: nothing was
changed). What a pod controls (config.json, the image) is read by the worker alone, with
the Python program's own code; each worker is a fresh fork of a parent that has only
imported modules, and a worker writes nothing back to it.

Hooks: the hooks' first stages (gpunode-hook, nvidia-cdi-hook) ask as kind ``hook`` or
``nvhook`` with their pid as the host sees it (runc runs a createContainer hook in the
container's PID namespace, before pivot_root, where /proc is still the host's). The
worker opens the caller's saved stdio (``FD_STDIO``) and its mount namespace through
/proc, proves the caller again, enters the namespace and runs the hook's own ``main``; it
answers ``exit <status>``, or ``python`` when it could not start (nothing touched yet).

No caller waits for ever: the stage's watchdog bounds the wait for the first answer (a
stalled service, a worker that hangs before answering); a worker that dies gets its
caller end-of-file (the stage says so in one line; this process's log says how the
worker ended). Restarts and upgrades: a request is answered ``python`` when gpunode's
files changed since the service started (the service then exits and systemd starts the
new code), and on SIGTERM the pending requests are answered ``python`` before the service
exits; workers in flight finish (the unit's KillMode=process).
"""

import contextlib
import os
import signal
import stat
import struct
import sys

from . import protocol
from .protocol import DIR, PID_FILE
from .transport import write_line

PROG = "gpunode-runtime-resident"
# The modules a GPU create uses, imported once here so that no worker imports them.
WARM = (
    "gpunode.launch.shim",
    "gpunode.launch.transport",
    "gpunode.runtime.bundle",
    "gpunode.runtime.config",
    "gpunode.runtime.prepared",
    "gpunode.runtime.specinputs",
    "gpunode.runtime.oci",
    "gpunode.runtime.plan",
    "gpunode.util.fastjson",
    "gpunode.hook.args",
    "gpunode.hook.configure",
    "gpunode.hook.procdriver",
    "gpunode.hook.errors",
    "gpunode.hook.timing",
    "gpunode.hook.main",
    "gpunode.hook.nvcli",
    "gpunode.hook.linux",
    "tomllib",
    "json",
)
# inotify(7)
IN_CLOSE_WRITE = 0x8
IN_MOVED_TO = 0x80
IN_Q_OVERFLOW = 0x4000
EVENT = struct.Struct("iIII")


class NotServed(Exception):
    """A request this service does not serve (answered ``python``: the stage's Python
    program serves it); nothing has been changed yet."""


def _read_proc(pid, name):
    with open(f"/proc/{pid}/{name}", "rb") as fh:
        return fh.read()


def start_time(pid="self"):
    """Field 22 of /proc/<pid>/stat: when the process started (clock ticks since boot);
    with its pid, a process's identity for as long as the machine runs."""
    data = _read_proc(pid, "stat")
    return int(data[data.rindex(b")") + 2 :].split()[19])


class Caller:
    """The stage that asked: proved before anything of it is believed."""

    def __init__(self, directory, pid, start):
        self.pid = pid
        self.start = start
        self.base = os.path.join(directory, protocol.conversation(pid, start))
        self.fifos = None

    def open(self):
        """The conversation's FIFOs, opened by path without following a link (they are
        the stage's only while it holds them: ``prove``); a Conversation over them, or
        None when they are not there (the caller gave up)."""
        from .transport import Conversation

        try:
            answers = os.open(self.base + protocol.ANSWERS_SUFFIX,
                              os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)  # fmt: skip
            status = os.open(self.base + protocol.STATUS_SUFFIX,
                             os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)  # fmt: skip
        except OSError:
            return None
        ids = []
        for fd in (answers, status):
            os.set_blocking(fd, True)
            st = os.fstat(fd)
            if not stat.S_ISFIFO(st.st_mode):
                return None
            ids.append((st.st_dev, st.st_ino))
        self.fifos = tuple(ids)
        return Conversation(answers, status)

    def prove(self, same_mounts=True):
        """NotServed unless the process with this pid is the stage that asked (module
        docstring: start time, the FIFOs as its own fds, user, mount namespace)."""
        pid = self.pid
        try:
            if start_time(pid) != self.start:
                raise NotServed(f"caller {pid}: another process has its pid now")
            for fd, ident in zip((protocol.FD_ANSWERS, protocol.FD_STATUS), self.fifos,
                                 strict=True):  # fmt: skip
                st = os.stat(f"/proc/{pid}/fd/{fd}")
                if (st.st_dev, st.st_ino) != ident:
                    raise NotServed(f"caller {pid} does not hold the conversation's FIFOs")
            uid = os.geteuid()
            for line in _read_proc(pid, "status").splitlines():
                if line.startswith(b"Uid:"):
                    uids = {int(x) for x in line.split()[1:]}
                    if uids != {uid}:
                        raise NotServed(f"caller {pid} runs as uids {sorted(uids)}, not {uid}")
                    break
            else:
                raise NotServed(f"caller {pid}: no Uid line in its status")
            if same_mounts and (os.stat(f"/proc/{pid}/ns/mnt").st_ino
                                != os.stat("/proc/self/ns/mnt").st_ino):  # fmt: skip
                raise NotServed(f"caller {pid} is in another mount namespace")
        except (OSError, ValueError, IndexError) as exc:
            raise NotServed(f"caller {pid}: {exc}") from None

    def argv(self, argc):
        """The caller's last ``argc`` arguments (its own, after the shell and the script)."""
        parts = _read_proc(self.pid, "cmdline").split(b"\0")
        if parts and parts[-1] == b"":
            parts.pop()
        if argc < 1 or argc > len(parts) - 1:
            raise NotServed(f"caller {self.pid} has no {argc} arguments")
        return [os.fsdecode(a) for a in parts[len(parts) - argc :]]

    def environ(self):
        env = {}
        for item in _read_proc(self.pid, "environ").split(b"\0"):
            key, eq, value = item.partition(b"=")
            if eq and key:
                env[os.fsdecode(key)] = os.fsdecode(value)
        return env


def _worker(directory, pid, start):
    """What every worker does first: its signals and alarm, and the caller's FIFOs (none:
    the caller gave up, and the worker exits)."""
    from ..hook import timing

    timing.SERVED_BY = "/resident"
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.alarm(protocol.TIMEOUT)  # the first answer; Conversation.spawn extends it
    caller = Caller(directory, pid, start)
    talk = caller.open()
    if talk is None:
        os._exit(2)  # nobody to answer
    return caller, talk


def serve_create(directory, pid, start, argc):
    """A worker's whole work for a create; never returns."""
    caller, talk = _worker(directory, pid, start)
    try:
        caller.prove()
        argv = ["gpunode-container-runtime", *caller.argv(argc)]
        env = caller.environ()
        os.chdir(f"/proc/{pid}/cwd")
        caller.prove()  # what was read is the proven process's
        from . import shim

        is_create, bundle, log_file, log_format = shim.parse_args(argv)
        if not is_create:
            raise NotServed("not a create")
        if shim.create_layout(argv)[2] is None:
            raise NotServed("no --pid-file")  # the shim adds its own; the Python runtime does
        os.environ.clear()
        os.environ.update(env)
        shim.create(argv, bundle, log_file, log_format, via=talk)
    except NotServed:
        if not talk.changed:
            talk.python()
        talk.end(f"{protocol.FAIL} gpunode's resident service could not finish this create")
    except Exception as exc:  # one line, as the Python runtime's own failures
        if not talk.changed:
            talk.python()
        talk.end(f"{protocol.FAIL} {type(exc).__name__}: {exc}")
    os._exit(1)


def serve_hook(directory, kind, pid, start, argc):
    """A worker's whole work for a hook's first stage (gpunode-hook, nvidia-cdi-hook): the
    hook run as its Python launcher runs it, with the caller's arguments, environment and
    stdio (runc's pipes: the OCI state in, the error line out), in the caller's mount
    namespace (a createContainer hook's: the container's, before pivot_root); its exit
    status answered. Never returns."""
    caller, talk = _worker(directory, pid, start)
    try:
        caller.prove(same_mounts=False)
        argv = caller.argv(argc + 1)  # the hook's own name too: nvcli reads it
        env = caller.environ()
        # the caller's stdio, opened before its namespace is entered; a pipe opens as a
        # FIFO would (blocking while its other end has nobody: runc has closed the
        # state's already), so without blocking; a socket cannot be opened: not served
        stdio = []
        for n, fd in enumerate(protocol.FD_STDIO):
            mode = os.O_RDONLY if n == 0 else os.O_WRONLY
            stdio.append(os.open(f"/proc/{pid}/fd/{fd}", mode | os.O_NONBLOCK))
            os.set_blocking(stdio[-1], True)
        ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY)
        caller.prove(same_mounts=False)  # what was opened is the proven process's
        from ..hook.linux import CLONE_NEWNS, setns
    except Exception:
        talk.python()
    talk.changed = True
    try:
        setns(ns, CLONE_NEWNS)  # also moves root and cwd to the namespace's root
        for n, fd in enumerate(stdio):
            os.dup2(fd, n)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = argv
        if kind == protocol.NVHOOK:
            from ..hook.nvcli import main as hook_main

            status = hook_main(argv)
        else:
            from ..hook.main import main as hook_main

            status = hook_main(argv[1:])
        sys.stdout.flush()
        sys.stderr.flush()
        talk.exit(int(status or 0))
    except Exception as exc:
        talk.end(f"{protocol.FAIL} {type(exc).__name__}: {exc}")
    os._exit(1)


def code_stamp():
    """What changes when gpunode is reinstalled: the package's files' identities."""
    from . import shim

    package = os.path.join(os.path.dirname(os.path.dirname(__file__)), "__init__.py")
    out = []
    for path in (package, shim.__file__, __file__, protocol.__file__):
        st = os.stat(path)
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return out


def prepare(directory):
    """DIR as a directory of ours, mode 0700 (whatever it was made with), not a symlink;
    conversations of callers that are gone removed."""
    parent = os.path.dirname(directory)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SystemExit(f"{PROG}: error: {directory} is not a directory of uid {os.geteuid()}")
    os.chmod(directory, 0o700)
    for name in os.listdir(directory):
        ident = protocol.parse_conversation(name)
        if ident is None:
            continue
        alive = False
        with contextlib.suppress(OSError, ValueError, IndexError):
            alive = start_time(ident[0]) == ident[1]
        if not alive:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))


def watch(directory):
    """An inotify fd reporting files closed after writing, or moved in, in ``directory``."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC | os.O_NONBLOCK)
    if fd < 0 or libc.inotify_add_watch(fd, os.fsencode(directory),
                                        IN_CLOSE_WRITE | IN_MOVED_TO) < 0:  # fmt: skip
        err = ctypes.get_errno()
        raise SystemExit(f"{PROG}: error: cannot watch {directory}: {os.strerror(err)}")
    return fd


def requests_in(data):
    """Whether the inotify events in ``data`` may name a request (or were too many to
    name: the directory is read again)."""
    offset = 0
    while offset + EVENT.size <= len(data):
        _wd, mask, _cookie, length = EVENT.unpack_from(data, offset)
        name = data[offset + EVENT.size : offset + EVENT.size + length]
        offset += EVENT.size + length
        if mask & IN_Q_OVERFLOW or name.startswith(protocol.REQUEST_PREFIX.encode()):
            return True
    return False


class Service:
    def __init__(self, directory):
        self.directory = directory
        self.children = {}  # worker pid -> (caller pid, start)
        self.stopping = False
        self.stamp = code_stamp()

    def say(self, line):
        sys.stderr.write(f"{PROG}: {line}\n")
        sys.stderr.flush()

    def answer(self, caller, line):
        """A line to a caller whose worker could not (non-blocking: never waits)."""
        base = os.path.join(self.directory, protocol.conversation(*caller))
        try:
            fd = os.open(base + protocol.ANSWERS_SUFFIX,
                         os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)  # fmt: skip
        except OSError:
            return
        try:
            write_line(fd, line)
        except OSError:  # a full FIFO (non-blocking) or a caller gone
            pass
        finally:
            os.close(fd)

    def reap(self):
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children.clear()
                return
            if pid == 0:
                return
            caller = self.children.pop(pid, None)
            if caller is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            if code not in (0, 2):  # 2: the caller had given up
                # its caller reads end-of-file and says so; why is said here
                self.say(f"the worker for caller {caller[0]} ended ({code})")
            base = os.path.join(self.directory, protocol.conversation(*caller))
            for suffix in (protocol.ANSWERS_SUFFIX, protocol.STATUS_SUFFIX):
                with contextlib.suppress(OSError):  # the caller holds them while it needs them
                    os.unlink(base + suffix)

    def pending(self):
        """The requests in the directory, each taken (its file removed) once: (kind, pid,
        start, argc); a file named as a request but not one is removed and said."""
        out = []
        for name in os.listdir(self.directory):
            if not name.startswith(protocol.REQUEST_PREFIX):
                continue
            try:
                os.unlink(os.path.join(self.directory, name))
            except FileNotFoundError:
                continue
            request = protocol.parse_request(name)
            if request is None:
                self.say(f"ignored {name[:80]!r}: not a request")
            else:
                out.append(request)
        return out

    def run(self, fd):
        import select

        ready = [fd]  # requests made before the watch are in the directory already
        while not self.stopping:
            if ready:
                with contextlib.suppress(BlockingIOError):
                    while os.read(fd, 65536):
                        pass
                for kind, pid, start, argc in self.pending():
                    if code_stamp() != self.stamp:
                        self.answer((pid, start), protocol.PYTHON)
                        self.stopping = True
                        continue
                    self.fork(kind, pid, start, argc)
            try:
                ready, _, _ = select.select([fd], [], [], 1.0)
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                ready = []
            if ready:
                try:
                    ready = ready if requests_in(os.read(fd, 65536)) else []
                except BlockingIOError:
                    ready = []
            self.reap()
        for _, pid, start, _ in self.pending():  # the rest goes to the Python programs
            self.answer((pid, start), protocol.PYTHON)

    def fork(self, kind, pid, start, argc):
        child = os.fork()
        if child == 0:
            try:
                if kind == protocol.CREATE:
                    serve_create(self.directory, pid, start, argc)
                serve_hook(self.directory, kind, pid, start, argc)
            finally:
                os._exit(1)
        self.children[child] = (pid, start)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    directory = DIR
    if argv[:1] == ["--dir"] and len(argv) == 2:
        directory = argv[1]
    elif argv:
        sys.stderr.write(f"usage: {PROG} [--dir DIR] (got {' '.join(argv)!r})\n")
        return 2
    directory = os.path.abspath(directory)
    import importlib

    for name in WARM:
        importlib.import_module(name)
    os.umask(0o022)
    prepare(directory)
    fd = watch(directory)
    # what the imports made is never collected: a worker's collections would touch (and
    # so copy) every page of it
    import gc

    gc.freeze()
    service = Service(directory)

    def stop(signum, frame):
        service.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pid_path = os.path.join(directory, PID_FILE)
    me = f"{os.getpid()} {start_time()}"
    tmp = f"{pid_path}.{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(me + "\n")
    os.replace(tmp, pid_path)
    try:
        service.run(fd)
    finally:
        try:
            with open(pid_path) as fh:
                if fh.read().strip() == me:
                    os.unlink(pid_path)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
