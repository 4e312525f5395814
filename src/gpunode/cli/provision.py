"""`gpunode provision …`: the provisioning roles' checks and decisions, in the lazy table.

The commands themselves live in gpunode.provision.commands (its ``register`` builds the
``provision`` parser); this module hands it the subcommand's parser so `gpunode provision`
loads only when it runs, like every other subcommand.
"""

from __future__ import annotations

import argparse

from ..util.command import Parser


class _ThisParser:
    """What ``register`` expects of a subparsers action: add_parser gives back ``parser``."""

    _parser_class = Parser

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.parser = parser

    def add_parser(self, name: str, **_: object) -> argparse.ArgumentParser:
        return self.parser


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..provision.commands import register

    register(_ThisParser(p))  # type: ignore[arg-type]


def run(args: argparse.Namespace) -> int:
    return args.func(args)
