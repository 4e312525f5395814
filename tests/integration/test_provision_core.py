"""The core provisioning roles on a simulated Debian 12 node (a100x4, driver 535.261.03,
CUDA 11.8 with the `runtime` package set): converge, zero changed on the second run and in
check mode, the matching-version check against a loaded module older than the packages,
bad inventory values failing in preflight before any change, and a GPU-less host skipped.

Every run is what a user of the collection does (issue 36): the playbook and inventory in a
temporary directory with no ansible.cfg, the roles named gpunode.gpunode.<role> and found
in the collection that scripts/collection built from this tree and installed
(conftest.collections_path: ansible-galaxy collection build + install).

Real Debian packages come from the archive; the node's /var/cache/apt/archives is the host
directory ~/.cache/gpunode/apt/bookworm, so later runs download nothing (about 12 MB the
first time). Wall time on this 2-core machine (shared with other runs): 6-8.5 min, of
which the converge test (check mode, converge, second run, check mode: four playbook
runs) takes 4-4.5 min and is marked `slow`; without it the mismatch test converges the node itself (~1 min more).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpunode.sim import cluster

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = ROOT / "tests/integration/playbooks/provision-core.yml"
GROUP_VARS = {
    "nvidia_driver_kernel_module": False,  # simulated node: userspace packages only
    "nvidia_driver_branch": "535",
    "nvidia_driver_version": "535.261.03",
    "cuda_toolkit_versions": ["11.8"],
    "cuda_toolkit_package_set": "runtime",
}


@pytest.fixture(scope="module")
def prov_node(artifacts, image_tags):
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    spec = cluster.NodeSpec(f"{prefix}-prov12", "bookworm", "a100x4")
    cluster.down_names([spec.name], log=lambda *_: None)
    cluster.start_node(spec, image_tags["node-bookworm"], log=lambda *_: None)  # apt cache mounted
    cluster.wait_booted(spec.name)
    cluster.tune_node(spec.name)
    cluster.install_gpunode(spec.name, artifacts, log=lambda *_: None)
    cluster.copy_mock(spec.name, artifacts)
    cluster.apply(spec.name, spec.profile, log=lambda *_: None)
    yield spec.name
    if not os.environ.get("GPUNODE_KEEP_NODES"):
        cluster.down_names([spec.name], log=lambda *_: None)


def sh(node: str, script: str) -> str:
    proc = subprocess.run(
        ["docker", "exec", node, "sh", "-c", script], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


COLLECTIONS: Path | None = None  # the installed collection (the fixture below)


@pytest.fixture(scope="module", autouse=True)
def installed_collection(collections_path):
    global COLLECTIONS
    COLLECTIONS = collections_path


def play(node: str, tmp_path: Path, *extra: str, **overrides) -> subprocess.CompletedProcess:
    inventory = {
        "all": {
            "vars": {
                "ansible_connection": "community.docker.docker",
                "ansible_python_interpreter": "/usr/bin/python3",
            },
            "children": {"gpu_nodes": {"hosts": {node: {}}, "vars": {**GROUP_VARS, **overrides}}},
        }
    }
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory))
    playbook = tmp_path / "provision.yml"
    playbook.write_text(PLAYBOOK.read_text())
    assert not (tmp_path / "ansible.cfg").exists()
    env = {k: v for k, v in os.environ.items() if k != "ANSIBLE_CONFIG"}
    env["ANSIBLE_COLLECTIONS_PATH"] = str(COLLECTIONS)
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inv),
            str(playbook),
            *extra,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


def changed_tasks(stdout: str) -> set[str]:
    """Names of the tasks that reported a change ("role : task")."""
    out, task = set(), ""
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line[6 : line.index("]")]
        elif line.startswith("changed:"):
            out.add(task)
    return out


def failed_task(stdout: str) -> str:
    task = ""
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line[6 : line.index("]")]
        elif line.startswith("fatal:") or line.startswith("failed:"):
            return task
    return ""


def recap(proc: subprocess.CompletedProcess, node: str) -> dict[str, int]:
    m = re.search(rf"^{re.escape(node)}\s*:\s*(.*)$", proc.stdout, re.M)
    assert m, proc.stdout[-3000:] + proc.stderr[-2000:]
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(1))}


@pytest.mark.slow
def test_converge_idempotent_and_check_mode(prov_node, tmp_path):
    # check mode on the fresh node: the plan is shown, nothing is installed
    dry = play(prov_node, tmp_path, "--check", "--diff")
    assert dry.returncode == 0, dry.stdout[-4000:] + dry.stderr[-2000:]
    assert "install nvidia-smi=535.261.03-1 libcuda1=535.261.03-1 libnvidia-ml1=535.261.03-1" in (
        re.sub(r"\s+", " ", dry.stdout)
    )
    assert "gpunode.gpunode.nvidia_driver : Install the driver packages (apt)" in changed_tasks(
        dry.stdout
    )
    assert sh(
        prov_node, "dpkg-query -W -f '${db:Status-Status}' nvidia-smi 2>/dev/null || true"
    ) in (
        "",
        "not-installed",
    )

    first = play(prov_node, tmp_path)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert recap(first, prov_node)["changed"] > 0
    # three real things agree: NVML (the mock, kept by the dpkg-divert), dpkg, the pin
    assert (
        "driver 535.261.03: NVML, loaded module and package libnvidia-ml1 agree with the pin "
        "535.261.03" in first.stdout.replace("\n        ", " ")
    )
    status = sh(
        prov_node,
        "dpkg-query -W -f '${Package} ${Version} ${Status}\\n' nvidia-smi libcuda1 libnvidia-ml1 "
        "libcudart11.0",
    )
    assert sorted(status.splitlines()) == [
        "libcuda1 535.261.03-1 hold ok installed",
        "libcudart11.0 11.8.89~11.8.0-5~deb12u1 hold ok installed",
        "libnvidia-ml1 535.261.03-1 hold ok installed",
        "nvidia-smi 535.261.03-1 hold ok installed",
    ]
    assert "Pin: version 535.261.03-*" in sh(
        prov_node, "cat /etc/apt/preferences.d/gpunode-nvidia-driver"
    )
    assert "CUDA_HOME=/usr/lib/nvidia-cuda-toolkit" in sh(
        prov_node, "cat /etc/profile.d/gpunode-cuda.sh"
    )
    assert '"driver_version": "535.261.03"' in sh(prov_node, "gpunode inventory --json")

    second = play(prov_node, tmp_path)
    assert second.returncode == 0, second.stdout[-4000:]
    assert recap(second, prov_node)["changed"] == 0, second.stdout[-6000:]

    check = play(prov_node, tmp_path, "--check", "--diff")
    assert check.returncode == 0, check.stdout[-4000:]
    assert recap(check, prov_node)["changed"] == 0, check.stdout[-6000:]


def test_loaded_module_older_than_package_fails_with_fix(prov_node, tmp_path):
    """'Package upgraded, old module still loaded': the profile's driver (what NVML and
    /proc report) is 535.247.01 while dpkg has 535.261.03."""
    if "535.261.03" not in sh(prov_node, "dpkg-query -W -f '${Version}' libnvidia-ml1 || true"):
        converge = play(prov_node, tmp_path)  # when the slow converge test was deselected
        assert converge.returncode == 0, converge.stdout[-4000:]
    profile = yaml.safe_load((ROOT / "src/gpunode/data/profiles/a100x4.yaml").read_text())
    profile["name"] = "a100x4-old-module"
    profile["driver"]["version"] = "535.247.01"
    path = tmp_path / "a100x4-old-module.yaml"
    path.write_text(yaml.safe_dump(profile))
    cluster.apply(prov_node, str(path), log=lambda *_: None)
    try:
        proc = play(
            prov_node, tmp_path, "--tags", "gpu_preflight,nvidia_driver_plan,nvidia_driver_check"
        )
    finally:
        cluster.apply(prov_node, "a100x4", log=lambda *_: None)
    assert proc.returncode != 0
    out = proc.stdout.replace("\n", " ")
    assert (
        "the loaded kernel module is 535.247.01, older than the installed package libnvidia-ml1 "
        "535.261.03: reboot the node, or reload the module" in re.sub(r"\s+", " ", out)
    ), proc.stdout[-4000:]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            {"cuda_toolkit_versions": ["12.7"]},
            "cuda_toolkit_versions: CUDA '12.7' is not a known release; accepted:",
        ),
        (
            {"nvidia_driver_version": "535.26x"},
            "nvidia_driver_version: '535.26x' is not a driver version",
        ),
        (
            {"nvidia_driver_version": "535.999.01"},
            "nvidia_driver_version: 535.999.01 is not available from this node's package sources "
            "for nvidia-smi; available: 535.309.01, 535.261.03",
        ),
        (
            {"nvidia_driver_branch": "550", "nvidia_driver_version": ""},
            "nvidia_driver_branch: 550 is not available from this node's package sources",
        ),
        (
            {"cuda_toolkit_versions": ["12.4"]},
            "cuda_toolkit_versions: CUDA 12.4 needs NVIDIA driver >= 550.54.14 (strict policy); "
            "driver is 535.261.03",
        ),
    ],
)
def test_bad_inventory_values_fail_in_preflight(prov_node, tmp_path, overrides, message):
    proc = play(prov_node, tmp_path, **overrides)
    assert proc.returncode != 0
    assert message in re.sub(r"\s+", " ", proc.stdout), proc.stdout[-4000:]
    assert recap(proc, prov_node)["failed"] == 1
    # it failed in gpu_preflight; the only thing written before is gpunode's wheel (when new)
    assert failed_task(proc.stdout).startswith(
        (
            "gpunode.gpunode.gpu_preflight : Report invalid inventory values",
            "gpunode.gpunode.gpu_preflight : Check the preflight",
        )
    ), proc.stdout[-3000:]
    assert changed_tasks(proc.stdout) <= {
        "gpunode.gpunode.gpunode_install : Copy the wheels to the node"
    }


def test_gpu_less_host_is_skipped(prov_node, tmp_path):
    cluster.apply(prov_node, "nogpu", log=lambda *_: None)
    try:
        proc = play(prov_node, tmp_path)
    finally:
        cluster.apply(prov_node, "a100x4", log=lambda *_: None)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "no NVIDIA GPU; nvidia_driver skipped" in proc.stdout
    assert "no NVIDIA GPU; cuda_toolkit skipped" in proc.stdout
    assert not {
        t
        for t in changed_tasks(proc.stdout)
        if t.startswith(("gpunode.gpunode.nvidia_driver", "gpunode.gpunode.cuda_toolkit"))
    }
    plan = proc.stdout.split(
        "TASK [gpunode.gpunode.nvidia_driver : Ask gpunode for the driver plan", 1
    )[1]
    assert plan.split("TASK [", 1)[0].strip().splitlines()[-1].startswith("skipping:")
