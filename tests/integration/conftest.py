"""Simulated GPU nodes for integration tests: one Debian 12 and one Debian 13 node (the
``nodes`` fixture); image_tags also has the Debian 14 node image, which the CRI tests use.

Nodes are real containers with systemd as PID 1 and a Docker engine inside. They are
created once per session (images are cached by recipe hash, so only the first run on a
machine pays for debootstrap) and removed at the end.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpunode.sim import cluster, images
from gpunode.sim.docker import docker, engine_ok, exec_

ROOT = Path(__file__).resolve().parents[2]
RELEASES = ("bookworm", "trixie")


def _require_engine() -> None:
    if not engine_ok():
        pytest.fail(
            "no Docker Engine answers `docker info`; run scripts/setup first", pytrace=False
        )


@pytest.fixture(scope="session")
def artifacts() -> cluster.Artifacts:
    _require_engine()
    return cluster.Artifacts.build(ROOT / "build", ROOT, log=lambda *_: None)


class ImageTags(dict):
    """``{"node-<release>" | "workload-bookworm": tag}``; an image not built at the start
    (a release other than RELEASES: Debian 14, which only some tests use) is built when
    first asked for, so an archive that broke it (forky is testing) fails those tests, with
    images.build's one line, and no others."""

    def __missing__(self, key: str) -> str:
        kind, _, release = key.partition("-")
        self[key] = images.build(kind, release, log=print)
        return self[key]


@pytest.fixture(scope="session")
def image_tags() -> dict[str, str]:
    _require_engine()
    jobs = [("node", r) for r in RELEASES] + [("workload", "bookworm")]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        tags = list(pool.map(lambda j: images.build(*j, log=print), jobs))
    return ImageTags(zip([f"{k}-{r}" for k, r in jobs], tags, strict=True))


class Node:
    """A running simulated node and helpers to run things on it."""

    def __init__(self, name: str, release: str, workload: str):
        self.name, self.release, self.workload = name, release, workload

    def sh(
        self, script: str, check: bool = True, timeout: float = 300
    ) -> subprocess.CompletedProcess:
        proc = exec_(self.name, ["sh", "-c", script], check=False, timeout=timeout)
        proc = subprocess.CompletedProcess(
            proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode()
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"{self.name}: `{script}` exited {proc.returncode}: {proc.stderr}")
        return proc

    def json(self, script: str) -> dict:
        return json.loads(self.sh(script).stdout)

    def apply(self, profile: str) -> dict:
        return cluster.apply(self.name, profile, log=lambda *_: None)

    def pynvml(self, probe: str) -> dict:
        """Run a pynvml probe with the node's own Python (the gpunode venv has nvidia-ml-py)."""
        return self.json(f"/opt/gpunode/bin/python -c {shlex.quote(probe)}")


RESIDENT = "gpunode-runtime-resident.service"
ROLE = ROOT / "roles" / "gpu_container_runtime"


def start_resident(name: str) -> None:
    """gpunode's resident runtime service on node ``name`` as the gpu_container_runtime role
    installs it (its template, rendered with the role's default runtime path, written,
    enabled and started by `gpunode runtime setup`), up and answering."""
    import jinja2
    import yaml

    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    env = jinja2.Environment(keep_trailing_newline=True)
    env.filters["dirname"] = os.path.dirname
    unit = env.from_string((ROLE / "templates" / f"{RESIDENT}.j2").read_text()).render(
        ansible_managed="gpunode tests",
        container_engine_runtime_path=defaults["container_engine_runtime_path"],
    )
    doc = json.dumps({"units": {RESIDENT: unit}})
    exec_(name, ["gpunode", "runtime", "setup", "--json", "--input", "-", "--enable", RESIDENT,
                 "--start", RESIDENT], input=doc.encode())  # fmt: skip
    exec_(name, ["sh", "-c", "for i in $(seq 100); do [ -e /run/gpunode/resident/pid ] && exit 0; "
                 "sleep 0.1; done; exit 1"])  # fmt: skip


def start_nodes(specs: list[cluster.NodeSpec], artifacts, image_tags) -> None:
    """Start fresh nodes with gpunode installed and their profiles applied."""
    cluster.down_names([s.name for s in specs], log=lambda *_: None)
    for spec in specs:
        cluster.start_node(spec, image_tags[f"node-{spec.release}"], log=lambda *_: None)
    for spec in specs:
        cluster.wait_booted(spec.name)
        cluster.tune_node(spec.name)
        cluster.install_gpunode(spec.name, artifacts, log=lambda *_: None)
        cluster.copy_mock(spec.name, artifacts)
        cluster.apply(spec.name, spec.profile, log=lambda *_: None)


@pytest.fixture(scope="session")
def nodes(artifacts, image_tags) -> dict[str, Node]:
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    specs = [cluster.NodeSpec(f"{prefix}-{r}", r, "a100x4") for r in RELEASES]
    start_nodes(specs, artifacts, image_tags)
    out = {}
    for spec in specs:
        # The workload image goes into the node's own engine, as a registry would put it.
        save = subprocess.Popen(
            [shutil.which("docker"), "save", image_tags["workload-bookworm"]],
            stdout=subprocess.PIPE,
        )
        load = subprocess.run(
            [shutil.which("docker"), "exec", "-i", spec.name, "docker", "load"],
            stdin=save.stdout,
            capture_output=True,
            check=False,
        )
        save.wait()
        assert load.returncode == 0, load.stderr.decode()
        out[spec.release] = Node(spec.name, spec.release, image_tags["workload-bookworm"])
    yield out
    if not os.environ.get("GPUNODE_KEEP_NODES"):
        cluster.down_names([s.name for s in specs], log=lambda *_: None)


@pytest.fixture(params=RELEASES)
def node(request, nodes) -> Node:
    n = nodes[request.param]
    yield n
    # every test leaves the node with the 4xA100 profile and all device nodes in place
    n.apply("a100x4")


__all__ = ["Node", "docker"]
