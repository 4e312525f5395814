"""Per-phase timings of a container start (issue 28), for benchmarks/bench_cri.py.

The runtime shim and the hook take ``time.perf_counter()`` marks as they go (a mark costs
well under a microsecond) and, only when the file TIMING_LOG exists as a regular file of
their own user (not a link: nothing is created, nothing followed), append one line:

    <prog> <container id> cpu0=<ms> <phase>=<ms> ... total=<ms>

``cpu0``: the process's CPU time when its first mark was taken (``time.process_time``:
what exec, the sh first stage and the interpreter's start-up and imports cost before
gpunode's code ran; CPU time, not wall time, as nothing earlier has a clock). Each phase:
the wall time from the previous mark; ``total``: from the first mark to the last.

The path (gpunode.hook.TIMING_LOG) is fixed, never taken from the environment (the hook
consults none) or from a spec: only root can make /run/gpunode's files. The callers import
this module only when the file exists, so with it absent a start pays one
stat(2) at its end. ``touch /run/gpunode/timing.log`` turns it on.
"""

import os
import stat


def phases(marks):
    """``<phase>=<ms> ... total=<ms>`` for `marks` ([(phase, perf_counter seconds)], the
    first one the start): each phase the time since the mark before, so they add up to
    the total."""
    parts = [f"{marks[i][0]}={(marks[i][1] - marks[i - 1][1]) * 1000:.2f}"
             for i in range(1, len(marks))]  # fmt: skip
    parts.append(f"total={(marks[-1][1] - marks[0][1]) * 1000:.2f}")
    return " ".join(parts)


def line(prog, ident, cpu0, marks):
    """The line for `marks` (as for ``phases``)."""
    return f"{prog} {ident or '-'} cpu0={cpu0 * 1000:.2f} {phases(marks)}\n"


# Said after the program's name: "/resident" in a worker of gpunode's resident service
# (gpunode.launch.resident), whose cpu0 is the worker's since its fork.
SERVED_BY = ""


def write(path, prog, ident, cpu0, marks):
    """Append the line for `marks` to `path` (gpunode.hook.TIMING_LOG) when it exists as
    our own regular file; else nothing. Never raises."""
    try:
        fd = os.open(
            path,
            os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
        )
    except OSError:
        return
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
            os.write(fd, line(prog + SERVED_BY, ident, cpu0, marks).encode())
    except OSError:
        pass
    finally:
        os.close(fd)
