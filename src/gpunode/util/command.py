"""What every gpunode subcommand shares (gpunode.cli, and the library code that reports
bad input in the CLI's terms): the one set of exit codes, the one-line usage error, the
parser class that reports it, the error bases the CLI's one error path catches, the one
form of an error line, JSON output.

It is in util, not cli, so that library code (the engines' runtime setup, the runtime's
install-links) can raise the usage error without importing the CLI: nothing but the CLI
imports gpunode.cli (tests/unit/test_architecture.py)."""

from __future__ import annotations

import argparse
import json
import sys

# Exit codes (stable; roles and scripts rely on them).
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_NO_DRIVER = 0, 1, 2, 3


# Every subcommand's errors, on stderr, in one form: argparse's own (`prog: error: message`,
# which a bad option already prints), so a reader (the roles, gpu_mig's messages) strips one
# prefix, the line says it is an error, and the message starts with what it is about.
ERROR_PREFIX = "gpunode: error: "


def print_error(message: object) -> None:
    """The one error line: ``gpunode: error: MESSAGE`` on stderr."""
    print(f"{ERROR_PREFIX}{message}", file=sys.stderr)


def fail(message: object, code: int) -> int:
    """Print the error line and return ``code`` (a subcommand's exit code)."""
    print_error(message)
    return code


class UsageError(Exception):
    """Bad input on the command line: one line, exit 2."""


# Base classes that let gpunode.cli.main report a package's errors without importing the
# package (the simulator's, in particular: product code never imports gpunode.sim).
class InputError(Exception):
    """Bad input in a file the command was given (a GPU profile, ...): one line, exit 2."""


class OperationError(Exception):
    """An operation that failed (a Docker call, an image build, ...): one line, exit 1."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))


def require_simulator(command: str) -> None:
    """One line, exit 2, where gpunode.sim is not installed: the node wheel leaves the
    simulator out (development machines run it from the source tree)."""
    import importlib.util

    if importlib.util.find_spec("gpunode.sim") is None:
        raise UsageError(
            f"gpunode {command}: the simulator is not installed here (gpunode's node wheel "
            "leaves it out); run it from the gpunode source tree"
        )
