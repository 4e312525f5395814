"""site.yml provisions a small simulated cluster end to end (issue 9 acceptance) and
validates it last (issue 10):

* `--check --diff` on fresh nodes shows the daemon.json change it would make (the
  operator's key kept), changes nothing and validates nothing;
* the first run provisions and validates (exit 0: every node passed), gpunode_install
  installing gpunode on the node that has none; run as ./scripts/demo runs it (`gpunode sim
  up`, then site.yml through `gpunode sim playbook`), the second run and `--check --diff`
  report zero changed, and a node that drifted fails the rerun naming host and task;
* the node without GPU gets the engine but no driver, CUDA or gpunode runtime, and is a
  passing row of skips ("no NVIDIA GPU: engine only") with its engine check in the report;
* with a faulty GPU injected, site.yml writes the report (that node red on that GPU, every
  other node and GPU green) and then exits non-zero;
* a node stopped in the middle of a run is reported unreachable while the others finish.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from gpunode.report.build import FILES
from gpunode.sim import cluster
from gpunode.sim.docker import docker, exec_
from gpunode.sim.expected import compare, injected
from gpunode.sim.profiles import load_profile, parse_profile

from ..infra import smi
from . import reportpage

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
SEEDED = {"log-level": "warn"}


@pytest.fixture(scope="module")
def cluster_inventory(artifacts, image_tags, tmp_path_factory) -> dict:
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    hosts = {
        f"{prefix}-prov-a100": {"gpunode_sim_release": "bookworm", "gpunode_sim_profile": "a100x4"},
        f"{prefix}-prov-h100": {
            "gpunode_sim_release": "trixie",
            "gpunode_sim_profile": "h100x8-pcie",
        },
        f"{prefix}-prov-cpu": {"gpunode_sim_release": "trixie", "gpunode_sim_profile": "nogpu"},
    }
    inv = tmp_path_factory.mktemp("inventory")
    (inv / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}})
    )
    (inv / "group_vars").symlink_to(ROOT / "inventories/sim/group_vars")
    cluster.down_names(list(hosts), log=lambda *_: None)
    cluster.up(inv / "hosts.yml", artifacts, log=lambda *_: None)
    for name in hosts:  # an operator's own daemon.json, in effect
        exec_(name, ["sh", "-c", 'echo \'{"log-level": "warn"}\' > /etc/docker/daemon.json'])
    yield {"dir": inv, "hosts": hosts, "names": list(hosts)}
    if not os.environ.get("GPUNODE_KEEP_NODES"):
        cluster.down_names(list(hosts), log=lambda *_: None)


def run_site(inv: Path, *args: str, playbook: str = "site.yml") -> subprocess.CompletedProcess:
    """The report goes to INVENTORY/reports (not the checkout's reports/)."""
    report = ["-e", f"gpunode_validate_report_dir={inv}/reports"] if playbook == "site.yml" else []
    return subprocess.run(
        [str(PLAYBOOK), "-i", str(inv), playbook, *report, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )


def run_demo_site(inv: Path, *args: str) -> subprocess.CompletedProcess:
    """site.yml as ./scripts/demo runs it: through `gpunode sim playbook`, which fails a
    rerun that changes what provisioning did (its verdict is the last line)."""
    return subprocess.run(
        [str(PLAYBOOK.parent / "gpunode"), "sim", "playbook", "-i", str(inv / "hosts.yml"),
         "site.yml", "-e", f"gpunode_validate_report_dir={inv}/reports", *args],
        cwd=ROOT, capture_output=True, text=True, check=False, timeout=1800,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip


def why(proc: subprocess.CompletedProcess) -> str:
    """A failed run's failing tasks (each `fatal:` with its task and a few lines) and the
    end of its output: the tail alone may not name the task that failed."""
    lines, task, fatal = proc.stdout.splitlines(), "", []
    for i, line in enumerate(lines):
        if line.startswith("TASK ["):
            task = line
        elif line.startswith("fatal: ["):
            fatal += [task, *lines[i : i + 12]]
    return "\n".join([*fatal, "...", proc.stdout[-3000:], proc.stderr[-2000:]])


def changed_on(stdout: str, host: str) -> set[str]:
    """The tasks that reported a change on host ("role : task")."""
    out, task = set(), ""
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line[6 : line.index("]")]
        elif line.startswith(f"changed: [{host}]"):
            out.add(task)
    return out


def recap(stdout: str) -> dict[str, dict[str, int]]:
    out = {}
    for m in re.finditer(r"^(\S+)\s*:\s*((?:\w+=\d+\s*)+)$", stdout, re.M):
        out[m[1]] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
    return out


def report_nodes(inv: Path) -> dict[str, dict]:
    doc = json.loads((inv / "reports" / "report.json").read_text())
    return {n["node"]: n for n in doc["nodes"]}


def daemon_json(name: str) -> dict:
    return json.loads(exec_(name, ["cat", "/etc/docker/daemon.json"]).stdout)


def test_site_check_provision_idempotent(cluster_inventory, artifacts):
    inv, names = cluster_inventory["dir"], cluster_inventory["names"]
    a100, h100, cpu = names
    # a server without gpunode: the simulator installs it as gpunode_install does (so the
    # role finds it current), so take it away here for the role's own install to be run
    exec_(a100, ["sh", "-c", "rm -rf /opt/gpunode /opt/gpunode-wheels /usr/local/bin/gpunode* "
                             "/usr/local/bin/nvidia-container-runtime-hook"])  # fmt: skip

    check = run_site(inv, "--check", "--diff")
    assert check.returncode == 0, why(check)
    # the diff gpunode would apply to the trixie node's daemon.json: key kept, runtime, CDI
    diff = check.stdout.split("Show the daemon.json change (check mode)", 1)[1]
    diff = diff.split("TASK [", 1)[0]
    assert '-{"log-level": "warn"}' in diff
    assert '+    "log-level": "warn",' in diff
    assert '+            "path": "/usr/local/bin/gpunode-container-runtime"' in diff
    assert '+        "cdi": true' in diff
    for name in names:  # check mode wrote nothing
        assert daemon_json(name) == SEEDED
    assert "PLAY [Validate the GPU nodes]" in check.stdout  # ... and validated nothing
    assert "TASK [Run gpunode validate]" not in check.stdout
    assert not (inv / "reports").exists()

    first = run_demo_site(inv)
    assert first.returncode == 0, why(first)
    counts = recap(first.stdout)
    assert counts[a100]["changed"] > 0 and counts[h100]["changed"] > 0
    assert (
        "gpunode.gpunode.gpunode_install : Install gpunode into its virtualenv and link it onto PATH"
        in (changed_on(first.stdout, a100))
    )
    assert exec_(a100, ["gpunode", "--version"]).stdout.decode().startswith("gpunode ")
    in_order = ", ".join(n.name for n in cluster.read_inventory(inv / "hosts.yml"))
    assert first.stdout.splitlines()[-1] == (
        f"provisioned {in_order} for the first time with these inputs; a second run must "
        "change nothing there"
    )
    # validated last, every node passed: the GPU nodes all green, the GPU-less one skips
    assert first.stdout.index("PLAY [Provision GPU nodes]") < first.stdout.index(
        "PLAY [Validate the GPU nodes]"
    )
    assert f"report: {inv}/reports/index.html" in first.stdout
    nodes = report_nodes(inv)
    assert {n: r["status"] for n, r in nodes.items()} == dict.fromkeys(names, "pass"), nodes
    skips = {c["detail"] for c in nodes[cpu]["checks"] if c["status"] == "skip"}
    assert nodes[cpu]["no_gpu"] and skips == {"no NVIDIA GPU: engine only"}
    engine = [c for c in nodes[cpu]["checks"] if c["id"] == "engine.active"]
    assert [c["status"] for c in engine] == ["pass"], engine

    # the demo brings the cluster up before every run: the simulator's gpunode must be
    # what the role installed, or the rerun reinstalls it (issue 17)
    cluster.up(inv / "hosts.yml", artifacts, log=lambda *_: None)
    second = run_demo_site(inv)
    assert second.returncode == 0, why(second)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in recap(second.stdout).values()), (
        second.stdout[-4000:]
    )
    assert second.stdout.splitlines()[-1] == (
        f"provisioning changed nothing on {in_order} (provisioned before with the same inputs)"
    )
    recheck = run_demo_site(inv, "--check", "--diff")
    assert recheck.returncode == 0, why(recheck)
    assert all(c["changed"] == 0 for c in recap(recheck.stdout).values()), recheck.stdout[-4000:]

    # a provisioned node that drifted: the rerun puts it right and fails, naming it
    exec_(h100, ["rm", "/etc/profile.d/gpunode-cuda.sh"])
    drift = run_demo_site(inv)
    assert drift.returncode == 1, why(drift)
    assert drift.stdout.splitlines()[-1] == (
        "not idempotent: provisioning changed 1 task(s) on nodes provisioned before with the "
        f"same inputs: {h100}: gpunode.gpunode.cuda_toolkit : PATH and CUDA_HOME"
    )
    assert (
        exec_(h100, ["test", "-f", "/etc/profile.d/gpunode-cuda.sh"], check=False).returncode == 0
    )

    for name in (a100, h100):
        config = daemon_json(name)
        assert config["log-level"] == "warn"
        assert config["runtimes"]["gpunode"]["path"] == "/usr/local/bin/gpunode-container-runtime"
        held = exec_(name, ["apt-mark", "showhold"]).stdout.decode().split()
        assert "libnvidia-ml1" in held, held
    assert daemon_json(h100)["features"] == {"cdi": True}
    # the node without GPU: engine running, nothing of the GPU stack
    assert daemon_json(cpu) == SEEDED
    assert exec_(cpu, ["systemctl", "is-active", "docker"]).stdout.decode().strip() == "active"
    listed = exec_(cpu, ["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package}\\n"])
    pkgs = [ln.split()[1] for ln in listed.stdout.decode().splitlines() if ln.startswith("ii")]
    assert not [p for p in pkgs if "nvidia" in p or "cuda" in p], pkgs
    assert exec_(cpu, ["test", "-e", "/etc/gpunode/runtime.toml"], check=False).returncode == 1


def smi_out(node: str, args: list[str], rc: int = 0) -> str:
    proc = exec_(node, ["nvidia-smi", *args], check=False)
    out = (proc.stdout + proc.stderr).decode(errors="replace")
    assert proc.returncode == rc, (
        f"{node}: nvidia-smi {' '.join(args)}: exit {proc.returncode}: {out}"
    )
    return out


def smi_views(node: str) -> list[str]:
    """Every view of the issue against the node's NVML (gpunode inventory --json, the same
    comparisons tests/infra/test_nvidia_smi.py makes on any node): the differences."""
    inventory = json.loads(exec_(node, ["gpunode", "inventory", "--json"]).stdout)
    corrupt = any(g.get("inforom_valid") is False for g in inventory["gpus"])
    default = smi_out(node, [], rc=14 if corrupt else 0)
    head = smi.HEADER.search(default)
    diffs = [] if head and head[2] == inventory["driver_version"] else [f"header {head}"]
    for args, view in smi.VIEWS.items():
        diffs += view(smi_out(node, shlex.split(args)), inventory)
    smi_out(node, ["-q"])
    if any(g.get("mig_mode") for g in inventory["gpus"]):
        lgi, lci = smi_out(node, ["mig", "-lgi"]), smi_out(node, ["mig", "-lci"])
        diffs += smi.compare_mig(lgi, lci, inventory)
    return diffs


def test_nvidia_smi_shows_each_profile_as_on_hardware(cluster_inventory, tmp_path):
    """NVIDIA's own nvidia-smi, as the driver role installed it (Debian 12: 535.261.03,
    Debian 13: 550.163.01), on the provisioned nodes under each built-in profile of their
    driver branch: every view exits as on hardware and shows the profile's GPUs (count,
    UUIDs, bus ids), the injected faults' fields, MIG devices and links, and agrees with
    NVML; a GPU that fell off the bus stops it as on hardware."""
    a100, h100, _ = cluster_inventory["names"]
    plan = {a100: ["t4x2-faulty", "a100x2-mig", "a100x4"],
            h100: ["h100x8", "h100x8-degraded", "h100x8-pcie"]}  # fmt: skip
    for node, profiles in plan.items():
        for name in profiles:
            cluster.apply(node, name, log=lambda *_: None)
            profile = load_profile(name)
            listed = smi.listing(smi_out(node, ["-L"]))
            assert [(g["name"], g["uuid"]) for g in listed] == [
                (g.model, g.uuid) for g in profile.gpus
            ], (node, name)
            query = smi.csv_rows(smi_out(node, ["--query-gpu=pci.bus_id", "--format=csv,noheader"]))
            assert [r[0] for r in query] == [g.bus_id.nvml.upper() for g in profile.gpus]
            assert smi_views(node) == [], (node, name)
            if name == "t4x2-faulty":  # GPU 1: uncorrectable ECC errors, pages pending
                q = smi_out(node, ["-q", "-i", "1", "-d", "ECC,PAGE_RETIREMENT"])
                assert re.search(r"Volatile\n(.*\n)*?\s+DRAM Uncorrectable\s+: 2\n", q), q
                assert re.search(r"Double Bit ECC\s+: 2\n\s+Pending Page Blacklist\s+: Yes", q), q
            if name == "a100x2-mig":
                migs = [u for g in smi.listing(smi_out(node, ["-L"])) for *_, u in g["migs"]]
                want = [m.uuid for g in profile.gpus for m in g.mig_instances]
                assert sorted(migs) == sorted(want), migs
            if name == "h100x8":  # no fabric manager on this Debian node: never trained
                q = smi_out(node, ["-q", "-i", "0"])
                assert re.search(r"Fabric\n\s+State\s+: Not Started", q), q
            if name == "h100x8-degraded":  # link 0 of GPU 4 down; GPU 5's InfoROM corrupt
                links = smi.nvlink_status(smi_out(node, ["nvlink", "-s"]))
                assert [k for k, v in links[4].items() if v == "<inactive>"] == [0], links[4]
                assert "WARNING: infoROM is corrupted at gpu 0000:AB:00.0" in smi_out(
                    node, [], rc=14
                )
    # the T4 node with GPU 1 fallen off the bus
    data = yaml.safe_load((ROOT / "src/gpunode/data/profiles/t4x2-faulty.yaml").read_text())
    data["gpus"][1]["faults"] = ["fallen_off_bus"]
    parse_profile(data)  # a valid profile
    lost = tmp_path / "t4-lost.yaml"
    lost.write_text(yaml.safe_dump(data))
    try:
        cluster.apply(a100, str(lost), log=lambda *_: None)
        for args in ([], ["-L"], ["-q"]):
            out = smi_out(a100, args, rc=15)
            assert "device handle for " in out and "0000:D8:00.0: GPU is lost" in out, out
    finally:
        cluster.apply(a100, "a100x4", log=lambda *_: None)


def test_site_reports_the_faulty_gpu_red_and_fails_after_the_report(cluster_inventory):
    """The README's demo on this cluster: the A100 node runs the t4x2-faulty profile (GPU 1:
    uncorrectable ECC, retired pages pending). site.yml provisions, validates, writes the
    four report files, shows exactly that GPU failed and everything else passed (judged as
    the demo judges it, `gpunode sim check-report`), and then exits non-zero."""
    inv, hosts, names = (
        cluster_inventory["dir"],
        cluster_inventory["hosts"],
        cluster_inventory["names"],
    )
    a100 = names[0]
    faulty = inv / "faulty"
    faulty.mkdir(exist_ok=True)
    hosts = {**hosts, a100: {**hosts[a100], "gpunode_sim_profile": "t4x2-faulty"}}
    (faulty / "hosts.yml").write_text(
        yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}})
    )
    (faulty / "group_vars").symlink_to(ROOT / "inventories/sim/group_vars")
    try:
        cluster.apply(a100, "t4x2-faulty", log=lambda *_: None)
        proc = run_site(faulty)
    finally:
        cluster.apply(a100, "a100x4", log=lambda *_: None)
    out = proc.stdout
    assert proc.returncode != 0, out[-3000:]
    assert "PLAY [Provision GPU nodes]" in out and "PLAY [Validate the GPU nodes]" in out
    # the report first, then the failure naming the node
    for line in (f"report: {faulty}/reports/index.html", f"validation failed on {a100}; see"):
        assert line in out, out[-3000:]
    report_line = out.index(f"report: {faulty}/reports/index.html")
    assert report_line < out.index(f"validation failed on {a100}; see"), out[-3000:]
    assert all((faulty / "reports" / f).is_file() for f in FILES)
    nodes = report_nodes(faulty)
    bad = {(n, c["gpu"]) for n, r in nodes.items() for c in r["checks"] if c["status"] == "fail"}
    assert bad == {(a100, 1)}, bad
    assert [n for n, r in nodes.items() if r["status"] != "pass"] == [a100]
    model = json.loads((faulty / "reports" / "report.json").read_text())
    assert compare(model, injected(faulty / "hosts.yml")) == []
    check = subprocess.run(
        [str(PLAYBOOK.parent / "gpunode"), "sim", "check-report", "-i", str(faulty / "hosts.yml"),
         str(faulty / "reports" / "report.json")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert check.returncode == 0, check.stdout + check.stderr
    page = (faulty / "reports" / "index.html").read_text()
    assert ("GPU 1", "gpu.ecc_uncorrectable") in reportpage.cells(page, a100, "fail")


def test_upgrade_driver_drains_only_changing_nodes_and_stops_on_mismatch(
    cluster_inventory, tmp_path
):
    """A node whose loaded driver (NVML) is older than the pin is drained; the driver
    role's matching check fails naming both versions, the roll stops there and the node
    stays drained. After the "reboot" (profile back at the pin) a rerun undrains it."""
    inv, names = cluster_inventory["dir"], cluster_inventory["names"]
    a100 = names[0]
    old = tmp_path / "a100x4-old.yaml"
    text = (ROOT / "src/gpunode/data/profiles/a100x4.yaml").read_text()
    old.write_text(text.replace('version: "535.261.03"', 'version: "535.247.01"'))
    hooks = [
        "-e",
        f'upgrade_driver_drain_command="touch {tmp_path}/drained-{{{{ inventory_hostname }}}}"',
        "-e",
        f'upgrade_driver_undrain_command="touch {tmp_path}/undrained-{{{{ inventory_hostname }}}}"',
    ]

    def upgrade() -> subprocess.CompletedProcess:
        return run_site(inv, *hooks, playbook="playbooks/upgrade-driver.yml")

    def marks() -> set[str]:
        return {p.name for p in tmp_path.glob("*drained-*")}

    try:
        cluster.apply(a100, str(old), log=lambda *_: None)
        failed = upgrade()
        out = failed.stdout + failed.stderr
        assert failed.returncode != 0, out[-3000:]
        assert "the loaded kernel module is 535.247.01" in out, out[-3000:]
        assert "535.261.03" in out
        assert set(recap(failed.stdout)) == {a100}, failed.stdout[-2000:]  # roll stopped
        assert marks() == {f"drained-{a100}"}
    finally:
        cluster.apply(a100, "a100x4", log=lambda *_: None)
    ok = upgrade()
    assert ok.returncode == 0, ok.stdout[-3000:] + ok.stderr[-2000:]
    # undrained after the fix; the other nodes (driver = pin) were never drained
    assert marks() == {f"drained-{a100}", f"undrained-{a100}"}


def test_unreachable_node_is_reported_while_others_finish(cluster_inventory):
    inv, names = cluster_inventory["dir"], cluster_inventory["names"]
    victim = names[0]
    shutil.rmtree(inv / "reports", ignore_errors=True)
    # the node's init, as the host sees it: killed the moment the driver role's banner is
    # read, the node is gone before Ansible's next task reaches it (`docker stop -t 1`,
    # as this test did before, leaves it up to a second: long enough, with a fast
    # controller, for the next task's command to start on it and die with it, a failed
    # task instead of an unreachable host)
    init = int(docker(["inspect", "-f", "{{.State.Pid}}", victim]).stdout)
    assert init > 0, f"{victim} is not running"
    proc = subprocess.Popen(
        [
            str(PLAYBOOK),
            "-i",
            str(inv),
            "site.yml",
            "-e",
            f"gpunode_validate_report_dir={inv}/reports",
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
    )
    out = []
    stopped = False
    for line in proc.stdout:
        out.append(line)
        # mid-run: the driver role has started on every node
        if not stopped and line.startswith("TASK [gpunode.gpunode.nvidia_driver"):
            os.kill(init, signal.SIGKILL)
            stopped = True
    proc.wait(timeout=1200)
    text = "".join(out)
    try:
        assert stopped, text[-3000:]
        counts = recap(text)
        assert counts[victim]["unreachable"] == 1, text[-3000:]
        for name in names[1:]:
            assert counts[name]["unreachable"] == 0, text[-3000:]
        # the others reached the end of site.yml: validated, in the report, passing; the
        # stopped node a failed row, and the one failure of the run is validation's verdict
        # (counted on the host that built the report)
        nodes = report_nodes(inv)
        assert {n: nodes[n]["status"] for n in names[1:]} == dict.fromkeys(names[1:], "pass")
        assert nodes[victim]["status"] == "fail", nodes[victim]
        assert "unreachable earlier in this run" in nodes[victim]["checks"][-1]["detail"]
        fatal = [ln for ln in out if ln.startswith("fatal: [") and "UNREACHABLE" not in ln]
        assert len(fatal) == 1 and f"validation failed on {victim}; see" in text, fatal
        assert proc.returncode != 0  # ansible-playbook says the run was not complete
    finally:
        docker(["start", victim])
        time.sleep(1)
