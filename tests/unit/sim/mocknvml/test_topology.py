"""The mock NVML's PCI topology and NVLink answers (mocknvml/topology.c) and the profile
layouts they come from, asked the way NVIDIA's tools ask them (issue 25 §5): raw ctypes calls
to the exported symbols go-nvml binds, in the order NVIDIA's device plugin makes them for
GetPreferredAllocation (go-gpuallocator's NewDevices: go-nvlib's GetDevices, then per ordered
pair of GPUs links.GetP2PLink and links.GetNVLink)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from gpunode.sim.profiles import ProfileError, load_profile, mock_payload, parse_profile

from ..test_mocknvml import (  # noqa: F401  (built_lib, pynvml_ready: fixtures)
    built_lib,
    needs_unshare,
    probe_json,
    pynvml_ready,
)

# go-gpuallocator's internal/links: NewDevices, GetP2PLink, GetNVLink, getAllNvLinkRemotePciInfo
# and PciInfo.BusID, transcribed call for call onto ctypes.
ALLOCATOR = textwrap.dedent(
    r"""
    import ctypes, json, sys
    from ctypes import byref, c_char, c_int, c_uint, c_void_p

    SUCCESS, INVALID_ARGUMENT, NOT_SUPPORTED = 0, 2, 3
    NVLINK_MAX_LINKS, FEATURE_ENABLED = 36, 1
    LINKS = {0: "P2PLinkSameBoard", 10: "P2PLinkSingleSwitch", 20: "P2PLinkMultiSwitch",
             30: "P2PLinkHostBridge", 40: "P2PLinkSameCPU", 50: "P2PLinkCrossCPU"}

    class PciInfo(ctypes.Structure):
        _fields_ = [("busIdLegacy", c_char * 16), ("domain", c_uint), ("bus", c_uint),
                    ("device", c_uint), ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint),
                    ("busId", c_char * 32)]

    def bus_id(pci):  # links.PciInfo.BusID
        text = pci.busId.decode().lower()
        return text[4:] if text != "0000" and text.startswith("0000") else text

    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == SUCCESS
    count = c_uint()
    assert nvml.nvmlDeviceGetCount_v2(byref(count)) == SUCCESS
    devices, buses = [], []
    for i in range(count.value):  # go-nvlib VisitDevices, go-gpuallocator newDevice
        h = c_void_p()
        assert nvml.nvmlDeviceGetHandleByIndex_v2(i, byref(h)) == SUCCESS
        name = ctypes.create_string_buffer(96)
        assert nvml.nvmlDeviceGetName(h, name, 96) == SUCCESS
        uuid = ctypes.create_string_buffer(96)
        assert nvml.nvmlDeviceGetUUID(h, uuid, 96) == SUCCESS
        pci = PciInfo()
        assert nvml.nvmlDeviceGetPciInfo_v3(h, byref(pci)) == SUCCESS
        devices.append(h)
        buses.append(bus_id(pci))

    def remote_buses(h):  # getAllNvLinkRemotePciInfo
        out = []
        for link in range(NVLINK_MAX_LINKS):
            state = c_int()
            rc = nvml.nvmlDeviceGetNvLinkState(h, link, byref(state))
            if rc in (NOT_SUPPORTED, INVALID_ARGUMENT):
                continue
            if rc != SUCCESS:
                raise SystemExit(f"failed to get nvlink state: {rc}")
            if state.value != FEATURE_ENABLED:
                continue
            pci = PciInfo()
            rc = nvml.nvmlDeviceGetNvLinkRemotePciInfo_v2(h, link, byref(pci))
            if rc in (NOT_SUPPORTED, INVALID_ARGUMENT):
                continue
            if rc != SUCCESS:
                raise SystemExit(f"failed to get remote pci info: {rc}")
            out.append(bus_id(pci))
        return out

    links = {}
    for i, d1 in enumerate(devices):
        for j, d2 in enumerate(devices):
            if i == j:
                continue
            level = c_int()
            rc = nvml.nvmlDeviceGetTopologyCommonAncestor(d1, d2, byref(level))
            if rc != SUCCESS:
                raise SystemExit(f"error getting P2PLink for devices ({i}, {j}): {rc}")
            pci = PciInfo()
            assert nvml.nvmlDeviceGetPciInfo_v3(d2, byref(pci)) == SUCCESS
            nvlinks = remote_buses(d1).count(bus_id(pci))
            links[f"{i},{j}"] = [LINKS[level.value], nvlinks]
    remote = [remote_buses(h) for h in devices]
    nvml.nvmlShutdown()
    print(json.dumps({"buses": buses, "links": links, "remote": remote}))
    """
)


def allocator(lib: Path, tmp_path: Path, payload: str, minors) -> dict:
    return probe_json(lib, tmp_path, payload, ALLOCATOR, minors)


def pairs(table: dict[tuple[int, int], list]) -> dict[str, list]:
    """Both directions of each pair, as the allocator's keys."""
    out = {}
    for (i, j), value in table.items():
        out[f"{i},{j}"] = out[f"{j},{i}"] = value
    return out


CROSS, SAME_CPU, MULTI, SINGLE = (
    "P2PLinkCrossCPU",
    "P2PLinkSameCPU",
    "P2PLinkMultiSwitch",
    "P2PLinkSingleSwitch",
)


@needs_unshare
def test_the_device_plugins_allocator_reads_each_built_in_layout(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    """What failed on a simulated node (issue 25 §5: "failed to get common ancestor: Not
    Supported") now answers from each profile's PCI tree and NVLinks."""
    got = {
        name: allocator(built_lib, tmp_path / name, mock_payload(load_profile(name)), range(8))
        for name in ("a100x4", "a100x2-mig", "h100x8", "t4x2-faulty")
    }
    # HGX A100 4-GPU: two pairs under two-level switch trees on two NUMA nodes; no NVSwitch,
    # four direct NVLinks between every pair of GPUs, which the allocator counts
    assert got["a100x4"]["links"] == pairs(
        {(0, 1): [MULTI, 4], (2, 3): [MULTI, 4], (0, 2): [CROSS, 4], (0, 3): [CROSS, 4],
         (1, 2): [CROSS, 4], (1, 3): [CROSS, 4]}
    )  # fmt: skip
    buses = got["a100x4"]["buses"]
    assert got["a100x4"]["remote"] == [
        [bus for bus in buses if bus != own for _ in range(4)] for own in buses
    ]
    # two A100s under one switch, joined by all twelve NVLinks
    assert got["a100x2-mig"]["links"] == pairs({(0, 1): [SINGLE, 12]})
    assert got["a100x2-mig"]["remote"] == [["0000:0f:00.0"] * 12, ["0000:07:00.0"] * 12]
    # DGX H100: a host bridge per GPU, four GPUs per NUMA node; 18 links to four NVSwitches
    h100 = got["h100x8"]["links"]
    assert h100 == pairs(
        {(i, j): [SAME_CPU if (i < 4) == (j < 4) else CROSS, 0]
         for i in range(8) for j in range(i + 1, 8)}
    )  # fmt: skip
    assert got["h100x8"]["remote"][0] == (
        ["0000:e3:00.0"] * 5 + ["0000:e4:00.0"] * 4 + ["0000:e5:00.0"] * 4 + ["0000:e6:00.0"] * 5
    )
    # one T4 per CPU socket, no NVLink
    assert got["t4x2-faulty"] == {
        "buses": ["0000:3b:00.0", "0000:d8:00.0"],
        "links": pairs({(0, 1): [CROSS, 0]}),
        "remote": [[], []],
    }


@needs_unshare
def test_a_down_link_is_skipped_and_far_ends_are_cabling(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    # h100x8-degraded's GPU 4 has NVLink 0 down: the allocator skips it
    got = allocator(built_lib, tmp_path / "h", mock_payload(load_profile("h100x8-degraded")), [4])
    assert got["remote"] == [["0000:e3:00.0"] * 4 + ["0000:e4:00.0"] * 4 + ["0000:e5:00.0"] * 4
                             + ["0000:e6:00.0"] * 5]  # fmt: skip
    # a container given a100x2-mig's GPU 0 only: its links still end at GPU 1, as cabled
    got = allocator(built_lib, tmp_path / "a", mock_payload(load_profile("a100x2-mig")), [0])
    assert got["buses"] == ["0000:07:00.0"] and got["remote"] == [["0000:0f:00.0"] * 12]
    # and a100x4's GPUs 0 and 2 alone are each other's index 0 and 1: across the CPUs, and
    # their links still end at all three other GPUs
    got = allocator(built_lib, tmp_path / "x", mock_payload(load_profile("a100x4")), [0, 2])
    assert got["buses"] == ["0000:07:00.0", "0000:47:00.0"]
    assert got["links"] == pairs({(0, 1): [CROSS, 4]})
    assert got["remote"][0] == (["0000:0f:00.0"] * 4 + ["0000:47:00.0"] * 4 + ["0000:4e:00.0"] * 4)


def layout_profile(gpus: list[dict]) -> dict:
    src = Path(__file__).resolve().parents[4] / "src/gpunode/data/profiles/a100x4.yaml"
    data = yaml.safe_load(src.read_text())
    data["gpus"] = [
        {"uuid": f"GPU-00000000-0000-4000-8000-00000000000{i}", "bus_id": f"0000:{i + 1:02x}:00.0"}
        | gpu
        for i, gpu in enumerate(gpus)
    ]
    return data


@needs_unshare
def test_every_topology_level_from_the_pci_tree(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    tree = layout_profile(
        [
            {"pci_switches": ["top", "a"]},  # 0
            {"pci_switches": ["top", "a"]},  # 1: the same leaf switch as 0
            {"pci_switches": ["top", "b"]},  # 2: another leaf under the same top switch
            {"pci_switches": ["top"]},  # 3: on the top switch itself
            {},  # 4: on a root port of the same host bridge
            {"pci_host_bridge": 1},  # 5: another host bridge of NUMA node 0
            {"numa_node": 1, "pci_host_bridge": 2, "pci_switches": ["other"]},  # 6
        ]
    )
    got = allocator(built_lib, tmp_path, mock_payload(parse_profile(tree)), range(7))
    host, node = "P2PLinkHostBridge", SAME_CPU
    assert got["links"] == pairs(
        {(0, 1): [SINGLE, 0], (0, 2): [MULTI, 0], (1, 2): [MULTI, 0], (0, 3): [MULTI, 0],
         (2, 3): [MULTI, 0], (1, 3): [MULTI, 0]}
        | {(i, 4): [host, 0] for i in range(4)}
        | {(i, 5): [node, 0] for i in range(5)}
        | {(i, 6): [CROSS, 0] for i in range(6)}
    )  # fmt: skip


PEER_PROBE = textwrap.dedent(
    r"""
    import json
    import pynvml as N

    def txt(v):
        return v.decode() if isinstance(v, bytes) else v

    def call(fn, *a):
        try:
            v = fn(*a)
        except N.NVMLError as e:
            return "error:" + type(e).__name__
        return v

    N.nvmlInit()
    hs = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
    out = {
        "p2p": [[[call(N.nvmlDeviceGetP2PStatus, a, b, k) for k in range(5)] for b in hs]
                for a in hs],
        "p2p_bad_index": call(N.nvmlDeviceGetP2PStatus, hs[0], hs[-1], 5),
        "self": call(N.nvmlDeviceGetTopologyCommonAncestor, hs[0], hs[0]),
        "caps": [call(N.nvmlDeviceGetNvLinkCapability, hs[0], 0, c) for c in range(7)],
        "caps_link": call(N.nvmlDeviceGetNvLinkCapability, hs[0], 36, 0),
        "type": [call(N.nvmlDeviceGetNvLinkRemoteDeviceType, hs[0], l) for l in (0, 17)],
    }
    pci = call(N.nvmlDeviceGetNvLinkRemotePciInfo, hs[0], 0)
    out["remote"] = pci if isinstance(pci, str) else [
        txt(pci.busId), txt(pci.busIdLegacy), pci.domain, pci.bus, pci.device,
        pci.pciDeviceId, pci.pciSubSystemId]
    N.nvmlShutdown()
    print(json.dumps(out))
    """
)


def peers(lib: Path, tmp_path: Path, name: str, minors) -> dict:
    return probe_json(lib, tmp_path, mock_payload(load_profile(name)), PEER_PROBE, minors)


@needs_unshare
def test_p2p_status_link_capabilities_and_far_end_types(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    ok, cns, ns = 0, 1, 5  # NVML_P2P_STATUS_OK, _CHIPSET_NOT_SUPPORTED, _NOT_SUPPORTED
    invalid, unsupported = "error:NVMLError_InvalidArgument", "error:NVMLError_NotSupported"
    h100 = peers(built_lib, tmp_path / "h", "h100x8", [0, 4])
    # both on the NVSwitches: every capability, also across the CPUs
    assert h100["p2p"] == [[[ok] * 5] * 2] * 2
    assert h100["p2p_bad_index"] == invalid and h100["self"] == 0  # NVML_TOPOLOGY_INTERNAL
    assert h100["caps"] == [1, 0, 1, 0, 0, 1, invalid] and h100["caps_link"] == invalid
    assert h100["type"] == [2, 2]  # NVML_NVLINK_DEVICE_TYPE_SWITCH
    assert h100["remote"] == ["00000000:E3:00.0", "0000:E3:00.0", 0, 0xE3, 0, 0x22A310DE, 0]
    a100 = peers(built_lib, tmp_path / "a", "a100x2-mig", [0, 1])
    assert a100["type"] == [0, unsupported]  # a GPU; link 17: one the A100 lacks
    assert a100["remote"] == ["00000000:0F:00.0", "0000:0F:00.0", 0, 0x0F, 0, 0x20B210DE, 0]
    # PCIe only, one T4 per socket: reads and writes need the chipset, no NVLink, no atomics
    t4 = peers(built_lib, tmp_path / "t", "t4x2-faulty", [0, 1])
    assert t4["p2p"] == [[[ok] * 5, [cns, cns, ns, ns, cns]], [[cns, cns, ns, ns, cns], [ok] * 5]]
    assert t4["caps"][0] == unsupported and t4["type"] == [unsupported] * 2
    assert t4["remote"] == unsupported
    # HGX A100 4-GPU: GPUs 0 and 2 (across the CPUs) are linked directly, no NVSwitch
    a4 = peers(built_lib, tmp_path / "x", "a100x4", [0, 2])
    assert a4["p2p"] == [[[ok] * 5] * 2] * 2
    assert a4["type"] == [0, unsupported]  # a GPU; link 17: one the A100 lacks
    assert a4["remote"] == ["00000000:0F:00.0", "0000:0F:00.0", 0, 0x0F, 0, 0x20B210DE, 0]


def test_bad_layouts_are_one_line():
    def error(gpus: list[dict], **defaults) -> str:
        data = layout_profile(gpus)
        data["defaults"] |= defaults
        with pytest.raises(ProfileError) as info:
            parse_profile(data, "p.yaml")
        assert "\n" not in str(info.value)
        return str(info.value)

    assert error([{"numa_node": 0}, {"numa_node": 1}]) == (
        "p.yaml: gpus[1].pci_host_bridge 0 is in NUMA node 0 (gpus[0]), not 1; "
        "a host bridge is in one NUMA node"
    )
    assert error([{"pci_switches": ["a", "b"]}, {"pci_switches": ["b"]}]) == (
        "p.yaml: gpus[1].pci_switches: switch 'b' is under host bridge 0 > a in gpus[0] but "
        "under host bridge 0 here; a switch has one place in the tree"
    )
    assert error([{"pci_switches": "a"}]) == (
        "p.yaml: gpus[0].pci_switches: 'a' is not valid; expected a list of PCIe switch names"
    )
    assert error([{"pci_switches": ["a/b"]}]).startswith(
        "p.yaml: gpus[0].pci_switches: 'a/b' is not valid; expected a switch name"
    )
    assert error([{"nvlink_peers": ["0000:02:00.0"]}]) == (
        "p.yaml: gpus[0].nvlink_peers: 1 far ends for 12 NVLinks; give one per link (or none)"
    )
    assert error([{"nvlink_peers": ["0000:02:00.0"] * 12}, {"nvlink_peers": ["0000:01:00.0"] * 11
                                                           + ["0000:c4:00.0"]}]) == (
        "p.yaml: gpus[0] has 12 NVLink(s) to 0000:02:00.0 (gpus[1]) but gpus[1] has 11 back; "
        "a link has two ends"
    )  # fmt: skip
    assert error([{"nvlink_peers": ["0000:01:00.0"] * 12}]) == (
        "p.yaml: gpus[0].nvlink_peers: 0000:01:00.0 is this GPU itself"
    )
    assert error([{"nvlink_peers": ["zz"] * 12}]) == (
        "p.yaml: gpus[0].nvlink_peers: 'zz' is not valid; expected a PCI address like 0000:0f:00.0"
    )
    assert error([{"nvlink_peers": ["0000:c4:00.0"] * 6}], compute_capability="7.0", nvlinks=6) == (
        "p.yaml: gpus[0].nvlink_peers: 0000:c4:00.0 is no GPU of the profile, so an NVSwitch; "
        "NVSwitch boards are known for compute capability 8.0, 9.0, not 7.0"
    )
