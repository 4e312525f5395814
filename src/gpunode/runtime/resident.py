"""gpunode-runtime-resident: the resident, root-only process that serves GPU creates to
the runtime's sh first stage, so that a GPU container's start pays no Python start-up.

Why (issue 28): a fresh interpreter and the start path's imports cost a GPU create ~15 ms
of CPU before gpunode's first line of work, a third of runc's own create through
containerd. This process has paid them once; per create it forks (~1 ms) and the child
does what gpunode.runtime.shim does in its own process — the same functions, in the same
order (shim.create with a ``via`` that talks to the first stage instead of spawning).

The low-level runtime is still started by the first stage, a child of containerd's shim
(or Docker's): runc's create must inherit the caller's stdio, and the container's init
must be reparented to the caller's subreaper, not to this service. So a GPU create is a
conversation (gpunode.runtime.firststage renders the sh side, dispatcher.sh):

1. the first stage makes two FIFOs in DIR, ``<its pid>.r`` (answers) and ``<its pid>.w``
   (its runtime's status), holds both open and writes ``<pid> <argc>`` into ``requests``;
2. this process forks; the child takes the caller's argv (the last ``argc`` entries of
   /proc/<pid>/cmdline), environment and working directory, edits config.json as the shim
   does and answers ``run <runtime>`` (the first stage runs it with its own arguments),
   ``exec <runtime>`` (no GPU request: the first stage execs it), ``fail <line>`` or
   ``python`` (not served here: the first stage execs the Python runtime, which does the
   whole create; sent only before anything was changed);
3. while the runtime's create runs, the child writes the rootfs files and makes the /proc
   sources; it reads the runtime's exit status from ``.w``, attaches the /proc mounts and
   answers ``exit <status>`` or ``fail <line>``.

Trust: only root talks to it. DIR is a directory of root's, mode 0700, and ``requests``
a FIFO of mode 0600 in it; the first stage uses them only while DIR is its own user's
(``-O``) and the pid in DIR/pid is alive. A child serves a caller only while that process
runs as this service's user (real, effective, saved and filesystem uid) in this service's
mount namespace, and it takes nothing from the request line but two numbers. What a pod
controls (config.json, the image) is read by the child alone, with the shim's own code;
the service keeps nothing across creates: each child is a fresh fork of a parent that has
only imported modules, and a child writes nothing back to it.

Hooks: the hooks' first stages (gpunode-hook, nvidia-cdi-hook; firststage.hook_stage)
ask ``hook <pid> <argc>`` or ``nvhook <pid> <argc>`` (the pid as the host sees it: runc
runs a createContainer hook in the container's PID namespace, before pivot_root, where
/proc is still the host's). The worker (serve_hook) checks the caller's user, opens its
stdio (kept by the stage as fds 4-6) and its mount namespace through /proc, enters that
namespace and runs the hook's own ``main``; it answers ``exit <status>``, or ``python``
when it could not start (nothing touched yet).

Restarts and upgrades: a request is answered ``python`` when gpunode's files changed since
the service started (the service then exits and systemd starts the new code), and on
SIGTERM the pending requests are answered ``python`` before the service exits; children
in flight finish (the unit's KillMode=process). No caller waits for ever: a worker that
dies gets its caller one line from this process (reap); a service that does not take the
request (stopped, hung) fails it after the first stage's timeout, with one line.
"""

import contextlib
import os
import signal
import sys

DIR = "/run/gpunode/resident"
REQUESTS = "requests"
PID_FILE = "pid"
PROG = "gpunode-runtime-resident"
# A request is "<pid> <argc>\n": more than this without a newline is not one (dropped).
MAX_REQUEST = 40
# The hook first stages' request kinds (gpunode.runtime.firststage.HOOK_STAGES)
HOOKS_B = (b"hook", b"nvhook")
# A child never outlives a caller that stopped talking by more than this (seconds).
CHILD_ALARM = 600
# The modules a GPU create uses, imported once here so that no child imports them.
WARM = (
    "gpunode.runtime.shim",
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


class NotServed(Exception):
    """A request this service does not serve (answered ``python``: the Python runtime
    serves it); nothing has been changed yet."""


def _reply(fd, line):
    data = (line.replace("\n", " ") + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _read_proc(pid, name):
    with open(f"/proc/{pid}/{name}", "rb") as fh:
        return fh.read()


def check_caller(pid, same_mounts=True):
    """The caller runs as this process's user (and, with ``same_mounts``, in this
    process's mount namespace); else NotServed naming why."""
    uid = os.geteuid()
    for line in _read_proc(pid, "status").splitlines():
        if line.startswith(b"Uid:"):
            uids = {int(x) for x in line.split()[1:]}
            if uids != {uid}:
                raise NotServed(f"caller {pid} runs as uids {sorted(uids)}, not {uid}")
            break
    else:
        raise NotServed(f"caller {pid}: no Uid line in its status")
    if same_mounts and os.stat(f"/proc/{pid}/ns/mnt").st_ino != os.stat("/proc/self/ns/mnt").st_ino:
        raise NotServed(f"caller {pid} is in another mount namespace")


def caller_argv(pid, argc):
    """The caller's last ``argc`` arguments (its own, after the shell and the script)."""
    parts = _read_proc(pid, "cmdline").split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    if argc < 1 or argc > len(parts) - 1:
        raise NotServed(f"caller {pid} has no {argc} arguments")
    return [os.fsdecode(a) for a in parts[len(parts) - argc :]]


def caller_environ(pid):
    env = {}
    for item in _read_proc(pid, "environ").split(b"\0"):
        key, eq, value = item.partition(b"=")
        if eq and key:
            env[os.fsdecode(key)] = os.fsdecode(value)
    return env


class Conversation:
    """shim.Local's counterpart in a child: the first stage starts the runtime."""

    served_by = ", served by the resident service"

    def __init__(self, answers, status):
        self.answers = answers  # fd: our lines to the first stage
        self.status = status  # fd: the runtime's exit status from it
        self.changed = False  # config.json may have been written: no ``python`` answer now

    def exec_runtime(self, argv, names, log_file=None, log_format="text"):
        from .shim import _find_runtimes

        problems = []
        for runtime in _find_runtimes(names, problems):
            self._end(f"exec {runtime}")
        tried = f" ({'; '.join(problems)})" if problems else ""
        self.fail(
            f"no low-level OCI runtime could be run from runtimes {', '.join(names)}{tried}",
            log_file,
            log_format,
        )

    def spawn(self, run, names, problems):
        from .shim import _find_runtimes

        self.changed = True
        for runtime in _find_runtimes(names, problems):
            _reply(self.answers, f"run {runtime}")
            return runtime, "the first stage"
        return None, None

    def wait(self, child):
        data = b""
        while not data.endswith(b"\n"):
            chunk = os.read(self.status, 64)
            if not chunk:  # the first stage is gone: nobody to answer
                os._exit(1)
            data += chunk
        try:
            return int(data)
        except ValueError:
            return 1

    def fail(self, message, log_file, log_format, cfg=None):
        from .shim import _log, _log_to_runc_file

        if log_file:
            _log_to_runc_file(log_file, log_format, "error", message)
        if cfg is not None:
            _log(cfg, "error", message)
        self._end(f"fail {message}")

    def exit(self, status):
        self._end(f"exit {status}")

    def _end(self, line):
        _reply(self.answers, line)
        os._exit(0)


def _worker(directory, caller):
    """What every worker does first: its signals and alarm, and the conversation with
    ``caller`` over the two FIFOs its first stage made and holds open (none: the caller
    gave up, and the worker exits)."""
    from ..hook import timing

    timing.SERVED_BY = "/resident"
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.alarm(CHILD_ALARM)
    base = os.path.join(directory, str(caller))
    try:
        answers = os.open(base + ".r", os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        status = os.open(base + ".w", os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        os._exit(2)  # nobody to answer
    for fd in (answers, status):
        os.set_blocking(fd, True)
    return Conversation(answers, status)


def serve_create(directory, caller, argc):
    """A child's whole work for one request; never returns."""
    talk = _worker(directory, caller)
    try:
        check_caller(caller)
        argv = ["gpunode-container-runtime", *caller_argv(caller, argc)]
        env = caller_environ(caller)
        os.chdir(f"/proc/{caller}/cwd")
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
            talk._end("python")
        talk._end("fail gpunode's resident service could not finish this create")
    except Exception as exc:  # one line, as the shim's own failures
        if not talk.changed:
            talk._end("python")
        talk._end(f"fail {type(exc).__name__}: {exc}")
    os._exit(1)


def serve_hook(directory, kind, caller, argc):
    """A child's whole work for a hook's first stage (gpunode-hook, nvidia-cdi-hook): the
    hook run as its Python launcher runs it, with the caller's arguments, environment and
    stdio (runc's pipes: the OCI state in, the error line out), in the caller's mount
    namespace (a createContainer hook's: the container's, before pivot_root); its exit
    status answered. Never returns."""
    talk = _worker(directory, caller)
    try:
        check_caller(caller, same_mounts=False)
        argv = caller_argv(caller, argc + 1)  # the hook's own name too: nvcli reads it
        env = caller_environ(caller)
        # the caller's stdio, opened before its namespace is entered; a pipe opens as a
        # FIFO would (blocking while its other end has nobody: runc has closed the
        # state's already), so without blocking; a socket cannot be opened: not served
        stdio = []
        for n in (0, 1, 2):  # the stage keeps them as fds 4-6 (hookstage.sh)
            mode = os.O_RDONLY if n == 0 else os.O_WRONLY
            stdio.append(os.open(f"/proc/{caller}/fd/{n + 4}", mode | os.O_NONBLOCK))
            os.set_blocking(stdio[-1], True)
        ns = os.open(f"/proc/{caller}/ns/mnt", os.O_RDONLY)
        from ..hook.linux import CLONE_NEWNS, setns
    except Exception:
        talk._end("python")
    talk.changed = True
    try:
        setns(ns, CLONE_NEWNS)  # also moves root and cwd to the namespace's root
        for n, fd in enumerate(stdio):
            os.dup2(fd, n)
        os.environ.clear()
        os.environ.update(env)
        sys.argv = argv
        if kind == "nvhook":
            from ..hook.nvcli import main as hook_main

            status = hook_main(argv)
        else:
            from ..hook.main import main as hook_main

            status = hook_main(argv[1:])
        sys.stdout.flush()
        sys.stderr.flush()
        talk._end(f"exit {int(status or 0)}")
    except Exception as exc:
        talk._end(f"fail {type(exc).__name__}: {exc}")
    os._exit(1)


def code_stamp():
    """What changes when gpunode is reinstalled: the package's files' identities."""
    from . import shim

    package = os.path.join(os.path.dirname(os.path.dirname(__file__)), "__init__.py")
    out = []
    for path in (package, shim.__file__, __file__):
        st = os.stat(path)
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return out


def prepare(directory):
    """DIR as a directory of ours, mode 0700, not a symlink, with the requests FIFO (an
    existing one kept: requests written while no service ran are still in it)."""
    parent = os.path.dirname(directory)
    os.makedirs(parent, mode=0o755, exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkdir(directory, 0o700)
    st = os.lstat(directory)
    import stat

    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise SystemExit(f"{PROG}: error: {directory} is not a directory of uid {os.geteuid()}")
    os.chmod(directory, 0o700)
    for name in os.listdir(directory):  # conversations of callers that are gone
        pid, dot, kind = name.partition(".")
        if dot and kind in ("r", "w") and pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, name))
    path = os.path.join(directory, REQUESTS)
    try:
        st = os.lstat(path)
        if not stat.S_ISFIFO(st.st_mode) or st.st_uid != os.geteuid():
            os.unlink(path)
            raise FileNotFoundError(path)
        os.chmod(path, 0o600)
    except FileNotFoundError:
        os.mkfifo(path, 0o600)
    return os.open(path, os.O_RDWR | os.O_NOFOLLOW)


class Service:
    def __init__(self, directory):
        self.directory = directory
        self.children = {}  # child pid -> caller pid
        self.stopping = False
        self.buffer = b""

    def answer(self, caller, line):
        """A line to a caller whose child could not (non-blocking: never waits)."""
        try:
            fd = os.open(
                os.path.join(self.directory, f"{caller}.r"),
                os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW,
            )
        except OSError:
            return
        try:
            os.write(fd, (line + "\n").encode())
        except OSError:
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
            if code != 0:
                self.answer(caller, f"fail gpunode's resident service: its worker ended ({code})")
            for name in (".r", ".w"):  # the caller holds them open as long as it needs them
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.directory, f"{caller}{name}"))

    def requests(self, data):
        """The well-formed requests in ``data`` (buffered across reads); anything else is
        dropped whole, at no cost beyond its bytes."""
        self.buffer += data
        out = []
        while b"\n" in self.buffer:
            line, _, self.buffer = self.buffer.partition(b"\n")
            parts = line.split()
            kind = parts.pop(0).decode() if len(parts) == 3 and parts[0] in HOOKS_B else "create"
            if len(parts) == 2 and all(p.isdigit() and len(p) < 11 for p in parts):
                out.append((kind, int(parts[0]), int(parts[1])))
        if len(self.buffer) > MAX_REQUEST:
            self.buffer = b""
        return out

    def run(self, fd):
        import select

        stamp = code_stamp()
        while not self.stopping:
            try:
                ready, _, _ = select.select([fd], [], [], 1.0)
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                ready = []
            self.reap()
            if not ready or self.stopping:
                continue
            for kind, caller, argc in self.requests(os.read(fd, 4096)):
                if code_stamp() != stamp:
                    self.answer(caller, "python")
                    self.stopping = True
                    continue
                self.fork(kind, caller, argc)
        # what is still in the FIFO goes to the Python runtime
        os.set_blocking(fd, False)
        try:
            while True:
                for _, caller, _ in self.requests(os.read(fd, 4096)):
                    self.answer(caller, "python")
        except BlockingIOError:
            pass

    def fork(self, kind, caller, argc):
        pid = os.fork()
        if pid == 0:
            try:
                if kind == "create":
                    serve_create(self.directory, caller, argc)
                serve_hook(self.directory, kind, caller, argc)
            finally:
                os._exit(1)
        self.children[pid] = caller


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
    fd = prepare(directory)
    # what the imports made is never collected: a child's collections would touch (and so
    # copy) every page of it
    import gc

    gc.freeze()
    service = Service(directory)

    def stop(signum, frame):
        service.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    pid_path = os.path.join(directory, PID_FILE)
    tmp = f"{pid_path}.{os.getpid()}"
    with open(tmp, "w") as fh:
        fh.write(f"{os.getpid()}\n")
    os.replace(tmp, pid_path)
    try:
        service.run(fd)
    finally:
        try:
            with open(pid_path) as fh:
                if fh.read().strip() == str(os.getpid()):
                    os.unlink(pid_path)
        except OSError:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
