"""The matching-version check: the driver in use must be the one the packages installed.

Four facts are compared:
  nvml       the driver version NVML reports (gpunode's own inventory code)
  loaded     the kernel module's version (/proc/driver/nvidia/version)
  installed  the version of the driver package (dpkg-query / rpm)
  pin        the inventory's nvidia_driver_version (exact) or nvidia_driver_branch

A mismatch is named with both versions and the fix: install the pin when the package
differs from it; reboot (or reload the module) when the loaded module is not the
installed one.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .versions import driver_of_package, key, matches_pin

RELOAD = (
    "reboot the node, or reload the module: stop what uses the GPUs (nvidia-persistenced, "
    "containers), then `rmmod nvidia_uvm nvidia_drm nvidia_modeset nvidia && modprobe nvidia`"
)


@dataclass
class Match:
    ok: bool
    nvml: str | None
    loaded: str | None
    installed: str | None  # package version as the package manager has it
    installed_driver: str | None
    pin: str
    package: str
    reboot_needed: bool
    message: str

    def to_dict(self) -> dict:
        return {**asdict(self), "changed": False}


def compare(
    *,
    nvml: str | None,
    nvml_error: str | None,
    loaded: str | None,
    installed: str | None,
    package: str,
    pin: str,
) -> Match:
    drv = driver_of_package(installed) if installed else None
    m = Match(False, nvml, loaded, installed, drv, pin, package, False, "")
    if installed is None:
        m.message = f"package {package} is not installed; install the pin {pin} (run the nvidia_driver role)"
        return m
    if drv is None:
        m.message = f"package {package} {installed} carries no driver version"
        return m
    if not matches_pin(drv, pin):
        kind = "branch" if "." not in pin else "version"
        m.message = (
            f"installed {package} is {drv} but the pinned {kind} is {pin}: install the pin "
            "(run the nvidia_driver role; a downgrade needs nvidia_driver_allow_downgrade: true)"
        )
        return m
    if loaded is not None and loaded != drv:
        m.reboot_needed = True
        age = "older than" if key(loaded) < key(drv) else "different from"
        m.message = (
            f"the loaded kernel module is {loaded}, {age} the installed package {package} {drv}: "
            f"{RELOAD}"
        )
        return m
    if nvml is None:
        m.message = (
            f"NVML reports no driver ({nvml_error or 'unavailable'}) while {package} {drv} is "
            f"installed: load the module (modprobe nvidia) or {RELOAD.split(', or ')[0]}"
        )
        m.reboot_needed = loaded is None
        return m
    if nvml != drv:
        m.reboot_needed = True
        m.message = (
            f"NVML reports driver {nvml} but the installed package {package} is {drv}: {RELOAD}"
        )
        return m
    m.ok = True
    m.message = f"driver {drv}: NVML, loaded module and package {package} agree with the pin {pin}"
    return m
