"""The hook's errors: one line on stderr, naming the subcommand."""

from __future__ import annotations

import os

PROG = "gpunode-hook"


class HookError(Exception):
    """A failure reported as one line on stderr (exit 1)."""


def describe(exc: OSError) -> str:
    """An OSError as the one-line message the hook prints (reason: file)."""
    msg = exc.strerror or str(exc)
    if exc.filename:
        msg = f"{msg}: {exc.filename}"
    return msg


def debug() -> bool:
    # Only switches on tracebacks; nothing security-relevant depends on it.
    return os.environ.get("GPUNODE_DEBUG") == "1"
