"""`gpunode inventory`'s GPU records: MIG mode (current and pending) and the MIG devices
under their GPU, in the JSON and the table, from a fake pynvml."""

from __future__ import annotations

import json
import types

from gpunode.nvidia import inventory
from gpunode.nvidia.facts import MigFacts

from .test_mig import Mem, MigNvml


class InvNvml(MigNvml):
    """Two GPUs: "gpu" with MIG on (MigNvml's three MIG devices), "t4" without MIG."""

    class NVMLError(Exception):
        pass

    class NVMLError_NotFound(NVMLError):
        pass

    class NVMLError_NotSupported(NVMLError):
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

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


def gpus():
    nv = InvNvml()
    return [inventory._nvml_gpu(nv, 0, "gpu", None), inventory._nvml_gpu(nv, 1, "t4", None)]


def test_mig_devices_in_the_inventory_json():
    a100, t4 = gpus()
    assert (a100.mig_mode, a100.mig_mode_pending, t4.mig_mode, t4.mig_mode_pending) == (
        True, True, None, None)  # fmt: skip
    d = a100.to_dict()
    assert d["mig_devices"][1] == {"index": 1, "uuid": "MIG-00000002-0000-0000-0000-000000000000",
                                   "gi": 5, "ci": 0, "profile": "1g.10gb", "memory_mib": 9856}  # fmt: skip
    assert [m["index"] for m in d["mig_devices"]] == [0, 1, 2]
    assert t4.to_dict()["mig_devices"] == [] and "lost" not in d and d["health"] == []
    inv = inventory.Inventory("nvml", "535.261.03", "12.2", "12.535", [a100, t4])
    doc = json.loads(json.dumps(inv.to_dict()))
    assert doc["schema"] == "gpunode.inventory/v1"
    assert doc["gpus"][0]["mig_devices"][0]["profile"] == "3g.40gb"


def test_mig_devices_under_their_gpu_in_the_table():
    a100, t4 = gpus()
    text = inventory.format_table(inventory.Inventory("nvml", "535.261.03", "12.2", "12.535",
                                                      [a100, t4], hostname="n1"))  # fmt: skip
    lines = text.splitlines()
    assert lines[2].endswith("NVIDIA A100-SXM4-80GB [ok] MIG on, 3 MIG device(s)")
    assert lines[3].split() == ["0:0", "MIG-00000000-0000-0000-0000-000000000000", "40192",
                                "MiB", "MIG", "3g.40gb", "(GI", "1,", "CI", "0)"]  # fmt: skip
    assert lines[5].split()[0] == "0:2" and "1c.3g.40gb" in lines[5]
    assert lines[6].endswith("Tesla T4 [ok]")  # no MIG: no note


def test_pending_mode_shows_in_the_table():
    g = inventory.GpuInfo(0, 0, "GPU-a", "A100", "00000000:07:00.0", mig_mode=False,
                          mig_mode_pending=True)  # fmt: skip
    assert inventory._mig_mode(g) == " MIG off (on after a GPU reset)"
    g.mig_mode, g.mig_mode_pending = True, True
    g.mig_devices = [MigFacts(0, "MIG-x", 1, 0, "7g.80gb", 81920)]
    assert inventory._mig_mode(g) == " MIG on, 1 MIG device(s)"
