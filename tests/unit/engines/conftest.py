"""Fixtures of the engines' tests."""

import pytest

from gpunode.engines import containerd, docker


@pytest.fixture(autouse=True)
def no_real_dockerd(monkeypatch):
    """Never run the host's dockerd or containerd; tests that need them install a fake (or
    name the real containerd explicitly)."""
    monkeypatch.setattr(docker, "DOCKERD", "gpunode-test-no-such-dockerd")
    monkeypatch.setattr(containerd, "CONTAINERD", "gpunode-test-no-such-containerd")
