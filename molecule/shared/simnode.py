"""Host-side helper for molecule/shared/create.yml: the simulator's node settings and the
steps after the container is up, taken from gpunode.sim.cluster (their one home).

  simnode.py settings NAME RELEASE PROFILE        -> JSON: image tag + docker_container options
  simnode.py prepare NAME PROFILE BUILD_DIR       -> boot wait, gpunode, mock NVML, profile,
                                                     workload image in the node's engine
  simnode.py repo-up NAME                         -> the simulated NVIDIA repository served by
                                                     container NAME: its debian12 endpoint
  simnode.py repo-down NAME                       -> that container removed
  simnode.py restart NAME PROFILE                 -> the node restarted (its container), booted,
                                                     its profile applied (the driver loads)
  simnode.py load-driver NAME PROFILE VERSION DIR -> the node restarted on another driver
                                                     version: PROFILE at VERSION (written to
                                                     DIR) applied
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

import yaml

from gpunode.sim import cluster, images, nvidiarepo
from gpunode.sim.docker import DockerError
from gpunode.sim.profiles import ProfileError, builtin_names, load_profile

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


def repo_up(name: str) -> dict:
    """The simulated NVIDIA repository (built or current in the simulator's cache) served
    by a container of this scenario's own (scenarios run side by side)."""
    quiet = lambda *_: None  # noqa: E731
    repo = nvidiarepo.build(log=quiet)
    address = nvidiarepo.serve(repo, images.build("node", "bookworm", quiet), quiet, name=name)
    return nvidiarepo.endpoint(repo, address, "debian12").as_dict()


def repo_down(name: str) -> dict:
    return {"changed": nvidiarepo.stop(name)}


def restart(name: str, profile: str) -> dict:
    """A node restart: its container restarted (systemd boots again, enabled units start),
    then what the simulator does after a node's boot: the profile applied (the driver's
    /proc/driver tree and device nodes), as `gpunode sim up` does."""
    subprocess.run([shutil.which("docker") or "docker", "restart", name], capture_output=True,
                   check=True)  # fmt: skip
    cluster.wait_booted(name)
    cluster.tune_node(name)
    applied = cluster.apply(name, profile, lambda *_: None)
    return {"changed": True, "applied": len(applied["changes"])}


def load_driver(name: str, profile: str, version: str, out_dir: str) -> dict:
    """What a node restarted on another kernel module shows: the profile at that driver
    version (its file written to out_dir), applied (a driver load: the fabric untrained,
    an enabled fabric manager restarted; gpunode.sim.apply)."""
    if profile not in builtin_names():
        raise ProfileError(f"unknown profile {profile!r}; built-in: {', '.join(builtin_names())}")
    doc = yaml.safe_load((resources.files("gpunode") / "data" / "profiles" / f"{profile}.yaml")
                         .read_text(encoding="utf-8"))  # fmt: skip
    doc["driver"]["version"] = version
    doc["name"] = f"{profile}-{version}"
    path = Path(out_dir) / f"{doc['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    load_profile(path)  # the profile check, before the node is touched
    applied = cluster.apply(name, str(path), lambda *_: None)
    return {"changed": bool(applied["changes"]), "profile": str(path)}


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["settings"] and len(argv) == 4:
            out = settings(*argv[1:])
        elif argv[:1] == ["prepare"] and len(argv) == 4:
            out = prepare(*argv[1:])
        elif argv[:1] == ["repo-up"] and len(argv) == 2:
            out = repo_up(argv[1])
        elif argv[:1] == ["repo-down"] and len(argv) == 2:
            out = repo_down(argv[1])
        elif argv[:1] == ["restart"] and len(argv) == 3:
            out = restart(*argv[1:])
        elif argv[:1] == ["load-driver"] and len(argv) == 5:
            out = load_driver(*argv[1:])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (cluster.SimError, images.ImageError, DockerError, nvidiarepo.RepoError,
            ProfileError) as exc:  # fmt: skip
        print(f"simnode: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
