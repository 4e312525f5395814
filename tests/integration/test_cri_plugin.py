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
"""

from __future__ import annotations

import json
import os
import shlex

import pytest

from gpunode.sim import cluster

from .. import deviceplugin as dp
from .conftest import Node, start_nodes
from .test_cri import UUID, assert_gpus, prepare

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


def write_plugin_spec(node: Node, hook_path: str, id_strategy: str = "uuid") -> dict:
    """The plugin's spec for this node, made from the node's own gpunode spec, installed
    where the plugin writes it."""
    ours = json.loads(node.sh("gpunode cdi generate --format json").stdout)
    spec = dp.cdi_spec(ours, hook_path=hook_path, id_strategy=id_strategy)
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
