"""The start path's process primitives: finding the low-level runtime (``runtimes``:
an absolute path, else the first match on PATH), exec'ing it, spawning it as a child and
waiting for it, deleting a container it created, and saying a failure in one line where
the runtime's caller reads it (stderr, runc's ``--log`` file, gpunode's runtime log).

gpunode.launch.shim and both transports (gpunode.launch.transport) use these; nothing here
imports more than ``os`` and ``sys`` at load time (the no-GPU path execs from here).
"""

import os
import sys

PROG = "gpunode-container-runtime"
DEFAULT_RUNTIMES = ("runc", "crun")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def find_runtimes(names, problems):
    """Executable candidates for `names`, in order (an absolute path, or the first match
    on PATH); why an absolute entry is not one goes to `problems`."""
    path = os.environ.get("PATH") or DEFAULT_PATH
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


def none_runnable(names, problems):
    """The one line said when no entry of `names` could be run."""
    tried = f" ({'; '.join(problems)})" if problems else ""
    return f"no low-level OCI runtime could be run from runtimes {', '.join(names)}{tried}"


def exec_runtime(argv, names, log_file=None, log_format="text"):
    """execve the first of `names` that can be executed; one error line if none can."""
    failed = []
    for runtime in find_runtimes(names, failed):
        try:
            os.execve(runtime, [runtime, *argv[1:]], os.environ)
        except OSError as exc:  # not an executable format, vanished, ...: try the next
            failed.append(f"{runtime}: {exc.strerror or exc}")
    fail(none_runnable(names, failed), log_file, log_format)


def spawn(argv, names, problems):
    """posix_spawn the first of `names` that can be run with argv[1:]: (runtime, pid), or
    (None, None) with the reasons in `problems`."""
    for runtime in find_runtimes(names, problems):
        try:
            return runtime, os.posix_spawn(runtime, [runtime, *argv[1:]], os.environ)
        except OSError as exc:  # not an executable format, vanished, ...: try the next
            problems.append(f"{runtime}: {exc.strerror or exc}")
    return None, None


def wait(pid):
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


def delete(runtime, global_opts, container_id):
    """`<runtime> [global opts] delete --force <id>`: no container left behind."""
    try:
        pid = os.posix_spawn(
            runtime,
            [runtime, *global_opts, "delete", "--force", container_id],
            os.environ,
            file_actions=[(os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0)],
        )
        wait(pid)
    except OSError:
        pass


def fail(message, log_file, log_format, cfg=None):
    """One error line: stderr, runc's --log file and (with `cfg`) the runtime's log."""
    sys.stderr.write(f"{PROG}: error: {message}\n")
    record(message, log_file, log_format, cfg)
    sys.exit(1)


def record(message, log_file, log_format, cfg=None):
    """A failure's line in runc's --log file and (with `cfg`) the runtime's log."""
    if log_file:
        log_to_runc_file(log_file, log_format, "error", message)
    if cfg is not None:
        log(cfg, "error", message)


def log_to_runc_file(log_file, log_format, level, message):
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


LEVELS = ("debug", "info", "warning", "error")


def log(cfg, level, message):
    """A line in the runtime's own log (runtime.toml's log-file, at its log-level)."""
    if not cfg.log_file or LEVELS.index(level) < LEVELS.index(cfg.log_level):
        return
    import time

    try:
        with open(cfg.log_file, "a") as fh:
            fh.write(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} {level} {message}\n")
    except OSError:
        pass


def end(status):
    """End a GPU create with `status` once its work is done, skipping the interpreter's
    teardown: freeing ~60 modules' objects costs the container's start ~3 ms, and nothing
    is left to clean up (files are closed, the pid file removed, no atexit handlers)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
