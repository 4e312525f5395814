"""Xid events through the mock NVML: an Xid the simulator raises (gpunode.sim.xidraise) is
delivered, as the driver delivers it, to processes registered for nvmlEventTypeXidCriticalError
on that GPU (gpunode.nvidia.xidevents.XidWatch) and logged in the node's /dev/kmsg."""

from __future__ import annotations

from .test_migstate import run
from .test_mocknvml import (  # noqa: F401  (fixtures)
    built_lib,
    needs_unshare,
    pynvml_ready,
)

CASE = r"""
from pathlib import Path
from gpunode.nvidia import xid
from gpunode.nvidia.xidevents import XidWatch
from gpunode.sim.xidraise import raise_xid

os.makedirs("/proc/driver/.gpunode-sim", exist_ok=True)
Path("/dev/kmsg").write_text("6,0,5000000,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n")
r = {}
raise_xid("0000:07:00.0", "13")  # before anyone watches: only in the log
with XidWatch() as w:
    r["watched"] = w.watched
    r["first"] = w.drain()
    raise_xid("0000:07:00.0", "79")
    raise_xid("0000:0f:00.0", "48")
    raise_xid("0000:99:00.0", "74")  # a bus no GPU has: no event
    r["events"] = w.drain()
    r["again"] = w.drain()
N.nvmlInit()
s = N.nvmlEventSetCreate()
t0 = __import__("time").monotonic()
try:
    N.nvmlEventSetWait_v2(s, 300)
except N.NVMLError_Timeout:
    r["timeout_ms"] = int((__import__("time").monotonic() - t0) * 1000)
r["log"] = [(e.xid, e.bus.procfs) for e in xid.parse_log(open("/dev/kmsg").read())]
print(json.dumps(r))
"""


@needs_unshare
def test_a_raised_xid_reaches_the_watchers_of_that_gpu_and_the_log(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    r = run(built_lib, tmp_path, CASE)
    assert r["watched"] == ["00000000:07:00.0", "00000000:0F:00.0"]
    assert r["first"] == []  # the Xid raised before registering is not delivered
    assert r["events"] == [["00000000:07:00.0", 79, None, None], ["00000000:0F:00.0", 48, None, None]]
    assert r["again"] == []
    assert 250 <= r["timeout_ms"] < 2000  # a wait with nothing to deliver waits its timeout
    assert r["log"] == [[13, "0000:07:00.0"], [79, "0000:07:00.0"], [48, "0000:0f:00.0"], [74, "0000:99:00.0"]]


def test_bad_input_is_one_line(tmp_path):
    import pytest

    from gpunode.sim.xidraise import raise_xid
    from gpunode.util.command import UsageError

    events = tmp_path / "sim" / "events"
    with pytest.raises(UsageError, match="bus id 'zz' is not"):
        raise_xid("zz", "79", tmp_path / "kmsg", events)
    with pytest.raises(UsageError, match="Xid '0' is not a number from 1 to 65535"):
        raise_xid("0000:07:00.0", "0", tmp_path / "kmsg", events)
    with pytest.raises(UsageError, match="no simulated driver is loaded here"):
        raise_xid("0000:07:00.0", "79", tmp_path / "kmsg", events)
