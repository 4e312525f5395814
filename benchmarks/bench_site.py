#!/usr/bin/env python3
"""Benchmark: site.yml's re-run (changed=0) over a growing simulated cluster, and each
molecule scenario (`molecule test -s NAME`).

Prints the growth curve of a second site.yml run over NODES simulated nodes (default 4, 16,
32, 64) with mixed profiles — Debian 12 4xA100, Debian 13 8xH100, Debian 12 2xT4 (one faulty
GPU), Debian 13 without GPU, in turn: per count the wall time, the controller's CPU seconds
(the ansible-playbook process tree: getrusage(RUSAGE_CHILDREN) deltas), the marginal seconds
per added node, the node containers' CPU seconds (their cgroups, without the containers
validation starts inside them) and memory, and the machine's load average, since other
work on the machine slows the run. The re-run must report zero changed and meet its target
(<= 120 s at every count; the goal is 64 nodes).

How the nodes get converged: the first len(MIX) nodes (one per profile) are provisioned
from scratch by site.yml (first run, timed; package downloads go to the shared apt cache,
~/.cache/gpunode/apt, so only the very first run on a machine downloads). Every further
node is a clone of the converged node of its profile (`docker commit` of its root file
system; --from-scratch provisions each from the bare image instead, which costs several
minutes per 16 nodes on a 2-core machine): it boots as its own node (own hostname,
machine-id, Docker volumes; the simulator applies its GPU profile), and one site.yml run
limited to the new nodes (printed: it must change nothing, or the clones were not
converged) lets validation build its probe image in each, as on a node that has been
validated before. The re-run of every count is then measured over all nodes.

--profile prints, per count, the re-run's tasks by wall time and the hosts' module time
(benchmarks/callback/bench_timing.py).

--host-task-cost prints, after the curve, what one host-task of a command costs over all its
nodes: TASKS tasks running /bin/true on each node, once as ansible.builtin.command (a module
run: the node starts Python for Ansible) and once as the project's direct_command action
(plugins/action/direct_command.py: the command line only, which the roles' gpunode calls
use), each playbook run twice in turn; controller and node CPU milliseconds per host-task.

Exits 1 when a run fails, when a re-run changes anything or misses its target, or when a
molecule scenario fails.

usage: .venv/bin/python benchmarks/bench_site.py [--nodes 4,16,32,64] [--forks F] [--prefix P]
                                                  [--from-scratch] [--profile] [--no-molecule]
                                                  [--keep] [--reuse] [--host-task-cost]
"""

from __future__ import annotations

import argparse
import configparser
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from gpunode.sim import cluster  # noqa: E402
from gpunode.sim.docker import docker, exec_, image_exists  # noqa: E402

MIX = [
    ("bookworm", "a100x4"),
    ("trixie", "h100x8-pcie"),
    ("bookworm", "t4x2-faulty"),
    ("trixie", "nogpu"),
]
RERUN_TARGET_S = 120
DEFAULT_NODES = "4,16,32,64"
# nodes made ready (booted, tuned, profile applied) side by side: docker exec waits more
# than it computes
SETUP_WORKERS = 4
CALLBACKS = ROOT / "benchmarks" / "callback"


def recap_changed(stdout: str) -> int:
    return sum(int(n) for n in re.findall(r"^\S+\s*:\s*ok=\d+\s+changed=(\d+)", stdout, re.M))


def parse_counts(text: str) -> list[int] | None:
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        return None
    return counts if counts and counts[0] >= 1 else None


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def load_average() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _cgroup_file(cid: str, v1: tuple[str, str], v2: str) -> Path | None:
    """A node container's cgroup file: cgroup v1 (cgroupfs driver), else v2 (systemd or
    cgroupfs driver)."""
    for path in (Path(f"/sys/fs/cgroup/{v1[0]}/docker/{cid}/{v1[1]}"),
                 Path(f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/{v2}"),
                 Path(f"/sys/fs/cgroup/docker/{cid}/{v2}")):  # fmt: skip
        if path.exists():
            return path
    return None


def node_ids(names: list[str]) -> list[str]:
    out = docker(["inspect", "-f", "{{.Id}}", *names], check=False).stdout.decode()
    return out.split()


def nodes_cpu(ids: list[str]) -> float | None:
    """CPU seconds of the node containers' cgroups (v1 cpuacct or v2 cpu.stat)."""
    total = 0.0
    for cid in ids:
        f = _cgroup_file(cid, ("cpuacct", "cpuacct.usage"), "cpu.stat")
        if f is None:
            return None
        text = f.read_text()
        if f.name == "cpuacct.usage":
            total += int(text) / 1e9
        else:
            total += int(re.search(r"^usage_usec (\d+)", text, re.M).group(1)) / 1e6
    return total


def node_rss_mib(ids: list[str]) -> float | None:
    """Mean resident memory of a node (anonymous memory of its cgroup: its processes and
    tmpfs; the page cache it reads is shared and reclaimable), in MiB."""
    sizes = []
    for cid in ids:
        f = _cgroup_file(cid, ("memory", "memory.stat"), "memory.stat")
        if f is None:
            return None
        stat = dict(line.split() for line in f.read_text().splitlines())
        anon = stat.get("total_rss", stat.get("anon"))
        shmem = stat.get("total_shmem", stat.get("shmem", "0"))
        if anon is None:
            return None
        sizes.append((int(anon) + int(shmem)) / 2**20)
    return sum(sizes) / len(sizes) if sizes else None


def timed(
    cmd: list[str], env: dict | None = None
) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, the process tree's CPU seconds, the run)."""
    cpu = children_cpu()
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False, env=env)
    return time.monotonic() - start, children_cpu() - cpu, proc


def host_vars(prefix: str, i: int) -> tuple[str, dict]:
    release, profile = MIX[i % len(MIX)]
    name = f"{prefix}-site-{i:02d}"
    return name, {"gpunode_sim_release": release, "gpunode_sim_profile": profile}


def write_inventory(inv: Path, hosts: dict) -> Path:
    path = inv / "hosts.yml"
    path.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return path


def clone_images(golden: list[str], reuse: bool) -> list[str]:
    """`docker commit` of each converged node, with its machine-id emptied in the image
    (systemd makes each clone its own at boot), the node's own restored after."""
    tags = []
    for name in golden:
        tag = f"gpunode-sim/converged:{name}"
        if reuse and image_exists(tag):
            tags.append(tag)
            continue
        saved = exec_(name, ["cat", "/etc/machine-id"]).stdout
        exec_(name, ["sh", "-c", ": > /etc/machine-id"])
        try:
            docker(["commit", name, tag])
        finally:
            exec_(name, ["sh", "-c", "cat > /etc/machine-id"], input=saved)
        tags.append(tag)
    return tags


def ready_node(spec: cluster.NodeSpec, art: cluster.Artifacts) -> None:
    """What cluster.up does for a started node: boot, tune, gpunode, the mock, the profile."""
    cluster.wait_booted(spec.name)
    cluster.tune_node(spec.name)
    cluster.install_gpunode(spec.name, art, log=lambda *_: None)
    cluster.copy_mock(spec.name, art)
    cluster.apply(spec.name, spec.profile, log=lambda *_: None)


def start_clones(specs: list[cluster.NodeSpec], tags: dict[str, str], art) -> None:
    for spec in specs:
        cluster.start_node(spec, tags[spec.profile], log=lambda *_: None)
    with ThreadPoolExecutor(max_workers=SETUP_WORKERS) as pool:
        list(pool.map(lambda s: ready_node(s, art), specs))


def profile_env() -> dict[str, str]:
    """ansible.cfg's callbacks (or $ANSIBLE_CALLBACKS_ENABLED's; the collection's, found
    where it is installed) and bench_timing."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    enabled = os.environ.get("ANSIBLE_CALLBACKS_ENABLED",
                             cfg.get("defaults", "callbacks_enabled", fallback=""))  # fmt: skip
    paths = [str(ROOT / p.strip()) for p in
             cfg.get("defaults", "callback_plugins", fallback="").split(":") if p.strip()]  # fmt: skip
    return {
        "ANSIBLE_CALLBACK_PLUGINS": ":".join([*paths, str(CALLBACKS)]),
        "ANSIBLE_CALLBACKS_ENABLED": ",".join(x for x in (enabled, "bench_timing") if x),
    }


def print_profile(path: Path, top: int = 12) -> None:
    if not path.exists():
        return
    lines = path.read_text().splitlines()
    print("\n".join("    " + ln for ln in lines[: top + 8]), flush=True)


HOST_TASKS = 5
COMMAND_ACTIONS = ("ansible.builtin.command", "direct_command")


def host_task_costs(
    playbook: list[str], names: list[str], tmp: Path, env: dict[str, str]
) -> dict[str, tuple[float, float, float]]:
    """Per action: controller CPU, node CPU and wall milliseconds per host-task of HOST_TASKS
    tasks running /bin/true on every node (each playbook run twice, alternating)."""
    ids = node_ids(names)
    sums = {a: [0.0, 0.0, 0.0] for a in COMMAND_ACTIONS}
    for _ in range(2):
        for action in COMMAND_ACTIONS:
            tasks = [{"name": f"true {i}", action: {"argv": ["/bin/true"]},
                      "changed_when": False} for i in range(HOST_TASKS)]  # fmt: skip
            path = tmp / f"cost-{action}.yml"
            path.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                             "tasks": tasks}]))  # fmt: skip
            node0 = nodes_cpu(ids) or 0.0
            took, cpu, proc = timed([*playbook, str(path)], env)
            if proc.returncode != 0:
                raise SystemExit(
                    f"bench_site: the {action} playbook failed:\n{proc.stdout[-2000:]}"
                )
            node = (nodes_cpu(ids) or 0.0) - node0
            for i, v in enumerate((cpu, node, took)):
                sums[action][i] += v
    per = 2 * HOST_TASKS * len(names) / 1000
    return {a: (c / per, n / per, w / per) for a, (c, n, w) in sums.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--nodes",
        default=DEFAULT_NODES,
        help=f"node counts of the curve, comma-separated (default {DEFAULT_NODES})",
    )
    ap.add_argument("--forks", type=int, default=16, help="ansible-playbook --forks")
    ap.add_argument("--prefix", default=os.environ.get("GPUNODE_TEST_PREFIX", "bench"))
    ap.add_argument(
        "--from-scratch",
        action="store_true",
        help="provision every node from the bare image (no clones)",
    )
    ap.add_argument(
        "--profile", action="store_true", help="print each re-run's tasks and hosts by time"
    )
    ap.add_argument("--no-molecule", action="store_true", help="site.yml only")
    ap.add_argument(
        "--keep", action="store_true", help="keep the nodes (and the clones' images) afterwards"
    )
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="take the running nodes an earlier --keep left as they are (the "
        "re-run proves them converged: it must change nothing)",
    )
    ap.add_argument(
        "--host-task-cost",
        action="store_true",
        help="after the curve: one command host-task's cost, as a module run and as direct_command",
    )
    args = ap.parse_args()  # fmt: skip
    counts = parse_counts(args.nodes)
    if counts is None or args.forks < 1:
        print(f"bench_site: error: --nodes {args.nodes!r}: want counts >= 1, comma-separated "
              f"(e.g. {DEFAULT_NODES}); --forks must be >= 1", file=sys.stderr)  # fmt: skip
        return 2
    bindir = Path(sys.executable).parent
    env = {**os.environ, "ANSIBLE_NOCOLOR": "1", "GPUNODE_TEST_PREFIX": args.prefix}
    quiet = {"log": lambda *_: None}
    results: list[tuple[str, float, str]] = []
    curve: list[tuple[int, float, float, float | None, float | None, str, int]] = []
    status = 0
    hosts: dict[str, dict] = {}
    images: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-site-") as tmp:
        inv = Path(tmp) / "inventory"
        inv.mkdir()
        (inv / "group_vars").symlink_to(ROOT / "inventories/sim/group_vars")
        art = cluster.Artifacts.build(ROOT / "build", ROOT, **quiet)
        # site.yml validates last; the mix's faulty T4 GPUs fail validation on purpose,
        # so validation's verdict does not fail the run (the report goes to the tmp dir,
        # beside the inventory directory: -i DIR parses every file in it)
        ansible = [str(bindir / "ansible-playbook"), "-i", str(inv), "-f", str(args.forks)]
        playbook = [*ansible, "-e", "gpunode_validate_fail=false",
                    "-e", f"gpunode_validate_report_dir={tmp}/reports"]  # fmt: skip
        all_names = [host_vars(args.prefix, i)[0] for i in range(counts[-1])]
        try:
            running = set()
            if args.reuse:
                running = {
                    name
                    for name in all_names
                    if (cluster.container_state(name) or {}).get("State", {}).get("Running")
                }
            cluster.down_names([name for name in all_names if name not in running], **quiet)

            def run(label: str, extra: list[str], rerun: bool) -> tuple[float, float, int]:
                nonlocal status
                run_env = env
                prof = Path(tmp) / "profile.txt"
                if rerun and args.profile:
                    prof.unlink(missing_ok=True)
                    run_env = {**env, **profile_env(), "BENCH_TIMING_OUT": str(prof)}
                took, cpu, proc = timed([*playbook, *extra, "site.yml"], run_env)
                changed = recap_changed(proc.stdout)
                verdict = "ok" if proc.returncode == 0 else f"FAILED (rc {proc.returncode})"
                if rerun and changed:
                    verdict += f", {changed} changed (expected 0)"
                    status = 1
                if rerun and took > RERUN_TARGET_S:
                    verdict += f", target <= {RERUN_TARGET_S} s NOT MET"
                    status = 1  # as bench_runtime.py: a missed target is a failed run
                if proc.returncode != 0:
                    status = 1
                    print(proc.stdout[-3000:] + proc.stderr[-2000:], file=sys.stderr)
                results.append((label, took, f"{verdict}; {changed} changed"))
                print(f"{label:<40} {took:7.1f} s  controller CPU {cpu:6.1f} s  "
                      f"{results[-1][2]}", flush=True)  # fmt: skip
                if rerun and args.profile:
                    print_profile(prof)
                return took, cpu, changed

            for n in counts:
                new = [host_vars(args.prefix, i) for i in range(len(hosts), n)]
                hosts.update(hv for hv in new if hv[0] in running)
                new = [hv for hv in new if hv[0] not in running]
                write_inventory(inv, hosts)
                if new:
                    start = time.monotonic()
                    hosts.update(new)
                    write_inventory(inv, hosts)
                    specs = [cluster.NodeSpec(name, hv["gpunode_sim_release"],
                                              hv["gpunode_sim_profile"]) for name, hv in new]  # fmt: skip
                    golden = [s for s in specs if int(s.name[-2:]) < len(MIX)]
                    clones = [s for s in specs if s not in golden]
                    if golden or args.from_scratch:
                        fresh = specs if args.from_scratch else golden
                        part = write_inventory(Path(tempfile.mkdtemp(dir=tmp)),
                                               {s.name: hosts[s.name] for s in fresh})  # fmt: skip
                        cluster.up(part, art, **quiet)
                        print(f"{len(fresh)} simulated nodes up in "
                              f"{time.monotonic() - start:.0f} s", flush=True)  # fmt: skip
                        limit = ["--limit", ",".join(s.name for s in fresh)]
                        run(f"site.yml first run ({len(fresh)} new)", limit, rerun=False)
                    if clones and not args.from_scratch:
                        if not images:
                            gold = [host_vars(args.prefix, i)[0] for i in range(len(MIX))]
                            images = clone_images(gold, reuse=args.reuse)
                        tags = dict(zip([p for _, p in MIX], images, strict=True))
                        start = time.monotonic()
                        start_clones(clones, tags, art)
                        print(f"{len(clones)} clones of converged nodes up in "
                              f"{time.monotonic() - start:.0f} s", flush=True)  # fmt: skip
                        limit = ["--limit", ",".join(s.name for s in clones)]
                        run(f"site.yml on the clones ({len(clones)})", limit, rerun=False)
                ids = node_ids(list(hosts))
                load = load_average()
                node_cpu0 = nodes_cpu(ids)
                took, cpu, changed = run(f"site.yml re-run, {n} nodes", [], rerun=True)
                node_cpu1 = nodes_cpu(ids)
                node_cpu = None if node_cpu0 is None else node_cpu1 - node_cpu0
                curve.append((n, took, cpu, node_cpu, node_rss_mib(ids), load, changed))
            if args.host_task_cost:
                costs = host_task_costs(ansible, list(hosts), Path(tmp), env)
        finally:
            if not args.keep:
                cluster.down_names(all_names, **quiet)
                # the clones' images, made by this run or an earlier --keep one (--reuse)
                for i in range(len(MIX)):
                    tag = f"gpunode-sim/converged:{host_vars(args.prefix, i)[0]}"
                    docker(["rmi", tag], check=False)
    print(f"\nsite.yml re-run over the cluster (forks {args.forks}; target <= "
          f"{RERUN_TARGET_S} s)")  # fmt: skip
    print(
        f"  {'nodes':>5} {'wall s':>7} {'s/added node':>12} {'controller CPU s':>16} "
        f"{'nodes CPU s':>11} {'MiB/node':>8} {'changed':>7}  load (1/5/15 min) at start"
    )
    prev = None
    for n, took, cpu, ncpu, rss, load, changed in curve:
        marginal = "" if prev is None else f"{(took - prev[1]) / (n - prev[0]):.2f}"
        print(
            f"  {n:>5} {took:>7.1f} {marginal:>12} {cpu:>16.1f} "
            f"{'n/a' if ncpu is None else f'{ncpu:.1f}':>11} "
            f"{'n/a' if rss is None else f'{rss:.0f}':>8} {changed:>7}  {load}"
        )
        prev = (n, took)
    if args.host_task_cost:
        print(f"\none host-task running /bin/true, over {len(hosts)} nodes "
              f"({HOST_TASKS} tasks a playbook, each playbook twice, in turn)")  # fmt: skip
        print(f"  {'action':<24} {'controller CPU ms':>17} {'node CPU ms':>11} {'wall ms':>8}")
        for action, (ctrl, node, wall) in costs.items():
            print(f"  {action:<24} {ctrl:>17.0f} {node:>11.0f} {wall:>8.0f}")
    if not args.no_molecule:
        molecule = str(bindir / "molecule")
        for scenario in sorted(p.parent.name for p in (ROOT / "molecule").glob("*/molecule.yml")):
            took, _, proc = timed([molecule, "test", "-s", scenario], env)
            verdict = "passed" if proc.returncode == 0 else f"FAILED (rc {proc.returncode})"
            if proc.returncode != 0:
                status = 1
                print(proc.stdout[-3000:] + proc.stderr[-2000:], file=sys.stderr)
            results.append((f"molecule {scenario}", took, verdict))
            print(f"{'molecule test -s ' + scenario:<34} {took:7.1f} s  {verdict}", flush=True)
    print("\nsummary")
    for label, took, verdict in results:
        print(f"  {label:<40} {took:7.1f} s  {verdict}")
    return status


if __name__ == "__main__":
    sys.exit(main())
