"""node.fabric_manager and the gpu.fabric_manager rows on an NVSwitch node: the facts as a
node shows them (PCI sysfs, /proc/driver/nvidia-nvswitch, systemctl, the journal, dpkg-query)
and a verdict naming the reason for each way the fabric manager fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpunode.nvidia import fabric
from gpunode.nvidia.fabric import FabricNode
from gpunode.validate import fabric as facts
from gpunode.validate import gpus
from gpunode.validate.expect import Expectations

from .fakes import healthy_gpu, inventory

DRIVER = "535.261.03"  # fakes.inventory's driver
H100 = "NVIDIA H100 80GB HBM3"
SWITCHES = [(f"0000:{b}:00.0", 0x22A3) for b in ("e3", "e4", "e5", "e6")]
A100_SWITCHES = [(f"0000:{b:02x}:00.0", 0x1AF1) for b in range(0xC4, 0xCA)]
MISMATCH = (
    "fabric manager NVIDIA GPU driver interface version 535.230.02 don't match with driver "
    "version 535.261.03. Please update with matching NVIDIA driver package."
)


def sysfs(root: Path, functions: dict[str, tuple[str, str, str]]) -> None:
    for address, (vendor, device, klass) in functions.items():
        d = root / "sys/bus/pci/devices" / address
        d.mkdir(parents=True)
        for name, value in (("vendor", vendor), ("device", device), ("class", klass)):
            (d / name).write_text(value + "\n")


def test_switches_from_pci_and_the_driver(tmp_path):
    sysfs(tmp_path, {
        "0000:07:00.0": ("0x10de", "0x2330", "0x030200"),  # an H100: a GPU, not a switch
        "0000:e3:00.0": ("0x10de", "0x22a3", "0x068000"),  # H100 NVSwitch (LS10)
        "0000:e4:00.0": ("0x10de", "0x22a3", "0x068000"),
        "0000:c4:00.0": ("0x10de", "0x1af1", "0x068000"),  # A100 NVSwitch (LR10)
        "0000:e8:00.0": ("0x10de", "0x22a8", "0x060400"),  # LS10's PCI-PCI bridge function
        "0000:00:01.0": ("0x8086", "0x1af1", "0x068000"),  # not NVIDIA's
    })  # fmt: skip
    assert fabric.pci_switches(tmp_path) == [
        ("0000:c4:00.0", 0x1AF1), ("0000:e3:00.0", 0x22A3), ("0000:e4:00.0", 0x22A3)]  # fmt: skip
    assert fabric.driver_switches(tmp_path) is None  # no NVSwitch tree: no driver
    (tmp_path / fabric.PROC_SWITCHES / "0000:e3:00.0").mkdir(parents=True)
    assert fabric.driver_switches(tmp_path) == ["0000:e3:00.0"]
    assert FabricNode(pci=SWITCHES).board() == "4 NVSwitch(es), H100/H200 generation"
    assert FabricNode(pci=A100_SWITCHES).board() == "6 NVSwitch(es), A100 generation"


def test_fms_last_words_from_the_journal():
    journal = "\n".join([
        "[Nov 28 2026 03:40:00] [INFO] [tid 41] Fabric Manager version 535.230.02 is running",
        f"[Nov 28 2026 03:40:00] [ERROR] [tid 41] {MISMATCH}",
        "nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE",
    ])  # fmt: skip
    assert fabric.last_words(journal) == MISMATCH
    newer = "fabric manager NVIDIA GPU driver interface version 1 doesn't match with driver 2"
    assert fabric.last_words(newer) == newer
    assert fabric.last_words("started\nstopped") is None


class FakeNode:
    """systemctl, journalctl and dpkg-query answering as on a node."""

    def __init__(self, service="active", packages=("nvidia-fabricmanager-535|installed|535.261.03-1",),
                 journal=""):  # fmt: skip
        self.service, self.packages, self.journal = service, packages, journal
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        if argv[0] == "systemctl":
            return (0 if self.service == "active" else 3), self.service + "\n", ""
        if argv[0] == "journalctl":
            return 0, self.journal, ""
        if argv[0] == "dpkg-query":
            return (0 if self.packages else 1), "".join(p + "\n" for p in self.packages), ""
        raise AssertionError(argv)


def which(name):
    return f"/usr/bin/{name}" if name in ("systemctl", "journalctl", "dpkg-query") else None


def test_collect_asks_nothing_on_a_node_without_nvswitches(tmp_path):
    runner = FakeNode()
    node = facts.collect(tmp_path, runner, which)
    assert not node.nvswitch and runner.calls == []


def test_collect_reads_unit_journal_and_package(tmp_path):
    sysfs(tmp_path, {a: ("0x10de", f"0x{d:04x}", "0x068000") for a, d in SWITCHES})
    for a, _ in SWITCHES:
        (tmp_path / fabric.PROC_SWITCHES / a).mkdir(parents=True)
    runner = FakeNode(service="failed", journal=f"[x] [ERROR] [tid 1] {MISMATCH}\n",
                      packages=["nvidia-fabricmanager-dev-535|installed|535.230.02-1",
                                "nvidia-fabricmanager-535|installed|535.230.02-1"])  # fmt: skip
    node = facts.collect(tmp_path, runner, which)
    assert (node.pci, node.driver) == (SWITCHES, [a for a, _ in SWITCHES])
    assert (node.service, node.last_words) == ("failed", MISMATCH)
    assert node.package == ("nvidia-fabricmanager-535", "535.230.02") and node.packages_known


def test_no_systemd_to_ask_is_unknown_not_down(tmp_path):
    sysfs(tmp_path, {a: ("0x10de", f"0x{d:04x}", "0x068000") for a, d in SWITCHES})

    def runner(argv):
        if argv[0] == "systemctl":
            return 1, "", "System has not been booted with systemd as init system (PID 1)."
        return FakeNode()(argv)

    assert facts.collect(tmp_path, runner, which).service is None


# ---------------------------------------------------------------------------------------
# verdicts


def hopper(state=3, status=0, text="Success"):
    fab = {"state": state, "status": status, "status_text": text}
    return [healthy_gpu(i, name=H100, fabric=fab) for i in range(4)]


def a100():
    return [healthy_gpu(i, fabric={}) for i in range(4)]  # NVML: NOT_SUPPORTED


def node(**kw) -> FabricNode:
    base = {"pci": SWITCHES, "driver": [a for a, _ in SWITCHES], "service": "active",
            "package": ("nvidia-fabricmanager-535", DRIVER), "packages_known": True}  # fmt: skip
    return FabricNode(**{**base, **kw})


def run(gpu_list, fab):
    _, checks = gpus.evaluate(inventory(gpu_list), None, Expectations(gpus=4), 0.1, fab)
    node_check = next(c for c in checks if c.id == "node.fabric_manager")
    rows = [c for c in checks if c.id == "gpu.fabric_manager"]
    return node_check, rows


def test_a_healthy_hopper_node_passes():
    check, rows = run(hopper(), node())
    assert check.status == "pass" and check.gpu is None
    assert check.detail == (
        "4 NVSwitch(es), H100/H200 generation; nvidia-fabricmanager.service active, "
        "nvidia-fabricmanager-535 535.261.03 at the driver's version; fabric trained on all 4 "
        "GPUs"
    )
    assert [r.status for r in rows] == ["pass"] * 4 and rows[
        0
    ].detail == "fabric training completed"


def test_a_healthy_a100_node_passes_on_the_service():
    check, rows = run(a100(), node(pci=A100_SWITCHES, driver=[a for a, _ in A100_SWITCHES]))
    assert (
        check.status == "pass"
        and "A100 generation): the service is their readiness" in check.detail
    )
    assert [r.status for r in rows] == ["pass"] * 4
    assert rows[0].detail.startswith("NVML reports no fabric state for this GPU (A100 generation)")


REASONS = [
    ({"service": "inactive"}, "nvidia-fabricmanager.service is inactive"),
    ({"service": "failed", "last_words": MISMATCH},
     f"nvidia-fabricmanager.service is failed: {MISMATCH}"),
    ({"package": None}, "no fabric manager package is installed: install nvidia-fabricmanager "
                        "at the driver's version 535.261.03"),
    ({"package": ("nvidia-fabricmanager-535", "535.230.02")},
     "nvidia-fabricmanager-535 535.230.02 does not match the loaded driver 535.261.03"),
    ({"driver": ["0000:e3:00.0"]}, "the driver registered 1 of the 4 NVSwitches on the PCI bus"),
]  # fmt: skip


@pytest.mark.parametrize(("kw", "reason"), REASONS)
@pytest.mark.parametrize("board", ["hopper", "a100"])
def test_each_fabric_manager_failure_fails_the_node_and_every_gpu_naming_it(kw, reason, board):
    if board == "hopper":
        check, rows = run(hopper(), node(**kw))
    else:
        a100_node = {"pci": A100_SWITCHES, "driver": [a for a, _ in A100_SWITCHES], **kw}
        if "driver" in kw:
            a100_node["driver"] = [A100_SWITCHES[0][0]]
            reason = reason.replace("of the 4", "of the 6")
        check, rows = run(a100(), node(**a100_node))
    assert check.status == "fail" and reason in check.detail
    assert "DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR" in check.detail
    assert [r.status for r in rows] == ["fail"] * 4
    assert all(reason in r.detail for r in rows)


def test_an_untrained_hopper_fabric_fails_with_fm_running():
    """NOT_STARTED (FM never ran since the driver loaded), IN_PROGRESS, an error status."""
    for gpu_list, want in [
        (hopper(state=1), "4 of 4 GPUs' fabric not trained (not started)"),
        (hopper(state=2), "4 of 4 GPUs' fabric not trained (in progress)"),
        (hopper(status=999, text="Unknown Error"),
         "4 of 4 GPUs' fabric not trained (completed with Unknown Error)"),
    ]:  # fmt: skip
        check, rows = run(gpu_list, node())
        assert check.status == "fail" and want in check.detail
        assert {r.status for r in rows} <= {"fail", "warn"}


def test_fm_stopped_after_training_still_fails():
    """The fabric stays trained when FM stops, but FM must run (it watches the fabric): the
    node and every row fail, the rows after their own 'completed'."""
    check, rows = run(hopper(), node(service="inactive"))
    assert check.status == "fail"
    assert [r.detail for r in rows] == [
        "fabric manager: nvidia-fabricmanager.service is inactive"] * 4  # fmt: skip


def test_what_cannot_be_read_warns():
    check, rows = run(hopper(), node(service=None, packages_known=False, package=None))
    assert check.status == "warn"
    assert "cannot tell whether nvidia-fabricmanager.service runs (no systemctl)" in check.detail
    assert [r.status for r in rows] == ["pass"] * 4


def test_a_node_without_nvswitch_skips_and_keeps_the_gpu_rows():
    check, rows = run(a100(), FabricNode())
    assert check.status == "skip" and "no NVSwitch on this node" in check.detail
    assert [r.status for r in rows] == ["skip"] * 4
    _, checks = gpus.evaluate(inventory(), None, Expectations(gpus=4), 0.1)
    assert "node.fabric_manager" not in {c.id for c in checks}  # not collected: not judged
