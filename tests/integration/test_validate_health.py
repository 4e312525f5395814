"""`gpunode validate` on a simulated node running the built-in h100x8-degraded profile (an
HGX H100 whose GPUs 0-6 each carry one PCIe, clock, NVLink, InfoROM or fabric fault, GPU 7
healthy): exactly the injected GPUs fail or warn, each on exactly its fault's check; the
result's consumers (report JSON, JUnit, HTML, Markdown, the Prometheus textfile) show every
new check, and `gpunode sim check-report`'s judge accepts the report.

The node has the driver package NVML's version names (a stub with the real package name,
Debian 12's libnvidia-ml1, at 550.163.01-1), what `gpunode runtime refresh` leaves (the
inventory cache, /dev/char links) and, as an HGX board needs, the fabric manager at the
driver's version, running (the simulated NVIDIA repository's package: it trains the fabric;
GPU 6's training completes with the injected error, which node.fabric_manager sums up); the
engine and container checks are left out (`--engine none`): this is about the GPUs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema
from junitparser import JUnitXml

from gpunode.sim import cluster
from gpunode.sim.docker import docker
from gpunode.sim.expected import compare, gpu_faults, shows
from gpunode.sim.profiles import load_profile

from .conftest import Node, start_nodes
from .test_validate import STUB, by_gpu

pytestmark = pytest.mark.integration

XSD = Path(__file__).resolve().parents[1] / "unit" / "report" / "junit-10.xsd"
PROFILE = "h100x8-degraded"
ARGS = "--expect-gpus 8 --driver-pin 550.163.01 --engine none"
# GPU (PCI bus order) -> its fault and words of its check's detail; GPU 7 has none. The
# check and status each must show: the simulator's fault table (profiles.FAULTS, through
# sim.expected.shows; GPU 0's width drop fails: an HGX module, not a PCIe card)
SHOWN = {
    0: ("pcie_link_degraded", "x8 of x16 on an SXM module"),
    1: ("pcie_replays", "120 PCIe replays"),
    2: ("clocks_hw_slowdown", "HW slowdown"),
    3: ("clocks_sw_thermal", "SW thermal slowdown"),
    4: ("nvlink_down", "NVLink 0 down (1 of 18 links)"),
    5: ("inforom_corrupt", "DCGM_FR_CORRUPT_INFOROM"),
    6: ("fabric_manager_failed", "(Unknown Error)"),
}
NEW_CHECKS = ["gpu.pcie_link", "gpu.pcie_replay", "gpu.clocks_event", "gpu.nvlink",
              "gpu.fabric_manager", "gpu.inforom"]  # fmt: skip


@pytest.fixture(scope="module")
def hnode(artifacts, image_tags, tmp_path_factory) -> Node:
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    spec = cluster.NodeSpec(f"{prefix}-health", "bookworm", PROFILE)
    start_nodes([spec], artifacts, image_tags)
    node = Node(spec.name, spec.release, "")
    node.sh(STUB.format(pkg="libnvidia-ml1", ver="550.163.01-1"))
    node.sh("gpunode runtime refresh --json")  # the cache, and the driver nodes' /dev/char links
    # an HGX board: its fabric manager at the driver's version trains the fabric (GPU 6's
    # training then completes with the injected error)
    cluster.install_fabric_manager(spec.name, "550.163.01", tmp_path_factory.mktemp("fm"),
                                   log=lambda *_: None)  # fmt: skip
    yield node
    if not os.environ.get("GPUNODE_KEEP_NODES"):
        cluster.down_names([spec.name], log=lambda *_: None)


def test_exactly_the_injected_gpus_fail_on_exactly_their_checks(hnode, tmp_path):
    hnode.sh("mkdir -p /var/lib/gpunode-textfile")
    proc = hnode.sh(f"gpunode validate --json {ARGS} --node {hnode.name} "
                    "--textfile /var/lib/gpunode-textfile/gpunode.prom",
                    check=False, timeout=300)  # fmt: skip
    assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr
    res = json.loads(proc.stdout)
    grid = by_gpu(res)
    profile = load_profile(PROFILE)
    gpus = sorted(profile.gpus, key=lambda g: g.bus_id.nvml.lower())
    assert [g["uuid"] for g in res["gpus"]] == [g.uuid for g in gpus]
    for i, gpu in enumerate(gpus):
        bad = {c["id"]: c for c in grid[i].values() if c["status"] in ("fail", "warn")}
        if i not in SHOWN:
            assert gpu.faults == frozenset() and bad == {}, bad
            continue
        fault, words = SHOWN[i]
        assert gpu.faults == {fault}
        want = shows(gpu_faults(gpu))
        assert {c: b["status"] for c, b in bad.items()} == want, bad
        (check,) = want
        assert words in bad[check]["detail"] and bad[check]["uuid"] == gpu.uuid
        assert "DCGM_FR_" in bad[check]["title"]
    for check in NEW_CHECKS:  # every new check ran on every GPU; an H100 passes each healthy
        assert grid[7][check]["status"] == "pass", grid[7][check]
    # the node's own rows: node.fabric_manager sums the fabric up (GPU 6's training failed;
    # the fabric manager itself runs at the driver's version)
    node_level = {c["id"]: c for c in grid[None].values() if c["status"] in ("fail", "warn")}
    assert list(node_level) == ["node.fabric_manager"], node_level
    fm = node_level["node.fabric_manager"]
    assert fm["status"] == "fail" and "1 of 8 GPUs' fabric not trained" in fm["detail"], fm
    assert "does not match" not in fm["detail"] and "is failed" not in fm["detail"], fm

    # the consumers: report JSON/JUnit/HTML/Markdown and the textfile show the new checks
    results = tmp_path / "results"
    results.mkdir()
    (results / f"{hnode.name}.json").write_text(proc.stdout)
    out = tmp_path / "reports"
    rep = subprocess.run([shutil.which("gpunode"), "report", str(results), "-o", str(out)],
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert rep.returncode == 1, rep.stderr  # a node failed
    model = json.loads((out / "report.json").read_text())
    assert compare(model, {hnode.name: {i: gpu_faults(g) for i, g in enumerate(gpus)}}) == []
    junit = ET.parse(out / "junit.xml")
    cases = {(c.get("classname"), c.get("name")): c for c in junit.iter("testcase")}
    names = " ".join(f"{k[0]} {k[1]}" for k in cases)
    html, md = (out / "index.html").read_text(), (out / "summary.md").read_text()
    for check in NEW_CHECKS:
        assert check in names and check in html, check
    assert " pass, 2 warn, 6 fail, " in md  # 7 faults: 2 warn, 5 fail; node.fabric_manager
    assert "DCGM\\_FR\\_CORRUPT\\_INFOROM" in md and "NVLink 0 down" in md
    failures = [k for k, c in cases.items() if c.find("failure") is not None]
    assert len(failures) == 6, failures  # the six fails; warnings are not failures
    xmlschema.XMLSchema(str(XSD)).validate(str(out / "junit.xml"))
    parsed = [c for suite in JUnitXml.fromfile(str(out / "junit.xml")) for c in suite]
    assert sorted(c.name for c in parsed if not c.is_passed and not c.is_skipped) == [
        "gpu.clocks_event[gpu2]", "gpu.fabric_manager[gpu6]", "gpu.inforom[gpu5]",
        "gpu.nvlink[gpu4]", "gpu.pcie_link[gpu0]", "node.fabric_manager"]  # fmt: skip
    prom = tmp_path / "gpunode.prom"
    docker(["cp", f"{hnode.name}:/var/lib/gpunode-textfile/gpunode.prom", str(prom)])
    text = prom.read_text()
    assert 'check="gpu.nvlink",gpu="4"' in text and 'check="gpu.pcie_link",gpu="0"' in text
    lint = subprocess.run([shutil.which("promtool"), "check", "metrics"], input=text,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_an_xid_off_every_gpu_fails_the_node_and_a_forged_record_nothing(hnode):
    """The driver's Xid for a bus none of the GPUs has (a GPU gone from NVML and the driver's
    list) is node.xid, failing and naming the bus; a record written to /dev/kmsg from
    userspace (prio 12: LOG_USER) naming GPU 1's bus fails nothing."""
    forged = ("12,9000,99000000,-;NVRM: Xid (PCI:0000:2a:00): 79, pid=1, name=x, "
              "GPU has fallen off the bus.")  # fmt: skip
    hnode.sh("cp /dev/kmsg /root/kmsg.before")
    try:
        cluster.raise_xid(hnode.name, "0000:c1:00.0", "79")  # as the driver logs it
        hnode.sh(f"printf '%s\\n' '{forged}' >> /dev/kmsg")
        proc = hnode.sh(f"gpunode validate --json {ARGS} --node {hnode.name}",
                        check=False, timeout=300)  # fmt: skip
        assert "Traceback" not in proc.stderr and proc.returncode == 1, proc.stderr
        grid = by_gpu(json.loads(proc.stdout))
        node_xid = grid[None]["node.xid"]
        assert node_xid["status"] == "fail", node_xid
        assert "00000000:C1:00.0, a bus none of the node's GPUs has" in node_xid["detail"]
        bad = {c["id"]: c["status"] for c in grid[1].values() if c["status"] in ("fail", "warn")}
        assert bad == {"gpu.pcie_replay": "warn"}, bad  # the forged record: nothing
    finally:
        hnode.sh("cp /root/kmsg.before /dev/kmsg")
