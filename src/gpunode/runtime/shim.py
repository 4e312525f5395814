"""gpunode-container-runtime: a runc-compatible OCI runtime shim.

Every invocation is forwarded with execve to the low-level runtime (first found of
``runtimes`` in runtime.toml; default runc, then crun) with the same arguments and
environment. Only ``create`` is intercepted: the bundle's config.json is read and the GPU
request worked out. A container that asks for no GPU gets its spec untouched, byte for
byte, even when discovery is broken or the driver is gone, and the runtime is exec'd.

A GPU container is set up by the shim itself, with no hook process (the hook package's
functions, in-process):

1. the spec edited (devices, cgroup rules, mounts, env) and written back atomically; a
   request served before on the unchanged node gets its prepared edits
   (gpunode.runtime.prepared) without the request, discovery and edits modules;
2. the low-level runtime's ``create`` started as a child (same argv, env and stdio, plus a
   ``--pid-file`` of our own when the caller gave none); its exit status is passed on;
3. while it runs, the files written into the container root (symlinks, ld.so.conf.d,
   ld.so.cache) and the sources of the filtered /proc/driver/nvidia made (detached mounts;
   see create_gpu_container for why this overlap is safe);
4. after a successful create, those mounts attached over the container's
   /proc/driver/nvidia in its mount namespace (gpunode.hook.procdriver). If step 3 or 4
   fails the container is deleted (``delete --force``) and the create fails with one
   error line.

With ``log-level = "debug"`` each GPU create logs ``timing create <id> plan=<ms>
rootfs=<ms> sources=<ms> runtime=<ms> proc=<ms> total=<ms>``: step 1 (from the first
decision), the two parts of step 3 and step 2 (they overlap: rootfs and sources run
during runtime), step 4, and all of it.

This module imports only ``os``, ``sys`` and its package (gpunode.runtime, nothing but
constants) at load time: ``start``, ``state``, ``delete``
and the rest go straight to execve.

Its public surface for `gpunode runtime install-links`, which generates the POSIX sh first
stage from it (gpunode.runtime.firststage): ``VALUE_OPTS``, ``DEFAULT_RUNTIMES`` and
gpunode.runtime.REQUEST_MARKERS (imported here from the package).
"""

import os
import sys

from . import REQUEST_MARKERS

PROG = "gpunode-container-runtime"
DEFAULT_RUNTIMES = ("runc", "crun")
# Options (runc's global ones and create's) that take a value, without leading dashes:
# their values are never mistaken for the `create` subcommand. runc accepts -x and --x.
VALUE_OPTS = {
    "root",
    "log",
    "log-format",
    "criu",
    "rootless",
    "bundle",
    "b",
    "console-socket",
    "pid-file",
    "preserve-fds",
}


def _find_runtimes(names, problems):
    """Executable candidates for `names`, in order (an absolute path, or the first match
    on PATH); why an absolute entry is not one goes to `problems`."""
    path = os.environ.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    for name in names:
        if os.path.isabs(name):
            if os.path.isdir(name):
                problems.append(f"{name}: is a directory")
            elif not os.access(name, os.X_OK):
                problems.append(
                    f"{name}: {'not executable' if os.path.exists(name) else 'not found'}"
                )
            else:
                yield name
            continue
        for d in path.split(os.pathsep):
            cand = os.path.join(d, name)
            if os.access(cand, os.X_OK) and not os.path.isdir(cand):
                yield cand
                break


def _tokens(argv):
    """(index, option name or None, value) for each token of a runc argument vector: an
    option with its value (VALUE_OPTS take one, as `--x=v` or `--x v`), or a positional."""
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and arg not in ("-", "--"):
            name, eq, value = arg.lstrip("-").partition("=")
            if name in VALUE_OPTS and not eq:
                i += 1
                value = argv[i] if i < len(argv) else ""
            yield i, name, value
        else:
            yield i, None, arg
        i += 1


def parse_args(argv):
    """Return (is_create, bundle, log_file, log_format) from a runc argument vector."""
    is_create = False
    bundle = None
    log_file = None
    log_format = "text"
    command = None
    for _, name, value in _tokens(argv):
        if name in ("bundle", "b"):
            bundle = value  # the last one wins, as in runc
        elif name == "log":
            log_file = value
        elif name == "log-format":
            log_format = value
        elif name is None and command is None:
            # The first positional token is the subcommand; later ones (a container id that
            # happens to be "create") are not.
            command = value
            is_create = value == "create"
    return is_create, bundle, log_file, log_format


def _runtimes_from_config():
    try:
        from .config import load

        return load().runtimes
    except Exception:
        return list(DEFAULT_RUNTIMES)


def _exec_runtime(argv, names, log_file=None, log_format="text"):
    """execve the first of `names` that can be executed; one error line if none can."""
    failed = []
    for runtime in _find_runtimes(names, failed):
        try:
            os.execve(runtime, [runtime, *argv[1:]], os.environ)
        except OSError as exc:  # not an executable format, vanished, ...: try the next
            failed.append(f"{runtime}: {exc.strerror or exc}")
    tried = f" ({'; '.join(failed)})" if failed else ""
    _fail(
        f"no low-level OCI runtime could be run from runtimes {', '.join(names)}{tried}",
        log_file,
        log_format,
    )


def _fail(message, log_file, log_format, cfg=None):
    """One error line: stderr, runc's --log file and (with `cfg`) the runtime's log."""
    line = f"{PROG}: error: {message}"
    sys.stderr.write(line + "\n")
    if log_file:
        _log_to_runc_file(log_file, log_format, "error", message)
    if cfg is not None:
        _log(cfg, "error", message)
    sys.exit(1)


def _log_to_runc_file(log_file, log_format, level, message):
    """Write in runc's --log format: containerd reads errors from this file."""
    import json
    import time

    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    if log_format == "json":
        line = json.dumps({"level": level, "msg": message, "time": stamp})
    else:
        line = f'time="{stamp}" level={level} msg="{message}"'
    try:
        with open(log_file, "a") as fh:
            fh.write(line + "\n")
    except OSError:
        pass


def _log(cfg, level, message):
    if not cfg.log_file:
        return
    order = ("debug", "info", "warning", "error")
    if order.index(level) < order.index(cfg.log_level):
        return
    import time

    try:
        with open(cfg.log_file, "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {level} {message}\n")
    except OSError:
        pass


class GpuCreate:
    """What the create of a GPU container still has to do once its spec is written: the
    hook arguments its edits carry, parsed (``args``, gpunode.hook.args.Args) only when
    first used, which is after runc's create has started."""

    def __init__(
        self, summary: str, bundle: str, rootfs: str, hook_argv: list[str], overlap=True
    ) -> None:
        self.summary = summary
        self.bundle = bundle
        self.rootfs = rootfs
        self.hook_argv = hook_argv
        self.overlap = overlap  # the rootfs files may be written while runc's create runs
        self._args = None
        # issue 28's per-phase timings (gpunode.hook.timing): the process's CPU time at
        # main's start and the marks taken since
        self.cpu0 = 0.0
        self.marks = []

    @property
    def args(self):
        if self._args is None:
            from ..hook.args import parse_args

            self._args = parse_args(self.hook_argv)
        return self._args


def modify_bundle(bundle, cfg, log=lambda level, msg: None, raw=None):
    """Edit <bundle>/config.json for its GPU request. Returns a GpuCreate, or None when the
    container asks for no GPU (the file is then not touched). `raw`: the file's bytes when
    the caller has already read them. The spec gets no hook: the shim does its work.

    A request this node has served before, unchanged since, gets the edits prepared then
    (gpunode.runtime.prepared) without the request parser, discovery or edits modules."""
    from ..util import fastjson
    from . import oci, prepared, specinputs

    path = os.path.join(bundle, "config.json")
    if raw is None:
        with open(path, "rb") as fh:
            raw = fh.read()
    spec = fastjson.loads(raw)
    rootfs = specinputs.rootfs_of(spec, bundle)
    # the request inputs before NVIDIA's hook goes: Docker's --gpus hook is one of them
    inputs = specinputs.inputs(spec, cfg)
    key = prepared.key(spec, cfg, rootfs, inputs)
    kept = prepared.lookup(key, cfg.dev_root, cfg.driver_root)
    removed_hooks = oci.remove_nvidia_hooks(spec)
    if kept is not None:
        edits = kept["edits"]
        summary = f"{kept['summary']}, prepared"
        hook_argv = kept["hook_argv"]
    else:
        edits, hook_argv, summary = _plan(spec, cfg, rootfs, key, inputs)
        if edits is None:  # no GPU request
            if removed_hooks:
                # Docker's --gpus hook with no GPU request: drop the hook, nothing else.
                oci.write_atomic(path, spec)
            return None
    overlap = not _mounts_over_rootfs_files(spec, hook_argv)
    oci.apply_spec_edits(spec, edits)
    oci.write_atomic(path, spec)
    log("info", f"{bundle}: {summary}")
    return GpuCreate(summary, bundle, rootfs, hook_argv, overlap)


def _plan(spec, cfg, rootfs, key, inputs):
    """The full work of a GPU create (gpunode.runtime.plan) for the request ``inputs``
    (gpunode.runtime.specinputs): (spec edits without hooks, the hook's arguments,
    summary), kept for the next create of the same request when discovery came from an
    inventory cache still there (see gpunode.runtime.prepared); (None, None, None) for a
    spec without GPU request."""
    from . import oci, plan, prepared

    request = plan.request_from_inputs(inputs, cfg)
    if not request.is_gpu:
        return None, None, None
    p = plan.make(request, cfg, rootfs)
    (hook,) = p.edits.hooks
    p.edits.hooks = []
    hook_argv = list(hook.args[1:])
    edits = oci.spec_edits(p.edits)
    summary = (
        f"GPUs {[g.index for g in p.selected]} "
        f"({', '.join(g.uuid for g in p.selected) or 'none'}), "
        + (f"MIG devices {', '.join(m.mig.uuid for m in p.migs)}, " if p.migs else "")
        + f"capabilities {','.join(sorted(request.capabilities))}, "
        f"{len(p.edits.devices)} devices, {len(p.edits.mounts)} mounts"
    )
    if p.discovery.from_cache and prepared.key(spec, cfg, rootfs, inputs) == key:
        # from the inventory cache the key names (a fresh discovery, or a refresh since
        # the key was taken, is kept by the next create instead)
        prepared.store(key, prepared.entry(edits, hook_argv, summary, p.mig_watch))
    return (
        edits,
        hook_argv,
        f"{summary}, discovery {'cached' if p.discovery.from_cache else 'fresh'}",
    )


def _mounts_over_rootfs_files(spec, hook_argv):
    """Whether one of the spec's own mounts (the operator's) lands on a file the rootfs
    step writes: a ``--link`` path or one of /etc/ld.so.*. runc makes such a mount's
    target in the root, and replacing it by rename while runc runs would detach the mount
    in the container's namespace; such a container gets its rootfs files before runc
    starts, as the whole create used to."""
    links = {
        hook_argv[i + 1].partition("::")[2]
        for i in range(len(hook_argv) - 1)
        if hook_argv[i] == "--link"
    }
    for m in spec.get("mounts") or []:
        dest = os.path.normpath("/" + str(m.get("destination") or "").lstrip("/"))
        if dest in links or dest.startswith("/etc/ld.so"):
            return True
    return False


def create_layout(argv):
    """Where ``create`` is in a runc argument vector: (its index, the container id, the
    --pid-file value or None)."""
    index = container_id = pid_file = None
    for i, name, value in _tokens(argv):
        if name == "pid-file":
            pid_file = value
        elif name is None:
            if index is None:
                index = i
            else:
                container_id = value
    return index, container_id, pid_file


def _spawn(argv, names, problems):
    """posix_spawn the first of `names` that can be run with argv[1:]; its pid, or None
    with the reasons in `problems`."""
    for runtime in _find_runtimes(names, problems):
        try:
            return runtime, os.posix_spawn(runtime, [runtime, *argv[1:]], os.environ)
        except OSError as exc:  # not an executable format, vanished, ...: try the next
            problems.append(f"{runtime}: {exc.strerror or exc}")
    return None, None


def _wait(pid):
    """The exit status of child `pid`, as a shell reports it (128+N for signal N)."""
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries already
            continue
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status)


def create_gpu_container(argv, cfg, job, log_file, log_format, started, via=None):
    """Steps 2-4 of a GPU create (see the module docstring); exits with the status.
    ``via``: who starts the low-level runtime and how the create ends (LOCAL: this
    process; gpunode.runtime.resident: the sh first stage that asked the resident
    service).

    The low-level runtime's create is started first, and the host-side work (the hook
    modules' import, the rootfs files, the /proc sources) done while it runs: most of its
    ~35 ms is the Go runtime's start-up. That overlap is safe because:

    * the spec (step 1) is complete before the runtime starts, and nothing done here
      changes it;
    * the rootfs files are regular files, symlinks and directories written into the
      host-side root directory (each path resolved inside it with openat2); the
      container's mount namespace mounts that same directory (a bind of the same
      filesystem, usually the image's overlay), so they are there whenever the container
      looks, as they were when written before. The runtime's own writes there are the
      mount targets of the spec's mounts (directories and empty files at the libraries'
      real names, device nodes): our names (SONAME links, ``libcuda.so``, /etc/ld.so.*)
      are never destinations of gpunode's mounts (gpunode.runtime.edits), a spec whose own
      mounts land on one of them gets the files before the runtime starts
      (_mounts_over_rootfs_files), and directories both of us may create are made with
      "exists is fine" on both sides;
    * a read-only root (``--read-only``) is a read-only bind in the container's mount
      namespace, a per-mount flag: the host-side directory stays writable, so such
      containers still get the files;
    * the /proc sources are detached mounts made in our own mount namespace from the
      host's /proc; they are attached (the only step that needs the container) after
      the runtime has exited;
    * the container's process cannot run before ``start``, which its engine calls only
      after this process exits, and this process waits for the runtime, then for all of
      the above.

    A failure of the overlapped work is reported once the runtime is done: one error line,
    and the created container deleted (as for a failure at step 4)."""
    import time

    via = via or LOCAL

    def mark(name):
        job.marks.append((name, time.perf_counter()))

    index, container_id, pid_file = create_layout(argv)
    own_pid_file = None
    run = list(argv)
    if pid_file is None:
        own_pid_file = os.path.join(
            os.path.abspath(job.bundle), f".gpunode-{os.getpid()}-{os.urandom(4).hex()}.pid"
        )
        run[index + 1 : index + 1] = ["--pid-file", own_pid_file]
        pid_file = own_pid_file
    rootfs_ms = 0.0
    if not job.overlap:  # see _mounts_over_rootfs_files: the rootfs files first
        error, rootfs_ms = _rootfs(job, mark)
        if error:
            via.fail(error, log_file, log_format, cfg)
    src = None
    try:
        problems = []
        runtime, child = via.spawn(run, cfg.runtimes, problems)
        if child is None:
            tried = f" ({'; '.join(problems)})" if problems else ""
            via.fail(
                f"no low-level OCI runtime could be run from runtimes "
                f"{', '.join(cfg.runtimes)}{tried}",
                log_file,
                log_format,
                cfg,
            )
        t_spawn = time.perf_counter()
        job.marks.append(("spawn", t_spawn))
        # while the runtime creates the container
        error = None
        if job.overlap:
            error, rootfs_ms = _rootfs(job, mark)
        t_rootfs = time.perf_counter()
        if error is None:
            try:
                from ..hook import configure

                src = configure.proc_sources(job.args, job.rootfs)
            except Exception as exc:  # as in _rootfs
                error = f"/proc/driver/nvidia: {_hook_message(exc)}"
        from ..hook.errors import HookError

        t_sources = time.perf_counter()
        job.marks.append(("sources", t_sources))
        status = via.wait(child)
        t_runtime = time.perf_counter()
        job.marks.append(("wait", t_runtime))
        if status != 0:
            if error:  # ours first; the runtime has said its own
                via.fail(error, log_file, log_format, cfg)
            via.exit(status)
        try:
            if error:
                raise HookError(error)
            if src is not None:
                with open(pid_file, "rb") as fh:
                    pid = int(fh.read().strip() or b"0")
                if pid <= 0:
                    raise HookError(f"no container pid in {pid_file}")
                from ..hook import procdriver

                procdriver.in_namespace(src, pid)
        except (HookError, OSError, ValueError) as exc:
            message = error or f"/proc/driver/nvidia: {_hook_message(exc)}"
            _delete(runtime, argv[1:index], container_id)
            via.fail(message, log_file, log_format, cfg)
    finally:
        if src is not None:
            src.close()
        if own_pid_file:
            try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
                os.unlink(own_pid_file)
            except OSError:
                pass
    t_proc = time.perf_counter()
    job.marks.append(("proc", t_proc))
    from ..hook import TIMING_LOG

    if os.path.exists(TIMING_LOG):  # gpunode.hook.timing, loaded only when asked for
        from ..hook import timing

        timing.write(TIMING_LOG, PROG, container_id, job.cpu0, job.marks)

    def ms(a, b):
        return f"{(b - a) * 1000:.1f}"

    _log(
        cfg,
        "debug",
        f"timing create {container_id} plan={ms(started, t_spawn)} "
        f"rootfs={rootfs_ms:.1f} sources={ms(t_rootfs, t_sources)} "
        f"runtime={ms(t_spawn, t_runtime)} proc={ms(t_runtime, t_proc)} "
        f"total={ms(started, t_proc)}",
    )
    via.exit(0)


def _exit(status):
    """End a GPU create with `status` once its work is done, skipping the interpreter's
    teardown: freeing ~60 modules' objects costs the container's start ~3 ms, and nothing
    is left to clean up (files are closed, the pid file removed, no atexit handlers)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _rootfs(job, mark=None):
    """The rootfs files (gpunode.hook.configure.rootfs): (one-line error or None, ms).
    `mark(phase)`: called after each part (gpunode.hook.configure.rootfs)."""
    import time

    t = time.perf_counter()
    try:
        from ..hook import configure

        configure.rootfs(job.args, job.rootfs, mark)
        error = None
    except Exception as exc:  # the runtime may be running: delete its container, one line
        error = _hook_message(exc)
    return error, (time.perf_counter() - t) * 1000


def _hook_message(exc):
    if isinstance(exc, OSError):
        from ..hook.errors import describe

        return describe(exc)
    from ..hook.errors import HookError

    return str(exc) if isinstance(exc, HookError) else f"{type(exc).__name__}: {exc}"


def _delete(runtime, global_opts, container_id):
    """`<runtime> [global opts] delete --force <id>`: no container left behind."""
    try:
        pid = os.posix_spawn(
            runtime,
            [runtime, *global_opts, "delete", "--force", container_id],
            os.environ,
            file_actions=[(os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0)],
        )
        _wait(pid)
    except OSError:
        pass


def surely_not_gpu(raw, config_exists):
    """A cheap, conservative pre-check on the raw config.json bytes.

    True only when no request source can be present: none of the marker strings occurs
    anywhere in the file, and there are no annotations at all when a config file (which
    could name other annotation prefixes) exists. It does not even import json, whose
    import alone (via re) costs more than the 3% budget for containers without GPUs.
    Any occurrence anywhere, even in an argument, sends the spec down the full path.
    """
    if any(m in raw for m in REQUEST_MARKERS):
        return False
    return not (config_exists and b'"annotations"' in raw)


def main(argv=None):
    argv = list(sys.argv if argv is None else argv)
    is_create, bundle, log_file, log_format = parse_args(argv)
    if not is_create:
        _exec_runtime(argv, _runtimes_fast(), log_file, log_format)
    create(argv, bundle, log_file, log_format)


def create(argv, bundle, log_file, log_format, via=None):
    """A ``create``: the low-level runtime exec'd for a spec without GPU request, the GPU
    create otherwise (modify_bundle, create_gpu_container). ``via``: as for
    create_gpu_container; this process (LOCAL) unless the resident service serves it."""
    via = via or LOCAL
    config_path = os.environ.get("GPUNODE_RUNTIME_CONFIG", "/etc/gpunode/runtime.toml")
    config_exists = os.path.exists(config_path)
    try:
        with open(os.path.join(bundle or os.getcwd(), "config.json"), "rb") as fh:
            raw = fh.read()
    except OSError:
        raw = b""
    if raw and surely_not_gpu(raw, config_exists):
        via.exec_runtime(argv, _runtimes_fast(), log_file, log_format)
    import time

    cpu0 = time.process_time()
    started = time.perf_counter()
    marks = [("start", started)]
    try:
        from .config import ConfigError, load

        cfg = load()
    except ConfigError as exc:
        via.fail(str(exc), log_file, log_format)
    marks.append(("config", time.perf_counter()))
    try:
        job = modify_bundle(
            bundle or os.getcwd(),
            cfg,
            lambda lvl, msg: _log(cfg, lvl, msg + via.served_by),
            raw=raw or None,
        )
    except Exception as exc:  # every failure becomes one line for `docker run` to show
        from .edits import EditError
        from .userinput import RequestError

        message = (
            str(exc)
            if isinstance(exc, RequestError | EditError)
            else (f"{type(exc).__name__}: {exc}")
        )
        if os.environ.get("GPUNODE_DEBUG"):
            raise
        via.fail(message, log_file, log_format, cfg)
    if job is None:
        via.exec_runtime(argv, cfg.runtimes, log_file, log_format)
    marks.append(("spec", time.perf_counter()))
    job.cpu0, job.marks = cpu0, marks
    create_gpu_container(argv, cfg, job, log_file, log_format, started, via)


class Local:
    """A create served by this process, which containerd (or Docker) started: it execs or
    spawns the low-level runtime itself and ends with its status."""

    served_by = ""  # said after the create's summary in the runtime's log
    exec_runtime = staticmethod(_exec_runtime)
    fail = staticmethod(_fail)
    exit = staticmethod(_exit)

    @staticmethod
    def spawn(run, names, problems):
        return _spawn(run, names, problems)

    wait = staticmethod(_wait)


LOCAL = Local()


def _runtimes_fast():
    """Low-level runtimes without importing tomllib unless a config file exists."""
    path = os.environ.get("GPUNODE_RUNTIME_CONFIG", "/etc/gpunode/runtime.toml")
    if not os.path.exists(path):
        return list(DEFAULT_RUNTIMES)
    return _runtimes_from_config()


if __name__ == "__main__":
    main()
