"""gpunode.nvidia.inventory's reads for the link and state checks (PCIe, replays, clock event
reasons, NVLink, fabric, InfoROM) on a fake pynvml: what each NVML answer becomes, and that
NOT_SUPPORTED, a missing binding or a missing driver function leave the field empty."""

from __future__ import annotations

import json
import types

import pynvml
import pytest

from gpunode.nvidia import inventory
from gpunode.nvidia.gpu import Fabric, Gpu, PcieLink
from gpunode.nvidia.inventory import _read_links

from .test_mig import Mem, MigNvml

E = pynvml  # the real bindings' error classes and structures


def fake(**over):
    """A pynvml whose GPU is an H100 in a Gen5 x16 slot: 18 NVLinks, link 5 down, fabric
    trained; ``over`` replaces (or, given None, removes) a function."""

    def fabric_v(h, ref):
        info = ref._obj  # passed by reference, as the C function needs
        assert info.version == E.nvmlGpuFabricInfo_v2
        info.state, info.status = E.NVML_GPU_FABRIC_STATE_COMPLETED, 0

    def nvlink(h, link):
        if link >= 18:
            raise E.NVMLError_InvalidArgument()
        return int(link != 5)

    ns = types.SimpleNamespace(
        nvmlDeviceGetCurrPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetGpuMaxPcieLinkGeneration=lambda h: 5,
        nvmlDeviceGetCurrPcieLinkWidth=lambda h: 8,
        nvmlDeviceGetMaxPcieLinkWidth=lambda h: 16,
        nvmlDeviceGetPcieReplayCounter=lambda h: 3,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0x21,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x7,
        nvmlDeviceGetNvLinkState=nvlink,
        nvmlDeviceGetGpuFabricInfoV=fabric_v,
        nvmlDeviceGetGpuFabricInfo=lambda h, info: pytest.fail("v1 asked though V answered"),
        nvmlDeviceValidateInforom=lambda h: None,
        nvmlErrorString={999: "Unknown Error"}.get,
        NVML_NVLINK_MAX_LINKS=36,
        c_nvmlGpuFabricInfo_v2_t=E.c_nvmlGpuFabricInfo_v2_t,
        c_nvmlGpuFabricInfo_t=E.c_nvmlGpuFabricInfo_t,
        nvmlGpuFabricInfo_v2=E.nvmlGpuFabricInfo_v2,
        byref=E.byref,
    )
    for name in dir(E):
        if name.startswith("NVMLError"):
            setattr(ns, name, getattr(E, name))
    for name, fn in over.items():
        if fn is None:
            delattr(ns, name)
        else:
            setattr(ns, name, fn)
    return ns


def read(nv) -> Gpu:
    gpu = Gpu(0, 0, "GPU-x", "NVIDIA H100 80GB HBM3", "00000000:18:00.0")
    _read_links(nv, "h0", gpu)
    return gpu


def raises(exc):
    def fn(*args):
        raise exc()

    return fn


def test_every_read_on_a_gpu_that_reports_all():
    gpu = read(fake())
    assert gpu.pcie_link == PcieLink(gen=5, max_gen=5, gpu_max_gen=5, width=8, max_width=16)
    assert gpu.pcie_replays == 3
    assert gpu.clocks_event_reasons == 0x21  # the events call, not the deprecated one
    assert gpu.nvlinks == {i: i != 5 for i in range(18)}
    assert gpu.fabric == Fabric(state=3, status=0, status_text="Success")
    assert gpu.inforom_valid is True
    shown = gpu.to_dict()
    assert shown["nvlinks"][5] is False
    assert shown["pcie_link"] == {"gen": 5, "max_gen": 5, "gpu_max_gen": 5, "width": 8, "max_width": 16}
    assert shown["fabric"] == {"state": 3, "status": 0, "status_text": "Success"}


def test_a_gpu_without_nvlink_fabric_or_inforom_validation():
    nv = fake(
        nvmlDeviceGetNvLinkState=raises(E.NVMLError_NotSupported),
        nvmlDeviceGetGpuFabricInfoV=raises(E.NVMLError_NotSupported),
        nvmlDeviceGetGpuFabricInfo=raises(E.NVMLError_NotSupported),
        nvmlDeviceValidateInforom=raises(E.NVMLError_NotSupported),
        nvmlDeviceGetPcieReplayCounter=raises(E.NVMLError_NotSupported),
        nvmlDeviceGetGpuMaxPcieLinkGeneration=raises(E.NVMLError_NotSupported),
    )
    gpu = read(nv)
    assert gpu.nvlinks == {} and gpu.fabric is None and gpu.inforom_valid is None
    assert gpu.pcie_replays is None and gpu.pcie_link.gpu_max_gen is None
    shown = gpu.to_dict()  # a field NVML does not report is left out, no sub-record is {}
    assert shown["fabric"] == {} and "gpu_max_gen" not in shown["pcie_link"]


def test_a_corrupted_inforom_and_a_failed_fabric():
    def fabric_v(h, ref):
        ref._obj.state, ref._obj.status = E.NVML_GPU_FABRIC_STATE_COMPLETED, 999

    gpu = read(fake(nvmlDeviceValidateInforom=raises(E.NVMLError_CorruptedInforom),
                    nvmlDeviceGetGpuFabricInfoV=fabric_v))  # fmt: skip
    assert gpu.inforom_valid is False
    assert gpu.fabric == Fabric(state=3, status=999, status_text="Unknown Error")


def test_fabric_state_not_supported_is_no_fabric():
    gpu = read(fake(nvmlDeviceGetGpuFabricInfoV=lambda h, info: None))  # state 0
    assert gpu.fabric is None


def test_older_bindings_and_drivers_fall_back():
    """Bindings without the events call, a driver without the V fabric call or the GPU-max
    call: the throttle-reasons call and nvmlDeviceGetGpuFabricInfo answer instead."""

    def fabric_v1(h, ref):
        assert not hasattr(ref._obj, "version")
        ref._obj.state, ref._obj.status = E.NVML_GPU_FABRIC_STATE_IN_PROGRESS, 0

    gpu = read(fake(nvmlDeviceGetCurrentClocksEventReasons=None,
                    nvmlDeviceGetGpuFabricInfoV=raises(E.NVMLError_FunctionNotFound),
                    nvmlDeviceGetGpuFabricInfo=fabric_v1,
                    nvmlDeviceGetGpuMaxPcieLinkGeneration=None))  # fmt: skip
    assert gpu.clocks_event_reasons == 0x7
    assert gpu.fabric.state == 2 and gpu.pcie_link.gpu_max_gen is None
    gpu = read(fake(nvmlDeviceGetCurrentClocksEventReasons=raises(E.NVMLError_FunctionNotFound),
                    nvmlDeviceGetGpuFabricInfoV=raises(E.NVMLError_ArgumentVersionMismatch),
                    nvmlDeviceGetGpuFabricInfo=fabric_v1))  # fmt: skip
    assert gpu.clocks_event_reasons == 0x7 and gpu.fabric.state == 2
    gpu = read(fake(nvmlDeviceGetCurrentClocksEventReasons=None,
                    nvmlDeviceGetCurrentClocksThrottleReasons=None,
                    nvmlDeviceValidateInforom=None, nvmlDeviceGetNvLinkState=None))  # fmt: skip
    assert gpu.clocks_event_reasons is None and gpu.inforom_valid is None and gpu.nvlinks == {}


def test_links_nvml_does_not_have_are_skipped_not_the_end():
    """A link in the middle NVML says NOT_SUPPORTED (not connected) for: the walk goes on."""

    def nvlink(h, link):
        if link in (2, 3) or link >= 8:
            raise (E.NVMLError_NotSupported if link < 8 else E.NVMLError_InvalidArgument)()
        return 1

    gpu = read(fake(nvmlDeviceGetNvLinkState=nvlink))
    assert sorted(gpu.nvlinks) == [0, 1, 4, 5, 6, 7]


# ---------------------------------------------------------------- MIG (issue 20)
# MIG mode (current and pending) and the MIG devices under their GPU, in the JSON and the
# table, from a fake pynvml.


class InvNvml(MigNvml):
    """Two GPUs: "gpu" with MIG on (MigNvml's three MIG devices), "t4" without MIG."""

    NVML_TEMPERATURE_GPU = 0
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1

    def _unsupported(self, *a):
        raise self.NVMLError_NotSupported()

    nvmlDeviceGetPersistenceMode = nvmlDeviceGetEccMode = nvmlDeviceGetTemperature = _unsupported
    nvmlDeviceGetRetiredPages = nvmlDeviceGetRetiredPagesPendingStatus = _unsupported
    nvmlDeviceGetRemappedRows = nvmlDeviceGetBrand = _unsupported
    nvmlDeviceGetCudaComputeCapability = _unsupported

    def nvmlDeviceGetMigMode(self, h):
        if h == "t4":
            raise self.NVMLError_NotSupported()
        return (1, 1)

    def nvmlDeviceGetMinorNumber(self, h):
        return 0 if h == "gpu" else 1

    def nvmlDeviceGetUUID(self, h):
        return {"gpu": "GPU-a", "t4": "GPU-t"}.get(h) or super().nvmlDeviceGetUUID(h)

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId=b"00000000:07:00.0" if h == "gpu" else b"00000000:0F:00.0")

    def nvmlDeviceGetName(self, h):
        if h in ("gpu", "t4"):
            return "NVIDIA A100-SXM4-80GB" if h == "gpu" else "Tesla T4"
        return super().nvmlDeviceGetName(h)

    def nvmlDeviceGetMemoryInfo(self, h):
        if h in ("gpu", "t4"):
            m = Mem(81920)
            m.used = 0
            return m
        return super().nvmlDeviceGetMemoryInfo(h)


for _name in dir(E):  # the real bindings' error classes, as the inventory catches them
    if _name.startswith("NVMLError"):
        setattr(InvNvml, _name, getattr(E, _name))


def gpus():
    nv = InvNvml()
    return [inventory._nvml_gpu(nv, 0, "gpu", None), inventory._nvml_gpu(nv, 1, "t4", None)]


# gpunode.inventory/v1: a GPU's keys, in order (the record's fields, less brand, lost and
# missing, then the health flags)
INVENTORY_GPU_KEYS = [
    "index", "minor", "uuid", "name", "pci_bus_id", "serial", "pci_device_id", "memory_total_mib",
    "memory_used_mib", "compute_capability", "persistence_mode", "ecc_mode", "mig_mode",
    "mig_mode_pending", "mig_devices", "ecc_errors", "retired_pages", "remapped_rows",
    "temperature_c", "xid_errors", "xid_sources", "pcie_link", "pcie_replays",
    "clocks_event_reasons", "nvlinks", "fabric", "inforom_valid", "health",
]  # fmt: skip


def test_mig_devices_in_the_inventory_json():
    a100, t4 = gpus()
    assert (a100.mig_mode, a100.mig_mode_pending, t4.mig_mode, t4.mig_mode_pending) == (
        True, True, None, None)  # fmt: skip
    d = a100.to_dict()
    assert d["mig_devices"][1] == {"index": 1, "uuid": "MIG-00000002-0000-0000-0000-000000000000",
                                   "gi": 5, "ci": 0, "profile": "1g.10gb", "memory_mib": 9856}  # fmt: skip
    assert [m["index"] for m in d["mig_devices"]] == [0, 1, 2]
    assert t4.to_dict()["mig_devices"] == [] and "lost" not in d and "brand" not in d
    inv = inventory.Inventory("nvml", "535.261.03", "12.2", "12.535", [a100, t4])
    doc = json.loads(json.dumps(inv.to_dict()))
    assert doc["schema"] == "gpunode.inventory/v1" and doc["gpus"][0]["health"] == []
    assert list(doc["gpus"][0]) == INVENTORY_GPU_KEYS
    assert doc["gpus"][0]["mig_devices"][0]["profile"] == "3g.40gb"
