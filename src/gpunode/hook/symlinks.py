"""``create-symlinks``: the symlinks a container gets (``libcuda.so``, the SONAME links of
the injected libraries), made inside its root without ever following one of its links."""

from __future__ import annotations

import os
import stat

from ..util.safepath import mkdir_p_in_root
from .errors import HookError, describe
from .fileops import replace_at, split_container_path
from .state import open_root


def create_symlink(root_fd: int, target: str, link: str) -> str:
    """Make ``link`` (container path) a symlink with text ``target``. Returns what it did."""
    if not target or "\0" in target:
        raise HookError(f"invalid symlink target {target!r}")
    parent_path, name = split_container_path(link)
    try:
        dir_fd = mkdir_p_in_root(root_fd, parent_path)
    except OSError as exc:
        raise HookError(f"{link}: cannot open parent directory: {describe(exc)}") from None
    try:
        return symlink_at(dir_fd, name, target, link)
    finally:
        os.close(dir_fd)


def symlink_at(dir_fd: int, name: str, target: str, shown: str, links_only: bool = False) -> str:
    """Make ``name`` in the directory ``dir_fd`` (resolved inside the root by the caller) a
    symlink with text ``target``: under a temporary name, renamed over it (never following
    what is there). Returns "exists", "created", "replaced" or, with ``links_only``, "kept"
    for an entry there that is not a symlink (what ldconfig leaves). ``shown``: the path
    errors name."""
    try:
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISLNK(st.st_mode) and os.readlink(name, dir_fd=dir_fd) == target:
                return "exists"
            if links_only and not stat.S_ISLNK(st.st_mode):
                return "kept"
            if stat.S_ISDIR(st.st_mode):
                raise HookError(f"{shown}: exists and is a directory")
        # rename(2) replaces a non-directory LINK itself; it never follows it.
        replace_at(dir_fd, name, lambda tmp: os.symlink(target, tmp, dir_fd=dir_fd))
        return "replaced" if st is not None else "created"
    except OSError as exc:
        raise HookError(f"{shown}: {describe(exc)}") from None


def cmd_create_symlinks(args, root_path: str) -> int:
    links = []
    for spec in args.link or []:
        parts = spec.split("::")
        if len(parts) != 2 or not parts[0] or not parts[1]:
            raise HookError(f"invalid --link {spec!r} (want TARGET::LINK)")
        split_container_path(parts[1])
        links.append((parts[0], parts[1]))
    root_fd = open_root(root_path)
    try:
        for target, link in links:
            create_symlink(root_fd, target, link)
    finally:
        os.close(root_fd)
    return 0
