#!/usr/bin/env python3
"""Benchmark: pod container start through containerd's CRI, gpunode against runc.

Starts a simulated Debian 13 node (containerd 1.7, 4xA100 profile), registers gpunode with
containerd as the handlers gpunode and nvidia with CDI (`gpunode runtime configure
containerd`), imports the locally built pause image and the simulator's workload image, and
then, as kubelet does, per run and variant: RunPodSandbox (the handler's runtime starts the
pause container), CreateContainer + StartContainer of `true` (the container start), wait
for its exit, remove everything. Variants, interleaved:

  runc                    the default handler, no GPU request
  gpunode, no GPU         handler gpunode, no request
  gpunode, one GPU        handler gpunode, NVIDIA_VISIBLE_DEVICES=1
  gpunode, all GPUs       handler gpunode, NVIDIA_VISIBLE_DEVICES=all
  runc + CDI, one GPU     the default handler, CDI_devices nvidia.com/gpu=1 (containerd
                          injects gpunode's CDI spec; runc) — the cdi-cri strategy
  ..., resident           one GPU, all GPUs and runc + CDI again, served by gpunode's
                          resident service (gpunode.launch.resident: started in the node
                          as the role runs it; for the variants above its directory is
                          renamed away, so the Python runtime and hook serve them)

Printed: median and p90 of the sandbox start and of the container start (create + start),
each with its ratio to runc's median, and the CPU time a container start costs, median
and ratio: the node's cgroup usage from before CreateContainer to after StartContainer
(containerd, its shim, the runtime, runc's parent), plus the container's own cgroup's
once it has exited when it is found under the host's /k8s.io (runc's init, the
createContainer hook, `true`), with how many were found: where it is not (as on the
machine the figures in docs/cri.md come from), the CDI hook's CPU time is not in the
column. On a machine shared with other jobs wall times inflate with their load, CPU time
far less. Then, per GPU variant, where its extra time goes
(issue 28): the runtime shim and the hook write per-phase timings while
/run/gpunode/timing.log exists (gpunode.hook.timing; the benchmark creates it), and the
medians of each phase over the variant's containers are printed beside the extra time,
with the interpreter's start-up and the hook's imports measured in the node for reference.
The client runs on the host and reaches the node's socket through /proc/<pid>/root.

usage: .venv/bin/python benchmarks/bench_cri.py [--runs N] [--keep]
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bench_runtime import RESIDENT as START_RESIDENT  # noqa: E402 - the node as it runs it

from gpunode.cri import pause  # noqa: E402
from gpunode.cri.client import Client, CRIError  # noqa: E402
from gpunode.launch.resident import DIR  # noqa: E402
from gpunode.sim import cluster, images  # noqa: E402
from gpunode.sim.docker import docker, exec_  # noqa: E402

# gpunode.hook.TIMING_LOG, written here so that this benchmark also runs against a
# checkout older than the timings (its runtime then writes none: no breakdown printed)
TIMING_LOG = "/run/gpunode/timing.log"
PROFILE = "a100x4"
VARIANTS = {  # name: (handler, env, CDI devices)
    "runc": ("", {}, []),
    "gpunode, no GPU": ("gpunode", {}, []),
    "gpunode, one GPU": ("gpunode", {"NVIDIA_VISIBLE_DEVICES": "1"}, []),
    "gpunode, all GPUs": ("gpunode", {"NVIDIA_VISIBLE_DEVICES": "all"}, []),
    "runc + CDI, one GPU": ("", {}, ["nvidia.com/gpu=1"]),
    "one GPU, resident": ("gpunode", {"NVIDIA_VISIBLE_DEVICES": "1"}, []),
    "all GPUs, resident": ("gpunode", {"NVIDIA_VISIBLE_DEVICES": "all"}, []),
    "runc + CDI, resident": ("", {}, ["nvidia.com/gpu=1"]),
}
# Variants served by gpunode's resident service (gpunode.launch.resident), which runs in
# the node throughout; for the others its directory is renamed away between variants (not
# timed), so the first stage finds no service and the Python runtime serves, as on a node
# without it.
RESIDENT = {"one GPU, resident", "all GPUs, resident", "runc + CDI, resident"}
RESIDENT_DIR = DIR


def sh(node: str, script: str) -> str:
    proc = exec_(node, ["sh", "-c", script], check=False, timeout=300)
    if proc.returncode != 0:
        raise SystemExit(f"bench: {node}: `{script}` failed: {proc.stderr.decode().strip()}")
    return proc.stdout.decode()


def import_image(node: str, argv: list[str]) -> None:
    save = subprocess.Popen(argv, stdout=subprocess.PIPE)
    imp = subprocess.run(["docker", "exec", "-i", node, *pause.IMPORT_COMMAND],
                         stdin=save.stdout, capture_output=True, check=False)  # fmt: skip
    save.wait()
    if save.returncode or imp.returncode:
        raise SystemExit(f"bench: importing {argv}: {imp.stderr.decode().strip()}")


def prepare(node: str) -> tuple[str, str]:
    """The node as test_cri sets it up; (its pid on the host, workload image)."""
    sh(node, "systemctl stop docker docker.socket containerd && "
             "mount -t tmpfs -o mode=0711 tmpfs /var/lib/containerd && "
             "systemctl start containerd docker && gpunode cdi generate --install >/dev/null && "
             f"mkdir -p -m 0755 {os.path.dirname(TIMING_LOG)} && : > {TIMING_LOG} && "
             + START_RESIDENT)  # fmt: skip
    archive, sandbox = pause.build(ROOT / "build" / "cri")
    workload = images.build("workload", "bookworm", log=lambda *_: None)
    config = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
        f'  sandbox_image = "{sandbox}"\n  restrict_oom_score_adj = true\n'
    )
    sh(node, f"printf %s {shlex.quote(config)} > /etc/containerd/config.toml && "
             "gpunode runtime configure containerd --name gpunode --name nvidia --cdi "
             "--json >/dev/null && systemctl restart containerd")  # fmt: skip
    import_image(node, ["cat", str(archive)])
    import_image(node, ["docker", "save", workload])
    pid = docker(["inspect", "-f", "{{.State.Pid}}", node]).stdout.decode().strip()
    return pid, f"docker.io/{workload}"


_RESIDENT_ON: dict[str, bool] = {}


def resident(node: str, on: bool) -> None:
    """The resident service's directory where the first stage looks for it, or away."""
    if _RESIDENT_ON.get(node) is on:
        return
    _RESIDENT_ON[node] = on
    a, b = (f"{RESIDENT_DIR}.off", RESIDENT_DIR) if on else (RESIDENT_DIR, f"{RESIDENT_DIR}.off")
    sh(node, f"if [ -e {a} ]; then mv {a} {b}; fi")


def cpu_usage_file(pid: str) -> tuple[str, float]:
    """The node's cgroup CPU usage file on the host, and its unit in seconds (cgroup v1's
    cpuacct.usage in ns, else v2's cpu.stat usage_usec)."""
    paths = {}
    with open(f"/proc/{pid}/cgroup") as fh:
        for line in fh:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            for c in ctrls.split(",") if ctrls else [""]:
                paths[c] = path
    if "cpuacct" in paths:
        return f"/sys/fs/cgroup/cpuacct{paths['cpuacct']}/cpuacct.usage", 1e-9
    return f"/sys/fs/cgroup{paths['']}/cpu.stat", 1e-6


def cpu_seconds(usage: tuple[str, float]) -> float:
    path, unit = usage
    with open(path) as fh:
        text = fh.read()
    if path.endswith("cpu.stat"):
        text = next(ln.split()[1] for ln in text.splitlines() if ln.startswith("usage_usec"))
    return int(text) * unit


def container_cpu_seconds(usage: tuple[str, float], cid: str) -> float:
    """The CPU seconds of the container's own cgroup (containerd's default parent, /k8s.io,
    beside the node's: a node container shares the host's cgroup namespace), 0 if absent."""
    path, unit = usage
    top = "/sys/fs/cgroup/cpuacct" if path.endswith("cpuacct.usage") else "/sys/fs/cgroup"
    name = "cpuacct.usage" if path.endswith("cpuacct.usage") else "cpu.stat"
    try:
        return cpu_seconds((f"{top}/k8s.io/{cid}/{name}", unit))
    except (OSError, StopIteration):
        return 0.0


def one(
    c: Client, usage: tuple[str, float], image: str, n: int, handler: str, env: dict, cdi: list
) -> tuple[float, float, str, float, bool]:
    """(sandbox start, container create + start in seconds, container id, CPU seconds of
    the container start, whether the container's own cgroup was found) for one pod."""
    name = f"bench-{n}"
    t0 = time.perf_counter()
    with c.pod(name, handler) as (pod_id, pod_config):
        t1 = time.perf_counter()
        config = c.container_config(name, image, ["true"], env=env, cdi_devices=cdi)
        cpu0 = cpu_seconds(usage)
        cid = c.call("CreateContainer", pod_sandbox_id=pod_id, config=config,
                     sandbox_config=pod_config).container_id  # fmt: skip
        c.call("StartContainer", container_id=cid)
        t2 = time.perf_counter()
        cpu = cpu_seconds(usage) - cpu0
        status = c.wait_exited(cid)
        own = container_cpu_seconds(usage, cid)
        cpu, found = cpu + own, own > 0
        c.call("RemoveContainer", container_id=cid)
        if status.exit_code != 0:
            raise SystemExit(f"bench: {name} exited {status.exit_code}: {status.message}")
    return t1 - t0, t2 - t1, cid, cpu, found


# The node's python3 as the launchers start it, and gpunode-hook's imports (its --version
# loads every module of `configure`): wall and CPU ms, medians of N runs.
REFERENCE = r"""
import os, resource, statistics, subprocess, sys, time
n = int(sys.argv[1])
hook = os.path.realpath("/usr/local/bin/gpunode-hook.py")  # the Python hook itself
for label, argv in (("python3 -IS -c pass", ["python3", "-IS", "-c", "pass"]),
                    ("gpunode-hook --version (start-up + imports)", [hook, "--version"])):
    wall, cpu = [], []
    for _ in range(n):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
        wall.append((time.perf_counter() - t) * 1000)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime) * 1000)
    print(f"{label}\t{statistics.median(wall):.2f}\t{statistics.median(cpu):.2f}")
"""


def parse_timing(text: str) -> dict[str, tuple[str, dict[str, float]]]:
    """gpunode.hook.timing's lines -> {container id: (program, {phase: ms})}."""
    out = {}
    for line in text.splitlines():
        prog, ident, *items = line.split()
        out[ident] = (prog, {k: float(v) for k, _, v in (i.partition("=") for i in items)})
    return out


def print_breakdown(times: dict, ids: dict[str, list[str]], timing: dict, refs: str) -> None:
    """Per GPU variant: its extra over runc and the medians of its phases (ms)."""
    base = statistics.median(t[1] for t in times["runc"]) * 1e3
    print("\nwhere the extra time goes (gpunode.hook.timing, medians over the variant's "
          "containers, ms)")  # fmt: skip
    print("cpu0: CPU time before gpunode's first mark (exec, sh first stage, interpreter "
          "start-up, imports);\nthe other phases: wall time from the previous mark, "
          "total: first mark to last")  # fmt: skip
    for v, cids in ids.items():
        lines = [timing[c] for c in cids if c in timing]
        if not lines:
            continue
        extra = statistics.median(t[1] for t in times[v]) * 1e3 - base
        prog = lines[0][0]
        phases = list(dict.fromkeys(k for _, ph in lines for k in ph))
        cells = "  ".join(
            f"{k}={statistics.median(ph.get(k, 0.0) for _, ph in lines):.1f}" for k in phases
        )
        print(f"{v:<22} extra {extra:5.1f}  {prog} ({len(lines)} lines): {cells}")
        if prog.startswith("gpunode-container-runtime"):
            print(f"{'':<22} (runc's create runs during symlinks, ldcache, sources, wait; "
                  "before it: cpu0's start-up, config, spec, spawn; after it: proc)")  # fmt: skip
    print("in the node, for reference (wall ms, CPU ms):")
    for row in refs.splitlines():
        label, wall, cpu = row.split("\t")
        print(f"  {label:<46} {float(wall):6.1f} {float(cpu):6.1f}")


def p90(xs: list[float]) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(0.9 * (len(s) - 1)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--keep", action="store_true", help="keep the node afterwards")
    args = ap.parse_args()
    if args.runs < 3:
        print(f"bench: error: --runs {args.runs} must be >= 3", file=sys.stderr)
        return 2
    name = f"{os.environ.get('GPUNODE_TEST_PREFIX', 'gpunode')}-bench-cri"
    art = cluster.Artifacts.build(ROOT / "build", ROOT, log=lambda *_: None)
    spec = cluster.NodeSpec(name, "trixie", PROFILE)
    cluster.down_names([name], log=lambda *_: None)
    cluster.start_node(spec, images.build("node", "trixie", log=lambda *_: None),
                       log=lambda *_: None)  # fmt: skip
    times: dict[str, list[tuple]] = {v: [] for v in VARIANTS}
    try:
        cluster.wait_booted(name)
        cluster.tune_node(name)
        cluster.install_gpunode(name, art, log=lambda *_: None)
        cluster.copy_mock(name, art)
        cluster.apply(name, PROFILE, log=lambda *_: None)
        pid, image = prepare(name)
        usage = cpu_usage_file(pid)
        with Client(root=f"/proc/{pid}/root", timeout=120) as c:
            for _ in range(100):
                try:
                    version = c.version().runtime_version
                    break
                except CRIError:
                    time.sleep(0.1)
            n = 0
            for v, (handler, env, cdi) in VARIANTS.items():  # warm-up, not counted
                resident(name, v in RESIDENT)
                one(c, usage, image, n := n + 1, handler, env, cdi)
            sh(name, f": > {TIMING_LOG}")  # the warm-up's lines are not counted
            with open("/proc/loadavg") as fh:
                load = " ".join(fh.read().split()[:3])
            for _ in range(args.runs):
                for v, (handler, env, cdi) in VARIANTS.items():
                    resident(name, v in RESIDENT)
                    times[v].append(one(c, usage, image, n := n + 1, handler, env, cdi))
        timing = parse_timing(sh(name, f"cat {TIMING_LOG}"))
        refs = sh(name, f"python3 -c {shlex.quote(REFERENCE)} {max(args.runs, 10)}")
    finally:
        if not args.keep:
            cluster.down_names([name], log=lambda *_: None)
    base_sb = statistics.median(t[0] for t in times["runc"])
    base_ct = statistics.median(t[1] for t in times["runc"])
    base_cpu = statistics.median(t[3] for t in times["runc"])
    print(f"\npod start through containerd {version}'s CRI (Debian 13, {PROFILE}), "
          f"{args.runs} runs per variant, interleaved, {time.strftime('%Y-%m-%d %H:%M %Z')}; "
          f"ms, ratio to runc's median; load average before: {load}")  # fmt: skip
    print(f"{'variant':<22} {'sandbox med':>11} {'p90':>7} {'ratio':>6}   "
          f"{'container med':>13} {'p90':>7} {'ratio':>6}   {'CPU med':>12} {'ratio':>6}")  # fmt: skip
    for v, ts in times.items():
        sb, ct, cpu = [t[0] for t in ts], [t[1] for t in ts], [t[3] for t in ts]
        print(f"{v:<22} {statistics.median(sb) * 1e3:11.1f} {p90(sb) * 1e3:7.1f} "
              f"{statistics.median(sb) / base_sb:6.2f}   {statistics.median(ct) * 1e3:13.1f} "
              f"{p90(ct) * 1e3:7.1f} {statistics.median(ct) / base_ct:6.2f}   "
              f"{statistics.median(cpu) * 1e3:12.1f} {statistics.median(cpu) / base_cpu:6.2f}")  # fmt: skip
    found = sum(t[4] for ts in times.values() for t in ts)
    print(f"CPU: the node's cgroup, plus the container's own for {found} of "
          f"{sum(map(len, times.values()))} containers (see this script's docstring)")  # fmt: skip
    print_breakdown(times, {v: [t[2] for t in ts] for v, ts in times.items()}, timing, refs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
