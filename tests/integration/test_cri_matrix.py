"""The CRI matrix (issue 25, item 4): every cell of tests/integration/cri_matrix.yaml — pod x
containerd 1.6 / 1.7 / 2.1 x setup (RuntimeClass `nvidia`, gpunode the default runtime, runc
the default without RuntimeClass) x security (secure default / open opt-in) — run through
containerd's real CRI on simulated Debian nodes (a100x4; a100x2-mig for the MIG pods), each
pod judged by gpunode validate's probe against the cell's expected outcome.

Pods are what kubelet sends: the device plugin's Allocate answer (tests/deviceplugin.py, the
one home of its shapes) with the plugin's envs before the pod's own (kubelet's
GenerateRunContainerOptions appends the pod's env after the device plugin's, and a later
duplicate wins in the OCI spec), its mounts, annotations and CDI_devices; the plugin's own CDI
spec written where the plugin writes it, its hook path what gpunode's device-plugin settings
say.

Cost: one node per release, started in parallel; the releases' work runs in threads (no
pytest-xdist in requirements-dev.txt; the machine's two cores mostly wait on containerd and
runc). Per release containerd is configured twice (gpunode's handlers with runc the default,
then gpunode the default runtime): the security modes are runtime.toml keys, read by the
runtime per container, so no restart between them; the profile changes (a100x4 → MIG mixed →
MIG single) are ordered so that each happens twice at most. Each cell's pod runs once in the
module fixture; the tests only compare. The results table is printed at the session's end
and written to build/cri-matrix.md.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from gpunode.cri.client import CRIError
from gpunode.sim import cluster
from gpunode.sim.profiles import load_profile

from .. import deviceplugin
from . import cri_matrix
from . import test_cri as cri
from .conftest import ROOT, Node, start_nodes

pytestmark = pytest.mark.integration

MATRIX = cri_matrix.load()
RUN = tuple(r for r in MATRIX.releases if r in cri.RELEASES)
CELLS = MATRIX.cells(RUN)
RESULTS_FILE = ROOT / "build" / "cri-matrix.md"
RUNTIME_TOML = "/etc/gpunode/runtime.toml"
RUNTIME_CLASS = "/etc/gpunode/kubernetes/runtimeclass.yaml"  # the device plugin's values beside
CUDA_STYLE_ENV = {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute,utility"}
# a layout with one MIG profile on every GPU, as MIG_STRATEGY=single requires
SINGLE_LAYOUT = """\
version: v1
mig-configs:
  single:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""
PROFILES = {"a100x4": load_profile("a100x4"), "a100x2-mig": load_profile("a100x2-mig")}
STATE_PROFILE = {"full": "a100x4", "mixed": "a100x2-mig", "single": "a100x2-mig"}


def node_state(pod: dict) -> str:
    return pod.get("mig") or "full"


# ---------------------------------------------------------------- the node's facts


class Facts:
    """What the node has in one state: GPUs (index → uuid, minor, procfs bus id) and MIG
    devices (uuid, parent index, profile, cap minors)."""

    def __init__(self, node: Node, state: str):
        profile = PROFILES[STATE_PROFILE[state]]
        inv = node.json("gpunode inventory --json")
        minors = _mig_minors(node)
        # what a privileged container is handed: every cap node of the host's /dev
        listing = node.sh("ls /dev/nvidia-caps 2>/dev/null || true").stdout.split()
        self.host_caps = sorted(int(n[10:]) for n in listing if n[10:].isdigit())
        self.gpus = []
        self.migs = []
        for i, (g, p) in enumerate(zip(inv["gpus"], profile.gpus, strict=True)):
            assert g["uuid"] == p.uuid, (g, p)
            self.gpus.append({"uuid": g["uuid"], "minor": g["minor"], "bus": p.bus_id.procfs})
            for m in g.get("mig_devices") or []:
                gi = f"gpu{g['minor']}/gi{m['gi']}/access"
                ci = f"gpu{g['minor']}/gi{m['gi']}/ci{m['ci']}/access"
                caps = sorted([minors[gi], minors[ci]])
                self.migs.append(
                    {"uuid": m["uuid"], "gpu": i, "profile": m["profile"], "caps": caps}
                )

    def mig(self, ref: str) -> dict:
        gpu, profile = ref.split("/")
        found = [m for m in self.migs if m["gpu"] == int(gpu) and m["profile"] == profile]
        assert found, f"no {profile} MIG device on GPU {gpu}: {self.migs}"
        return found[0]


def _mig_minors(node: Node) -> dict[str, int]:
    text = node.sh("cat /proc/driver/nvidia-caps/mig-minors 2>/dev/null || true").stdout
    out = {}
    for line in text.splitlines():
        name, _, minor = line.rpartition(" ")
        if name:
            out[name] = int(minor)
    return out


# ---------------------------------------------------------------- pods


def pod_request(pod: dict, facts: Facts) -> dict:
    """run_pod keywords for the matrix's pod, as kubelet would send it."""
    kw: dict = {}
    env: list[tuple[str, str]] = []
    if "plugin" in pod:
        refs = pod["gpus"]
        if any(str(r).startswith(("GPU-", "MIG-")) for r in refs):
            ids = [str(r) for r in refs]  # an id as it is: one the node does not have
        elif pod.get("mig"):
            ids = [facts.mig(r)["uuid"] for r in refs]
        elif pod["plugin"]["ids"] == "index":
            ids = [str(i) for i in refs]
        else:
            ids = [facts.gpus[i]["uuid"] for i in refs]
        resp = deviceplugin.allocate(pod["plugin"]["strategy"], ids)
        env += list(resp.get("envs", {}).items())
        if "mounts" in resp:
            kw["mounts"] = [
                dict(
                    host_path=m["host_path"],
                    container_path=m["container_path"],
                    readonly=m["read_only"],
                )
                for m in resp["mounts"]
            ]
        if "annotations" in resp:
            kw["annotations"] = resp["annotations"]
        if "cdi_devices" in resp:
            kw["cdi_devices"] = resp["cdi_devices"]
    for via, refs in (pod.get("gpunode") or {}).items():
        names = [
            f"nvidia.com/gpu={facts.gpus[int(r[5:])]['uuid'] if r.startswith('uuid:') else r}"
            for r in refs
        ]
        if via == "annotations":
            kw["annotations"] = {"cdi.k8s.io/gpunode-matrix": ",".join(names)}
        else:
            kw["cdi_devices"] = names
    env += list((pod.get("env") or {}).items())  # the pod's own, after the plugin's
    if env:
        kw["env"] = env
    if pod.get("privileged"):
        kw["privileged"] = True
    return kw


def allocated(pod: dict, facts: Facts) -> tuple[list[int], dict[str, list[str]]]:
    """(GPU indices, {GPU uuid: its allocated MIG uuids}) of the pod's allocation."""
    refs = pod.get("gpus") or [
        int(r[5:]) if str(r).startswith("uuid:") else int(r)
        for refs in (pod.get("gpunode") or {}).values()
        for r in refs
    ]
    if not pod.get("mig"):
        return sorted(refs), {}
    migs: dict[str, list[str]] = {}
    for r in refs:
        m = facts.mig(r)
        migs.setdefault(facts.gpus[m["gpu"]]["uuid"], []).append(m["uuid"])
    gpus = sorted({facts.mig(r)["gpu"] for r in refs})
    return gpus, {k: sorted(v) for k, v in migs.items()}


def seen(out: dict) -> dict:
    """The probe's output, reduced to what the matrix compares."""
    nvml = out["nvml"]
    if "error" in nvml:
        gpus: object = "no NVML" if nvml["error"].startswith("cannot load") else nvml["error"]
        migs: dict = {}
    else:
        gpus = sorted(g.get("uuid", str(g)) for g in nvml["gpus"])
        migs = {g["uuid"]: sorted(g["mig"]) for g in nvml["gpus"] if g.get("mig")}
    return {"dev": out["dev"], "caps": out["caps"], "nvml": gpus, "mig": migs,
            "proc": out["proc"]}  # fmt: skip


def wanted(cell: cri_matrix.Cell, facts: Facts) -> dict | None:
    """The expected reduced probe output of the cell (None for an expected error)."""
    pod, rule = MATRIX.pods[cell.pod], MATRIX.rule(cell)
    every = list(range(len(facts.gpus)))
    bus = sorted(g["bus"] for g in facts.gpus)

    def of(idx, migs=None, nvml=True):
        mig_uuids = {u for uuids in (migs or {}).values() for u in uuids}
        return {
            "dev": sorted(facts.gpus[i]["minor"] for i in idx),
            "caps": sorted(c for m in facts.migs if m["uuid"] in mig_uuids for c in m["caps"]),
            "nvml": sorted(facts.gpus[i]["uuid"] for i in idx) if nvml else "no NVML",
            "mig": migs or {},
            "proc": sorted(facts.gpus[i]["bus"] for i in idx),
        }

    # a privileged container gets every device node of the host, its cap nodes too
    host = {"caps": facts.host_caps} if pod.get("privileged") else {}
    get = rule["get"]
    if get == "allocated":
        return {**of(*allocated(pod, facts)), **host}
    if get == "all":
        return {**of(every), **host}
    if get == "none":
        return {"dev": [], "caps": [], "nvml": "no NVML", "mig": {}, "proc": bus, **host}
    if get == "nodes":
        return {**of(every, nvml=False), **host}
    return None


# ---------------------------------------------------------------- running a release


class Outcome:
    """What one cell's pod did: the reduced probe output, or the one line it failed with."""

    def __init__(self, seen: dict | None = None, error: str = "", at: str = "", want=None):
        self.seen, self.error, self.at, self.want = seen, error, at, want

    def summary(self) -> str:
        if self.error:
            return f"{self.at}: {self.error}"
        s = self.seen
        if s["dev"] == [] and s["nvml"] == "no NVML":
            return "none"
        nvml = len(s["nvml"]) if isinstance(s["nvml"], list) else s["nvml"]
        migs = sum(len(v) for v in s["mig"].values())
        return f"dev {s['dev']} caps {s['caps']} nvml {nvml} mig {migs}"


class ReleaseRun:
    def __init__(self, release: str, node: cri.CriNode, cuda_image: str):
        self.release, self.node, self.cuda_image = release, node, cuda_image
        self.state = "full"
        self.hook_path: str | None = None
        self.results: dict[str, Outcome] = {}

    def sh(self, script: str, **kw):
        return self.node.node.sh(script, **kw)

    def setup_containerd(self, default: bool) -> None:
        """What gpu_container_runtime_kubernetes writes (both names, CDI where containerd
        has it, the cdi.k8s.io annotations passed), with or without gpunode the default."""
        args = ["--name", "gpunode", "--name", "nvidia", *self.node.cdi(), "--pass-annotations"]
        self.node.configure([*args, *(["--set-as-default"] if default else [])])
        ctd = self.node.dump()["containerd"]
        want = "gpunode" if default else "runc"
        assert ctd["default_runtime_name"] == want, (self.release, ctd)
        assert {"gpunode", "nvidia", "runc"} <= set(ctd["runtimes"]), (self.release, ctd)

    def security(self, mode: str) -> None:
        keys = MATRIX.security[mode]
        drop = "|".join(keys)
        add = "".join(f"{k} = {json.dumps(v)}\n" for k, v in keys.items())
        self.sh(
            f"mkdir -p {os.path.dirname(RUNTIME_TOML)} && touch {RUNTIME_TOML} && "
            f"{{ grep -Ev '^({drop}) *=' {RUNTIME_TOML} || true; }} > /tmp/rt.toml && "
            f"printf %s {shlex.quote(add)} | cat - /tmp/rt.toml > {RUNTIME_TOML}"
        )

    def to_state(self, state: str) -> None:
        if state == self.state:
            return
        node = self.node.node
        if state == "single":
            self.to_state("mixed")
            node.sh(f"printf %s {shlex.quote(SINGLE_LAYOUT)} > /etc/gpunode/mig-single.yaml")
            node.sh("gpunode mig apply -f /etc/gpunode/mig-single.yaml -c single --json")
        else:
            node.apply(STATE_PROFILE[state])
        node.sh("gpunode runtime refresh && gpunode cdi generate --install")
        self.state = state
        self.write_plugin_spec()

    def plugin_hook_path(self) -> str:
        """NVIDIA_CDI_HOOK_PATH as gpunode tells the operator to set it: `cdi.nvidiaHookPath`
        of the device plugin's values that `gpunode runtime setup` writes for this node."""
        if self.hook_path is None:
            res = self.sh(
                "gpunode runtime setup --json --dry-run --containerd --containerd-name nvidia "
                f"{' '.join(f'--containerd-{a[2:]}' for a in self.node.cdi())} "
                f"--containerd-runtime-class {RUNTIME_CLASS}"
            )
            files = {f["kind"]: f for f in json.loads(res.stdout)["files"]}
            values = yaml.safe_load(files["device plugin values"]["after"])
            self.hook_path = values["cdi"]["nvidiaHookPath"]
        return self.hook_path

    def write_plugin_spec(self) -> None:
        own = self.node.node.json("gpunode cdi generate --format json")
        spec = deviceplugin.cdi_spec(own, hook_path=self.plugin_hook_path())
        path = deviceplugin.SPEC_FILE
        self.sh(
            f"mkdir -p {os.path.dirname(path)} && "
            f"printf %s {shlex.quote(json.dumps(spec))} > {path}"
        )

    def run_cells(self, setup: str, state: str) -> None:
        self.to_state(state)
        facts = Facts(self.node.node, state)
        for security in MATRIX.security:
            self.security(security)
            for name, pod in MATRIX.pods.items():
                if node_state(pod) != state:
                    continue
                cell = cri_matrix.Cell(name, self.release, setup, security)
                self.results[cell.id] = self.run_pod(cell, pod, facts)

    def run_pod(self, cell: cri_matrix.Cell, pod: dict, facts: Facts) -> Outcome:
        want = wanted(cell, facts)
        kw = pod_request(pod, facts)
        handler = "nvidia" if cell.setup == "nvidia" else ""
        image = self.cuda_image if pod.get("image") == "cuda-style" else self.node.image
        try:
            with self.node.client() as c:
                res = c.run_pod(cell.id[:60], image, cri.PROBE, handler=handler, **kw)
        except CRIError as exc:
            return Outcome(error=f"{exc.code}: {exc.detail}", at=exc.method, want=want)
        if res.reason == "StartError" or res.exit_code or not res.stdout.strip():
            return Outcome(error=res.message or res.stderr.strip()[-300:],
                           at=res.reason or "exit", want=want)  # fmt: skip
        return Outcome(seen(json.loads(res.stdout.strip().splitlines()[-1])), want=want)

    def run(self) -> None:
        self.write_plugin_spec()
        # gpunode's handlers, runc the default: pods through `nvidia` and without RuntimeClass
        self.setup_containerd(default=False)
        for state in ("full", "mixed", "single"):
            for setup in ("nvidia", "runc"):
                self.run_cells(setup, state)
        # gpunode the default runtime, the states in reverse (one profile change less)
        self.setup_containerd(default=True)
        for state in ("single", "mixed", "full"):
            self.run_cells("default", state)


def cuda_style_image(workload: str, prefix: str) -> str:
    """The workload image with a CUDA base image's ENV (NVIDIA_VISIBLE_DEVICES=all,
    NVIDIA_DRIVER_CAPABILITIES=compute,utility), built on the host (named after the test
    prefix: removed at the end, never another session's). An image's ENV reaches the OCI
    spec's env before the container's own (containerd's CRI), so this is what a CUDA image
    pod sends."""
    tag = f"gpunode.local/{prefix}-cuda-style:" + workload.rsplit(":", 1)[-1]
    env = " ".join(f"{k}={v}" for k, v in CUDA_STYLE_ENV.items())
    proc = subprocess.run(
        ["docker", "build", "-q", "-t", tag, "-"],
        input=f"FROM {workload}\nENV {env}\n".encode(),
        capture_output=True,
        check=False,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    assert proc.returncode == 0, proc.stderr.decode()
    return tag


def _start_and_run(release: str, name: str, artifacts, image_tags, cuda_tag: str, runs: dict):
    tag = image_tags[f"node-{release}"]  # built on first use for a release not prebuilt
    spec = cluster.NodeSpec(name, release, "a100x4")
    start_nodes([spec], artifacts, {f"node-{release}": tag})
    node = cri.prepare(Node(name, release, image_tags["workload-bookworm"]))
    cri.import_image(node.node, ["docker", "save", cuda_tag])
    run = ReleaseRun(release, node, cuda_tag)
    runs[release] = run
    run.run()


class _Summary:
    """Prints the results table at the session's end (pytest_terminal_summary)."""

    def __init__(self, text: str):
        self.text = text

    def pytest_terminal_summary(self, terminalreporter):
        terminalreporter.write_sep("=", "CRI matrix")
        terminalreporter.write_line(self.text)


# containerd's and runc's wrapping of a runtime's error, left out of the results table
NOISE = (
    "failed to create containerd task: failed to create shim task: OCI runtime create "
    "failed: runc create failed: unable to start container process: error during container "
    "init: ",
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: ",
    "failed to create containerd container: ",
)


def results_table(runs: dict, failures: dict[str, str]) -> str:
    lines = ["| cell | expected | got | |", "| --- | --- | --- | --- |"]
    for cell in CELLS:
        rule = MATRIX.rule(cell)
        run = runs.get(cell.release)
        got = run.results.get(cell.id) if run else None
        ok = got is not None and cell_ok(cell, got)
        exp = rule["get"] + (f" ({rule['text']})" if rule["get"] == "error" else "")
        if ok:
            text = exp
        else:
            text = got.summary() if got else failures.get(cell.release, "not run")
            for prefix in NOISE:
                text = text.replace(prefix, "…")
        lines.append(f"| {cell.id} | {exp} | {text[:240]} | {'ok' if ok else 'FAIL'} |")
    return "\n".join(lines) + "\n"


def results_grid(runs: dict) -> str:
    """One line per pod, per release one mark per setup x security mode ('.' as expected,
    'F' not, '-' not run), then the cells that differ with what they got."""
    combos = [(s, m) for s in MATRIX.setups for m in MATRIX.security]
    head = " ".join(f"{r} ({MATRIX.containerd[r]})".ljust(len(combos)) for r in RUN)
    width = max(len(p) for p in MATRIX.pods)
    key = ", ".join(f"{s}/{m}" for s, m in combos)
    lines = [f"marks per release: {key}", f"{'pod'.ljust(width)}  {head}"]
    for pod in MATRIX.pods:
        marks = []
        for release in RUN:
            run = runs.get(release)
            mark = ""
            for setup, mode in combos:
                cell = cri_matrix.Cell(pod, release, setup, mode)
                got = run.results.get(cell.id) if run else None
                mark += "-" if got is None else "." if cell_ok(cell, got) else "F"
            marks.append(mark.ljust(len(f"{release} ({MATRIX.containerd[release]})")))
        lines.append(f"{pod.ljust(width)}  {' '.join(marks)}")
    return "\n".join(lines) + "\n"


def cell_ok(cell, got: Outcome) -> bool:
    try:
        check(cell, got)
        return True
    except AssertionError:
        return False


def check(cell: cri_matrix.Cell, got: Outcome) -> None:
    rule = MATRIX.rule(cell)
    if rule["get"] == "error":
        assert got.error, (cell.id, "expected to fail", rule, got.seen)
        assert got.at == rule["at"] and rule["text"] in got.error, (cell.id, got.at, got.error)
        assert "\n" not in got.error
        return
    assert not got.error, (cell.id, rule["get"], f"{got.at}: {got.error}")
    assert got.seen == got.want, (cell.id, rule["get"], got.seen, got.want)


@pytest.fixture(scope="module")
def matrix(artifacts, image_tags, request):
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    names = {r: f"{prefix}-matrix-{r}" for r in RUN}
    cuda_tag = cuda_style_image(image_tags["workload-bookworm"], prefix)
    runs: dict[str, ReleaseRun] = {}
    failures: dict[str, str] = {}
    started = time.monotonic()
    lock = threading.Lock()

    def one(release):
        try:
            _start_and_run(release, names[release], artifacts, image_tags, cuda_tag, runs)
        except BaseException as exc:  # recorded: every cell of the release then fails with it
            with lock:
                failures[release] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"
            traceback.print_exc()

    try:
        with ThreadPoolExecutor(max_workers=len(RUN)) as pool:
            list(pool.map(one, RUN))
        table = results_table(runs, failures)
        took = f"{time.monotonic() - started:.0f} s for {len(CELLS)} cells"
        grid = results_grid(runs)
        RESULTS_FILE.parent.mkdir(parents=True, exist_ok=True)
        RESULTS_FILE.write_text(f"# CRI matrix ({took})\n\n```\n{grid}```\n\n{table}")
        differ = "".join(f"{line}\n" for line in table.splitlines() if line.endswith("FAIL |"))
        summary = f"{took}; every cell: {RESULTS_FILE}\n{grid}{differ}"
        request.config.pluginmanager.register(_Summary(summary))
        yield runs, failures
    finally:
        if not os.environ.get("GPUNODE_KEEP_NODES"):
            cluster.down_names(list(names.values()), log=lambda *_: None)
        subprocess.run(["docker", "rmi", "-f", cuda_tag], capture_output=True, check=False)


def test_every_release_of_the_data_runs():
    """The matrix names containerd 1.6, 1.7 and 2.1: each release's node must be one the
    CRI tests run (a release missing from test_cri.RELEASES fails here, never silently)."""
    assert set(MATRIX.releases) <= set(cri.RELEASES), (MATRIX.releases, cri.RELEASES)


@pytest.mark.parametrize("cell", CELLS, ids=[c.id for c in CELLS])
def test_cell(matrix, cell):
    runs, failures = matrix
    assert cell.release not in failures, failures[cell.release]
    check(cell, runs[cell.release].results[cell.id])
