"""NVIDIA's nvidia-smi on a GPU node: the first command an operator types answers, and says
what NVML says (`gpunode inventory --json`): the same GPUs in the same order, their names,
UUIDs and bus ids, ECC counts, retired pages and remapped rows, MIG devices, NVLinks and
the NVSwitch fabric's state; `topo -m` draws NVLinks exactly where they are up. On a real
node that compares NVIDIA's tool with NVML, as an operator would; on a simulated one it
proves the mock NVML satisfies NVIDIA's unmodified binary (tests/infra/smi.py compares).

A GPU that fell off the bus stops nvidia-smi as on hardware: each view exits 15 naming it
("Unable to determine the device handle for GPU0000:D8:00.0: GPU is lost"), which is what
the views are held to then; a corrupted InfoROM makes the default view exit 14 with its
warning naming the GPU. Nodes without GPUs are skipped with that reason."""

from __future__ import annotations

import pytest

from . import smi
from .conftest import node_inventory


@pytest.fixture
def gpu_node(node):
    inventory = node_inventory(node)
    if not inventory["gpus"]:
        pytest.skip(f"{node.name}: no GPU, nothing for nvidia-smi to show")
    return node, inventory


def short_bus(bus_id: str) -> str:
    """0000:D8:00.0: how nvidia-smi's messages name a GPU."""
    return smi.norm_bus(bus_id)[4:]


def smi_run(node, inventory: dict, args: str, rc: int = 0) -> str | None:
    """nvidia-smi's output, after asserting its exit code: *rc*, or 15 naming the first
    lost GPU when NVML says one fell off the bus (then None: there is no view to read;
    `topo -m`, which asks the driver about pairs of GPUs by bus id, fails as a whole)."""
    r = node.run(f"nvidia-smi {args}")
    out = r.stdout + r.stderr
    lost = [g for g in inventory["gpus"] if "fallen_off_bus" in (g.get("health") or [])]
    if lost and args.startswith("topo"):
        assert (r.rc, out.strip()) == (255, "Failed to run topology matrix"), out[-2000:]
        return None
    if lost:
        assert r.rc == 15, f"{node.name}: `nvidia-smi {args}` exited {r.rc}: {out[-2000:]}"
        name = short_bus(lost[0]["pci_bus_id"])
        assert f"{name}: GPU is lost" in out, out[-2000:]
        return None
    assert r.rc == rc, f"{node.name}: `nvidia-smi {args}` exited {r.rc}: {out[-2000:]}"
    return r.stdout


def test_default_view_names_the_driver_and_every_gpu(gpu_node):
    node, inventory = gpu_node
    corrupt = [g for g in inventory["gpus"] if g.get("inforom_valid") is False]
    out = smi_run(node, inventory, "", rc=14 if corrupt else 0)
    if out is None:
        return
    for g in corrupt:  # the exit code 14 and a warning for each
        assert f"WARNING: infoROM is corrupted at gpu {short_bus(g['pci_bus_id'])}" in out
    head = smi.HEADER.search(out)
    assert head, out[:600]
    assert head[2] == inventory["driver_version"] == head[1], head[0]
    for g in inventory["gpus"]:
        assert smi.norm_bus(g["pci_bus_id"]) in out, (g["pci_bus_id"], out)
    assert "Processes:" in out


@pytest.mark.parametrize("args", list(smi.VIEWS), ids=lambda a: a.split("=")[0])
def test_view_matches_nvml(gpu_node, args):
    node, inventory = gpu_node
    if (out := smi_run(node, inventory, args)) is not None:
        assert smi.VIEWS[args](out, inventory) == []


def test_query_text_lists_every_gpu(gpu_node):
    node, inventory = gpu_node
    if (out := smi_run(node, inventory, "-q")) is None:
        return
    assert f"Attached GPUs                             : {len(inventory['gpus'])}" in out
    for g in inventory["gpus"]:
        assert f"GPU UUID                              : {g['uuid']}" in out


def test_mig_instances_match_nvml(gpu_node):
    node, inventory = gpu_node
    if not any(g.get("mig_mode") for g in inventory["gpus"]):
        pytest.skip(f"{node.name}: no GPU in MIG mode")
    lgi, lci = smi_run(node, inventory, "mig -lgi"), smi_run(node, inventory, "mig -lci")
    if lgi is not None and lci is not None:
        assert smi.compare_mig(lgi, lci, inventory) == []
