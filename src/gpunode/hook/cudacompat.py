"""``enable-cuda-compat --host-driver-version=V`` (NVIDIA's hook command line): when the
image's CUDA forward-compatibility libcuda (``/usr/local/cuda/compat/libcuda.so.<ver>``) is
newer, by major version, than the host's driver, that folder goes first in the container's
loader configuration; otherwise nothing is changed (and a drop-in left from an earlier
start of the same container is removed).

As NVIDIA's hook (cmd/nvidia-cdi-hook/cudacompat): exactly one ``libcuda.so.*.*`` in the
folder, its version the part after ``libcuda.so.``; none or several: nothing to do.

Safety (container-toolkit.md §7, CVE-2024-0132 / CVE-2025-23359): nothing is mounted, so
no mount source ever comes from the container; the folder is resolved inside the container
root (CUDA images reach it through the /usr/local/cuda symlink; an absolute or ``..``
link stays inside the root); only a regular file counts as the compat libcuda (a symlink or
a directory of that name is ignored, never followed); versions are parsed bounded (a
major of more than MAJOR_DIGITS digits is not a version). The result is one file, the
ld.so.conf.d drop-in gpunode.hook.ldcache.COMPAT_DROPIN naming CUDA_COMPAT_DIR, written
relative to the directory fd (temporary name + rename, never following a link); the
update-ldcache hook that NVIDIA's specs run next puts the folder's libraries first in the
container's ld.so.cache.
"""

from __future__ import annotations

import os

from ..util.safepath import mkdir_p_in_root, open_in_root
from .errors import HookError, describe
from .fileops import write_file_at
from .ldcache import COMPAT_DROPIN, CUDA_COMPAT_DIR
from .state import open_root

MAJOR_DIGITS = 6
LIBCUDA = "libcuda.so."


def major(version: str) -> int | None:
    """The major of ``N.N[.N…]``; None when it is not one (empty, not digits, too long)."""
    head, dot, rest = version.partition(".")
    if not (head.isascii() and head.isdigit()) or len(head) > MAJOR_DIGITS:
        return None
    if dot and not rest:
        return None
    return int(head)


def compat_major(root_fd: int) -> int | None:
    """The major version of the image's one compat libcuda, or None (no folder, no regular
    ``libcuda.so.X.Y…`` file in it, several, or an unparsable version)."""
    try:
        fd = open_in_root(root_fd, CUDA_COMPAT_DIR, os.O_RDONLY | os.O_DIRECTORY, follow_last=True)
    except OSError:
        return None
    found = []
    try:
        with os.scandir(fd) as entries:
            for n, entry in enumerate(entries):
                if n >= 4096:
                    break
                name = entry.name
                versioned = name.startswith(LIBCUDA) and "." in name[len(LIBCUDA) :]
                if versioned and entry.is_file(follow_symlinks=False):  # lstat: regular only
                    found.append(name[len(LIBCUDA) :])
    except OSError:
        return None
    finally:
        os.close(fd)
    return major(found[0]) if len(found) == 1 else None


def cmd_enable_cuda_compat(args, root_path: str) -> int:
    version = args.host_driver_version
    if not version:
        return 0  # NVIDIA's hook: no host driver version, nothing to compare
    host = major(version)
    if host is None:
        shown = version if len(version) <= 40 else version[:40] + "…"
        raise HookError(
            f"invalid --host-driver-version {shown!r} (want MAJOR.MINOR[.PATCH], "
            f"a major of at most {MAJOR_DIGITS} digits)"
        )
    root_fd = open_root(root_path)
    try:
        compat = compat_major(root_fd)
        wanted = compat is not None and compat > host
        try:
            if wanted:
                conf_fd = mkdir_p_in_root(root_fd, "/etc/ld.so.conf.d")
            else:
                conf_fd = open_in_root(
                    root_fd, "/etc/ld.so.conf.d", os.O_PATH | os.O_DIRECTORY, follow_last=True
                )
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise HookError(f"/etc/ld.so.conf.d: {describe(exc)}") from None
        try:
            if wanted:
                write_file_at(conf_fd, COMPAT_DROPIN, f"{CUDA_COMPAT_DIR}\n".encode())
            else:
                try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
                    os.unlink(COMPAT_DROPIN, dir_fd=conf_fd)  # the entry itself, never a target
                except FileNotFoundError:
                    pass
        except OSError as exc:
            raise HookError(f"/etc/ld.so.conf.d/{COMPAT_DROPIN}: {describe(exc)}") from None
        finally:
            os.close(conf_fd)
    finally:
        os.close(root_fd)
    return 0
