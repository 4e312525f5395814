"""Verify a provisioned simulated node (every molecule scenario that converges).

Expectations come from the scenario inventory's host variables: the node's GPU profile
(gpunode_sim_profile), the pins (nvidia_driver_version, cuda_toolkit_versions) and the
knobs (gpu_container_runtime_docker_cdi). The operator's daemon.json keys are the ones
molecule/shared/prepare.yml seeded.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import testinfra.utils.ansible_runner

from gpunode.sim import images
from gpunode.sim.profiles import load_profile

ROOT = Path(__file__).resolve().parents[3]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]
).get_hosts("all")
WORKLOAD = images.recipe("workload", "bookworm").tag
SEEDED = {
    "log-level": "warn",
    "default-shm-size": "256M",
    "log-opts": {"max-size": "10m"},
}
CORE_ROLES = all((ROOT / "roles" / r).is_dir() for r in ("nvidia_driver", "cuda_toolkit"))


def _vars(host) -> dict:
    return host.ansible.get_variables()


def _gpus(host) -> list:
    return load_profile(_vars(host)["gpunode_sim_profile"]).gpus


def _daemon_json(host) -> dict:
    return json.loads(host.file("/etc/docker/daemon.json").content_string)


def test_engine_runs_and_keeps_operator_keys(host):
    assert host.service("docker").is_running
    assert host.service("docker").is_enabled
    config = _daemon_json(host)
    for key, value in SEEDED.items():
        assert config[key] == value, key
    # the running engine was (re)started with that file
    shm = host.check_output(f"docker run --rm {WORKLOAD} df -m /dev/shm | tail -1").split()
    assert shm[1] == "256"


# A restart follows its daemon.json write within seconds (the role flushes its handler right
# after the write); the idempotence run, which writes nothing, comes minutes later.
RESTART_WINDOW_S = 45


def test_engine_restarted_only_after_a_daemon_json_change(host):
    """Docker's last (re)start is the one right after daemon.json's last write: the
    idempotence converge, which changes nothing, did not restart it."""
    started = int(
        host.check_output(
            'date -d "$(systemctl show docker -p ActiveEnterTimestamp --value)" +%s'
        )
    )
    written = int(host.check_output("stat -c %Y /etc/docker/daemon.json"))
    assert 0 <= started - written < RESTART_WINDOW_S, (
        f"docker (re)started {started - written} s after daemon.json was last written: "
        "a restart without a change (or the change not in effect)"
    )


def test_runtime_registered_only_on_gpu_nodes(host):
    config = _daemon_json(host)
    runtimes = json.loads(host.check_output("docker info --format '{{json .Runtimes}}'"))
    if not _gpus(host):
        assert "gpunode" not in config.get("runtimes", {})
        assert "gpunode" not in runtimes
        assert not host.file("/etc/gpunode/runtime.toml").exists
        assert not host.file("/etc/cdi/nvidia.yaml").exists
        assert not host.file("/etc/systemd/system/gpunode-refresh.service").exists
        return
    assert config["runtimes"]["gpunode"]["path"] == "/usr/local/bin/gpunode-container-runtime"
    assert "gpunode" in runtimes  # the running engine knows it: it was restarted
    cdi = bool(_vars(host).get("gpu_container_runtime_docker_cdi"))
    assert config.get("features", {}).get("cdi", False) is cdi
    assert host.file("/etc/gpunode/runtime.toml").exists


def test_cdi_spec_and_refresh_units(host):
    gpus = _gpus(host)
    if not gpus:
        pytest.skip("node without GPUs: checked by test_runtime_registered_only_on_gpu_nodes")
    spec = host.file("/etc/cdi/nvidia.yaml")
    assert spec.exists
    text = spec.content_string
    assert "kind: nvidia.com/gpu" in text
    inventory = json.loads(host.check_output("/usr/local/bin/gpunode inventory --json"))
    mig_mode = {g["uuid"] for g in inventory["gpus"] if g.get("mig_mode")}
    for gpu in gpus:
        # a GPU in MIG mode is in the spec as its MIG devices only (tests/infra/test_mig.py)
        assert (gpu.uuid in text) is (gpu.uuid not in mig_mode), gpu.uuid
    assert host.service("gpunode-refresh.service").is_enabled
    assert host.service("gpunode-refresh.path").is_enabled
    assert host.service("gpunode-refresh.path").is_running
    # the unit really rewrites the cache and the spec
    host.check_output(
        "rm -f /var/cache/gpunode/inventory.json && systemctl start gpunode-refresh.service"
    )
    assert host.file("/var/cache/gpunode/inventory.json").exists


def test_gpu_container_sees_the_right_gpus(host):
    gpus = _gpus(host)
    if not gpus:
        pytest.skip("node without GPUs")
    run = f"docker run --rm --runtime gpunode --gpus {{}} {WORKLOAD} ls /proc/driver/nvidia/gpus"
    assert host.check_output(run.format("all")).split() == sorted(g.bus_id.procfs for g in gpus)
    one = host.check_output(run.format(f"'\"device={len(gpus) - 1}\"'")).split()
    assert one == [gpus[-1].bus_id.procfs]
    if _vars(host).get("gpu_container_runtime_docker_cdi"):
        cdi = host.check_output(
            f"docker run --rm --device nvidia.com/gpu=0 {WORKLOAD} ls /proc/driver/nvidia/gpus"
        )
        assert cdi.split() == [gpus[0].bus_id.procfs]


@pytest.mark.skipif(not CORE_ROLES, reason="nvidia_driver/cuda_toolkit not merged yet")
def test_gpu_containers_are_served_by_the_resident_service(host):
    """gpunode-runtime-resident.service (gpu_container_runtime_resident, on by default)
    runs, root's and 0700, and serves Docker's GPU creates: the runtime log's line for
    a fresh one says so."""
    if not _gpus(host):
        pytest.skip("node without GPUs: the role does not run there")
    service = host.service("gpunode-runtime-resident.service")
    assert service.is_enabled and service.is_running
    d = host.file("/run/gpunode/resident")
    assert (d.user, d.mode) == ("root", 0o700)
    pid, start = host.file("/run/gpunode/resident/pid").content_string.split()
    stat = host.file(f"/proc/{pid}/stat").content_string
    assert stat[stat.rindex(")") + 2 :].split()[19] == start  # what the stages check
    cid = host.check_output(f"docker create --runtime gpunode --gpus 1 {WORKLOAD} true")
    try:
        host.check_output(f"docker start -a {cid}")
        line = host.check_output(f"grep -F '/{cid}: GPUs [' /var/log/gpunode-runtime.log")
    finally:
        host.run(f"docker rm -f {cid}")
    assert line.endswith(", served by the resident service"), line


def test_driver_and_cuda_packages_pinned_and_held(host):
    v = _vars(host)
    held = set(host.check_output("apt-mark showhold").split())
    if not _gpus(host):
        assert not [p for p in held if "nvidia" in p or p.startswith("cuda")]
        assert not host.package("libnvidia-ml1").is_installed
        return
    pkg = host.package("libnvidia-ml1")
    assert pkg.is_installed
    assert pkg.version.startswith(v["nvidia_driver_version"] + "-")
    assert "libnvidia-ml1" in held
    inv = json.loads(host.check_output("gpunode inventory --json"))
    assert inv["driver_version"] == v["nvidia_driver_version"]


def test_containerd_registration_when_asked(host):
    v = _vars(host)  # the role's default: gpu_container_runtime_kubernetes
    if not v.get("gpu_container_runtime_containerd", v.get("gpu_container_runtime_kubernetes")):
        assert not host.file("/etc/containerd/conf.d/99-gpunode.toml").exists
        return
    assert host.file("/etc/containerd/conf.d/99-gpunode.toml").exists
    assert (
        "/etc/containerd/conf.d/*.toml" in host.file("/etc/containerd/config.toml").content_string
    )
    dump = host.check_output("containerd config dump")
    assert "/usr/local/bin/gpunode-container-runtime" in dump
    assert host.service("containerd").is_running
