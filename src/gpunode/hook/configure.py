"""``configure``: all of a container's setup in one process."""

from __future__ import annotations

import os
import sys

from .errors import PROG
from .ldcache import cmd_update_ldcache
from .procdriver import cmd_mount_proc_driver, gpus_from_container_devices
from .symlinks import cmd_create_symlinks


def cmd_configure(args, root_path: str) -> int:
    """All of a container's setup in one process: symlinks, ld cache, /proc/driver/nvidia.

    One invocation instead of three keeps the hook's cost on container start to one
    Python start-up.
    """
    if args.link:
        cmd_create_symlinks(args, root_path)
    if args.library or args.folder:
        cmd_update_ldcache(args, root_path)
    if args.proc_driver:
        host = os.path.join(args.driver_root, "proc/driver/nvidia")
        if not os.path.isdir(host):
            print(
                f"{PROG}: configure: {host} not found; /proc/driver/nvidia left as is",
                file=sys.stderr,
            )
            return 0
        if not args.gpus_selected and not args.gpu:  # CDI: the device nodes given say which
            args.gpu = gpus_from_container_devices(root_path, args.driver_root)
        cmd_mount_proc_driver(args, root_path)
    return 0
