"""`gpunode watch`: the node's GPU health followed continuously (gpunode.watch).

run    the service's loop: the kernel log followed, NVML's checks every --interval, the
       textfile and state kept; exit 0 on SIGTERM/SIGINT, 1 when it cannot start
once   one cycle, then exit 0 (tests, the benchmark, a cron job); --json prints the state
check  node-problem-detector's custom plugin: exit 0 OK, 1 problem, 2 unknown (no state,
       or older than --max-age); one short line on stdout
"""

from __future__ import annotations

import argparse
import socket

from ..nvidia import xid
from ..util.command import EXIT_FAIL, EXIT_OK, Parser, fail, print_json

TEXTFILE = "/var/lib/node_exporter/textfile_collector/gpunode-watch.prom"
STATE_DIR = "/var/lib/gpunode"
INTERVAL = 60.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a number of seconds") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text[:40]} is not between 0 and 86400 seconds")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    for name, helptext in (("run", "the service's loop (until SIGTERM)"),
                           ("once", "one cycle, then exit")):  # fmt: skip
        sp = sub.add_parser(name, help=helptext)
        sp.add_argument("--interval", type=_seconds, default=INTERVAL,
                        help=f"seconds between NVML checks (default {INTERVAL:.0f})")  # fmt: skip
        sp.add_argument("--textfile", default=TEXTFILE, help=f"default {TEXTFILE}")
        sp.add_argument("--state-dir", default=STATE_DIR, help=f"default {STATE_DIR}")
        sp.add_argument("--kmsg", default=xid.KMSG, help=f"the kernel log (default {xid.KMSG})")
        sp.add_argument("--node", help="the node's name in the series (default: the host name)")
        sp.add_argument("--boot-id-file", default=None, help=argparse.SUPPRESS)
        sp.add_argument("--nvml-timeout", type=_seconds, default=None, help=argparse.SUPPRESS)
        if name == "once":
            sp.add_argument("--json", action="store_true", help="print the state as JSON")
    sp = sub.add_parser(
        "check", help="node-problem-detector's check: exit 0 OK, 1 problem, 2 unknown"
    )
    sp.add_argument("--state-dir", default=STATE_DIR, help=f"default {STATE_DIR}")
    sp.add_argument("--max-age", type=_seconds, default=None,
                    help="seconds after which the watch's state is unknown (default 3 intervals)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from ..watch import history, service, state

    if args.action == "check":
        code, line = service.check(args.state_dir, args.max_age)
        print(line)
        return code
    try:
        watch = service.Watch(
            args.node or socket.gethostname(), args.interval, args.textfile, args.state_dir,
            args.kmsg, args.boot_id_file or history.BOOT_ID, nvml_timeout=args.nvml_timeout,
        )  # fmt: skip
    except service.WatchError as exc:
        return fail(exc, EXIT_FAIL)
    try:
        if args.action == "run":
            return watch.run()
        snap = watch.once()
        if args.json:
            print_json(state.state_document(snap))
        return EXIT_OK
    finally:
        watch.close()
