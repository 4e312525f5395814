"""gpunode's container runtime on simulated nodes, with real engines: runc bundles, Docker
(`--runtime gpunode`, `--gpus`), CDI with podman and Docker 26, errors and hostile images."""

from __future__ import annotations

import json
import shlex
import tomllib
from pathlib import Path

import pytest

from gpunode.sim.docker import docker
from gpunode.sim.profiles import load_profile

from ..unit.util.test_ldsocache import sort_bomb

pytestmark = pytest.mark.integration

A100 = load_profile("a100x4")
VERSION = A100.driver.version
UUID = [g.uuid for g in A100.gpus]
BUS = [g.bus_id.procfs for g in A100.gpus]
HERE = Path(__file__).parent / "node"
WORK = "/var/lib/gpunode-test"
ROOTFS = f"{WORK}/rootfs"


@pytest.fixture(scope="session")
def runtime_nodes(nodes):
    """Nodes with gpunode as Docker's default runtime, a fresh cache and a CDI spec."""
    for node in nodes.values():
        for f in ("make_bundle.py", "run_bundle.sh", "probe.py"):
            node.sh(f"mkdir -p {WORK}")
            docker(["cp", str(HERE / f), f"{node.name}:{WORK}/{f}"])
        pynvml = node.sh("/opt/gpunode/bin/python -c 'import pynvml; print(pynvml.__file__)'")
        node.sh(
            f"set -e; rm -rf {ROOTFS}; mkdir -p {ROOTFS}; "
            f"cid=$(docker create {node.workload}); docker export $cid | tar -x -C {ROOTFS}; "
            f"docker rm $cid >/dev/null; mkdir -p {ROOTFS}/opt/pynvml; "
            f"cp {pynvml.stdout.strip()} {ROOTFS}/opt/pynvml/; cp {WORK}/probe.py {ROOTFS}/opt/"
        )
        cdi = "--cdi" if node.release == "trixie" else ""  # Docker 20.10 has no CDI
        node.sh(f"gpunode runtime configure docker --set-as-default {cdi} --json")
        node.sh(
            "systemctl restart docker && for i in $(seq 60); do docker info >/dev/null 2>&1 "
            "&& break; sleep 0.5; done"
        )
        node.sh("gpunode runtime refresh && gpunode cdi generate --output /etc/cdi/nvidia.yaml")
        # the workload image for podman too (its own storage)
        node.sh(f"docker save {node.workload} | podman --cgroup-manager cgroupfs load -q")
    return nodes


def run_bundle(node, name: str, env: list[str], runtime: str = "gpunode-container-runtime"):
    bundle = f"{WORK}/bundles/{name}"
    node.sh(f"python3 {WORK}/make_bundle.py {bundle} {ROOTFS} {shlex.quote(json.dumps(env))}")
    proc = node.sh(f"sh {WORK}/run_bundle.sh {runtime} {bundle} t-{name}", check=False)
    return proc


def probe_bundle(node, name, env):
    proc = run_bundle(node, name, env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


CASES = {
    # name: (NVIDIA_VISIBLE_DEVICES value or None for unset, selected GPU indices or None)
    "all": ("all", [0, 1, 2, 3]),
    "none": ("none", []),
    "void": ("void", None),
    "unset": (None, None),
    "one-index": ("1", [1]),
    "indices": ("0,2", [0, 2]),
    "uuid": (UUID[3], [3]),
    "pci-bus-id": ("0000:47:00.0", [2]),
    "mix": (f" 3, {UUID[0]} ,0000:0f:00.0", [3, 0, 1]),
    "jit-cdi-name": ("runtime.nvidia.com/gpu=1", [1]),  # NVIDIA's jit-CDI form
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_runc_bundle_sees_exactly_the_selected_gpus(runtime_nodes, case):
    value, selected = CASES[case]
    for node in runtime_nodes.values():
        env = [] if value is None else [f"NVIDIA_VISIBLE_DEVICES={value}"]
        out = probe_bundle(node, case, env)
        if selected is None:  # not a GPU container: nothing injected at all
            assert out["dev"] == [], (node.release, out)
            assert out["nvml"] == "error: NVMLError_LibraryNotFound"
            continue
        want = sorted(selected)
        assert out["dev"] == sorted(
            ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"] + [f"nvidia{i}" for i in want]
        ), (node.release, out)
        assert sorted(out["nvml"]) == sorted(UUID[i] for i in want), (node.release, out)
        assert out["proc_gpus"] == sorted(BUS[i] for i in want), (node.release, out)
        assert out["modify_device_files"] == ["ModifyDeviceFiles: 0\n"]
        assert out["driver"] == "535.261.03"
        assert out["libcuda_link"] is False  # the mock ships no libcuda


def _add_device_nodes(node, bundle: str, minors: list[int]) -> None:
    """Give the bundle /dev/nvidia<minor> itself, as `--device` or --privileged would."""
    script = (
        "import json,sys; p=sys.argv[1]; s=json.load(open(p)); lx=s.setdefault('linux',{}); "
        "ms=[int(m) for m in sys.argv[2:]]; "
        "lx.setdefault('devices',[]).extend({'path':f'/dev/nvidia{m}','type':'c','major':195,"
        "'minor':m,'fileMode':0o666,'uid':0,'gid':0} for m in ms); "
        "lx.setdefault('resources',{}).setdefault('devices',[]).extend({'allow':True,'type':'c',"
        "'major':195,'minor':m,'access':'rwm'} for m in ms); json.dump(s,open(p,'w'))"
    )
    args = " ".join(str(m) for m in minors)
    node.sh(f"python3 -c {shlex.quote(script)} {bundle}/config.json {args}")


def test_none_with_a_gpu_device_node_shows_no_gpu_in_proc(runtime_nodes):
    """NVIDIA_VISIBLE_DEVICES=none selects no GPU even when the container has a
    /dev/nvidia0 of its own: /proc/driver/nvidia lists none (issue 6, item 8)."""
    for node in runtime_nodes.values():
        bundle = f"{WORK}/bundles/none-dev"
        env = json.dumps(["NVIDIA_VISIBLE_DEVICES=none"])
        node.sh(f"python3 {WORK}/make_bundle.py {bundle} {ROOTFS} {shlex.quote(env)}")
        _add_device_nodes(node, bundle, [0])
        proc = node.sh(
            f"sh {WORK}/run_bundle.sh gpunode-container-runtime {bundle} t-none-dev", check=False
        )
        assert proc.returncode == 0, (node.release, proc.stderr)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert "nvidia0" in out["dev"], (node.release, out)  # the node is there ...
        assert out["proc_gpus"] == [], (node.release, out)  # ... but no GPU was selected


def test_unknown_nvidia_cdi_name_fails_the_container(runtime_nodes):
    for node in runtime_nodes.values():
        proc = run_bundle(node, "nv-foo", ["NVIDIA_VISIBLE_DEVICES=nvidia.com/foo=1"])
        assert proc.returncode != 0, (node.release, proc.stdout)
        assert "unknown CDI device 'nvidia.com/foo=1' requested" in proc.stderr, proc.stderr


def test_non_gpu_spec_is_untouched_byte_for_byte(runtime_nodes):
    node = runtime_nodes["bookworm"]
    bundle = f"{WORK}/bundles/untouched"
    node.sh(f"python3 {WORK}/make_bundle.py {bundle} {ROOTFS} '[]' '[\"true\"]'")
    before = node.sh(f"sha256sum {bundle}/config.json").stdout.split()[0]
    # even with discovery broken (the cache unreadable and NVML gone)
    node.sh("mv /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1 /root/nvml.bak")
    try:
        proc = node.sh(
            f"sh {WORK}/run_bundle.sh gpunode-container-runtime {bundle} t-untouched", check=False
        )
    finally:
        node.sh("mv /root/nvml.bak /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1")
    assert proc.returncode == 0, proc.stderr
    assert node.sh(f"sha256sum {bundle}/config.json").stdout.split()[0] == before


def docker_probe(node, args: str, check=True):
    pynvml = f"{ROOTFS}/opt/pynvml/pynvml.py"
    cmd = (
        f"docker run --rm --network none -v {pynvml}:/opt/pynvml/pynvml.py:ro "
        f"-v {WORK}/probe.py:/opt/probe.py:ro -e PYTHONPATH=/opt/pynvml {args} "
        f"{node.workload} python3 /opt/probe.py"
    )
    proc = node.sh(cmd, check=False)
    if check:
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])
    return proc


def test_docker_runtime_flag_with_env(runtime_nodes):
    for node in runtime_nodes.values():
        out = docker_probe(node, "--runtime gpunode -e NVIDIA_VISIBLE_DEVICES=2")
        assert out["nvml"] == [UUID[2]], (node.release, out)
        assert out["proc_gpus"] == [BUS[2]]
        assert out["modify_device_files"] == ["ModifyDeviceFiles: 0\n"]
        assert out["mig"] == [[0, 0, 0]]  # an A100 with MIG disabled: no MIG devices


def test_docker_gpus_all_and_device_list(runtime_nodes):
    for node in runtime_nodes.values():
        out = docker_probe(node, "--gpus all")
        assert sorted(out["nvml"]) == sorted(UUID), (node.release, out)
        out = docker_probe(node, "--gpus '\"device=1,2\"'")
        assert sorted(out["nvml"]) == sorted([UUID[1], UUID[2]]), (node.release, out)
        assert [d for d in out["dev"] if d[6:].isdigit()] == ["nvidia1", "nvidia2"]


def test_docker_non_gpu_container(runtime_nodes):
    for node in runtime_nodes.values():
        out = docker_probe(node, "")
        assert out["dev"] == [] and out["nvml"] == "error: NVMLError_LibraryNotFound"


def test_docker_errors_reach_the_user(runtime_nodes):
    for node in runtime_nodes.values():
        proc = docker_probe(node, "-e NVIDIA_VISIBLE_DEVICES=7", check=False)
        assert proc.returncode != 0
        assert "unknown device '7'" in proc.stderr, proc.stderr
        assert UUID[0] in proc.stderr  # the message lists the node's GPUs
        proc = docker_probe(
            node, "-e NVIDIA_VISIBLE_DEVICES=all -e 'NVIDIA_REQUIRE_CUDA=cuda>=12.4'", check=False
        )
        assert proc.returncode != 0
        assert "unsatisfied condition: cuda>=12.4" in proc.stderr, proc.stderr
        proc = docker_probe(
            node, "-e NVIDIA_VISIBLE_DEVICES=0 -e NVIDIA_DRIVER_CAPABILITIES=warp", check=False
        )
        assert proc.returncode != 0 and "warp" in proc.stderr


def test_podman_cdi_device(runtime_nodes):
    for node in runtime_nodes.values():
        pynvml = f"{ROOTFS}/opt/pynvml/pynvml.py"
        proc = node.sh(
            "podman --cgroup-manager cgroupfs run --rm --network none "
            f"--device nvidia.com/gpu=1 -v {pynvml}:/opt/pynvml/pynvml.py:ro "
            f"-v {WORK}/probe.py:/opt/probe.py:ro -e PYTHONPATH=/opt/pynvml "
            f"{node.workload} python3 /opt/probe.py",
            check=False,
        )
        assert proc.returncode == 0, (node.release, proc.stderr)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["nvml"] == [UUID[1]], (node.release, out)
        assert [d for d in out["dev"] if d[6:].isdigit()] == ["nvidia1"]
        assert out["proc_gpus"] == [BUS[1]]


def test_docker26_cdi_device(runtime_nodes):
    node = runtime_nodes["trixie"]
    out = docker_probe(node, "--runtime runc --device nvidia.com/gpu=1")
    assert out["nvml"] == [UUID[1]], out
    assert [d for d in out["dev"] if d[6:].isdigit()] == ["nvidia1"]


# /etc/gpunode/runtime.toml as the gpu_container_runtime role renders it (template
# runtime.toml.j2, settings dictsorted, values to_json).
ROLE_RUNTIME_TOML = """# Ansible managed
# gpunode runtime configuration; keys and defaults: gpunode's config.py (README "Configuration").
# Keys not set here take gpunode's defaults.
annotation-prefixes = ["cdi.k8s.io/", "example.com/gpu"]
log-level = "info"
runtimes = ["runc", "crun"]
"""
LAUNCHER = "/usr/local/bin/gpunode-container-runtime.py"


def _annotated_bundle(node, name, annotations):
    bundle = f"{WORK}/bundles/{name}"
    node.sh(f"python3 {WORK}/make_bundle.py {bundle} {ROOTFS} '[]'")
    edit = (
        "import json, sys; p = sys.argv[1]; s = json.load(open(p)); "
        "s['annotations'] = json.loads(sys.argv[2]); json.dump(s, open(p, 'w'))"
    )
    node.sh(
        f"python3 -c {shlex.quote(edit)} {bundle}/config.json "
        f"{shlex.quote(json.dumps(annotations))}"
    )
    proc = node.sh(f"sh {WORK}/run_bundle.sh gpunode-container-runtime {bundle} t-{name}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_first_stage_starts_python_only_for_a_gpu_create(runtime_nodes):
    """On a provisioned node (a runtime.toml, the first stage's file from `gpunode runtime
    refresh`), a `docker run` without a GPU never starts the Python runtime, and one with a
    GPU starts it once, for its create; a spec with annotations goes to Python only when one
    has a configured prefix. The Python launcher is wrapped to count its runs."""
    calls = f"{WORK}/python-runtime-calls"
    wrapper = f'#!/bin/sh\necho "$*" >>{calls}\nexec {LAUNCHER}.real "$@"\n'
    for node in runtime_nodes.values():
        node.sh(
            f"set -e; mkdir -p /etc/gpunode; printf %s {shlex.quote(ROLE_RUNTIME_TOML)} "
            f">/etc/gpunode/runtime.toml; gpunode runtime refresh >/dev/null; "
            f"mv {LAUNCHER} {LAUNCHER}.real; printf %s {shlex.quote(wrapper)} >{LAUNCHER}; "
            f"chmod 755 {LAUNCHER}; : >{calls}"
        )

        def ran():
            return node.sh(f"cat {calls}").stdout.splitlines()  # noqa: B023

        try:
            assert node.sh("head -1 /run/gpunode/first-stage").stdout == "gpunode-first-stage 1\n"
            out = docker_probe(node, "--runtime gpunode")
            assert out["dev"] == [], (node.release, out)
            assert ran() == [], node.release
            out = docker_probe(node, "--runtime gpunode -e NVIDIA_VISIBLE_DEVICES=1")
            assert out["nvml"] == [UUID[1]], (node.release, out)
            assert len(ran()) == 1 and " create " in f" {ran()[0]} ", (node.release, ran())
            out = _annotated_bundle(node, "fs-other-annotation", {"org.example/x": "1"})
            assert out["dev"] == [] and len(ran()) == 1, (node.release, out, ran())
            out = _annotated_bundle(node, "fs-prefix", {"example.com/gpu.a": "nvidia.com/gpu=2"})
            assert out["nvml"] == [UUID[2]], (node.release, out)
            assert len(ran()) == 2 and " create " in f" {ran()[1]} ", (node.release, ran())
        finally:
            node.sh(f"mv {LAUNCHER}.real {LAUNCHER}; rm -f /etc/gpunode/runtime.toml")


# ------------------------------------------------- the shim's own work (no hook process)


def test_docker_proc_driver_is_filtered_and_read_only(runtime_nodes):
    """The shim filters /proc/driver/nvidia in the created container's mount namespace:
    exactly the selected GPUs, ModifyDeviceFiles: 0, every mount of it read-only."""
    script = (
        "ls /proc/driver/nvidia/gpus; echo --; cat /proc/driver/nvidia/params; echo --; "
        "awk '$5 ~ \"^/proc/driver/nvidia\" {print $5, $6}' /proc/self/mountinfo; echo --; "
        f"touch /proc/driver/nvidia/x /proc/driver/nvidia/gpus/{BUS[1]}/x 2>&1; true"
    )
    for node in runtime_nodes.values():
        proc = node.sh(
            "docker run --rm --network none --runtime gpunode -e NVIDIA_VISIBLE_DEVICES=1,3 "
            f"{node.workload} sh -c {shlex.quote(script)}"
        )
        gpus, params, mounts, touch = (p.split("\n") for p in proc.stdout.split("--\n"))
        assert [g for g in gpus if g] == [BUS[1], BUS[3]], (node.release, proc.stdout)
        assert "ModifyDeviceFiles: 0" in params and "ModifyDeviceFiles: 1" not in params
        targets = {ln.split()[0]: ln.split()[1].split(",") for ln in mounts if ln}
        assert sorted(targets) == [
            "/proc/driver/nvidia",
            f"/proc/driver/nvidia/gpus/{BUS[1]}",
            f"/proc/driver/nvidia/gpus/{BUS[3]}",
        ], (node.release, mounts)
        assert all({"ro", "nosuid", "nodev", "noexec"} <= set(o) for o in targets.values())
        assert [ln for ln in touch if ln] == [
            f"touch: cannot touch '{p}': Read-only file system"
            for p in ("/proc/driver/nvidia/x", f"/proc/driver/nvidia/gpus/{BUS[1]}/x")
        ], (node.release, touch)


def test_docker_read_only_container_gets_its_ld_cache(runtime_nodes):
    """--read-only: the shim writes the links and /etc/ld.so.cache before runc makes the
    root read-only, so the loader finds the driver's libraries through the cache."""
    script = (
        "ldconfig -p | grep -o 'libnvidia-ml.so.1 ([^)]*) => [^ ]*'; "
        "readlink /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1; "
        'python3 -c \'import ctypes; n = ctypes.CDLL("libnvidia-ml.so.1"); '
        'print("nvmlInit", n.nvmlInit_v2())\'; touch /rootfs-is-writable 2>/dev/null || echo ro'
    )
    for node in runtime_nodes.values():
        proc = node.sh(
            "docker run --rm --network none --read-only --runtime gpunode "
            f"-e NVIDIA_VISIBLE_DEVICES=0 {node.workload} sh -c {shlex.quote(script)}"
        )
        assert proc.stdout.splitlines() == [
            "libnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
            f"libnvidia-ml.so.{VERSION}",
            "nvmlInit 0",
            "ro",
        ], (node.release, proc.stdout, proc.stderr)


def test_post_create_failure_leaves_no_container(runtime_nodes):
    """The /proc step fails after runc's create (here: a GPU's directory gone from the
    node's /proc/driver/nvidia after discovery): the shim deletes the container and the
    user gets its one error line, through runc bundles and through Docker."""
    node = runtime_nodes["bookworm"]
    gone, away = f"/proc/driver/nvidia/gpus/{BUS[2]}", f"/proc/driver/nvidia/away-{BUS[2]}"
    message = f"/proc/driver/nvidia: GPU {BUS[2]} not found in /proc/driver/nvidia/gpus"
    node.sh(f"mv {gone} {away}")
    try:
        proc = run_bundle(node, "post-create", ["NVIDIA_VISIBLE_DEVICES=2"])
        assert proc.returncode != 0
        lines = [ln for ln in proc.stderr.splitlines() if message in ln]
        assert lines == [f"create failed (1): gpunode-container-runtime: error: {message}"]
        assert "t-post-create" not in node.sh("runc list -q").stdout
        proc = node.sh(
            "docker run --rm --name shim-post-create --network none --runtime gpunode "
            f"-e NVIDIA_VISIBLE_DEVICES=2 {node.workload} true",
            check=False,
        )
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
        assert node.sh("docker ps -aq --filter name=shim-post-create").stdout == ""
        left = node.sh("for d in /run/docker/runtime-*/moby; do runc --root $d list -q; done")
        assert left.stdout == "", left.stdout
    finally:
        node.sh(f"mv {away} {gone}")


# ----------------------------------------------------------------------------- hostile images

EVIL_C = r"""
#include <stdio.h>
#include <unistd.h>
#include <string.h>
__attribute__((constructor)) static void evil(void) {
    char exe[256] = {0}, path[512];
    readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *base = strrchr(exe, '/');
    snprintf(path, sizeof path, "/gpunode-preload-marker-%s-%d", base ? base + 1 : "x", getpid());
    FILE *f = fopen(path, "w");
    if (f) { fputs(exe, f); fclose(f); }
}
"""


def hostile_bundle(node, name, env, prepare: str, args=None):
    bundle = f"{WORK}/bundles/{name}"
    extra = f" {shlex.quote(json.dumps(args))}" if args else ""
    node.sh(
        f"python3 {WORK}/make_bundle.py {bundle} {ROOTFS} {shlex.quote(json.dumps(env))}{extra}"
    )
    node.sh(f"cd {bundle}/rootfs && {prepare}")
    proc = node.sh(
        f"sh {WORK}/run_bundle.sh gpunode-container-runtime {bundle} t-{name}", check=False
    )
    return bundle, proc


def test_hostile_library_dir_symlinked_to_host_path(runtime_nodes):
    node = runtime_nodes["bookworm"]
    host = f"{WORK}/hostlib"
    node.sh(f"rm -rf {host} && mkdir -p {host}")
    # The image's multiarch dir is an absolute symlink to a path that also exists on the
    # host: anything resolving it outside the rootfs would write into the host's dir.
    prepare = (
        f"mkdir -p .{WORK} && mv usr/lib/x86_64-linux-gnu .{host} && "
        f"ln -s {host} usr/lib/x86_64-linux-gnu"
    )
    bundle, proc = hostile_bundle(node, "hostile-libdir", ["NVIDIA_VISIBLE_DEVICES=0"], prepare)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["nvml"] == [UUID[0]]  # it works, inside the container's own tree
    assert node.sh(f"ls -A {host}").stdout == ""  # and the host dir is untouched
    inside = node.sh(f"ls {bundle}/rootfs{host}").stdout.split()
    assert "libnvidia-ml.so.535.261.03" in inside


def test_hostile_proc_symlink_is_refused_and_host_untouched(runtime_nodes):
    node = runtime_nodes["bookworm"]
    fake = f"{WORK}/fakeproc"
    node.sh(f"rm -rf {fake} && mkdir -p {fake}/driver")
    prepare = f"rmdir proc && ln -s {fake} proc"
    _, proc = hostile_bundle(node, "hostile-proc", ["NVIDIA_VISIBLE_DEVICES=0"], prepare)
    assert proc.returncode != 0  # runc or the hook refuses such a rootfs
    assert node.sh(f"find {fake} -mindepth 1 | grep -v '^{fake}/driver$'", check=False).stdout == ""
    assert "nvidia" not in node.sh(f"ls -A {fake}/driver").stdout
    assert node.sh(f"findmnt -rn -o TARGET | grep -c '^{fake}'", check=False).stdout.strip() == "0"


def test_hostile_ld_preload_never_runs_on_the_host(runtime_nodes, tmp_path):
    """CVE-2025-23266: runc starts createContainer hooks with the container root as working
    directory and, for a hook without "env", the container's environment, so an image's
    LD_PRELOAD=/proc/self/cwd/evil.so would load the image's library into the hook."""
    node = runtime_nodes["bookworm"]
    src = tmp_path / "evil.c"
    src.write_text(EVIL_C)
    import subprocess

    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", str(tmp_path / "evil.so"), str(src)], check=True
    )
    docker(["cp", str(tmp_path / "evil.so"), f"{node.name}:{WORK}/evil.so"])
    node.sh("rm -f /gpunode-preload-marker-*")
    preload = "LD_PRELOAD=/proc/self/cwd/evil.so"
    bundle, proc = hostile_bundle(
        node, "hostile-preload", ["NVIDIA_VISIBLE_DEVICES=0", preload], f"cp {WORK}/evil.so evil.so"
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["env_ld_preload"] == preload.split("=", 1)[1] and out["nvml"] == [UUID[0]]
    # the image's own process (cwd /) loaded it, inside its own root ...
    assert node.sh(f"ls {bundle}/rootfs/ | grep -c gpunode-preload-marker").stdout.strip() != "0"
    # ... but nothing ran with it on the host side (the hook, ldconfig)
    assert node.sh("ls / | grep gpunode-preload-marker", check=False).stdout == ""


HOSTILE_ETC = f"{WORK}/hostetc"  # exists on the node, with a cache of its own
HOSTILE_LDCACHE = {
    # /etc itself an absolute link to a node directory
    "etc-link": f"mkdir -p .{HOSTILE_ETC} && cp -a etc/. .{HOSTILE_ETC}/ && rm -rf etc && "
    f"ln -s {HOSTILE_ETC} etc",
    # the cache a link to the node's own cache file
    "cache-link": f"rm -f etc/ld.so.cache && ln -s {HOSTILE_ETC}/ld.so.cache etc/ld.so.cache",
    "cache-fifo": "rm -f etc/ld.so.cache && mkfifo etc/ld.so.cache",
    "cache-huge": "rm -f etc/ld.so.cache && truncate -s 17M etc/ld.so.cache",
}


@pytest.mark.parametrize("case", sorted(HOSTILE_LDCACHE))
def test_hostile_etc_or_ld_cache(runtime_nodes, case):
    """The hook writes the container's ld.so.cache: an image's /etc or ld.so.cache
    pointing at node files, a FIFO or a huge file never makes it touch the node or
    hang, and the container still gets a cache listing the driver's libraries."""
    node = runtime_nodes["bookworm"]
    node.sh(f"rm -rf {HOSTILE_ETC} && mkdir -p {HOSTILE_ETC} && cp /etc/ld.so.cache {HOSTILE_ETC}/")
    before = node.sh(f"ls -l --time-style=+%s.%N {HOSTILE_ETC}; md5sum {HOSTILE_ETC}/*").stdout
    env = ["NVIDIA_VISIBLE_DEVICES=0"]
    check = "python3 /opt/probe.py && /sbin/ldconfig -p | grep -c 'libnvidia-ml.so.1 '"
    _, proc = hostile_bundle(
        node, f"hostile-{case}", env, HOSTILE_LDCACHE[case], args=["sh", "-c", check]
    )
    assert proc.returncode == 0, (case, proc.stderr)
    lines = proc.stdout.strip().splitlines()
    assert json.loads(lines[0])["nvml"] == [UUID[0]], case
    assert lines[1] == "1", case  # one entry: the injected library's, read by glibc
    after = node.sh(f"ls -l --time-style=+%s.%N {HOSTILE_ETC}; md5sum {HOSTILE_ETC}/*").stdout
    assert after == before, case  # the node's directory and file untouched


@pytest.mark.parametrize("kind", ["one-name-digit-runs", "one-name-ucs4"])
def test_hostile_ld_cache_sort_bomb_starts_promptly(runtime_nodes, tmp_path, kind):
    """An image whose ld.so.cache makes sorting it cost (65,535 entries naming one 4,095-byte
    SONAME of digit runs: ~280 s of CPU per container create before sort keys were built
    per distinct name): the GPU container still starts, under a 20 s CPU limit on the
    runtime (the shim sorts in-process), and keeps the image's entries next to the
    driver's."""
    node = runtime_nodes["bookworm"]
    (tmp_path / "bomb.cache").write_bytes(sort_bomb(kind))
    docker(["cp", str(tmp_path / "bomb.cache"), f"{node.name}:{WORK}/bomb.cache"])
    bundle = f"{WORK}/bundles/hostile-sort-{kind}"
    check = "python3 /opt/probe.py && /sbin/ldconfig -p | grep -c 'libnvidia-ml.so.1 '"
    node.sh(
        f"python3 {WORK}/make_bundle.py {bundle} {ROOTFS} "
        f"{shlex.quote(json.dumps(['NVIDIA_VISIBLE_DEVICES=0']))} "
        f"{shlex.quote(json.dumps(['sh', '-c', check]))}"
    )
    node.sh(f"cp {WORK}/bomb.cache {bundle}/rootfs/etc/ld.so.cache")
    proc = node.sh(
        f"prlimit --cpu=20 sh {WORK}/run_bundle.sh gpunode-container-runtime {bundle} "
        f"t-sort-{kind}",
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "not usable" not in proc.stderr  # the image's cache was kept, not replaced
    lines = proc.stdout.strip().splitlines()
    assert json.loads(lines[0])["nvml"] == [UUID[0]]
    assert lines[1] == "1"
    listed = node.sh(f"ldconfig -p -C {bundle}/rootfs/etc/ld.so.cache | grep -c '=>'").stdout
    assert int(listed) > 65_535  # the image's entries and the driver's


def test_hostile_nvidia_smi_symlink_target(runtime_nodes):
    node = runtime_nodes["bookworm"]
    target = f"{WORK}/smi-target"
    node.sh(
        f"echo precious > {target} && printf '#!/bin/sh\\necho fake-nvidia-smi\\n' "
        "> /usr/bin/nvidia-smi && chmod +x /usr/bin/nvidia-smi && gpunode runtime refresh"
    )
    try:
        prepare = f"ln -sf {target} usr/bin/nvidia-smi"
        _, proc = hostile_bundle(
            node, "hostile-smi", ["NVIDIA_VISIBLE_DEVICES=0"], prepare, args=["/usr/bin/nvidia-smi"]
        )
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "fake-nvidia-smi"  # the host binary, mounted inside
        assert node.sh(f"cat {target}").stdout == "precious\n"  # host file untouched
    finally:
        node.sh("rm -f /usr/bin/nvidia-smi && gpunode runtime refresh")


def test_gpus_flag_without_gpunode_runtime_fails_clearly(runtime_nodes):
    """Docker's --gpus runs nvidia-container-runtime-hook; ours says what to do."""
    for node in runtime_nodes.values():
        assert node.sh("readlink /usr/local/bin/nvidia-container-runtime-hook").stdout.strip() == (
            "/opt/gpunode/bin/nvidia-container-runtime-hook"
        )
        proc = docker_probe(node, "--runtime runc --gpus all", check=False)
        assert proc.returncode != 0
        assert "runtime is not gpunode" in proc.stderr, (node.release, proc.stderr)


def test_containerd_configuration_is_accepted_by_containerd(runtime_nodes):
    """The drop-in and imports line are read back by the node's own containerd."""
    for node in runtime_nodes.values():
        node.sh(
            "rm -rf /tmp/ctd && mkdir -p /tmp/ctd && containerd config default > /tmp/ctd/config.toml"
        )
        cmd = (
            "gpunode runtime configure containerd --config /tmp/ctd/config.toml "
            "--drop-in-dir /tmp/ctd/conf.d --set-as-default --json"
        )
        if node.release == "bookworm":  # containerd 1.6: --cdi is refused, nothing changed
            before = node.sh("cat /tmp/ctd/config.toml").stdout
            refused = node.sh(cmd + " --cdi", check=False)
            assert refused.returncode == 2 and "has no CDI" in refused.stderr, refused.stderr
            assert refused.stderr.count("\n") == 1
            assert node.sh("cat /tmp/ctd/config.toml").stdout == before
        else:
            cmd += " --cdi"
        first, again = node.json(cmd), node.json(cmd)
        assert first["changed"] is True and again["changed"] is False
        dump = node.sh("containerd --config /tmp/ctd/config.toml config dump").stdout
        assert 'default_runtime_name = "gpunode"' in dump, node.release
        assert 'BinaryName = "/usr/local/bin/gpunode-container-runtime"' in dump
        if node.release == "trixie":  # containerd 1.7; 1.6 (bookworm) has no CDI setting
            assert "enable_cdi = true" in dump
        assert "/tmp/ctd/conf.d/99-gpunode.toml" in dump  # the imports glob, expanded


# ------------------------------------------------------- containerised driver (driver-root)

DRIVER_ROOT = "/run/nvidia/driver"
LIBDIR = "/usr/lib/x86_64-linux-gnu"
DRIVER_ROOT_CONF = f"{WORK}/runtime-driver-root.toml"
AWAY = "/root/driver-away"

# The driver's files live under DRIVER_ROOT, as a driver container leaves them, and not
# in their host locations: NVML (with an absolute SONAME link that only resolves inside the
# root), its own ld.so.cache, /proc/driver/nvidia, a binary, firmware and an IPC socket.
SETUP_DRIVER_ROOT = f"""set -e
R={DRIVER_ROOT}
rm -rf $R && mkdir -p $R{LIBDIR} $R/etc $R/proc/driver $R/usr/bin $R/run/nvidia-persistenced \
  $R/lib/firmware/nvidia/{VERSION}
cp -a {LIBDIR}/libnvidia-ml.so.{VERSION} $R{LIBDIR}/
ln -s {LIBDIR}/libnvidia-ml.so.{VERSION} $R{LIBDIR}/libnvidia-ml.so.1
echo {LIBDIR} > $R/etc/ld.so.conf && ldconfig -X -r $R
cp -r /proc/driver/nvidia $R/proc/driver/
printf '#!/bin/sh\\necho driver-root-nvidia-smi\\n' > $R/usr/bin/nvidia-smi
chmod 755 $R/usr/bin/nvidia-smi
echo driver-root-firmware > $R/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin
python3 -c "import socket; socket.socket(socket.AF_UNIX).bind('$R/run/nvidia-persistenced/socket')"
mkdir -p {AWAY} && mv {LIBDIR}/libnvidia-ml.so.1 {LIBDIR}/libnvidia-ml.so.{VERSION} {AWAY}/
ldconfig
mount -t tmpfs -o mode=0555 gpunode-test-hidden /proc/driver/nvidia
cat > {DRIVER_ROOT_CONF} <<EOT
driver-root = "$R"
cache-file = "/var/cache/gpunode/driver-root-test.json"
ldconfig = "/sbin/ldconfig"
log-file = ""
EOT
"""
RESTORE_DRIVER_ROOT = f"""
umount /proc/driver/nvidia 2>/dev/null
mv {AWAY}/libnvidia-ml.so.* {LIBDIR}/ 2>/dev/null; ldconfig
rm -rf {DRIVER_ROOT} {AWAY} {DRIVER_ROOT_CONF} /var/cache/gpunode/driver-root-test.json
"""


def test_containerised_driver_under_a_driver_root(runtime_nodes):
    """driver-root = /run/nvidia/driver with the driver gone from its host locations: a
    runc container gets a working NVML with the selected GPUs, and the driver's files at
    their usual paths (issue 6, item 4)."""
    for node in runtime_nodes.values():
        try:
            node.sh(SETUP_DRIVER_ROOT)
            # the host itself no longer has the driver's files or its procfs tree
            assert node.sh(f"ls {LIBDIR} | grep -c libnvidia-ml", check=False).stdout.strip() == "0"
            assert node.sh("ls -A /proc/driver/nvidia").stdout == ""
            bundle = f"{WORK}/bundles/driver-root"
            env = ["NVIDIA_VISIBLE_DEVICES=1,3", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
            check = (
                "python3 /opt/probe.py; nvidia-smi; "
                f"cat /lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin; "
                "test -S /run/nvidia-persistenced/socket && echo socket-ok"
            )
            node.sh(
                f"python3 {WORK}/make_bundle.py {bundle} {ROOTFS} "
                f"{shlex.quote(json.dumps(env))} {shlex.quote(json.dumps(['sh', '-c', check]))}"
            )
            proc = node.sh(
                f"GPUNODE_RUNTIME_CONFIG={DRIVER_ROOT_CONF} "
                f"sh {WORK}/run_bundle.sh gpunode-container-runtime {bundle} t-driver-root",
                check=False,
            )
            assert proc.returncode == 0, (node.release, proc.stderr)
            lines = proc.stdout.strip().splitlines()
            out = json.loads(lines[0])
            assert sorted(out["nvml"]) == sorted([UUID[1], UUID[3]]), (node.release, out)
            assert out["driver"] == VERSION
            assert out["proc_gpus"] == [BUS[1], BUS[3]], (node.release, out)
            assert out["modify_device_files"] == ["ModifyDeviceFiles: 0\n"]
            assert lines[1:] == ["driver-root-nvidia-smi", "driver-root-firmware", "socket-ok"]
            spec = node.json(f"cat {bundle}/config.json")
            sources = {m["destination"]: m["source"] for m in spec["mounts"]}
            assert sources[f"{LIBDIR}/libnvidia-ml.so.{VERSION}"] == (
                f"{DRIVER_ROOT}{LIBDIR}/libnvidia-ml.so.{VERSION}"
            )
            assert sources["/run/nvidia-persistenced/socket"] == (
                f"{DRIVER_ROOT}/run/nvidia-persistenced/socket"
            )
            assert "createContainer" not in spec.get("hooks", {})  # the shim did its work
        finally:
            node.sh(RESTORE_DRIVER_ROOT, check=False)
        # the node is back as it was: the default configuration still works
        assert node.sh(f"ls {LIBDIR}/libnvidia-ml.so.1").returncode == 0
        assert probe_bundle(node, "after-driver-root", ["NVIDIA_VISIBLE_DEVICES=0"])["nvml"] == [
            UUID[0]
        ]


def dumped_cri(node) -> dict:
    """The CRI section of the node's containerd's merged configuration of /tmp/ctd2."""
    dump = node.sh("containerd --config /tmp/ctd2/config.toml config dump").stdout
    assert "/tmp/ctd2/conf.d/50-ops.toml" in dump, node.release  # the imports glob, expanded
    return tomllib.loads(dump)["plugins"]["io.containerd.grpc.v1.cri"]


def test_containerd_keeps_cri_settings_of_other_drop_ins(nodes):
    """containerd < 2.1 (1.6 on bookworm, 1.7 on trixie) replaces a plugin section that an
    imported file defines, so gpunode's drop-in carries the whole CRI section: it must be the
    merged one, or another drop-in's settings go back to their defaults."""
    ops = (
        'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n'
        '  sandbox_image = "registry.example.org/pause:3.9"\n'
        '  [plugins."io.containerd.grpc.v1.cri".registry]\n'
        '    config_path = "/etc/containerd/certs.d"\n'
    )
    for node in nodes.values():
        node.sh(
            "rm -rf /tmp/ctd2 && mkdir -p /tmp/ctd2/conf.d && containerd config default | "
            "sed 's|^imports = \\[\\]|imports = [\"/tmp/ctd2/conf.d/*.toml\"]|' "
            f"> /tmp/ctd2/config.toml && printf %s {shlex.quote(ops)} > /tmp/ctd2/conf.d/50-ops.toml"
        )
        before = dumped_cri(node)
        assert before["sandbox_image"] == "registry.example.org/pause:3.9", node.release
        cmd = (
            "gpunode runtime configure containerd --config /tmp/ctd2/config.toml "
            "--drop-in-dir /tmp/ctd2/conf.d --set-as-default --json"
        )
        first, again = node.json(cmd), node.json(cmd)
        assert first["changed"] is True and again["changed"] is False, node.release
        after = dumped_cri(node)
        assert after["sandbox_image"] == "registry.example.org/pause:3.9", node.release
        assert after["registry"]["config_path"] == "/etc/containerd/certs.d", node.release
        gp = after["containerd"]["runtimes"].pop("gpunode")
        assert gp["runtime_type"] == "io.containerd.runc.v2", node.release
        assert gp["options"]["BinaryName"] == "/usr/local/bin/gpunode-container-runtime"
        assert after["containerd"].pop("default_runtime_name") == "gpunode", node.release
        before["containerd"].pop("default_runtime_name")
        assert after == before, node.release  # nothing else in the CRI section changed


MIG_PROFILE = "a100x2-mig"
NVML_LAYOUT = (
    "import json, pynvml as N; N.nvmlInit(); out = []\n"
    "for i in range(N.nvmlDeviceGetCount()):\n"
    "    h = N.nvmlDeviceGetHandleByIndex(i); migs = []\n"
    "    for s in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):\n"
    "        try: migs.append(N.nvmlDeviceGetUUID(N.nvmlDeviceGetMigDeviceHandleByIndex(h, s)))\n"
    "        except N.NVMLError: pass\n"
    "    out.append({'uuid': N.nvmlDeviceGetUUID(h), 'minor': N.nvmlDeviceGetMinorNumber(h),\n"
    "                'mig': N.nvmlDeviceGetMigMode(h)[0], 'migs': migs})\n"
    "print(json.dumps(out))"
)


@pytest.fixture
def mig_nodes(runtime_nodes):
    """The nodes on the MIG profile (GPU 0 in MIG mode with three MIG devices, GPU 1 a full
    GPU), the runtime's cache and the CDI spec refreshed as the gpu_mig role does after a
    change; back on the 4xA100 profile afterwards."""
    layouts = {}
    for node in runtime_nodes.values():
        node.apply(MIG_PROFILE)
        node.sh("gpunode runtime refresh && gpunode cdi generate --output /etc/cdi/nvidia.yaml")
        layouts[node.release] = node.json(f"/opt/gpunode/bin/python -c {shlex.quote(NVML_LAYOUT)}")
    yield runtime_nodes, layouts
    for node in runtime_nodes.values():
        node.apply("a100x4")
        node.sh("gpunode runtime refresh && gpunode cdi generate --output /etc/cdi/nvidia.yaml")


def _mig_case(node, layout, value, check=True):
    return docker_probe(node, f"--runtime gpunode -e NVIDIA_VISIBLE_DEVICES={value}", check)


def test_docker_mig_devices_see_exactly_what_they_asked_for(mig_nodes):
    nodes, layouts = mig_nodes
    for node in nodes.values():
        gpu0, gpu1 = layouts[node.release]
        assert gpu0["mig"] == 1 and len(gpu0["migs"]) == 3 and gpu1["mig"] == 0, gpu0
        migs = gpu0["migs"]
        # <gpu>:<n>: the n-th MIG device NVML lists, nothing else of its GPU, no other GPU
        for n in range(3):
            out = _mig_case(node, gpu0, f"0:{n}")
            assert out["nvml"] == [gpu0["uuid"]], (node.release, n, out)
            assert out["mig_devices"] == [[migs[n]]], (node.release, n, out)
            assert len(out["dev_caps"]) == 2 and len(out["proc_caps"]) == 2, out
            assert [d for d in out["dev"] if d[6:].isdigit()] == [f"nvidia{gpu0['minor']}"]
        # by MIG UUID, and mixed with the full GPU
        out = _mig_case(node, gpu0, migs[2])
        assert out["mig_devices"] == [[migs[2]]], (node.release, out)
        out = _mig_case(node, gpu0, f"{migs[1]},1")
        assert sorted(out["nvml"]) == sorted([gpu0["uuid"], gpu1["uuid"]]), out
        assert sorted(map(tuple, out["mig_devices"])) == sorted([(migs[1],), ()]), out
        # all: every MIG device and the GPU with MIG off
        out = _mig_case(node, gpu0, "all")
        assert sorted(out["nvml"]) == sorted([gpu0["uuid"], gpu1["uuid"]]), out
        assert sorted(map(tuple, out["mig_devices"])) == sorted([tuple(migs), ()]), out
        assert len(out["dev_caps"]) == 6 and len(out["proc_caps"]) == 6, out
        # a MIG device the node does not have: one line naming it
        proc = _mig_case(node, gpu0, "0:7", check=False)
        assert proc.returncode != 0
        assert "unknown MIG device '0:7' requested" in proc.stderr, proc.stderr
        assert migs[0] in proc.stderr


def test_cdi_mig_devices(mig_nodes):
    nodes, layouts = mig_nodes
    for node in nodes.values():
        gpu0, gpu1 = layouts[node.release]
        spec = node.json("gpunode cdi generate --format json")
        names = [d["name"] for d in spec["devices"]]
        assert names == ["0:0", gpu0["migs"][0], "0:1", gpu0["migs"][1], "0:2", gpu0["migs"][2],
                         "1", gpu1["uuid"], "all"], names  # fmt: skip
    node = nodes["trixie"]  # Docker 26: CDI; the hook finds the access files from the caps
    gpu0, _ = layouts["trixie"]
    out = docker_probe(node, "--runtime runc --device nvidia.com/gpu=0:1")
    assert out["mig_devices"] == [[gpu0["migs"][1]]], out
    assert len(out["proc_caps"]) == 2, out
    for node in nodes.values():  # podman, by MIG UUID
        gpu0, _ = layouts[node.release]
        pynvml = f"{ROOTFS}/opt/pynvml/pynvml.py"
        proc = node.sh(
            "podman --cgroup-manager cgroupfs run --rm --network none "
            f"--device nvidia.com/gpu={gpu0['migs'][2]} -v {pynvml}:/opt/pynvml/pynvml.py:ro "
            f"-v {WORK}/probe.py:/opt/probe.py:ro -e PYTHONPATH=/opt/pynvml "
            f"{node.workload} python3 /opt/probe.py",
            check=False,
        )
        assert proc.returncode == 0, (node.release, proc.stderr)
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        assert out["nvml"] == [gpu0["uuid"]], (node.release, out)
        assert out["mig_devices"] == [[gpu0["migs"][2]]], (node.release, out)


def test_docker_mig_config_needs_privilege_and_all(mig_nodes):
    nodes, layouts = mig_nodes
    for node in nodes.values():
        gpu0, _ = layouts[node.release]
        env = "-e NVIDIA_VISIBLE_DEVICES=all -e NVIDIA_MIG_CONFIG_DEVICES=all"
        proc = docker_probe(node, f"--runtime gpunode {env}", check=False)
        assert proc.returncode != 0
        assert "cannot set MIG_CONFIG_DEVICES in non privileged container" in proc.stderr
        out = docker_probe(node, f"--runtime gpunode --cap-add SYS_ADMIN {env}")
        assert sorted(map(tuple, out["mig_devices"])) == sorted([tuple(gpu0["migs"]), ()]), out
        assert "mig/config" in out["proc_caps"] and "mig/monitor" in out["proc_caps"], out
        proc = docker_probe(
            node,
            "--runtime gpunode --cap-add SYS_ADMIN -e NVIDIA_VISIBLE_DEVICES=0:1 "
            "-e NVIDIA_MIG_MONITOR_DEVICES=all",
            check=False,
        )
        assert proc.returncode != 0
        assert "cannot enable mig-monitor with specific MIG devices selected" in proc.stderr


CREATE_1G = (
    "import pynvml as N; N.nvmlInit(); h = N.nvmlDeviceGetHandleByIndex(0)\n"
    "p = N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_1_SLICE)\n"
    "gi = N.nvmlDeviceCreateGpuInstance(h, p.id)\n"
    "c = N.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, "
    "N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, N.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)\n"
    "N.nvmlGpuInstanceCreateComputeInstance(gi, c.id)"
)


def test_a_mig_device_created_after_the_cache_is_found(mig_nodes):
    """MIG layouts change without a driver change: a GPU instance created through NVML
    after the inventory cache was written is served without `gpunode runtime refresh`
    (the runtime compares the cached layout with the driver's capability tree)."""
    nodes, layouts = mig_nodes
    for node in nodes.values():
        before = set(layouts[node.release][0]["migs"])
        node.sh(f"/opt/gpunode/bin/python -c {shlex.quote(CREATE_1G)}")
        after = node.json(f"/opt/gpunode/bin/python -c {shlex.quote(NVML_LAYOUT)}")
        (new,) = set(after[0]["migs"]) - before
        out = _mig_case(node, after[0], new)
        assert out["mig_devices"] == [[new]], (node.release, out)
        n = after[0]["migs"].index(new)
        out = _mig_case(node, after[0], f"0:{n}")
        assert out["mig_devices"] == [[new]], (node.release, out)
