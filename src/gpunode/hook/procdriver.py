"""``mount-proc-driver``: the container's /proc/driver/nvidia shows only its GPUs, with
``ModifyDeviceFiles: 0``: a read-only tmpfs over it holding the host's version, registry
and (patched) params files, a read-only bind mount of each selected GPU's directory and,
for MIG devices, a read-only bind mount of each of their GI and CI ``access`` files at
its ``capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access`` path (or, for
NVIDIA_MIG_CONFIG_DEVICES / _MONITOR_DEVICES, of the whole ``capabilities`` directory), as
libnvidia-container's mount_procfs_mig does. runc refuses mount destinations inside /proc,
so these are attached here, as the GPUs' directories are, not as spec mounts.

One implementation for both callers, in two steps, all by fd with the new mount API (no
``/proc/self/fd`` path, which would not resolve where the container's procfs is another
PID namespace's):

* ``open_sources`` (in the host's mount namespace): the host's files read, each selected
  GPU's directory cloned as a detached read-only bind mount (``open_tree``), the tmpfs made
  detached (``fsopen``/``fsmount``), filled and made read-only. Nothing is attached yet, so
  nothing is left behind when a source is missing.
* ``install`` (in the container's mount namespace, given its root as an fd): the
  container's /proc/driver/nvidia checked (no symlink, not mounted over) and the tmpfs and
  the GPU directories attached there (``move_mount``).

The hook (createContainer, CDI path) runs both in the container's mount namespace before
pivot_root; the runtime shim runs ``open_sources`` in the host's and ``install`` in a child
that entered the created container's mount namespace (``in_namespace``).
"""

from __future__ import annotations

import os
import stat
import sys

from ..nvidia import procfs
from ..nvidia.busid import BusId
from ..nvidia.devices import is_gpu_node
from ..util.safepath import UnsafePath, open_beneath_no_symlinks
from .errors import PROG, HookError, describe
from .fileops import create_file_at, open_dir_nofollow, read_at
from .linux import (
    CLONE_NEWNS,
    MNT_DETACH,
    MOUNT_ATTR_LOCKED_DOWN,
    MOUNT_ATTR_NODEV,
    MOUNT_ATTR_NOEXEC,
    MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY,
    mount_setattr,
    move_mount,
    new_fs_mount,
    open_tree_clone,
    setns,
    umount2,
)
from .state import open_root

TMPFS_OPTIONS = {"mode": "0555", "size": "1m", "nr_inodes": "256"}
PROC_FILES = ("version", "registry", "params")


def busid_candidates(busid: str) -> list[str]:
    """procfs names to try for a PCI bus id (32-bit domain first, then 16-bit)."""
    try:
        return BusId.parse(busid, strict=True).procfs_names()
    except ValueError:
        raise HookError(f"invalid PCI bus id {busid!r}") from None


class Sources:
    """What the container's /proc/driver/nvidia gets, as detached mounts (see the module
    docstring). Close it when done: the fds are the only references to the mounts."""

    def __init__(self) -> None:
        self.tmpfs = -1
        self.gpus: list[tuple[str, int]] = []  # (directory name, detached bind mount)
        # (path under /proc/driver/nvidia as its parts, detached bind mount, is a directory)
        self.caps: list[tuple[list[str], int, bool]] = []
        self.fds: list[int] = []

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


CAPS_DIR = "capabilities"


def cap_parts(cap: str) -> list[str]:
    """A MIG capability (``gpu0/mig/gi1/access``, ``gpu0/mig/gi1/ci0/access``) as its path
    parts under /proc/driver/nvidia; HookError for anything else."""
    parts = cap.split("/")
    ok = (
        len(parts) in (4, 5)
        and parts[0].startswith("gpu")
        and parts[1] == "mig"
        and parts[2].startswith("gi")
        and (len(parts) == 4 or parts[3].startswith("ci"))
        and parts[-1] == "access"
        and all(p[2:].isascii() and p[2:].isdigit() for p in parts[2:-1])
        and parts[0][3:].isascii()
        and parts[0][3:].isdigit()
    )
    if not ok:
        raise HookError(
            f"invalid MIG capability {cap!r}: expected gpu<N>/mig/gi<G>/access or "
            "gpu<N>/mig/gi<G>/ci<C>/access"
        )
    return [CAPS_DIR, *parts]


def _open_host_path(host_fd: int, parts: list[str], is_dir: bool) -> int:
    """An O_PATH fd of ``parts`` under ``host_fd``, no symlink followed on the way."""
    fds = []
    try:
        at = host_fd
        for name in parts[:-1]:
            at = open_dir_nofollow(at, name)
            fds.append(at)
        if is_dir:
            return open_dir_nofollow(at, parts[-1])
        return os.open(parts[-1], os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=at)
    finally:
        for fd in fds:
            os.close(fd)


def open_sources(
    driver_root: str, gpus: list[str], caps: list[str] | None = None, caps_all: bool = False
) -> Sources:
    """The host's /proc/driver/nvidia (under ``driver_root``) for GPUs ``gpus`` (bus ids)
    and MIG capabilities ``caps`` (their access files; ``caps_all``: the whole
    capabilities directory), as detached mounts. Raises HookError when the host tree, a
    GPU or a capability is missing."""
    wanted = [busid_candidates(b) for b in gpus]
    cap_paths = [[CAPS_DIR]] if caps_all else [cap_parts(c) for c in caps or []]
    host_dir = os.path.join(driver_root, "proc/driver/nvidia")
    try:
        host_fd = os.open(host_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(f"no NVIDIA driver procfs at {host_dir}: {exc.strerror}") from None
    src = Sources()
    src.fds.append(host_fd)
    try:
        try:
            host_gpus = open_dir_nofollow(host_fd, "gpus")
            src.fds.append(host_gpus)
        except FileNotFoundError:
            host_gpus = -1
        for cands in wanted:
            for name in cands:
                try:
                    gpu_fd = open_dir_nofollow(host_gpus, name) if host_gpus >= 0 else -1
                except FileNotFoundError:
                    continue
                if gpu_fd >= 0:
                    src.fds.append(gpu_fd)
                    clone = open_tree_clone(gpu_fd)
                    src.fds.append(clone)
                    mount_setattr(clone, MOUNT_ATTR_LOCKED_DOWN)
                    src.gpus.append((name, clone))
                    break
            else:
                raise HookError(f"GPU {cands[-1]} not found in {host_dir}/gpus")
        for parts in cap_paths:
            is_dir = len(parts) == 1
            try:
                cap_fd = _open_host_path(host_fd, parts, is_dir)
            except (FileNotFoundError, NotADirectoryError):
                raise HookError(
                    f"MIG capability {'/'.join(parts[1:]) or 'tree'} not found in "
                    f"{host_dir}/{CAPS_DIR}"
                ) from None
            src.fds.append(cap_fd)
            clone = open_tree_clone(cap_fd)
            src.fds.append(clone)
            mount_setattr(clone, MOUNT_ATTR_LOCKED_DOWN)
            src.caps.append((parts, clone, is_dir))
        files = {n: read_at(host_fd, n) for n in PROC_FILES}
        if files["params"] is not None:
            files["params"] = procfs.set_param(files["params"], "ModifyDeviceFiles", "0")
        src.tmpfs = new_fs_mount(
            "tmpfs", TMPFS_OPTIONS, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC
        )
        src.fds.append(src.tmpfs)
        for name in PROC_FILES:
            if files[name] is not None:
                create_file_at(src.tmpfs, name, files[name])
        os.mkdir("gpus", 0o555, dir_fd=src.tmpfs)
        gpus_fd = open_dir_nofollow(src.tmpfs, "gpus")
        try:
            for name, _ in src.gpus:
                os.mkdir(name, 0o555, dir_fd=gpus_fd)
        finally:
            os.close(gpus_fd)
        for parts, _, is_dir in src.caps:
            _make_mount_point(src.tmpfs, parts, is_dir)
        mount_setattr(src.tmpfs, MOUNT_ATTR_RDONLY)
    except OSError as exc:
        src.close()
        raise HookError(describe(exc)) from None
    except BaseException:
        src.close()
        raise
    return src


def _make_mount_point(tmpfs: int, parts: list[str], is_dir: bool) -> None:
    """The directories of ``parts`` in the tmpfs and, at its end, an empty directory or
    file for a bind mount."""
    fds = []
    try:
        at = tmpfs
        for name in parts[:-1]:
            try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
                os.mkdir(name, 0o555, dir_fd=at)
            except FileExistsError:
                pass
            at = open_dir_nofollow(at, name)
            fds.append(at)
        if is_dir:
            os.mkdir(parts[-1], 0o555, dir_fd=at)
        else:
            create_file_at(at, parts[-1], b"")
    finally:
        for fd in fds:
            os.close(fd)


def install(src: Sources, root_fd: int) -> bool:
    """Attach ``src`` over /proc/driver/nvidia of the container root ``root_fd`` (in the
    caller's mount namespace). False (and a note on stderr) when the container has no
    /proc/driver; HookError when its /proc/driver/nvidia is unsafe or missing."""
    fds: list[int] = []
    try:
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
            return False
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
        move_mount(src.tmpfs, nv_fd)
        try:
            # Look the name up again from its parent: this crosses onto the new mount,
            # which must be our tmpfs.
            tmp_fd = open_dir_nofollow(driver_fd, "nvidia")
            fds.append(tmp_fd)
            if os.fstat(tmp_fd).st_dev != os.fstat(src.tmpfs).st_dev:
                raise HookError("/proc/driver/nvidia changed while mounting the tmpfs")
            gpus_fd = open_dir_nofollow(tmp_fd, "gpus")
            fds.append(gpus_fd)
            for name, clone in src.gpus:
                dst = open_dir_nofollow(gpus_fd, name)
                fds.append(dst)
                move_mount(clone, dst)
            for parts, clone, is_dir in src.caps:
                dst = _open_host_path(tmp_fd, parts, is_dir)  # in our own tmpfs
                fds.append(dst)
                move_mount(clone, dst)
        except BaseException:
            # Undo: lazily unmount our tmpfs (and the GPU mounts below it), by a name
            # relative to the directory that holds it.
            try:
                cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                fds.append(cwd)
                os.fchdir(driver_fd)
                try:
                    umount2("nvidia", MNT_DETACH)
                finally:
                    os.fchdir(cwd)
            except OSError:
                pass
            raise
    except OSError as exc:
        raise HookError(describe(exc)) from None
    finally:
        for fd in fds:
            os.close(fd)
    return True


def in_namespace(src: Sources, pid: int) -> None:
    """``install`` in the mount namespace of process ``pid`` (a created container's init),
    from a forked child: the caller's own namespace, root and working directory are not
    touched. Raises HookError with the child's one-line error."""
    try:
        ns_fd = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(f"cannot open the container's mount namespace: {describe(exc)}") from None
    rfd, wfd = os.pipe()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:  # pragma: no cover - runs in the forked child
            code = 1
            try:
                os.close(rfd)
                setns(ns_fd, CLONE_NEWNS)  # also moves root and cwd to the namespace's root
                root_fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                install(src, root_fd)
                code = 0
            except HookError as exc:
                os.write(wfd, str(exc).encode(errors="replace"))
            except OSError as exc:
                os.write(wfd, describe(exc).encode(errors="replace"))
            except BaseException as exc:
                os.write(wfd, f"{type(exc).__name__}: {exc}".encode(errors="replace"))
            finally:
                try:  # noqa: SIM105 - contextlib costs the start path ~1 ms
                    sys.stderr.flush()
                except BaseException:
                    pass
                os._exit(code)
        os.close(wfd)
        wfd = -1
        message = b""
        while chunk := os.read(rfd, 4096):
            message += chunk
        _, status = os.waitpid(child, 0)
    finally:
        for fd in (ns_fd, rfd, wfd):
            if fd >= 0:
                os.close(fd)
    if status != 0:
        text = " ".join(message.decode(errors="replace").split())
        raise HookError(text or f"the mount child failed ({os.waitstatus_to_exitcode(status)})")


def install_at(src: Sources, root_path: str) -> None:
    """``install`` into the container root at ``root_path``, then close ``src``."""
    try:
        root_fd = open_root(root_path)
        try:
            install(src, root_fd)
        finally:
            os.close(root_fd)
    finally:
        src.close()


def cmd_mount_proc_driver(args, root_path: str) -> int:
    install_at(
        open_sources(args.driver_root, args.gpu or [], args.mig_cap, args.mig_caps_all),
        root_path,
    )
    return 0


def mig_caps_from_container_devices(root_path: str, driver_root: str) -> list[str]:
    """The MIG capabilities (``gpu<N>/mig/gi<G>[/ci<C>]/access``) whose cap node
    (/dev/nvidia-caps/nvidia-cap<minor>) the container was given: the CDI path's
    counterpart of gpus_from_container_devices (a MIG device's CDI entry gives its GI and
    CI cap nodes; the driver's access files say which capability each minor is)."""
    root_fd = open_root(root_path)
    minors = set()
    try:
        try:
            caps_fd = open_beneath_no_symlinks(
                root_fd, "dev/nvidia-caps", os.O_RDONLY | os.O_DIRECTORY
            )
        except OSError:
            return []
        try:
            for name in os.listdir(caps_fd):
                suffix = name[len("nvidia-cap") :]
                if not (name.startswith("nvidia-cap") and suffix.isascii() and suffix.isdigit()):
                    continue
                st = os.stat(name, dir_fd=caps_fd, follow_symlinks=False)
                if stat.S_ISCHR(st.st_mode):
                    minors.add(os.minor(st.st_rdev))
        finally:
            os.close(caps_fd)
    finally:
        os.close(root_fd)
    if not minors:
        return []
    from ..nvidia import mig  # only for a container given MIG devices through CDI

    proc = os.path.join(driver_root, "proc/driver/nvidia")
    out = []
    for gpu_name in sorted(os.listdir(os.path.join(proc, CAPS_DIR))):
        minor = gpu_name[3:]
        if not (gpu_name.startswith("gpu") and minor.isascii() and minor.isdigit()):
            continue
        for gi, ci in sorted(mig.instances(proc, int(minor))):
            for cap in (mig.gi_cap(int(minor), gi), mig.ci_cap(int(minor), gi, ci)):
                try:
                    found = mig.read_cap_minor(mig.access_file(proc, cap))
                except mig.CapsError:
                    continue
                if found in minors and cap not in out:
                    out.append(cap)
    return out


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
