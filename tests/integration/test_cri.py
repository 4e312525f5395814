"""The proof through the real consumer: pods through containerd's CRI on simulated Debian 14
(containerd 2.1), Debian 13 (containerd 1.7) and Debian 12 (containerd 1.6) nodes, as kubelet
runs them for each NVIDIA device-plugin strategy.

gpunode's own CRI client (gpunode.cri) speaks runtime.v1 to the node's containerd socket —
RunPodSandbox with a pause image built here, CreateContainer, StartContainer, the container's
status and its CRI log — and every pod must see exactly the GPUs it asked for: device nodes
/dev/nvidia<minor>, NVML UUIDs (ctypes on the injected libnvidia-ml.so.1: gpunode validate's
probe, run by the image's python3) and /proc/driver/nvidia/gpus. Strategies:

  envvar            NVIDIA_VISIBLE_DEVICES, through the RuntimeClass handler (nvidia, gpunode)
                    and through gpunode as containerd's default runtime
  cdi-annotations   cdi.k8s.io/* container annotations, injected by containerd (runc handler)
  cdi-cri           ContainerConfig.CDI_devices (field 17), injected by containerd

containerd 1.6 has no CDI: both CDI strategies give the pod no GPU, silently, so `gpunode
runtime configure containerd --cdi` is refused there. The CDI tests run on every release whose
containerd has CDI (CDI_RELEASES: 1.7 and 2.1). The annotations reach gpunode's runtime
(which resolves them itself) only when its handler passes them on (``container_annotations``):
`--pass-annotations` writes them from runtime.toml's annotation-prefixes.

A pod without a request gets no GPU; a bad request fails with one clear line in the container's
status (the runtime's refusal, reason StartError) or as CreateContainer's error (CDI).

Node set-up, as a site would have it: containerd's main config names the sandbox image (a
version 2 file, the layout Debian ships on all three releases, which containerd 2.1 migrates;
one test gives containerd 2.1 a version 3 file); gpunode writes its registration (`gpunode
runtime configure containerd`) and the CDI spec (`gpunode cdi generate --install`); images
are imported into the k8s.io namespace with ctr (no registry).
Two things only the simulated node needs, both outside gpunode: /var/lib/containerd on a tmpfs
(the node's root is overlayfs, on which containerd's overlayfs snapshotter cannot mount), and
`restrict_oom_score_adj` (a node container has no CAP_SYS_RESOURCE, so runc cannot lower the
sandbox's oom_score_adj to containerd's -998; the option keeps it at containerd's own). The
Debian 14 node runs on a cgroup2 without controllers: the simulator's runc drops the CPU
shares containerd gives each sandbox (gpunode.sim.cluster.SIM_RUNC, installed at node start).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
import tomllib
from pathlib import Path

import pytest

from gpunode.cri import pause
from gpunode.cri.client import Client, CRIError
from gpunode.engines.containerd import CDI_DEVICES_MIN_VERSION, runtimes_section
from gpunode.sim import cluster, images
from gpunode.sim.docker import docker
from gpunode.sim.profiles import load_profile
from gpunode.validate import probe

from .conftest import ROOT, Node, start_nodes, start_resident

pytestmark = pytest.mark.integration

PROFILE = load_profile("a100x4")
UUID = [g.uuid for g in PROFILE.gpus]
BUS = [g.bus_id.procfs for g in PROFILE.gpus]
PROBE = ["python3", "-I", "-S", "-c", Path(probe.__file__).read_text()]
CRI = '[plugins."io.containerd.grpc.v1.cri"]'
DROP_IN = "/etc/containerd/conf.d/99-gpunode.toml"


RELEASES = images.RELEASES  # bookworm, trixie, forky
CONTAINERD = {r: f"{images.RELEASE[r].containerd}." for r in RELEASES}  # 1.6. 1.7. 2.1.
# the releases whose containerd injects CDI devices (enable_cdi, the CRI's CDI_devices)
CDI_RELEASES = tuple(
    r for r in RELEASES if images.RELEASE[r].containerd_version >= CDI_DEVICES_MIN_VERSION[:2]
)
NO_CDI = "bookworm"  # containerd 1.6
assert NO_CDI not in CDI_RELEASES


def main_config(sandbox_image: str, runtimes: dict[str, list[str]] | None = None) -> str:
    """The site's own containerd config.toml: Debian's (version 2), plus the sandbox image,
    plus ``container_annotations`` for the handlers named in *runtimes*."""
    text = (
        "version = 2\n\n"
        f"{CRI}\n"
        f'  sandbox_image = "{sandbox_image}"\n'
        "  restrict_oom_score_adj = true\n"
        f"  {CRI[:-1]}.cni]\n"
        '    bin_dir = "/usr/lib/cni"\n'
        '    conf_dir = "/etc/cni/net.d"\n'
    )
    if runtimes:  # a runtimes table of one's own replaces containerd's default (runc) one
        text += f"  {CRI[:-1]}.containerd.runtimes.runc]\n"
        text += '    runtime_type = "io.containerd.runc.v2"\n'
    for name, patterns in (runtimes or {}).items():
        text += f"  {CRI[:-1]}.containerd.runtimes.{name}]\n"
        text += f"    container_annotations = {json.dumps(patterns)}\n"
    return text


def main_config_v3(sandbox_image: str) -> str:
    """The same site settings in containerd 2.x's own layout (`containerd config default`:
    version 3, the sandbox image under the images plugin, the runtimes' plugin)."""
    return (
        "version = 3\n\n"
        "[plugins.'io.containerd.cri.v1.images'.pinned_images]\n"
        f"  sandbox = '{sandbox_image}'\n\n"
        "[plugins.'io.containerd.cri.v1.runtime']\n"
        "  restrict_oom_score_adj = true\n"
        "  [plugins.'io.containerd.cri.v1.runtime'.cni]\n"
        "    bin_dirs = ['/usr/lib/cni']\n"
        "    conf_dir = '/etc/cni/net.d'\n"
    )


class CriNode:
    def __init__(self, node: Node, sandbox_image: str, image: str):
        self.node, self.sandbox_image, self.image = node, sandbox_image, image
        pid = docker(["inspect", "-f", "{{.State.Pid}}", node.name]).stdout.decode().strip()
        self.root = f"/proc/{pid}/root"

    def configure(
        self, *configure_args: list[str], runtimes: dict | None = None, content: str = ""
    ) -> None:
        """A fresh main config (*content*, else main_config's), then each `gpunode runtime
        configure containerd` run given, then containerd restarted and answering the CRI."""
        content = content or main_config(self.sandbox_image, runtimes)
        self.node.sh(
            "rm -rf /etc/containerd/conf.d && "
            f"printf %s {shlex.quote(content)} > /etc/containerd/config.toml"
        )
        for args in configure_args:
            self.node.sh(f"gpunode runtime configure containerd {' '.join(args)} --json")
        self.node.sh("systemctl restart containerd")
        with self.client() as c:
            for _ in range(100):
                try:
                    c.version()
                    break
                except CRIError:
                    time.sleep(0.1)
            version = c.version().runtime_version
        assert version.startswith(CONTAINERD[self.node.release]), (self.node.name, version)

    def cdi(self) -> list[str]:
        """--cdi where containerd has CDI (1.7, 2.1); 1.6 refuses it."""
        return ["--cdi"] if self.node.release in CDI_RELEASES else []

    def dump(self) -> dict:
        """The CRI runtimes' section of `containerd config dump` (version 2, or 3 on
        containerd 2.x: the product's own reader picks it)."""
        dumped = tomllib.loads(self.node.sh("containerd config dump").stdout)
        section = runtimes_section(dumped)
        assert section is not None, dumped
        return section

    def configure_handlers(
        self, *extra: str, runtimes: dict | None = None, content: str = ""
    ) -> dict:
        """gpunode registered as the handlers `gpunode` and `nvidia` in one run (one drop-in),
        CDI on where containerd has it, runc the default; containerd's merged section."""
        self.configure(
            ["--name", "gpunode", "--name", "nvidia", *self.cdi(), *extra],
            runtimes=runtimes,
            content=content,
        )
        section = self.dump()
        ctd = section["containerd"]
        binary = self.node.sh("readlink -f $(command -v gpunode-container-runtime)").stdout
        for name in ("gpunode", "nvidia"):
            entry = ctd["runtimes"][name]
            assert entry["runtime_type"] == "io.containerd.runc.v2", (name, entry)
            got = self.node.sh(f"readlink -f {entry['options']['BinaryName']}").stdout
            assert got == binary, (name, entry)
        assert ctd["default_runtime_name"] == "runc", ctd
        if self.node.release in CDI_RELEASES:
            assert section["enable_cdi"] is True, section
            assert "/etc/cdi" in section["cdi_spec_dirs"], section
        return section

    def client(self) -> Client:
        return Client(root=self.root, timeout=90)

    def run(self, name: str, **kwargs):
        with self.client() as c:
            return c.run_pod(name, self.image, PROBE, **kwargs)

    def probe(self, name: str, **kwargs) -> dict:
        res = self.run(name, **kwargs)
        assert (res.state, res.exit_code, res.reason) == ("CONTAINER_EXITED", 0, "Completed"), (
            self.node.release,
            res,
        )
        return json.loads(res.stdout.strip().splitlines()[-1])


def import_image(node: Node, archive_cmd: list[str]) -> None:
    """`archive_cmd`'s output (an image archive) into containerd's k8s.io namespace."""
    save = subprocess.Popen(archive_cmd, stdout=subprocess.PIPE)
    imp = subprocess.run(
        ["docker", "exec", "-i", node.name, *pause.IMPORT_COMMAND],
        stdin=save.stdout,
        capture_output=True,
        check=False,
    )
    save.wait()
    assert save.returncode == 0 and imp.returncode == 0, imp.stderr.decode()


def prepare(node: Node) -> CriNode:
    node.sh(
        "systemctl stop docker docker.socket containerd && "
        "mount -t tmpfs -o mode=0711 tmpfs /var/lib/containerd && "
        "systemctl start containerd docker"
    )
    node.sh("gpunode cdi generate --install")
    # as on a node the role provisioned: GPU creates served by the resident service
    start_resident(node.name)
    archive, sandbox_image = pause.build(ROOT / "build" / "cri")
    import_image(node, ["cat", str(archive)])
    import_image(node, ["docker", "save", node.workload])
    image = f"docker.io/{node.workload}"
    listed = node.sh("ctr -n k8s.io images ls -q").stdout.split()
    assert sandbox_image in listed and image in listed, listed
    return CriNode(node, sandbox_image, image)


def selected_releases(items) -> list[str]:
    """The releases the selected tests of this module run on (`-k forky` starts one node):
    their release parameter, or NO_CDI for the containerd 1.6 tests that have none."""
    wanted = set()
    for item in items:
        if item.module.__name__ != __name__:
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        wanted.add(params.get("release") or params.get("cdi_release") or NO_CDI)
    return [r for r in RELEASES if r in wanted]


@pytest.fixture(scope="module")
def cri_nodes(request, artifacts, image_tags):
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    releases = selected_releases(request.session.items)
    specs = [cluster.NodeSpec(f"{prefix}-cri-{r}", r, "a100x4") for r in releases]
    try:
        start_nodes(specs, artifacts, image_tags)
        yield {
            s.release: prepare(Node(s.name, s.release, image_tags["workload-bookworm"]))
            for s in specs
        }
    finally:
        if not os.environ.get("GPUNODE_KEEP_NODES"):
            cluster.down_names([s.name for s in specs], log=lambda *_: None)


@pytest.fixture(scope="module")
def handlers(cri_nodes):
    for n in cri_nodes.values():
        n.configure_handlers()
    return cri_nodes


@pytest.fixture(params=RELEASES)
def release(request):
    return request.param


@pytest.fixture(params=CDI_RELEASES)
def cdi_release(request):
    """A release whose containerd injects CDI devices itself (>= 1.7)."""
    return request.param


def assert_gpus(out: dict, want: list[int]) -> None:
    assert out["dev"] == sorted(want), out
    assert "error" not in out["nvml"], out
    assert sorted(g["uuid"] for g in out["nvml"]["gpus"]) == sorted(UUID[i] for i in want), out
    assert out["proc"] == sorted(BUS[i] for i in want), out


def assert_no_gpu(out: dict) -> None:
    """Not a GPU container: no device node, no NVML. /proc/driver/nvidia is the kernel's, as
    on a server: every GPU is listed there for a container nothing was injected into."""
    assert out["dev"] == [], out
    assert out["nvml"]["error"].startswith("cannot load libnvidia-ml.so.1"), out
    assert out["proc"] == sorted(BUS), out


ENVVAR = {  # name: (handler, NVIDIA_VISIBLE_DEVICES, GPUs)
    "envvar-nvidia-index": ("nvidia", "1", [1]),
    "envvar-nvidia-uuid": ("nvidia", UUID[3], [3]),  # --device-id-strategy uuid
    "envvar-gpunode-list": ("gpunode", "0,2", [0, 2]),
    "envvar-nvidia-all": ("nvidia", "all", [0, 1, 2, 3]),
    "envvar-nvidia-none": ("nvidia", "none", []),  # the driver, no GPU: NVML counts 0
}


@pytest.mark.parametrize("case", sorted(ENVVAR))
def test_envvar_through_the_runtimeclass_handler(handlers, release, case):
    handler, value, want = ENVVAR[case]
    out = handlers[release].probe(case, handler=handler, env={"NVIDIA_VISIBLE_DEVICES": value})
    assert_gpus(out, want)


def test_gpu_pods_are_served_by_the_resident_service(handlers, release):
    """The GPU creates of this module go through gpunode's resident service (prepare starts
    it, as the role does): the same GPUs reach the pods as through the Python runtime
    (test_shim_create, test_runtime), and the runtime's log says which served each."""
    node = handlers[release].node
    out = handlers[release].probe("resident-served", handler="nvidia",
                                  env={"NVIDIA_VISIBLE_DEVICES": "2"})  # fmt: skip
    assert_gpus(out, [2])
    log = node.sh("grep -F 'GPUs [2]' /var/log/gpunode-runtime.log | tail -1").stdout
    assert log.rstrip().endswith(", served by the resident service"), log


def test_envvar_needs_gpunode_behind_the_handler(handlers, release):
    """Under runc (the default here) the variable is only a variable: no GPU."""
    assert_no_gpu(handlers[release].probe("envvar-runc", env={"NVIDIA_VISIBLE_DEVICES": "1"}))


@pytest.mark.parametrize("handler", ["", "nvidia", "gpunode"])
def test_pod_without_request_gets_no_gpu(handlers, release, handler):
    assert_no_gpu(handlers[release].probe(f"no-request-{handler or 'default'}", handler=handler))


def test_bad_envvar_request_is_one_line_in_the_container_status(handlers, release):
    res = handlers[release].run("bad-envvar", handler="nvidia", env={"NVIDIA_VISIBLE_DEVICES": "7"})
    assert (res.state, res.reason, res.stdout) == ("CONTAINER_EXITED", "StartError", ""), res
    assert "\n" not in res.message
    assert "unknown device '7' requested; this node has: 0 (" in res.message, res.message
    assert all(u in res.message for u in UUID), res.message


CDI = {  # name: (annotations, CDI_devices, GPUs)
    "cdi-annotations-one": ({"cdi.k8s.io/nvidia-device-plugin_a": "nvidia.com/gpu=2"}, [], [2]),
    "cdi-annotations-two": (
        {"cdi.k8s.io/nvidia-device-plugin_b": f"nvidia.com/gpu=0,nvidia.com/gpu={UUID[3]}"},
        [],
        [0, 3],
    ),
    "cdi-cri-one": ({}, ["nvidia.com/gpu=3"], [3]),
    "cdi-cri-two": ({}, ["nvidia.com/gpu=1", f"nvidia.com/gpu={UUID[2]}"], [1, 2]),
}


@pytest.mark.parametrize("case", sorted(CDI))
def test_cdi_through_containerd(handlers, cdi_release, case):
    annotations, devices, want = CDI[case]
    out = handlers[cdi_release].probe(case, annotations=annotations, cdi_devices=devices)
    assert_gpus(out, want)


def test_cdi_hooks_are_run_by_the_resident_service(handlers, cdi_release):
    """The CDI spec's hook (gpunode-hook's first stage, runc's createContainer hook) is
    run by the resident service's worker in the container's mount namespace: its timing
    line (gpunode.hook.timing) names the service, and the pod gets its GPU."""
    node = handlers[cdi_release].node
    node.sh("touch /run/gpunode/timing.log")
    try:
        out = handlers[cdi_release].probe("cdi-resident", cdi_devices=["nvidia.com/gpu=2"])
        lines = node.sh("cat /run/gpunode/timing.log").stdout.splitlines()
    finally:
        node.sh("rm -f /run/gpunode/timing.log")
    assert_gpus(out, [2])
    assert [ln.split()[0] for ln in lines if ln.startswith("gpunode-hook")] == [
        "gpunode-hook/resident"
    ], lines


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cdi_devices": ["nvidia.com/gpu=7"]},
        {"annotations": {"cdi.k8s.io/nvidia-device-plugin_c": "nvidia.com/gpu=7"}},
    ],
    ids=["cdi-cri", "cdi-annotations"],
)
def test_bad_cdi_request_is_create_containers_error(handlers, cdi_release, kwargs):
    with pytest.raises(CRIError) as err:
        handlers[cdi_release].run("bad-cdi", **kwargs)
    text = str(err.value)
    assert text.startswith("CreateContainer: unknown: ") and "\n" not in text, text
    assert "unresolvable CDI devices nvidia.com/gpu=7" in text, text


@pytest.mark.parametrize("handler", ["", "nvidia"])
@pytest.mark.parametrize("case", [*sorted(CDI), "cdi-cri-bad"])
def test_containerd_16_gives_cdi_requests_no_gpu(handlers, handler, case):
    """containerd 1.6 knows neither CDI_devices nor enable_cdi, and passes no annotation to a
    runtime unless its handler lists it: every CDI request, even a bad one, runs GPU-less."""
    annotations, devices, _ = CDI.get(case, ({}, ["nvidia.com/gpu=7"], None))
    out = handlers[NO_CDI].probe(
        case, handler=handler, annotations=annotations, cdi_devices=devices
    )
    assert_no_gpu(out)


def test_cdi_refused_on_containerd_16(cri_nodes):
    """`--cdi` on containerd 1.6 is one line (exit 2) and changes nothing."""
    node = cri_nodes[NO_CDI].node
    before = node.sh("cat /etc/containerd/config.toml; ls /etc/containerd").stdout
    res = node.sh("gpunode runtime configure containerd --name gpunode --cdi", check=False)
    assert res.returncode == 2, res
    err = res.stderr.strip().splitlines()
    assert len(err) == 1 and "has no CDI (enable_cdi needs containerd >= 1.7.0" in err[0], err
    assert node.sh("cat /etc/containerd/config.toml; ls /etc/containerd").stdout == before


@pytest.fixture(scope="module")
def passing_annotations(handlers):
    """containerd 1.6 with gpunode's handlers passing cdi.k8s.io/* (`--pass-annotations`,
    from runtime.toml's default annotation-prefixes)."""
    node = handlers[NO_CDI]
    runtimes = node.configure_handlers("--pass-annotations")["containerd"]["runtimes"]
    for name in ("gpunode", "nvidia"):
        assert runtimes[name]["container_annotations"] == ["cdi.k8s.io/*"], runtimes[name]
    return node


@pytest.mark.parametrize("case", ["cdi-annotations-one", "cdi-annotations-two"])
def test_containerd_16_cdi_annotations_through_gpunode(passing_annotations, case):
    annotations, _, want = CDI[case]
    out = passing_annotations.probe(case, handler="nvidia", annotations=annotations)
    assert_gpus(out, want)


def test_containerd_16_bad_cdi_annotation_is_the_runtimes_error(passing_annotations):
    res = passing_annotations.run(
        "bad-annotation", handler="nvidia", annotations={"cdi.k8s.io/x": "nvidia.com/gpu=7"}
    )
    assert res.reason == "StartError" and "\n" not in res.message, res
    assert "unknown device 'nvidia.com/gpu=7' requested; this node has: 0 (" in res.message, res


@pytest.fixture(scope="module")
def default_runtime(request, handlers):
    """gpunode as containerd's default runtime (after the handler tests: the nodes in turn,
    the containerd 1.6 node's passed annotations included where it runs)."""
    if NO_CDI in handlers:
        request.getfixturevalue("passing_annotations")
    for n in handlers.values():
        n.configure(["--name", "gpunode", "--set-as-default", *n.cdi()])
        assert n.dump()["containerd"]["default_runtime_name"] == "gpunode"
    return handlers


def test_envvar_through_the_default_runtime(default_runtime, release):
    node = default_runtime[release]
    assert_gpus(node.probe("default-envvar", env={"NVIDIA_VISIBLE_DEVICES": "2"}), [2])
    assert_no_gpu(node.probe("default-no-request"))


def test_cdi_with_gpunode_as_the_default_runtime(default_runtime, cdi_release):
    assert_gpus(
        default_runtime[cdi_release].probe("default-cdi", cdi_devices=["nvidia.com/gpu=0"]), [0]
    )


def test_bad_request_through_the_default_runtime(default_runtime, release):
    res = default_runtime[release].run("default-bad", env={"NVIDIA_VISIBLE_DEVICES": "7"})
    assert res.reason == "StartError" and "unknown device '7' requested" in res.message, res


def test_unknown_handler_is_run_pod_sandboxs_error(default_runtime, release):
    """With one configure run only its --name exists: `nvidia` is gone again."""
    with pytest.raises(CRIError) as err:
        default_runtime[release].run("no-handler", handler="nvidia")
    text = str(err.value)
    assert text.startswith("RunPodSandbox: ") and "\n" not in text, text
    assert 'no runtime for "nvidia" is configured' in text, text


def validate_cri(node: Node) -> dict:
    res = node.sh("gpunode validate --engine cri --runtime-name gpunode --json", check=False)
    assert res.returncode in (0, 1), res
    return {c["id"]: c for c in json.loads(res.stdout)["checks"]}


CRI_CHECKS = ("engine.active", "engine.runtime_registered", "container.image")


def test_validate_through_the_cri(default_runtime, cdi_release):
    """`gpunode validate --engine cri` on the Debian 13 and 14 nodes (containerd 1.7 and 2.1:
    config dumps of version 2 and 3): first without the CRI client's libraries (skipped,
    saying why), then with Debian's (gpunode's venv sees system site packages): the probe
    pods through the gpunode handler see exactly their GPUs."""
    node = default_runtime[cdi_release].node
    have = node.sh("python3 -c 'import grpc_tools, grpc'", check=False).returncode == 0
    if not have:
        checks = validate_cri(node)
        assert checks["engine.active"]["status"] == "skip", checks["engine.active"]
        assert "the CRI client needs grpc" in checks["engine.active"]["detail"]
        assert checks["container.isolation"]["status"] == "skip"
        node.sh(
            "apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
            "python3-grpcio python3-grpc-tools python3-protobuf >/dev/null",
            timeout=600,
        )
    checks = validate_cri(node)
    for cid in CRI_CHECKS:
        assert checks[cid]["status"] == "pass", checks[cid]
    registered = checks["engine.runtime_registered"]["detail"]
    # the default runtime, and the mode its runtime runs in (no runtime.toml here: open)
    assert ", the default runtime: open (" in registered, registered
    iso = checks["container.isolation"]
    assert iso["status"] == "pass" and "and all 4: exactly those" in iso["detail"], iso
    assert validate_cri(node)["container.image"]["detail"].endswith("(cached)")
    drift = checks["node.drift_containerd"]
    assert drift["status"] == "pass" and "gpunode running gpunode's runtime" in drift["detail"]
    # another tool rewrites config.toml without gpunode's import: caught, with the fix named
    node.sh("cp /etc/containerd/config.toml /tmp/config.toml.keep && "
            "sed -i '/conf.d/d' /etc/containerd/config.toml")  # fmt: skip
    try:
        drift = validate_cri(node)["node.drift_containerd"]
    finally:
        node.sh("cp /tmp/config.toml.keep /etc/containerd/config.toml")
    assert drift["status"] == "fail" and "no handler 'gpunode'" in drift["detail"], drift
    assert "gpunode runtime configure containerd" in drift["detail"]


V3_RELEASES = tuple(r for r in RELEASES if images.RELEASE[r].containerd_version >= (2, 0))


@pytest.mark.parametrize("release", V3_RELEASES)
def test_version_3_main_config(cri_nodes, release):
    """containerd 2.x with a main config in its own layout (version 3) rather than Debian's
    version 2 file: the drop-in goes into the same plugin, the sandbox image and CNI settings
    stay the site's, and pods get exactly their GPUs through the handler and through CDI."""
    node = cri_nodes[release]
    section = node.configure_handlers(content=main_config_v3(node.sandbox_image))
    assert section["restrict_oom_score_adj"] is True, section
    assert section["cni"]["bin_dirs"] == ["/usr/lib/cni"], section["cni"]
    drop_in = node.node.sh(f"cat {DROP_IN}").stdout
    assert "version = 3" in drop_in and "io.containerd.cri.v1.runtime" in drop_in, drop_in
    env = {"NVIDIA_VISIBLE_DEVICES": "1"}
    assert_gpus(node.probe("v3-envvar", handler="nvidia", env=env), [1])
    assert_gpus(node.probe("v3-cdi", cdi_devices=["nvidia.com/gpu=2"]), [2])
    assert_no_gpu(node.probe("v3-no-request", handler="gpunode"))


# --------------------------------------------------------------------------- Kubernetes nodes
# secure by default (issue 25 items 1 and 3): runtime.toml as `gpunode runtime setup
# --kubernetes` writes it (accept-envvar-unprivileged = false, accept-volume-mounts = true),
# gpunode's handlers with README's recipe (--cdi where containerd has it, --pass-annotations).

RUNTIME_TOML = "/etc/gpunode/runtime.toml"
DEVICE_DIR = "/var/run/nvidia-container-devices"


def cuda_env_image(base: str, tag: str) -> None:
    """A CUDA-style image on the host: the workload image plus the ENV a CUDA base image
    carries (nvidia/cuda's Dockerfiles: NVIDIA_VISIBLE_DEVICES=all and the rest)."""
    dockerfile = (
        f"FROM {base}\n"
        "ENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=compute,utility "
        'CUDA_VERSION=12.4.1 NVIDIA_REQUIRE_CUDA="cuda>=12.4 brand=tesla,driver>=470"\n'
    )
    res = subprocess.run(["docker", "build", "-q", "-t", tag, "-"], input=dockerfile.encode(),
                         capture_output=True, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr.decode()


@pytest.fixture(scope="module")
def secure(cri_nodes):
    """Both nodes: runtime.toml from `gpunode runtime setup --kubernetes` (given no settings
    of its own), gpunode's handlers nvidia and gpunode with --pass-annotations (and --cdi on
    containerd 1.7: README's recipe), the workload image in the node's Docker too, and a
    CUDA-style image in containerd. runtime.toml is put back afterwards."""
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    tag = f"gpunode.local/{prefix}-cuda-env:1"
    nodes = cri_nodes
    cuda_env_image(next(iter(nodes.values())).node.workload, tag)
    saved = {}
    try:
        for n in nodes.values():
            saved[n] = n.node.sh(f"cat {RUNTIME_TOML} 2>/dev/null || true").stdout
            # as the role does on a node running both engines: runtime.toml, then Docker
            n.node.sh(
                'echo \'{"config": ""}\' | gpunode runtime setup --kubernetes --docker '
                "--input - && systemctl restart docker && docker info >/dev/null"
            )
            text = n.node.sh(f"cat {RUNTIME_TOML}").stdout
            assert "accept-envvar-unprivileged = false" in text, text
            assert "accept-volume-mounts = true" in text, text
            n.configure_handlers("--pass-annotations")
            import_image(n.node, ["docker", "save", tag])
            save = subprocess.Popen(["docker", "save", n.node.workload], stdout=subprocess.PIPE)
            load = subprocess.run(["docker", "exec", "-i", n.node.name, "docker", "load"],
                                  stdin=save.stdout, capture_output=True, check=False)  # fmt: skip
            save.wait()
            assert load.returncode == 0, load.stderr.decode()
        yield nodes, tag
    finally:
        for n, text in saved.items():
            n.node.sh(f"printf %s {shlex.quote(text)} > {RUNTIME_TOML}" if text
                      else f"rm -f {RUNTIME_TOML}")  # fmt: skip
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False)


def test_secure_unallocated_pod_asking_by_env_gets_no_gpu(secure, release):
    nodes, _ = secure
    for handler in ("nvidia", "gpunode"):
        out = nodes[release].probe(f"secure-env-all-{handler}", handler=handler,
                                   env={"NVIDIA_VISIBLE_DEVICES": "all"})  # fmt: skip
        assert_no_gpu(out)


def test_secure_cuda_image_env_gets_no_gpu_silently(secure, release):
    """An image's ENV reaches the OCI spec's process.env exactly as a pod's env entry does
    (containerd merges both into it; the container sees it): the CUDA-style image's
    NVIDIA_VISIBLE_DEVICES=all is there, and the pod starts without a GPU, no error."""
    nodes, tag = secure
    node = nodes[release]
    with node.client() as c:
        show = "import os; print(os.environ['NVIDIA_VISIBLE_DEVICES'], os.environ['CUDA_VERSION'])"
        res = c.run_pod("secure-cuda-env", tag, ["python3", "-c", show], handler="nvidia")
    assert (res.reason, res.exit_code, res.stdout.split()) == ("Completed", 0, ["all", "12.4.1"])
    with node.client() as c:
        res = c.run_pod("secure-cuda-probe", tag, PROBE, handler="nvidia")
    assert (res.reason, res.exit_code) == ("Completed", 0), res
    assert_no_gpu(json.loads(res.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize("order", ["pod-env-last", "plugin-env-last"])
def test_secure_volume_mounts_allocation_with_the_pods_own_env_all(secure, release, order):
    """The device plugin's volume-mounts strategy (tests/deviceplugin.py) for one GPU, the
    pod's own NVIDIA_VISIBLE_DEVICES=all beside the plugin's in the CRI env list (either
    order): exactly the allocated GPU."""
    from tests.deviceplugin import container_config

    nodes, _ = secure
    kw = container_config("volume-mounts", [UUID[2]])
    plugin = list(kw.pop("env").items())
    own = [("NVIDIA_VISIBLE_DEVICES", "all")]
    env = plugin + own if order == "pod-env-last" else own + plugin
    assert [m["container_path"] for m in kw["mounts"]] == [f"{DEVICE_DIR}/{UUID[2]}"]
    assert_gpus(nodes[release].probe(f"secure-vm-{order}", handler="nvidia", env=env, **kw), [2])


def test_secure_privileged_pod_gets_what_its_env_asks(secure, release):
    """NVIDIA's semantics: a privileged container's env is read (it has the host's devices
    anyway): Pod Security must forbid privileged pods (README, Security)."""
    nodes, _ = secure
    out = nodes[release].probe("secure-privileged", handler="nvidia", privileged=True,
                               env={"NVIDIA_VISIBLE_DEVICES": "all"})  # fmt: skip
    assert_gpus(out, [0, 1, 2, 3])


def test_secure_cdi_annotation_with_the_pods_own_env_all(secure, release):
    """cdi.k8s.io annotations: containerd 1.7 injects them (and passes them on to gpunode's
    handler: not injected twice, issue 25 item 3); on 1.6 gpunode's runtime resolves the
    passed annotation. The pod's own env `all` widens nothing."""
    nodes, _ = secure
    out = nodes[release].probe(
        "secure-annotation", handler="nvidia", env={"NVIDIA_VISIBLE_DEVICES": "all"},
        annotations={"cdi.k8s.io/nvidia-device-plugin_s": "nvidia.com/gpu=1"},
    )  # fmt: skip
    assert_gpus(out, [1])


def docker_probe(node: Node, args: str) -> dict:
    res = node.sh(f"docker run --rm --runtime gpunode {args} {node.workload} "
                  f"{shlex.join(PROBE)}", check=False)  # fmt: skip
    assert res.returncode == 0, res
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_secure_docker_on_the_same_node(secure, release):
    """Docker beside Kubernetes under the same runtime.toml: `--gpus` (the engine puts
    NVIDIA's hook in the spec) gets exactly its GPUs; `-e NVIDIA_VISIBLE_DEVICES` alone is
    an image's or a user's env and gets none, as with NVIDIA's runtime."""
    node = secure[0][release].node
    assert_gpus(docker_probe(node, "--gpus '\"device=1\"'"), [1])
    assert_gpus(docker_probe(node, "--gpus 2"), [0, 1])
    assert_no_gpu(docker_probe(node, "-e NVIDIA_VISIBLE_DEVICES=1"))
    # --gpus with an image ENV all: the engine's value (set after the image's) decides
    assert_gpus(docker_probe(node, "--gpus '\"device=3\"' -e NVIDIA_VISIBLE_DEVICES=all"), [3])


def test_cdi_annotation_passed_to_the_handler_on_containerd_17_is_injected_once(secure):
    """Issue 25 item 3: README's recipe (--cdi --pass-annotations), handler nvidia, a
    cdi.k8s.io annotation naming gpunode's spec: containerd injects the spec (hook
    included) and passes the annotation on; the runtime sees the spec's
    NVIDIA_VISIBLE_DEVICES=void and leaves it (before: `/proc/driver/nvidia is already
    mounted over`). Two GPUs by index and UUID, through both handlers."""
    node = secure[0]["trixie"]
    dump = node.node.sh("containerd config dump").stdout
    assert (
        "enable_cdi = true" in dump and dump.count('container_annotations = ["cdi.k8s.io/*"]') == 2
    )
    for handler in ("nvidia", "gpunode"):
        out = node.probe(
            f"item3-{handler}",
            handler=handler,
            annotations={
                "cdi.k8s.io/nvidia-device-plugin_i": f"nvidia.com/gpu=0,nvidia.com/gpu={UUID[3]}"
            },
        )
        assert_gpus(out, [0, 3])


def test_secure_validate_docker_on_the_same_node(secure, release):
    """`gpunode validate` (Docker) on a Kubernetes node: the probe containers ask by volume
    mounts (runtime.toml accepts them; the env of an unprivileged container is not read)."""
    node = secure[0][release].node
    res = node.sh("gpunode validate --engine docker --json", check=False)
    assert res.returncode in (0, 1), res
    checks = {c["id"]: c for c in json.loads(res.stdout)["checks"]}
    iso = checks["container.isolation"]
    assert iso["status"] == "pass" and "and all 4: exactly those" in iso["detail"], iso


def test_secure_validate_through_the_cri_unallocated(secure):
    """`gpunode validate --engine cri` on the secure Debian 13 node: the probe pods ask by
    volume mounts and see exactly theirs; container.unallocated passes. The same node opted
    in to the open mode (`--kubernetes-insecure-envvar`): container.unallocated fails,
    naming the setting."""
    node = secure[0]["trixie"].node
    if node.sh("python3 -c 'import grpc_tools, grpc'", check=False).returncode != 0:
        node.sh(
            "apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q "
            "python3-grpcio python3-grpc-tools python3-protobuf >/dev/null",
            timeout=600,
        )
    cmd = "gpunode validate --engine cri --runtime-name nvidia --json"
    checks = {c["id"]: c for c in json.loads(node.sh(cmd, check=False).stdout)["checks"]}
    iso, una = checks["container.isolation"], checks["container.unallocated"]
    assert iso["status"] == "pass" and "and all 4: exactly those" in iso["detail"], iso
    assert una["status"] == "pass" and "no GPU" in una["detail"], una
    node.sh(
        'echo \'{"config": ""}\' | gpunode runtime setup --kubernetes '
        "--kubernetes-insecure-envvar --input -"
    )
    try:
        checks = {c["id"]: c for c in json.loads(node.sh(cmd, check=False).stdout)["checks"]}
    finally:
        node.sh('echo \'{"config": ""}\' | gpunode runtime setup --kubernetes --input -')
    una = checks["container.unallocated"]
    assert una["status"] == "fail", una
    assert "sees 4 GPU(s) through handler nvidia" in una["detail"], una
    assert "set accept-envvar-unprivileged = false" in una["detail"], una
