"""The simulated cluster: node containers that look like GPU servers (host side).

A node is a container of a debootstrapped Debian image with systemd as PID 1, a Docker
engine inside (``/var/lib/docker`` on a volume so overlay2 works), gpunode installed exactly
as the role gpunode_install installs it (see install_gpunode) and a GPU profile applied. The
node list is the Ansible inventory ``inventories/sim/hosts.yml`` itself: each host's
``gpunode_sim_release`` and ``gpunode_sim_profile`` say what to start, so the inventory and
the containers cannot drift.

``--privileged`` fails on our machines (CAP_SYS_RESOURCE is not in the bounding set), so a
node gets explicit capabilities, seccomp/apparmor unconfined, the host cgroup namespace with
/sys/fs/cgroup mounted read-write, and device-cgroup rules for the NVIDIA majors.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..nvidia.devices import NVIDIA_MAJOR
from ..util.command import OperationError
from . import images, mocknvml, nvidiarepo, procdriver
from .docker import docker, exec_
from .procfs import CAPS_MAJOR, UVM_MAJOR
from .profiles import ProfileError, load_profile

LABEL = "gpunode.sim"
NODE_CAPS = [
    "SYS_ADMIN",
    "NET_ADMIN",
    "MKNOD",
    "SYS_PTRACE",
    "SYS_MODULE",
    "SYS_CHROOT",
    "SETFCAP",
    "SETPCAP",
    "DAC_READ_SEARCH",
    "AUDIT_CONTROL",
]
MOCK_IN_NODE = "/usr/lib/gpunode-sim/libnvidia-ml.mock.so"
# The simulator's own copy of gpunode (this tree, gpunode.sim included) in a node, where
# `sim apply-local` runs from: the wheel nodes get (VENV) leaves the simulator out.
SIM_IN_NODE = "/opt/gpunode-sim"


class SimError(OperationError, RuntimeError):
    pass


@dataclass(frozen=True)
class NodeSpec:
    name: str
    release: str
    profile: str


def read_inventory(path: Path) -> list[NodeSpec]:
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise SimError(f"cannot read inventory {path}: {exc.strerror}") from None
    nodes: list[NodeSpec] = []

    def walk(group: dict) -> None:
        for name, hv in (group.get("hosts") or {}).items():
            hv = hv or {}
            if "gpunode_sim_profile" in hv:
                release = hv.get("gpunode_sim_release", "bookworm")
                if release not in images.RELEASES:
                    raise SimError(
                        f"{path}: host {name}: gpunode_sim_release {release!r} is not one of "
                        f"{', '.join(images.RELEASES)}"
                    )
                nodes.append(NodeSpec(name, release, str(hv["gpunode_sim_profile"])))
        for child in (group.get("children") or {}).values():
            walk(child or {})

    walk((data or {}).get("all", {}))
    if not nodes:
        raise SimError(f"{path}: no host has gpunode_sim_profile set; nothing to simulate")
    return nodes


def check_profiles(nodes: list[NodeSpec]) -> None:
    """Every node's profile loads as `sim apply-local` will load it in the node (a built-in
    name or a host path), or one ProfileError naming each node whose profile does not, and
    why: run before anything is built or started, so a bad profile leaves nothing behind."""
    bad = []
    for spec in nodes:
        try:
            load_profile(spec.profile)
        except ProfileError as exc:
            bad.append(f"{spec.name}: {exc}")
    if bad:
        raise ProfileError("; ".join(bad))


INSTALL_ROLE = "roles/gpunode_install"  # relative to the project


@dataclass(frozen=True)
class RoleInstall:
    """How the role gpunode_install puts gpunode on a node, read from the role itself (its
    one home): the wheels' directory, the virtualenv and the links' directory (its defaults,
    which inventories/sim keeps), its launcher (files/run-from-wheels.py) and its wheel
    recipe (files/build-wheels.py)."""

    wheels: str
    venv: str
    bin_dir: str
    launcher: str
    build_script: Path

    @classmethod
    def read(cls, project: Path) -> RoleInstall:
        role = project / INSTALL_ROLE
        try:
            defaults = yaml.safe_load((role / "defaults/main.yml").read_text()) or {}
            launcher = (role / "files/run-from-wheels.py").read_text()
        except OSError as exc:
            raise SimError(f"cannot read {exc.filename}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            first = str(exc).splitlines()[0]
            raise SimError(f"{role}/defaults/main.yml: not YAML ({first})") from None
        keys = ("gpunode_install_node_wheel_dir", "gpunode_install_venv",
                "gpunode_install_bin_dir")  # fmt: skip
        values = [defaults.get(k) for k in keys]
        for key, value in zip(keys, values, strict=True):
            if not isinstance(value, str) or not value.startswith("/") or "{{" in value:
                raise SimError(f"{role}/defaults/main.yml: {key} is not an absolute path")
        return cls(*values, launcher=launcher, build_script=role / "files/build-wheels.py")


@dataclass(frozen=True)
class Artifacts:
    """Files built on the host and copied into nodes: the mock NVML, procdriver and the
    wheels (and how the role installs them)."""

    mock: Path
    procdriver: Path
    wheels: Path
    install: RoleInstall

    @classmethod
    def build(cls, out: Path, project: Path, log=print) -> Artifacts:
        out.mkdir(parents=True, exist_ok=True)
        mock = out / "libnvidia-ml.mock.so"
        stamp = out / "libnvidia-ml.mock.so.sha256"
        digest = mocknvml.build_digest()
        if not mock.exists() or not stamp.exists() or stamp.read_text() != digest:
            mocknvml.build_library(mock)
            stamp.write_text(digest)
            log(f"built {mock}")
        proc_bin = out / procdriver.IN_NODE.name
        proc_stamp = out / f"{proc_bin.name}.sha256"
        digest = procdriver.digest()
        if not proc_bin.exists() or not proc_stamp.exists() or proc_stamp.read_text() != digest:
            procdriver.build(proc_bin)
            proc_stamp.write_text(digest)
            log(f"built {proc_bin}")
        install = RoleInstall.read(project)
        wheels = out / "wheels"
        # the role's own recipe (the same tree gives the role the same bytes)
        run = subprocess.run(
            [sys.executable, str(install.build_script), str(project), str(wheels)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if run.returncode != 0:
            last = (run.stderr.strip().splitlines() or ["no output"])[-1]
            raise SimError(f"building the wheels failed: {last}")
        return cls(mock, proc_bin, wheels, install)


def container_state(name: str) -> dict | None:
    proc = docker(["inspect", name], check=False)
    if proc.returncode != 0:
        return None
    return json.loads(proc.stdout)[0]


APT_SHARED = "/var/cache/gpunode-apt-shared"


def apt_cache(release: str) -> Path:
    """Host directory shared by every node of a release, mounted at APT_SHARED.

    Not mounted as /var/cache/apt/archives itself: apt takes that directory's lock without
    waiting, so nodes installing at once would fail ("Could not get lock"). Each node keeps
    its own archives; tune_node copies the shared packages in at start and an apt hook
    (DPkg::Pre-Invoke, after downloads) publishes new ones, each by an atomic rename, so a
    second run on fresh nodes downloads nothing.
    """
    path = images.cache_dir() / "apt" / release
    path.mkdir(parents=True, exist_ok=True)
    return path


# What runs before systemd in a node of a release that needs it (images.Release): systemd
# >= 258 runs only on the unified hierarchy, so the node gets a cgroup namespace of its own
# (its root is the node container's cgroup) and the cgroup2 filesystem in place of the v1
# mounts Docker gave it (read-only); /proc/sys/net (the node's network namespace only)
# made writable for Docker >= 28.
CGROUP2_MOUNT = "umount -R /sys/fs/cgroup && mount -t cgroup2 -o nsdelegate cgroup2 /sys/fs/cgroup"
NET_SYSCTL_RW = "mount --bind /proc/sys/net /proc/sys/net && mount -o remount,bind,rw /proc/sys/net"


def node_command(release: images.Release) -> list[str]:
    """The node container's command: systemd, after the release's boot steps."""
    if release.cgroup2:
        init = ["/sbin/init"]
    else:
        # systemd 256 and 257 refuse cgroup v1 unless forced; in a container it reads these
        # "kernel command line" options from its own argv. Harmless on older systemd.
        init = ["/sbin/init", "systemd.unified_cgroup_hierarchy=0",
                "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1"]  # fmt: skip
    steps = [CGROUP2_MOUNT] * release.cgroup2 + [NET_SYSCTL_RW] * release.net_sysctl_rw
    if not steps:
        return init
    return ["/bin/sh", "-c", " && ".join([*steps, "exec " + " ".join(init)])]


def node_settings(spec: NodeSpec) -> dict:
    """How a node container is run; also read by molecule/shared/create.yml (as JSON)."""
    release = images.RELEASE[spec.release]
    volumes = [] if release.cgroup2 else ["/sys/fs/cgroup:/sys/fs/cgroup:rw"]
    volumes += [
        f"{spec.name}-docker:/var/lib/docker",
        f"{spec.name}-containers:/var/lib/containers",
        f"{apt_cache(spec.release)}:{APT_SHARED}",
    ]
    return {
        "hostname": spec.name,
        "stop_signal": "SIGRTMIN+3",
        "labels": {LABEL: "1", f"{LABEL}.profile": spec.profile},
        "capabilities": NODE_CAPS,
        "security_opts": ["seccomp=unconfined", "apparmor=unconfined"],
        "cgroupns_mode": "private" if release.cgroup2 else "host",
        "volumes": volumes,
        "tmpfs": ["/run:exec,mode=755", "/run/lock"],
        # the driver's majors: its fixed one and the dynamic ones the simulated driver takes
        "device_cgroup_rules": [f"c {m}:* rwm" for m in (NVIDIA_MAJOR, UVM_MAJOR, CAPS_MAJOR)],
        "command": node_command(release),
    }


def start_node(spec: NodeSpec, image: str, log=print) -> bool:
    """Start the node container; True when it was (re)created."""
    state = container_state(spec.name)
    if state is not None:
        if state["Config"]["Image"] == image and state["State"]["Running"]:
            return False
        docker(["rm", "-f", spec.name])
    s = node_settings(spec)
    args = ["run", "-d", "--name", spec.name, "--hostname", s["hostname"]]
    args += ["--stop-signal", s["stop_signal"], f"--cgroupns={s['cgroupns_mode']}"]
    for key, value in s["labels"].items():
        args += ["--label", f"{key}={value}"]
    for flag, key in (
        ("--cap-add", "capabilities"),
        ("--security-opt", "security_opts"),
        ("-v", "volumes"),
        ("--tmpfs", "tmpfs"),
        ("--device-cgroup-rule", "device_cgroup_rules"),
    ):
        for value in s[key]:
            args += [flag, value]
    docker([*args, image, *s["command"]])
    log(f"{spec.name}: started from {image}")
    return True


def wait_booted(name: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        proc = exec_(name, ["systemctl", "is-system-running"], check=False, timeout=30)
        last = proc.stdout.decode().strip()
        if last in ("running", "degraded"):
            break
        time.sleep(1)
    else:
        raise SimError(f"{name}: systemd did not finish booting in {timeout:.0f}s (state {last!r})")
    while time.monotonic() < deadline:
        if exec_(name, ["docker", "info"], check=False, timeout=30).returncode == 0:
            return last
        time.sleep(1)
    raise SimError(f"{name}: the Docker engine inside the node did not come up in {timeout:.0f}s")


# /proc/sys is read-only inside a node container, so podman must not try to set its
# default sysctl (net.ipv4.ping_group_range) in the containers it starts.
PODMAN_CONF = "[containers]\ndefault_sysctls = []\n"


# The image's package lists were removed at build time, which left /var/lib/apt/lists with
# the build's mtime: apt's "cache is fresh" test (Ansible's cache_valid_time) would take a
# node started within the hour for one whose lists are current. Empty lists mean "never
# updated": say so with the epoch (done only while the directory is empty).
APT_SHARE_SCRIPT = f"""#!/bin/sh
# gpunode-sim: copy .deb files between the node's apt archives and the shared host cache.
# usage: gpunode-sim-apt-share in|out
[ -d {APT_SHARED} ] || exit 0
if [ "$1" = in ]; then src={APT_SHARED}; dst=/var/cache/apt/archives
else src=/var/cache/apt/archives; dst={APT_SHARED}; fi
for f in "$src"/*.deb; do
  [ -e "$f" ] || continue
  b=$(basename "$f")
  [ -e "$dst/$b" ] && continue
  cp "$f" "$dst/.$b.$$" && mv "$dst/.$b.$$" "$dst/$b" || rm -f "$dst/.$b.$$"
done
exit 0
"""
APT_SHARE_HOOK = 'DPkg::Pre-Invoke { "/usr/local/sbin/gpunode-sim-apt-share out"; };\n'

APT_LISTS_NEVER_UPDATED = (
    "[ -n \"$(ls -A /var/lib/apt/lists 2>/dev/null | grep -v -e '^lock$' -e '^partial$')\" ]"
    " || touch -d @0 /var/lib/apt/lists"
)


# A node on the unified hierarchy (images.Release.cgroup2) whose host keeps the controllers
# on cgroup v1 has a cgroup2 without controllers: no cpu.weight, memory.max, pids.max. runc
# fails a container whose spec asks for one — containerd gives every pod sandbox CPU shares
# (2), podman every container a pids limit. Such a node gets, from tune_node: this runc in
# /usr/local/sbin (first on PATH: containerd's shims, Docker's, gpunode's runtime find it),
# which drops the limits the node's cgroup cannot hold and execs Debian's runc, and podman
# without its default pids limit. Device rules stay (cgroup2 enforces them with eBPF, no
# controller needed). On a host with controllers for cgroup2 nothing is installed.
SIM_RUNC = r"""#!/usr/bin/python3 -IS
# gpunode-sim (gpunode.sim.cluster.SIM_RUNC): runc for a node whose cgroup2 lacks controllers
import json, os, sys
REAL = "/usr/sbin/runc"
LIMITS = {"cpu": "cpu", "memory": "memory", "pids": "pids", "blockIO": "io",
          "hugepageLimits": "hugetlb"}
argv = sys.argv[1:]
if "create" in argv or "run" in argv:
    bundle = "."
    for i, a in enumerate(argv):
        if a in ("--bundle", "-b") and i + 1 < len(argv):
            bundle = argv[i + 1]
        elif a.startswith("--bundle="):
            bundle = a.split("=", 1)[1]
    path = os.path.join(bundle, "config.json")
    try:
        with open("/sys/fs/cgroup/cgroup.controllers") as f:
            have = set(f.read().split())
        with open(path) as f:
            spec = json.load(f)
        res = (spec.get("linux") or {}).get("resources") or {}
        drop = [k for k, c in LIMITS.items() if k in res and c not in have]
        if drop:
            for k in drop:
                del res[k]
            with open(path + ".gpunode-sim", "w") as f:
                json.dump(spec, f)
            os.replace(path + ".gpunode-sim", path)
    except (OSError, ValueError):
        pass
os.execv(REAL, [REAL, *argv])
"""
CGROUP2_TUNE = (
    "c=/sys/fs/cgroup/cgroup.controllers; [ -f $c ] || exit 0; "
    "grep -qw cpu $c || { cat > /usr/local/sbin/runc && chmod 755 /usr/local/sbin/runc; }; "
    "grep -qw pids $c || { mkdir -p /etc/containers/containers.conf.d && "
    "printf '[containers]\npids_limit = 0\n' "
    "> /etc/containers/containers.conf.d/gpunode-sim-cgroup2.conf; }"
)


def tune_node(name: str) -> None:
    """Adapt engines inside the node to running in a container (and to a cgroup2 without
    controllers: SIM_RUNC); empty apt lists look old; the shared apt cache (see apt_cache)."""
    exec_(name, ["sh", "-c", CGROUP2_TUNE], input=SIM_RUNC.encode())
    exec_(
        name,
        [
            "sh",
            "-c",
            "cat > /usr/local/sbin/gpunode-sim-apt-share && chmod 755 "
            "/usr/local/sbin/gpunode-sim-apt-share && /usr/local/sbin/gpunode-sim-apt-share in",
        ],
        input=APT_SHARE_SCRIPT.encode(),
    )
    exec_(
        name,
        ["sh", "-c", "cat > /etc/apt/apt.conf.d/99gpunode-sim-apt-share"],
        input=APT_SHARE_HOOK.encode(),
    )
    exec_(
        name,
        [
            "sh",
            "-c",
            "mkdir -p /etc/containers/containers.conf.d && cat > "
            "/etc/containers/containers.conf.d/gpunode-sim.conf && " + APT_LISTS_NEVER_UPDATED,
        ],
        input=PODMAN_CONF.encode(),
    )


def load_image(name: str, image: str) -> None:
    """`docker save IMAGE` on the host into node `name`'s Docker (`docker load`): nodes have
    no registry to pull from."""
    save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
    load = subprocess.run(
        ["docker", "exec", "-i", name, "docker", "load", "-q"],
        stdin=save.stdout,
        capture_output=True,
        check=False,
    )
    save.wait()
    if load.returncode != 0:
        raise SimError(f"{name}: docker load failed: {load.stderr.decode().strip()[-300:]}")


def install_gpunode(name: str, art: Artifacts, log=print) -> bool:
    """gpunode on the node exactly as gpunode_install leaves it; True when something changed.

    The role's own steps: its launcher runs `gpunode provision install` from the wheels'
    directory, after checking that the directory holds exactly the wheels built here (exit
    3 otherwise: they are copied, replacing what was there, and it runs again). So the
    virtualenv, its digest stamp and the links are the role's by construction, and a
    provisioning run with the same tree finds gpunode current on a simulated node instead
    of reinstalling it (and the simulator finds the role's install current in turn).
    """
    ins = art.install
    sums = {
        w.name: hashlib.sha256(w.read_bytes()).hexdigest() for w in sorted(art.wheels.glob("*.whl"))
    }
    argv = ["python3", "-c", ins.launcher, ins.wheels, "provision", "install", "--json",
            "--venv", ins.venv, "--wheels", ins.wheels, "--bin-dir", ins.bin_dir]  # fmt: skip
    env = {"GPUNODE_WHEELS_SHA256": json.dumps(sums)}
    proc = exec_(name, argv, env=env, check=False, timeout=600)
    if proc.returncode == 3:  # not exactly these wheels there
        exec_(name, ["rm", "-rf", ins.wheels])
        docker(["cp", str(art.wheels), f"{name}:{ins.wheels}"])
        proc = exec_(name, argv, env=env, check=False, timeout=600)
    try:
        result = json.loads(proc.stdout)
    except ValueError:
        result = None
    if proc.returncode != 0 or not isinstance(result, dict) or "changed" not in result:
        why = result.get("message") if isinstance(result, dict) else None
        why = why or (proc.stderr.decode().strip().splitlines() or ["no output"])[-1]
        raise SimError(f"{name}: installing gpunode failed: {why}")
    if result["changed"]:
        log(f"{name}: installed gpunode into {ins.venv} as gpunode_install does")
    return bool(result["changed"])


def copy_mock(name: str, art: Artifacts) -> None:
    """Copy the mock NVML and procdriver into the node, where `sim apply-local` finds them,
    and the simulator itself (this gpunode tree) into SIM_IN_NODE."""
    exec_(name, ["mkdir", "-p", str(Path(MOCK_IN_NODE).parent)])
    docker(["cp", str(art.mock), f"{name}:{MOCK_IN_NODE}"])
    docker(["cp", str(art.procdriver), f"{name}:{procdriver.IN_NODE}"])
    exec_(name, ["sh", "-c", f"rm -rf {SIM_IN_NODE} && mkdir -p {SIM_IN_NODE}"])
    docker(["cp", str(Path(__file__).resolve().parents[1]), f"{name}:{SIM_IN_NODE}/gpunode"])


def install_fabric_manager(name: str, version: str, build_dir: Path, log=print) -> None:
    """NVIDIA's fabric manager package at ``version``, as the simulated NVIDIA repository
    builds it (the stand-in at that version, its unit and config), installed, enabled and
    started on a running node that is not provisioned from that repository: tests and
    benchmarks that need an HGX node's fabric trained without a provisioning run. dpkg
    installs it without its dependencies (systemd-coredump, from Debian's archive: not
    needed to run the stand-in); apt on that node then reports them missing."""
    deb = nvidiarepo.fm_deb(version, build_dir)
    docker(["cp", str(deb), f"{name}:/tmp/{deb.name}"])
    steps = (f"dpkg -i --force-depends /tmp/{deb.name} >/dev/null 2>&1 && rm /tmp/{deb.name} "
             "&& systemctl daemon-reload && systemctl enable --now nvidia-fabricmanager.service")  # fmt: skip
    proc = exec_(name, ["sh", "-c", steps], check=False)
    if proc.returncode != 0:
        raise SimError(f"{name}: installing the fabric manager {version} failed: "
                       f"{proc.stderr.decode().strip() or 'see the node journal'}")  # fmt: skip
    log(f"{name}: fabric manager {version} installed and started")


def apply(name: str, profile: str, log=print) -> dict:
    """Apply a profile (built-in name or host path) on a running node."""
    ref = profile
    if Path(profile).is_file():
        ref = f"/var/lib/gpunode-sim/{Path(profile).name}"
        exec_(name, ["mkdir", "-p", "/var/lib/gpunode-sim"])
        docker(["cp", profile, f"{name}:{ref}"])
    # the node's python3 (python3-yaml) with the simulator's copy: not the node's gpunode
    sim = ["env", f"PYTHONPATH={SIM_IN_NODE}", "python3", "-m", "gpunode", "sim"]
    proc = exec_(name, [*sim, "apply-local", ref, "--json"], check=False)
    if proc.returncode != 0:
        raise SimError(f"{name}: applying {profile} failed: {proc.stderr.decode().strip()}")
    result = json.loads(proc.stdout)
    log(f"{name}: profile {profile}: {len(result['changes'])} change(s)")
    return result


def raise_xid(name: str, bus: str, code: str) -> str:
    """Raise Xid ``code`` on the GPU at ``bus`` of a running node (gpunode.sim.xidraise);
    the kernel log line the driver would print."""
    sim = ["env", f"PYTHONPATH={SIM_IN_NODE}", "python3", "-m", "gpunode", "sim"]
    proc = exec_(name, [*sim, "xid-local", bus, code], check=False)
    if proc.returncode != 0:
        raise SimError(f"{name}: raising Xid {code} failed: {proc.stderr.decode().strip()}")
    return proc.stdout.decode().strip()


def up(inventory: Path, artifacts: Artifacts, log=print) -> list[NodeSpec]:
    nodes = read_inventory(inventory)
    check_profiles(nodes)  # before any image, container or install
    releases = sorted({n.release for n in nodes})
    # debootstrap is mostly waiting on the mirror: build the releases side by side.
    with ThreadPoolExecutor(max_workers=len(releases)) as pool:
        tags = dict(
            zip(releases, pool.map(lambda r: images.build("node", r, log), releases), strict=True)
        )
    if nvidiarepo.wanted(inventory):
        # NVIDIA's CUDA repository, simulated: served before the nodes start (its URL and
        # key for inventories: nvidiarepo.up, cache_root()/endpoint.json)
        for rid, ep in nvidiarepo.up(tags[releases[0]], log).items():
            log(f"nvidia repository {rid}: {ep.line} (key: {ep.key_url})")
    for spec in nodes:
        start_node(spec, tags[spec.release], log)
    for spec in nodes:
        wait_booted(spec.name)
        tune_node(spec.name)
        install_gpunode(spec.name, artifacts, log)
        copy_mock(spec.name, artifacts)
        apply(spec.name, spec.profile, log)
    return nodes


def down_names(names: list[str], log=print) -> None:
    for name in names:
        if container_state(name) is not None:
            docker(["rm", "-f", name])
            log(f"{name}: removed")
        for vol in (f"{name}-docker", f"{name}-containers"):
            docker(["volume", "rm", "-f", vol], check=False)


def down(inventory: Path | None = None, log=print) -> list[str]:
    """Remove the inventory's nodes, or every simulated node when no inventory is given."""
    if inventory is not None:
        names = [n.name for n in read_inventory(inventory)]
    else:
        out = docker(["ps", "-a", "--filter", f"label={LABEL}=1", "--format", "{{.Names}}"])
        names = out.stdout.decode().split()
    down_names(names, log)
    nvidiarepo.down(log)  # the repository `up` served, if it did
    return names
