"""gpunode-container-runtime: a runc-compatible OCI runtime (its Python program; the sh
first stage, gpunode.launch.firststage, runs it when a create may carry a GPU request).

Every invocation is forwarded with execve to the low-level runtime (first found of
``runtimes`` in runtime.toml; default runc, then crun) with the same arguments and
environment. Only ``create`` is intercepted: a container that asks for no GPU gets its
spec untouched, byte for byte, even when discovery is broken or the driver is gone, and
the runtime is exec'd. A GPU create (create_gpu_container), with no hook process:

1. the spec edited and written back (gpunode.runtime.bundle);
2. the low-level runtime's ``create`` started (same argv, env and stdio, plus a
   ``--pid-file`` of our own when the caller gave none); its exit status is passed on;
3. while it runs, the files written into the container root (symlinks, ld.so.conf.d,
   ld.so.cache) and the sources of the filtered /proc/driver/nvidia made (detached mounts);
4. after a successful create, those mounts attached over the container's
   /proc/driver/nvidia in its mount namespace (gpunode.hook.procdriver). If step 3 or 4
   fails the container is deleted (``delete --force``) and the create fails with one line.

Who starts the runtime in step 2 and how the create ends is the transport's
(gpunode.launch.transport): this process (``LOCAL``), or the sh first stage talking to a
worker of gpunode's resident service (gpunode.launch.resident).

Why the overlap of steps 2 and 3 is safe:

* the spec (step 1) is complete before the runtime starts, and nothing done here changes it;
* the rootfs files are regular files, symlinks and directories written into the host-side
  root directory (each path resolved inside it with openat2); the container's mount
  namespace mounts that same directory, so they are there whenever the container looks.
  The runtime's own writes there are the mount targets of the spec's mounts: our names
  (SONAME links, ``libcuda.so``, /etc/ld.so.*) are never destinations of gpunode's mounts
  (gpunode.runtime.edits), a spec whose own mounts land on one of them gets the files
  before the runtime starts (gpunode.runtime.bundle.mounts_over_rootfs_files), and
  directories both of us may create are made with "exists is fine" on both sides;
* a read-only root (``--read-only``) is a per-mount flag in the container's namespace: the
  host-side directory stays writable;
* the /proc sources are detached mounts made in our own mount namespace from the host's
  /proc; they are attached (the only step that needs the container) after the runtime
  has exited;
* the container's process cannot run before ``start``, which its engine calls only after
  this create ends, and this create waits for the runtime, then for all of the above.

Timings (issue 28): one ``Timer`` per GPU create takes its marks in order, so its phases
(config, spec, spawn, symlinks, ldcache, sources, wait, proc) add up to its total; the same
marks make the debug line of the runtime's log (``timing create <id> <phase>=<ms> ...
total=<ms>`` at log-level debug) and the timing log's line (gpunode.hook.timing).

This module imports only ``os``, ``sys`` and its packages' constants at load time:
``start``, ``state``, ``delete`` and the rest go straight to execve.
"""

import os
import sys

from ..runtime import surely_not_gpu
from . import process

PROG = process.PROG
DEFAULT_RUNTIMES = process.DEFAULT_RUNTIMES
CONFIG = "/etc/gpunode/runtime.toml"
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


class Timer:
    """One GPU create's clock: marks in order, from the create's first decision."""

    def __init__(self):
        import time

        self.clock = time.perf_counter
        self.cpu0 = time.process_time()  # what exec and start-up cost before this
        self.marks = [("start", self.clock())]

    def mark(self, phase):
        self.marks.append((phase, self.clock()))

    def report(self, cfg, container_id):
        """The debug line in the runtime's log and, while it exists, the timing log's."""
        from ..hook import TIMING_LOG

        if os.path.exists(TIMING_LOG):  # gpunode.hook.timing, loaded only when asked for
            from ..hook import timing

            timing.write(TIMING_LOG, PROG, container_id, self.cpu0, self.marks)
        if cfg.log_file and cfg.log_level == "debug":
            from ..hook.timing import phases

            process.log(cfg, "debug", f"timing create {container_id} {phases(self.marks)}")


def create_gpu_container(argv, cfg, job, log_file, log_format, timer, via=None):
    """Steps 2-4 of a GPU create (the module docstring) for ``job``
    (gpunode.runtime.bundle.GpuCreate), carried out by ``via`` (a transport; LOCAL by
    default); ends the create with the runtime's status."""
    from .transport import LOCAL

    via = via or LOCAL
    index, container_id, pid_file = create_layout(argv)
    run, own_pid_file = list(argv), None
    if pid_file is None:
        own_pid_file = pid_file = os.path.join(
            os.path.abspath(job.bundle), f".gpunode-{os.getpid()}-{os.urandom(4).hex()}.pid"
        )
        run[index + 1 : index + 1] = ["--pid-file", own_pid_file]
    if not job.overlap:  # gpunode.runtime.bundle.mounts_over_rootfs_files: the files first
        error = _rootfs(job, timer)
        if error:
            via.fail(error, log_file, log_format, cfg)
    src = None
    try:
        problems = []
        runtime, child = via.spawn(run, cfg.runtimes, problems)
        if child is None:
            via.fail(process.none_runnable(cfg.runtimes, problems), log_file, log_format, cfg)
        timer.mark("spawn")
        error = _rootfs(job, timer) if job.overlap else None  # while the runtime creates
        if error is None:
            src, error = _proc_sources(job)
        timer.mark("sources")
        status = via.wait(child)
        timer.mark("wait")
        if status != 0:
            if error:  # ours first; the runtime has said its own
                via.fail(error, log_file, log_format, cfg)
            via.exit(status)
        error = error or _attach_proc(src, pid_file)
        if error:
            process.delete(runtime, argv[1:index], container_id)
            via.fail(error, log_file, log_format, cfg)
    finally:
        if src is not None:
            src.close()
        if own_pid_file:
            try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
                os.unlink(own_pid_file)
            except OSError:
                pass
    timer.mark("proc")
    timer.report(cfg, container_id)
    via.exit(0)


def _rootfs(job, timer):
    """The rootfs files (gpunode.hook.configure.rootfs, marking its parts): one-line error
    or None."""
    try:
        from ..hook import configure

        configure.rootfs(job.args, job.rootfs, timer.mark)
        return None
    except Exception as exc:  # the runtime may be running: delete its container, one line
        return _hook_message(exc)


def _proc_sources(job):
    """(the filtered /proc/driver/nvidia's detached sources or None, one-line error or None)."""
    try:
        from ..hook import configure

        return configure.proc_sources(job.args, job.rootfs), None
    except Exception as exc:  # as in _rootfs
        return None, f"/proc/driver/nvidia: {_hook_message(exc)}"


def _attach_proc(src, pid_file):
    """The sources attached in the created container's mount namespace: one-line error or
    None."""
    if src is None:
        return None
    from ..hook import procdriver
    from ..hook.errors import HookError

    try:
        with open(pid_file, "rb") as fh:
            pid = int(fh.read().strip() or b"0")
        if pid <= 0:
            raise HookError(f"no container pid in {pid_file}")
        procdriver.in_namespace(src, pid)
        return None
    except (HookError, OSError, ValueError) as exc:
        return f"/proc/driver/nvidia: {_hook_message(exc)}"


def _hook_message(exc):
    if isinstance(exc, OSError):
        from ..hook.errors import describe

        return describe(exc)
    from ..hook.errors import HookError

    return str(exc) if isinstance(exc, HookError) else f"{type(exc).__name__}: {exc}"


def main(argv=None):
    argv = list(sys.argv if argv is None else argv)
    is_create, bundle, log_file, log_format = parse_args(argv)
    if not is_create:
        process.exec_runtime(argv, _runtimes_fast(), log_file, log_format)
    create(argv, bundle, log_file, log_format)


def create(argv, bundle, log_file, log_format, via=None):
    """A ``create``: the low-level runtime exec'd for a spec without GPU request, the GPU
    create otherwise (gpunode.runtime.bundle.modify_bundle, create_gpu_container). ``via``:
    as for create_gpu_container."""
    config_exists = os.path.exists(os.environ.get("GPUNODE_RUNTIME_CONFIG", CONFIG))
    try:
        with open(os.path.join(bundle or os.getcwd(), "config.json"), "rb") as fh:
            raw = fh.read()
    except OSError:
        raw = b""
    if raw and surely_not_gpu(raw, config_exists):
        if via is None:  # no transport module loaded for it
            process.exec_runtime(argv, _runtimes_fast(), log_file, log_format)
        via.exec_runtime(argv, _runtimes_fast(), log_file, log_format)
    if via is None:
        from .transport import LOCAL

        via = LOCAL
    timer = Timer()
    try:
        from ..runtime.config import ConfigError, load

        cfg = load()
    except ConfigError as exc:
        via.fail(str(exc), log_file, log_format)
    timer.mark("config")
    try:
        from ..runtime.bundle import modify_bundle

        job = modify_bundle(
            bundle or os.getcwd(),
            cfg,
            lambda lvl, msg: process.log(cfg, lvl, msg + via.served_by),
            raw=raw or None,
        )
    except Exception as exc:  # every failure becomes one line for `docker run` to show
        from ..runtime.edits import EditError
        from ..runtime.userinput import RequestError

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
    timer.mark("spec")
    create_gpu_container(argv, cfg, job, log_file, log_format, timer, via)


def _runtimes_fast():
    """Low-level runtimes without importing tomllib unless a config file exists."""
    if not os.path.exists(os.environ.get("GPUNODE_RUNTIME_CONFIG", CONFIG)):
        return list(DEFAULT_RUNTIMES)
    try:
        from ..runtime.config import load

        return load().runtimes
    except Exception:
        return list(DEFAULT_RUNTIMES)


if __name__ == "__main__":
    main()
