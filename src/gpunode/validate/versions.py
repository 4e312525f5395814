"""driver.version_match and cuda.compatible: the loaded kernel module, NVML, the installed
driver package and the pin agree (gpunode.provision.matching, the provisioning roles' own
check), and every installed CUDA release runs on the driver by the shared table
(gpunode.provision.cuda.gate) — and every expected one is installed.

Facts: loaded from /proc/driver/nvidia/version; NVML's from the inventory; installed from
dpkg-query or rpm (gpunode.provision.packages). The driver package is the one the driver
role checks (its ``version_package``): ``--driver-package`` names it, else the first
installed of libnvidia-ml1 (Debian), libnvidia-compute-* (Ubuntu),
nvidia-driver-cuda-libs (RHEL family).
"""

from __future__ import annotations

import shutil
import time
from typing import Any

from ..cli import inventory
from ..nvidia import procfs
from ..provision import ProvisionError, cuda, matching, packages
from ..provision.versions import cuda_of_package, driver_of_package, key, major_minor
from .expect import Expectations
from .model import FAIL, PASS, SKIP, WARN, Check

DRIVER_PACKAGES = ("libnvidia-ml1", "nvidia-driver-cuda-libs")
DRIVER_PACKAGE_GLOB = "libnvidia-compute-*"
CUDA_GLOBS = ("cuda-cudart-[0-9]*", "nvidia-cuda-toolkit", "libcudart[0-9]*")


def family() -> str | None:
    if shutil.which("dpkg-query"):
        return "apt"
    if shutil.which("rpm"):
        return "dnf"
    return None


def _query(fam: str, patterns: tuple[str, ...], runner: packages.Runner) -> list[tuple[str, str]]:
    """(package, version) of the installed packages matching the patterns."""
    if fam == "apt":
        argv = ["dpkg-query", "-W", "-f", "${Package}|${db:Status-Status}|${Version}\n"]
    else:
        argv = ["rpm", "-qa", "--qf", "%{NAME}|installed|%{VERSION}-%{RELEASE}\n"]
    rc, out, _ = runner([*argv, *patterns])
    found = []
    for line in out.splitlines():
        name, status, version = ([*line.split("|"), "", ""])[:3]
        if status == "installed" and version:
            found.append((name, version))
    return found if rc in (0, 1) else []  # dpkg-query exits 1 when a pattern matches nothing


def driver_package(
    fam: str | None, expect: Expectations, runner: packages.Runner = packages.run
) -> tuple[str, str | None]:
    """(package name, installed version or None)."""
    if fam is None:
        return "(no dpkg or rpm)", None
    if expect.driver_package:
        return expect.driver_package, packages.installed(fam, expect.driver_package, runner)
    for name in DRIVER_PACKAGES:
        version = packages.installed(fam, name, runner)
        if version:
            return name, version
    if fam == "apt":
        for name, version in _query(fam, (DRIVER_PACKAGE_GLOB,), runner):
            return name, version
    return DRIVER_PACKAGES[0] if fam == "apt" else DRIVER_PACKAGES[1], None


def cuda_installed(fam: str | None, runner: packages.Runner = packages.run) -> list[str]:
    if fam is None:
        return []
    found = {cuda_of_package(v) for _, v in _query(fam, CUDA_GLOBS, runner)}
    return sorted((c for c in found if c), key=key)


def evaluate(
    inv: inventory.Inventory | None,
    expect: Expectations,
    *,
    proc_root: str = procfs.PROC_DRIVER_NVIDIA,
    runner: packages.Runner = packages.run,
    fam: str | bool | None = True,
) -> tuple[dict[str, Any], list[Check]]:
    """(the result's ``versions``, [driver.version_match, cuda.compatible])."""
    start = time.monotonic()
    fam = family() if fam is True else (fam or None)
    loaded, _ = procfs.read_driver(proc_root)
    nvml = inv.driver_version if inv is not None and inv.source == "nvml" else None
    nvml_error = None
    if nvml is None:
        nvml_error = "; ".join(p["detail"] for p in (inv.problems if inv else [])) or "no NVML"
    package, installed = driver_package(fam, expect, runner)
    versions: dict[str, Any] = {
        "driver_loaded": loaded,
        "driver_nvml": nvml,
        "driver_installed": driver_of_package(installed) if installed else None,
        "driver_package": package if installed else None,
        "driver_pinned": expect.driver_pin,
        "cuda_driver_max": inv.cuda_driver_version if inv else None,
        "cuda_installed": [],
    }
    checks = []
    title = "Driver loaded = installed = pinned"
    if installed is None and expect.driver_pin is None:
        if loaded and nvml and loaded != nvml:
            status, detail = FAIL, f"NVML reports {nvml} but the loaded module is {loaded}"
        else:
            status = SKIP
            detail = (
                f"no driver package installed ({package}) and no pin given "
                "(--driver-pin, nvidia_driver_version): loaded "
                f"{loaded or 'none'}, NVML {nvml or 'none'}"
            )
    else:
        m = matching.compare(
            nvml=nvml,
            nvml_error=nvml_error,
            loaded=loaded,
            installed=installed,
            package=package,
            pin=expect.driver_pin or (driver_of_package(installed) or ""),
        )
        status, detail = (PASS if m.ok else FAIL), m.message
        if m.ok and expect.driver_pin is None:
            detail += " (no pin given: compared with the installed package)"
    now = time.monotonic()
    checks.append(Check("driver.version_match", title, status, detail, duration_s=now - start))
    start = now

    have = cuda_installed(fam, runner)
    versions["cuda_installed"] = have
    driver = loaded or nvml
    title = "CUDA installed and compatible"
    if not have and not expect.cuda:
        status, detail = (
            SKIP,
            "no CUDA toolkit installed and none expected (--cuda, cuda_toolkit_versions)",
        )
    elif driver is None:
        status, detail = FAIL, "no NVIDIA driver to run CUDA on"
    else:
        names = [g.name or "" for g in (inv.gpus if inv else [])]
        datacenter = all(cuda.is_datacenter(n, "") for n in names) if names else None
        notes, bad, warn = [], [], []
        for v in have:
            try:
                verdict = cuda.gate(v, driver, expect.policy, datacenter=datacenter,
                                    variable="installed CUDA")  # fmt: skip
            except ProvisionError as exc:
                warn.append(f"CUDA {v} is installed but {exc}")
                continue
            (notes if verdict.ok else bad).append(verdict.message)
        wanted = {major_minor(c) for c in expect.cuda}
        for mm in sorted(wanted - set(have), key=key):
            bad.append(
                f"CUDA {mm} is expected but not installed (installed: {', '.join(have) or 'none'})"
            )
        status = FAIL if bad else WARN if warn else PASS
        detail = "; ".join(bad + warn + notes)
    checks.append(Check("cuda.compatible", title, status, detail,
                        duration_s=time.monotonic() - start))  # fmt: skip
    return versions, checks
