"""MIG layouts (the gpu_mig role): on every node that selects one (gpu_mig_config), the
layout the inventory describes is the node's, as gpunode itself reads it back (`gpunode
mig assert`, `gpunode mig export --json`, `gpunode inventory --json`), as the runtime's
inventory cache holds it, and as the CDI spec names it; the layouts file is the inventory's;
the units gpu_mig stops around a change run again, the boot unit that applies the layout
again is enabled, and no drain is left.

Expectations are the inventory's gpu_mig_* variables with the role's defaults; nodes
without gpu_mig_config are skipped.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter

import pytest
import yaml

from .conftest import node_inventory

DRAIN_MARKER = "/var/lib/gpunode-mig.drained"
CACHE_FILE = "/var/cache/gpunode/inventory.json"  # runtime.toml's cache-file default
CDI_SPEC = "/etc/cdi/nvidia.yaml"  # the first of runtime.toml's default cdi-spec-dirs


def knobs(node) -> dict:
    v = node.vars
    return {
        "config": v.get("gpu_mig_config", ""),
        "configs": v.get("gpu_mig_configs", {}),
        "path": v.get("gpu_mig_config_path", "/etc/gpunode/mig-config.yaml"),
        "services": v.get("gpu_mig_stop_services", []),
        "cdi": bool(v.get("gpu_mig_cdi", v.get("gpu_container_runtime_cdi", True))),
    }


def per_gpu(entries: list, indices: list[int]) -> dict[int, tuple[bool, dict]]:
    """mig-parted entries as {gpu index: (mig enabled, {profile: count})}, counts of 0
    dropped; `devices: all` is every GPU the node has."""
    out = {}
    for entry in entries:
        devices = indices if entry.get("devices") == "all" else entry.get("devices", [])
        enabled = bool(entry.get("mig-enabled", False))
        counts = {p: int(n) for p, n in (entry.get("mig-devices") or {}).items() if int(n)}
        for i in devices:
            out[int(i)] = (enabled, counts if enabled else {})
    return out


@pytest.fixture
def want(node) -> dict:
    k = knobs(node)
    if not k["config"]:
        pytest.skip(f"{node.name}: no MIG layout selected (gpu_mig_config)")
    return k


@pytest.fixture
def document(node, want) -> dict:
    f = node.host.file(want["path"])
    assert f.exists, f"{node.name}: {want['path']} is missing"
    return yaml.safe_load(f.content_string)


@pytest.fixture
def layout(node, want, document) -> dict[int, tuple[bool, dict]]:
    """What the selected layout makes of each GPU it names."""
    indices = [g["index"] for g in node_inventory(node)["gpus"]]
    return per_gpu(document["mig-configs"][want["config"]], indices)


def test_layouts_file(node, want, document):
    f = node.host.file(want["path"])
    assert (f.user, f.group, f.mode) == ("root", "root", 0o644), f"{node.name}: {want['path']}"
    assert document["version"] == "v1"
    if want["configs"]:
        assert document["mig-configs"] == want["configs"]
    assert want["config"] in document["mig-configs"]


def test_gpunode_asserts_the_layout(node, want):
    cmd = (f"{node.gpunode()} mig assert --config-file {shlex.quote(want['path'])} "
           f"--config {shlex.quote(want['config'])}")  # fmt: skip
    r = node.run(cmd)
    assert r.rc == 0, f"{node.name}: `{cmd}` exited {r.rc}: {r.stderr.strip()}"


def test_export_is_the_layout(node, layout):
    exported = json.loads(node.ok(f"{node.gpunode()} mig export --json"))
    assert exported["version"] == "v1"
    indices = [g["index"] for g in node_inventory(node)["gpus"]]
    current = per_gpu(exported["mig-configs"]["current"], indices)
    assert {i: current.get(i) for i in layout} == layout


def test_inventory_shows_mig_mode(node, layout):
    gpus = {g["index"]: g for g in node_inventory(node)["gpus"]}
    assert {i: gpus[i]["mig_mode"] for i in layout} == {i: e for i, (e, _) in layout.items()}


def _cache(node) -> dict:
    data = node.json_file(CACHE_FILE)
    assert data is not None, f"{node.name}: no inventory cache at {CACHE_FILE}"
    return {g["index"]: g for g in data["node"]["gpus"]}


def test_inventory_cache_holds_the_layout(node, layout):
    """The runtime reads the cache on every container start: gpu_mig rewrote it."""
    cached = _cache(node)
    got = {
        i: (cached[i]["mig_enabled"], dict(Counter(m["profile"] for m in cached[i]["mig"])))
        for i in layout
    }
    assert got == layout


def test_cdi_spec_names_the_mig_devices(node, want, layout):
    if not want["cdi"]:
        pytest.skip(f"{node.name}: no CDI spec (gpu_mig_cdi / gpu_container_runtime_cdi)")
    f = node.host.file(CDI_SPEC)
    assert f.exists, f"{node.name}: {CDI_SPEC} is missing"
    names = {d["name"] for d in yaml.safe_load(f.content_string)["devices"]}
    cached = _cache(node)
    mig = {(i, m["index"], m["uuid"]) for i in layout for m in cached[i]["mig"]}
    missing = sorted(n for i, k, uuid in mig for n in (f"{i}:{k}", uuid) if n not in names)
    assert missing == [], f"{node.name}: {CDI_SPEC} lacks MIG devices {missing}"
    # a MIG-enabled GPU is used only as its MIG devices, not whole (nvidia-ctk's rule too)
    whole = sorted(i for i, (enabled, _) in layout.items() if enabled and str(i) in names)
    assert whole == [], f"{node.name}: {CDI_SPEC} lists MIG-enabled GPUs {whole} as whole GPUs"


def test_stopped_units_run_again(node, want):
    for unit in want["services"]:
        assert node.host.service(unit).is_running, f"{node.name}: {unit} is not running"


def test_boot_unit_enabled(node, want):
    """GPU instances do not survive a reboot: gpunode-mig.service applies the layout again."""
    if not node.vars.get("gpu_mig_boot_unit", True):
        assert not node.host.file("/etc/systemd/system/gpunode-mig.service").exists
        return
    unit = node.host.service("gpunode-mig.service")
    assert unit.is_enabled, f"{node.name}: gpunode-mig.service is not enabled"
    text = node.host.file("/etc/systemd/system/gpunode-mig.service").content_string
    assert f"--config {want['config']} " in text, f"{node.name}: gpunode-mig.service: {text}"


def test_no_drain_left(node, want):
    assert not node.host.file(DRAIN_MARKER).exists, f"{node.name}: {DRAIN_MARKER}"
