"""Apply a GPU profile on a (simulated) node: create what a loaded NVIDIA driver creates.

Runs as root *inside* the node container (``gpunode sim apply-local``). It produces:

* device nodes: ``/dev/nvidiactl`` (195:255), ``/dev/nvidia-modeset`` (195:254),
  ``/dev/nvidia-uvm`` / ``/dev/nvidia-uvm-tools`` (a dynamic major, like the real module
  registers) and ``/dev/nvidia<minor>`` (195:minor) per GPU;
* a ``/proc/driver/nvidia`` tree on a tmpfs mounted over ``/proc/driver``, and the
  driver's ``/proc/driver/nvidia-nvswitch`` (its NVSwitches, if any);
* a driver load resets the NVSwitch fabric to untrained and restarts an enabled fabric
  manager unit, as a boot would (:func:`apply_fabric`, :mod:`gpunode.sim.fabric`);
* the driver's kernel log lines (its load line, an Xid per fault) in ``/dev/kmsg``;
* the driver's MIG state and its footprint (capability files, ``mig-minors``,
  ``/dev/nvidia-caps``; see :mod:`gpunode.sim.migstate`): set from the profile's ``mig:``,
  kept when the same profile is applied again;
* the driver's majors in ``/proc/devices`` (``195 nvidia-frontend``, or ``nvidia``,
  ``nvidia-modeset`` and ``nvidiactl`` from the 545 branch on; ``nvidia-uvm``;
  ``nvidia-caps``): the kernel's file plus those lines, rendered to ``/run/gpunode-sim/devices``
  and bind-mounted read-only over the node's ``/proc/devices`` (see :func:`apply_proc_devices`);
* the mock NVML as ``<libdir>/libnvidia-ml.so.<driver version>`` with the profile compiled
  into it, and ``libnvidia-ml.so.1`` pointing at it, so the GPU data travels with the
  library into containers (a real NVML in a CDI container has no /proc either);
* the node's NVIDIA PCI functions in ``/sys/bus/pci/devices`` (a tmpfs over it with the
  kernel's other entries; see :func:`apply_pci_sysfs` and :mod:`gpunode.sim.pcisysfs`);
* the simulator's stand-in for the kernel module showing its tree in every procfs:
  ``procdriver.c`` installed as the node's runc and crun, the real binaries diverted to
  ``*.gpunode-real``, so every container gets the node's ``/proc/driver`` and
  ``/proc/devices`` (see :mod:`gpunode.sim.procdriver`).

Re-applying the same profile changes nothing; applying another replaces the previous one.

Keeping the mock in place when Debian's driver packages are installed later: the library
paths Debian's ``libnvidia-ml1`` ships are diverted with ``dpkg-divert --rename`` to
``*.gpunode-real`` *before* any package is installed. dpkg then unpacks the real library
under the diverted name and never overwrites ours; ``dpkg-divert --list 'gpunode*'`` shows
them and removing the diversion (``--remove --rename``) restores the package's file.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..nvidia.devices import CTL_MINOR, MODESET_MINOR, NVIDIA_MAJOR
from ..util.files import write_atomic
from . import fabric, migstate, mocknvml, pcisysfs, procdriver, procfs
from .devnodes import ensure_chr
from .procfs import UVM_MAJOR, DevicesError
from .profiles import Profile, mock_payload

MULTIARCH_LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
MOCK_BASE = Path("/usr/lib/gpunode-sim/libnvidia-ml.mock.so")
STATE_FILE = Path(migstate.NODE_DISK) / "profile.json"
# The node's /proc/devices as a loaded driver would make it; on /run, like kernel state it
# is gone when the node restarts (and so is the bind mount that shows it).
DEVICES_FILE = Path("/run/gpunode-sim/devices")
DIVERT_SUFFIX = ".gpunode-real"
PCI_DEVICES = Path("/sys/bus/pci/devices")
# The kernel's entries of PCI_DEVICES as they were when the simulator's tmpfs first covered
# it (name -> [symlink target, vendor]); on /run, gone with the mount when the node restarts.
PCI_SNAPSHOT = Path("/run/gpunode-sim/pci-devices.json")


@dataclass
class Paths:
    dev: Path = Path(migstate.DEV)
    proc_driver: Path = Path(migstate.PROC_DRIVER)
    proc_devices: Path = Path("/proc/devices")  # the kernel's; ours is mounted over it
    devices_file: Path | None = None  # None: DEVICES_FILE on a real system, none elsewhere
    libdir: Path = MULTIARCH_LIBDIR
    mock_base: Path = MOCK_BASE
    state: Path = STATE_FILE
    procdriver: Path = procdriver.IN_NODE
    runtimes: tuple[Path, ...] | None = None  # None: procdriver.RUNTIMES on a real system
    # None: PCI_DEVICES and PCI_SNAPSHOT on a real system, no PCI sysfs elsewhere
    pci_devices: Path | None = None
    pci_snapshot: Path | None = None
    real_system: bool = True  # mount tmpfs, run ldconfig and dpkg-divert


@dataclass
class Result:
    changed: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.changed.append(what)


def _mount_fstype(path: Path) -> str | None:
    """The file system type of the topmost mount at exactly *path*, or None."""
    target = str(path)
    fstype = None
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            sep = parts.index("-")
            if parts[4] == target:
                fstype = parts[sep + 1]
    return fstype


def _is_mountpoint_tmpfs(path: Path) -> bool:
    return _mount_fstype(path) == "tmpfs"


def _write_if_changed(path: Path, text: str, res: Result, mode: int = 0o444) -> None:
    if write_atomic(path, text.encode(), mode):
        res.note(f"wrote {path}")


def _ensure_chr(path: Path, major: int, minor: int, res: Result, mode: int = 0o666) -> None:
    if ensure_chr(path, major, minor, mode):
        res.note(f"created {path} ({major}:{minor})")


def _remove(path: Path, res: Result) -> None:
    if path.is_symlink() or path.exists():
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
        res.note(f"removed {path}")


def apply_devices(profile: Profile, paths: Paths, res: Result) -> None:
    wanted: dict[str, tuple[int, int]] = {}
    if profile.driver is not None:
        wanted["nvidiactl"] = (NVIDIA_MAJOR, CTL_MINOR)
        wanted["nvidia-modeset"] = (NVIDIA_MAJOR, MODESET_MINOR)
        wanted["nvidia-uvm"] = (UVM_MAJOR, 0)
        wanted["nvidia-uvm-tools"] = (UVM_MAJOR, 1)
        for gpu in profile.gpus:
            if "device_node_missing" not in gpu.faults:
                wanted[f"nvidia{gpu.minor}"] = (NVIDIA_MAJOR, gpu.minor)
    for entry in sorted(paths.dev.glob("nvidia*")):
        if entry.name not in wanted and not entry.is_dir():
            _remove(entry, res)
    for name, (major, minor) in wanted.items():
        _ensure_chr(paths.dev / name, major, minor, res)


def apply_procfs(profile: Profile, paths: Paths, res: Result) -> bool:
    """The driver's /proc/driver trees: ``nvidia`` and ``nvidia-nvswitch``
    (:func:`fabric.proc_tree`). True when this (re)loads the driver: the tmpfs was mounted
    (a fresh or restarted node) or the driver's version line changed."""
    nvidia = paths.proc_driver / "nvidia"
    loaded = False
    if paths.real_system and not _is_mountpoint_tmpfs(paths.proc_driver):
        if profile.driver is None:
            return False  # nothing to show and nothing to clean up
        subprocess.run(
            [
                "mount",
                "-t",
                "tmpfs",
                "-o",
                "mode=0555,nosuid,nodev,noexec",
                "gpunode-sim",
                str(paths.proc_driver),
            ],
            check=True,
        )
        res.note(f"mounted tmpfs on {paths.proc_driver}")
        loaded = True
    if profile.driver is None:
        _remove(nvidia, res)
        _remove(paths.proc_driver / fabric.NVSWITCH_PROC, res)
        return False
    before = len(res.changed)
    _write_if_changed(nvidia / "version", procfs.render_version(profile), res)
    loaded = loaded or len(res.changed) > before
    _write_if_changed(nvidia / "params", procfs.render_params(), res)
    _write_if_changed(nvidia / "registry", 'Binary: ""\n', res)
    gpus_dir = nvidia / "gpus"
    gpus_dir.mkdir(parents=True, exist_ok=True)
    wanted = {gpu.bus_id.procfs: gpu for gpu in profile.gpus}
    for entry in sorted(gpus_dir.iterdir()):
        if entry.name not in wanted:
            _remove(entry, res)
    for bus, gpu in wanted.items():
        _write_if_changed(
            gpus_dir / bus / "information", procfs.render_information(gpu, profile), res
        )
    switch_files = fabric.proc_tree(profile)
    devices = paths.proc_driver / fabric.NVSWITCH_PROC / "devices"
    devices.mkdir(parents=True, exist_ok=True)
    for entry in sorted(devices.iterdir()):
        if f"{fabric.NVSWITCH_PROC}/devices/{entry.name}/information" not in switch_files:
            _remove(entry, res)
    for name, text in switch_files.items():
        _write_if_changed(paths.proc_driver / name, text, res)
    return loaded


def apply_fabric(paths: Paths, res: Result, loaded: bool) -> None:
    """A driver load untrains the NVSwitch fabric (:mod:`gpunode.sim.fabric`): its state
    goes, NOT_STARTED until a fabric manager trains it again. On a node, a fabric manager
    unit that is enabled (or running) is then restarted, as a boot starts it after the
    driver has loaded: the simulator loads its driver after systemd has started the node's
    units, so FM would otherwise have found no driver (or the previous one). Whether it
    trains the fabric is FM's business (a version mismatch: it exits 1)."""
    if not loaded:
        return
    if fabric.reset(paths.proc_driver):
        res.note(f"reset the NVSwitch fabric ({fabric.state_file(paths.proc_driver)})")
    if not paths.real_system or shutil.which("systemctl") is None:
        return
    unit = fabric.UNIT_NAME
    enabled = subprocess.run(["systemctl", "is-enabled", "--quiet", unit], check=False)
    active = subprocess.run(["systemctl", "is-active", "--quiet", unit], check=False)
    if enabled.returncode == 0 or active.returncode == 0:
        done = subprocess.run(
            ["systemctl", "restart", unit], capture_output=True, check=False, timeout=300
        )
        res.note(f"restarted {unit} after the driver load (exit {done.returncode})")


def _kernel_devices(paths: Paths) -> str:
    """The kernel's /proc/devices, also while the simulator's file is mounted over it."""
    if not (paths.real_system and _mount_fstype(paths.proc_devices)):
        return paths.proc_devices.read_text(encoding="utf-8")
    # Read it in a private mount namespace without the mounts over it (the node's own view
    # keeps showing the driver's lines meanwhile).
    script = 'while umount "$1" 2>/dev/null; do :; done; exec cat "$1"'
    unshare = ["unshare", "--mount", "--propagation", "private"]
    proc = subprocess.run(
        [*unshare, "sh", "-c", script, "sh", str(paths.proc_devices)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not proc.stdout:
        raise DevicesError(
            f"cannot read the kernel's {paths.proc_devices} from under the simulator's: "
            f"{proc.stderr.strip() or f'exit {proc.returncode}'}"
        )
    return proc.stdout


def _rewrite_in_place(path: Path, text: str, res: Result) -> None:
    """Write *text* into *path* keeping its inode, so every bind mount of it (the node's
    /proc/devices and each container's) shows the new text at once, as the kernel's table
    is one for all. A reader racing the write may see a mix; applying a profile is rare."""
    data = text.encode()
    try:
        if path.read_bytes() == data:
            return
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o444)
    try:
        os.fchmod(fd, 0o444)
        os.write(fd, data)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)
    res.note(f"wrote {path}")


def apply_proc_devices(profile: Profile, paths: Paths, res: Result) -> None:
    """Show the driver's majors in the node's /proc/devices.

    On a server the kernel lists the majors a loaded driver registered in /proc/devices,
    for every process and container: NVIDIA's tools read them there (nvidia-ctk system
    create-device-nodes and create-dev-char-symlinks, the toolkit's MIG cap nodes). A node's
    procfs is the host's, so the simulator renders the kernel's file plus the driver's
    lines (:func:`procfs.render_devices`) to DEVICES_FILE and bind-mounts it read-only over
    /proc/devices; procdriver binds the node's /proc/devices into each container. Without a
    driver the mount goes and the kernel's file shows again.
    """
    target = paths.devices_file
    if target is None:
        if not paths.real_system:
            return
        target = DEVICES_FILE
    chrdevs = procfs.driver_chrdevs(profile)
    mounted = paths.real_system and _mount_fstype(paths.proc_devices) is not None
    if mounted:
        shown, ours = os.stat(paths.proc_devices), target.exists() and os.stat(target)
        if not ours or (shown.st_dev, shown.st_ino) != (ours.st_dev, ours.st_ino):
            subprocess.run(["umount", str(paths.proc_devices)], check=True)
            res.note(f"unmounted a stale {paths.proc_devices}")
            return apply_proc_devices(profile, paths, res)
    if not chrdevs:
        if target.exists():
            # like unloading the driver: containers holding the file see the lines go too
            _rewrite_in_place(target, _kernel_devices(paths), res)
        if mounted:
            subprocess.run(["umount", str(paths.proc_devices)], check=True)
            res.note(f"unmounted {paths.proc_devices}")
        if target.exists():
            target.unlink()
            res.note(f"removed {target}")
        return
    _rewrite_in_place(target, procfs.render_devices(_kernel_devices(paths), chrdevs), res)
    if paths.real_system and not mounted:
        subprocess.run(["mount", "--bind", str(target), str(paths.proc_devices)], check=True)
        subprocess.run(
            ["mount", "-o", "remount,bind,ro,nosuid,nodev,noexec", str(paths.proc_devices)],
            check=True,
        )
        res.note(f"mounted {target} on {paths.proc_devices}")


def _kernel_pci_entries(devices: Path, snapshot: Path) -> dict[str, list[str]]:
    """The kernel's entries of *devices* (name -> [symlink target, vendor]): read from the
    directory the first time, while it is the kernel's, then kept in *snapshot*."""
    try:
        return json.loads(snapshot.read_text(encoding="utf-8"))
    except FileNotFoundError:
        pass
    entries = {}
    for entry in sorted(devices.iterdir()):
        if not entry.is_symlink():
            continue
        try:
            vendor = (entry / "vendor").read_text(encoding="utf-8").strip().lower()
        except OSError:
            vendor = ""
        entries[entry.name] = [os.readlink(entry), vendor]
    write_atomic(snapshot, (json.dumps(entries, indent=1, sort_keys=True) + "\n").encode(), 0o644)
    return entries


def apply_pci_sysfs(profile: Profile, paths: Paths, res: Result) -> None:
    """Show the node's NVIDIA PCI functions in /sys/bus/pci/devices, as the kernel does.

    A node's sysfs is the host's, read-only, and its /sys/devices cannot gain entries, so
    the simulator mounts a tmpfs over /sys/bus/pci/devices holding the kernel's entries
    (symlinks into /sys/devices, as the kernel made them) without the host's own NVIDIA
    functions, plus a directory per GPU and NVSwitch of the profile
    (:mod:`gpunode.sim.pcisysfs`). A profile without GPUs unmounts it: the kernel's
    directory shows again. Containers of the node have their own sysfs.
    """
    devices, snapshot = paths.pci_devices, paths.pci_snapshot
    if devices is None or snapshot is None:
        if not paths.real_system:
            return
        devices, snapshot = PCI_DEVICES, PCI_SNAPSHOT
    functions = pcisysfs.functions(profile)
    mounted = paths.real_system and _is_mountpoint_tmpfs(devices)
    if not functions and not (mounted or snapshot.exists()):
        return
    kernel = _kernel_pci_entries(devices, snapshot)
    if not functions and paths.real_system:
        if mounted:
            subprocess.run(["umount", str(devices)], check=True)
            res.note(f"unmounted {devices}")
        snapshot.unlink()
        return
    if paths.real_system and not mounted:
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=0755,nosuid,nodev,noexec", "gpunode-sim",
             str(devices)],
            check=True,
        )  # fmt: skip
        res.note(f"mounted tmpfs on {devices}")
    ours = {f.address: f for f in functions}
    links = {
        name: target
        for name, (target, vendor) in kernel.items()
        if name not in ours and (vendor != "0x10de" or not functions)
    }
    for entry in sorted(devices.iterdir()):
        keep = links.get(entry.name) if entry.is_symlink() else None
        if entry.name in ours and entry.is_dir() and not entry.is_symlink():
            continue
        if keep is None or os.readlink(entry) != keep:
            _remove(entry, res)
    for name, target in links.items():
        if not (devices / name).is_symlink():
            (devices / name).symlink_to(target)
            res.note(f"linked {devices / name} -> {target}")
    for function in ours.values():
        folder = devices / function.address
        known = {*function.files, "config", "driver"}
        if folder.is_dir():
            for stale in sorted(folder.iterdir()):
                if stale.name not in known:  # an attribute another kind of function had
                    _remove(stale, res)
        for name, text in function.files.items():
            _write_if_changed(folder / name, text, res)
        if write_atomic(folder / "config", function.config, 0o644):
            res.note(f"wrote {folder / 'config'}")
        driver = folder / "driver"
        if not (driver.is_symlink() and os.readlink(driver) == pcisysfs.DRIVER_LINK):
            if driver.is_symlink():
                driver.unlink()
            driver.symlink_to(pcisysfs.DRIVER_LINK)
            res.note(f"linked {driver} -> {pcisysfs.DRIVER_LINK}")
    if not functions:
        snapshot.unlink()  # the directory is the kernel's again


def apply_kernel_log(profile: Profile, paths: Paths, res: Result) -> None:
    """The driver's lines in the node's kernel log. A node container has no /dev/kmsg of its
    own (Docker creates none), so the simulator renders the records the driver would have
    logged (:func:`procfs.render_kmsg`: its load line, an Xid per fault) to a read-only
    ``/dev/kmsg`` file; gpunode reads it as it reads the kernel's (record by record until the
    end). A real /dev/kmsg (a character device) is never touched."""
    kmsg = paths.dev / "kmsg"
    if kmsg.is_char_device():
        return
    if profile.driver is None:
        if kmsg.exists():
            _remove(kmsg, res)
        return
    _write_if_changed(kmsg, procfs.render_kmsg(profile), res, mode=0o400)


def _divert(path: Path, res: Result) -> None:
    """Divert a path Debian's driver packages ship, so our file wins over theirs."""
    listed = subprocess.run(
        ["dpkg-divert", "--listpackage", str(path)], capture_output=True, text=True, check=False
    )
    if listed.returncode != 0:
        return  # no dpkg here (a non-Debian test root): nothing to protect against
    if listed.stdout.strip() == "gpunode-sim":
        return
    subprocess.run(
        [
            "dpkg-divert",
            "--package",
            "gpunode-sim",
            "--add",
            "--rename",
            "--divert",
            f"{path}{DIVERT_SUFFIX}",
            str(path),
        ],
        check=True,
        capture_output=True,
    )
    res.note(f"diverted {path}")


def apply_library(profile: Profile, paths: Paths, res: Result) -> None:
    current = paths.libdir / "libnvidia-ml.so.1"
    ours = sorted(paths.libdir.glob("libnvidia-ml.so.*.*"))
    if profile.driver is None:
        for lib in ours:
            if _is_mock(lib):
                _remove(lib, res)
        if current.is_symlink() and not current.exists():
            _remove(current, res)
        return
    target = paths.libdir / f"libnvidia-ml.so.{profile.driver.version}"
    if paths.real_system:
        for path in (
            target,
            current,
            paths.libdir / "nvidia" / "current" / f"libnvidia-ml.so.{profile.driver.version}",
            paths.libdir / "nvidia" / "current" / "libnvidia-ml.so.1",
        ):
            _divert(path, res)
    if not paths.mock_base.is_file():
        raise FileNotFoundError(
            f"mock NVML {paths.mock_base} is missing; copy the built library there first"
        )
    if mocknvml.embed_profile(paths.mock_base, mock_payload(profile), target):
        res.note(f"wrote {target}")
    for lib in ours:
        if lib != target and _is_mock(lib):
            _remove(lib, res)
    if not (current.is_symlink() and os.readlink(current) == target.name):
        tmp = current.with_name(".libnvidia-ml.so.1.tmp")
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        tmp.symlink_to(target.name)
        os.replace(tmp, current)
        res.note(f"linked {current} -> {target.name}")
    if paths.real_system and res.changed:
        subprocess.run(["ldconfig"], check=True)


def apply_procdriver(paths: Paths, res: Result) -> None:
    """Put procdriver in front of each installed OCI runtime (idempotent)."""
    runtimes = paths.runtimes
    if runtimes is None:
        runtimes = procdriver.RUNTIMES if paths.real_system else ()
    binary = b""
    for runtime in runtimes:
        real = runtime.with_name(runtime.name + DIVERT_SUFFIX)
        if not (runtime.exists() or real.exists()):
            continue  # that runtime is not installed
        if not binary:
            if not paths.procdriver.is_file():
                raise FileNotFoundError(
                    f"{paths.procdriver} is missing; copy the built procdriver there first"
                )
            binary = paths.procdriver.read_bytes()
        if paths.real_system:
            _divert(runtime, res)
        if runtime.exists() and not real.exists():
            # no dpkg to divert with: keep the real runtime under the diverted name
            os.replace(runtime, real)
            res.note(f"moved {runtime} to {real}")
        if write_atomic(runtime, binary, 0o755):
            res.note(f"installed {paths.procdriver.name} as {runtime}")


def _is_mock(path: Path) -> bool:
    try:
        return mocknvml.MAGIC in path.read_bytes()
    except OSError:
        return False


def apply_profile(profile: Profile, paths: Paths | None = None) -> Result:
    paths = paths or Paths()
    res = Result()
    state = json.dumps(profile.to_dict(), indent=2, sort_keys=True) + "\n"
    try:
        other = paths.state.read_text(encoding="utf-8") != state
    except FileNotFoundError:
        other = True
    loaded = apply_procfs(profile, paths, res) or (other and profile.driver is not None)
    apply_proc_devices(profile, paths, res)
    apply_devices(profile, paths, res)
    apply_pci_sysfs(profile, paths, res)
    apply_kernel_log(profile, paths, res)
    apply_library(profile, paths, res)
    apply_procdriver(paths, res)
    _write_if_changed(paths.state, state, res, mode=0o644)
    migstate.apply_mig(profile, mock_payload(profile), paths, res)
    apply_fabric(paths, res, loaded)
    return res
