"""What every gpunode subcommand shares: exit codes, the one-line usage error, the parser
class that reports it, JSON output."""

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
