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
        (["mig", "apply", "--help"], "mig"),
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


@pytest.mark.parametrize("argv", [["sim", "down"], ["profile", "list"]])
def test_the_simulators_commands_say_so_where_it_is_not_installed(argv, monkeypatch, capsys):
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "gpunode.sim" else find_spec(n, *a)
    )
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "the simulator is not installed here" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("error", "code"),
    [
        ("gpunode.sim.profiles:ProfileError", 2),
        ("gpunode.sim.cluster:SimError", 1),
        ("gpunode.sim.docker:DockerError", 1),
        ("gpunode.sim.images:ImageError", 1),
        ("gpunode.sim.mocknvml:MockBuildError", 1),
        ("gpunode.engines.common:EngineConfigError", 2),
        ("gpunode.engines.common:EngineRunError", 1),
        ("gpunode.runtime.config:ConfigError", 1),
        ("builtins:LookupError", 1),
    ],
)
def test_errors_are_one_line_with_their_exit_code(error, code, monkeypatch, capsys):
    import importlib

    from gpunode.cli import profile

    module, name = error.split(":")
    exc = getattr(importlib.import_module(module), name)("it broke")

    def fail(args):
        raise exc

    monkeypatch.setattr(profile, "run", fail)
    monkeypatch.delenv("GPUNODE_DEBUG", raising=False)
    assert cli.main(["profile", "list"]) == code
    err = capsys.readouterr().err
    internal = name == "LookupError"
    assert err == (
        "gpunode: error: internal error: LookupError: it broke (set GPUNODE_DEBUG=1 for a traceback)\n"
        if internal
        else "gpunode: error: it broke\n"
    )
