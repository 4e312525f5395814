"""`gpunode validate`: run every check on this node (gpunode.validate.checks); print a table,
or JSON with --json; optionally write a Prometheus textfile. Exit 0 all passed (warn and
skip allowed), 1 a check failed, 2 could not run (bad input, printed as one line)."""

from __future__ import annotations

import argparse
import socket

from ..util.command import EXIT_USAGE, fail, print_json
from ..validate import output
from ..validate.checks import validate
from ..validate.expect import ENGINES, BadInput, build
from ..validate.model import SCHEMA


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="the result as JSON (gpunode.validate/v1)")
    p.add_argument("--textfile", metavar="PATH",
                   help="also write a Prometheus textfile (node_exporter textfile collector)")  # fmt: skip
    p.add_argument("--node", help="the node's name in the result (default: the host name)")
    p.add_argument("--vars", metavar="FILE",
                   help="inventory variables (YAML/JSON) to expect; - reads standard input")  # fmt: skip
    p.add_argument("--expect-gpus", metavar="N", help="expected GPU count")
    p.add_argument("--driver-pin", metavar="V", help="pinned driver version or branch")
    p.add_argument("--driver-package", metavar="PKG",
                   help="the package whose version is the driver's (default: found)")  # fmt: skip
    p.add_argument(
        "--cuda", action="append", metavar="V", help="expected CUDA release (repeatable)"
    )
    p.add_argument("--policy", help="CUDA compatibility policy: strict (default), minor, forward")
    p.add_argument("--runtime-default", action="store_true", default=None,
                   help="gpunode must be the engine's default runtime")  # fmt: skip
    p.add_argument("--runtime-name", help="the runtime's name in the engine (default gpunode)")
    p.add_argument("--engine", help=f"{'|'.join(ENGINES)} (default docker)")
    p.add_argument("--expect-mig-config", metavar="FILE",
                   help="mig-parted config file (v1) holding the expected MIG layout "
                        "(default with --expect-mig-name: /etc/gpunode/mig-config.yaml)")  # fmt: skip
    p.add_argument("--expect-mig-name", metavar="NAME",
                   help="the config of --expect-mig-config to expect (as mig-parted -c)")  # fmt: skip


def run(args: argparse.Namespace) -> int:
    try:
        expect = build(
            vars_file=args.vars,
            expect_gpus=args.expect_gpus,
            driver_pin=args.driver_pin,
            driver_package=args.driver_package,
            cuda=args.cuda,
            policy=args.policy,
            runtime_default=args.runtime_default,
            runtime_name=args.runtime_name,
            engine=args.engine,
            mig_config_file=args.expect_mig_config,
            mig_config_name=args.expect_mig_name,
        )
        if args.textfile and (why := output.check_textfile_path(args.textfile)):
            raise BadInput(why)
    except BadInput as exc:
        if args.json:  # a machine reader still gets the one line, as JSON
            print_json({"schema": SCHEMA, "node": args.node or socket.gethostname(),
                        "error": "bad_input", "detail": str(exc), "exit_code": EXIT_USAGE})  # fmt: skip
        return fail(exc, EXIT_USAGE)
    result = validate(expect, args.node)
    if args.json:
        print_json(result.to_dict())
    else:
        print(output.table(result))
        for missing in expect.missing():
            print(f"not given: {missing}")
    if args.textfile:
        try:
            output.write_textfile(args.textfile, result)
        except OSError as exc:
            return fail(f"--textfile {args.textfile}: cannot write ({exc.strerror or exc}); "
                        "the previous file is unchanged", EXIT_USAGE)  # fmt: skip
    return result.exit_code
