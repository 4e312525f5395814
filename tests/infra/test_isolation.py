"""Containers see exactly the GPUs they request, not one more: every request (all, none,
void, unset, one index, several, a UUID, a PCI bus id, a mix) through every channel
(`--runtime gpunode` with NVIDIA_VISIBLE_DEVICES, `--gpus`, CDI with podman and with Docker
where it has CDI), judged three ways: device nodes, NVML UUIDs from inside, and
/proc/driver/nvidia/gpus."""

from __future__ import annotations

import json

import pytest

from gpunode.nvidia.busid import BusId

from .conftest import node_inventory
from .matrix import CASES, Gpus, channel_command, need_cdi_spec, prepare


@pytest.fixture
def setup(node):
    return Gpus(node_inventory(node)), prepare(node)


@pytest.mark.parametrize(("channel", "request_name"), CASES, ids=[f"{c}-{r}" for c, r in CASES])
def test_container_sees_exactly_the_requested_gpus(node, setup, channel, request_name):
    gpus, mounts = setup
    need_cdi_spec(node, channel)
    items, selected = gpus.request(request_name, channel)
    cmd = channel_command(node, channel, items, mounts)
    r = node.run(cmd)
    assert r.rc == 0, f"{node.name}: `{cmd}` exited {r.rc}: {r.stderr.strip()[-500:]}"
    out = json.loads(r.stdout.strip().splitlines()[-1])
    where = f"{node.name} {channel} {request_name}"
    if selected is None:  # not a GPU container: nothing of the driver injected
        assert [d for d in out["dev"] if d[6:].isdigit()] == [], (where, out)
        assert str(out["nvml"]).startswith("error:"), (where, out)
        return
    want = [gpus.gpus[i] for i in sorted(set(selected))]
    minors = sorted(f"nvidia{g['minor']}" for g in want)
    assert sorted(d for d in out["dev"] if d[6:].isdigit()) == minors, (where, "device nodes", out)
    assert sorted(out["nvml"]) == sorted(g["uuid"] for g in want), (where, "NVML UUIDs", out)
    procfs = sorted(BusId.parse(g["pci_bus_id"]).procfs for g in want)
    assert out["proc_gpus"] == procfs, (where, "/proc/driver/nvidia/gpus", out)
