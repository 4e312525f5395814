"""`gpunode validate` on a simulated MIG node (profile a100x2-mig: GPU 0 in MIG mode with
3g.40gb, 2g.20gb and 1g.10gb, GPU 1 MIG-capable with MIG off): the layout matches the
mig-parted config the inventory expects, every MIG device requested as ``<gpu>:<n>`` and by
UUID is seen alone in its container; a wrong layout and a container given the wrong cap node
fail, on exactly that GPU or MIG device. The report shows the MIG devices under their GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpunode.sim import cluster
from gpunode.sim.docker import docker

from .conftest import Node, start_nodes

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PROFILE = "a100x2-mig"
CONFIG = "/etc/gpunode-mig.yaml"
MIG_CONFIG = """\
version: v1
mig-configs:
  as-profiled:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}
    - devices: [1]
      mig-enabled: false
  all-1g:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""
EXPECT = f"--expect-gpus 2 --expect-mig-config {CONFIG}"


@pytest.fixture(scope="module")
def mnode(artifacts, image_tags) -> Node:
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    spec = cluster.NodeSpec(f"{prefix}-validate-mig", "bookworm", PROFILE)
    start_nodes([spec], artifacts, image_tags)
    node = Node(spec.name, spec.release, "")
    node.sh("gpunode runtime configure docker --set-as-default --json")
    # as the gpu_mig role after a layout change: the runtime's inventory and the /dev/char
    # links of the new cap nodes (node.dev_char)
    node.sh("gpunode runtime refresh")
    node.sh(
        "systemctl restart docker && for i in $(seq 60); do docker info >/dev/null 2>&1 "
        "&& break; sleep 0.5; done"
    )
    node.sh(f"cat > {CONFIG} <<'EOF'\n{MIG_CONFIG}EOF")
    yield node
    if not os.environ.get("GPUNODE_KEEP_NODES"):
        cluster.down_names([spec.name], log=lambda *_: None)


def validate(node: Node, args: str) -> tuple[int, dict]:
    proc = node.sh(f"gpunode validate --json {args}", check=False, timeout=600)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def checks(res: dict, cid: str) -> list[dict]:
    return [c for c in res["checks"] if c["id"] == cid]


def test_inventory_lists_the_mig_devices_under_their_gpu(mnode):
    inv = mnode.json("gpunode inventory --json")
    assert inv["schema"] == "gpunode.inventory/v1"
    g0, g1 = inv["gpus"]
    assert (g0["mig_mode"], g0["mig_mode_pending"], g1["mig_mode"]) == (True, True, False)
    assert [m["index"] for m in g0["mig_devices"]] == [0, 1, 2]
    assert sorted(m["profile"] for m in g0["mig_devices"]) == ["1g.10gb", "2g.20gb", "3g.40gb"]
    assert all(m["uuid"].startswith("MIG-") for m in g0["mig_devices"])
    assert g1["mig_devices"] == []
    text = mnode.sh("gpunode inventory").stdout
    assert "MIG on, 3 MIG device(s)" in text and "       0:2  " in text


def test_mig_node_passes_layout_and_isolation_per_mig_device(mnode, tmp_path):
    rc, res = validate(mnode, f"{EXPECT} --expect-mig-name as-profiled")
    bad = [c for c in res["checks"] if c["status"] not in ("pass", "skip")]
    assert bad == [] and rc == 0, bad
    layout = checks(res, "mig.layout")
    assert [(c["gpu"], c["status"]) for c in layout] == [(0, "pass"), (1, "pass")]
    iso = checks(res, "mig.isolation")
    devices = res["gpus"][0]["mig"]
    assert [(c["gpu"], c["mig"], c["uuid"], c["status"]) for c in iso] == [
        (0, m["index"], m["uuid"], "pass") for m in devices
    ]
    for c, m in zip(iso, devices, strict=True):
        assert c["detail"].startswith(f"0:{m['index']} and {m['uuid']} ({m['profile']})")
        assert "cap nodes" in c["detail"] and "not compared" not in c["detail"]
    assert res["gpus"][0]["mig_enabled"] is True and res["gpus"][1]["mig_enabled"] is False
    iso_all = checks(res, "container.isolation")[0]
    assert iso_all["status"] == "pass" and res["gpus"][1]["uuid"] in iso_all["detail"]
    # the report of this node: MIG devices under their GPU (HTML, Markdown, JUnit)
    results = tmp_path / "results"
    results.mkdir()
    (results / "mig.json").write_text(json.dumps(res))
    out = tmp_path / "reports"
    proc = subprocess.run([str(BIN / "gpunode"), "report", "--quiet", "--output", str(out),
                           str(results)], capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    page = (out / "index.html").read_text()
    # a passing node is shown compact (report/html.py): its GPU table lists each MIG device
    # under its GPU, by position and UUID
    for m in devices:
        assert f"<tr><td>MIG 0:{m['index']}</td>" in page and m["uuid"] in page, m
    assert f"{len(devices)} MIG device(s)" in page
    assert "mig.isolation[gpu0:2]" in (out / "junit.xml").read_text()
    assert "## MIG devices" in (out / "summary.md").read_text()
    chromium = shutil.which("chromium")
    if chromium:
        shot = ROOT / "build" / "artifacts" / "report-mig-node.png"
        shot.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                        "--window-size=1500,700", f"--screenshot={shot}",
                        (out / "index.html").as_uri()], capture_output=True, timeout=120,
                       check=True)  # fmt: skip


def test_other_layout_expected_fails_on_each_gpu(mnode):
    rc, res = validate(mnode, f"{EXPECT} --expect-mig-name all-1g")
    layout = {c["gpu"]: c for c in checks(res, "mig.layout")}
    assert rc == 1
    assert layout[0]["status"] == "fail"
    assert layout[0]["detail"].startswith(
        "found 1x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb; config 'all-1g'"
    )
    assert f"gpunode mig apply --config-file {CONFIG} --config all-1g" in layout[0]["detail"]
    assert layout[1]["status"] == "fail" and layout[1]["detail"].startswith("MIG off, config")
    assert {c["status"] for c in checks(res, "mig.isolation")} == {"pass"}


def test_no_layout_expected_skips_with_the_reason(mnode):
    rc, res = validate(mnode, "--expect-gpus 2")
    (layout,) = checks(res, "mig.layout")
    assert (layout["gpu"], layout["status"]) == (None, "skip")
    assert "--expect-mig-config FILE --expect-mig-name NAME" in layout["detail"]
    assert rc == 0


def test_a_config_name_alone_reads_the_gpu_mig_roles_file(mnode):
    mnode.sh(f"mkdir -p /etc/gpunode && cp {CONFIG} /etc/gpunode/mig-config.yaml")
    try:
        rc, res = validate(mnode, "--expect-gpus 2 --expect-mig-name all-1g")
    finally:
        mnode.sh("rm -f /etc/gpunode/mig-config.yaml")
    layout = {c["gpu"]: c for c in checks(res, "mig.layout")}
    assert rc == 1 and "config 'all-1g' (/etc/gpunode/mig-config.yaml)" in layout[0]["detail"]


def test_wrong_cap_node_fails_isolation_of_that_mig_device(mnode):
    """Break isolation on purpose: the node's cap node of MIG device 0:1's GPU instance is
    replaced by one with another minor (MIG device 0:0's GI), so the runtime injects the
    wrong capability. NVML in the container then does not show 0:1: its check fails, the
    other MIG devices' pass."""
    inv = mnode.json("gpunode inventory --json")
    minor = inv["gpus"][0]["minor"]
    devs = inv["gpus"][0]["mig_devices"]

    def gi_minor(m):
        path = f"/proc/driver/nvidia/capabilities/gpu{minor}/mig/gi{m['gi']}/access"
        text = mnode.sh(f"cat {path}").stdout
        return int(text.split("DeviceFileMinor:")[1].split()[0])

    victim, other = gi_minor(devs[1]), gi_minor(devs[0])
    node = f"/dev/nvidia-caps/nvidia-cap{victim}"
    major = int(mnode.sh(f"stat -c %t {node}").stdout.strip(), 16)
    mnode.sh(f"mv {node} {node}.saved && mknod -m 444 {node} c {major} {other}")
    try:
        rc, res = validate(mnode, f"{EXPECT} --expect-mig-name as-profiled")
    finally:
        mnode.sh(f"rm -f {node} && mv {node}.saved {node}")
    iso = {c["mig"]: c for c in checks(res, "mig.isolation")}
    assert rc == 1
    assert iso[1]["status"] == "fail", iso[1]
    assert "0:1: " in iso[1]["detail"] and "NVML" in iso[1]["detail"]
    assert iso[0]["status"] == "pass" and iso[2]["status"] == "pass"
    # and once the node is whole again, it passes
    rc, res = validate(mnode, f"{EXPECT} --expect-mig-name as-profiled")
    assert rc == 0 and {c["status"] for c in checks(res, "mig.isolation")} == {"pass"}


def test_access_file_naming_the_config_cap_fails_isolation(mnode):
    """Break isolation the other way: the access file of MIG device 0:1's GPU instance names
    the config capability's minor, so a runtime reading it gives its containers the cap that
    shows every MIG device. NVML in the container then lists all three: 0:1 fails."""
    inv = mnode.json("gpunode inventory --json")
    gpu = inv["gpus"][0]
    dev = gpu["mig_devices"][1]
    path = f"/proc/driver/nvidia/capabilities/gpu{gpu['minor']}/mig/gi{dev['gi']}/access"
    mnode.sh(f"cp {path} /tmp/access.saved && printf 'DeviceFileMinor: 1\\nDeviceFileMode: "
             f"292\\nDeviceFileModify: 1\\n' > {path}")  # fmt: skip
    try:
        rc, res = validate(mnode, f"{EXPECT} --expect-mig-name as-profiled")
    finally:
        # the runtime's prepared edits may hold the cap the tampered file named (they are
        # kept while the (gi, ci) layout is unchanged): drop them with the file restored
        mnode.sh(f"cp /tmp/access.saved {path} && rm -f /run/gpunode/prepared.json")
    iso = {c["mig"]: c for c in checks(res, "mig.isolation")}
    assert rc == 1 and iso[1]["status"] == "fail", iso[1]
    # a runtime reading the access file gives the config cap: NVML shows every MIG device;
    # one serving its prepared edits (the layout is unchanged) gives the right cap nodes,
    # which then differ from what the driver's file names: either way 0:1 fails
    every = ", ".join(m["uuid"] for m in gpu["mig_devices"])
    detail = iso[1]["detail"]
    assert (f"0:1: NVML lists MIG devices {every}; expected {dev['uuid']} alone" in detail
            or ("0:1: /dev/nvidia-caps nodes [" in detail and "], expected [1, " in detail)), detail
    assert iso[0]["status"] == "pass" and iso[2]["status"] == "pass"


def test_textfile_of_the_mig_node_passes_promtool(mnode, tmp_path):
    mnode.sh("mkdir -p /var/lib/gpunode-textfile")
    validate(mnode, f"{EXPECT} --expect-mig-name as-profiled "
             "--textfile /var/lib/gpunode-textfile/gpunode.prom")  # fmt: skip
    prom = tmp_path / "gpunode.prom"
    docker(["cp", f"{mnode.name}:/var/lib/gpunode-textfile/gpunode.prom", str(prom)])
    text = prom.read_text()
    assert text.count("gpunode_mig_device_info{") == 3
    assert 'check="mig.isolation",gpu="0:2"' in text
    lint = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=text,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_validate_playbook_hands_the_mig_layout_over(mnode, tmp_path):
    """playbooks/validate.yml passes gpu_mig_config and gpu_mig_configs (the inventory's
    layouts, as the gpu_mig role reads them) to `gpunode validate --vars -`."""
    import yaml

    configs = yaml.safe_load(MIG_CONFIG)
    host = {"gpunode_expected_gpus": 2, "gpu_mig_config": "all-1g",
            "gpu_mig_configs": configs["mig-configs"]}  # as the gpu_mig role takes them
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {
        "vars": {"ansible_connection": "community.docker.docker",
                 "ansible_python_interpreter": "/usr/bin/python3"},
        "children": {"gpu_nodes": {"hosts": {mnode.name: host}}}}}))  # fmt: skip
    out = tmp_path / "reports"
    proc = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inv), "playbooks/validate.yml",
         "-e", f"gpunode_validate_report_dir={out}", "-e", "gpunode_validate_fail=false"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    (node,) = json.loads((out / "report.json").read_text())["nodes"]
    layout = {c["gpu"]: c for c in node["checks"] if c["id"] == "mig.layout"}
    assert layout[0]["status"] == "fail" and "config 'all-1g' (gpu_mig_configs)" in (
        layout[0]["detail"])  # fmt: skip
    assert [c["status"] for c in node["checks"] if c["id"] == "mig.isolation"] == ["pass"] * 3
    assert [m["index"] for m in node["gpus"][0]["mig"]] == [0, 1, 2]


DESTROY_LAST = """
import json, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(0)
count = n.nvmlDeviceGetMaxMigDeviceCount(h)
migs = []
for slot in range(count):
    try:
        migs.append(n.nvmlDeviceGetMigDeviceHandleByIndex(h, slot))
    except n.NVMLError_NotFound:
        pass
m = migs[-1]
gi, ci = n.nvmlDeviceGetGpuInstanceId(m), n.nvmlDeviceGetComputeInstanceId(m)
g = n.nvmlDeviceGetGpuInstanceById(h, gi)
n.nvmlComputeInstanceDestroy(n.nvmlGpuInstanceGetComputeInstanceById(g, ci))
n.nvmlGpuInstanceDestroy(g)
print(json.dumps({"gi": gi}))
"""


def test_layout_changed_through_nvml_fails_the_layout_only(mnode):
    """A GPU instance destroyed through NVML (as nvidia-smi or mig-parted would): mig.layout
    fails naming what is there now; the MIG devices left still pass isolation."""
    mnode.pynvml(DESTROY_LAST)
    try:
        rc, res = validate(mnode, f"{EXPECT} --expect-mig-name as-profiled")
    finally:
        mnode.apply(PROFILE)
    layout = {c["gpu"]: c for c in checks(res, "mig.layout")}
    assert rc == 1 and layout[0]["status"] == "fail" and layout[1]["status"] == "pass"
    assert layout[0]["detail"].startswith("found 1x ") and "config 'as-profiled'" in (
        layout[0]["detail"])  # fmt: skip
    assert [c["status"] for c in checks(res, "mig.isolation")] == ["pass", "pass"]
    assert len(res["gpus"][0]["mig"]) == 2
