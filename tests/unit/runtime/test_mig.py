"""MIG requests: selection with libnvidia-container's semantics (a conformance table), the
edits a MIG device gets (parent node, GI and CI cap nodes read from the driver's access
files, their /proc access files through the hook), NVIDIA_MIG_CONFIG_DEVICES /
_MONITOR_DEVICES, the inventory cache noticing a changed layout, prepared edits, CDI."""

from __future__ import annotations

import os

import pytest

from gpunode.nvidia import mig
from gpunode.nvidia.facts import GpuFacts, NodeFacts
from gpunode.runtime import cdi, config, discovery, edits, oci, plan, prepared
from gpunode.runtime.request import parse_request
from gpunode.runtime.selection import select_devices
from gpunode.runtime.userinput import RequestError

from .mig_node import (
    CAPS_MAJOR,
    GPUS,
    NODE,
    cap_minor,
    discovery_of,
    make_dev_root,
    make_driver_root,
)

U0, U1, U2 = (g.uuid for g in GPUS)
M = {f"{g.index}:{m.index}": m.uuid for g in GPUS for m in g.mig}
NO_MIG = tuple(GpuFacts(g.index, g.minor, g.uuid, g.pci_bus_id, g.name) for g in GPUS)

# (NVIDIA_VISIBLE_DEVICES, node) -> (full GPU indices, MIG devices "<gpu>:<n>") or the error.
# As libnvidia-container's select_devices (src/cli/common.c): full-GPU forms first (index,
# GPU UUID, bus id: a MIG-enabled GPU named so is given as the full GPU), then MIG forms
# (MIG UUID in either form, <gpu index>:<n> with n a position in the GPU's MIG list);
# `all`: MIG-disabled GPUs and every MIG device (the contract, nvidia-ctk's CDI `all`).
CONFORMANCE = [
    ("0:1", GPUS, ((), ("0:1",))),  # the second MIG device of GPU 0, whose GI id is 7
    ("0:0", GPUS, ((), ("0:0",))),
    ("2:1", GPUS, ((), ("2:1",))),  # GPU 2 (minor 4), second CI of GI 2
    ("all", GPUS, ((1,), ("0:0", "0:1", "2:0", "2:1"))),  # MIG-enabled parents skipped
    ("ALL", GPUS, ((1,), ("0:0", "0:1", "2:0", "2:1"))),
    ("all,0", GPUS, ((1,), ("0:0", "0:1", "2:0", "2:1"))),  # ids after all are dropped
    (M["0:1"], GPUS, ((), ("0:1",))),
    (M["2:0"].lower(), GPUS, ((), ("2:0",))),
    (M["2:0"].upper().replace("MIG-", "mig-"), GPUS, ((), ("2:0",))),
    (f"MIG-{U0}/7/0", GPUS, ((), ("0:1",))),  # the MIG-GPU-<uuid>/<gi>/<ci> form
    (f"MIG-{U2.lower()}/2/1", GPUS, ((), ("2:1",))),
    ("0", GPUS, ((0,), ())),  # MIG-enabled GPU by index: the full GPU, as NVIDIA
    (U0, GPUS, ((0,), ())),
    ("07:00.0", GPUS, ((0,), ())),
    ("1,0:1", GPUS, ((1,), ("0:1",))),  # mixed
    ("0:1,1", GPUS, ((1,), ("0:1",))),
    (f"0:1,{M['0:1']},MIG-{U0}/7/0", GPUS, ((), ("0:1",))),  # one device, three names
    ("nvidia.com/gpu=0:1", GPUS, ((), ("0:1",))),
    (f"runtime.nvidia.com/gpu={M['2:1']}", GPUS, ((), ("2:1",))),
    (f"k8s.device-plugin.nvidia.com/gpu={M['2:1']}", GPUS, ((), ("2:1",))),  # the plugin's
    ("all", NO_MIG, ((0, 1, 2), ())),
    ("0:9", GPUS, "unknown MIG device '0:9' requested"),
    ("1:0", GPUS, "unknown MIG device '1:0' requested"),  # GPU 1 has MIG off
    ("3:0", GPUS, "unknown MIG device '3:0' requested"),
    (f"MIG-{U0}/7/1", GPUS, f"unknown MIG device 'MIG-{U0}/7/1' requested"),
    (f"MIG-{U1}/1/0", GPUS, f"unknown MIG device 'MIG-{U1}/1/0' requested"),
    ("MIG-ffffffff-0000-5000-8000-000000000000", GPUS, "unknown MIG device 'MIG-ffffffff-"),
    (M["0:1"], NO_MIG, f"unknown MIG device '{M['0:1']}' requested"),
    ("nvidia.com/gpu=0:7", GPUS, "unknown MIG device 'nvidia.com/gpu=0:7' requested"),
    ("5", GPUS, "unknown device '5' requested"),
]


def _select(value, gpus):
    return select_devices(parse_request({"NVIDIA_VISIBLE_DEVICES": value}), gpus)


@pytest.mark.parametrize(("value", "gpus", "expected"), CONFORMANCE)
def test_selection_conformance(value, gpus, expected):
    if isinstance(expected, str):
        with pytest.raises(RequestError) as err:
            _select(value, gpus)
        message = str(err.value)
        assert message.startswith(expected)
        assert "\n" not in message
        if "MIG" in expected:
            assert "accepted: <gpu index>:<n>, MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci>" in message
            assert ("this node has no MIG devices" in message) == (gpus is NO_MIG)
        return
    sel = _select(value, gpus)
    assert ([g.index for g in sel.gpus], [m.name for m in sel.migs]) == (
        list(expected[0]),
        list(expected[1]),
    )


def test_unknown_mig_lists_the_node_s_mig_devices():
    with pytest.raises(RequestError) as err:
        _select("0:9", GPUS)
    assert str(err.value) == (
        "unknown MIG device '0:9' requested; accepted: <gpu index>:<n>, MIG-<uuid>, "
        f"MIG-GPU-<uuid>/<gi>/<ci>; this node's MIG devices: 0:0 ({M['0:0']}, gi 1 ci 0), "
        f"0:1 ({M['0:1']}, gi 7 ci 0), 2:0 ({M['2:0']}, gi 2 ci 0), 2:1 ({M['2:1']}, gi 2 ci 1)"
    )


def test_parents_get_their_node_once_and_requirements_see_them():
    sel = _select("2:0,0:1,2:1,1", GPUS)
    assert [g.index for g in sel.device_gpus] == [1, 2, 0]
    # NVIDIA_REQUIRE_* is evaluated on the parents (libnvidia-container: migs[i]->parent)
    from gpunode.runtime.requirements import check_requirements

    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "2:0", "NVIDIA_REQUIRE_ARCH": "arch>=9.0"})
    check_requirements(r.requirements, NODE, select_devices(r, GPUS).device_gpus)
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "0:1", "NVIDIA_REQUIRE_ARCH": "arch>=9.0"})
    with pytest.raises(RequestError, match=r"^unsatisfied condition: arch>=9.0$"):
        check_requirements(r.requirements, NODE, select_devices(r, GPUS).device_gpus)


@pytest.mark.parametrize(
    ("kw", "value"),
    [
        (
            {
                "mounts": [
                    {"source": "/dev/null", "destination": "/var/run/nvidia-container-devices/0:1"}
                ]
            },
            "0:1",
        ),
        (
            {
                "mounts": [
                    {
                        "source": "/dev/null",
                        "destination": f"/var/run/nvidia-container-devices/{M['2:1']}",
                    }
                ]
            },
            M["2:1"],
        ),
        ({"annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=0:1"}}, "0:1"),
        ({"annotations": {"cdi.k8s.io/x": f"nvidia.com/gpu={M['2:1']}"}}, M["2:1"]),
        (
            {"annotations": {"cdi.k8s.io/x": f"k8s.device-plugin.nvidia.com/gpu={M['2:1']}"}},
            M["2:1"],
        ),
    ],
)
def test_volume_mount_and_annotation_forms(kw, value):
    cfg = config.RuntimeConfig(accept_volume_mounts=True)
    r = parse_request({}, cfg=cfg, **kw)
    sel = select_devices(r, GPUS)
    assert [m.mig.uuid for m in sel.migs] == [M["0:1"] if value == "0:1" else M["2:1"]]


# --------------------------------------------------------------------------- edits


@pytest.fixture
def mig_node(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    driver = make_driver_root(tmp_path / "driver")
    make_dev_root(tmp_path)
    return driver, str(tmp_path)


def _plan(env, mig_node, monkeypatch, privileged=False, disc=None):
    driver, dev_root = mig_node
    d = disc or discovery_of(driver)
    monkeypatch.setattr(discovery, "load", lambda *a, **k: d)
    cfg = config.RuntimeConfig(dev_root=dev_root, driver_root=str(driver))
    return plan.make(parse_request(env, privileged=privileged, cfg=cfg), cfg)


def _cap(cap):
    return f"/dev/nvidia-caps/nvidia-cap{cap_minor(cap)}"


def _argv(p):
    (hook,) = p.edits.hooks
    return list(hook.args)


def test_a_mig_device_gets_parent_node_gi_and_ci_caps(mig_node, monkeypatch):
    p = _plan({"NVIDIA_VISIBLE_DEVICES": "0:1"}, mig_node, monkeypatch)
    paths = [d.path for d in p.edits.devices]
    gi, ci = "gpu0/mig/gi7/access", "gpu0/mig/gi7/ci0/access"
    assert paths == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia0",
        _cap(gi),
        _cap(ci),
    ]
    caps = [d for d in p.edits.devices if d.path.startswith("/dev/nvidia-caps/")]
    assert [(d.major, d.minor) for d in caps] == [
        (CAPS_MAJOR, cap_minor(gi)),
        (CAPS_MAJOR, cap_minor(ci)),
    ]
    # nothing of GPU 0's other MIG device (GI 1), nor of any other GPU
    assert _cap("gpu0/mig/gi1/access") not in paths
    assert _cap("gpu0/mig/gi1/ci0/access") not in paths
    argv = _argv(p)
    assert argv[argv.index("--gpu") + 1] == "0000:07:00.0"  # the parent's /proc directory
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--mig-cap"] == [gi, ci]
    assert "--gpus-selected" in argv and "--mig-caps-all" not in argv
    assert p.edits.env == []  # NVIDIA_VISIBLE_DEVICES stays as the image set it, as NVIDIA's
    # cgroup rules: one per device node
    spec = {}
    oci.apply(spec, p.edits)
    rules = [(r["major"], r["minor"]) for r in spec["linux"]["resources"]["devices"]]
    assert (CAPS_MAJOR, cap_minor(gi)) in rules and (CAPS_MAJOR, cap_minor(ci)) in rules
    assert (195, 0) in rules and (195, 1) not in rules


def test_two_devices_of_one_parent_and_one_gi(mig_node, monkeypatch):
    p = _plan({"NVIDIA_VISIBLE_DEVICES": "2:0,2:1,0:0,0:1"}, mig_node, monkeypatch)
    paths = [d.path for d in p.edits.devices]
    assert paths.count("/dev/nvidia4") == 1 and paths.count("/dev/nvidia0") == 1
    assert paths.count(_cap("gpu4/mig/gi2/access")) == 1  # shared by the two CIs of GI 2
    assert {_cap("gpu4/mig/gi2/ci0/access"), _cap("gpu4/mig/gi2/ci1/access")} <= set(paths)
    argv = _argv(p)
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--gpu"] == [
        "0000:41:00.0",
        "0000:07:00.0",
    ]
    assert [m.name for m in p.migs] == ["2:0", "2:1", "0:0", "0:1"]


def test_all_gives_every_mig_device_and_the_mig_off_gpus(mig_node, monkeypatch):
    p = _plan({"NVIDIA_VISIBLE_DEVICES": "all"}, mig_node, monkeypatch)
    assert [g.index for g in p.selected] == [1, 0, 2]
    paths = {d.path for d in p.edits.devices}
    for g in GPUS:
        for m in g.mig:
            assert _cap(f"gpu{g.minor}/mig/gi{m.gi}/ci{m.ci}/access") in paths


def test_mig_enabled_gpu_by_index_is_the_full_gpu_without_caps(mig_node, monkeypatch):
    p = _plan({"NVIDIA_VISIBLE_DEVICES": "0"}, mig_node, monkeypatch)
    assert [d.path for d in p.edits.devices][-1] == "/dev/nvidia0"
    assert not [d for d in p.edits.devices if "nvidia-caps" in d.path]
    assert "--mig-cap" not in _argv(p)


def test_missing_access_file_or_cap_node_is_one_line(mig_node, monkeypatch):
    driver, dev_root = mig_node
    gi = driver / "proc/driver/nvidia/capabilities/gpu0/mig/gi7/access"
    os.unlink(f"{dev_root}{_cap('gpu0/mig/gi7/ci0/access')}")
    with pytest.raises(edits.EditError) as err:
        _plan({"NVIDIA_VISIBLE_DEVICES": "0:1"}, mig_node, monkeypatch)
    assert str(err.value) == (
        f"MIG device 0:1 ({M['0:1']}): no capability device node "
        f"{_cap('gpu0/mig/gi7/ci0/access')} on this node"
    )
    gi.write_text("DeviceFileMode: 292\n")
    with pytest.raises(edits.EditError) as err:
        _plan({"NVIDIA_VISIBLE_DEVICES": "0:1"}, mig_node, monkeypatch)
    assert (
        str(err.value) == f"MIG device 0:1 ({M['0:1']}): {gi}: no 'DeviceFileMinor: <number>' line"
    )
    gi.unlink()
    with pytest.raises(edits.EditError) as err:
        _plan({"NVIDIA_VISIBLE_DEVICES": "0:1"}, mig_node, monkeypatch)
    assert str(err.value).startswith(f"MIG device 0:1 ({M['0:1']}): {gi}: cannot be read (")


# --------------------------------------------------------------------------- config/monitor


@pytest.mark.parametrize("which", ["config", "monitor"])
def test_mig_config_and_monitor_with_all(mig_node, monkeypatch, which):
    var = f"NVIDIA_MIG_{which.upper()}_DEVICES"
    p = _plan({"NVIDIA_VISIBLE_DEVICES": "all", var: "all"}, mig_node, monkeypatch, privileged=True)
    paths = [d.path for d in p.edits.devices]
    assert f"/dev/nvidia-caps/nvidia-cap{cap_minor(which)}" in paths
    other = "monitor" if which == "config" else "config"
    assert f"/dev/nvidia-caps/nvidia-cap{cap_minor(other)}" not in paths
    # every mig-minor of the MIG-enabled GPUs (minors 0 and 4), none of GPU 1 (MIG off)
    minors = mig.parse_mig_minors((mig_node[0] / "proc/driver/nvidia-caps/mig-minors").read_text())
    want = sorted({(CAPS_MAJOR, n) for c, n in minors.items() if c.startswith(("gpu0/", "gpu4/"))})
    assert p.edits.allow == want
    assert not [n for c, n in minors.items() if c.startswith("gpu1/") and (CAPS_MAJOR, n) in want]
    argv = _argv(p)
    assert "--mig-caps-all" in argv and "--mig-cap" not in argv
    spec = {}
    oci.apply(spec, p.edits)
    rules = {(r["major"], r["minor"]) for r in spec["linux"]["resources"]["devices"]}
    assert set(want) <= rules


def test_mig_config_refused_with_specific_mig_devices(mig_node, monkeypatch):
    env = {"NVIDIA_VISIBLE_DEVICES": "0:1,1", "NVIDIA_MIG_CONFIG_DEVICES": "all"}
    with pytest.raises(RequestError) as err:
        _plan(env, mig_node, monkeypatch, privileged=True)
    assert str(err.value) == (
        "NVIDIA_MIG_CONFIG_DEVICES=all: cannot enable mig-config with specific MIG devices "
        "selected (0:1); accepted with NVIDIA_VISIBLE_DEVICES=all or full GPUs"
    )
    # full GPUs: allowed; only MIG-enabled ones get the capabilities (none here: nothing)
    env = {"NVIDIA_VISIBLE_DEVICES": "1", "NVIDIA_MIG_MONITOR_DEVICES": "all"}
    p = _plan(env, mig_node, monkeypatch, privileged=True)
    assert p.edits.allow == [] and "--mig-caps-all" not in _argv(p)
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_MIG_MONITOR_DEVICES": "all"}
    p = _plan(env, mig_node, monkeypatch, privileged=True)
    assert p.edits.allow and "--mig-caps-all" in _argv(p)


# --------------------------------------------------------------------------- staleness


def test_a_changed_layout_is_rediscovered(mig_node, monkeypatch):
    driver, dev_root = mig_node
    cached = discovery_of(driver, from_cache=True)
    # the driver now shows a third MIG device on GPU 0 (GI 8); NVML would list it as 0:2
    new = GpuFacts(**{**{k: getattr(GPUS[0], k) for k in (
        "index", "minor", "uuid", "pci_bus_id", "name", "brand", "compute_capability",
        "mig_enabled")}, "mig": (*GPUS[0].mig, GPUS[0].mig[0].__class__(
            2, "MIG-a2000000-0000-5000-8000-000000000000", 8, 0))})  # fmt: skip
    fresh = discovery_of(driver, NodeFacts(NODE.driver_version, "12.2", (new, *GPUS[1:])))
    caps = driver / "proc/driver/nvidia/capabilities/gpu0/mig/gi8"
    (caps / "ci0").mkdir(parents=True)
    (caps / "access").write_text("DeviceFileMinor: 900\n")
    (caps / "ci0/access").write_text("DeviceFileMinor: 901\n")
    for m in (900, 901):
        os.mknod(f"{dev_root}/dev/nvidia-caps/nvidia-cap{m}", 0o20444, os.makedev(CAPS_MAJOR, m))
    calls = []

    def load(*a, refresh=False, **k):
        calls.append(refresh)
        return fresh if refresh else cached

    monkeypatch.setattr(discovery, "load", load)
    cfg = config.RuntimeConfig(dev_root=dev_root, driver_root=str(driver))
    p = plan.make(parse_request({"NVIDIA_VISIBLE_DEVICES": "0:2"}, cfg=cfg), cfg)
    assert calls == [False, True]
    assert [m.mig.gi for m in p.migs] == [8]
    assert p.mig_watch[0] == (0, ((1, 0), (7, 0), (8, 0)))
    # unchanged layout: the cache is used as it is
    calls.clear()
    monkeypatch.setattr(
        discovery, "load", lambda *a, refresh=False, **k: calls.append(refresh) or fresh
    )
    plan.make(parse_request({"NVIDIA_VISIBLE_DEVICES": "0:2"}, cfg=cfg), cfg)
    assert calls == [False]


def test_no_mig_request_reads_no_mig_files(mig_node, monkeypatch):
    def boom(*a):
        raise AssertionError("mig.instances must not run")

    monkeypatch.setattr(mig, "instances", boom)
    driver, _ = mig_node
    # a full GPU on a MIG node, and `all` on a node whose GPUs all have MIG off
    _plan(
        {"NVIDIA_VISIBLE_DEVICES": "1"},
        mig_node,
        monkeypatch,
        disc=discovery_of(driver, from_cache=True),
    )
    no_mig = discovery_of(driver, NodeFacts(NODE.driver_version, "12.2", NO_MIG[1:2]), True)
    _plan({"NVIDIA_VISIBLE_DEVICES": "all"}, mig_node, monkeypatch, disc=no_mig)


def test_plan_mig_watch():
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "MIG-x"})
    assert plan.mig_watched(r, NODE) == frozenset({0, 1, 4})
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "all"})
    assert plan.mig_watched(r, NODE) == frozenset({0, 4})
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "0,1"})
    assert plan.mig_watched(r, NODE) == frozenset()


def test_prepared_entries_of_mig_requests_follow_the_layout(mig_node):
    driver, dev_root = mig_node
    watch = ((0, ((1, 0), (7, 0))), (4, ((2, 0), (2, 1))))
    e = prepared.entry({"devices": [], "mounts": [], "env": []}, [], "s", watch)
    prepared.store("k", e)
    assert prepared.lookup("k", dev_root, str(driver)) == e
    (driver / "proc/driver/nvidia/capabilities/gpu0/mig/gi7/ci0").rename(
        driver / "proc/driver/nvidia/capabilities/gpu0/mig/gi7/ci1"
    )
    assert prepared.lookup("k", dev_root, str(driver)) is None
    # an entry without MIG is not checked against any layout
    prepared.store("n", prepared.entry({"devices": [], "mounts": [], "env": []}, [], "s"))
    assert "mig" not in prepared.lookup("n", dev_root, str(driver))


# --------------------------------------------------------------------------- CDI


def test_cdi_names_mig_devices_by_index_and_uuid(mig_node):
    driver, dev_root = mig_node
    spec = cdi.generate(discovery_of(driver), hook_path="/usr/bin/gpunode-hook", dev_root=dev_root)
    by_name = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert list(by_name) == [
        "0:0", M["0:0"], "0:1", M["0:1"], "1", U1, "2:0", M["2:0"], "2:1", M["2:1"], "all",
    ]  # fmt: skip
    assert "0" not in by_name and U0 not in by_name  # MIG-enabled parents are not full GPUs

    def paths(edits):
        return [n["path"] for n in edits["deviceNodes"]]

    assert paths(by_name["0:1"]) == [
        "/dev/nvidia0",
        _cap("gpu0/mig/gi7/access"),
        _cap("gpu0/mig/gi7/ci0/access"),
    ]
    assert paths(by_name[M["2:1"]]) == [
        "/dev/nvidia4",
        _cap("gpu4/mig/gi2/access"),
        _cap("gpu4/mig/gi2/ci1/access"),
    ]
    all_paths = paths(by_name["all"])
    assert len(all_paths) == len(set(all_paths))
    assert set(all_paths) == {p for n, e in by_name.items() if n != "all" for p in paths(e)}
    assert spec["cdiVersion"] == "0.5.0"
    # the common hook works the MIG access files out from the cap nodes (no --mig-cap)
    (hook,) = spec["containerEdits"]["hooks"]
    assert "--mig-cap" not in hook["args"] and "--gpus-selected" not in hook["args"]
