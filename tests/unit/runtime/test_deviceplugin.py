"""tests/deviceplugin.py against device-plugin.md: each strategy's container config, the
plugin's own CDI spec for a node (read from gpunode's spec of the fake node)."""

from __future__ import annotations

import pytest

from gpunode.runtime import cdi

from ... import deviceplugin as dp
from .fake_node import GPUS, VERSION

U0, U1 = GPUS[0].uuid, GPUS[1].uuid
MIG = "MIG-11111111-2222-4333-8444-555555555555"


def test_envvar_is_the_variable_and_the_pods_own_wins():
    assert dp.container_config("envvar", [U0, U1]) == {
        "env": {"NVIDIA_VISIBLE_DEVICES": f"{U0},{U1}"}
    }
    assert dp.container_config("envvar", ["3", "1"]) == {"env": {"NVIDIA_VISIBLE_DEVICES": "3,1"}}
    got = dp.container_config("envvar", [MIG], env={"A": "1", "NVIDIA_VISIBLE_DEVICES": "all"})
    assert got["env"] == {"A": "1", "NVIDIA_VISIBLE_DEVICES": "all"}  # kubelet: the pod's last


def test_volume_mounts_are_dev_null_per_device():
    got = dp.container_config("volume-mounts", [U0, "1"])
    assert got == {
        "env": {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"},
        "mounts": [
            {
                "container_path": f"/var/run/nvidia-container-devices/{U0}",
                "host_path": "/dev/null",
                "readonly": False,
            },
            {
                "container_path": "/var/run/nvidia-container-devices/1",
                "host_path": "/dev/null",
                "readonly": False,
            },
        ],
    }


def test_cdi_strategies_name_the_plugins_kind_and_send_no_env():
    got = dp.container_config("cdi-annotations", [U0, MIG], uid="u1")
    assert got == {
        "annotations": {
            "cdi.k8s.io/nvidia-device-plugin_u1": (
                f"k8s.device-plugin.nvidia.com/gpu={U0},k8s.device-plugin.nvidia.com/gpu={MIG}"
            )
        }
    }
    assert dp.container_config("cdi-cri", ["0", "2"]) == {
        "cdi_devices": ["k8s.device-plugin.nvidia.com/gpu=0", "k8s.device-plugin.nvidia.com/gpu=2"]
    }
    with pytest.raises(ValueError, match="unknown DEVICE_LIST_STRATEGY 'cdi'"):
        dp.allocate("cdi", [U0])


def test_hook_args_per_hook_path():
    assert dp.hook_args("/usr/bin/nvidia-ctk", "update-ldcache", "--folder", "/l") == [
        "nvidia-ctk",
        "hook",
        "update-ldcache",
        "--folder",
        "/l",
    ]
    assert dp.hook_args("/x/nvidia-cdi-hook", "update-application-profile") == [
        "nvidia-cdi-hook",
        "update-application-profile",
    ]


def test_plugin_spec_from_the_nodes_spec(disc, devroot):
    node = cdi.generate(disc, hook_path="/usr/local/bin/gpunode-hook", dev_root=str(devroot))
    spec = dp.cdi_spec(node, hook_path="/usr/local/libexec/gpunode/nvidia-cdi-hook")
    assert (spec["cdiVersion"], spec["kind"]) == ("0.3.0", "k8s.device-plugin.nvidia.com/gpu")
    assert [d["name"] for d in spec["devices"]] == [g.uuid for g in GPUS]
    assert spec["devices"][1]["containerEdits"] == {"deviceNodes": [{"path": "/dev/nvidia1"}]}
    edits = spec["containerEdits"]
    lib = "/usr/lib/x86_64-linux-gnu"
    assert edits["env"] == [f"NVIDIA_CTK_LIBCUDA_DIR={lib}", "NVIDIA_VISIBLE_DEVICES=void"]
    assert [n["path"] for n in edits["deviceNodes"]] == [
        "/dev/nvidia-modeset",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidiactl",
    ]
    mounted = sorted(m["containerPath"] for m in edits["mounts"])
    assert f"{lib}/libnvidia-ml.so.{VERSION}" in mounted
    assert all(p.endswith(f".so.{VERSION}") for p in mounted)
    hooks = edits["hooks"]
    assert all(
        h["hookName"] == "createContainer"
        and h["path"] == "/usr/local/libexec/gpunode/nvidia-cdi-hook"
        and h["env"] == ["NVIDIA_CTK_DEBUG=false"]
        and h["args"][0] == "nvidia-cdi-hook"
        for h in hooks
    )
    assert [h["args"][1] for h in hooks] == list(dp.HOOK_SUBCOMMANDS)
    assert f"libnvidia-ml.so.{VERSION}::{lib}/libnvidia-ml.so.1" in hooks[0]["args"]
    assert f"libcuda.so.1::{lib}/libcuda.so" in hooks[0]["args"]
    assert hooks[1]["args"][2:] == [f"--host-driver-version={VERSION}"]
    assert hooks[2]["args"][2:] == ["--folder", lib]
    assert [h["args"][2:] for h in hooks[3:]] == [[], []]


def test_plugin_spec_by_index(disc, devroot):
    node = cdi.generate(disc, hook_path="/h", dev_root=str(devroot))
    spec = dp.cdi_spec(node, id_strategy="index")
    assert [d["name"] for d in spec["devices"]] == ["0", "1", "2"]
    assert spec["cdiVersion"] == "0.5.0"  # names starting with a digit
    assert spec["containerEdits"]["hooks"][0]["args"][:3] == [
        "nvidia-ctk",
        "hook",
        "create-symlinks",
    ]


def test_plugin_spec_mig_devices_carry_parent_and_cap_nodes(tmp_path):
    """MIG devices by MIG UUID (and by <gpu>:<n> with index ids): the parent's node plus
    the GI and CI cap nodes, as the node's own spec gives them."""
    import os

    from .mig_node import GPUS as MIG_GPUS
    from .mig_node import cap_minor, discovery_of, make_dev_root, make_driver_root

    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    driver = make_driver_root(tmp_path / "driver")
    make_dev_root(tmp_path)
    node = cdi.generate(discovery_of(driver), hook_path="/h", dev_root=str(tmp_path))
    spec = dp.cdi_spec(node)
    migs = {m.uuid: (g, m) for g in MIG_GPUS for m in g.mig}
    by_name = {d["name"]: d["containerEdits"]["deviceNodes"] for d in spec["devices"]}
    assert set(migs) <= set(by_name)
    gpu, m = next(iter(migs.values()))
    paths = [n["path"] for n in by_name[m.uuid]]
    assert paths[0] == f"/dev/nvidia{gpu.minor}"
    assert paths[1:] == [
        f"/dev/nvidia-caps/nvidia-cap{cap_minor(c)}"
        for c in (
            f"gpu{gpu.minor}/mig/gi{m.gi}/access",
            f"gpu{gpu.minor}/mig/gi{m.gi}/ci{m.ci}/access",
        )
    ]
    assert all(
        not n.startswith("MIG-")
        for n in (d["name"] for d in dp.cdi_spec(node, id_strategy="index")["devices"])
    )


HOOK = "/usr/local/libexec/gpunode/nvidia-cdi-hook"


def test_every_optional_hook_is_chmod_on_each_full_gpu(disc, devroot):
    """NVIDIA's generator with every optional hook enabled (``--enable-hook chmod``, its one
    default-off hook): the plugin's common edits unchanged, and each full GPU's own edits a
    ``chmod --mode 755`` after its device node; no --path, as these GPUs have no DRM node."""
    node = cdi.generate(disc, hook_path="/usr/local/bin/gpunode-hook", dev_root=str(devroot))
    default = dp.cdi_spec(node, hook_path=HOOK)
    spec = dp.cdi_spec(node, hook_path=HOOK, enable_hooks=dp.OPTIONAL_HOOKS)
    assert dp.OPTIONAL_HOOKS == ("chmod",)
    assert spec["containerEdits"] == default["containerEdits"]
    assert (spec["cdiVersion"], spec["kind"]) == (default["cdiVersion"], default["kind"])
    assert [d["name"] for d in spec["devices"]] == [g.uuid for g in GPUS]
    for i, dev in enumerate(spec["devices"]):
        assert dev["containerEdits"] == {
            "deviceNodes": [{"path": f"/dev/nvidia{i}"}],
            "hooks": [
                {
                    "hookName": "createContainer",
                    "path": HOOK,
                    "args": ["nvidia-cdi-hook", "chmod", "--mode", "755"],
                    "env": ["NVIDIA_CTK_DEBUG=false"],
                }
            ],
        }
    by_ctk = dp.cdi_spec(node, id_strategy="index", enable_hooks=["chmod"])
    assert [d["name"] for d in by_ctk["devices"]] == ["0", "1", "2"]
    assert [h["args"] for d in by_ctk["devices"] for h in d["containerEdits"]["hooks"]] == [
        ["nvidia-ctk", "hook", "chmod", "--mode", "755"]
    ] * 3
    assert {h["path"] for d in by_ctk["devices"] for h in d["containerEdits"]["hooks"]} == {
        "/usr/bin/nvidia-ctk"
    }


def test_chmod_paths_are_the_device_folders_of_a_full_gpu_only(disc, devroot):
    """A full GPU with DRM nodes gets ``--path /dev/dri`` once; a MIG device, whose cap nodes
    are under /dev/nvidia-caps, gets no chmod (NVIDIA's MIG discoverer adds none)."""
    node = cdi.generate(disc, hook_path="/h", dev_root=str(devroot))
    gpu0 = node["devices"][[d["name"] for d in node["devices"]].index(GPUS[0].uuid)]
    gpu0["containerEdits"]["deviceNodes"] += [
        {"path": "/dev/dri/card1"},
        {"path": "/dev/dri/renderD128"},
    ]
    caps = ["/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"]
    node["devices"].append(
        {
            "name": MIG,
            "containerEdits": {"deviceNodes": [{"path": p} for p in ["/dev/nvidia0", *caps]]},
        }
    )
    spec = dp.cdi_spec(node, hook_path=HOOK, enable_hooks=dp.OPTIONAL_HOOKS)
    by_name = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert [h["args"] for h in by_name[GPUS[0].uuid]["hooks"]] == [
        ["nvidia-cdi-hook", "chmod", "--mode", "755", "--path", "/dev/dri"]
    ]
    bare = ["nvidia-cdi-hook", "chmod", "--mode", "755"]
    assert by_name[GPUS[1].uuid]["hooks"][0]["args"] == bare
    assert by_name[MIG] == {"deviceNodes": [{"path": p} for p in ["/dev/nvidia0", *caps]]}
    assert dp.chmod_folders([{"path": p} for p in [*caps, "/dev/dri/card0", "/dev/nvidia0"]]) == [
        "/dev/nvidia-caps",
        "/dev/dri",
    ]


def test_default_spec_and_hook_names(disc, devroot):
    """No optional hook: the spec as device-plugin.md has it (no device hooks); naming a
    default-on hook changes nothing, as in NVIDIA's generator; ``all`` is refused as there,
    and an unknown name is refused rather than taken for enabled."""
    node = cdi.generate(disc, hook_path="/h", dev_root=str(devroot))
    default = dp.cdi_spec(node)
    assert all(set(d["containerEdits"]) == {"deviceNodes"} for d in default["devices"])
    assert dp.cdi_spec(node, enable_hooks=()) == default
    assert dp.cdi_spec(node, enable_hooks=list(dp.HOOK_SUBCOMMANDS)) == default
    with pytest.raises(ValueError, match="enabling all hooks is not supported"):
        dp.cdi_spec(node, enable_hooks=["all"])
    for name in ("chmod-hook", "create-soname-symlinks"):
        with pytest.raises(ValueError, match=f"unknown hook '{name}'; optional: chmod"):
            dp.cdi_spec(node, enable_hooks=[name])
    with pytest.raises(TypeError):
        dp.cdi_spec(node, enable_hooks="chmod")
