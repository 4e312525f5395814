"""Edits applied to an OCI spec, NVIDIA's hooks removed, config.json rewritten."""

from __future__ import annotations

import json
import os
import stat

from gpunode.runtime import edits, oci

from .fake_node import GPUS


def test_oci_apply_and_docker_gpus_hook_removed(disc, devroot):
    spec = {
        "process": {"env": ["A=1"]},
        "mounts": [{"destination": "/usr/bin/nvidia-smi", "source": "/mine", "type": "bind"}],
        "hooks": {
            "prestart": [
                {
                    "path": "/usr/bin/nvidia-container-runtime-hook",
                    "args": ["nvidia-container-runtime-hook", "prestart"],
                },
                {"path": "/usr/bin/other"},
            ]
        },
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }
    assert oci.remove_nvidia_hooks(spec) == 1
    assert spec["hooks"]["prestart"] == [{"path": "/usr/bin/other"}]
    e = edits.build(disc, {"compute", "utility"}, [GPUS[0]], hook_path="/h", dev_root=str(devroot))
    oci.apply(spec, e)
    assert [d["path"] for d in spec["linux"]["devices"]] == [d.path for d in e.devices]
    allow = spec["linux"]["resources"]["devices"]
    assert allow[0] == {"allow": False, "access": "rwm"}  # the engine's deny-all stays first
    assert {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"} in allow
    smi = [m for m in spec["mounts"] if m["destination"] == "/usr/bin/nvidia-smi"]
    assert smi == [{"destination": "/usr/bin/nvidia-smi", "source": "/mine", "type": "bind"}]
    (hook,) = spec["hooks"]["createContainer"]
    assert hook["env"] == ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GPUNODE_HOOK=1"]


def test_write_atomic_leaves_no_temp(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{}")
    os.chmod(path, 0o640)
    oci.write_atomic(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
