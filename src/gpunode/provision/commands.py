"""`gpunode provision ...`: the checks and decisions the provisioning roles call.

Every command prints JSON with `ok`, `changed` and `message` (with --json; a line of text
without) and exits 0 when ok, 1 when a check on the node failed (the message says what to
change) and 2 for a bad input value (one line naming the variable and what is accepted).

  validate      inventory values, on the controller before anything runs on a node
  preflight     node facts: OS/arch, GPUs, Secure Boot, kernel headers, disk, conflicts
  driver-plan   driver packages/repository/pin/hold for this platform (--resolve: exact
                package versions from the node's package sources)
  driver-check  matching-version check: NVML vs loaded module vs installed package vs pin
  cuda-gate     CUDA release(s) against the driver under strict|minor|forward
  cuda-plan     CUDA toolkit packages per version (--resolve: against the node's sources)
  cuda-check    the installed toolkit packages are the requested CUDA versions
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import CheckFailed, ProvisionError, cuda, matching, packages, preflight, sources
from .versions import check_pin, is_driver_version

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _emit(args: argparse.Namespace, result: dict) -> int:
    result.setdefault("changed", False)
    ok = bool(result.get("ok"))
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(result.get("message", "ok" if ok else "failed"))
    return EXIT_OK if ok else EXIT_FAIL


def _platform(args: argparse.Namespace) -> sources.Platform:
    distro, release = args.distro, args.release
    if not distro:
        rel = preflight.os_release(Path("/"))
        distro, release = rel.get("ID", "unknown"), rel.get("VERSION_ID", "")
    return sources.platform(distro, release or "", args.arch or os.uname().machine)


def _gpus(args: argparse.Namespace) -> list[sources.Gpu]:
    ids = args.gpu_device_id or [g["device_id"] for g in preflight.pci_gpus(Path("/"))]
    try:
        return [sources.Gpu(device_id=int(i, 16)) for i in ids]
    except ValueError:
        raise ProvisionError(f"--gpu-device-id: {ids} are not hexadecimal PCI device ids") from None


def _cuda_list(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in str(v).split(",") if x.strip())
    return out


def cmd_validate(args: argparse.Namespace) -> int:
    """Pure inventory-value validation (controller side). Bad values raise ProvisionError."""
    table = cuda.load_table()
    notes = []
    versions = _cuda_list(args.cuda)
    for v in versions:
        cuda.resolve("cuda_toolkit_versions", v, table)
    cuda.check_policy(args.policy)
    pin = check_pin("nvidia_driver_version", args.driver_version) if args.driver_version else ""
    if is_driver_version(pin):
        # Known before any change: the pinned driver and the requested CUDA releases.
        for v in versions:
            verdict = cuda.gate(v, pin, args.policy, table=table)
            if not verdict.ok and verdict.mode != "undecided":  # undecided: needs the GPUs
                raise ProvisionError(f"cuda_toolkit_versions: {verdict.message}")
            notes.append(verdict.message)
    if args.distro:
        plat = _platform(args)
        if args.driver_branch:
            plan = sources.driver_plan(
                plat,
                source=args.driver_source,
                branch=args.driver_branch,
                version=args.driver_version or "",
                flavor=args.flavor,
                kernel_module=args.kernel_module,
                gpus=[sources.Gpu(device_id=int(i, 16)) for i in args.gpu_device_id or []],
            )
            notes.append(f"driver: {plan.pin} ({plan.flavor} modules) from {plan.source}")
        if versions:
            cplan = sources.cuda_plan(
                plat,
                source=args.cuda_source,
                versions=versions,
                default=args.cuda_default or "",
                package_set=args.package_set,
            )
            notes.append(
                f"CUDA {', '.join(cplan.versions)} ({cplan.package_set}) from {cplan.source}"
            )
    return _emit(args, {"ok": True, "message": "; ".join(notes) or "inventory values are valid"})


def cmd_preflight(args: argparse.Namespace) -> int:
    facts = preflight.collect(
        Path(args.root),
        kernel_module=args.kernel_module,
        min_free_mib=args.min_free_mib,
        secure_boot_signing=args.secure_boot_signing,
        mokutil=_which("mokutil"),
    )
    return _emit(args, facts.to_dict())


def _which(name: str) -> str | None:
    import shutil

    return shutil.which(name)


def cmd_driver_plan(args: argparse.Namespace) -> int:
    plat = _platform(args)
    plan = sources.driver_plan(
        plat,
        source=args.source,
        branch=args.branch,
        version=args.version or "",
        flavor=args.flavor,
        kernel_module=args.kernel_module,
        gpus=_gpus(args),
    )
    out = plan.to_dict()
    kernel = os.uname().release
    out["kernel_packages"] = [p.replace("{kernel}", kernel) for p in plan.kernel_packages]
    if args.resolve:
        variable = "nvidia_driver_version" if plan.pin_kind == "exact" else "nvidia_driver_branch"
        versions = packages.resolve_driver(plat.family, plan.hold, plan.pin, variable)
        out["versions"] = versions
        sep = "=" if plat.family == "apt" else "-"
        out["install"] = [f"{p}{sep}{versions[p]}" if p in versions else p for p in plan.packages]
        installed = {p: packages.installed(plat.family, p) for p in plan.hold}
        out["installed"] = installed
        out["downgrade"] = any(
            have and packages._sort_key(have) > packages._sort_key(versions[p])
            for p, have in installed.items()
        )
    out["ok"] = True
    out["message"] = f"driver {plan.pin} ({plan.flavor}: {plan.flavor_reason}) from {plan.source}"
    return _emit(args, out)


def cmd_driver_check(args: argparse.Namespace) -> int:
    from .. import facts as nvfacts
    from .. import inventory

    family = "apt" if _which("dpkg-query") else "dnf"
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
        loaded = nvfacts.parse_driver_version(Path(args.proc_version).read_text())
    except OSError:
        loaded = None
    pin = args.pin
    m = matching.compare(
        nvml=nvml,
        nvml_error=nvml_error,
        loaded=loaded,
        installed=packages.installed(family, args.package),
        package=args.package,
        pin=pin,
    )
    return _emit(args, m.to_dict())


def _node_driver() -> tuple[str, bool | None]:
    from .. import inventory

    try:
        inv = inventory.collect()
    except inventory.NoDriver as exc:
        raise CheckFailed(f"no NVIDIA driver to check CUDA against: {exc}") from None
    names = [g.name or "" for g in inv.gpus]
    datacenter = all(cuda.is_datacenter(n, "") for n in names) if names else None
    return str(inv.driver_version), datacenter


def cmd_cuda_gate(args: argparse.Namespace) -> int:
    versions = _cuda_list(args.cuda)
    if not versions:
        raise ProvisionError("cuda_toolkit_versions: empty; give one or more CUDA versions")
    if args.driver:
        from .versions import check_exact

        driver = check_exact("--driver", args.driver)
        datacenter = {"yes": True, "no": False}.get(args.datacenter)
    else:
        driver, datacenter = _node_driver()
    table = cuda.load_table()
    verdicts = [
        cuda.gate(v, driver, args.policy, datacenter=datacenter, table=table) for v in versions
    ]
    extra = [p for v in verdicts if v.ok for p in v.packages]
    if extra and args.source != "cuda-repo":
        for v in verdicts:
            if v.mode == "forward":
                v.ok, v.mode = False, "refused"
                v.message += "; cuda-compat comes from NVIDIA's repository: set cuda_toolkit_source: cuda-repo"
        extra = []
    bad = [v for v in verdicts if not v.ok]
    return _emit(
        args,
        {
            "ok": not bad,
            "driver": driver,
            "datacenter": datacenter,
            "verdicts": [v.to_dict() for v in verdicts],
            "compat_packages": extra,
            "message": "; ".join(v.message for v in (bad or verdicts)),
        },
    )


def _cuda_plan(args: argparse.Namespace) -> tuple[sources.Platform, sources.CudaPlan]:
    plat = _platform(args)
    plan = sources.cuda_plan(
        plat,
        source=args.source,
        versions=_cuda_list(args.cuda),
        default=args.default or "",
        package_set=args.package_set,
    )
    return plat, plan


def cmd_cuda_plan(args: argparse.Namespace) -> int:
    plat, plan = _cuda_plan(args)
    out = plan.to_dict()
    if args.resolve:
        out["available"] = packages.resolve_cuda(
            plat.family, plan.version_packages, "cuda_toolkit_versions"
        )
    out["ok"] = True
    out["message"] = f"CUDA {', '.join(plan.versions)} ({plan.package_set}) from {plan.source}"
    return _emit(args, out)


def cmd_cuda_check(args: argparse.Namespace) -> int:
    from .versions import cuda_of_package

    plat, plan = _cuda_plan(args)
    found, bad = {}, []
    for mm, pkg in plan.version_packages.items():
        have = packages.installed(plat.family, pkg)
        found[mm] = have
        if have is None:
            bad.append(f"CUDA {mm}: {pkg} is not installed")
        elif cuda_of_package(have) != mm:
            bad.append(
                f"CUDA {mm} was requested but {pkg} {have} is CUDA {cuda_of_package(have)}: "
                "install the requested version (cuda_toolkit_versions)"
            )
    return _emit(
        args,
        {
            "ok": not bad,
            "installed": found,
            "message": "; ".join(bad)
            or ", ".join(f"CUDA {mm}: {plan.version_packages[mm]} {v}" for mm, v in found.items()),
        },
    )


def _platform_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--distro", help="debian|ubuntu|rhel|rocky (default: this node's)")
    p.add_argument("--release", help="12, 13, 22.04, 24.04, 8, 9 (default: this node's)")
    p.add_argument("--arch", help="x86_64|aarch64 (default: this node's)")


def _km(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--kernel-module",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the driver role builds/loads a kernel module (--no-kernel-module: userspace only)",
    )


def register(subparsers: argparse._SubParsersAction) -> None:
    parser_class = subparsers._parser_class
    pv = subparsers.add_parser("provision", help="checks and decisions for the provisioning roles")
    sub = pv.add_subparsers(dest="action", required=True, parser_class=parser_class)

    v = sub.add_parser("validate", help="inventory values (controller, before any change)")
    v.add_argument("--cuda", action="append", default=[], help="CUDA version (repeatable or a,b)")
    v.add_argument("--cuda-default", default="")
    v.add_argument("--cuda-source", default="distro")
    v.add_argument("--package-set", default="full")
    v.add_argument("--policy", default="strict")
    v.add_argument("--driver-source", default="distro")
    v.add_argument("--driver-branch", default="")
    v.add_argument("--driver-version", default="")
    v.add_argument("--flavor", default="auto")
    v.add_argument("--gpu-device-id", action="append", default=[])
    _platform_args(v)
    _km(v)
    v.set_defaults(func=cmd_validate)

    pf = sub.add_parser("preflight", help="node facts and their verdict")
    pf.add_argument("--min-free-mib", type=int, default=4096)
    pf.add_argument("--secure-boot-signing", action="store_true",
                    help="a MOK is enrolled and DKMS signs modules with it")  # fmt: skip
    pf.add_argument("--root", default="/", help=argparse.SUPPRESS)
    _km(pf)
    pf.set_defaults(func=cmd_preflight)

    dp = sub.add_parser("driver-plan", help="driver packages, repository, pin, hold")
    dp.add_argument("--source", default="distro")
    dp.add_argument("--branch", required=True)
    dp.add_argument("--version", default="", help="exact pin (default: the branch)")
    dp.add_argument("--flavor", default="auto")
    dp.add_argument("--gpu-device-id", action="append", default=[], help="default: PCI sysfs")
    dp.add_argument("--resolve", action="store_true", help="versions from the node's sources")
    _platform_args(dp)
    _km(dp)
    dp.set_defaults(func=cmd_driver_plan)

    dc = sub.add_parser("driver-check", help="matching-version check")
    dc.add_argument("--package", required=True, help="the driver package (driver-plan)")
    dc.add_argument("--pin", required=True, help="exact version or branch")
    dc.add_argument("--proc-version", default="/proc/driver/nvidia/version", help=argparse.SUPPRESS)
    dc.set_defaults(func=cmd_driver_check)

    cg = sub.add_parser("cuda-gate", help="CUDA release(s) against the driver")
    cg.add_argument("--cuda", action="append", default=[])
    cg.add_argument("--policy", default="strict")
    cg.add_argument("--source", default="distro")
    cg.add_argument("--driver", help="driver version (default: what NVML reports here)")
    cg.add_argument("--datacenter", choices=["yes", "no", "unknown"], default="unknown",
                    help="with --driver: are the GPUs data center products")  # fmt: skip
    cg.set_defaults(func=cmd_cuda_gate)

    for name, func, helptext in (
        ("cuda-plan", cmd_cuda_plan, "CUDA toolkit packages per version"),
        ("cuda-check", cmd_cuda_check, "installed toolkit = requested versions"),
    ):
        c = sub.add_parser(name, help=helptext)
        c.add_argument("--cuda", action="append", default=[])
        c.add_argument("--default", default="")
        c.add_argument("--source", default="distro")
        c.add_argument("--package-set", default="full")
        if name == "cuda-plan":
            c.add_argument("--resolve", action="store_true")
        _platform_args(c)
        c.set_defaults(func=func)

    for p in sub.choices.values():
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=_guarded(p.get_default("func")))


def _guarded(func):
    return lambda args: run(func, args)


def run(func, args: argparse.Namespace) -> int:
    """Run a provision command; bad values exit 2 with one line, failed checks exit 1."""
    try:
        return func(args)
    except ProvisionError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "changed": False, "message": str(exc)}))
        print(f"gpunode: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except CheckFailed as exc:
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "changed": False, "message": str(exc)}))
        print(f"gpunode: {exc}", file=sys.stderr)
        return EXIT_FAIL
