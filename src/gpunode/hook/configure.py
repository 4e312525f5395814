"""``configure``: all of a container's setup in one process.

Two halves, which the runtime shim also calls in-process on its own path (no hook there):
``rootfs`` (symlinks, ld.so.conf.d drop-in and ld.so.cache: files written into the
container root) and ``proc_sources`` (the host's side of the filtered /proc/driver/nvidia,
whose other half, ``procdriver.install``, runs where the container's mounts are).
"""

from __future__ import annotations

import os
import sys

from .errors import PROG
from .ldcache import cmd_update_ldcache
from .procdriver import (
    Sources,
    gpus_from_container_devices,
    install_at,
    mig_caps_from_container_devices,
    open_sources,
)
from .symlinks import cmd_create_symlinks


def rootfs(args, root_path: str, mark=None) -> None:
    """The files a container gets in its root: symlinks, then the ld cache. `mark(phase)`,
    when given, is called after each (gpunode.hook.timing's marks)."""
    if args.link:
        cmd_create_symlinks(args, root_path)
    if mark:
        mark("symlinks")
    if args.library or args.folder:
        cmd_update_ldcache(args, root_path)
    if mark:
        mark("ldcache")


def proc_sources(args, root_path: str) -> Sources | None:
    """The detached mounts of the container's /proc/driver/nvidia (procdriver), or None
    when it gets none (no --proc-driver, or no driver procfs on the host: said on stderr)."""
    if not args.proc_driver:
        return None
    host = os.path.join(args.driver_root, "proc/driver/nvidia")
    if not os.path.isdir(host):
        print(
            f"{PROG}: configure: {host} not found; /proc/driver/nvidia left as is",
            file=sys.stderr,
        )
        return None
    if not args.gpus_selected and not args.gpu:  # CDI: the device nodes given say which
        args.gpu = gpus_from_container_devices(root_path, args.driver_root)
        if not args.mig_cap and not args.mig_caps_all:
            args.mig_cap = mig_caps_from_container_devices(root_path, args.driver_root)
    return open_sources(args.driver_root, args.gpu, args.mig_cap, args.mig_caps_all)


def cmd_configure(args, root_path: str, mark=None) -> int:
    """All of a container's setup in one process: symlinks, ld cache, /proc/driver/nvidia.

    One invocation instead of three keeps the hook's cost on container start to one
    Python start-up. `mark`: as for ``rootfs``, also after the /proc sources and their
    install.
    """
    rootfs(args, root_path, mark)
    src = proc_sources(args, root_path)
    if mark:
        mark("sources")
    if src is not None:
        install_at(src, root_path)
    if mark:
        mark("proc")
    return 0
