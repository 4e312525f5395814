"""Preflight facts of a node, read before anything is changed on it.

GPU presence: NVIDIA display/3D controllers in PCI sysfs (vendor 0x10de, class 0x0300xx
or 0x0302xx) OR GPUs the loaded driver lists under /proc/driver/nvidia/gpus. The second
source covers hosts whose sysfs is not the machine's (containers, a containerised driver);
either is a GPU a driver can serve.

NVSwitch baseboards: the same PCI sysfs, read by gpunode.provision.fabric (its one table of
NVSwitch and NVLink5 GPU ids): `fabric` says how many switches of which generation;
B200-class (NVLink5) boards are a fatal problem (not supported yet).

Every path is read under `root` so tests can build a fake host in a directory.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..nvidia import fabric as nvfabric
from ..util import tool
from . import ProvisionError, fabric
from .sources import SUPPORTED, platform

GPU_CLASSES = ("0x0300", "0x0302")
SECURE_BOOT_VAR = "SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
RUN_INSTALLER_FILES = ("usr/bin/nvidia-uninstall", "var/log/nvidia-installer.log")


@dataclass
class Problem:
    check: str
    message: str
    fatal: bool = True


@dataclass
class Facts:
    distro: str
    release: str
    arch: str
    kernel: str
    supported: bool
    gpus_pci: list[dict] = field(default_factory=list)
    gpus_driver: list[str] = field(default_factory=list)
    has_gpu: bool = False
    secure_boot: str = "unknown"  # enabled | disabled | unknown
    headers: bool = False
    headers_path: str = ""
    free_mib: int = 0
    run_installer: list[str] = field(default_factory=list)
    nouveau_loaded: bool = False
    python_venv: bool = False  # python3 can create virtualenvs (ensurepip: python3-venv)
    # the NVSwitch fabric PCI shows (fabric.Fabric.to_dict: nvswitches, nvlink5_gpus, count,
    # generation, boards); count 0: no NVSwitch
    fabric: dict = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(p.fatal for p in self.problems)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        d["changed"] = False
        fatal = [p.message for p in self.problems if p.fatal]
        notes = [p.message for p in self.problems if not p.fatal]
        d["message"] = "; ".join(fatal) if fatal else ("; ".join(notes) or "preflight passed")
        return d


def os_release(root: Path) -> dict[str, str]:
    for rel in ("etc/os-release", "usr/lib/os-release"):
        try:
            text = (root / rel).read_text()
        except OSError:
            continue
        out = {}
        for line in text.splitlines():
            k, sep, v = line.partition("=")
            if sep:
                out[k.strip()] = v.strip().strip('"')
        return out
    return {}


def distro_release(rel: dict[str, str]) -> tuple[str, str]:
    """(ID, release) of an os-release: VERSION_ID, or on Debian testing, which has none, its
    VERSION_CODENAME (sources.platform maps a supported codename to its number)."""
    return rel.get("ID", "unknown"), rel.get("VERSION_ID") or rel.get("VERSION_CODENAME", "")


def pci_gpus(root: Path) -> list[dict]:
    """NVIDIA's display/3D controllers on the PCI bus (nvidia.fabric.pci_functions, the one
    reader of NVIDIA's PCI functions), with sysfs's hex spellings."""
    out = []
    for name, klass, device in nvfabric.pci_functions(root):
        text = f"0x{klass:06x}"
        if text[:6] in GPU_CLASSES:
            out.append({"bus_id": name, "device_id": f"0x{device:04x}", "class": text})
    return out


def driver_gpus(root: Path) -> list[str]:
    try:
        return sorted(os.listdir(root / "proc/driver/nvidia/gpus"))
    except OSError:
        return []


def secure_boot(root: Path, mokutil: str | None) -> str:
    if mokutil:
        proc = tool.run([mokutil, "--sb-state"], timeout=30)
        text = (proc.stdout + proc.stderr).lower()
        if "secureboot enabled" in text:
            return "enabled"
        if "secureboot disabled" in text or "not supported" in text:
            return "disabled"
    if not (root / "sys/firmware/efi").is_dir():
        return "disabled"  # legacy BIOS boot: no Secure Boot
    try:
        data = (root / "sys/firmware/efi/efivars" / SECURE_BOOT_VAR).read_bytes()
    except OSError:
        return "unknown"
    # efivarfs: 4 bytes of attributes, then the variable (one byte, 1 = enabled)
    return "enabled" if len(data) >= 5 and data[4] == 1 else "disabled"


def nouveau_loaded(root: Path) -> bool:
    if (root / "sys/module/nouveau").is_dir():
        return True
    try:
        return any(line.split(" ", 1)[0] == "nouveau" for line in (root / "proc/modules").open())
    except OSError:
        return False


def headers_package(distro: str, kernel: str) -> str:
    return f"kernel-devel-{kernel}" if distro in ("rhel", "rocky") else f"linux-headers-{kernel}"


def python_venv() -> bool:
    """Whether `python3 -m venv` can put pip into a new virtualenv (Debian and Ubuntu ship
    ensurepip's runner in python3-venv)."""
    import importlib.util

    try:
        return importlib.util.find_spec("ensurepip.__main__") is not None
    except ImportError:
        return False


# containerd's CRI plugin has enable_cdi from 1.7.0 (gpunode.engines.containerd refuses --cdi
# below it as well; this says so before anything is installed).
CONTAINERD_CDI_MIN = (1, 7, 0)


def containerd_cdi_problem(containerd: str) -> list[Problem]:
    """A fatal problem when the node's containerd has no CDI (gpu_container_runtime would
    register it with CDI: gpu_container_runtime_containerd_cdi)."""
    version, line = tool.version([containerd, "--version"])
    if version is None or version >= CONTAINERD_CDI_MIN:
        return []
    have = ".".join(map(str, version))
    return [
        Problem(
            "containerd_cdi",
            f"containerd {have} has no CDI (enable_cdi needs containerd >= 1.7.0; {line}): set "
            "gpu_container_runtime_containerd_cdi: false (the envvar strategy and cdi.k8s.io "
            "annotations through gpunode's handler work without it) or run containerd >= 1.7 "
            "(Debian 13)",
        )
    ]


def collect(
    root: Path = Path("/"),
    *,
    kernel: str | None = None,
    arch: str | None = None,
    kernel_module: bool = True,
    min_free_mib: int = 4096,
    secure_boot_signing: bool = False,
    mokutil: str | None = None,
    containerd_cdi: bool = False,
    containerd: str | None = None,
) -> Facts:
    """Read the node's facts and judge them. `kernel_module`: the driver role will build and
    load a kernel module (headers, Secure Boot, nouveau and `.run` installs matter then)."""
    uname = os.uname()
    kernel = kernel or uname.release
    arch = arch or uname.machine
    distro, release = distro_release(os_release(root))
    f = Facts(distro=distro, release=release, arch=arch, kernel=kernel, supported=False)
    try:
        p = platform(distro, release, arch)
        f.distro, f.release, f.supported = p.distro, p.release, True
    except ProvisionError as exc:
        names = ", ".join(f"{d} {r}" for d, r in SUPPORTED)
        what = str(exc).split(";")[0]
        f.problems.append(Problem("os", f"{what}; gpunode supports {names} on x86_64 and aarch64"))
    f.gpus_pci = pci_gpus(root)
    f.gpus_driver = driver_gpus(root)
    f.has_gpu = bool(f.gpus_pci or f.gpus_driver)
    fab = fabric.scan(root)
    f.fabric = fab.to_dict()
    try:
        fabric.refuse_nvlink5(fab)
    except ProvisionError as exc:
        f.problems.append(Problem("nvlink5", str(exc)))
    f.secure_boot = secure_boot(root, mokutil if root == Path("/") else None)
    build = root / "lib/modules" / kernel / "build"
    f.headers, f.headers_path = build.is_dir(), str(Path("/lib/modules") / kernel / "build")
    f.free_mib = shutil.disk_usage(root).free // (1024 * 1024)
    f.run_installer = ["/" + r for r in RUN_INSTALLER_FILES if (root / r).exists()]
    f.nouveau_loaded = nouveau_loaded(root)
    f.python_venv = python_venv() if root == Path("/") else False
    if f.free_mib < min_free_mib:
        f.problems.append(
            Problem(
                "disk",
                f"only {f.free_mib} MiB free on /, the driver and CUDA need {min_free_mib} MiB "
                "(gpu_preflight_min_free_mib): free space first",
            )
        )
    if f.run_installer:
        f.problems.append(
            Problem(
                "conflict",
                f"a driver installed with NVIDIA's .run installer is present "
                f"({', '.join(f.run_installer)}): run `nvidia-uninstall` first; packages and a "
                ".run install overwrite each other's files",
            )
        )
    if containerd_cdi and containerd:
        f.problems.extend(containerd_cdi_problem(containerd))
    if not kernel_module or not f.has_gpu:
        return f
    if not f.headers:
        f.problems.append(
            Problem(
                "headers",
                f"no kernel headers for the running kernel {kernel} ({f.headers_path} missing): "
                f"install {headers_package(f.distro, kernel)} or boot the kernel whose headers "
                "are installed; DKMS builds against the running kernel",
                fatal=False,  # the driver role installs them; fatal only if it cannot
            )
        )
    if f.secure_boot == "enabled" and not secure_boot_signing:
        f.problems.append(
            Problem(
                "secure_boot",
                "Secure Boot is enabled: an unsigned DKMS module will not load. Enrol a Machine "
                "Owner Key that DKMS signs with (Debian/Ubuntu: /var/lib/dkms/mok.pub, "
                "`mokutil --import` and confirm at the next boot), then set "
                "gpu_preflight_secure_boot_signing: true; or disable Secure Boot",
            )
        )
    if f.nouveau_loaded:
        f.problems.append(
            Problem(
                "nouveau",
                "nouveau is loaded: the driver role blacklists it and rebuilds the initramfs; "
                "the NVIDIA module loads after a reboot",
                fatal=False,
            )
        )
    return f
