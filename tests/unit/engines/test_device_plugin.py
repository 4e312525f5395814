"""NVIDIA's device plugin's Helm values that `gpunode runtime setup` writes beside the
RuntimeClass manifest (gpunode.engines.device_plugin): the strategy per node, keys the chart
takes."""

from __future__ import annotations

import pytest
import yaml

from gpunode.engines import device_plugin
from gpunode.util.command import UsageError

# Top-level keys of NVIDIA/k8s-device-plugin deployments/helm/nvidia-device-plugin/values.yaml
# that the file may set (and cdi's own keys there).
CHART_KEYS = {
    "deviceListStrategy", "deviceIDStrategy", "nvidiaDriverRoot", "runtimeClassName", "cdi",
    "securityContext", "migStrategy", "failOnInitError",
}  # fmt: skip
CHART_CDI_KEYS = {"nvidiaHookPath", "featureFlags"}
HOOK = "/usr/local/libexec/gpunode/nvidia-cdi-hook"


def values(**kw) -> dict:
    args = {
        "names": ("gpunode", "nvidia"),
        "set_default": False,
        "cdi": False,
        "pass_annotations": False,
        "accept_volume_mounts": False,
        "accept_envvar_unprivileged": False,
        "driver_root": "/",
        "hook_path": HOOK,
    } | kw
    text = device_plugin.values(**args)
    out = yaml.safe_load(text)
    assert set(out) <= CHART_KEYS and set(out["cdi"]) <= CHART_CDI_KEYS, out
    return out


@pytest.mark.parametrize(
    ("kw", "want"),
    [
        ({"cdi": True, "accept_volume_mounts": True}, "cdi-cri"),  # containerd >= 1.7
        ({"accept_volume_mounts": True}, "volume-mounts"),  # 1.6, the secure default
        ({"pass_annotations": True}, "cdi-annotations"),  # 1.6, gpunode serves the kind
        ({"accept_envvar_unprivileged": True}, "envvar"),  # 1.6, the open mode
    ],
)
def test_strategy_per_node(kw, want):
    out = values(**kw)
    assert out["deviceListStrategy"] == want
    assert out["deviceIDStrategy"] == "uuid" and out["nvidiaDriverRoot"] == "/"
    assert out["cdi"] == {"nvidiaHookPath": HOOK}
    assert out["runtimeClassName"] == "nvidia"
    assert out["securityContext"] == {"capabilities": {"add": ["SYS_ADMIN"]}}


def test_runtime_class_of_the_handler_or_none_as_default_runtime():
    assert values(names=("gpunode",), cdi=True)["runtimeClassName"] == "gpunode"
    assert values(names=("gpunode",), cdi=True, set_default=True)["runtimeClassName"] is None


def test_workloads_are_told_their_runtime_class_without_cdi():
    text = device_plugin.values(
        names=("nvidia",), set_default=False, cdi=False, pass_annotations=False,
        accept_volume_mounts=True, accept_envvar_unprivileged=False, driver_root="/run/nvidia/driver",
        hook_path=HOOK,
    )  # fmt: skip
    assert "# GPU workload pods need runtimeClassName: nvidia too." in text
    assert yaml.safe_load(text)["nvidiaDriverRoot"] == "/run/nvidia/driver"


def test_no_strategy_reaches_gpus_is_one_line():
    with pytest.raises(UsageError) as err:
        values()
    assert "\n" not in str(err.value) and "accept-volume-mounts = true" in str(err.value)


def test_values_path_is_beside_the_runtime_class():
    assert device_plugin.values_path("/etc/gpunode/kubernetes/runtimeclass.yaml") == (
        "/etc/gpunode/kubernetes/nvidia-device-plugin-values.yaml"
    )
