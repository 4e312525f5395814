"""Version strings: driver versions and branches, CUDA releases, distribution package versions.

A driver version is what NVML and /proc/driver/nvidia/version report: ``535.261.03`` or
``570.26`` (branch, then one or two more numeric fields). A branch is the first field alone
(``535``). A package version carries the driver version as its upstream part:
``535.261.03-1`` (Debian), ``535.309.01-0+deb12u1`` (Debian security),
``535.183.01-0ubuntu0.22.04.1`` (Ubuntu), ``3:560.35.05-1.el9`` (RPM, epoch 3).
CUDA packages from Debian carry the CUDA release after a tilde:
``11.8.89~11.8.0-5~deb12u1`` (component 11.8.89, release 11.8.0).
"""

from __future__ import annotations

import re

from ..util.boundedyaml import describe
from ..util.versions import at_least, key
from . import ProvisionError

__all__ = ["at_least", "key"]  # the one comparison (gpunode.util.versions), for this package

_DRIVER = re.compile(r"^[1-9][0-9]{2,3}\.[0-9]{1,3}(\.[0-9]{1,3})?$")
_BRANCH = re.compile(r"^[1-9][0-9]{2,3}$")
_CUDA = re.compile(r"^[1-9][0-9]?\.[0-9]{1,2}(\.[0-9]{1,3})?$")


def is_driver_version(text: str) -> bool:
    return bool(_DRIVER.match(text))


def is_branch(text: str) -> bool:
    return bool(_BRANCH.match(text))


def branch_of(version: str) -> str:
    return version.split(".", 1)[0]


def _checked(variable: str, value: str, ok, expected: str) -> str:
    """`value` stripped when `ok(value)`, else a ProvisionError naming the variable."""
    value = str(value).strip()
    if ok(value):
        return value
    raise ProvisionError(f"{variable}: {describe(value)} is not {expected}")


def check_pin(variable: str, value: str) -> str:
    """An inventory driver pin: an exact version or a branch."""
    return _checked(
        variable,
        value,
        lambda v: is_driver_version(v) or is_branch(v),
        "a driver version (e.g. 535.261.03) or branch (e.g. 535)",
    )


def check_branch(variable: str, value: str) -> str:
    return _checked(variable, value, is_branch, "a driver branch (three or four digits, e.g. 535)")


def check_exact(variable: str, value: str) -> str:
    return _checked(variable, value, is_driver_version, "an exact driver version (e.g. 535.261.03)")


def check_cuda(variable: str, value: str) -> str:
    return _checked(variable, value, _CUDA.match, "a CUDA version (e.g. 12.4 or 12.4.1)")


def upstream(package_version: str) -> str:
    """The upstream part of a deb/rpm version: no epoch, no revision."""
    version = package_version.strip()
    if ":" in version:
        version = version.split(":", 1)[1]
    # Debian revisions start at the last '-'; RPM release at the first (version has none).
    return version.rsplit("-", 1)[0] if "-" in version else version


def driver_of_package(package_version: str) -> str | None:
    """The driver version in a driver package's version, or None when it has none."""
    up = upstream(package_version)
    return up if is_driver_version(up) else None


def cuda_of_package(package_version: str) -> str | None:
    """The CUDA release (MAJOR.MINOR) a CUDA package version belongs to, or None.

    Debian: ``11.8.89~11.8.0-5~deb12u1`` -> 11.8 (the release after the tilde; the
    component version before it can differ, e.g. libcufft 11.1.1+~10.9.0.58~11.8.0).
    NVIDIA's repository: ``12.4.131-1`` -> 12.4.
    """
    up = upstream(package_version)
    parts = up.split("~")
    candidate = parts[-1] if len(parts) > 1 else parts[0]
    m = re.match(r"^([0-9]+)\.([0-9]+)", candidate)
    return f"{m.group(1)}.{m.group(2)}" if m else None


def matches_pin(driver: str, pin: str) -> bool:
    """Does a driver version satisfy a pin (exact version, or branch)?"""
    if is_branch(pin):
        return branch_of(driver) == pin
    return key(driver) == key(pin)


def major_minor(cuda: str) -> str:
    parts = cuda.split(".")
    return f"{parts[0]}.{parts[1]}"
