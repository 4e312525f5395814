"""`gpunode validate` on a simulated a100x4 node: healthy, it passes; each of the
simulator's faults, applied to GPU 2, shows as a failed or warning check on exactly that GPU
while every other GPU passes; its textfile is accepted by promtool.

The node has what provisioning leaves: gpunode's runtime as Docker's default, and the driver
and CUDA packages (stubs with the real package names and versions: Debian 12's
libnvidia-ml1 535.261.03-1 and libcudart11.0 11.8.89~11.8.0-5~deb12u1).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpunode.sim import cluster
from gpunode.sim.docker import docker
from gpunode.sim.profiles import FAULTS

from .conftest import Node, start_nodes

pytestmark = pytest.mark.integration

PROFILES = Path(__file__).resolve().parents[2] / "src" / "gpunode" / "data" / "profiles"
FAULTY = 2  # the GPU every fault is put on
A100_SKIPS = {"gpu.fabric_manager"}  # checks an A100 skips (no fabric in NVML before Hopper)
EXPECT = "--expect-gpus 4 --driver-pin 535.261.03 --cuda 11.8 --runtime-default"
STUB = (
    "set -e; d=$(mktemp -d); mkdir $d/DEBIAN; "
    "printf 'Package: {pkg}\\nVersion: {ver}\\nArchitecture: amd64\\nMaintainer: t <t@t>\\n"
    "Description: test stub\\n' > $d/DEBIAN/control; dpkg-deb -b $d /tmp/{pkg}.deb >/dev/null; "
    "dpkg -i /tmp/{pkg}.deb >/dev/null"
)


@pytest.fixture(scope="session")
def vnode(artifacts, image_tags) -> Node:
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    spec = cluster.NodeSpec(f"{prefix}-validate", "bookworm", "a100x4")
    start_nodes([spec], artifacts, image_tags)
    node = Node(spec.name, spec.release, "")
    node.sh("gpunode runtime configure docker --set-as-default --json")
    node.sh("gpunode runtime refresh --json")  # the cache, and the driver nodes' /dev/char links
    node.sh(
        "systemctl restart docker && for i in $(seq 60); do docker info >/dev/null 2>&1 "
        "&& break; sleep 0.5; done"
    )
    node.sh(STUB.format(pkg="libnvidia-ml1", ver="535.261.03-1"))
    node.sh(STUB.format(pkg="libcudart11.0", ver="11.8.89~11.8.0-5~deb12u1"))
    yield node
    if not os.environ.get("GPUNODE_KEEP_NODES"):
        cluster.down_names([spec.name], log=lambda *_: None)


def validate(node: Node, args: str = EXPECT) -> tuple[int, dict]:
    proc = node.sh(f"gpunode validate --json {args}", check=False, timeout=300)
    assert "Traceback" not in proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def by_gpu(result: dict) -> dict:
    out: dict = {}
    for c in result["checks"]:
        out.setdefault(c["gpu"], {})[c["id"]] = c
    return out


def test_healthy_node_passes_every_check(vnode, tmp_path):
    vnode.apply("a100x4")
    vnode.sh("mkdir -p /var/lib/gpunode-textfile")
    rc, res = validate(vnode, f"{EXPECT} --textfile /var/lib/gpunode-textfile/gpunode.prom")
    assert res["schema"] == "gpunode.validate/v1"
    bad = [c for c in res["checks"] if c["status"] not in ("pass", "skip")]
    assert bad == [] and rc == 0
    skipped = {c["id"]: c["detail"] for c in res["checks"] if c["status"] == "skip"}
    assert "no CUDA-capable device" in skipped.pop("container.cuda")  # the mock has no CUDA
    assert "no CDI spec" in skipped.pop("node.drift_cdi")  # this node uses no CDI
    assert "not set up for gpunode" in skipped.pop("node.drift_containerd")  # Docker only
    # NVML reports no NVSwitch fabric on A100s
    assert "no NVSwitch fabric" in skipped.pop("gpu.fabric_manager")
    # an HGX A100 4-GPU board has no NVSwitch: no fabric manager to check
    assert "no fabric manager needed" in skipped.pop("node.fabric_manager")
    assert "no MIG layout expected" in skipped.pop("mig.layout")  # none in this inventory
    assert skipped == {}
    node_checks = {c["id"]: c for c in res["checks"] if c["id"].startswith("node.")}
    assert node_checks["node.dev_char"]["status"] == "pass"
    assert node_checks["node.drift_cache"]["status"] == "pass"
    cuda = next(c for c in res["checks"] if c["id"] == "container.cuda")
    assert "no CUDA-capable device" in cuda["detail"]
    grid = by_gpu(res)
    assert sorted(k for k in grid if k is not None) == [0, 1, 2, 3]
    for gpu in range(4):
        assert {c["status"] for k, c in grid[gpu].items() if k not in A100_SKIPS} == {"pass"}
    assert res["versions"]["driver_installed"] == "535.261.03"
    assert res["versions"]["cuda_installed"] == ["11.8"]
    assert [g["uuid"] for g in res["gpus"]] == [g["uuid"] for g in _profile("a100x4")["gpus"]]
    # the textfile: written, and valid for Prometheus' own checker
    prom = tmp_path / "gpunode.prom"
    docker(["cp", f"{vnode.name}:/var/lib/gpunode-textfile/gpunode.prom", str(prom)])
    text = prom.read_text()
    assert 'gpunode_check_status{node="' in text and 'check="gpu.ecc_uncorrectable",gpu="2"' in text
    lint = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=text,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_repeated_validate_reuses_the_probe_image(vnode):
    _, first = validate(vnode)
    _, second = validate(vnode)
    for res in (first, second):
        image = next(c for c in res["checks"] if c["id"] == "container.image")
        assert image["status"] == "pass"
    assert (
        "cached"
        in second["checks"][[c["id"] for c in second["checks"]].index("container.image")]["detail"]
    )
    tags = vnode.sh("docker images --format '{{.Tag}}' gpunode-validate-probe").stdout.split()
    assert len(tags) == 1


def _profile(name: str) -> dict:
    return yaml.safe_load((PROFILES / f"{name}.yaml").read_text())


def validate_with(node: Node, tmp_path: Path, profile: dict) -> tuple[int, dict]:
    """Validate the node with ``profile`` applied, then put the healthy a100x4 back."""
    path = tmp_path / f"{profile['name']}.yaml"
    path.write_text(yaml.safe_dump(profile))
    try:
        node.apply(str(path))
        return validate(node)
    finally:
        node.apply("a100x4")


# the faults an a100x4 GPU can carry (the link faults: test_validate_health.py); what each
# must show on GPU 2 is its entry in the simulator's one fault table (profiles.FAULTS)
A100_FAULTS = ["fallen_off_bus", "ecc_uncorrectable", "retired_pages_pending",
               "row_remap_failure", "persistence_off", "device_node_missing",
               "xid_application_error", "xid_error"]  # fmt: skip


@pytest.mark.parametrize("fault", sorted(A100_FAULTS))
def test_fault_shows_on_exactly_that_gpu(vnode, tmp_path, fault):
    profile = _profile("a100x4")
    profile["name"] = f"a100x4-{fault.replace('_', '-')}"
    profile["gpus"][FAULTY]["faults"] = [fault]
    rc, res = validate_with(vnode, tmp_path, profile)
    shows = FAULTS[fault].shows
    checks = list(shows)
    grid = by_gpu(res)
    for check, status in shows.items():
        assert grid[FAULTY][check]["status"] == status, grid[FAULTY][check]
        assert grid[FAULTY][check]["uuid"] == profile["gpus"][FAULTY]["uuid"]
    not_passing = [c for gpu, cs in grid.items() if gpu is not None
                   for c in cs.values() if c["status"] not in ("pass",)
                   and not (c["id"] in A100_SKIPS and c["status"] == "skip")]  # fmt: skip
    # only GPU 2 has anything but pass; on it, only the fault's check fails or warns
    assert {c["gpu"] for c in not_passing} == {FAULTY}
    assert [c["id"] for c in not_passing if c["status"] in ("fail", "warn")] == checks
    node_level = [c for c in grid[None].values() if c["status"] not in ("pass", "skip")]
    assert node_level == []  # the count, versions, engine and isolation still pass
    assert rc == (1 if "fail" in shows.values() else 0)


def test_old_module_loaded_after_a_package_upgrade(vnode, tmp_path):
    """The package is 535.261.03 but the loaded module (and NVML) still 535.247.01."""
    profile = _profile("a100x4")
    profile["name"] = "a100x4-old-module"
    profile["driver"]["version"] = "535.247.01"
    rc, res = validate_with(vnode, tmp_path, profile)
    failed = [c for c in res["checks"] if c["status"] == "fail"]
    assert [c["id"] for c in failed] == ["driver.version_match"] and rc == 1
    assert (
        "535.247.01, older than the installed package libnvidia-ml1 535.261.03"
        in failed[0]["detail"]
    )
    assert res["versions"]["driver_loaded"] == "535.247.01"
    assert res["versions"]["driver_installed"] == "535.261.03"


def test_bad_input_and_unwritable_textfile_dir(vnode):
    proc = vnode.sh("gpunode validate --expect-gpus four", check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "gpunode: error: --expect-gpus: 'four' is not a GPU count; expected an integer >= 0"
    ]
    # a read-only textfile directory: one line, exit 2, the previous file kept as it was
    vnode.sh("set -e; mkdir -p /var/lib/valro; mount -t tmpfs tmpfs /var/lib/valro; "
             "echo 'old 1' > /var/lib/valro/gpunode.prom; mount -o remount,ro /var/lib/valro")  # fmt: skip
    try:
        proc = vnode.sh(f"gpunode validate {EXPECT} --textfile /var/lib/valro/gpunode.prom",
                        check=False)  # fmt: skip
        assert proc.returncode == 2
        assert proc.stderr.strip() == (
            "gpunode: error: --textfile /var/lib/valro/gpunode.prom: "
            "directory /var/lib/valro is not writable"
        )
        assert vnode.sh("cat /var/lib/valro/gpunode.prom").stdout == "old 1\n"
    finally:
        vnode.sh("umount /var/lib/valro", check=False)


def test_node_without_a_docker_engine(vnode):
    vnode.sh("systemctl stop docker.socket docker")
    try:
        proc = vnode.sh(f"gpunode validate --json {EXPECT}", check=False)
    finally:
        vnode.sh("systemctl start docker && for i in $(seq 60); do docker info >/dev/null 2>&1 "
                 "&& break; sleep 0.5; done")  # fmt: skip
    assert "Traceback" not in proc.stderr and proc.returncode == 1
    res = json.loads(proc.stdout)
    status = {c["id"]: c for c in res["checks"] if c["gpu"] is None}
    assert status["engine.active"]["status"] == "fail"
    assert status["engine.active"]["detail"].startswith("`docker info` failed")
    for cid in ("container.image", "container.isolation", "container.cuda"):
        assert status[cid]["status"] == "skip"


def test_podman_engine(vnode):
    """The same smoke test through podman (it runs gpunode's runtime by path)."""
    rc, res = validate(vnode, "--engine podman --expect-gpus 4")
    status = {c["id"]: c for c in res["checks"] if c["gpu"] is None}
    assert rc == 0
    assert status["engine.active"]["detail"].startswith("podman ")
    assert status["container.isolation"]["status"] == "pass"
    assert status["engine.daemon_json"]["status"] == "skip"


def test_a_missing_dev_char_link_warns_and_refresh_makes_it(vnode):
    vnode.apply("a100x4")
    vnode.sh("gpunode runtime refresh --json")
    vnode.sh("rm /dev/char/195:1")
    rc, res = validate(vnode)
    check = next(c for c in res["checks"] if c["id"] == "node.dev_char")
    assert check["status"] == "warn" and check["detail"].startswith("/dev/char/195:1 -> /dev/nvidia1")
    assert rc == 0  # a warning: the containers still work until the next daemon-reload
    out = json.loads(vnode.sh("gpunode runtime refresh --json").stdout)
    assert out["dev_char_links"] == ["/dev/char/195:1"]
    assert vnode.sh("readlink /dev/char/195:1").stdout.strip() == "../nvidia1"
    _, res = validate(vnode)
    assert next(c for c in res["checks"] if c["id"] == "node.dev_char")["status"] == "pass"


WATCH = """
import json, subprocess
from gpunode.nvidia.xidevents import XidWatch
with XidWatch() as w:
    subprocess.run(["gpunode-sim-xid", "0000:47:00.0", "79"], check=True, capture_output=True)
    print(json.dumps(w.drain()))
"""


def test_a_live_xid_reaches_nvml_watchers_and_the_kernel_log(vnode, tmp_path):
    """The simulator raises an Xid as the driver does: gpunode's NVML watch (the installed
    product, in the node) gets the event, and validate then fails that GPU's gpu.xid from the
    kernel log, naming the code; re-applying the profile is a fresh boot's log."""
    vnode.apply("a100x4")
    bus = _profile("a100x4")["gpus"][FAULTY]["bus_id"]
    assert bus == "0000:47:00.0"
    vnode.sh(
        "printf '#!/bin/sh\\nexec env PYTHONPATH=/opt/gpunode-sim python3 -m gpunode sim "
        "xid-local \"$@\"\\n' > /usr/local/bin/gpunode-sim-xid && chmod +x /usr/local/bin/gpunode-sim-xid"
    )
    (tmp_path / "watch.py").write_text(WATCH)
    docker(["cp", str(tmp_path / "watch.py"), f"{vnode.name}:/tmp/watch.py"])
    events = json.loads(vnode.sh("/opt/gpunode/bin/python /tmp/watch.py").stdout)
    assert events == [["00000000:47:00.0", 79, None, None]]
    try:
        rc, res = validate(vnode)
        check = by_gpu(res)[FAULTY]["gpu.xid"]
        assert check["status"] == "fail" and check["detail"].startswith("Xid 79; last 79 (bus)")
        others = [c for g, cs in by_gpu(res).items() if g not in (None, FAULTY) for c in cs.values()
                  if c["id"] == "gpu.xid"]  # fmt: skip
        assert {c["status"] for c in others} == {"pass"} and rc == 1
    finally:
        vnode.apply("a100x4")
    assert "Xid" not in vnode.sh("cat /dev/kmsg").stdout
