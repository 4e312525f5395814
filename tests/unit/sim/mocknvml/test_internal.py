"""The mock NVML's answers to nvidia-smi: the internal export table (mocknvml/internal.c)
called slot by slot as nvidia-smi calls it, and the field values, performance state and
utilisation its views read, from the built library with built-in profiles' payloads.

The slots' meanings were found with Debian's nvidia-smi 535.261.03 and 550.163.01 (see
internal.c); the real binary runs against the mock in tests/integration/test_nvidia_smi.py
and tests/infra/test_nvidia_smi.py."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from gpunode.sim.profiles import load_profile, mock_payload, parse_profile

from ..test_mocknvml import (  # noqa: F401  (built_lib, pynvml_ready: fixtures)
    built_lib,
    needs_unshare,
    probe_json,
    pynvml_ready,
)

PROFILES = Path(__file__).resolve().parents[4] / "src/gpunode/data/profiles"

# Calls the table as nvidia-smi does: ctypes for the slots, pynvml for the handles.
PROBE = textwrap.dedent(
    r"""
    import ctypes as C, json, sys
    import pynvml as N

    lib = C.CDLL("libnvidia-ml.so.1")
    GUID = bytes([0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
                  0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4])
    get = lib.nvmlInternalGetExportTable
    get.argtypes = [C.POINTER(C.c_void_p), C.c_char_p]
    table = C.c_void_p()
    out = {"before_init": get(C.byref(table), GUID)}
    slots = C.cast(table, C.POINTER(C.c_void_p))
    SLOT = C.CFUNCTYPE(C.c_int, C.c_void_p, C.c_void_p, C.c_void_p)

    def slot(n, *a):
        return SLOT(slots[n])(*a)

    other = C.c_void_p()
    out["other_guid"] = get(C.byref(other), bytes(16))
    out["null"] = get(None, GUID)
    out["size"] = slots[0]
    bus = C.create_string_buffer(0x22)
    out["slot81_before_init"] = slot(81, 0, C.addressof(bus), 0x22)

    N.nvmlInit()
    n = N.nvmlDeviceGetCount()
    handles = []
    for i in range(n):
        try:
            handles.append(N.nvmlDeviceGetHandleByIndex(i))
        except N.NVMLError as e:
            handles.append(None)

    def bus_id(i, length=0x22):
        buf = C.create_string_buffer(b"\xab" * 0x40, 0x40)
        rc = slot(81, i, C.addressof(buf), length)
        return buf.value.decode() if rc == 0 else rc

    out["bus"] = [bus_id(i) for i in range(n)] + [bus_id(n)]
    out["bus_short"] = bus_id(0, 12)
    # the kind of link between two GPUs, from their bus ids (nvidia-smi passes NVML's form)
    ids = [N.nvmlDeviceGetPciInfo(h).busId for h in handles if h is not None]
    ids = [i.encode() if isinstance(i, str) else i for i in ids]

    def kind(a, b):
        cell = (C.c_uint * 4)(0xabab, 0xabab, 0xabab, 0xabab)
        sa, sb = C.create_string_buffer(a), C.create_string_buffer(b)
        rc = slot(23, C.addressof(sa), C.addressof(sb), C.addressof(cell))
        return cell[0] if rc == 0 else "rc%d" % rc

    out["p2p"] = [[kind(a, b) for b in ids] for a in ids]
    out["p2p_unknown"] = kind(ids[0], b"0000:99:00.0")
    out["p2p_garbage"] = kind(ids[0], b"not a bus id" * 8)

    def raw(h):
        return C.cast(h, C.c_void_p).value if h is not None else 0

    procs, gens, other_slot = [], [], []
    for h in handles:
        per = []
        for s in (213, 214, 215):
            count = C.c_uint(250)
            entries = C.create_string_buffer(b"\xab" * 64, 64)
            rc = slot(s, raw(h), C.addressof(count), C.addressof(entries))
            per.append([rc, count.value, entries.raw[:8] == b"\xab" * 8])
        procs.append(per)
        gen = C.c_uint(0xabab)
        rc = slot(230, raw(h), C.addressof(gen), 0)
        gens.append(gen.value if rc == 0 else "rc%d" % rc)
        cell = C.c_uint(0xabab)
        other_slot.append([slot(100, raw(h), C.addressof(cell), 0), cell.value])
    out["procs"], out["host_gen"], out["slot100"] = procs, gens, other_slot
    junk = C.c_uint(250)
    out["procs_bad_handle"] = [slot(214, C.addressof(junk), C.addressof(junk), 0), junk.value]
    N.nvmlShutdown()
    print(json.dumps(out))
    """
)


def probe(lib: Path, tmp_path: Path, payload: str, minors) -> dict:
    tmp_path.mkdir(parents=True, exist_ok=True)
    return probe_json(lib, tmp_path, payload, PROBE, minors)


def builtin(tmp_path: Path, lib: Path, name: str) -> dict:
    profile = load_profile(name)
    return probe(lib, tmp_path / name, mock_payload(profile), [g.minor for g in profile.gpus])


NV18, PIX, PXB, PHB, NODE, SYS = 22, 0, 1, 2, 3, 4


@needs_unshare
def test_table_handshake_and_the_slots_before_init(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    got = builtin(tmp_path, built_lib, "t4x2-faulty")
    # nvidia-smi asks for the table before nvmlInit (its version check): served then
    assert got["before_init"] == 0 and got["size"] == 256 * 8
    assert got["other_guid"] == 3 and got["null"] == 2  # NOT_SUPPORTED, INVALID_ARGUMENT
    assert got["slot81_before_init"] == 1  # UNINITIALIZED: the slots read the GPUs


@needs_unshare
def test_bus_id_by_index(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    got = builtin(tmp_path, built_lib, "t4x2-faulty")
    # the short form, as nvidia-smi's messages show it; past the last GPU: invalid
    assert got["bus"] == ["0000:3B:00.0", "0000:D8:00.0", 2]
    assert got["bus_short"] == 7  # INSUFFICIENT_SIZE: never a cut-off bus id


@needs_unshare
def test_link_kinds_topo_m_draws(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    # HGX H100: every GPU on the four NVSwitches with all 18 links
    h100 = builtin(tmp_path, built_lib, "h100x8")["p2p"]
    assert [[h100[a][b] for b in range(8) if b != a] for a in range(8)] == [[NV18] * 7] * 8
    # link 0 of GPU 4 down: 17 links between it and every other GPU, 18 elsewhere
    degraded = builtin(tmp_path, built_lib, "h100x8-degraded")["p2p"]
    assert [degraded[4][b] for b in range(8) if b != 4] == [NV18 - 1] * 7
    assert [degraded[b][4] for b in range(8) if b != 4] == [NV18 - 1] * 7
    assert degraded[0][1] == NV18
    # HGX A100 4-GPU: four direct links between each pair
    a100 = builtin(tmp_path, built_lib, "a100x4")["p2p"]
    assert [[a100[a][b] for b in range(4) if b != a] for a in range(4)] == [[4 + 4] * 3] * 4
    # PCIe only: the profile's tree (pairs behind one switch, host bridges, two sockets)
    pcie = builtin(tmp_path, built_lib, "h100x8-pcie")
    half = [PIX, NODE, NODE]
    assert pcie["p2p"][0][1:] == [PIX, NODE, NODE, SYS, SYS, SYS, SYS]
    assert pcie["p2p"][2] == [NODE, NODE, PIX, PIX, SYS, SYS, SYS, SYS]
    assert pcie["p2p"][7][4:7] == [NODE, NODE, PIX] and half == pcie["p2p"][0][1:4]
    t4 = builtin(tmp_path, built_lib, "t4x2-faulty")
    assert t4["p2p"][0][1] == SYS and t4["p2p"][1][0] == SYS  # one T4 per socket
    # a bus id of no GPU, or none at all: refused, nothing written
    assert t4["p2p_unknown"] == "rc2" and t4["p2p_garbage"] == "rc2"


@needs_unshare
def test_process_lists_host_generation_and_unknown_slots(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    got = builtin(tmp_path, built_lib, "h100x8-pcie")
    # no process runs on a simulated GPU: each of the three lists is empty, its entries
    # untouched (a count left at the caller's capacity is how nvidia-smi shows garbage)
    assert got["procs"] == [[[0, 0, True]] * 3] * 8
    assert got["host_gen"] == [5] * 8
    # any other slot: Not Supported (nvidia-smi prints N/A), its arguments untouched
    assert got["slot100"] == [[3, 0xABAB]] * 8
    assert got["procs_bad_handle"] == [2, 250]  # not a device: refused, count untouched


@needs_unshare
def test_a_gpu_fallen_off_the_bus(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    data = yaml.safe_load((PROFILES / "t4x2-faulty.yaml").read_text())
    data["gpus"][1]["faults"] = ["fallen_off_bus"]
    got = probe(built_lib, tmp_path, mock_payload(parse_profile(data)), [0, 1])
    # its handle is lost, its bus id known: "Unable to determine the device handle for
    # GPU0000:D8:00.0: GPU is lost" is how nvidia-smi names it
    assert got["bus"][:2] == ["0000:3B:00.0", "0000:D8:00.0"]
    assert got["p2p"] == [[PIX]]  # the one GPU left with a handle (with itself)
    assert got["host_gen"] == [3, "rc2"]  # no handle for the lost one


FIELDS = textwrap.dedent(
    r"""
    import json
    import pynvml as N

    N.nvmlInit()
    out = []
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        ask = [(N.NVML_FI_DEV_NVLINK_LINK_COUNT, 0), (N.NVML_FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT, 0)]
        ask += [(f, l) for l in (0, 1, 17, 18) for f in (
            N.NVML_FI_DEV_NVLINK_GET_STATE, N.NVML_FI_DEV_NVLINK_GET_SPEED,
            N.NVML_FI_DEV_NVLINK_GET_VERSION)]
        ask += [(N.NVML_FI_DEV_POWER_CURRENT_LIMIT, 0), (N.NVML_FI_DEV_POWER_CURRENT_LIMIT, 1),
                (N.NVML_FI_DEV_POWER_INSTANT, 0), (N.NVML_FI_DEV_ENERGY, 0), (9999, 0)]
        values = N.nvmlDeviceGetFieldValues(h, [list(a) for a in ask])
        out.append({
            "fields": [v.value.uiVal if v.nvmlReturn == 0 else "ns" if v.nvmlReturn == 3
                       else v.nvmlReturn for v in values],
            "pstate": N.nvmlDeviceGetPerformanceState(h),
            "util": [N.nvmlDeviceGetUtilizationRates(h).gpu,
                     N.nvmlDeviceGetUtilizationRates(h).memory],
        })
    N.nvmlShutdown()
    print(json.dumps(out))
    """
)


def fields(lib: Path, tmp_path: Path, name: str) -> list[dict]:
    profile = load_profile(name)
    (tmp_path / name).mkdir()
    return probe_json(lib, tmp_path / name, mock_payload(profile), FIELDS,
                     [g.minor for g in profile.gpus])  # fmt: skip


@needs_unshare
def test_field_values_nvlink_and_power(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    h100 = fields(built_lib, tmp_path, "h100x8-degraded")
    up = [1, 26562, 4]  # state, speed (MB/s: nvlink -s's 26.562 GB/s), NVLink 4
    power = [700000, "ns", 71000, "ns", "ns"]  # mW; the module's scope, energy, unknown: N/S
    assert h100[0]["fields"] == [18, 18, *up, *up, *up, "ns", "ns", "ns", *power]
    # GPU 4's link 0 down: inactive, no speed; one link fewer on the NVSwitches
    assert h100[4]["fields"][:8] == [18, 17, 0, "ns", 4, *up]
    a100 = fields(built_lib, tmp_path, "a100x4")
    # direct links (no NVSwitch), NVLink 3 at 25 GB/s; links 17/18 it lacks: N/S
    assert a100[0]["fields"][:11] == [12, "ns", 1, 25000, 3, 1, 25000, 3, "ns", "ns", "ns"]
    t4 = fields(built_lib, tmp_path, "t4x2-faulty")
    assert t4[1]["fields"] == ["ns"] * 14 + [70000, "ns", 9000, "ns", "ns"]
    assert {(g["pstate"], tuple(g["util"])) for g in h100 + a100 + t4} == {(0, (0, 0))}


def test_nvlink_generation_of_each_nvlink_board():
    """Every compute capability with NVLinks by default has its NVLink generation (else a
    board's `nvlink -s` would show no speed)."""
    from gpunode.sim.profiles import LINK_DEFAULTS, NVLINK_GENERATIONS

    assert {cc for cc, (_, _, links) in LINK_DEFAULTS.items() if links} <= set(NVLINK_GENERATIONS)
    with pytest.raises(KeyError):
        NVLINK_GENERATIONS[(7, 5)]  # T4: PCIe only
