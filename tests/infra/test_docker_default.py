"""Docker as an operator first uses it on a provisioned GPU node, with no `--runtime` flag:

* `docker run --gpus all IMAGE ...` sees every GPU when gpunode is Docker's default runtime
  (the role's default, container_engine_runtime_default: true); with the default opted out
  it fails with the one line that says what to do;
* `docker run -e NVIDIA_VISIBLE_DEVICES=all IMAGE ...` (no --gpus) gets what runtime.toml
  says: every GPU on a Docker-only node (accept-envvar-unprivileged true: NVIDIA's classic
  nvidia-docker semantics), none on a Kubernetes node (false: only the hook Docker's --gpus
  adds counts), none under runc.

Judged by the probe of the isolation matrix (device nodes, NVML UUIDs, /proc/driver/nvidia).
"""

from __future__ import annotations

import json
import tomllib

import pytest

from gpunode.runtime.config import RuntimeConfig

from .conftest import docker_default_wanted, node_inventory, truth
from .matrix import image, prepare

RUNTIME_TOML = "/etc/gpunode/runtime.toml"


def accepts_env(node) -> bool:
    """runtime.toml's accept-envvar-unprivileged on the node (absent: gpunode's default)."""
    f = node.host.file(RUNTIME_TOML)
    data = tomllib.loads(f.content_string) if f.exists else {}
    return data.get("accept-envvar-unprivileged", RuntimeConfig().accept_envvar_unprivileged)


@pytest.fixture
def plain(node):
    """`docker run` of the probe with the given flags and no --runtime: (rc, stderr, probe's
    JSON or None)."""
    if not truth(node.vars.get("gpu_container_runtime_docker", True)):
        pytest.skip(f"{node.name}: gpu_container_runtime_docker is false")
    mounts = prepare(node)

    def run(flags: str):
        r = node.run(f"docker run --rm {flags} {mounts} {image(node)} python3 /opt/probe.py")
        out = json.loads(r.stdout.strip().splitlines()[-1]) if r.rc == 0 else None
        return r.rc, r.stderr, out

    return run


def gpu_minors(out: dict) -> list[str]:
    return sorted(d for d in out["dev"] if d[6:].isdigit())


def assert_every_gpu(node, out: dict, where: str) -> None:
    gpus = [g for g in node_inventory(node)["gpus"] if not g.get("mig_mode")]
    assert gpu_minors(out) == sorted(f"nvidia{g['minor']}" for g in gpus), (where, out)
    assert sorted(out["nvml"]) == sorted(g["uuid"] for g in gpus), (where, out)


def assert_no_gpu(out: dict, where: str) -> None:
    assert gpu_minors(out) == [], (where, out)
    assert str(out["nvml"]).startswith("error:"), (where, "NVML reachable", out)


def test_engine_default_runtime_is_as_configured(node):
    """The running engine's default, not only daemon.json's (Docker restarted after it)."""
    got = node.ok("docker info --format '{{.DefaultRuntime}}'").strip()
    want = node.vars.get("container_engine_runtime_name", "gpunode")
    if docker_default_wanted(node):
        assert got == want, f"{node.name}: Docker's default runtime is {got!r}, not {want!r}"
    else:
        assert got != want, f"{node.name}: Docker's default runtime is {got!r} (opted out)"


def test_docker_run_gpus_all_without_runtime_flag(node, plain):
    rc, err, out = plain("--gpus all")
    where = f"{node.name}: docker run --gpus all (no --runtime)"
    if docker_default_wanted(node):
        assert rc == 0, f"{where} exited {rc}: {err.strip()[-500:]}"
        assert_every_gpu(node, out, where)
    else:  # opted out: runc, and gpunode's stand-in hook says what to do, in one line
        assert rc != 0, f"{where} started under runc with gpunode opted out as default"
        assert "runtime is not gpunode" in err and "--runtime gpunode" in err, (where, err)


def test_env_only_request_without_gpus_flag(node, plain):
    """No --gpus: NVIDIA_VISIBLE_DEVICES=all as a user's -e or a CUDA image's ENV would set it."""
    rc, err, out = plain("-e NVIDIA_VISIBLE_DEVICES=all")
    where = f"{node.name}: docker run -e NVIDIA_VISIBLE_DEVICES=all (no --gpus, no --runtime)"
    assert rc == 0, f"{where} exited {rc}: {err.strip()[-500:]}"
    if docker_default_wanted(node) and accepts_env(node):
        assert_every_gpu(node, out, where)  # NVIDIA's classic default-runtime semantics
    else:  # runc, or a Kubernetes node's runtime.toml: the env alone is no request
        assert_no_gpu(out, where)
