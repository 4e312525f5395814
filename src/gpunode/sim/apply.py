"""Apply a GPU profile on a (simulated) node: create what a loaded NVIDIA driver creates.

Runs as root *inside* the node container (``gpunode sim apply-local``). It produces:

* device nodes: ``/dev/nvidiactl`` (195:255), ``/dev/nvidia-modeset`` (195:254),
  ``/dev/nvidia-uvm`` / ``/dev/nvidia-uvm-tools`` (a dynamic major, like the real module
  registers) and ``/dev/nvidia<minor>`` (195:minor) per GPU;
* a ``/proc/driver/nvidia`` tree on a tmpfs mounted over ``/proc/driver``;
* the mock NVML as ``<libdir>/libnvidia-ml.so.<driver version>`` with the profile compiled
  into it, and ``libnvidia-ml.so.1`` pointing at it, so the GPU data travels with the
  library into containers (a real NVML in a CDI container has no /proc either);
* the simulator's stand-in for the kernel module showing its tree in every procfs:
  ``procdriver.c`` installed as the node's runc and crun, the real binaries diverted to
  ``*.gpunode-real``, so every container gets the node's ``/proc/driver`` (see
  :mod:`gpunode.sim.procdriver`).

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
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from ..nvidia.devices import CTL_MINOR, MODESET_MINOR, NVIDIA_MAJOR
from ..util.files import write_atomic
from . import mocknvml, procdriver, procfs
from .profiles import Profile, mock_payload

# nvidia-uvm asks the kernel for a dynamic major. 510 is outside the range the kernel hands
# out for built-in drivers here and must match the node container's device-cgroup rule.
UVM_MAJOR = 510
MULTIARCH_LIBDIR = Path("/usr/lib/x86_64-linux-gnu")
MOCK_BASE = Path("/usr/lib/gpunode-sim/libnvidia-ml.mock.so")
STATE_FILE = Path("/var/lib/gpunode-sim/profile.json")
DIVERT_SUFFIX = ".gpunode-real"


@dataclass
class Paths:
    dev: Path = Path("/dev")
    proc_driver: Path = Path("/proc/driver")
    libdir: Path = MULTIARCH_LIBDIR
    mock_base: Path = MOCK_BASE
    state: Path = STATE_FILE
    procdriver: Path = procdriver.IN_NODE
    runtimes: tuple[Path, ...] | None = None  # None: procdriver.RUNTIMES on a real system
    real_system: bool = True  # mount tmpfs, run ldconfig and dpkg-divert


@dataclass
class Result:
    changed: list[str] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.changed.append(what)


def _is_mountpoint_tmpfs(path: Path) -> bool:
    target = str(path)
    with open("/proc/self/mountinfo", encoding="utf-8") as fh:
        for line in fh:
            parts = line.split()
            sep = parts.index("-")
            if parts[4] == target and parts[sep + 1] == "tmpfs":
                return True
    return False


def _write_if_changed(path: Path, text: str, res: Result, mode: int = 0o444) -> None:
    if write_atomic(path, text.encode(), mode):
        res.note(f"wrote {path}")


def _ensure_chr(path: Path, major: int, minor: int, res: Result, mode: int = 0o666) -> None:
    want = os.makedev(major, minor)
    try:
        st = os.lstat(path)
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == want and stat.S_IMODE(st.st_mode) == mode:
            return
        path.unlink()
    except FileNotFoundError:
        pass
    os.mknod(path, stat.S_IFCHR | mode, want)
    os.chmod(path, mode)  # mknod honours the umask
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


def apply_procfs(profile: Profile, paths: Paths, res: Result) -> None:
    nvidia = paths.proc_driver / "nvidia"
    if paths.real_system and not _is_mountpoint_tmpfs(paths.proc_driver):
        if profile.driver is None:
            return  # nothing to show and nothing to clean up
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
    if profile.driver is None:
        _remove(nvidia, res)
        return
    _write_if_changed(nvidia / "version", procfs.render_version(profile), res)
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
    apply_procfs(profile, paths, res)
    apply_devices(profile, paths, res)
    apply_library(profile, paths, res)
    apply_procdriver(paths, res)
    state = json.dumps(profile.to_dict(), indent=2, sort_keys=True) + "\n"
    _write_if_changed(paths.state, state, res, mode=0o644)
    return res
