"""NVML's Xid events: registered per GPU, drained without waiting, added to the GPUs'."""

from __future__ import annotations

import types

import pytest

from gpunode.nvidia import health, xidevents
from gpunode.nvidia.inventory import Inventory, attach_xid_events

from ..validate.fakes import healthy_gpu


class Data(types.SimpleNamespace):
    pass


class FakeNvml(types.SimpleNamespace):
    """Two GPUs; the second supports no Xid events. Events queued on the set are delivered
    one per wait, then TIMEOUT."""

    class NVMLError(Exception):
        pass

    class NVMLError_Timeout(NVMLError):
        pass

    def __init__(self, queue):
        super().__init__(queue=list(queue), registered=[], freed=False, shut=False)

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return 2

    def nvmlDeviceGetHandleByIndex(self, i):
        return f"h{i}"

    def nvmlEventSetCreate(self):
        return "set"

    def nvmlEventSetFree(self, s):
        self.freed = True

    def nvmlDeviceGetSupportedEventTypes(self, h):
        return 0x8 | 0x1 if h == "h0" else 0x1

    def nvmlDeviceRegisterEvents(self, h, types_, s):
        assert types_ == 0x8 and s == "set"
        self.registered.append(h)

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(busId={"h0": b"00000000:07:00.0", "h1": b"00000000:0F:00.0"}[h])

    def nvmlEventSetWait_v2(self, s, timeout):
        assert timeout == 0  # never waits
        if not self.queue:
            raise self.NVMLError_Timeout()
        return self.queue.pop(0)


@pytest.fixture
def fake(monkeypatch):
    def install(queue):
        nv = FakeNvml(queue)
        monkeypatch.setattr(xidevents.nvml.Session, "__enter__", lambda self: nv)
        monkeypatch.setattr(xidevents.nvml.Session, "__exit__", lambda self, *a: nv.nvmlShutdown())
        return nv

    return install


def test_only_gpus_with_xid_events_are_watched_and_events_are_drained(fake):
    nv = fake([
        Data(device="h0", eventType=0x8, eventData=79, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF),
        Data(device="h0", eventType=0x1, eventData=0, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF),
        Data(device="h0", eventType=0x8, eventData=31, gpuInstanceId=2, computeInstanceId=0),
    ])  # fmt: skip
    with xidevents.XidWatch() as w:
        assert nv.registered == ["h0"] and w.watched == ["00000000:07:00.0"]
        assert w.unavailable is None
        assert w.drain() == [("00000000:07:00.0", 79, None, None), ("00000000:07:00.0", 31, 2, 0)]
        assert w.drain() == []
    assert nv.freed and nv.shut


def test_no_nvml_means_nothing_watched_with_the_reason(monkeypatch):
    def refuse(self):
        raise xidevents.nvml.NvmlError("NVML cannot be initialised: Driver Not Loaded")

    monkeypatch.setattr(xidevents.nvml.Session, "__enter__", refuse)
    with xidevents.XidWatch() as w:
        assert w.drain() == [] and "Driver Not Loaded" in w.unavailable


def test_events_join_the_gpus_xid_errors():
    gpus = [healthy_gpu(0, pci_bus_id="00000000:07:00.0"), healthy_gpu(1, pci_bus_id="00000000:0F:00.0")]
    inv = Inventory("nvml", "535.261.03", "12.2", "12.535.261.03", gpus)
    attach_xid_events(inv, [("00000000:07:00.0", 79, None, None), ("00000000:99:00.0", 48, None, None)],
                      "NVML events while validating")  # fmt: skip
    assert [(e.xid, e.source, e.verdict) for e in gpus[0].xid_errors] == [(79, "nvml", "fail")]
    assert gpus[1].xid_errors == [] and gpus[1].xid_sources[-1] == "NVML events while validating"
    shown = gpus[0].to_dict()["xid_errors"]  # gpunode.inventory/v1: each Xid an object
    assert list(shown[0]) == ["xid", "kind", "verdict", "pid", "process", "message", "source"]
    assert (shown[0]["xid"], shown[0]["pid"], shown[0]["source"]) == (79, "", "nvml")
    assert inv.problems[0]["issue"] == "xid_unmatched"
    assert health.flags(gpus[0]) == ["xid_error"]
