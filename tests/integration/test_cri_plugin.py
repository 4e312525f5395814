"""NVIDIA's device plugin's CDI strategies on a gpunode node without NVIDIA's toolkit: the
plugin's own CDI spec (tests/deviceplugin.py, kind k8s.device-plugin.nvidia.com/gpu), with
its five hooks pointed at gpunode's nvidia-cdi-hook launcher (NVIDIA_CDI_HOOK_PATH, the
chart's cdi.nvidiaHookPath), installed in /var/run/cdi of a simulated Debian 13 node
(containerd 1.7, CDI on), pods through containerd's CRI as kubelet sends them for the
plugin's cdi-cri and cdi-annotations strategies: each sees exactly its GPU (device nodes,
NVML through the libnvidia-ml.so.1 that the create-symlinks and update-ldcache hooks made
resolvable, /proc/driver/nvidia). And on a Debian 12 node (containerd 1.6, no CDI) the
plugin's cdi-annotations through gpunode's handler with the annotations passed: gpunode's
runtime resolves the plugin's kind itself. The node set-up and the assertions are
test_cri.py's.

Issue 36: the same spec as NVIDIA's generator writes it with every optional hook enabled
(``dp.OPTIONAL_HOOKS``: chmod, its one default-off hook, in each full GPU's own edits; see
tests/deviceplugin.py) starts a pod that sees exactly its GPU, every hook run (gpunode's
timing log, gpunode.hook.timing, names each hook's subcommand per container).
"""

from __future__ import annotations

import json
import os
import shlex

import pytest

from gpunode.hook import TIMING_LOG
from gpunode.sim import cluster

from .. import deviceplugin as dp
from .conftest import Node, start_nodes
from .test_cri import PROBE, UUID, assert_gpus, prepare

pytestmark = pytest.mark.integration

HOOK = "/usr/local/libexec/gpunode/nvidia-cdi-hook"  # gpunode_install's bin dir /usr/local/bin


@pytest.fixture(scope="module")
def plugin_node(artifacts, image_tags):
    """A Debian 13 node: gpunode's handlers (gpunode, nvidia) with CDI, runc the default,
    and the plugin's spec (UUID names, gpunode's hook) in /var/run/cdi."""
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    spec = cluster.NodeSpec(f"{prefix}-cri-plugin-trixie", "trixie", "a100x4")
    try:
        start_nodes([spec], artifacts, image_tags)
        node = prepare(Node(spec.name, spec.release, image_tags["workload-bookworm"]))
        node.configure_handlers()
        dump = node.node.sh("containerd config dump").stdout
        assert '"/var/run/cdi"' in dump, "containerd must still read the plugin's spec dir"
        write_plugin_spec(node.node, HOOK)
        yield node
    finally:
        if not os.environ.get("GPUNODE_KEEP_NODES"):
            cluster.down_names([spec.name], log=lambda *_: None)


def write_plugin_spec(
    node: Node, hook_path: str, id_strategy: str = "uuid", enable_hooks: tuple = ()
) -> dict:
    """The plugin's spec for this node, made from the node's own gpunode spec, installed
    where the plugin writes it (*enable_hooks*: NVIDIA's optional hooks added)."""
    ours = json.loads(node.sh("gpunode cdi generate --format json").stdout)
    spec = dp.cdi_spec(
        ours, hook_path=hook_path, id_strategy=id_strategy, enable_hooks=enable_hooks
    )
    text = json.dumps(spec, indent=2)
    node.sh(f"mkdir -p /var/run/cdi && printf %s {shlex.quote(text)} > {dp.SPEC_FILE}")
    return spec


def test_the_launcher_is_gpunodes_and_nvidias_names_are_left_alone(plugin_node):
    node = plugin_node.node
    node.sh(f"test -x {HOOK}")
    # a first stage (the resident service where it runs), else gpunode's Python launcher
    stage = node.sh(f"cat {HOOK}").stdout
    assert stage.startswith("#!/bin/sh\n# nvidia-cdi-hook, first stage.")
    assert stage.rstrip().endswith(f'exec {HOOK}.py "$@"'), stage
    assert "gpunode.hook.nvcli" in node.sh(f"cat {HOOK}.py").stdout
    res = node.sh("ls /usr/bin/nvidia-ctk /usr/bin/nvidia-cdi-hook", check=False)
    assert res.returncode != 0 and "No such file" in res.stderr, res


@pytest.mark.parametrize("handler", ["", "nvidia"])
@pytest.mark.parametrize(("strategy", "want"), [("cdi-cri", [2]), ("cdi-annotations", [1])])
def test_plugin_cdi_strategies_give_exactly_the_allocation(plugin_node, handler, strategy, want):
    kwargs = dp.container_config(strategy, [UUID[i] for i in want])
    out = plugin_node.probe(f"plugin-{strategy}-{handler or 'runc'}", handler=handler, **kwargs)
    assert_gpus(out, want)


def test_plugin_spec_by_index_two_gpus(plugin_node):
    node = plugin_node.node
    try:
        write_plugin_spec(node, HOOK, id_strategy="index")
        out = plugin_node.probe("plugin-index", **dp.container_config("cdi-cri", ["0", "3"]))
        assert_gpus(out, [0, 3])
    finally:
        write_plugin_spec(node, HOOK)


# In the container, before the probe: what the hooks left that the probe does not read, one
# JSON line (argv[1]: the driver's library folder).
HOOK_FACTS = r"""
import json, os, sys
link = os.path.join(sys.argv[1], "libnvidia-ml.so.1")
def read(path, mode):
    try:
        with open(path, mode) as f:
            return f.read()
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}".encode()
print(json.dumps({
    "link": os.readlink(link) if os.path.islink(link) else None,
    "ldcache": b"libnvidia-ml.so.1\0" in read("/etc/ld.so.cache", "rb"),
    "params": read("/proc/driver/nvidia/params", "rb").decode(errors="replace"),
}))
"""


def test_every_optional_hook_of_nvidias_generator_starts_the_pod(plugin_node):
    """Issue 36: the plugin's spec with every optional hook NVIDIA's generator has enabled
    (``--enable-hook chmod``: ``chmod --mode 755`` in each full GPU's edits, no --path as the
    simulated GPUs have no DRM node), hooks pointed at gpunode's launcher, installed where
    the plugin writes it; a cdi-cri pod for GPU 1 through containerd's CRI (runc). The pod
    sees exactly GPU 1; each hook of the spec ran for its container and returned, in CDI's
    order (the common edits' five, then its device's chmod), gpunode's timing log says; and
    what the hooks do shows: libnvidia-ml.so.1 is create-symlinks' link, in the ld.so.cache
    update-ldcache wrote, /proc/driver/nvidia/params says ModifyDeviceFiles: 0
    (disable-device-node-modification; the node's says 1). chmod without a path, as
    enable-cuda-compat without compat libraries and update-application-profile (a no-op
    here) change nothing observable: their timing lines and the started container are
    what shows them run and succeed (a createContainer hook that fails fails the start)."""
    node = plugin_node.node
    host_params = node.sh("grep ModifyDeviceFiles /proc/driver/nvidia/params").stdout
    assert host_params.split() == ["ModifyDeviceFiles:", "1"], host_params
    try:
        spec = write_plugin_spec(node, HOOK, enable_hooks=dp.OPTIONAL_HOOKS)
        node.sh(f"touch {TIMING_LOG}")
        lib = next(
            e.split("=", 1)[1]
            for e in spec["containerEdits"]["env"]
            if e.startswith("NVIDIA_CTK_LIBCUDA_DIR=")
        )
        command = [
            "sh",
            "-c",
            'python3 -I -S -c "$1" "$3" && exec python3 -I -S -c "$2"',
            "sh",
            HOOK_FACTS,
            PROBE[-1],
            lib,
        ]
        with plugin_node.client() as c:
            res = c.run_pod(
                "plugin-every-hook",
                plugin_node.image,
                command,
                **dp.container_config("cdi-cri", [UUID[1]]),
            )
        timing = node.sh(f"cat {TIMING_LOG}").stdout.splitlines()
    finally:
        node.sh(f"rm -f {TIMING_LOG}")
        write_plugin_spec(node, HOOK)
    assert (res.state, res.exit_code, res.reason) == ("CONTAINER_EXITED", 0, "Completed"), res
    facts, out = (json.loads(line) for line in res.stdout.strip().splitlines()[-2:])
    assert_gpus(out, [1])

    common = spec["containerEdits"]["hooks"]
    device = next(d["containerEdits"] for d in spec["devices"] if d["name"] == UUID[1])
    assert [h["args"] for h in device["hooks"]] == [["nvidia-cdi-hook", "chmod", "--mode", "755"]]
    assert all(d["containerEdits"]["hooks"] == device["hooks"] for d in spec["devices"])
    # a timing line: <prog>[/resident] <container id> cpu0=… state=… <subcommand>=… total=…
    ran = [
        ln.split()[4].split("=")[0]
        for ln in timing
        if ln.split()[0].split("/")[0] == "nvidia-cdi-hook" and ln.split()[1] == res.container_id
    ]
    assert ran == [h["args"][1] for h in common + device["hooks"]], timing
    assert ran[-1] == "chmod" and set(ran[:-1]) == set(dp.HOOK_SUBCOMMANDS), ran

    target = next(
        a.split("::")[0] for a in common[0]["args"] if a.endswith("::" + lib + "/libnvidia-ml.so.1")
    )
    assert facts["link"] == target, facts
    assert facts["ldcache"] is True, facts
    assert "ModifyDeviceFiles: 0" in facts["params"], facts


def test_plugin_spec_with_nvidias_default_hook_fails_every_pod(plugin_node):
    """What issue 25 measured, kept as the control: the spec's default hook path is absent
    on a gpunode node (and gpunode never writes it): the container cannot start."""
    node = plugin_node.node
    try:
        write_plugin_spec(node, dp.DEFAULT_HOOK_PATH)
        res = plugin_node.run("plugin-nvidia-ctk", **dp.container_config("cdi-cri", [UUID[0]]))
    finally:
        write_plugin_spec(node, HOOK)
    assert (res.state, res.reason, res.stdout) == ("CONTAINER_EXITED", "StartError", ""), res
    assert "/usr/bin/nvidia-ctk" in res.message, res.message


def test_setup_writes_values_naming_the_installed_hook(plugin_node):
    """`gpunode runtime setup` on the same node: the device plugin's values say cdi-cri and
    name the launcher that the pods above ran."""
    node = plugin_node.node
    res = node.sh(
        "gpunode runtime setup --json --containerd --containerd-name nvidia --containerd-cdi "
        "--containerd-runtime-class /etc/gpunode/kubernetes/runtimeclass.yaml --dry-run"
    )
    files = {f["kind"]: f for f in json.loads(res.stdout)["files"]}
    values = files["device plugin values"]
    assert values["path"] == "/etc/gpunode/kubernetes/nvidia-device-plugin-values.yaml"
    assert 'deviceListStrategy: "cdi-cri"' in values["after"]
    assert f'nvidiaHookPath: "{HOOK}"' in values["after"]


@pytest.fixture(scope="module")
def plugin_node_16(artifacts, image_tags):
    """A Debian 12 node (containerd 1.6, no CDI): gpunode's handlers passing cdi.k8s.io/*
    (`--pass-annotations`), runc the default."""
    prefix = os.environ.get("GPUNODE_TEST_PREFIX", "gpunode-test")
    spec = cluster.NodeSpec(f"{prefix}-cri-plugin-bookworm", "bookworm", "a100x4")
    try:
        start_nodes([spec], artifacts, image_tags)
        node = prepare(Node(spec.name, spec.release, image_tags["workload-bookworm"]))
        node.configure_handlers("--pass-annotations")
        yield node
    finally:
        if not os.environ.get("GPUNODE_KEEP_NODES"):
            cluster.down_names([spec.name], log=lambda *_: None)


@pytest.mark.parametrize("ids", [[3], [0, 2]], ids=["one", "two"])
def test_containerd_16_plugin_annotations_through_gpunode(plugin_node_16, ids):
    """The plugin's cdi-annotations (its own kind) on containerd 1.6: containerd has no CDI,
    gpunode's runtime behind the `nvidia` handler resolves k8s.device-plugin.nvidia.com/gpu
    itself: exactly the allocation, not a pod without GPU."""
    kwargs = dp.container_config("cdi-annotations", [UUID[i] for i in ids])
    assert_gpus(plugin_node_16.probe(f"plugin-16-{len(ids)}", handler="nvidia", **kwargs), ids)


def test_containerd_16_unknown_plugin_device_is_one_line(plugin_node_16):
    kwargs = dp.container_config("cdi-annotations", ["GPU-00000000-0000-0000-0000-000000000000"])
    res = plugin_node_16.run("plugin-16-bad", handler="nvidia", **kwargs)
    assert res.reason == "StartError" and "\n" not in res.message, res
    assert "unknown device 'k8s.device-plugin.nvidia.com/gpu=GPU-00000000" in res.message, res
