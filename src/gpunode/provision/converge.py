"""What is left to change on a node: the driver's and CUDA's packages as planned against what
is installed and held (`todo`, `converged`), and the checks once they are in place.

The plans (`sources`) say what a platform should get; this module compares them with the
node (`packages`) so that a converged node costs the roles one command each, and runs the
checks that need the node: the matching-version check, the CUDA gate against the node's
driver, the installed CUDA releases.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import CheckFailed, ProvisionError, cuda, matching, packages, sources
from .fabric import Fabric
from .versions import cuda_of_package


def read(path: str) -> str | None:
    """A file's text, None when it cannot be read (not there yet)."""
    try:
        return Path(path).read_text()
    except OSError:
        return None


def driver(
    plat: sources.Platform, *, source: str, branch: str, version: str, flavor: str,
    kernel_module: bool, gpus: list[sources.PciGpu], resolve: bool,
    fabric: Fabric | None = None, repo_url: str = sources.CUDA_REPO_URL,
    repo_key_url: str = sources.CUDA_REPO_KEY_URL,
) -> tuple[sources.DriverPlan, dict]:  # fmt: skip
    """The driver plan as a dict, its kernel packages for the running kernel and (``resolve``)
    the exact package versions from the node's package sources (`versions`, `install`).

    On an NVSwitch node (``fabric``) the versions are resolved in lockstep: the driver's at
    the newest version the fabric manager is offered at too (an exact pin: that version, or
    one line naming it and what is offered), whether or not the kernel module is managed
    here: the fabric manager is userspace, installed, held and started either way."""
    plan = sources.driver_plan(
        plat, source=source, branch=branch, version=version or "", flavor=flavor,
        kernel_module=kernel_module, gpus=gpus, fabric=fabric, repo_url=repo_url,
        repo_key_url=repo_key_url,
    )  # fmt: skip
    out = plan.to_dict()
    kernel = os.uname().release
    out["kernel_packages"] = [p.replace("{kernel}", kernel) for p in plan.kernel_packages]
    if resolve:
        variable = "nvidia_driver_version" if plan.pin_kind == "exact" else "nvidia_driver_branch"
        pin = plan.pin
        if plan.fabric_manager:
            pin = packages.fm_lockstep(
                plat.family, plan.version_package, plan.fabric_manager, plan.pin,
                "nvidia_driver_source: distro" if source == "distro" else variable, source,
            )  # fmt: skip
            out["fabric"]["driver_version"] = pin
        for p in plan.pin_packages:
            if not packages.available(plat.family, p):
                raise ProvisionError(
                    f"{variable}: {plan.pin}: NVIDIA's repository offers no {p} (its pinning "
                    "package for that branch or version) to this node: use a branch or "
                    "version it carries (apt-cache search nvidia-driver-pinning)"
                )
        versions = packages.resolve_driver(plat.family, plan.hold, pin, variable)
        out["versions"] = versions
        sep = "=" if plat.family == "apt" else "-"
        out["install"] = [f"{p}{sep}{versions[p]}" if p in versions else p for p in plan.packages]
    return plan, out


APT_SOURCES = ("etc/apt/sources.list", "etc/apt/sources.list.d")
DNF_SOURCES = ("etc/yum.repos.d",)


def repository_configured(repository: dict, family: str, root: Path = Path("/")) -> bool:
    """Whether the node's package sources already name the plan's repository (its URL):
    apt's sources.list(.d) one-line or deb822 entries, dnf's .repo baseurl. Read only;
    the role adds the repository before the resolving plan run when this is false."""
    url = repository["url"].rstrip("/")
    paths: list[Path] = []
    for rel in APT_SOURCES if family == "apt" else DNF_SOURCES:
        where = root / rel
        if where.is_dir():
            paths += sorted(
                p for p in where.iterdir() if p.suffix in (".list", ".sources", ".repo")
            )
        elif where.is_file():
            paths.append(where)
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            words = line.replace("=", " ").split()
            entry = ("deb ", "URIs:") if family == "apt" else ("baseurl",)
            if line.startswith(entry) and any(w.rstrip("/") == url for w in words):
                return True
    return False


def unresolved(plan: sources.DriverPlan, out: dict, hold: bool) -> None:
    """Into ``out``: the plan on a node where NVIDIA's repository is not configured yet, so
    its versions cannot be resolved: everything left to do (``todo.repository`` first),
    nothing installed known; the role adds the repository and plans again."""
    out["install"] = list(plan.packages)
    out["installed"] = {p: None for p in plan.hold}
    out["held"] = {p: None for p in plan.hold}
    out["downgrade"] = False
    out["pin_current"] = None
    out["todo"] = {
        "repository": True,
        "pin": False,
        "module": bool(plan.dnf_module),
        "pin_packages": list(plan.pin_packages),
        "unhold": [],
        "install": list(plan.packages),
        "kernel_packages": list(out["kernel_packages"]),
        "hold": list(plan.hold) if hold else [],
        "services": [] if plan.kernel_module else list(plan.services),
        "restart": [],
    }
    out["converged"] = False


def driver_state(
    plat: sources.Platform, plan: sources.DriverPlan, out: dict, *, pin_file: str,
    hold: bool, check: bool, allow_downgrade: bool | None, proc_version: str,
) -> None:  # fmt: skip
    """Into ``out`` (``driver``'s resolved dict): what is installed and held, what the role
    still has to change (`todo`), and — when the pinned packages are in place — the
    matching-version check (`check`)."""
    versions = out["versions"]
    st = packages.states(
        plat.family, [*plan.pin_packages, *plan.hold, *plan.packages, *out["kernel_packages"]]
    )
    installed = {p: st[p].version for p in plan.hold}
    out["installed"] = installed
    out["held"] = {p: st[p].held for p in plan.hold}
    out["downgrade"] = any(
        have and packages.sort_key(have) > packages.sort_key(versions[p])
        for p, have in installed.items()
    )
    pin_current = None
    if pin_file and plan.apt_preferences:
        pin_current = read(pin_file) == plan.apt_preferences
    out["pin_current"] = pin_current
    unhold = [p for p in plan.hold if installed[p] not in (None, versions[p]) and st[p].held]
    todo = {
        "pin": pin_current is False,
        "module": bool(plan.dnf_module),  # dnf module streams: the role's task decides
        # NVIDIA's pinning package, installed before the driver packages
        "pin_packages": [p for p in plan.pin_packages if st[p].version is None],
        "unhold": unhold,
        "install": [
            spec
            for p, spec in zip(plan.packages, out["install"], strict=True)
            if st[p].version is None or (p in versions and st[p].version != versions[p])
        ],
        "kernel_packages": [p for p in out["kernel_packages"] if st[p].version is None],
        # held again after the install: what is not held, and what the install releases
        "hold": [p for p in plan.hold if hold and (st[p].held is not True or p in unhold)],
    }
    if not plan.kernel_module and plan.services:
        # the fabric manager's service where the kernel module is not managed here (the
        # kernel-module phase starts the services otherwise): started when it is not
        # enabled and active, restarted when its package changes
        svc = packages.services(plan.services)
        changing = {spec.split("=")[0] for spec in todo["install"]}
        todo["services"] = [
            s for s in plan.services if not (svc[s].enabled and svc[s].active)
            or plan.fabric_manager in changing
        ]  # fmt: skip
        todo["restart"] = [s for s in todo["services"] if svc[s].active]
        out["services_state"] = {s: {"enabled": v.enabled, "active": v.active}
                                 for s, v in svc.items()}  # fmt: skip
    out["todo"] = todo
    out["converged"] = not any(todo.values())
    if check and installed.get(plan.version_package) == versions.get(plan.version_package):
        out["check"] = node_match(plan.version_package, plan.pin, proc_version).to_dict()
    if out["downgrade"] and allow_downgrade is False:
        have = ", ".join(sorted({v for v in installed.values() if v}))
        out["ok"] = False
        out["message"] = (
            f"the installed driver packages ({have}) are newer than the pin {plan.pin}; "
            "set nvidia_driver_allow_downgrade: true to downgrade"
        )


def node_match(package: str, pin: str, proc_version: str) -> matching.Match:
    """The matching-version check on this node: NVML, the loaded module (``proc_version``),
    the installed ``package`` and the pin."""
    from ..nvidia import inventory, procfs

    family = "apt" if shutil.which("dpkg-query") else "dnf"
    nvml = nvml_error = None
    try:
        inv = inventory.collect()
        if inv.source == "nvml":
            nvml = inv.driver_version
        else:
            nvml_error = "; ".join(p["detail"] for p in inv.problems) or "NVML unavailable"
    except inventory.NoDriver as exc:
        nvml_error = str(exc)
    try:
        loaded = procfs.parse_version(Path(proc_version).read_text())
    except OSError:
        loaded = None
    return matching.compare(
        nvml=nvml,
        nvml_error=nvml_error,
        loaded=loaded,
        installed=packages.installed(family, package),
        package=package,
        pin=pin,
    )


def node_driver() -> tuple[str, bool | None]:
    """This node's driver version and whether all its GPUs are data center products."""
    from ..nvidia import inventory

    try:
        inv = inventory.collect()
    except inventory.NoDriver as exc:
        raise CheckFailed(f"no NVIDIA driver to check CUDA against: {exc}") from None
    names = [g.name or "" for g in inv.gpus]
    datacenter = all(cuda.is_datacenter(n, "") for n in names) if names else None
    return str(inv.driver_version), datacenter


def cuda_gate(
    versions: list[str], policy: str, source: str, driver: str | None, datacenter: bool | None
) -> dict:
    """The compatibility gate for each CUDA release against ``driver`` (None: this node's);
    forward compatibility only where cuda-compat can come from NVIDIA's repository."""
    if not versions:
        raise ProvisionError("cuda_toolkit_versions: empty; give one or more CUDA versions")
    if driver is None:
        driver, datacenter = node_driver()
    table = cuda.load_table()
    verdicts = [cuda.gate(v, driver, policy, datacenter=datacenter, table=table) for v in versions]
    extra = [p for v in verdicts if v.ok for p in v.packages]
    if extra and source != "cuda-repo":
        for v in verdicts:
            if v.mode == "forward":
                v.ok, v.mode = False, "refused"
                v.message += "; cuda-compat comes from NVIDIA's repository: set cuda_toolkit_source: cuda-repo"
        extra = []
    bad = [v for v in verdicts if not v.ok]
    return {
        "ok": not bad,
        "driver": driver,
        "datacenter": datacenter,
        "verdicts": [v.to_dict() for v in verdicts],
        "compat_packages": extra,
        "message": "; ".join(v.message for v in (bad or verdicts)),
    }


def cuda_state(
    plat: sources.Platform, plan: sources.CudaPlan, compat: list[str], out: dict, *,
    hold: bool, profile_script: str,
) -> None:  # fmt: skip
    """Into ``out``: installed and held packages, the profile script, `todo`, and — when every
    package is installed — the version check (`check`)."""
    names = [*(p for pkgs in plan.packages.values() for p in pkgs), *compat]
    st = packages.states(plat.family, names)
    profile = plan.profile_script()
    todo = {
        "install": [p for p in names if st[p].version is None],
        "hold": [p for p in names if hold and st[p].held is not True],
        "profile": bool(profile_script) and read(profile_script) != profile,
    }
    out["profile_script"] = profile
    out["todo"] = todo
    out["converged"] = not any(todo.values())
    if not todo["install"]:
        check = cuda_check(plat, plan, {p: st[p].version for p in names})
        out["check"] = check
        if not check["ok"]:
            out["ok"], out["message"] = False, check["message"]


def cuda_check(
    plat: sources.Platform, plan: sources.CudaPlan, installed: dict[str, str | None] | None = None
) -> dict:
    """Each requested release's version package is installed at that release (``installed``:
    versions the caller already read, by package)."""
    known = installed or {}
    found, bad = {}, []
    for mm, pkg in plan.version_packages.items():
        have = known[pkg] if pkg in known else packages.installed(plat.family, pkg)
        found[mm] = have
        if have is None:
            bad.append(f"CUDA {mm}: {pkg} is not installed")
        elif cuda_of_package(have) != mm:
            bad.append(
                f"CUDA {mm} was requested but {pkg} {have} is CUDA {cuda_of_package(have)}: "
                "install the requested version (cuda_toolkit_versions)"
            )
    return {
        "ok": not bad,
        "installed": found,
        "message": "; ".join(bad)
        or ", ".join(f"CUDA {mm}: {plan.version_packages[mm]} {v}" for mm, v in found.items()),
    }
