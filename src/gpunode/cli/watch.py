"""`gpunode watch`: the node's GPU health followed continuously (gpunode.watch).

run    the service's loop: the kernel log followed, NVML's checks every --interval, the
       textfile and state kept; exit 0 on SIGTERM/SIGINT, 1 when it cannot start
once   one cycle, then exit 0 (tests, the benchmark, a cron job); --json prints the state
check  node-problem-detector's custom plugin: exit 0 OK, 1 problem, 2 unknown (no state,
       or older than --max-age); one short line on stdout
cordon the optional Kubernetes action on check's verdict: a problem cordons and taints
       --k8s-node through kubectl (--dry-run: the commands printed, none run); OK or
       unknown changes nothing (--uncordon-when-healthy: undo only gpunode's own taint);
       exit 0 done, 1 kubectl failed, 2 bad input
"""

from __future__ import annotations

import argparse
import socket

from ..nvidia import xid
from ..util.command import EXIT_FAIL, EXIT_OK, Parser, fail, print_json
from ..watch import cordon

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


def _taint(text: str) -> cordon.Taint:
    try:
        return cordon.parse_taint(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _node_name(text: str) -> str:
    try:
        return cordon.node_name(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
    sp = sub.add_parser(
        "cordon", help="on check's problem verdict, cordon and taint the Kubernetes node"
    )
    sp.add_argument(
        "--kubeconfig", required=True, metavar="PATH", help="the kubeconfig of the node's cluster"
    )
    sp.add_argument(
        "--k8s-node", required=True, type=_node_name, metavar="NAME", help="the node's name"
    )
    sp.add_argument("--taint", type=_taint, default=cordon.DEFAULT_TAINT,
                    metavar="KEY=VALUE:EFFECT",
                    help=f"KEY=VALUE:EFFECT (NoSchedule, PreferNoSchedule, NoExecute); default "
                         f"{cordon.DEFAULT_TAINT}")  # fmt: skip
    sp.add_argument("--dry-run", action="store_true",
                    help="print the commands that would change the node; run none")  # fmt: skip
    sp.add_argument("--uncordon-when-healthy", action="store_true",
                    help="when healthy, remove the taint and uncordon, only where the node "
                         "carries the taint's key (gpunode cordoned it)")  # fmt: skip
    sp.add_argument("--state-dir", default=STATE_DIR, help=f"default {STATE_DIR}")
    sp.add_argument("--max-age", type=_seconds, default=None,
                    help="seconds after which the state is unknown (default 3 intervals)")  # fmt: skip
    sp.add_argument(
        "--kubectl", default="kubectl", metavar="PATH", help="kubectl's path (default: on PATH)"
    )


def run(args: argparse.Namespace) -> int:
    from ..watch import history, service, state

    if args.action == "check":
        code, line = service.check(args.state_dir, args.max_age)
        print(line)
        return code
    if args.action == "cordon":
        return _cordon(args)
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


def _cordon(args: argparse.Namespace) -> int:
    import sys

    from ..watch import kubectl

    out = kubectl.act(args.state_dir, args.max_age, args.kubeconfig, args.k8s_node, args.taint,
                      args.kubectl, dry_run=args.dry_run,
                      uncordon=args.uncordon_when_healthy)  # fmt: skip
    if out.error is not None:
        return fail(out.error, out.code)
    if args.dry_run:  # stdout: exactly the commands; what they are for on stderr
        for line in out.commands:
            print(line)
        print(f"gpunode watch cordon: {out.line}", file=sys.stderr)
    else:
        print(out.line)
    return out.code
