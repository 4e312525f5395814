"""gpunode watch's cycle and loop against a fake kernel log (a file of /dev/kmsg records) and
a fake NVML cycle (the GPU records the inventory would give)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from gpunode.cli.main import main
from gpunode.nvidia.fabric import FabricNode
from gpunode.nvidia.gpu import Fabric, Gpu
from gpunode.watch import history, metrics, service

ROOT = Path(__file__).resolve().parents[3]
BUS = ("00000000:18:00.0", "00000000:D8:00.0")
XID79 = "NVRM: Xid (PCI:0000:d8:00): 79, pid=1, name=python3, GPU has fallen off the bus."


def gpus() -> list[Gpu]:
    return [Gpu(i, i, f"GPU-{i}", "NVIDIA H100 80GB HBM3", bus, serial=f"132{i}",
                persistence_mode=True) for i, bus in enumerate(BUS)]  # fmt: skip


def up():
    return gpus(), True, None


@pytest.fixture
def node(tmp_path):
    (tmp_path / "tf").mkdir()
    (tmp_path / "boot_id").write_text("boot-1\n")
    (tmp_path / "kmsg").write_text("6,1,10,-;Linux version 6.1\n")
    return tmp_path


def no_fabric():
    return None, None


def watch(node, read=up, **kw) -> service.Watch:
    kw = {"interval": 30, "nvml_timeout": 2, "textfile": str(node / "tf/w.prom"),
          "fabric": no_fabric, **kw}  # fmt: skip
    return service.Watch("n1", state_dir=str(node / "st"), kmsg=str(node / "kmsg"),
                         boot_id_file=str(node / "boot_id"), gpus=read, **kw)  # fmt: skip


def once(node, read=up, **kw) -> str:
    w = watch(node, read, **kw)
    try:
        w.once()
    finally:
        w.close()
    return (node / "tf/w.prom").read_text()


def append(node, *lines: str) -> None:
    with open(node / "kmsg", "a") as fh:
        fh.write("".join(line + "\n" for line in lines))


def test_a_kernel_xid_shows_on_its_gpu_within_one_cycle(node):
    append(node, f"3,2,20,-;{XID79}")
    text = once(node)
    g1 = f'node="n1",gpu="1",uuid="GPU-1",bus_id="{BUS[1]}",model="NVIDIA H100 80GB HBM3"'
    g0 = f'node="n1",gpu="0",uuid="GPU-0",bus_id="{BUS[0]}",model="NVIDIA H100 80GB HBM3"'
    assert f"gpunode_gpu_xid_last{{{g1}}} 79" in text
    assert f'gpunode_gpu_xid_errors_total{{{g1},xid="79"}} 1' in text
    assert f"gpunode_gpu_xid_fatal{{{g1}}} 1" in text and f"gpunode_gpu_lost{{{g1}}} 1" in text
    assert f"gpunode_gpu_xid_last{{{g0}}} 0" in text and f"gpunode_gpu_xid_fatal{{{g0}}} 0" in text
    assert f'gpunode_gpu_health{{{g1},check="gpu.xid"}} 2' in text
    assert f'gpunode_gpu_health{{{g0},check="gpu.xid"}} 0' in text
    assert 'gpunode_node_healthy{node="n1"} 0' in text and "gpunode_watch_problem" not in text
    assert f'gpunode_gpu_serial_info{{{g1},serial="1321"}} 1' in text
    # node-problem-detector's check: a problem, one short line naming the GPU and the Xid
    assert service.check(str(node / "st"), None) == (
        1,
        f"GPU 1 ({BUS[1]}): Xid 79 (GPU has fallen off the bus)",
    )


def test_a_userspace_record_and_a_long_line_raise_nothing(node):
    forged = XID79.replace("79", "48")
    append(node, f"12,2,20,-;{forged}", f"14,3,21,-;{forged}", "4,4,22,-;" + "x" * (1 << 20),
           "12,5,23,-;" + forged + "y" * (1 << 20))  # fmt: skip
    text = once(node)
    assert "gpunode_gpu_xid_errors_total" not in text
    assert 'gpunode_node_healthy{node="n1"} 1' in text
    assert service.check(str(node / "st"), None) == (0, "OK: 2 GPU(s) healthy")


def test_a_kernel_record_cut_at_the_bound_still_counts_and_the_next_one_too(node):
    append(node, f"3,2,20,-;{XID79}" + "z" * (1 << 20), f"3,3,21,-;{XID79}")
    text = once(node)
    assert 'xid="79"} 2' in text


def test_history_survives_a_restart_and_another_boot_clears_it(node):
    append(node, f"3,2,20,-;{XID79}")
    once(node)
    text = once(node)  # the same records read again: counted once
    assert 'xid="79"} 1' in text
    append(node, f"3,3,30,-;{XID79}")
    assert 'xid="79"} 2' in once(node)
    (node / "boot_id").write_text("boot-2\n")
    (node / "kmsg").write_text("6,1,10,-;Linux version 6.1\n")  # the new boot's log
    text = once(node)
    assert (
        "gpunode_gpu_xid_errors_total" not in text and 'gpunode_node_healthy{node="n1"} 1' in text
    )
    assert (node / "st" / history.NAME).is_file()  # rewritten, never deleted


def test_a_log_that_starts_again_under_the_same_boot_is_read_from_its_start(node, capsys):
    """A simulated node's restart: a new, short kernel log, the same boot id. Its Xids
    count (they are new) and the history's earlier finding stays (the same boot)."""
    append(node, *(f"6,{n},{n},-;line {n}" for n in range(2, 40)), f"3,40,400,-;{XID79}")
    assert 'xid="79"} 1' in once(node)
    (node / "kmsg").write_text(f"6,1,10,-;Linux version 6.1\n3,2,20,-;{XID79}\n")
    text = once(node)
    assert 'xid="79"} 2' in text, text
    assert "the kernel log starts again (its newest record 2 is before the last one read, 40)" \
        in capsys.readouterr().err
    assert 'xid="79"} 2' in once(node)  # and then counted once, as any record


def test_a_corrupt_history_is_one_line_and_a_fresh_start(node, capsys):
    (node / "st").mkdir()
    (node / "st" / history.NAME).write_text('{"schema": "gpunode.watch-history/v1", "gpus": [')
    w = service.Watch("n1", textfile=str(node / "tf/w.prom"), state_dir=str(node / "st"),
                      kmsg=str(node / "kmsg"), boot_id_file=str(node / "boot_id"), gpus=up)  # fmt: skip
    try:
        w.once()
    finally:
        w.close()
    err = capsys.readouterr().err.splitlines()
    assert len([e for e in err if e.startswith("gpunode watch: history:")]) == 1, err
    assert "corrupt" in err[0] and "starting afresh" in err[0]
    doc = history.load(str(node / "st" / history.NAME), "boot-1")
    assert doc[1] is None and doc[0].gpus == {}


def test_a_textfile_directory_that_is_a_symlink_is_a_problem_never_written(node, tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (node / "link").symlink_to(target)
    w = watch(node, textfile=str(node / "link/w.prom"))
    try:
        snap = w.once()
    finally:
        w.close()
    assert "textfile" in snap.problems and list(target.iterdir()) == []


def test_nvml_down_is_said_and_the_kernel_log_still_followed(node):
    append(node, f"3,2,20,-;{XID79}")
    text = once(node, lambda: ([], False, "NVML cannot be initialised: Driver Not Loaded"))
    assert 'gpunode_watch_nvml_up{node="n1"} 0' in text
    assert 'gpunode_watch_problem{node="n1",cause="nvml"} 1' in text
    assert f'bus_id="{BUS[1]}",model="",xid="79"}} 1' in text
    code, line = service.check(str(node / "st"), None)
    assert code == 1 and line.startswith("NVML: ")


def test_an_nvml_call_that_hangs_is_nvml_down_not_a_stop(node):
    gate = threading.Event()

    def hang():
        gate.wait(10)
        return up()

    t0 = time.monotonic()
    text = once(node, hang, nvml_timeout=0.3)
    gate.set()
    assert time.monotonic() - t0 < 5
    assert 'gpunode_watch_nvml_up{node="n1"} 0' in text and 'cause="nvml"' in text


def test_check_is_unknown_without_state_or_when_it_is_old(node):
    assert service.check(str(node / "st"), None)[0] == 2
    once(node)
    assert service.check(str(node / "st"), None)[0] == 0
    code, line = service.check(str(node / "st"), 30, now=time.time() + 100)
    assert code == 2 and "old" in line
    assert service.check(str(node / "st"), None, now=time.time() + 89)[0] == 0  # 3 x 30 s


def test_a_second_watch_on_one_state_dir_is_refused(node):
    w = watch(node)
    try:
        with pytest.raises(service.WatchError, match="another gpunode watch runs"):
            watch(node)
    finally:
        w.close()


def test_every_series_of_the_contract_is_written_and_promtool_accepts_the_file(node):
    fab = gpus()
    from gpunode.nvidia.gpu import Fabric

    for g in fab:
        g.fabric = Fabric(3, 0, "Success")
    append(node, f"3,2,20,-;{XID79}")
    w = watch(node, lambda: (fab, True, None))
    try:
        w.once()
        w.problem("kmsg", "a test's problem")
        w.write(heartbeat=True)
    finally:
        w.close()
    text = (node / "tf/w.prom").read_text()
    written = {line.split("{")[0] for line in text.splitlines() if not line.startswith("#")}
    assert written == set(metrics.METRICS)
    # the contract the alert rules read (monitoring/metrics.yml): the same names, types and
    # labels as the watch's one table
    contract = yaml.safe_load((ROOT / "monitoring/metrics.yml").read_text())["metrics"]
    assert {n: (m["type"], tuple(m["labels"])) for n, m in contract.items()} == {
        n: (kind, tuple(lab)) for n, (kind, lab, _help) in metrics.METRICS.items()}  # fmt: skip
    # promtool comes with Debian's prometheus package (scripts/setup installs it)
    assert shutil.which("promtool"), "promtool missing: run scripts/setup"
    proc = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_cli_once_and_check(node, capsys):
    append(node, f"3,2,20,-;{XID79}")
    args = ["watch", "once", "--textfile", str(node / "tf/w.prom"), "--state-dir", str(node / "st"),
            "--kmsg", str(node / "kmsg"), "--boot-id-file", str(node / "boot_id"), "--node", "n1"]  # fmt: skip
    assert main(args) == 0
    assert main(["watch", "check", "--state-dir", str(node / "st")]) == 1
    assert main(["watch", "once", "--interval", "-1"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "gpunode: error: " in err


def test_run_reacts_to_a_kernel_xid_well_before_the_interval_and_exits_0_on_sigterm(node):
    """`watch run` in a process of its own (interval 30 s): an Xid appended to the log is in
    the textfile within a few seconds (a loaded machine: poll up to 10 s); SIGTERM: exit 0."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpunode", "watch", "run", "--interval", "30", "--node", "n1",
         "--textfile", str(node / "tf/w.prom"), "--state-dir", str(node / "st"),
         "--kmsg", str(node / "kmsg"), "--boot-id-file", str(node / "boot_id"),
         "--nvml-timeout", "5"],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        prom = node / "tf/w.prom"
        deadline = time.monotonic() + 20
        while not prom.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert prom.exists(), "no first cycle"
        t0 = time.monotonic()
        append(node, f"3,99,20,-;{XID79}")
        while 'xid="79"' not in prom.read_text() and time.monotonic() - t0 < 10:
            time.sleep(0.05)
        took = time.monotonic() - t0
        assert 'xid="79"' in prom.read_text() and took < 10
        # a second watch on the state dir: one line, exit 1
        other = subprocess.run([sys.executable, "-m", "gpunode", "watch", "once", "--state-dir",
                                str(node / "st"), "--kmsg", str(node / "kmsg")],
                               env=env, capture_output=True, text=True, timeout=60)  # fmt: skip
        assert other.returncode == 1 and other.stderr.count("\n") == 1, other.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


SWITCHES = [(f"0000:e{i}:00.0", 0x22A3) for i in range(3, 7)]  # an HGX H100's four


def trained(gpu_list):
    for g in gpu_list:
        g.fabric = Fabric(3, 0, "Success")
    return gpu_list


LINKED = [a for a, _ in SWITCHES]
FM = ("nvidia-fabricmanager-550", "550.163.01")
FM_OLD = ("nvidia-fabricmanager-550", "550.144.03")


# validate's node.fabric_manager judgement, not the GPUs' states alone: a fabric manager that
# exited leaves the fabric trained until the next driver load, yet the node is not fine
@pytest.mark.parametrize(
    ("fm", "want", "words"),
    [
        (FabricNode(SWITCHES, LINKED, "active", FM, True), 1, None),
        (FabricNode(SWITCHES, LINKED, "failed", FM, True), 0, "NVSwitch fabric"),
        (FabricNode(SWITCHES, LINKED, "active", FM_OLD, True), 0, "NVSwitch fabric"),
    ],
)
def test_the_fabric_series_is_validates_node_fabric_manager(node, fm, want, words):
    text = once(node, lambda: (trained(gpus()), True, None), fabric=lambda: (fm, "550.163.01"))
    assert f'gpunode_node_fabric_trained{{node="n1"}} {want}' in text
    assert f'gpunode_node_healthy{{node="n1"}} {want}' in text
    code, line = service.check(str(node / "st"), None)
    assert (code, words is None or words in line) == (1 - want, True), line


def test_facts_that_cannot_be_read_are_a_problem_not_a_stop(node):
    def broken():
        raise OSError("no /sys")

    text = once(node, fabric=broken)
    assert 'gpunode_watch_problem{node="n1",cause="fabric"} 1' in text
    assert "gpunode_node_fabric_trained{" not in text  # no facts: no fabric series
