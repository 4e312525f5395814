"""Running another program (an engine's CLI, systemctl, dpkg-query, pip, ...) the one way,
and its output as one line.

``run`` never raises for the program: one that cannot be started (missing, not executable)
or that does not finish in time comes back as a ``Ran`` whose ``failed`` says why in one
line (returncode 127 or 124, as a shell would give), so each caller turns that into its own
error (EngineRunError, CheckFailed, a check's detail) in its own words. Output is captured;
``input`` as bytes, or ``text=False``, gives bytes back.

``version`` reads a program's x.y.z from its ``--version`` output (containerd's, for the
engines' CDI refusal and gpu_preflight's).

``one_line`` folds a message (an exception's, a tool's stderr) onto one line;
``first_line`` and ``last_line`` pick the first or last non-blank line of a tool's output,
where a tool puts its summary.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple


class Ran(NamedTuple):
    returncode: int
    stdout: Any  # str, or bytes with text=False
    stderr: Any
    failed: str = ""  # why it did not run or finish (one line); "" when it ran to its end

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.failed

    @property
    def timed_out(self) -> bool:
        return self.returncode == 124 and bool(self.failed)


def run(
    argv: Sequence[str],
    *,
    timeout: float | None = None,
    input: str | bytes | None = None,
    env: Mapping[str, str] | None = None,
    text: bool | None = None,
) -> Ran:
    """Run ``argv`` to its end (see the module docstring)."""
    argv = [str(a) for a in argv]
    text = not isinstance(input, bytes) if text is None else text
    empty = "" if text else b""
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=text,
            input=input,
            env=None if env is None else dict(env),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        # what it printed before it was killed (bytes here even in text mode)
        out, err = (
            v.decode(errors="replace") if text and isinstance(v, bytes) else (v or empty)
            for v in (exc.stdout, exc.stderr)
        )
        return Ran(124, out, err, f"{argv[0]} did not finish in {timeout:g}s")
    except OSError as exc:
        return Ran(127, empty, empty, f"{argv[0]}: {exc.strerror or exc}")
    return Ran(proc.returncode, proc.stdout, proc.stderr)


def one_line(text: str) -> str:
    """``text`` with every run of white space (line breaks included) one space."""
    return " ".join(str(text).split())


def first_line(text: str) -> str:
    """The first non-blank line of ``text``, stripped ("" when there is none)."""
    return next((ln.strip() for ln in str(text).splitlines() if ln.strip()), "")


def last_line(text: str) -> str:
    """The last non-blank line of ``text``, stripped ("" when there is none)."""
    return next((ln.strip() for ln in reversed(str(text).splitlines()) if ln.strip()), "")


_VERSION = re.compile(r"(?:^|\s)v?(\d+)\.(\d+)\.(\d+)")


def version(argv: Sequence[str], timeout: float = 30) -> tuple[tuple[int, int, int] | None, str]:
    """(the first x.y.z that ``argv`` prints, its output's first line); (None, why) when it
    does not run or prints none."""
    ran = run(argv, timeout=timeout)
    line = first_line(ran.stdout) or first_line(ran.stderr)
    m = _VERSION.search(ran.stdout) if ran.ok else None
    if m is None:
        why = ran.failed or f"`{' '.join(argv)}` printed no version ({line or 'nothing'})"
        return None, why
    major, minor, patch = (int(x) for x in m.groups())
    return (major, minor, patch), line
