"""Host-side helper for molecule/shared/create.yml: the simulator's node settings and the
steps after the container is up, taken from gpunode.sim.cluster (their one home).

  simnode.py settings NAME RELEASE PROFILE        -> JSON: image tag + docker_container options
  simnode.py prepare NAME PROFILE BUILD_DIR       -> boot wait, gpunode, mock NVML, profile,
                                                     workload image in the node's engine
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from gpunode.sim import cluster, images
from gpunode.sim.docker import DockerError

PROJECT = Path(__file__).resolve().parents[2]


def settings(name: str, release: str, profile: str) -> dict:
    spec = cluster.NodeSpec(name, release, profile)
    quiet = lambda *_: None  # noqa: E731
    return {
        "image": images.build("node", release, quiet),
        "workload": images.build("workload", "bookworm", quiet),
        **cluster.node_settings(spec),
    }


def prepare(name: str, profile: str, build_dir: str) -> dict:
    quiet = lambda *_: None  # noqa: E731
    art = cluster.Artifacts.build(Path(build_dir), PROJECT, quiet)
    cluster.wait_booted(name)
    cluster.tune_node(name)
    cluster.install_gpunode(name, art, quiet)
    cluster.copy_mock(name, art)
    applied = cluster.apply(name, profile, quiet)
    workload = images.build("workload", "bookworm", quiet)
    docker = shutil.which("docker")
    have = subprocess.run(
        [docker, "exec", name, "docker", "image", "inspect", workload],
        capture_output=True,
        check=False,
    )
    if have.returncode != 0:
        cluster.load_image(name, workload)
    # podman too (tests/infra's CDI channel through podman), from the node's Docker
    have = subprocess.run(
        [docker, "exec", name, "podman", "image", "exists", workload],
        capture_output=True,
        check=False,
    )
    if have.returncode != 0:
        load = subprocess.run(
            [docker, "exec", name, "sh", "-c",
             f"docker save {workload} | podman --cgroup-manager cgroupfs load -q"],
            capture_output=True, check=False,
        )  # fmt: skip
        if load.returncode != 0:
            raise cluster.SimError(f"{name}: podman load failed: {load.stderr.decode().strip()}")
    return {"changed": bool(applied["changes"]), "workload": workload}


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["settings"] and len(argv) == 4:
            out = settings(*argv[1:])
        elif argv[:1] == ["prepare"] and len(argv) == 4:
            out = prepare(*argv[1:])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (cluster.SimError, images.ImageError, DockerError) as exc:
        print(f"simnode: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
