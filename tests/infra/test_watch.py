"""The watch (the gpu_watch role): on every GPU node where gpu_watch_enabled (default true),
gpunode-watch.service is enabled and running, its textfile has a heartbeat younger than
three intervals and NVML up, and `gpunode watch check` (node-problem-detector's plugin)
answers 0 or 1 with one short line: 0 wherever `gpunode validate` passes (the watch runs
a subset of validate's checks). Nodes without a GPU, or with the watch off, have no unit.

Expectations are the inventory's gpu_watch_* variables with the role's defaults.
"""

from __future__ import annotations

import json
import re
import shlex
import time
from pathlib import Path

import pytest
import yaml

from .conftest import truth

ROLE_DEFAULTS = Path(__file__).resolve().parents[2] / "roles/gpu_watch/defaults/main.yml"
UNIT = "gpunode-watch.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"


def knobs(node) -> dict:
    defaults = yaml.safe_load(ROLE_DEFAULTS.read_text())
    v = {**{k: d for k, d in defaults.items() if "{{" not in str(d)}, **node.vars}
    return {
        "enabled": truth(v["gpu_watch_enabled"]),
        "interval": int(v["gpu_watch_interval"]),
        "textfile": v["gpu_watch_textfile"],
        "state_dir": v["gpu_watch_state_dir"],
    }


def has_gpu(node) -> bool:
    """As gpu_preflight decides (gpunode_has_gpu): an NVIDIA display controller on the PCI
    bus; an inventory that expects no GPU (gpunode_expected_gpus: 0) says so first."""
    if str(node.vars.get("gpunode_expected_gpus", "")).strip() == "0":
        return False
    script = (
        "for d in /sys/bus/pci/devices/*; do "
        'grep -qi 0x10de "$d/vendor" 2>/dev/null && grep -qi "^0x03" "$d/class" 2>/dev/null '
        "&& exit 0; done; exit 1"
    )
    return node.run(f"sh -c {shlex.quote(script)}").rc == 0


@pytest.fixture
def watch(node) -> dict:
    k = knobs(node)
    if not has_gpu(node):
        pytest.skip(f"{node.name}: no NVIDIA GPU (the watch runs on GPU nodes only)")
    if not k["enabled"]:
        pytest.skip(f"{node.name}: gpu_watch_enabled is false")
    return k


def series(text: str, name: str, node_name: str) -> float | None:
    m = re.search(rf'^{name}\{{node="{re.escape(node_name)}"\}} (\S+)$', text, re.M)
    return float(m[1]) if m else None


def textfile(node, watch) -> str:
    """The watch's textfile; written after its first cycle, so a watch started moments
    ago gets a few seconds."""
    f = node.host.file(watch["textfile"])
    for _ in range(30):
        if f.exists:
            break
        time.sleep(1)
    assert f.exists, f"{node.name}: {watch['textfile']} missing: is {UNIT} running?"
    return f.content_string


def test_no_unit_without_gpu_or_with_the_watch_off(node):
    if has_gpu(node) and knobs(node)["enabled"]:
        pytest.skip(f"{node.name}: a GPU node with the watch on")
    assert not node.host.file(UNIT_PATH).exists, f"{node.name}: {UNIT_PATH} is installed"
    assert not node.host.service(UNIT).is_running


def test_the_service_is_enabled_and_running(node, watch):
    service = node.host.service(UNIT)
    assert service.is_enabled, f"{node.name}: {UNIT} is not enabled"
    assert service.is_running, (
        f"{node.name}: {UNIT} is not running: "
        + node.run(f"journalctl -u {UNIT} -n 5 --no-pager").stdout.strip()
    )
    unit = node.host.file(UNIT_PATH).content_string
    execstart = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    argv = shlex.split(execstart.split("=", 1)[1])
    assert argv[1:] == ["watch", "run", "--interval", str(watch["interval"]),
                        "--textfile", watch["textfile"], "--state-dir", watch["state_dir"],
                        "--node", node.name]  # fmt: skip


def test_the_heartbeat_is_fresh_and_nvml_up(node, watch):
    text = textfile(node, watch)
    beat = series(text, "gpunode_watch_heartbeat_timestamp_seconds", node.name)
    assert beat is not None, f"{node.name}: no heartbeat for node {node.name} in the textfile"
    now = int(node.ok("date +%s").strip())
    assert now - beat < 3 * watch["interval"], (
        f"{node.name}: the heartbeat is {now - beat:.0f} s old "
        f"(interval {watch['interval']} s): the watch is stale"
    )
    assert series(text, "gpunode_watch_interval_seconds", node.name) == watch["interval"]
    assert series(text, "gpunode_watch_nvml_up", node.name) == 1, (
        f"{node.name}: NVML is down for the watch: "
        + node.run(f"journalctl -u {UNIT} -n 5 --no-pager").stdout.strip()
    )


def test_check_answers_one_line_and_agrees_with_validate(node, watch):
    state_dir = shlex.quote(watch["state_dir"])
    r = node.run(f"{node.gpunode()} watch check --state-dir {state_dir}")
    lines = r.stdout.splitlines()
    assert r.rc in (0, 1), f"{node.name}: `gpunode watch check` exited {r.rc}: {r.stdout!r}"
    assert len(lines) == 1 and 0 < len(lines[0]) <= 80, (node.name, r.stdout)
    # the watch runs a subset of validate's checks: a node validate passes is healthy
    v = node.run(f"{node.gpunode()} validate --json --engine none --node {shlex.quote(node.name)}")
    result = json.loads(v.stdout)
    if result["exit_code"] == 0:
        assert r.rc == 0, f"{node.name}: validate passes, the watch says: {lines[0]}"
    state = json.loads(node.host.file(f"{watch['state_dir']}/watch-state.json").content_string)
    assert (r.rc == 0) == (state["healthy"] is True)
