"""``mount-proc-driver``: the container's /proc/driver/nvidia shows only its GPUs, with
``ModifyDeviceFiles: 0``: a read-only tmpfs over it holding the host's version, registry
and (patched) params files and a bind mount of each selected GPU's directory."""

from __future__ import annotations

import contextlib
import os
import sys

from ..nvidia import procfs
from ..nvidia.busid import BusId
from ..nvidia.devices import is_gpu_node
from ..util.safepath import UnsafePath, open_beneath_no_symlinks, proc_fd_path
from .errors import PROG, HookError, describe
from .fileops import create_file_at, open_dir_nofollow, read_at
from .linux import (
    MNT_DETACH,
    MS_BIND,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_RDONLY,
    MS_REMOUNT,
    mount,
    umount2,
)
from .state import open_root


def busid_candidates(busid: str) -> list[str]:
    """procfs names to try for a PCI bus id (32-bit domain first, then 16-bit)."""
    try:
        return BusId.parse(busid, strict=True).procfs_names()
    except ValueError:
        raise HookError(f"invalid PCI bus id {busid!r}") from None


def cmd_mount_proc_driver(args, root_path: str) -> int:
    driver_root = args.driver_root
    wanted = [busid_candidates(b) for b in args.gpu or []]

    host_dir = os.path.join(driver_root, "proc/driver/nvidia")
    try:
        host_fd = os.open(host_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(f"no NVIDIA driver procfs at {host_dir}: {exc.strerror}") from None
    fds: list[int] = [host_fd]
    try:
        # Host sources first, so that nothing is mounted if one is missing.
        try:
            host_gpus = open_dir_nofollow(host_fd, "gpus")
            fds.append(host_gpus)
        except FileNotFoundError:
            host_gpus = -1
        sources: list[tuple[str, int]] = []
        for cands in wanted:
            for name in cands:
                try:
                    src = open_dir_nofollow(host_gpus, name) if host_gpus >= 0 else -1
                except FileNotFoundError:
                    continue
                if src >= 0:
                    fds.append(src)
                    sources.append((name, src))
                    break
            else:
                raise HookError(f"GPU {cands[-1]} not found in {host_dir}/gpus")
        files = {n: read_at(host_fd, n) for n in ("version", "registry", "params")}
        if files["params"] is not None:
            files["params"] = procfs.set_param(files["params"], "ModifyDeviceFiles", "0")

        root_fd = open_root(root_path)
        fds.append(root_fd)
        try:
            proc_fd = open_beneath_no_symlinks(root_fd, "proc", os.O_PATH | os.O_DIRECTORY)
            fds.append(proc_fd)
            driver_fd = open_beneath_no_symlinks(proc_fd, "driver", os.O_PATH | os.O_DIRECTORY)
            fds.append(driver_fd)
        except FileNotFoundError:
            print(
                f"{PROG}: mount-proc-driver: no /proc/driver in the container; skipping",
                file=sys.stderr,
            )
            return 0
        except UnsafePath as exc:
            raise HookError(f"refusing /proc/driver in the container: {exc.strerror}") from None
        except NotADirectoryError:
            raise HookError("refusing /proc/driver in the container: not a directory") from None
        try:
            nv_fd = open_beneath_no_symlinks(driver_fd, "nvidia", os.O_PATH | os.O_DIRECTORY)
            fds.append(nv_fd)
        except FileNotFoundError:
            # Every procfs shows the loaded driver's tree; a container whose /proc lacks it
            # while the host has one is not something to paper over.
            raise HookError(
                "the container's /proc has no driver/nvidia although the host has one"
            ) from None
        except UnsafePath as exc:
            raise HookError(
                f"refusing /proc/driver/nvidia in the container: {exc.strerror}"
            ) from None
        except NotADirectoryError:
            raise HookError(
                "refusing /proc/driver/nvidia in the container: not a directory"
            ) from None
        nv_st = os.fstat(nv_fd)
        if nv_st.st_dev != os.fstat(driver_fd).st_dev:
            raise HookError("/proc/driver/nvidia is already mounted over in the container")

        mount(
            "tmpfs",
            proc_fd_path(nv_fd),
            "tmpfs",
            MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "mode=0555,size=1m,nr_inodes=256",
        )
        try:
            # Look the name up again from its parent: this crosses onto the new mount.
            tmp_fd = open_dir_nofollow(driver_fd, "nvidia")
            fds.append(tmp_fd)
            tst = os.fstat(tmp_fd)
            if tst.st_dev == nv_st.st_dev or os.listdir(proc_fd_path(tmp_fd)):
                raise HookError("/proc/driver/nvidia changed while mounting the tmpfs")
            for name in ("version", "registry", "params"):
                if files[name] is not None:
                    create_file_at(tmp_fd, name, files[name])
            os.mkdir("gpus", 0o555, dir_fd=tmp_fd)
            gpus_fd = open_dir_nofollow(tmp_fd, "gpus")
            fds.append(gpus_fd)
            for name, src in sources:
                os.mkdir(name, 0o555, dir_fd=gpus_fd)
                dst = open_dir_nofollow(gpus_fd, name)
                fds.append(dst)
                mount(proc_fd_path(src), proc_fd_path(dst), None, MS_BIND, None)
                bound = open_dir_nofollow(gpus_fd, name)  # the bind mount's root
                fds.append(bound)
                mount(
                    None,
                    proc_fd_path(bound),
                    None,
                    MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                    None,
                )
            mount(
                None,
                proc_fd_path(tmp_fd),
                None,
                MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
                None,
            )
        except BaseException:
            # Undo: lazily unmount whatever now covers the original directory (our
            # tmpfs, and with it the GPU bind mounts below it).
            with contextlib.suppress(OSError):
                fd = open_dir_nofollow(driver_fd, "nvidia")
                fds.append(fd)
                if os.fstat(fd).st_dev != nv_st.st_dev:
                    umount2(proc_fd_path(fd), MNT_DETACH)
            raise
    except OSError as exc:
        raise HookError(describe(exc)) from None
    finally:
        for fd in fds:
            os.close(fd)
    return 0


def gpus_from_container_devices(root_path: str, driver_root: str) -> list[str]:
    """Bus ids of the GPUs whose /dev/nvidia<minor> the container was given.

    Used when the hook comes from a CDI spec, which cannot know which of its devices a
    container will get: the device nodes the engine created in the rootfs say so.
    """
    root_fd = open_root(root_path)
    try:
        try:
            dev_fd = open_beneath_no_symlinks(root_fd, "dev", os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            return []
        try:
            minors = set()
            for name in os.listdir(dev_fd):
                suffix = name[6:]
                if not (name.startswith("nvidia") and suffix.isascii() and suffix.isdigit()):
                    continue
                st = os.stat(name, dir_fd=dev_fd, follow_symlinks=False)
                if is_gpu_node(st):
                    minors.add(os.minor(st.st_rdev))
        finally:
            os.close(dev_fd)
    finally:
        os.close(root_fd)
    gpus_dir = os.path.join(driver_root, "proc/driver/nvidia/gpus")
    out = []
    for bus in sorted(os.listdir(gpus_dir)) if os.path.isdir(gpus_dir) else []:
        try:
            with open(os.path.join(gpus_dir, bus, "information")) as fh:
                info = procfs.parse_information(fh.read())
            if int(info["Device Minor"]) in minors:
                out.append(bus)
        except (OSError, KeyError, ValueError):
            continue
    return out
