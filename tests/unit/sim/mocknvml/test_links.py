"""The mock NVML's PCIe link, clock event reasons, NVLink, fabric and InfoROM answers
(gpunode.nvidia.health's checks), read through an unmodified pynvml from the built library
with a built-in profile's payload, each value with and without its fault."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import yaml

from gpunode.sim.fabric import COMPLETED, STATE_FORMAT, STATE_NAME
from gpunode.sim.migstate import SIM_DIR
from gpunode.sim.profiles import (
    PCIE_REPLAYS,
    ProfileError,
    load_profile,
    mock_payload,
    parse_profile,
)

from ..test_mocknvml import (  # noqa: F401  (built_lib, pynvml_ready: fixtures)
    built_lib,
    needs_unshare,
    probe_json,
    pynvml_ready,
)

PROBE = textwrap.dedent(
    r"""
    import json
    import pynvml as N

    def call(fn, *a):
        try:
            return fn(*a)
        except N.NVMLError as e:
            return "error:" + type(e).__name__

    def fabric(h, version):
        info = N.c_nvmlGpuFabricInfo_v3_t() if version == 3 else N.c_nvmlGpuFabricInfo_v2_t()
        if version == 0:
            info.version = 0x01000024
        got = call(N.nvmlDeviceGetGpuFabricInfoV, h, N.byref(info))
        return got if isinstance(got, str) else [info.state, info.status, info.cliqueId,
                                                 getattr(info, "healthSummary", None)]

    def fabric_v1(h):
        info = N.c_nvmlGpuFabricInfo_t()
        got = call(N.nvmlDeviceGetGpuFabricInfo, h, N.byref(info))
        return got if isinstance(got, str) else [info.state, info.status]

    N.nvmlInit()
    out = []
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        out.append({
            "pcie": [call(f, h) for f in (
                N.nvmlDeviceGetCurrPcieLinkGeneration, N.nvmlDeviceGetMaxPcieLinkGeneration,
                N.nvmlDeviceGetGpuMaxPcieLinkGeneration, N.nvmlDeviceGetCurrPcieLinkWidth,
                N.nvmlDeviceGetMaxPcieLinkWidth)],
            "replays": call(N.nvmlDeviceGetPcieReplayCounter, h),
            "events": call(N.nvmlDeviceGetCurrentClocksEventReasons, h),
            "throttle": call(N.nvmlDeviceGetCurrentClocksThrottleReasons, h),
            "links": [call(N.nvmlDeviceGetNvLinkState, h, l) for l in range(N.NVML_NVLINK_MAX_LINKS)],
            "fabric": [fabric(h, 2), fabric(h, 3), fabric(h, 0), fabric_v1(h)],
            "inforom": call(N.nvmlDeviceValidateInforom, h),
        })
    N.nvmlShutdown()
    print(json.dumps(out))
    """
)


def fabric_state(state: int | None) -> list[str]:
    """in_private_dev's extra steps for a node whose fabric is in ``state`` (None: no
    state file, as after a driver load): the driver's tmpfs over /proc/driver holding the
    state file as the fabric manager stand-in writes it (gpunode.sim.fabric)."""
    steps = ["mount -t tmpfs none /proc/driver"]
    if state is not None:
        folder = f"/proc/driver/{SIM_DIR}"
        text = STATE_FORMAT.replace("%u", str(state)).replace("\n", "\\n")
        steps += [f"mkdir {folder}", f"printf '{text}' > {folder}/{STATE_NAME}"]
    return steps


def probe(
    lib: Path, tmp_path: Path, payload: str, gpus: int, state: int | None = COMPLETED
) -> list[dict]:
    """What pynvml reads from the mock with ``payload`` on a node whose fabric is in
    ``state`` (default: trained by the fabric manager)."""
    return probe_json(lib, tmp_path, payload, PROBE, range(gpus), extra=fabric_state(state))


# the links an H100 lacks of the 36 NVML knows: Not Supported, as NVML answers (nvidia-smi
# topo -m and nvlink walk them all and stop at an invalid argument)
UP18 = [1] * 18 + ["error:NVMLError_NotSupported"] * 18
HEALTHY_H100 = {
    "pcie": [5, 5, 5, 16, 16], "replays": 0, "events": 0x1, "throttle": 0x1, "links": UP18,
    "fabric": [[3, 0, 1, None], [3, 0, 1, 1], "error:NVMLError_ArgumentVersionMismatch", [3, 0]],
    "inforom": None,
}  # fmt: skip


@needs_unshare
def test_each_fault_changes_exactly_its_value(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    """h100x8-degraded: GPU i carries one fault (GPU 7 none); every other value is healthy."""
    got = probe(built_lib, tmp_path, mock_payload(load_profile("h100x8-degraded")), 8)
    link0_down = [0, *UP18[1:]]
    fabric_failed = [[3, 999, 1, None], [3, 999, 1, 1], HEALTHY_H100["fabric"][2], [3, 999]]
    faulty = [
        {"pcie": [5, 5, 5, 8, 16]},  # pcie_link_degraded: x8 of x16
        {"replays": PCIE_REPLAYS},  # pcie_replays
        {"events": 0x8, "throttle": 0x8},  # clocks_hw_slowdown
        {"events": 0x20, "throttle": 0x20},  # clocks_sw_thermal
        {"links": link0_down},  # nvlink_down
        {"inforom": "error:NVMLError_CorruptedInforom"},  # inforom_corrupt
        {"fabric": fabric_failed},  # fabric_manager_failed
        {},
    ]
    assert got == [HEALTHY_H100 | fault for fault in faulty]


@needs_unshare
def test_gpus_without_nvlink_or_fabric(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    a100, t4 = (
        probe(built_lib, tmp_path / n, mock_payload(load_profile(n)), 4)
        for n in ("a100x4", "t4x2-faulty")
    )
    not_supported = "error:NVMLError_NotSupported"
    assert a100[0]["pcie"] == [4, 4, 4, 16, 16] and a100[0]["links"][:13] == [1] * 12 + [
        not_supported
    ]
    assert a100[0]["fabric"] == [not_supported, not_supported,
                                 "error:NVMLError_ArgumentVersionMismatch", not_supported]  # fmt: skip
    assert [g["pcie"] for g in t4] == [[3, 3, 3, 16, 16]] * 2
    assert {json.dumps(g["links"]) for g in t4} == {json.dumps([not_supported] * 36)}
    assert all(g["inforom"] is None and g["events"] == 0x1 for g in t4 + a100)


def h100(**gpu) -> dict:
    src = Path(__file__).resolve().parents[4] / "src/gpunode/data/profiles/h100x8.yaml"
    data = yaml.safe_load(src.read_text())
    data["gpus"] = [data["gpus"][0] | gpu]
    return data


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        ({"pcie_width": 12}, "gpus[0].pcie_width: 12 is not valid; expected one of 1, 2, 4, 8, 16, 32"),
        ({"pcie_gen": 7}, "gpus[0].pcie_gen: 7 is not valid; expected an integer 1..6"),
        ({"nvlinks": 37}, "gpus[0].nvlinks: 37 is not valid; expected an integer 0..36"),
        ({"nvlinks": 0, "faults": ["nvlink_down"]},
         "gpus[0].faults: nvlink_down needs a GPU with NVLinks (nvlinks is 0)"),
        ({"pcie_width": 1, "faults": ["pcie_link_degraded"]},
         "gpus[0].faults: pcie_link_degraded needs a link wider than x1"),
        ({"nvlinks": 0, "faults": ["fabric_manager_failed"]},
         "gpus[0].faults: fabric_manager_failed needs an NVSwitch GPU (compute capability 9.0 "
         "or later with NVLinks); this one has 9.0 and 0 NVLinks"),
    ],
)  # fmt: skip
def test_bad_link_values_are_one_line(gpu, message):
    with pytest.raises(ProfileError) as info:
        parse_profile(h100(**gpu), "p.yaml")
    assert str(info.value) == f"p.yaml: {message}"


def test_link_defaults_and_overrides():
    t4 = load_profile("t4x2-faulty").gpus[0]
    assert (t4.pcie_gen, t4.pcie_width, t4.nvlinks, t4.fabric) == (3, 16, 0, False)
    g = parse_profile(h100(pcie_gen=4, pcie_width=8, nvlinks=0, nvlink_peers=[])).gpus[0]
    assert (g.pcie_gen, g.pcie_width, g.nvlinks, g.fabric) == (4, 8, 0, False)


# NVIDIA's values, as go-nvml's pkg/nvml/nvml.h carries the header (github.com/NVIDIA/go-nvml,
# and /work/shared/reference/hgx.md §1): nvmlGpuFabricState_t and the nvmlReturn_t values the
# fabric answers use. The mock must answer exactly these numbers.
GO_NVML = {
    "NVML_GPU_FABRIC_STATE_NOT_SUPPORTED": 0,
    "NVML_GPU_FABRIC_STATE_NOT_STARTED": 1,
    "NVML_GPU_FABRIC_STATE_IN_PROGRESS": 2,
    "NVML_GPU_FABRIC_STATE_COMPLETED": 3,
    "NVML_SUCCESS": 0,
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_UNKNOWN": 999,
}


def test_fabric_constants_are_nvidias(pynvml_ready):  # noqa: F811
    """gpunode.sim.fabric's states are go-nvml's, and so are pynvml's (what the probes read)."""
    import pynvml

    from gpunode.sim import fabric

    ours = {"NOT_SUPPORTED": fabric.NOT_SUPPORTED, "NOT_STARTED": fabric.NOT_STARTED,
            "IN_PROGRESS": fabric.IN_PROGRESS, "COMPLETED": fabric.COMPLETED}  # fmt: skip
    assert {f"NVML_GPU_FABRIC_STATE_{k}": v for k, v in ours.items()} == {
        k: v for k, v in GO_NVML.items() if "FABRIC" in k
    }
    assert {k: getattr(pynvml, k) for k in GO_NVML} == GO_NVML


@needs_unshare
@pytest.mark.parametrize(
    ("state", "answer"),
    [
        (None, "NVML_GPU_FABRIC_STATE_NOT_STARTED"),  # after a driver load: FM has not run
        (2, "NVML_GPU_FABRIC_STATE_IN_PROGRESS"),  # the stand-in is training
        (3, "NVML_GPU_FABRIC_STATE_COMPLETED"),  # trained
        (7, "NVML_GPU_FABRIC_STATE_NOT_STARTED"),  # not a state: nothing trained
    ],
)
def test_hopper_fabric_follows_the_node_state(built_lib, tmp_path, pynvml_ready, state, answer):  # noqa: F811
    """An H100 on its NVSwitch board reports the node's fabric state (the stand-in's file),
    status NVML_SUCCESS (meaningful once COMPLETED), in every form of the query."""
    got = probe(built_lib, tmp_path, mock_payload(load_profile("h100x8")), 8, state=state)
    s, ok = GO_NVML[answer], GO_NVML["NVML_SUCCESS"]
    want = [[s, ok, 1, None], [s, ok, 1, 1], "error:NVMLError_ArgumentVersionMismatch", [s, ok]]
    assert [g["fabric"] for g in got] == [want] * 8


@needs_unshare
def test_fabric_manager_failed_shows_once_trained(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    """The fault is the GPU's: untrained it looks like every other GPU; trained, its status
    is NVML_ERROR_UNKNOWN."""
    payload = mock_payload(load_profile("h100x8-degraded"))
    untrained = probe(built_lib, tmp_path / "a", payload, 8, state=None)
    trained = probe(built_lib, tmp_path / "b", payload, 8, state=3)
    assert untrained[6]["fabric"][3] == untrained[7]["fabric"][3] == [1, 0]
    assert trained[6]["fabric"][3] == [3, GO_NVML["NVML_ERROR_UNKNOWN"]]
    assert trained[7]["fabric"][3] == [3, 0]


@needs_unshare
@pytest.mark.parametrize("state", [None, 3])
def test_a100_answers_not_supported_whatever_the_fabric(built_lib, tmp_path, pynvml_ready, state):  # noqa: F811
    """A100 on its NVSwitch board (a100x4: 6 switches) answers the query
    NVML_ERROR_NOT_SUPPORTED before and after FM trained the fabric, as A100 does."""
    got = probe(built_lib, tmp_path, mock_payload(load_profile("a100x4")), 4, state=state)
    no = "error:NVMLError_NotSupported"
    assert [g["fabric"] for g in got] == [
        [no, no, "error:NVMLError_ArgumentVersionMismatch", no]
    ] * 4
