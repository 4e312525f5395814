"""The `gpunode` command line.

Exit codes (stable; roles and scripts rely on them):
  0  success
  1  the operation failed (engine error, node not reachable, ...)
  2  bad input: unknown option, invalid profile or value
  3  no NVIDIA driver on this node (inventory)

Subcommands are a table of modules, as pip's are: a subcommand's module (its arguments and
its ``run``) is imported only when that subcommand runs, so `gpunode inventory` never loads
the engines' code, and the simulator's never runs on a node.
"""

from __future__ import annotations

import importlib
import os
import sys

from .. import __version__
from ..util.command import (
    EXIT_FAIL,
    EXIT_USAGE,
    InputError,
    OperationError,
    Parser,
    UsageError,
    fail,
)

# name: (module, help). Each module has add_arguments(parser) and run(args) -> exit code.
COMMANDS = {
    "inventory": ("gpunode.cli.inventory", "driver, CUDA and GPUs on this node"),
    "profile": ("gpunode.cli.profile", "GPU profiles for the simulator"),
    "cdi": ("gpunode.cli.cdi", "Container Device Interface specs"),
    "runtime": (
        "gpunode.cli.runtime",
        "the container runtime: configure engines, refresh cache",
    ),
    "explain": ("gpunode.cli.explain", "what a container with this request would get"),
    "sim": ("gpunode.cli.sim", "the simulated GPU cluster (development and tests)"),
    "validate": (
        "gpunode.cli.validate",
        "prove this node works: GPUs, versions, engine, containers",
    ),
    "provision": ("gpunode.cli.provision", "checks and decisions for the provisioning roles"),
    "report": ("gpunode.cli.report", "the cluster report from validation results"),
    "mig": ("gpunode.cli.mig", "MIG layouts (mig-parted format): apply, assert, export"),
    "watch": ("gpunode.cli.watch", "GPU health followed continuously: a textfile exporter"),
}


def build_parser(command: str | None = None) -> Parser:
    """The parser; only ``command``'s module is imported to add its arguments."""
    p = Parser(prog="gpunode", description="Provision and validate NVIDIA GPU nodes.")
    p.add_argument("--version", action="version", version=f"gpunode {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for name, (module, helptext) in COMMANDS.items():
        sp = sub.add_parser(name, help=helptext)
        if name == command:
            mod = importlib.import_module(module)
            mod.add_arguments(sp)
            sp.set_defaults(run=mod.run)
    return p


def _known_errors() -> tuple[type[BaseException], ...]:
    from ..runtime.config import ConfigError
    from ..runtime.discovery import DiscoveryError

    # the simulator's errors are OperationErrors (and its ProfileError an InputError): the
    # command never imports gpunode.sim, which nodes do not have
    return (ConfigError, DiscoveryError, OperationError, OSError)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    try:
        args = build_parser(command).parse_args(argv)
        return args.run(args)
    except UsageError as exc:
        return fail(exc, EXIT_USAGE)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from ..engines.common import EngineConfigError, EngineRunError

        if os.environ.get("GPUNODE_DEBUG"):
            raise
        if isinstance(exc, EngineRunError):
            return fail(exc, EXIT_FAIL)
        if isinstance(exc, InputError | EngineConfigError):  # bad input (a profile, a config file)
            return fail(exc, EXIT_USAGE)
        if isinstance(exc, _known_errors()):
            return fail(exc, EXIT_FAIL)
        return fail(
            f"internal error: {type(exc).__name__}: {exc} (set GPUNODE_DEBUG=1 for a traceback)",
            EXIT_FAIL,
        )


if __name__ == "__main__":
    sys.exit(main())
