"""The CDI spec: one Edits value converted, devices per GPU."""

from __future__ import annotations

import yaml

from gpunode.runtime import cdi

from .fake_node import GPUS


def test_cdi_spec(disc, devroot):
    spec = cdi.generate(disc, hook_path="/usr/local/bin/gpunode-hook", dev_root=str(devroot))
    assert spec["kind"] == "nvidia.com/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert names == ["0", GPUS[0].uuid, "1", GPUS[1].uuid, "2", GPUS[2].uuid, "all"]
    one = spec["devices"][2]["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in one] == ["/dev/nvidia1"]
    # with a dev root other than / the host path differs, which needs CDI 0.5.0
    assert one[0]["hostPath"] == f"{devroot}/dev/nvidia1"
    assert spec["cdiVersion"] == "0.5.0"
    edits_ = spec["containerEdits"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in edits_["env"]
    assert [n["path"] for n in edits_["deviceNodes"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    ]
    (hook,) = edits_["hooks"]
    assert hook["hookName"] == "createContainer" and hook["env"]
    assert "--proc-driver" in hook["args"] and "--gpu" not in hook["args"]
    # every library of every capability gets its ld.so.cache entry (the hook runs no
    # ldconfig that would scan the folder)
    args = hook["args"]
    libraries = {args[i + 1].split("::")[1] for i, a in enumerate(args) if a == "--library"}
    mounted = {m["containerPath"] for m in edits_["mounts"] if ".so." in m["containerPath"]}
    assert len(mounted) == 4 and {p.rsplit(".so.", 1)[0] for p in libraries} == {
        p.rsplit(".so.", 1)[0] for p in mounted
    }
    assert yaml.safe_load(cdi.dump(spec, "yaml")) == spec


def test_cdi_minimum_version():
    def spec(name, node):
        return {
            "devices": [{"name": name, "containerEdits": {"deviceNodes": [node]}}],
            "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]},
        }

    assert cdi.minimum_version(spec("all", {"path": "/dev/nvidia0"})) == "0.3.0"
    # podman 5 rejects a 0.3.0 spec with a device named "0": digits need 0.5.0
    assert cdi.minimum_version(spec("0", {"path": "/dev/nvidia0"})) == "0.5.0"
    assert cdi.minimum_version(spec("all", {"path": "/dev/nvidia0", "hostPath": "/x"})) == "0.5.0"


def test_cdi_write_is_atomic_and_idempotent(tmp_path):
    spec = {"cdiVersion": "0.3.0", "kind": "nvidia.com/gpu", "devices": [], "containerEdits": {}}
    out = tmp_path / "cdi" / "nvidia.yaml"
    assert cdi.write(spec, str(out)) is True
    assert cdi.write(spec, str(out)) is False
    assert sorted(p.name for p in out.parent.iterdir()) == ["nvidia.yaml"]


def test_cdi_hook_leaves_the_selection_to_the_device_nodes(disc, devroot):
    spec = cdi.generate(disc, hook_path="/h", dev_root=str(devroot))
    args = spec["containerEdits"]["hooks"][0]["args"]
    assert "--gpus-selected" not in args and "--gpu" not in args and "--proc-driver" in args
