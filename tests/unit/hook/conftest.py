"""Fixtures of the hook's tests."""

from __future__ import annotations

import sys

import pytest

from .helpers import UNSHARE_PROBLEM


@pytest.fixture
def needs_unshare():
    if UNSHARE_PROBLEM:
        print(f"SKIP reason: {UNSHARE_PROBLEM}", file=sys.stderr)
        pytest.skip(f"needs unshare as root: {UNSHARE_PROBLEM}")
