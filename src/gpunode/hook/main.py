"""gpunode-hook's command line: a hand-made parser and the subcommand table.

Not argparse: argparse (with re and enum) is most of this program's start-up, which every
GPU container pays. The launcher imports this module with ``python -IS``.
"""

from __future__ import annotations

import os
import sys

from .. import __version__
from .configure import cmd_configure
from .errors import PROG, HookError, debug, describe
from .ldcache import cmd_update_ldcache
from .procdriver import cmd_mount_proc_driver
from .state import read_state, resolve_rootfs
from .symlinks import cmd_create_symlinks

# The subcommands: the function run, and its options ("list": repeatable, "value" or "flag").
COMMANDS = {
    "configure": (
        cmd_configure,
        {
            "--link": "list",
            "--library": "list",
            "--folder": "list",
            "--gpu": "list",
            "--proc-driver": "flag",
            "--gpus-selected": "flag",
            "--driver-root": "value",
        },
    ),
    "update-ldcache": (cmd_update_ldcache, {"--library": "list", "--folder": "list"}),
    "create-symlinks": (cmd_create_symlinks, {"--link": "list"}),
    "mount-proc-driver": (cmd_mount_proc_driver, {"--gpu": "list", "--driver-root": "value"}),
}
USAGE = f"""usage: {PROG} [--root ROOTFS] SUBCOMMAND [OPTIONS]
OCI createContainer hook injecting the NVIDIA driver. The container comes from the OCI
state on stdin unless --root names its rootfs.
  configure [--link TARGET::LINK]... [--library SONAME::PATH]... [--folder DIR]...
            [--gpu BUSID]... [--proc-driver] [--gpus-selected] [--driver-root DIR]
            all of the below in one run; --gpus-selected: the --gpu list is the whole
            selection, even empty (else the container's /dev/nvidia<N> nodes decide)
  create-symlinks --link TARGET::LINK...                 create symlinks in the container
  update-ldcache [--library SONAME::PATH]... [--folder DIR]...
            add the libraries to the container's /etc/ld.so.cache, the folders to an
            ld.so.conf.d drop-in
  mount-proc-driver --gpu BUSID... [--driver-root DIR]   filter /proc/driver/nvidia
  --version                                              print the version"""


class Args:
    def __init__(self) -> None:
        self.command: str | None = None
        self.version = False
        self.help = False
        self.root: str | None = None
        self.link: list[str] = []
        self.library: list[str] = []
        self.folder: list[str] = []
        self.gpu: list[str] = []
        self.proc_driver = False
        self.gpus_selected = False
        self.driver_root = "/"

    @property
    def func(self):
        return COMMANDS[self.command][0]


def parse_args(argv: list[str]) -> Args:
    args = Args()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        table = {"--root": "value"} | (COMMANDS[args.command][1] if args.command else {})
        if arg in ("-h", "--help"):
            args.help = True
        elif arg == "--version" and args.command is None:
            args.version = True
        elif name in table:
            kind = table[name]
            if kind == "flag":
                if eq:
                    raise HookError(f"{name} takes no value")
                setattr(args, name[2:].replace("-", "_"), True)
            else:
                if not eq:
                    i += 1
                    if i >= len(argv):
                        raise HookError(f"{name} needs a value")
                    value = argv[i]
                attr = name[2:].replace("-", "_")
                if kind == "list":
                    getattr(args, attr).append(value)
                else:
                    setattr(args, attr, value)
        elif args.command is None and not arg.startswith("-"):
            if arg not in COMMANDS:
                raise HookError(f"unknown subcommand {arg!r}; accepted: {', '.join(COMMANDS)}")
            args.command = arg
        else:
            where = f" for {args.command}" if args.command else ""
            raise HookError(f"unrecognized argument {arg!r}{where}")
        i += 1
    return args


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if a in COMMANDS), "hook")
    try:
        os.chdir("/")  # runc starts hooks in the (container-controlled) rootfs
        os.umask(0o022)
        args = parse_args(argv)
        if args.help:
            print(USAGE)
            return 0
        if args.version:
            print(f"{PROG} {__version__}")
            return 0
        if not args.command:
            raise HookError(f"missing subcommand ({', '.join(COMMANDS)})")
        command = args.command
        if not args.driver_root.startswith("/"):  # before anything is looked up under it
            raise HookError(f"--driver-root must be absolute: {args.driver_root!r}")
        root = args.root
        if root is None:
            root = resolve_rootfs(read_state())
        return args.func(args, root)
    except HookError as exc:
        print(f"{PROG}: {command}: {exc}", file=sys.stderr)
    except BaseException as exc:
        if debug():
            raise
        msg = describe(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        print(f"{PROG}: {command}: {' '.join(msg.split())}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
