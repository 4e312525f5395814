"""The container engine: daemon.json valid, the gpunode runtime registered (and the default
where the inventory says so), every other key as it was before gpunode, the engine active."""

from __future__ import annotations

import json

import pytest

from .conftest import docker_default_wanted

DAEMON = "/etc/docker/daemon.json"
GPUNODE_KEYS = {"runtimes", "default-runtime", "features"}


def docker_wanted(node) -> bool:
    return bool(node.vars.get("gpu_container_runtime_docker", True))


@pytest.fixture
def daemon(node) -> dict:
    if not docker_wanted(node):
        pytest.skip(f"{node.name}: gpu_container_runtime_docker is false")
    f = node.host.file(DAEMON)
    assert f.exists, f"{node.name}: {DAEMON} is missing"
    try:
        doc = json.loads(f.content_string)
    except ValueError as exc:
        pytest.fail(f"{node.name}: {DAEMON} is not valid JSON: {exc}", pytrace=False)
    assert isinstance(doc, dict), f"{node.name}: {DAEMON} is not a JSON object"
    return doc


def runtime_name(node) -> str:
    return node.vars.get("container_engine_runtime_name", "gpunode")


def test_runtime_registered(node, daemon):
    name = runtime_name(node)
    entry = (daemon.get("runtimes") or {}).get(name)
    assert entry, f"{node.name}: runtime {name!r} not in {DAEMON} runtimes"
    path = entry.get("path", "")
    f = node.host.file(path)
    assert f.exists and f.mode & 0o111, f"{node.name}: runtime path {path} is not executable"


def test_default_runtime_as_configured(node, daemon):
    want = docker_default_wanted(node)
    got = daemon.get("default-runtime") == runtime_name(node)
    assert got == want, (
        f"{node.name}: default-runtime is {daemon.get('default-runtime')!r}; the inventory "
        f"(else gpu_container_runtime's default) says gpunode {'is' if want else 'is not'} "
        "the default"
    )


def test_other_keys_intact(node, daemon):
    backup = node.json_file(DAEMON + ".gpunode-backup")
    if backup is None:
        pytest.skip(f"{node.name}: no {DAEMON}.gpunode-backup (no daemon.json before gpunode)")
    for key, value in backup.items():
        if key in GPUNODE_KEYS:
            continue
        assert daemon.get(key) == value, f"{node.name}: {DAEMON} key {key!r} changed"
    for name, entry in (backup.get("runtimes") or {}).items():  # other runtimes kept too
        if name != runtime_name(node):
            assert daemon["runtimes"].get(name) == entry, f"{node.name}: runtime {name} changed"


def test_engine_active_with_the_runtime(node, daemon):
    assert node.host.service("docker").is_running, f"{node.name}: docker is not running"
    runtimes = json.loads(node.ok("docker info --format '{{json .Runtimes}}'"))
    assert runtime_name(node) in runtimes, f"{node.name}: dockerd does not know the runtime"
