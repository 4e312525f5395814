"""gpunode.util.tool: the one way gpunode runs another program and folds its output."""

from __future__ import annotations

import sys

from gpunode.util import tool


def test_a_program_that_runs():
    ran = tool.run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert (ran.returncode, ran.stdout, ran.stderr, ran.failed, ran.ok) == (3, "out\n", "err\n", "", False)
    assert tool.run(["true"]).ok


def test_a_program_that_cannot_start_is_127_with_one_line():
    ran = tool.run(["/nonexistent/tool", "x"])
    assert ran.returncode == 127 and not ran.ok
    assert ran.failed == "/nonexistent/tool: No such file or directory"


def test_a_program_that_does_not_finish_is_124():
    ran = tool.run([sys.executable, "-c", "import time; print('partial', flush=True); time.sleep(30)"], timeout=1)
    assert ran.returncode == 124 and ran.failed == f"{sys.executable} did not finish in 1s"
    assert ran.timed_out and not tool.run(["true"]).timed_out
    assert ran.stdout == "partial\n"  # text, as in every other case


def test_bytes_in_bytes_out():
    ran = tool.run(["cat"], input=b"\x00\xff")
    assert ran.stdout == b"\x00\xff" and ran.ok


def test_lines():
    assert tool.one_line("a\n  b\tc\n") == "a b c"
    assert tool.first_line("\n  \n first \nsecond\n") == "first"
    assert tool.last_line("first\nlast \n\n") == "last"
    assert tool.first_line("") == tool.last_line(" \n") == ""
