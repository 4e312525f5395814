"""gpunode-hook's entry: the subcommand table and ``main`` (the command line is parsed by
gpunode.hook.args). The launcher imports this module with ``python -IS``.
"""

from __future__ import annotations

import os
import sys
import time

from .. import __version__
from . import TIMING_LOG
from .args import OPTIONS, parse_args
from .configure import cmd_configure
from .errors import PROG, HookError, debug, describe
from .ldcache import cmd_update_ldcache
from .procdriver import cmd_mount_proc_driver
from .state import read_state, resolve_rootfs
from .symlinks import cmd_create_symlinks

# The subcommands: the function run (their options: gpunode.hook.args.OPTIONS).
COMMANDS = {
    "configure": cmd_configure,
    "update-ldcache": cmd_update_ldcache,
    "create-symlinks": cmd_create_symlinks,
    "mount-proc-driver": cmd_mount_proc_driver,
}
USAGE = f"""usage: {PROG} [--root ROOTFS] SUBCOMMAND [OPTIONS]
OCI createContainer hook injecting the NVIDIA driver. The container comes from the OCI
state on stdin unless --root names its rootfs.
  configure [--link TARGET::LINK]... [--library SONAME::PATH]... [--folder DIR]...
            [--gpu BUSID]... [--proc-driver] [--gpus-selected] [--driver-root DIR]
            [--mig-cap CAP]... [--mig-caps-all]
            all of the below in one run; --gpus-selected: the --gpu and --mig-cap lists
            are the whole selection, even empty (else the container's /dev/nvidia<N> and
            /dev/nvidia-caps nodes decide)
  create-symlinks --link TARGET::LINK...                 create symlinks in the container
  update-ldcache [--library SONAME::PATH]... [--folder DIR]...
            add the libraries to the container's /etc/ld.so.cache, the folders to an
            ld.so.conf.d drop-in
  mount-proc-driver --gpu BUSID... [--mig-cap CAP]... [--mig-caps-all] [--driver-root DIR]
            filter /proc/driver/nvidia; --mig-cap gpu0/mig/gi1/access: that MIG access
            file under capabilities/, --mig-caps-all: the whole capabilities tree
  --version                                              print the version"""


def main(argv: list[str] | None = None) -> int:
    return run(list(sys.argv[1:] if argv is None else argv), PROG, OPTIONS, COMMANDS, USAGE)


def run(argv: list[str], prog: str, options: dict, commands: dict, usage: str) -> int:
    """Parse *argv* against *options*, run the subcommand's function from *commands* on the
    container (stdin's OCI state, or --root) and turn every failure into one line on stderr
    (``<prog>: <subcommand>: <reason>``, exit 1). Shared by gpunode-hook and NVIDIA's hook
    command line (gpunode.hook.nvcli)."""
    command = next((a for a in argv if a in commands), "hook")
    cpu0 = time.process_time()  # issue 28's timings (gpunode.hook.timing)
    marks = [("start", time.perf_counter())]

    def mark(name):
        marks.append((name, time.perf_counter()))

    try:
        os.chdir("/")  # runc starts hooks in the (container-controlled) rootfs
        os.umask(0o022)
        args = parse_args(argv, options)
        if args.help:
            print(usage)
            return 0
        if args.version:
            print(f"{prog} {__version__}" + ("" if prog == PROG else f" ({PROG})"))
            return 0
        if not args.command:
            raise HookError(f"missing subcommand ({', '.join(commands)})")
        command = args.command
        if not args.driver_root.startswith("/"):  # before anything is looked up under it
            raise HookError(f"--driver-root must be absolute: {args.driver_root!r}")
        root, ident = args.root, None
        if root is None:
            state = read_state()
            root = resolve_rootfs(state)
            ident = state.get("id") if isinstance(state.get("id"), str) else None
        mark("state")
        run_command = commands[args.command]
        if run_command is cmd_configure:
            status = run_command(args, root, mark)
        else:
            status = run_command(args, root)
            mark(args.command)
        if os.path.exists(TIMING_LOG):  # gpunode.hook.timing, loaded only when asked for
            from .timing import write

            write(TIMING_LOG, prog, ident, cpu0, marks)
        return status
    except HookError as exc:
        print(f"{prog}: {command}: {exc}", file=sys.stderr)
    except BaseException as exc:
        if debug():
            raise
        msg = describe(exc) if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        print(f"{prog}: {command}: {' '.join(msg.split())}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
