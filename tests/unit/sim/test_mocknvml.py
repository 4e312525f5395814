"""Tests for the mock NVML library (src/gpunode/sim/mocknvml.{c,py}).

The library is built with the system C compiler, a profile is embedded, and an
unmodified pynvml (nvidia-ml-py) is run against it in a child process inside a
private mount namespace (``unshare -m``) whose /dev is a tmpfs holding only the
device nodes a case needs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    import gpunode  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "src"))

from gpunode.sim import mocknvml
from gpunode.sim.mocknvml import BLOB_SIZE, MAGIC, MockBuildError

from ...namespaces import unshare_problem

GIB = 1024**3

GPUS = [
    # minor 0 sits on a higher bus than minor 1: index order must follow bus ids.
    {
        "minor": 0,
        "uuid": "GPU-3f2c1a90-0000-4000-8000-000000000000",
        "name": "NVIDIA A100-SXM4-80GB",
        "bus_id": "00000000:41:00.0",
        "pci_device_id": "0x20B210DE",
        "pci_subsystem_id": "0x147F10DE",
        "memory_total": 80 * GIB,
        "memory_reserved": 512 * 1024**2,
        "memory_used": 1 * GIB,
        "cc_major": 8,
        "cc_minor": 0,
        "architecture": 7,
        "brand": 2,
        "persistence": 1,
        "ecc_enabled": 1,
        "mig_capable": 1,
        "temperature": 34,
        "power_usage": 61000,
        "power_limit": 400000,
        "serial": "1560221000000",
        "vbios": "92.00.45.00.03",
    },
    {
        "minor": 1,
        "uuid": "GPU-3f2c1a90-0000-4000-8000-000000000001",
        "name": "NVIDIA A100-SXM4-80GB",
        "bus_id": "00000000:07:00.0",
        "pci_device_id": "0x20B210DE",
        "memory_total": 80 * GIB,
        "memory_reserved": 512 * 1024**2,
        "memory_used": 0,
        "cc_major": 8,
        "cc_minor": 0,
        "persistence": 0,
        "ecc_enabled": 1,
        "temperature": 31,
    },
    {
        "minor": 2,
        # lower-case hex in the profile: the library normalizes it
        "uuid": "GPU-3f2c1a90-0000-4000-8000-000000000002",
        "name": "NVIDIA A100-SXM4-80GB",
        "bus_id": "00000000:8a:00.0",
        "pci_device_id": "0x20B210DE",
        "memory_total": 80 * GIB,
        "memory_reserved": 512 * 1024**2,
        "memory_used": 2 * GIB,
        "cc_major": 8,
        "cc_minor": 0,
        "persistence": 1,
        "ecc_enabled": 1,
        "ecc_uncorrected_volatile": 2,
        "ecc_uncorrected_aggregate": 5,
        "ecc_corrected_volatile": 7,
        "ecc_corrected_aggregate": 11,
        "retired_dbe": 2,
        "retired_pending": 1,
        "remap_uncorrected": 1,
        "remap_failure": 1,
        "temperature": 40,
        "unknown_key": "ignored",
    },
]


def make_payload(gpus: list[dict], driver: bool = True) -> str:
    lines = []
    if driver:
        lines.append("driver_version\t535.261.03")
    lines += [
        "nvml_version\t12.535.261.03",
        "cuda_driver_version\t12020",
        "some_future_line\twhatever",
    ]
    for gpu in gpus:
        lines.append("\t".join(["gpu"] + [f"{k}={v}" for k, v in gpu.items()]))
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------
# environment helpers


_UNSHARE_PROBLEM = unshare_problem()
if _UNSHARE_PROBLEM:
    print(f"skipping mock NVML namespace tests: {_UNSHARE_PROBLEM}", file=sys.stderr)
needs_unshare = pytest.mark.skipif(
    _UNSHARE_PROBLEM is not None, reason=f"needs unshare -m: {_UNSHARE_PROBLEM}"
)


@pytest.fixture(scope="module")
def pynvml_ready() -> None:
    """Make sure nvidia-ml-py is importable by sys.executable."""
    check = [sys.executable, "-c", "import pynvml"]
    if subprocess.run(check, capture_output=True).returncode == 0:
        return
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "nvidia-ml-py"],
        capture_output=True,
        text=True,
    )
    if install.returncode != 0 or subprocess.run(check, capture_output=True).returncode:
        pytest.fail(f"nvidia-ml-py is not installable: {install.stderr.strip()[-500:]}")


@pytest.fixture(scope="module")
def built_lib(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("mocknvml-build")
    return mocknvml.build_library(out / "libmock.so")


def install_lib(lib: Path, payload: str | None, where: Path) -> Path:
    """Return a dir holding libnvidia-ml.so.1 (embedded with *payload*)."""
    libdir = where / "lib"
    libdir.mkdir(parents=True, exist_ok=True)
    target = libdir / "libnvidia-ml.so.1"
    if payload is None:
        shutil.copyfile(lib, target)
    else:
        mocknvml.embed_profile(lib, payload, target)
    return libdir


def probe_json(lib: Path, where: Path, payload: str, script: str, minors, extra=()) -> object:
    """Run the Python *script* (which prints its findings as JSON on its last line) with
    the mock (*payload* embedded) as libnvidia-ml.so.1, in a private /dev holding the GPUs
    *minors* (in_private_dev, *extra* steps before); what it printed."""
    libdir = install_lib(lib, payload, where)
    path = where / "probe.py"
    path.write_text(script)
    env = {"LD_LIBRARY_PATH": str(libdir), "PATH": "/usr/bin:/bin", "PYTHONPATH": ""}
    proc = in_private_dev([sys.executable, str(path)], list(minors), extra=extra, env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return json.loads(proc.stdout.strip().splitlines()[-1])


PROBE = textwrap.dedent(
    r"""
    import json, sys
    import pynvml as N

    args = json.loads(sys.argv[1])
    out = {}

    def txt(v):
        return v.decode() if isinstance(v, bytes) else v

    def call(fn, *a, **kw):
        try:
            v = fn(*a, **kw)
        except N.NVMLError as e:
            return "error:" + type(e).__name__
        if isinstance(v, bytes):
            v = v.decode()
        return v

    try:
        N.nvmlInit()
    except N.NVMLError as e:
        print(json.dumps({"init": "error:" + type(e).__name__, "str": str(e)}))
        sys.exit(0)
    out["init"] = "ok"
    out["driver"] = call(N.nvmlSystemGetDriverVersion)
    out["nvml"] = call(N.nvmlSystemGetNVMLVersion)
    out["cuda"] = call(N.nvmlSystemGetCudaDriverVersion)
    out["cuda_v2"] = call(N.nvmlSystemGetCudaDriverVersion_v2)
    out["count"] = N.nvmlDeviceGetCount()
    devs = []
    first = None
    for i in range(out["count"]):
        try:
            h = N.nvmlDeviceGetHandleByIndex(i)
        except N.NVMLError as e:
            devs.append({"handle": "error:" + type(e).__name__})
            continue
        first = first or h
        pci = N.nvmlDeviceGetPciInfo(h)
        m1 = N.nvmlDeviceGetMemoryInfo(h)
        m2 = N.nvmlDeviceGetMemoryInfo(h, version=N.nvmlMemory_v2)
        d = {
            "index": call(N.nvmlDeviceGetIndex, h),
            "name": call(N.nvmlDeviceGetName, h),
            "uuid": call(N.nvmlDeviceGetUUID, h),
            "serial": call(N.nvmlDeviceGetSerial, h),
            "vbios": call(N.nvmlDeviceGetVbiosVersion, h),
            "brand": call(N.nvmlDeviceGetBrand, h),
            "arch": call(N.nvmlDeviceGetArchitecture, h),
            "busId": txt(pci.busId),
            "busIdLegacy": txt(pci.busIdLegacy),
            "pci": [pci.domain, pci.bus, pci.device, pci.pciDeviceId, pci.pciSubSystemId],
            "minor": call(N.nvmlDeviceGetMinorNumber, h),
            "mem1": [m1.total, m1.free, m1.used],
            "mem2": [m2.total, m2.reserved, m2.free, m2.used],
            "persistence": call(N.nvmlDeviceGetPersistenceMode, h),
            "ecc_mode": call(N.nvmlDeviceGetEccMode, h),
            "mig": call(N.nvmlDeviceGetMigMode, h),
            "ecc": [call(N.nvmlDeviceGetTotalEccErrors, h, t, c) for t in (0, 1) for c in (0, 1)],
            "ecc_dram_unc_vol": call(N.nvmlDeviceGetMemoryErrorCounter, h, 1, 0,
                                     N.NVML_MEMORY_LOCATION_DEVICE_MEMORY),
            "ecc_l1_unc_vol": call(N.nvmlDeviceGetMemoryErrorCounter, h, 1, 0,
                                   N.NVML_MEMORY_LOCATION_L1_CACHE),
            "retired_sbe": call(N.nvmlDeviceGetRetiredPages, h, 0),
            "retired_dbe": call(N.nvmlDeviceGetRetiredPages, h, 1),
            "retired_dbe_v2": call(N.nvmlDeviceGetRetiredPages_v2, h, 1),
            "retired_pending": call(N.nvmlDeviceGetRetiredPagesPendingStatus, h),
            "remapped": list(call(N.nvmlDeviceGetRemappedRows, h)),
            "temp": call(N.nvmlDeviceGetTemperature, h, N.NVML_TEMPERATURE_GPU),
            "temp_v": call(N.nvmlDeviceGetTemperatureV, h, N.NVML_TEMPERATURE_GPU),
            "cc": list(call(N.nvmlDeviceGetCudaComputeCapability, h)),
            "power": call(N.nvmlDeviceGetPowerUsage, h),
            "power_limit": call(N.nvmlDeviceGetEnforcedPowerLimit, h),
            "compute_mode": call(N.nvmlDeviceGetComputeMode, h),
        }
        devs.append(d)
    out["devices"] = devs
    out["by_uuid"] = {u: call(lambda u: N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByUUID(u)), u)
                      for u in args.get("uuids", [])}
    out["by_bus"] = {b: call(lambda b: N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByPciBusId(b)), b)
                     for b in args.get("bus_ids", [])}
    if first is not None:
        out["clock"] = call(N.nvmlDeviceGetClockInfo, first, N.NVML_CLOCK_GRAPHICS)
        out["fan_v2"] = call(N.nvmlDeviceGetFanSpeed_v2, first, 0)
    out["bad_index"] = call(N.nvmlDeviceGetHandleByIndex, out["count"])
    out["error_string"] = call(N.nvmlErrorString, 15)
    out["null_handle"] = call(N.nvmlDeviceGetUUID, N.c_nvmlDevice_t())
    if first is not None:
        out["mem2_badver"] = call(N.nvmlDeviceGetMemoryInfo, first, version=0x01000028)
    # refcounted: a second init needs a second shutdown
    N.nvmlInit()
    N.nvmlShutdown()
    out["after_one_shutdown"] = call(N.nvmlDeviceGetCount)
    N.nvmlShutdown()
    out["after_shutdown"] = call(N.nvmlDeviceGetCount)
    if args.get("unlink"):
        # visibility is re-evaluated when the library is initialized again
        import os
        os.unlink(args["unlink"])
        N.nvmlInit()
        out["reinit_uuids"] = [
            call(lambda i: N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByIndex(i)), i)
            for i in range(N.nvmlDeviceGetCount())
        ]
        N.nvmlShutdown()
    print(json.dumps(out))
    """
)


def run_probe(
    tmp_path: Path,
    libdir: Path,
    minors: list[int],
    ctl: bool = True,
    args: dict | None = None,
    extra: tuple[str, ...] = (),
) -> dict:
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    env = {"LD_LIBRARY_PATH": str(libdir), "PATH": "/usr/bin:/bin", "PYTHONPATH": ""}
    cmd = [sys.executable, str(probe), json.dumps(args or {})]
    proc = in_private_dev(cmd, minors, ctl, extra, env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def in_private_dev(
    cmd, minors, ctl=True, extra=(), env=None, caps=True
) -> subprocess.CompletedProcess:
    """Run cmd under `unshare -m` with a tmpfs /dev holding /dev/null, /dev/nvidiactl
    (if ctl), /dev/nvidia<minor> for each minor and (if caps) the MIG config and monitor
    cap nodes a node has (/dev/nvidia-caps/nvidia-cap1 and 2, major 511), with which
    every MIG device of a visible GPU is visible."""
    setup = ["mount -t tmpfs none /dev", "mknod /dev/null c 1 3"]
    if ctl:
        setup.append("mknod /dev/nvidiactl c 195 255")
    setup += [f"mknod /dev/nvidia{m} c 195 {m}" for m in minors]
    if caps:
        setup += ["mkdir /dev/nvidia-caps"]
        setup += [f"mknod /dev/nvidia-caps/nvidia-cap{m} c 511 {m}" for m in (1, 2)]
    setup += extra
    script = " && ".join(setup) + ' && exec "$0" "$@"'
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script, *map(str, cmd)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


# --------------------------------------------------------------------------
# build / embed


def test_sources_are_package_data():
    srcs = mocknvml.sources()
    assert {p.name for p in srcs} >= {"init.c", "device.c", "mig.c", "migstate.c"}
    assert (mocknvml.source_dir() / "common.h").is_file()
    assert sum(p.read_bytes().count(MAGIC.rstrip(b"\n")) for p in srcs) == 1


def test_build_failure_is_one_line(tmp_path):
    bad = tmp_path / "badcc"
    bad.write_text("#!/bin/sh\necho 'x.c:1:1: error: boom' >&2\necho more >&2\nexit 1\n")
    bad.chmod(0o755)
    with pytest.raises(MockBuildError) as info:
        mocknvml.build_library(tmp_path / "out.so", cc=str(bad))
    assert "error: boom" in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "out.so").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["badcc"]  # no temp litter
    with pytest.raises(MockBuildError):
        mocknvml.build_library(tmp_path / "out.so", cc=str(tmp_path / "no-such-cc"))


def test_built_library_exports(built_lib):
    data = built_lib.read_bytes()
    assert data.count(MAGIC) == 1
    nm = shutil.which("nm")
    if nm is None:
        return
    listing = subprocess.run(
        [nm, "-D", "--defined-only", str(built_lib)], capture_output=True, text=True, check=True
    ).stdout
    names = {ln.split()[-1] for ln in listing.splitlines() if ln.strip()}
    ours = {"gpunode_profile_blob", "gpunode_sim_mig_setup"}  # sim apply's: the blob, setup.c
    assert ours <= names
    assert {"nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetClockInfo"} <= names
    stray = {n for n in names if not n.startswith("nvml") and n not in ours}
    assert not stray  # the helpers the C files share stay hidden (common.h's pragma)
    # exactly what the library exported as one file: the NVML functions (nvml.h's and
    # pynvml's, stubs or defined), sim apply's two, two older ECC queries the mock defines
    # and the internal export table nvidia-smi asks for (mocknvml/internal.c)
    extras = {
        "nvmlDeviceGetCurrentEccMode",
        "nvmlDeviceGetPendingEccMode",
        "nvmlInternalGetExportTable",
    }
    assert names == set(mocknvml.nvml_names()) | ours | extras


def test_embed_profile_idempotent_and_size_limit(built_lib, tmp_path):
    dest = tmp_path / "libnvidia-ml.so.1"
    payload = make_payload(GPUS)
    assert mocknvml.embed_profile(built_lib, payload, dest) is True
    first = dest.read_bytes()
    assert dest.stat().st_mode & 0o777 == 0o755
    off = first.index(MAGIC)
    assert first[off : off + len(MAGIC) + len(payload)] == MAGIC + payload.encode()
    assert first[off + len(MAGIC) + len(payload) : off + BLOB_SIZE] == b"\0" * (
        BLOB_SIZE - len(MAGIC) - len(payload)
    )
    assert len(first) == built_lib.stat().st_size
    mtime = dest.stat().st_mtime_ns
    assert mocknvml.embed_profile(built_lib, payload, dest) is False
    assert dest.stat().st_mtime_ns == mtime
    # a different payload changes it
    assert mocknvml.embed_profile(built_lib, make_payload(GPUS[:1]), dest) is True
    assert mocknvml.embed_profile(built_lib, payload, dest) is True
    # too large: ValueError, dest untouched
    with pytest.raises(ValueError, match="bytes"):
        mocknvml.embed_profile(built_lib, "x" * BLOB_SIZE, dest)
    assert dest.read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["libnvidia-ml.so.1"]


def test_embed_profile_requires_single_magic(tmp_path):
    none = tmp_path / "none.so"
    none.write_bytes(b"\x7fELF" + b"\0" * 100)
    with pytest.raises(MockBuildError, match=r"none\.so"):
        mocknvml.embed_profile(none, "driver_version\t1\n", tmp_path / "out")
    two = tmp_path / "two.so"
    two.write_bytes(MAGIC + b"\0" * BLOB_SIZE + MAGIC + b"\0" * BLOB_SIZE)
    with pytest.raises(MockBuildError, match=r"two\.so"):
        mocknvml.embed_profile(two, "driver_version\t1\n", tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------
# pynvml against the mock, inside a private /dev

UUIDS = [g["uuid"] for g in GPUS]


@needs_unshare
def test_all_gpus_visible(built_lib, tmp_path, pynvml_ready):
    libdir = install_lib(built_lib, make_payload(GPUS), tmp_path)
    out = run_probe(
        tmp_path,
        libdir,
        [0, 1, 2],
        args={
            "uuids": UUIDS,
            "bus_ids": ["0000:07:00.0", "00000000:8A:00.0", "0000:99:00.0"],
            "unlink": "/dev/nvidia1",
        },
    )
    assert out["init"] == "ok"
    assert out["driver"] == "535.261.03"
    assert out["nvml"] == "12.535.261.03"
    assert out["cuda"] == 12020 and out["cuda_v2"] == 12020
    assert out["count"] == 3
    devs = out["devices"]
    # bus-id order: 07 (minor 1), 41 (minor 0), 8A (minor 2)
    assert [d["uuid"] for d in devs] == [UUIDS[1], UUIDS[0], UUIDS[2]]
    assert [d["index"] for d in devs] == [0, 1, 2]
    assert [d["minor"] for d in devs] == [1, 0, 2]
    assert [d["busId"] for d in devs] == [
        "00000000:07:00.0",
        "00000000:41:00.0",
        "00000000:8A:00.0",
    ]
    g1, g0, g2 = devs
    assert g0["busIdLegacy"] == "0000:41:00.0"
    assert g0["pci"] == [0, 0x41, 0, 0x20B210DE, 0x147F10DE]
    assert g0["name"] == "NVIDIA A100-SXM4-80GB"
    assert g0["serial"] == "1560221000000" and g0["vbios"] == "92.00.45.00.03"
    assert g0["brand"] == 2 and g0["arch"] == 7
    reserved = 512 * 1024**2
    assert g0["mem1"] == [80 * GIB, 80 * GIB - GIB - reserved, GIB]
    assert g0["mem2"] == [80 * GIB, reserved, 80 * GIB - GIB - reserved, GIB]
    assert g2["mem2"] == [80 * GIB, reserved, 80 * GIB - 2 * GIB - reserved, 2 * GIB]
    assert [g0["persistence"], g1["persistence"], g2["persistence"]] == [1, 0, 1]
    assert g0["ecc_mode"] == [1, 1]
    assert g0["mig"] == [0, 0]
    # [corrected volatile, corrected aggregate, uncorrected volatile, uncorrected aggregate]
    assert g0["ecc"] == [0, 0, 0, 0]
    assert g2["ecc"] == [7, 11, 2, 5]
    assert g2["ecc_dram_unc_vol"] == 2 and g2["ecc_l1_unc_vol"] == 0
    assert g0["retired_sbe"] == [] and g0["retired_dbe"] == []
    assert g2["retired_sbe"] == []
    assert g2["retired_dbe"] == [0x101000, 0x102000]
    assert [p["address"] for p in g2["retired_dbe_v2"]] == [0x101000, 0x102000]
    assert [g0["retired_pending"], g2["retired_pending"]] == [0, 1]
    assert g0["remapped"] == [0, 0, 0, 0]
    assert g2["remapped"] == [0, 1, 0, 1]
    assert [g1["temp"], g0["temp"], g2["temp"]] == [31, 34, 40]
    assert g0["temp_v"] == 34
    assert all(d["cc"] == [8, 0] for d in devs)
    assert g0["power"] == 61000 and g0["power_limit"] == 400000
    assert g0["compute_mode"] == 0
    assert out["by_uuid"] == {u: u for u in UUIDS}
    assert out["by_bus"] == {
        "0000:07:00.0": UUIDS[1],
        "00000000:8A:00.0": UUIDS[2],
        "0000:99:00.0": "error:NVMLError_NotFound",
    }
    assert out["clock"] == "error:NVMLError_NotSupported"
    # exported (nvidia-ml-py knows it) but not simulated
    assert out["fan_v2"] == "error:NVMLError_NotSupported"
    assert out["bad_index"] == "error:NVMLError_InvalidArgument"
    assert out["error_string"] == "GPU is lost"
    assert out["null_handle"] == "error:NVMLError_InvalidArgument"
    assert out["mem2_badver"] == "error:NVMLError_ArgumentVersionMismatch"
    assert out["after_one_shutdown"] == 3
    assert out["after_shutdown"] == "error:NVMLError_Uninitialized"
    assert out["reinit_uuids"] == [UUIDS[0], UUIDS[2]]


@needs_unshare
def test_only_one_device_node(built_lib, tmp_path, pynvml_ready):
    libdir = install_lib(built_lib, make_payload(GPUS), tmp_path)
    # decoys: right names, wrong kind of file or device numbers -> not GPUs
    decoys = ("mknod /dev/nvidia0 c 195 7", "touch /dev/nvidia2")
    out = run_probe(
        tmp_path,
        libdir,
        [1],
        args={"uuids": UUIDS, "bus_ids": ["0000:41:00.0"]},
        extra=decoys,
    )
    assert out["count"] == 1
    assert out["devices"][0]["uuid"] == UUIDS[1]
    assert out["devices"][0]["index"] == 0 and out["devices"][0]["minor"] == 1
    assert out["by_uuid"] == {
        UUIDS[0]: "error:NVMLError_NotFound",
        UUIDS[1]: UUIDS[1],
        UUIDS[2]: "error:NVMLError_NotFound",
    }
    assert out["by_bus"] == {"0000:41:00.0": "error:NVMLError_NotFound"}


@needs_unshare
def test_no_nvidiactl_means_driver_not_loaded(built_lib, tmp_path, pynvml_ready):
    libdir = install_lib(built_lib, make_payload(GPUS), tmp_path)
    out = run_probe(tmp_path, libdir, [0, 1, 2], ctl=False)
    assert out["init"] == "error:NVMLError_DriverNotLoaded"
    assert out["str"] == "Driver Not Loaded"


@needs_unshare
def test_unembedded_library_driver_not_loaded(built_lib, tmp_path, pynvml_ready):
    libdir = install_lib(built_lib, None, tmp_path)
    out = run_probe(tmp_path, libdir, [0, 1, 2])
    assert out["init"] == "error:NVMLError_DriverNotLoaded"
    # a payload without a driver_version line behaves the same
    libdir = install_lib(built_lib, make_payload(GPUS, driver=False), tmp_path / "nodrv")
    out = run_probe(tmp_path, libdir, [0, 1, 2])
    assert out["init"] == "error:NVMLError_DriverNotLoaded"


@needs_unshare
def test_lost_gpu(built_lib, tmp_path, pynvml_ready):
    gpus = [dict(g) for g in GPUS]
    gpus[0]["lost"] = 1  # bus 41 -> index 1
    libdir = install_lib(built_lib, make_payload(gpus), tmp_path)
    out = run_probe(
        tmp_path, libdir, [0, 1, 2], args={"uuids": [UUIDS[0]], "bus_ids": ["0000:41:00.0"]}
    )
    assert out["count"] == 3
    assert out["devices"][1] == {"handle": "error:NVMLError_GpuIsLost"}
    assert out["devices"][0]["uuid"] == UUIDS[1]
    assert out["devices"][2]["uuid"] == UUIDS[2]
    assert out["by_uuid"] == {UUIDS[0]: "error:NVMLError_GpuIsLost"}
    assert out["by_bus"] == {"0000:41:00.0": "error:NVMLError_GpuIsLost"}


# --------------------------------------------------------------------------
# the complete NVML surface: every name nvidia-ml-py can call is exported


def pynvml_calls() -> set[str]:
    """The C functions nvidia-ml-py looks up, read from its syntax tree (independently of
    the build's own scan)."""
    import ast
    import importlib.util

    origin = importlib.util.find_spec("pynvml").origin
    names = set()
    for node in ast.walk(ast.parse(Path(origin).read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "_nvmlGetFunctionPointer"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            names.add(node.args[0].value)
    return names


def exported(lib: Path) -> set[str]:
    listing = subprocess.run(
        ["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True
    ).stdout
    return {ln.split()[-1] for ln in listing.splitlines() if ln.strip()}


def test_exports_every_function_nvidia_ml_py_calls(built_lib, pynvml_ready):
    calls = pynvml_calls()
    assert len(calls) > 300  # the form we read is still pynvml's
    names = exported(built_lib)
    assert not sorted(calls - names), "missing in the mock"
    # and the C callers' unversioned names nvml.h maps (go-nvml resolves both)
    assert {"nvmlInit", "nvmlInit_v2", "nvmlDeviceGetCount", "nvmlDeviceGetPciInfo"} <= names


# --------------------------------------------------------------------------
# the complete NVML surface: every function nvml.h declares is exported

# What go-nvml (pkg/nvml, generated from nvml.h) binds and nvidia-ml-py never calls: the older
# versions nvml.h declares under NVML_NO_UNVERSIONED_FUNC_DEFS. A go-nvml program calling
# one died on an undefined symbol.
GO_NVML_ONLY = [
    "nvmlDeviceGetGpuInstancePossiblePlacements",
    "nvmlDeviceGetGridLicensableFeatures",
    "nvmlDeviceGetGridLicensableFeatures_v2",
    "nvmlDeviceGetGridLicensableFeatures_v3",
    "nvmlDeviceGetNvLinkRemotePciInfo",
    "nvmlDeviceRemoveGpu_v2",
    "nvmlVgpuInstanceGetLicenseInfo",
]


def declared_list() -> list[str]:
    """nvml-functions.txt read here, independently of the build's reader."""
    text = (Path(mocknvml.__file__).parent / "nvml-functions.txt").read_text()
    return [ln for ln in text.splitlines() if ln and not ln.startswith("#")]


def test_declared_list_says_which_nvml_h_it_came_from():
    text = mocknvml.DECLARED.read_text()
    head = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert any(ln.startswith("# Source: ") and "nvml.h" in ln for ln in head)
    assert any(re.search(r"nvml\.h sha256 [0-9a-f]{64}, \d+ functions", ln) for ln in head)
    assert any("python -m gpunode.sim.mocknvml" in ln for ln in head)
    names = declared_list()
    assert names == sorted(set(names)) and len(names) > 400
    assert f", {len(names)} functions." in text  # the count in the header is the list's
    assert set(GO_NVML_ONLY) <= set(names)
    assert not set(GO_NVML_ONLY) & pynvml_calls()  # why pynvml's names were not enough
    assert set(mocknvml.nvml_names()) == set(names) | set(mocknvml.pynvml_names())


FAKE_HEADER = """
#define DECLDIR
#ifndef NVML_NO_UNVERSIONED_FUNC_DEFS
    #define nvmlDeviceRemoveGpu nvmlDeviceRemoveGpu_v2
#endif
/** Retrieves ... see \\ref nvmlDocOnly(); nvmlReturn_t DECLDIR nvmlInComment(void); */
nvmlReturn_t DECLDIR nvmlInit_v2(void);
nvmlReturn_t  DECLDIR nvmlDeviceGetThing(nvmlDevice_t device,
                                         unsigned int *thing);
const DECLDIR char* nvmlErrorString(nvmlReturn_t result);
// nvmlReturn_t DECLDIR nvmlLineComment(void);
#ifdef NVML_NO_UNVERSIONED_FUNC_DEFS
nvmlReturn_t DECLDIR nvmlDeviceRemoveGpu(nvmlPciInfo_t *pciInfo);
#endif
nvmlReturn_t DECLDIR nvmlDeviceRemoveGpu_v2(nvmlPciInfo_t *pciInfo,
    nvmlDetachGpuState_t gpuState, nvmlPcieLinkState_t linkState);
"""


def test_header_names_are_the_declarations():
    assert mocknvml.header_names(FAKE_HEADER) == [
        "nvmlDeviceGetThing",
        "nvmlDeviceRemoveGpu",
        "nvmlDeviceRemoveGpu_v2",
        "nvmlErrorString",
        "nvmlInit_v2",
    ]


def test_render_declared_round_trips_and_bad_inputs_are_one_line(tmp_path):
    many = FAKE_HEADER + "".join(f"nvmlReturn_t DECLDIR nvmlF{i}(void);\n" for i in range(120))
    header = tmp_path / "nvml.h"
    header.write_text(many)
    listing = tmp_path / "nvml-functions.txt"
    listing.write_text(mocknvml.render_declared(header, "a test header"))
    assert mocknvml.declared_names(listing) == mocknvml.header_names(many)
    assert "# Source: a test header" in listing.read_text()
    bad = [
        (lambda: mocknvml.render_declared(tmp_path / "missing.h", "x"), "missing.h"),
        (lambda: mocknvml.render_declared(listing, "x"), "is it nvml.h?"),
    ]
    listing.write_text(listing.read_text() + "not a name\n")
    bad.append((lambda: mocknvml.declared_names(listing), "'not a name' is not an NVML"))
    for call, says in bad:
        with pytest.raises(MockBuildError) as info:
            call()
        assert says in str(info.value) and "\n" not in str(info.value)
    cli = subprocess.run(
        [sys.executable, "-m", "gpunode.sim.mocknvml", str(tmp_path / "missing.h"), "x"],
        capture_output=True,
        text=True,
    )
    assert cli.returncode == 1 and cli.stdout == ""
    assert (
        cli.stderr.strip()
        == f"mocknvml: cannot read {tmp_path}/missing.h: No such file or directory"
    )


def test_build_digest_changes_with_the_declared_list(tmp_path, monkeypatch):
    before = mocknvml.build_digest()
    names = declared_list()
    shorter = tmp_path / "nvml-functions.txt"
    shorter.write_text("\n".join(n for n in names if n != "nvmlDeviceRemoveGpu_v2") + "\n")
    monkeypatch.setattr(mocknvml, "DECLARED", shorter)
    assert mocknvml.build_digest() != before
    assert "nvmlDeviceRemoveGpu_v2" not in mocknvml.nvml_names()


# go-nvml's binding: dlopen(RTLD_LAZY | RTLD_GLOBAL), then each function is resolved from the
# global scope when first called. This resolves every declared name that way up front.
RESOLVE_C = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (!dlopen(argv[1], RTLD_LAZY | RTLD_GLOBAL)) { printf("DLOPEN %s\n", dlerror()); return 2; }
    FILE *f = fopen(argv[2], "r");
    char name[256];
    int missing = 0, found = 0;
    while (fscanf(f, "%255s", name) == 1) {
        if (dlsym(RTLD_DEFAULT, name)) found++;
        else { printf("MISSING %s\n", name); missing++; }
    }
    printf("FOUND %d\n", found);
    return missing ? 1 : 0;
}
"""


def test_every_declared_function_resolves_as_go_nvml_binds_it(built_lib, tmp_path):
    (tmp_path / "resolve.c").write_text(RESOLVE_C)
    resolve = tmp_path / "resolve"
    subprocess.run(["cc", "-o", str(resolve), str(tmp_path / "resolve.c"), "-ldl"], check=True)
    names = declared_list()
    (tmp_path / "names.txt").write_text("\n".join(names) + "\n")
    proc = subprocess.run(
        [resolve, built_lib, tmp_path / "names.txt"], capture_output=True, text=True, timeout=60
    )
    missing = [ln.split()[1] for ln in proc.stdout.splitlines() if ln.startswith("MISSING ")]
    assert not missing, f"declared in nvml.h, not exported by the mock: {missing}"
    assert proc.returncode == 0 and f"FOUND {len(names)}" in proc.stdout


# A go-nvml-like caller: dlopen(RTLD_LAZY | RTLD_GLOBAL), then every exported nvml* name
# is called. Arguments: the first is the handle the name's family takes (device, MIG
# device, GPU/compute instance, event set) and the others point at large zeroed buffers,
# in three shapes (all pointers; a 0 scalar then pointers; two 0 scalars then pointers)
# since the harness does not know each signature. Each call prints "name rc rc rc" before
# the next starts, so a crash names its function.
HARNESS_C = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*fn8)(void *, void *, void *, void *, void *, void *, void *, void *);
typedef int (*fn0)(void);
#define BUF (64 * 1024)
static char bufs[8][BUF];

static void *sym(void *lib, const char *name)
{
    void *p = dlsym(lib, name);
    if (!p) { printf("MISSING %s\n", name); exit(3); }
    return p;
}

int main(int argc, char **argv)
{
    /* argv: lib, names file, mode (init|noinit), handle kind (gpu|mig) */
    void *lib = dlopen(argv[1], RTLD_LAZY | RTLD_GLOBAL);
    if (!lib) { printf("DLOPEN %s\n", dlerror()); return 2; }
    int init = strcmp(argv[3], "init") == 0;
    void *dev = NULL, *gi = NULL, *ci = NULL, *set = NULL;
    if (init) {
        if (((fn0)sym(lib, "nvmlInit_v2"))() != 0) { printf("INIT failed\n"); return 2; }
        typedef int (*by_index)(unsigned, void **);
        if (((by_index)sym(lib, "nvmlDeviceGetHandleByIndex_v2"))(0, &dev) != 0) return 2;
        if (strcmp(argv[4], "mig") == 0) {
            typedef int (*mig_by_index)(void *, unsigned, void **);
            typedef int (*get_id)(void *, unsigned *);
            typedef int (*by_id)(void *, unsigned, void **);
            unsigned gid = 0;
            void *parent = dev;
            if (((mig_by_index)sym(lib, "nvmlDeviceGetMigDeviceHandleByIndex"))(parent, 0, &dev))
                return 2;
            if (((get_id)sym(lib, "nvmlDeviceGetGpuInstanceId"))(dev, &gid)) return 2;
            if (((by_id)sym(lib, "nvmlDeviceGetGpuInstanceById"))(parent, gid, &gi)) return 2;
            if (((by_id)sym(lib, "nvmlGpuInstanceGetComputeInstanceById"))(gi, 0, &ci)) return 2;
        }
        typedef int (*create)(void **);
        if (((create)sym(lib, "nvmlEventSetCreate"))(&set) != 0) return 2;
    }
    FILE *f = fopen(argv[2], "r");
    char name[256];
    while (fscanf(f, "%255s", name) == 1) {
        if (!strcmp(name, "nvmlInit") || !strcmp(name, "nvmlInit_v2") ||
            !strcmp(name, "nvmlInitWithFlags") || !strcmp(name, "nvmlShutdown") ||
            !strcmp(name, "nvmlErrorString"))
            continue;
        fn8 f8 = (fn8)sym(lib, name);
        void *first = bufs[0];
        if (!strncmp(name, "nvmlDevice", 10) && !strstr(name, "GetHandleBy") &&
            !strstr(name, "GetCount") && !strstr(name, "DiscoverGpus") &&
            !strstr(name, "DrainState") && !strstr(name, "RemoveGpu"))
            first = dev;
        else if (!strncmp(name, "nvmlGpuInstance", 15))
            first = gi;
        else if (!strncmp(name, "nvmlComputeInstance", 19))
            first = ci;
        else if (!strcmp(name, "nvmlEventSetFree") && init)
            ((int (*)(void **))sym(lib, "nvmlEventSetCreate"))(&first); /* keep `set` */
        else if (!strncmp(name, "nvmlEventSet", 12) && strcmp(name, "nvmlEventSetCreate"))
            first = set;
        printf("%s", name);
        fflush(stdout);
        if (!strcmp(name, "nvmlEventSetWait_v2") || !strcmp(name, "nvmlEventSetWait")) {
            /* the third argument is a timeout in ms: any pointer would block for weeks */
            for (unsigned t = 0; t < 2; t++) {
                memset(bufs, 0, sizeof(bufs));
                printf(" %d", ((int (*)(void *, void *, unsigned))f8)(first, bufs[1], t));
            }
        } else {
            for (int shape = 0; shape < 3; shape++) {
                void *a[7];
                memset(bufs, 0, sizeof(bufs));
                for (int i = 0; i < 7; i++)
                    a[i] = i < shape ? NULL : bufs[i + 1];
                printf(" %d", f8(first, a[0], a[1], a[2], a[3], a[4], a[5], a[6]));
                fflush(stdout);
            }
        }
        printf("\n");
        fflush(stdout);
    }
    if (init) {
        printf("ERRORSTRING %s\n", ((const char *(*)(int))sym(lib, "nvmlErrorString"))(3));
        printf("SHUTDOWN %d\n", ((fn0)sym(lib, "nvmlShutdown"))());
    }
    return 0;
}
"""

MIG_UUIDS = [f"MIG-5a1e0c3e-7b52-4d8e-91a0-3c6e2b7d4f1{i}" for i in range(3)]


def a100_with_mig(instances: list[dict] | None) -> str:
    """The a100x4 profile with MIG set on its second GPU (bus 0f); returns the payload."""
    import yaml

    from gpunode.sim.profiles import mock_payload, parse_profile

    src = Path(__file__).resolve().parents[3] / "src/gpunode/data/profiles/a100x4.yaml"
    data = yaml.safe_load(src.read_text())
    if instances is not None:
        data["gpus"][1]["mig"] = instances
    return mock_payload(parse_profile(data))


MIG_LAYOUT = [
    {"profile": "3g.40gb", "placement": 4, "uuid": MIG_UUIDS[0]},
    {"profile": "2g.20gb", "placement": 0, "uuid": MIG_UUIDS[1]},
    {"profile": "1g.10gb", "placement": 2, "uuid": MIG_UUIDS[2]},
]


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("harness")
    (out / "harness.c").write_text(HARNESS_C)
    subprocess.run(
        ["cc", "-O1", "-Wall", "-o", str(out / "harness"), str(out / "harness.c"), "-ldl"],
        check=True,
    )
    return out / "harness"


def documented_codes() -> dict[int, str]:
    """NVML_SUCCESS and every NVML_ERROR_* that nvidia-ml-py (nvml.h) names."""
    import pynvml

    return {
        v: k for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_") or k == "NVML_SUCCESS"
    }


def run_harness(harness, lib, tmp_path, mode, kind, minors=(0, 1, 2, 3)):
    names = sorted(n for n in exported(lib) if n.startswith("nvml"))
    listfile = tmp_path / "names.txt"
    listfile.write_text("\n".join(names) + "\n")
    proc = in_private_dev([harness, lib, listfile, mode, kind], minors)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, f"exit {proc.returncode}; last call: {lines[-1:]}"
    results = {}
    for line in lines:
        name, *codes = line.split(" ")
        if name.startswith("nvml"):
            results[name] = [int(c) for c in codes]
    skipped = {"nvmlInit", "nvmlInit_v2", "nvmlInitWithFlags", "nvmlShutdown", "nvmlErrorString"}
    assert set(results) == set(names) - skipped
    return results, lines


@needs_unshare
@pytest.mark.parametrize(
    ("layout", "kind"), [(None, "gpu"), (MIG_LAYOUT, "gpu"), (MIG_LAYOUT, "mig")]
)
def test_every_export_called_from_c(built_lib, harness, tmp_path, pynvml_ready, layout, kind):
    lib = install_lib(built_lib, a100_with_mig(layout), tmp_path)
    if kind == "mig":
        # the harness takes index 0: the MIG GPU must be first, so hide the one before it
        results, lines = run_harness(
            harness, lib / "libnvidia-ml.so.1", tmp_path, "init", kind, minors=(1, 2, 3)
        )
    else:
        results, lines = run_harness(harness, lib / "libnvidia-ml.so.1", tmp_path, "init", kind)
    codes = documented_codes()
    allowed = set(codes) - {
        codes_by(codes, "NVML_ERROR_UNINITIALIZED"),
        codes_by(codes, "NVML_ERROR_FUNCTION_NOT_FOUND"),
        codes_by(codes, "NVML_ERROR_UNKNOWN"),
    }
    bad = {n: rc for n, rc in results.items() if not set(rc) <= allowed}
    assert not bad
    assert "ERRORSTRING Not Supported" in lines and "SHUTDOWN 0" in lines
    # with valid arguments the simulated queries answer
    assert results["nvmlDeviceGetUUID"][0] == 0
    assert results["nvmlEventSetWait_v2"] == [10, 10]  # NVML_ERROR_TIMEOUT: no events
    if kind == "mig":
        assert results["nvmlDeviceGetAttributes_v2"][0] == 0
        assert results["nvmlGpuInstanceGetInfo"][0] == 0
        assert results["nvmlComputeInstanceGetInfo_v2"][0] == 0
        assert results["nvmlDeviceGetTemperature"][1] == 3  # NOT_SUPPORTED on a MIG device
    else:
        assert results["nvmlDeviceGetMemoryInfo"][0] == 0
        assert results["nvmlDeviceGetAttributes_v2"][0] == 3  # MIG device handles only


def codes_by(codes: dict[int, str], name: str) -> int:
    return next(v for v, k in codes.items() if k == name)


@needs_unshare
def test_every_export_before_init_is_uninitialized(built_lib, harness, tmp_path, pynvml_ready):
    lib = install_lib(built_lib, a100_with_mig(None), tmp_path)
    results, _ = run_harness(harness, lib / "libnvidia-ml.so.1", tmp_path, "noinit", "gpu")
    # but the export table, which nvidia-smi asks for before nvmlInit (its version check):
    # the harness's arguments are no table pointer and GUID, so it refuses them
    table = results.pop("nvmlInternalGetExportTable")
    assert 1 not in table and set(table) <= {2, 3}  # INVALID_ARGUMENT, NOT_SUPPORTED
    bad = {n: rc for n, rc in results.items() if set(rc) != {1}}  # NVML_ERROR_UNINITIALIZED
    assert not bad


@needs_unshare
def test_go_nvml_only_functions_answer_not_supported(built_lib, harness, tmp_path, pynvml_ready):
    lib = install_lib(built_lib, a100_with_mig(None), tmp_path)
    names = tmp_path / "go-nvml-only.txt"
    names.write_text("\n".join(GO_NVML_ONLY) + "\n")
    proc = in_private_dev([harness, lib / "libnvidia-ml.so.1", names, "init", "gpu"], (0, 1))
    assert proc.returncode == 0, proc.stdout[-300:]
    results = {ln.split()[0]: ln.split()[1:] for ln in proc.stdout.splitlines() if ln[:4] == "nvml"}
    assert results == {name: ["3", "3", "3"] for name in GO_NVML_ONLY}  # NOT_SUPPORTED


# --------------------------------------------------------------------------
# MIG through pynvml

MIG_PROBE = textwrap.dedent(
    r"""
    import json
    import pynvml as N

    def call(fn, *a):
        try:
            v = fn(*a)
        except N.NVMLError as e:
            return "error:" + type(e).__name__
        return v.value if hasattr(v, "value") else v

    N.nvmlInit()
    out = []
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        d = {"uuid": N.nvmlDeviceGetUUID(h), "mode": call(N.nvmlDeviceGetMigMode, h),
             "max": call(N.nvmlDeviceGetMaxMigDeviceCount, h),
             "is_mig": call(N.nvmlDeviceIsMigDeviceHandle, h),
             "gi_of_gpu": call(N.nvmlDeviceGetGpuInstanceId, h),
             "attrs_of_gpu": call(N.nvmlDeviceGetAttributes, h),
             "first": call(N.nvmlDeviceGetMigDeviceHandleByIndex, h, 0), "migs": []}
        if isinstance(d["first"], str) is False:
            d["first"] = "handle"
        for j in range(d["max"] if isinstance(d["max"], int) else 0):
            try:
                m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except N.NVMLError as e:
                d["migs"].append("error:" + type(e).__name__)
                continue
            a = N.nvmlDeviceGetAttributes(m)
            gi_id = N.nvmlDeviceGetGpuInstanceId(m)
            gi = N.nvmlDeviceGetGpuInstanceById(h, gi_id)
            info = N.nvmlGpuInstanceGetInfo(gi)
            ci = N.nvmlComputeInstanceGetInfo(N.nvmlGpuInstanceGetComputeInstanceById(gi, 0))
            d["migs"].append({
                "uuid": N.nvmlDeviceGetUUID(m), "name": N.nvmlDeviceGetName(m),
                "is_mig": call(N.nvmlDeviceIsMigDeviceHandle, m),
                "parent": N.nvmlDeviceGetUUID(N.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m)),
                "gi": gi_id, "ci": N.nvmlDeviceGetComputeInstanceId(m),
                "memory": N.nvmlDeviceGetMemoryInfo(m).total,
                "attrs": [a.gpuInstanceSliceCount, a.computeInstanceSliceCount, a.memorySizeMB],
                "gi_info": [info.id, info.profileId, info.placement.start, info.placement.size],
                "ci_info": [ci.id, ci.profileId, ci.placement.size],
                "temperature": call(N.nvmlDeviceGetTemperature, m, 0),
            })
        out.append(d)
    print(json.dumps(out))
    """
)


def run_mig_probe(tmp_path, libdir, minors=(0, 1, 2, 3)):
    probe = tmp_path / "mig_probe.py"
    probe.write_text(MIG_PROBE)
    env = {"LD_LIBRARY_PATH": str(libdir), "PATH": "/usr/bin:/bin", "PYTHONPATH": ""}
    proc = in_private_dev([sys.executable, probe], minors, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_unshare
def test_mig_disabled_on_a_normal_profile(built_lib, tmp_path, pynvml_ready):
    out = run_mig_probe(tmp_path, install_lib(built_lib, a100_with_mig(None), tmp_path))
    assert len(out) == 4
    for gpu in out:  # MIG-capable A100s with MIG disabled: no MIG devices, no errors
        assert gpu["mode"] == [0, 0]
        assert gpu["max"] == 0 and gpu["migs"] == []
        assert gpu["first"] == "error:NVMLError_NotFound"
        assert gpu["is_mig"] == 0
        assert gpu["gi_of_gpu"] == "error:NVMLError_NotSupported"
        assert gpu["attrs_of_gpu"] == "error:NVMLError_NotSupported"


@needs_unshare
def test_mig_not_supported_on_a_gpu_without_mig(built_lib, tmp_path, pynvml_ready):
    from gpunode.sim.profiles import load_profile, mock_payload

    libdir = install_lib(built_lib, mock_payload(load_profile("t4x2-faulty")), tmp_path)
    out = run_mig_probe(tmp_path, libdir, minors=(0, 1))
    assert [g["mode"] for g in out] == ["error:NVMLError_NotSupported"] * 2
    assert [g["max"] for g in out] == [0, 0]


@needs_unshare
def test_mig_profile_shows_its_instances(built_lib, tmp_path, pynvml_ready):
    out = run_mig_probe(tmp_path, install_lib(built_lib, a100_with_mig(MIG_LAYOUT), tmp_path))
    plain, mig = out[0], out[1]
    assert plain["mode"] == [0, 0] and plain["migs"] == []
    assert mig["mode"] == [1, 1] and mig["max"] == 7
    assert mig["first"] == "handle"
    found, missing = mig["migs"][:3], mig["migs"][3:]
    assert missing == ["error:NVMLError_NotFound"] * 4
    # ordered by GPU instance id: 3g@4 (GI 2), 2g@0 (GI 3), 1g@2 (GI 9)
    assert [m["uuid"] for m in found] == MIG_UUIDS
    assert [m["name"] for m in found] == [
        "NVIDIA A100-SXM4-80GB MIG 3g.40gb",
        "NVIDIA A100-SXM4-80GB MIG 2g.20gb",
        "NVIDIA A100-SXM4-80GB MIG 1g.10gb",
    ]
    assert all(m["is_mig"] == 1 and m["parent"] == mig["uuid"] for m in found)
    assert [(m["gi"], m["ci"]) for m in found] == [(2, 0), (3, 0), (9, 0)]
    assert [m["memory"] for m in found] == [40 * GIB, 20 * GIB, 10 * GIB]
    assert [m["attrs"] for m in found] == [[3, 3, 40960], [2, 2, 20480], [1, 1, 10240]]
    assert [m["gi_info"] for m in found] == [[2, 9, 4, 4], [3, 14, 0, 2], [9, 19, 2, 1]]
    assert [m["ci_info"] for m in found] == [[0, 2, 3], [0, 1, 2], [0, 0, 1]]
    assert {m["temperature"] for m in found} == {"error:NVMLError_NotSupported"}
    # without its parent's device node, a MIG device is not there either
    out = run_mig_probe(
        tmp_path, install_lib(built_lib, a100_with_mig(MIG_LAYOUT), tmp_path), minors=(0, 2)
    )
    assert [g["max"] for g in out] == [0, 0]
