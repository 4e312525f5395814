"""What every gpunode subcommand shares, wherever its module lives (gpunode.cli, and
gpunode.validate.command, which the CLI names only in its lazy table): exit codes, the one-line
usage error, the parser class that reports it, JSON output.

It is in util, not cli, so that library code (the engines' runtime setup, the runtime's
install-links) can raise the usage error without importing the CLI: nothing but the CLI
imports gpunode.cli (tests/unit/test_layout.py)."""

from __future__ import annotations

import argparse
import json

# Exit codes (stable; roles and scripts rely on them).
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_NO_DRIVER = 0, 1, 2, 3


class UsageError(Exception):
    """Bad input on the command line: one line, exit 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


def print_json(data: object) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))
