"""`gpunode provision fabric-wait`: the bounded wait for the NVSwitch fabric after the driver
role starts the fabric manager (gpunode.validate.fabric.wait, judged by validate's own
health.fabric_node). Every outcome through the CLI with fake collections and a fake clock:
no NVSwitch, ready at once, ready after polls, a failure no wait heals (at once, without
sleeping), the timeout, NVML unreadable, bad arguments; and `provision validate` refusing a
bad nvidia_driver_fabric_wait_timeout."""

from __future__ import annotations

import functools
import json

import pytest

from gpunode.cli.main import main as cli_main
from gpunode.nvidia import inventory
from gpunode.nvidia.fabric import FabricNode
from gpunode.nvidia.health import FABRIC_COMPLETED, FABRIC_IN_PROGRESS, FABRIC_NOT_STARTED
from gpunode.validate import fabric as facts

from ..validate.fakes import healthy_gpu
from ..validate.fakes import inventory as fake_inventory
from ..validate.test_fabric import A100_SWITCHES, DRIVER, H100, MISMATCH, SWITCHES


def node(**kw) -> FabricNode:
    base = {"pci": SWITCHES, "driver": [a for a, _ in SWITCHES], "service": "active",
            "package": ("nvidia-fabricmanager-535", DRIVER), "packages_known": True}  # fmt: skip
    return FabricNode(**{**base, **kw})


def hopper(state=FABRIC_COMPLETED, status=0, text="Success"):
    fab = {"state": state, "status": status, "status_text": text}
    return [healthy_gpu(i, name=H100, fabric=fab) for i in range(4)]


class FakeNode:
    """The node as the wait sees it, one look after the other: each look takes the next of
    ``looks`` (the last one repeats), a (FabricNode, GPUs) pair; a clock that only the
    wait's sleeps move."""

    def __init__(self, *looks):
        self.looks = list(looks)
        self.polls = 0  # collect_node's calls
        self.gpu_calls = 0  # collect_gpus' calls
        self.now = 1000.0
        self.sleeps: list[float] = []

    def _look(self):
        return self.looks[min(self.polls, len(self.looks)) - 1]

    def collect_node(self) -> FabricNode:
        self.polls += 1
        return self._look()[0]

    def collect_gpus(self):
        self.gpu_calls += 1
        gpus = self._look()[1]
        if isinstance(gpus, Exception):
            raise gpus
        return DRIVER, gpus

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.sleeps.append(seconds)
        self.now += seconds

    def wait(self, timeout=120.0, interval=1.0):
        return facts.wait(timeout, interval, self.collect_node, self.collect_gpus,
                          self.clock, self.sleep)  # fmt: skip


@pytest.fixture
def run(monkeypatch, capsys):
    """Run `gpunode provision fabric-wait ARGS` against a FakeNode: (exit code, stdout,
    stderr)."""

    def go(fake: FakeNode, *args: str):
        real = facts.wait
        monkeypatch.setattr(facts, "wait", functools.partial(
            real, collect_node=fake.collect_node, collect_gpus=fake.collect_gpus,
            clock=fake.clock, sleep=fake.sleep))  # fmt: skip
        code = cli_main(["provision", "fabric-wait", *args])
        out, err = capsys.readouterr()
        return code, out, err

    return go


def one_error_line(err: str) -> str:
    assert err.startswith("gpunode: error: ") and err.count("\n") == 1, err
    return err.removeprefix("gpunode: error: ").rstrip("\n")


# ---------------------------------------------------------------------------------------
# ready


def test_no_nvswitch_is_ready_at_once_without_asking_nvml(run):
    fake = FakeNode((FabricNode(), RuntimeError("NVML must not be asked")))
    code, out, err = run(fake, "--json")
    doc = json.loads(out)
    assert code == 0 and err == ""
    assert doc["ready"] is True and doc["nvswitch"] is False and doc["ok"] is True
    assert doc["detail"].startswith("no NVSwitch on this node")
    assert doc["waited_s"] == 0 and doc["polls"] == 1
    assert (fake.polls, fake.gpu_calls, fake.sleeps) == (1, 0, [])


def test_a_trained_fabric_is_ready_at_once(run):
    fake = FakeNode((node(), hopper()))
    code, out, err = run(fake, "--json")
    doc = json.loads(out)
    assert code == 0 and err == ""
    assert doc["ready"] is True and doc["nvswitch"] is True
    assert doc["detail"].endswith("fabric trained on all 4 GPUs")  # health.fabric_node's words
    assert (fake.polls, fake.gpu_calls, fake.sleeps) == (1, 1, [])


def test_ready_after_polls_of_training(run):
    """FM just started: the GPUs NOT_STARTED, then IN_PROGRESS twice, then COMPLETED."""
    fake = FakeNode(
        (node(), hopper(FABRIC_NOT_STARTED)),
        (node(), hopper(FABRIC_IN_PROGRESS)),
        (node(), hopper(FABRIC_IN_PROGRESS)),
        (node(), hopper()),
    )
    code, out, err = run(fake, "--json", "--interval=2")
    doc = json.loads(out)
    assert code == 0 and err == "" and doc["ready"] is True
    assert doc["polls"] == fake.polls == 4 and fake.sleeps == [2.0] * 3
    assert doc["waited_s"] == 6.0


def test_a_unit_still_activating_is_waited_for(run):
    """An A100 board: no GPU fabric state, the unit is the readiness."""
    a100 = [healthy_gpu(i, fabric={}) for i in range(4)]
    fake = FakeNode((node(pci=A100_SWITCHES, driver=[a for a, _ in A100_SWITCHES],
                          service="activating"), a100),
                    (node(pci=A100_SWITCHES, driver=[a for a, _ in A100_SWITCHES]), a100))  # fmt: skip
    code, out, _ = run(fake)
    assert code == 0 and fake.polls == 2
    assert out.startswith("the NVSwitch fabric is ready after 1.0 s: 6 NVSwitch(es), A100")


def test_a_node_that_warns_passes():
    """health.fabric_node warns (no systemctl to ask): the node passes, so the wait ends."""
    fake = FakeNode((node(service=None), hopper()))
    waited = fake.wait()
    assert waited.ready and waited.outcome == "ready" and "no systemctl" in waited.detail


# ---------------------------------------------------------------------------------------
# failures no wait heals: at once, no sleep


CANNOT_HEAL = [
    ({"service": "failed", "last_words": MISMATCH},
     f"nvidia-fabricmanager.service is failed: {MISMATCH}"),
    ({"service": "inactive"}, "nvidia-fabricmanager.service is inactive"),
    ({"package": None}, "no fabric manager package is installed"),
    ({"package": ("nvidia-fabricmanager-535", "535.230.02")},
     "nvidia-fabricmanager-535 535.230.02 does not match the loaded driver 535.261.03"),
    ({"driver": ["0000:e3:00.0"]}, "the driver registered 1 of the 4 NVSwitches"),
    # activating, but the package is at another version: it will exit, not train
    ({"service": "activating", "package": ("nvidia-fabricmanager-535", "535.230.02")},
     "does not match the loaded driver"),
]  # fmt: skip


@pytest.mark.parametrize(("kw", "reason"), CANNOT_HEAL)
@pytest.mark.parametrize("state", [FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS])
def test_a_failure_no_wait_heals_fails_at_once(run, kw, reason, state):
    fake = FakeNode((node(**kw), hopper(state)), (node(), hopper()))  # the 2nd: never seen
    code, out, err = run(fake, "--json")
    doc = json.loads(out)
    line = one_error_line(err)
    assert code == 1 and doc["ready"] is False and doc["ok"] is False and doc["nvswitch"] is True
    assert reason in doc["detail"] and reason in line
    assert line == doc["message"]
    assert line.startswith("the NVSwitch fabric will not be trained by waiting: 4 NVSwitch(es)")
    assert (fake.polls, fake.sleeps) == (1, [])


def test_a_fabric_trained_with_an_error_fails_at_once(run):
    fake = FakeNode((node(), hopper(FABRIC_COMPLETED, 0x19, "NVML error 25")))
    code, _, err = run(fake)
    assert code == 1 and fake.sleeps == []
    assert "completed with NVML error 25" in one_error_line(err)


# ---------------------------------------------------------------------------------------
# the timeout


def test_still_training_when_the_time_is_up(run):
    fake = FakeNode((node(), hopper(FABRIC_IN_PROGRESS)))
    code, out, err = run(fake, "--timeout=5", "--interval=2", "--json")
    doc = json.loads(out)
    line = one_error_line(err)
    assert code == 1 and doc["ready"] is False and doc["nvswitch"] is True
    assert line.startswith(
        "the NVSwitch fabric was not trained within 5 s (nvidia_driver_fabric_wait_timeout): "
        "4 NVSwitch(es), H100/H200 generation: 4 of 4 GPUs' fabric not trained (in progress)"
    )
    assert doc["detail"] in line and doc["message"] == line
    # looks at 0, 2, 4 and 5 s: the last sleep is what is left, then one more look
    assert fake.sleeps == [2.0, 2.0, 1.0] and fake.polls == doc["polls"] == 4
    assert doc["waited_s"] == 5.0


def test_the_default_timeout_is_120_s(run):
    fake = FakeNode((node(service="activating"), hopper(FABRIC_NOT_STARTED)))
    code, out, err = run(fake)
    assert code == 1 and out == ""
    assert one_error_line(err).startswith(
        "the NVSwitch fabric was not trained within 120 s (nvidia_driver_fabric_wait_timeout): "
    )
    assert "nvidia-fabricmanager.service is activating" in err
    assert sum(fake.sleeps) == 120 and fake.polls == 121  # every second, by default


# ---------------------------------------------------------------------------------------
# NVML


def test_no_driver_is_one_line(run):
    fake = FakeNode((node(), inventory.NoDriver("no NVIDIA driver found (NVML: not loaded)")))
    code, out, err = run(fake, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["ready"] is False
    assert one_error_line(err) == (
        "cannot judge the NVSwitch fabric: no NVIDIA driver found (NVML: not loaded)"
    )
    assert fake.sleeps == [] and "Traceback" not in err


def test_nvml_not_loadable_is_one_line(monkeypatch, run):
    """The real inventory step: NVML failed, procfs answered (no fabric state): refused,
    not passed on the service alone."""
    procfs_inv = fake_inventory([healthy_gpu(i, fabric={}) for i in range(4)], source="procfs",
                                problems=[{"issue": "nvml_unavailable",
                                           "detail": "libnvidia-ml.so.1: cannot open"}])  # fmt: skip
    monkeypatch.setattr(inventory, "collect", lambda **kw: procfs_inv)
    fake = FakeNode((node(), []))
    fake.collect_gpus = facts._gpus  # the real one, over the faked inventory
    code, _, err = run(fake)
    assert code == 1
    assert one_error_line(err) == (
        "cannot judge the NVSwitch fabric: NVML is not usable (libnvidia-ml.so.1: cannot "
        "open): the GPUs' fabric state cannot be read"
    )


def test_the_inventory_gives_nvmls_driver_and_gpus(monkeypatch):
    inv = fake_inventory(hopper())
    seen = {}

    def collect(**kw):
        seen.update(kw)
        return inv

    monkeypatch.setattr(inventory, "collect", collect)
    assert facts._gpus() == (inv.driver_version, inv.every_gpu())
    assert seen == {"kernel_log": None}


# ---------------------------------------------------------------------------------------
# arguments


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--timeout=abc"], "argument --timeout: 'abc' is not a number of seconds above 0, at "
                            "most 3600"),
        (["--timeout=0"], "argument --timeout: '0' is not a number of seconds above 0"),
        (["--timeout=-5"], "argument --timeout: '-5' is not a number of seconds above 0"),
        (["--timeout=3601"], "argument --timeout: '3601' is not a number of seconds above 0, at "
                             "most 3600"),
        (["--timeout=nan"], "argument --timeout: 'nan' is not"),
        (["--interval=0"], "argument --interval: '0' is not a number of seconds above 0"),
        (["--interval=x"], "argument --interval: 'x' is not a number of seconds above 0"),
    ],
)  # fmt: skip
def test_bad_arguments_are_one_line_exit_2(run, args, line):
    fake = FakeNode((node(), hopper()))
    code, out, err = run(fake, *args)
    assert code == 2 and out == "" and fake.polls == 0
    assert line in one_error_line(err)


def test_fractions_of_seconds_and_the_bound_are_accepted(run):
    fake = FakeNode((node(), hopper(FABRIC_IN_PROGRESS)), (node(), hopper()))
    code, _, _ = run(fake, "--timeout=3600", "--interval=0.25")
    assert code == 0 and fake.sleeps == [0.25]


@pytest.mark.parametrize("value", ["0", "1.5", "abc", "3601", "-1"])
def test_validate_refuses_a_bad_fabric_wait_timeout(capsys, value):
    assert cli_main(["provision", "validate", f"--fabric-wait-timeout={value}"]) == 2
    assert one_error_line(capsys.readouterr().err) == (
        f"nvidia_driver_fabric_wait_timeout: {value!r} is not a whole number of seconds from 1 "
        "to 3600"
    )


@pytest.mark.parametrize("value", ["1", "120", "3600"])
def test_validate_takes_a_good_fabric_wait_timeout(capsys, value):
    assert cli_main(["provision", "validate", f"--fabric-wait-timeout={value}"]) == 0
