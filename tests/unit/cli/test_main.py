"""The subcommand table is lazy: a subcommand's module is imported only when it runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpunode.cli import main as cli

SRC = Path(__file__).resolve().parents[3] / "src"
CODE = """
import contextlib, io, sys
sys.path[:0] = [{src!r}]
from gpunode.cli.main import main
with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
    main({argv!r})
print(" ".join(sorted(m for m in sys.modules if m.startswith("gpunode"))))
"""


def loaded(argv: list[str]) -> set[str]:
    proc = subprocess.run(
        [sys.executable, "-c", CODE.format(src=str(SRC), argv=argv)],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(proc.stdout.split())


COMMAND_MODULES = {module for module, _ in cli.COMMANDS.values()}


@pytest.mark.parametrize(
    ("argv", "command"),
    [
        (["profile", "list"], "profile"),
        (["explain", "--help"], "explain"),
        (["validate", "--help"], "validate"),
        (["--help"], None),
        (["--version"], None),
    ],
)
def test_only_the_subcommand_that_runs_is_imported(argv, command):
    modules = loaded(argv)
    want = {cli.COMMANDS[command][0]} if command else set()
    assert modules & COMMAND_MODULES == want
    assert not {m for m in modules if m.startswith("gpunode.engines")}


def test_help_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert all(name in out for name in cli.COMMANDS)
