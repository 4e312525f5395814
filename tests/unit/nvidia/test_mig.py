"""MIG: the NVML enumeration every consumer shares, the cached facts, the capability files."""

from __future__ import annotations

import types

import pytest

from gpunode.nvidia import mig, nvml
from gpunode.nvidia.facts import GpuFacts, MigFacts, NodeFacts


class Mem:
    def __init__(self, mib):
        self.total = mib * 1024 * 1024


class MigNvml(types.SimpleNamespace):
    """A MIG-enabled GPU whose MIG slots 0, 2 and 5 hold devices (1 and 3, 4, 6 are empty)."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotFound(NVMLError):
        pass

    slots = {
        0: (1, 0, "3g.40gb", 40192),
        2: (5, 0, "1g.10gb", 9856),
        5: (2, 1, "1c.3g.40gb", 40192),
    }

    def nvmlDeviceGetMigMode(self, h):
        return (1, 1) if h == "gpu" else (0, 1)  # a pending enable is not on

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, slot):
        if slot not in self.slots:
            raise self.NVMLError_NotFound()
        return ("mig", slot)

    def nvmlDeviceGetName(self, m):
        return f"NVIDIA A100-SXM4-80GB MIG {self.slots[m[1]][2]}".encode()

    def nvmlDeviceGetUUID(self, m):
        return f"MIG-{m[1]:08x}-0000-0000-0000-000000000000"

    def nvmlDeviceGetGpuInstanceId(self, m):
        return self.slots[m[1]][0]

    def nvmlDeviceGetComputeInstanceId(self, m):
        return self.slots[m[1]][1]

    def nvmlDeviceGetMemoryInfo(self, m):
        return Mem(self.slots[m[1]][3])


def test_mig_devices_are_numbered_by_position_not_slot_or_instance_id():
    nv = MigNvml()
    devices = nvml.mig_devices(nv, "gpu")
    assert [(d.index, d.gi, d.ci, d.profile) for d in devices] == [
        (0, 1, 0, "3g.40gb"),
        (1, 5, 0, "1g.10gb"),
        (2, 2, 1, "1c.3g.40gb"),
    ]
    assert devices[1].uuid == "MIG-00000002-0000-0000-0000-000000000000"
    assert devices[1].memory_mib == 9856


def test_mig_mode_is_the_current_mode_only():
    nv = MigNvml()
    assert nvml.mig_modes(nv, "gpu")[0] is True
    assert nvml.mig_modes(nv, "pending-only")[0] is False
    assert nvml.mig_modes(types.SimpleNamespace(NVMLError=Exception), "old-nvml") is None


def test_facts_with_mig_devices_round_trip_strictly():
    gpu = GpuFacts(0, 0, "GPU-a", "00000000:07:00.0", mig_enabled=True,
                   mig=(MigFacts(0, "MIG-x", 1, 0, "3g.40gb", 40192),))  # fmt: skip
    node = NodeFacts("535.261.03", "12.2", gpus=(gpu,))
    assert NodeFacts.from_dict(node.to_dict()) == node
    data = node.to_dict()
    data["gpus"][0]["mig"][0]["gi"] = "1"
    with pytest.raises(TypeError, match="MigFacts field gi"):
        NodeFacts.from_dict(data)
    data = node.to_dict()
    data["gpus"][0]["mig_enabled"] = 1
    with pytest.raises(TypeError, match="mig_enabled"):
        NodeFacts.from_dict(data)
    data = node.to_dict()
    del data["gpus"][0]["mig"]
    with pytest.raises(KeyError):
        NodeFacts.from_dict(data)


ACCESS = "DeviceFileMinor: 39\nDeviceFileMode: 292\nDeviceFileModify: 1\n"


def test_a_cap_minor_is_read_from_its_access_file(tmp_path):
    proc = tmp_path / "nvidia"
    path = mig.access_file(str(proc), mig.ci_cap(0, 4, 0))
    assert path == f"{proc}/capabilities/gpu0/mig/gi4/ci0/access"
    with pytest.raises(mig.CapsError, match="cannot be read"):
        mig.read_cap_minor(path)
    (proc / "capabilities/gpu0/mig/gi4/ci0").mkdir(parents=True)
    (proc / "capabilities/gpu0/mig/gi4/ci0/access").write_text(ACCESS)
    assert mig.read_cap_minor(path) == 39
    (proc / "capabilities/gpu0/mig/gi4/ci0/access").write_text("DeviceFileMinor: x\n")
    with pytest.raises(mig.CapsError, match="no 'DeviceFileMinor"):
        mig.read_cap_minor(path)
    assert mig.cap_node(39) == "/dev/nvidia-caps/nvidia-cap39"


def test_instances_are_the_gi_and_ci_directories(tmp_path):
    base = tmp_path / "capabilities/gpu3/mig"
    for d in ("gi1/ci0", "gi1/ci2", "gi7/ci0", "gi9", "other/ci0", "gi2/cix"):
        (base / d).mkdir(parents=True)
    assert mig.instances(str(tmp_path), 3) == {(1, 0), (1, 2), (7, 0)}
    assert mig.instances(str(tmp_path), 0) == frozenset()


def test_mig_minors_lines():
    text = "config 1\nmonitor 2\ngpu0/gi0/access 3\ngpu0/gi0/ci0/access 4\nbad line here\n"
    assert mig.parse_mig_minors(text) == {
        "config": 1, "monitor": 2, "gpu0/gi0/access": 3, "gpu0/gi0/ci0/access": 4,
    }  # fmt: skip
