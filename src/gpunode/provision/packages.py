"""The node's package manager, read-only: which versions are available, which is installed.

apt: ``apt-cache madison`` (every version the configured sources offer, after the pins of
/etc/apt/preferences.d are ignored — madison lists them all) and ``dpkg-query``.
dnf: ``dnf repoquery`` and ``rpm -q``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..util import tool
from . import CheckFailed, ProvisionError
from .versions import cuda_of_package, driver_of_package, is_branch, key, matches_pin, upstream

Runner = Callable[[Sequence[str]], tuple[int, str, str]]


def run(argv: Sequence[str]) -> tuple[int, str, str]:
    """The package manager's (rc, stdout, stderr), through gpunode.util.tool (127 when it
    cannot be run, 124 when it does not finish in 300 s: ``failed`` is then stderr)."""
    proc = tool.run(argv, timeout=300)
    return proc.returncode, proc.stdout, proc.failed or proc.stderr


def available(family: str, package: str, runner: Runner = run) -> list[str]:
    """Versions of `package` the node's sources offer, newest first."""
    if family == "apt":
        rc, out, err = runner(["apt-cache", "madison", package])
        if rc != 0:
            raise CheckFailed(f"apt-cache madison {package} failed: {err.strip()[-200:]}")
        versions = [line.split("|")[1].strip() for line in out.splitlines() if line.count("|") >= 2]
    else:
        rc, out, err = runner(
            ["dnf", "-q", "repoquery", "--showduplicates", "--qf", "%{epoch}:%{version}-%{release}",
             package]
        )  # fmt: skip
        if rc != 0:
            raise CheckFailed(f"dnf repoquery {package} failed: {err.strip()[-200:]}")
        versions = [line.strip() for line in out.splitlines() if line.strip()]
    unique = list(dict.fromkeys(versions))
    return sorted(unique, key=lambda v: sort_key(upstream(v)), reverse=True)


def sort_key(text: str) -> tuple:
    """A version's order key: numeric parts as numbers, `~` and `+` as separators."""
    parts = []
    for p in text.replace("~", ".").replace("+", ".").split("."):
        parts.append((0, int(p), "") if p.isdigit() else (1, 0, p))
    return tuple(parts)


@dataclass(frozen=True)
class State:
    """A package on the node: its installed version (None: not installed) and whether it is
    held against upgrades (None: not known on this package manager, where the role's
    versionlock task decides)."""

    version: str | None
    held: bool | None


def states(family: str, names: Sequence[str], runner: Runner = run) -> dict[str, State]:
    """Installed version and hold of each package, in one query on apt."""
    names = list(dict.fromkeys(names))
    if not names:
        return {}
    if family != "apt":
        return {n: State(installed(family, n, runner), None) for n in names}
    # rc 1 when dpkg does not know some of them: the known ones are printed all the same
    _, out, _ = runner(
        ["dpkg-query", "-W", "-f", "${Package}|${db:Status-Want}|${db:Status-Status}|${Version}\n",
         *names]
    )  # fmt: skip
    found: dict[str, State] = {}
    for line in out.splitlines():
        name, want, status, version = [*line.split("|"), "", "", ""][:4]
        found[name] = State(version.strip() if status == "installed" else None, want == "hold")
    return {n: found.get(n, State(None, False)) for n in names}


def installed(family: str, package: str, runner: Runner = run) -> str | None:
    """The installed version of `package`, or None."""
    if family == "apt":
        return states(family, [package], runner)[package].version
    rc, out, _ = runner(["rpm", "-q", "--qf", "%{EPOCH}:%{VERSION}-%{RELEASE}", package])
    if rc != 0:
        return None
    return out.strip().replace("(none):", "")


def resolve_driver(
    family: str, packages: list[str], pin: str, variable: str, runner: Runner = run
) -> dict[str, str]:
    """For each package the newest available version satisfying the pin.

    A pin the sources do not offer is a bad inventory value: one line naming the variable
    and what the node's sources do offer.
    """
    out: dict[str, str] = {}
    for pkg in packages:
        offered = available(family, pkg, runner)
        good = [v for v in offered if (d := driver_of_package(v)) and matches_pin(d, pin)]
        if good:
            out[pkg] = good[0]
            continue
        if not offered:
            raise ProvisionError(
                f"{variable}: package {pkg} is not available from this node's package sources "
                "(is the component/repository enabled?)"
            )
        drivers = sorted({d for v in offered if (d := driver_of_package(v))}, key=key, reverse=True)
        raise ProvisionError(
            f"{variable}: {pin} is not available from this node's package sources for {pkg}; "
            f"available: {', '.join(drivers) or ', '.join(offered)}"
        )
    return out


def resolve_cuda(
    family: str, version_packages: dict[str, str], variable: str, runner: Runner = run
) -> dict[str, str]:
    """For each requested CUDA release the newest available version of its version package."""
    out: dict[str, str] = {}
    for mm, pkg in version_packages.items():
        offered = available(family, pkg, runner)
        good = [v for v in offered if cuda_of_package(v) == mm]
        if not good:
            have = sorted({c for v in offered if (c := cuda_of_package(v))}, key=key)
            raise ProvisionError(
                f"{variable}: CUDA {mm} is not available from this node's package sources "
                f"({pkg}: {', '.join(have) if have else 'not offered'})"
            )
        out[mm] = good[0]
    return out


def fm_lockstep(
    family: str, driver_package: str, fm_package: str, pin: str, variable: str, source: str,
    runner: Runner = run,
) -> str:  # fmt: skip
    """The exact driver version both the driver's version package and the fabric manager
    are offered at, newest first, within the pin (an NVSwitch node runs FM only at exactly
    the driver's version). None: one line naming the pin and what each package offers."""
    offered = {
        pkg: sorted(
            {d for v in available(family, pkg, runner) if (d := driver_of_package(v))},
            key=key,
            reverse=True,
        )
        for pkg in (driver_package, fm_package)
    }
    both = [d for d in offered[driver_package] if d in offered[fm_package] and matches_pin(d, pin)]
    if both:
        return both[0]

    def listed(pkg: str) -> str:
        within = [d for d in offered[pkg] if matches_pin(d, pin)]
        return ", ".join(within or offered[pkg]) or "nothing"

    what = f"driver {pin}" if not is_branch(pin) else f"branch {pin}"
    fix = (
        "configure NVIDIA's CUDA repository for it or set nvidia_driver_source: cuda-repo"
        if source == "distro"
        else "pin a version both offer"
    )
    raise ProvisionError(
        f"{variable}: {what} has no fabric manager at the same version in this node's package "
        f"sources ({fm_package}: {listed(fm_package)}; {driver_package}: "
        f"{listed(driver_package)}): an NVSwitch node needs the fabric manager at exactly the "
        f"driver's version; {fix}"
    )


@dataclass(frozen=True)
class Service:
    enabled: bool | None  # None: no systemd to ask
    active: bool | None


def services(names: Sequence[str], runner: Runner = run) -> dict[str, Service]:
    """systemd's word on each unit: enabled (``systemctl is-enabled``) and active
    (``is-active``); None for both where systemctl cannot be run."""
    out = {}
    for name in names:
        rc_e, en, _ = runner(["systemctl", "is-enabled", name])
        rc_a, act, _ = runner(["systemctl", "is-active", name])
        if rc_e == 127 or rc_a == 127:
            out[name] = Service(None, None)
            continue
        out[name] = Service(en.strip() in ("enabled", "enabled-runtime", "static"),
                            act.strip() == "active")  # fmt: skip
    return out
