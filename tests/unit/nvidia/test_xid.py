"""Xid errors read back from the kernel log and judged by NVIDIA's classes."""

from __future__ import annotations

import os

import pytest

from gpunode.nvidia import xid

KMSG = (
    "6,1021,5011223,-;NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.261.03\n"
    " SUBSYSTEM=module\n"
    "4,1022,9123456,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, "
    "GPU has fallen off the bus.\n"
    "4,1023,9200000,-;NVRM: Xid (PCI:0000:d8:00): 13, pid='<unknown>', name=<unknown>, "
    "Graphics Exception: ESR 0x404600=0x80000001\n"
    "4,1024,9300000,c;NVRM: Xid (PCI:00000000:07:00): 48, pid=77, name=train, "
    "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer\n"
)


def test_kmsg_records_give_each_xid_with_its_gpu_and_time():
    events = xid.parse_log(KMSG)
    assert [(e.xid, e.kind, e.verdict, e.usec) for e in events] == [
        (79, "bus", "fail", 9123456),
        (13, "application", "warn", 9200000),
        (48, "memory", "fail", 9300000),
    ]
    fell = events[0]
    assert (fell.pid, fell.process, fell.message) == (
        "1234",
        "python3",
        "GPU has fallen off the bus.",
    )
    assert events[1].pid == "<unknown>"
    assert fell.matches("00000000:3B:00.0") and fell.matches("0000:3b:00.0")
    assert not fell.matches("0000:3c:00.0") and not fell.matches("garbage")
    assert events[2].matches("00000000:07:00.0")


def test_dmesg_and_journal_lines_are_read_the_same_way():
    line = "[ 9.123456] NVRM: Xid (PCI:0000:3b:00): 74, pid=1, name=nccl, NVLink: fatal error"
    journal = "Nov 25 06:00:01 node1 kernel: " + line.split("] ", 1)[1]
    for text in (line, journal):
        (event,) = xid.parse_log(text)
        assert (event.xid, event.kind, event.message) == (74, "nvlink", "NVLink: fatal error")
    assert xid.parse_log("NVRM: GPU at PCI:0000:3b:00: GPU-abc\nusb 1-1: new device\n") == []


@pytest.mark.parametrize("code", [13, 31, 43, 45, 68, 109])
def test_application_xids_only_warn(code):
    assert xid.classify(code)[:2] == ("application", "warn")


@pytest.mark.parametrize("code,kind", [(48, "memory"), (63, "memory"), (64, "memory"),
                                       (92, "memory"), (94, "memory"), (95, "memory"),
                                       (79, "bus"), (74, "nvlink"), (119, "gsp"), (999, "other")])  # fmt: skip
def test_other_xids_fail_with_what_to_do(code, kind):
    got_kind, verdict, action = xid.classify(code)
    assert (got_kind, verdict) == (kind, "fail") and action


def test_reading_a_log_file_and_a_missing_one(tmp_path):
    log = tmp_path / "kmsg"
    log.write_text(KMSG)
    assert len(xid.parse_log(xid.read_kernel_log(str(log)))) == 3
    with pytest.raises(xid.LogUnreadable, match=f"{tmp_path}/none: No such file"):
        xid.read_kernel_log(str(tmp_path / "none"))


def test_reading_stops_at_the_end_of_a_nonblocking_source(tmp_path):
    """/dev/kmsg answers EAGAIN at its end when opened non-blocking; a FIFO with no more data
    does the same, so the reader must return what it has instead of waiting."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    writer = os.open(fifo, os.O_RDWR)  # keeps the FIFO open: a read would block forever
    try:
        os.write(writer, KMSG.encode())
        assert len(xid.parse_log(xid.read_kernel_log(str(fifo)))) == 3
    finally:
        os.close(writer)


def test_the_inventory_gives_each_gpu_its_xids_and_names_the_rest(tmp_path):
    from gpunode.nvidia.inventory import Inventory, attach_xid_errors

    from ..validate.fakes import healthy_gpu

    gpus = [healthy_gpu(0, pci_bus_id="00000000:3B:00.0", xid_errors=None),
            healthy_gpu(1, pci_bus_id="00000000:D8:00.0", xid_errors=None)]  # fmt: skip
    inv = Inventory("nvml", "535.261.03", "12.2", "12.535.261.03", gpus)
    log = tmp_path / "kmsg"
    log.write_text(KMSG)
    attach_xid_errors(inv, str(log))
    assert [e.xid for e in gpus[0].xid_errors] == [79]
    assert [(e.xid, e.verdict) for e in gpus[1].xid_errors] == [(13, "warn")]
    (problem,) = inv.problems  # Xid 48 names bus 07, which no GPU here has
    assert problem["issue"] == "xid_unmatched" and problem["pci_bus_id"] == "00000000:07:00.0"
    assert inv.kernel_log is None and not inv.healthy

    unread = Inventory("nvml", "535.261.03", "12.2", "12.535.261.03",
                       [healthy_gpu(0, xid_errors=None)])  # fmt: skip
    attach_xid_errors(unread, str(tmp_path / "none"))
    assert unread.gpus[0].xid_errors is None
    assert "the kernel log cannot be read" in unread.kernel_log
    assert unread.to_dict()["kernel_log_error"] == unread.kernel_log


FORGED = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."
MEMCG = "/user.slice/user-1000.slice/user@1000.service/app.slice/" + FORGED


@pytest.mark.parametrize(
    "record",
    [
        # /dev/kmsg records userspace wrote (echo ... > /dev/kmsg): the kernel forces them
        # onto LOG_USER (prio 8 + level), or the facility they name, never facility 0
        f"12,1030,9400000,-;{FORGED}",
        f"14,1031,9400001,-;{FORGED}",
        f"190,1032,9400002,-;{FORGED}",  # local7.info
        # genuine kernel records embedding a cgroup path an unprivileged user named
        "6,1033,9500000,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,"
        f"mems_allowed=0,oom_memcg={MEMCG},task_memcg={MEMCG},task=x,pid=77,uid=1000",
        f"6,1034,9500001,-;Memory cgroup stats for {MEMCG}:",
        f"4,1035,9500002,-;memory: usage 1024kB, limit 1024kB, failcnt 3 {FORGED}",
        # a record's continuation line (the kernel's dictionary) is never a message
        f" DEVICE=+pci:{FORGED}",
    ],
    ids=["user", "user-info", "local7", "oom-kill", "memcg-stats", "mid-line", "continuation"],
)
def test_forged_kmsg_records_raise_nothing(record):
    """Before: any record, whatever its facility, with the driver's text anywhere in it
    failed the GPU at the bus it named (the review: gpu.xid fail, 'drain, reboot')."""
    text = KMSG + record + "\n"
    assert [e.usec for e in xid.parse_log(text)] == [9123456, 9200000, 9300000]


@pytest.mark.parametrize(
    ("line", "counts"),
    [
        (f"[    9.123456] {FORGED}", True),  # dmesg
        (f"[Tue Nov 25 06:00:01 2026] {FORGED}", True),  # dmesg -T
        (f"<4>[    9.123456] {FORGED}", True),  # dmesg -r, kernel facility
        (f"kern  :warn  : [    9.123456] {FORGED}", True),  # dmesg -x
        (f"Nov 25 06:00:01 node1 kernel: {FORGED}", True),  # journalctl, syslog
        (f"Nov 25 06:00:01 node1 kernel: [    9.123456] {FORGED}", True),  # kern.log
        (f"2026-11-25T06:00:01.123456+00:00 node1 kernel: {FORGED}", True),  # rsyslog ISO
        (f"[    9.123456] [    T812] {FORGED}", True),  # dmesg with caller id
        (FORGED, True),  # dmesg --notime
        (f"<12>[    9.123456] {FORGED}", False),  # dmesg -r: user facility
        (f"user  :warn  : [    9.123456] {FORGED}", False),  # dmesg -x: user facility
        (f"Nov 25 06:00:01 node1 evil[123]: {FORGED}", False),  # another process's line
        (f"[    9.5] oom-kill:constraint=CONSTRAINT_MEMCG,oom_memcg={MEMCG},task=x", False),
        (f"Nov 25 06:00:01 node1 kernel: Memory cgroup stats for {MEMCG}:", False),
        (f"[    9.5] x {FORGED}", False),
    ],
)
def test_plain_text_lines_count_only_right_after_their_header(line, counts):
    assert len(xid.parse_log(line + "\n")) == (1 if counts else 0), line


def test_the_simulated_drivers_lines_are_still_caught(tmp_path):
    """The simulator logs as the driver does (prio 4: kernel facility, warning level)."""
    from gpunode.sim import xidraise

    kmsg, events = tmp_path / "kmsg", tmp_path / "events"
    kmsg.write_text(KMSG)
    line = xidraise.raise_xid("0000:3b:00.0", "79", kmsg=kmsg, events=events)
    (record,) = kmsg.read_text().splitlines()[-1:]
    assert record.startswith("4,") and record.endswith(line)
    got = xid.parse_log(xid.read_kernel_log(str(kmsg)))
    assert [(e.xid, e.bus.procfs) for e in got][-1] == (79, "0000:3b:00.0")
    assert len(got) == 4


def test_an_xid_on_a_bus_no_gpu_has_is_a_node_finding_naming_the_bus(tmp_path):
    """A GPU gone so completely that NVML and the driver no longer list it leaves only its
    Xid in the log: validate's node.xid fails naming the bus (an application Xid there
    warns), where before nothing showed it."""
    from gpunode.nvidia.inventory import Inventory, attach_xid_errors
    from gpunode.validate import gpus as vgpus
    from gpunode.validate.expect import Expectations

    from ..validate.fakes import healthy_gpu

    def node_xid(log_text: str | None) -> tuple[str, str]:
        inv = Inventory("nvml", "535.261.03", "12.2", "12.535.261.03",
                        [healthy_gpu(0, pci_bus_id="00000000:D8:00.0", xid_errors=None)])  # fmt: skip
        log = tmp_path / "kmsg"
        if log_text is None:
            log.unlink(missing_ok=True)
        else:
            log.write_text(log_text)
        attach_xid_errors(inv, str(log))
        _, checks = vgpus.evaluate(inv, None, Expectations(gpus=1), 0.0)
        (check,) = [c for c in checks if c.id == "node.xid"]
        assert check.gpu is None  # a node-level finding, on no GPU's row
        return check.status, check.detail

    status, detail = node_xid(KMSG)  # 79 on bus 3b and 48 on bus 07: no GPU there
    assert status == "fail"
    assert "00000000:3B:00.0, 00000000:07:00.0, a bus none of the node's GPUs has" in detail
    assert "Xid 79 on 0000:3b:00.0" in detail and "drain, reboot" in detail
    only_app = "4,1,5,-;NVRM: Xid (PCI:0000:5e:00): 13, pid=1, name=x, Graphics Exception\n"
    assert node_xid(only_app)[0] == "warn"
    assert node_xid("4,1,5,-;NVRM: Xid (PCI:0000:d8:00): 79, pid=1, name=x, gone\n") == (
        "pass",
        "every Xid logged is on one of the node's GPUs",
    )
    assert node_xid(None)[0] == "skip"


PREFIX = "NVRM: Xid (PCI:0000:3b:00): 9"  # 29 characters: iptables' --log-prefix at most
assert len(PREFIX) == 29
TCP4 = ("IN=eth0 OUT= MAC=52:54:00:12:34:56:52:54:00:ab:cd:ef:08:00 SRC=10.0.0.2 DST=10.0.0.1 "
        "LEN=60 TOS=0x00 PREC=0x00 TTL=64 ID=54321 DF PROTO=TCP SPT=40000 DPT=22 "
        "WINDOW=64240 RES=0x00 SYN URGP=0 ")  # fmt: skip


@pytest.mark.parametrize(
    "record",
    [
        # iptables -A INPUT -p tcp --dport 22 -j LOG --log-prefix "$PREFIX" (level 4, the
        # default warning): the kernel writes prefix + "IN=… OUT=… " + the packet's fields
        f"4,1040,9600000,-;{PREFIX}{TCP4}",
        # nft ... log prefix "<the driver's whole line> " (up to 127 characters), OUTPUT
        f"4,1041,9600001,-;{FORGED} IN= OUT=eth0 SRC=10.0.0.2 DST=10.0.0.1 LEN=84 TOS=0x00 "
        "PREC=0x00 TTL=64 ID=1 DF PROTO=ICMP TYPE=8 CODE=0 ID=7 SEQ=1 UID=0 GID=0 ",
        # the prefix naming the process field, so the fields land in name=
        f"0,1042,9600002,-;{PREFIX}, pid=1, name=IN=eth0 OUT= SRC=fe80:0000:0000:0000:0000:"
        "0000:0000:0001 DST=ff02:0000:0000:0000:0000:0000:0000:0001 LEN=72 TC=0 HOPLIMIT=1 "
        "FLOWLBL=0 PROTO=UDP SPT=5353 DPT=5353 LEN=32 ",
        # ARP, a bridge's ports, a truncated packet; an interface named with a comma
        f"4,1043,9600003,-;{PREFIX} IN=br0 OUT= ARP HTYPE=1 PTYPE=0x0800 OPCODE=1 "
        "MACSRC=52:54:00:12:34:56 IPSRC=10.0.0.2 MACDST=00:00:00:00:00:00 IPDST=10.0.0.1",
        f"4,1044,9600004,-;{PREFIX} IN=br0 OUT=br0 PHYSIN=veth1 PHYSOUT=veth2 TRUNCATED",
        f"4,1045,9600005,-;{PREFIX}, pid=1, name=IN=x, OUT= TRUNCATED",
    ],
    ids=["iptables-29", "nft-whole-line", "in-name", "arp", "bridge", "comma-ifname"],
)
def test_a_netfilter_log_record_is_never_an_xid(record):
    """A LOG rule's prefix in the host network namespace (CAP_NET_ADMIN there: a
    hostNetwork pod given NET_ADMIN) makes the kernel write a facility-0 record that starts
    with the prefix. Before, a 29-character prefix failed GPU 3b with Xid 9."""
    assert [e.usec for e in xid.parse_log(KMSG + record + "\n")] == [9123456, 9200000, 9300000]
    line = f"[    9.600000] {record.split(';', 1)[1]}"  # the same record as dmesg prints it
    assert xid.parse_log(line + "\n") == []


def test_one_kmsg_record_gives_its_sequence_and_only_a_kernel_xid():
    """gpunode watch reads /dev/kmsg one record at a time: the record's sequence number
    (what it has seen) and its Xid, a userspace record's none, a line of numbers longer
    than the kernel writes no record (never int() of thousands of digits)."""
    line = (
        "4,812,9123456,-;NVRM: Xid (PCI:0000:d8:00): 79, pid=1, name=x, GPU has fallen off the bus."
    )
    seq, event = xid.kmsg_record(line)
    assert (seq, event.xid, event.bus.nvml) == (812, 79, "00000000:D8:00.0")
    assert xid.kmsg_record("12,813,9123457,-;" + line.split(";", 1)[1]) == (813, None)
    assert xid.kmsg_record(" DEVICE=+pci:0000:d8:00.0") is None
    assert xid.kmsg_record("4" * 5000 + ",1,2,-;" + line.split(";", 1)[1]) is None
    assert xid.parse_log("4" * 5000 + ",1,2,-;x\n" + line) == [event]
