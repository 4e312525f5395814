"""The one NVML walker, on a fake pynvml: what discovery and the inventory both rely on."""

from __future__ import annotations

import sys
import types

import pytest

from gpunode.nvidia import nvml


class FakeNvml(types.SimpleNamespace):
    """pynvml's surface as the walker uses it: three GPUs, the second lost, the third with
    neither brand nor compute capability."""

    class NVMLError(Exception):
        pass

    class NVMLError_GpuIsLost(NVMLError):
        pass

    def __init__(self):
        super().__init__(calls=[])

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlSystemGetDriverVersion(self):
        return b"535.261.03"

    def nvmlSystemGetCudaDriverVersion(self):
        return 12020

    def nvmlDeviceGetCount(self):
        return 3

    def nvmlDeviceGetHandleByIndex(self, i):
        if i == 1:
            raise self.NVMLError_GpuIsLost()
        return f"h{i}"

    def nvmlDeviceGetBrand(self, h):
        if h == "h2":
            raise self.NVMLError()
        return 2

    def nvmlDeviceGetCudaComputeCapability(self, h):
        if h == "h2":
            raise self.NVMLError()
        return (8, 0)

    def nvmlDeviceGetMinorNumber(self, h):
        return int(h[1:])

    def nvmlDeviceGetUUID(self, h):
        return f"GPU-{h}"

    def nvmlDeviceGetPciInfo(self, h):
        bus = f"00000000:0{h[1:]}:00.0".encode()
        if h == "h2":  # a binding whose nvmlPciInfo_t has no pciDeviceId
            return types.SimpleNamespace(busId=bus)
        return types.SimpleNamespace(busId=bus, pciDeviceId=0x20B210DE)

    def nvmlDeviceGetName(self, h):
        return "NVIDIA A100"

    def nvmlDeviceGetSerial(self, h):
        if h == "h2":  # a board NVML gives no serial for (NOT_SUPPORTED)
            raise self.NVMLError()
        return b"1323620018001"


def test_walk():
    nv = FakeNvml()
    assert nvml.system(nv) == ("535.261.03", "12.2")
    walked = list(nvml.handles(nv))
    assert [(i, h) for i, h, _ in walked] == [(0, "h0"), (1, None), (2, "h2")]
    assert isinstance(walked[1][2], nv.NVMLError_GpuIsLost)
    g0 = nvml.gpu_facts(nv, 0, "h0")
    assert (g0.minor, g0.uuid, g0.pci_bus_id, g0.brand, g0.compute_capability) == (
        0,
        "GPU-h0",
        "00000000:00:00.0",
        "tesla",
        "8.0",
    )
    g2 = nvml.gpu_facts(nv, 2, "h2")
    assert (g2.brand, g2.compute_capability) == ("unknown", "")
    # the runtime's facts are the walk's record, cut down: the record says None for what NVML
    # cannot tell, the cache ""
    record = nvml.read_gpu(nv, 2, "h2")
    assert (record.brand, record.compute_capability, record.mig_mode) == ("unknown", None, None)
    # the PCI device id a mig-parted device-filter names (gpunode mig, validate)
    assert (nvml.read_gpu(nv, 0, "h0").pci_device_id, record.pci_device_id) == (0x20B210DE, None)
    assert record.facts() == g2 and record.mig_devices == []
    # the board's serial (gpunode watch labels its GPU series with it); None when not told
    assert (nvml.read_gpu(nv, 0, "h0").serial, record.serial) == ("1323620018001", None)


def test_session_opens_and_shuts_down(monkeypatch):
    nv = FakeNvml()
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    with nvml.Session() as opened:
        assert opened is nv and nv.calls == ["init"]
    assert nv.calls == ["init", "shutdown"]

    def broken():
        raise nv.NVMLError("Driver Not Loaded")

    nv.nvmlInit = broken
    with (
        pytest.raises(nvml.NvmlError, match=r"^NVML cannot be initialised: Driver Not Loaded$"),
        nvml.Session(),
    ):
        pass
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with pytest.raises(nvml.NvmlError, match="nvidia-ml-py"), nvml.Session():
        pass


def test_brands_are_nvml_codes():
    assert nvml.BRANDS["tesla"] == 2 and nvml.BRAND_NAMES[14] == "nvidia"
    assert len(nvml.BRAND_NAMES) == len(nvml.BRANDS)
