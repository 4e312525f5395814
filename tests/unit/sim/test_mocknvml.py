"""Tests for the mock NVML library (src/gpunode/sim/mocknvml.{c,py}).

The library is built with the system C compiler, a profile is embedded, and an
unmodified pynvml (nvidia-ml-py) is run against it in a child process inside a
private mount namespace (``unshare -m``) whose /dev is a tmpfs holding only the
device nodes a case needs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

try:
    import gpunode  # noqa: F401
except ImportError:  # running from a checkout without an installed package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from gpunode.sim import mocknvml
from gpunode.sim.mocknvml import BLOB_SIZE, MAGIC, MockBuildError

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


def _unshare_problem() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare(1) not found"
    try:
        proc = subprocess.run(
            ["unshare", "-m", "sh", "-c", "mount -t tmpfs none /dev"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare -m failed to run: {exc}"
    if proc.returncode != 0:
        return f"unshare -m / tmpfs mount not permitted: {proc.stderr.strip()}"
    return None


_UNSHARE_PROBLEM = _unshare_problem()
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
    setup = ["mount -t tmpfs none /dev", "mknod /dev/null c 1 3"]
    if ctl:
        setup.append("mknod /dev/nvidiactl c 195 255")
    for m in minors:
        setup.append(f"mknod /dev/nvidia{m} c 195 {m}")
    setup += extra
    script = " && ".join(setup) + ' && exec "$0" "$@"'
    env = {"LD_LIBRARY_PATH": str(libdir), "PATH": "/usr/bin:/bin", "PYTHONPATH": ""}
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, sys.executable, str(probe), json.dumps(args or {})],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------
# build / embed


def test_source_is_package_data():
    src = mocknvml.source_path()
    assert src.name == "mocknvml.c" and src.is_file()
    assert src.read_bytes().count(MAGIC.rstrip(b"\n")) == 1


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
    assert "gpunode_profile_blob" in names
    assert {"nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetClockInfo"} <= names
    stray = {n for n in names if not n.startswith("nvml") and n != "gpunode_profile_blob"}
    assert not stray


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
    assert out["fan_v2"] == "error:NVMLError_FunctionNotFound"
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
