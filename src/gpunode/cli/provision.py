"""`gpunode provision ...`: the checks and decisions the provisioning roles call.

This is the command line (options, JSON output, exit codes) over gpunode.provision, which
holds the decisions themselves and never sees an argparse Namespace.

Every command prints JSON with `ok`, `changed` and `message` (with --json; a line of text
without) and exits 0 when ok, 1 when a check on the node failed (the message says what to
change) and 2 for a bad input value (one line naming the variable and what is accepted).

  validate      inventory values, on the controller before anything runs on a node
                (--batch: every host of a play in one run, host -> arguments on stdin)
  preflight     node facts: OS/arch, GPUs, Secure Boot, kernel headers, disk, conflicts
                (with --driver-*/--cuda*: the versions against the node's package sources)
  install       gpunode into its virtualenv from the copied wheels, and its links
  driver-plan   driver packages/repository/pin/hold for this platform (--resolve: exact
                package versions from the node's package sources, what is installed and
                held, and `todo`: what the role still has to change; --cuda-plan-args:
                cuda-plan too, in the same run)
  driver-check  matching-version check: NVML vs loaded module vs installed package vs pin
  fabric-wait   on an NVSwitch node, wait (bounded: --timeout) until validate's
                node.fabric_manager verdict passes; a failure no wait heals (the unit
                failed, the fabric manager package missing or at another version) at once
  cuda-gate     CUDA release(s) against the driver under strict|minor|forward
  cuda-plan     CUDA toolkit packages per version (--resolve: against the node's sources;
                --gate: the compatibility gate first; `todo` as driver-plan)
  cuda-check    the installed toolkit packages are the requested CUDA versions

A converged node is meant to cost the roles one command each: the plans say in `todo` and
`converged` what is left to change, so the roles' change tasks run only when something is.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

from ..provision import (
    CheckFailed,
    ProvisionError,
    converge,
    cuda,
    fabric,
    lists,
    packages,
    preflight,
    sources,
)
from ..provision.versions import check_pin, is_driver_version
from ..util.command import EXIT_FAIL, EXIT_OK, EXIT_USAGE, Parser, UsageError, fail


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
        distro, release = preflight.distro_release(preflight.os_release(Path("/")))
    return sources.platform(distro, release or "", args.arch or os.uname().machine)


def _fabric_note(plan: dict) -> str:
    """The driver plan message's part on an NVSwitch node (empty elsewhere)."""
    fab = plan.get("fabric") or {}
    if not fab:
        return ""
    what = f"; NVSwitch node: {fab['count']} {fab['generation']} switches"
    at = fab.get("driver_version", "the driver's version")
    return f"{what}, fabric manager {plan['fabric_manager']} at {at}"


def _gpus(
    args: argparse.Namespace, pci: list[dict] | None = None, root: Path = Path("/")
) -> list[sources.PciGpu]:
    """--gpu-device-id, else the GPUs in PCI sysfs (``pci``: as the caller already read them)."""
    if pci is None and not args.gpu_device_id:
        pci = preflight.pci_gpus(root)
    ids = args.gpu_device_id or [g["device_id"] for g in pci or []]
    try:
        return [sources.PciGpu(device_id=int(i, 16)) for i in ids]
    except ValueError:
        raise ProvisionError(f"--gpu-device-id: {ids} are not hexadecimal PCI device ids") from None


def _cuda_list(values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values or []:
        out.extend(x.strip() for x in str(v).split(",") if x.strip())
    return out


# gpu_watch's interval (gpunode-watch.service's `watch run --interval`): whole seconds in
# these bounds, so that a typo cannot make the watch spin or go stale for hours
WATCH_INTERVAL_VARIABLE = "gpu_watch_interval"
WATCH_INTERVAL_S = (5, 3600)


def check_watch_interval(text: str) -> int:
    """gpu_watch_interval from the inventory: a whole number of seconds in WATCH_INTERVAL_S.
    ProvisionError naming the variable, the value and what is accepted."""
    low, high = WATCH_INTERVAL_S
    value = str(text).strip()
    if not (value.isascii() and value.isdigit() and low <= int(value) <= high):
        raise ProvisionError(
            f"{WATCH_INTERVAL_VARIABLE}: {str(text)[:40]!r} is not a whole number of seconds "
            f"from {low} to {high}"
        )
    return int(value)


def _validate(args: argparse.Namespace) -> dict:
    """Pure inventory-value validation (controller side). Bad values raise ProvisionError."""
    if args.fabric_wait_timeout:
        try:
            fabric.seconds(args.fabric_wait_timeout, fabric.WAIT_MAX_S, whole=True)
        except ValueError as exc:
            raise ProvisionError(f"{fabric.WAIT_VARIABLE}: {exc}") from None
    if args.watch_interval:
        check_watch_interval(args.watch_interval)
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
                gpus=[sources.PciGpu(device_id=int(i, 16)) for i in args.gpu_device_id or []],
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
    return {"ok": True, "message": "; ".join(notes) or "inventory values are valid"}


def cmd_validate(args: argparse.Namespace) -> int:
    if not args.batch:
        return _emit(args, _validate(args))
    # --batch: {host: [the arguments of one `provision validate`]} on stdin; one result per
    # host, so a play validates all its hosts in one run on the controller
    try:
        doc = json.loads(sys.stdin.read())
    except ValueError as exc:
        raise ProvisionError(f"--batch: stdin is not JSON ({exc})") from None
    if not isinstance(doc, dict) or not all(
        isinstance(a, list) and all(isinstance(x, str) for x in a) for a in doc.values()
    ):
        raise ProvisionError(
            "--batch: stdin must be a JSON object of host name -> list of argument strings"
        )
    hosts = {}
    for host, argv in doc.items():
        try:
            hosts[host] = _validate(args.validate_parser.parse_args(argv))
        except ProvisionError as exc:
            hosts[host] = {"ok": False, "message": str(exc)}
        except SystemExit:  # argparse already printed the usage line on stderr
            hosts[host] = {"ok": False, "message": f"bad arguments for provision validate: {argv}"}
    bad = [h for h, r in hosts.items() if not r["ok"]]
    message = (
        f"invalid inventory values on {', '.join(bad)}" if bad else "inventory values are valid"
    )
    return _emit(args, {"ok": not bad, "hosts": hosts, "message": message})


def cmd_preflight(args: argparse.Namespace) -> int:
    facts = preflight.collect(
        Path(args.root),
        kernel_module=args.kernel_module,
        min_free_mib=args.min_free_mib,
        secure_boot_signing=args.secure_boot_signing,
        mokutil=shutil.which("mokutil"),
        containerd_cdi=args.containerd_cdi,
        containerd=shutil.which("containerd"),
    )
    out = facts.to_dict()
    if facts.has_gpu and facts.supported and (args.driver_branch or args.cuda):
        # the requested versions against the node's package sources, before any change
        try:
            plat = sources.platform(facts.distro, facts.release, facts.arch)
            out["archive"] = _archive(args, plat, _gpus(args, facts.gpus_pci), facts.fabric)
        except (ProvisionError, CheckFailed) as exc:
            out["archive"] = {"ok": False, "message": str(exc)}
            out["ok"], out["message"] = False, str(exc)
    return _emit(args, out)


def _archive(
    args: argparse.Namespace, plat: sources.Platform, gpus: list[sources.PciGpu],
    fabric_facts: dict | None = None,
) -> dict:  # fmt: skip
    """Plan the driver with this node's GPUs and resolve the pins against the node's package
    sources (the distribution's archive; NVIDIA's repository is not configured yet, so its
    versions were checked against gpunode's data by `validate`)."""
    out: dict = {"ok": True}
    resolve = args.driver_source == "distro" or (args.cuda and args.cuda_source == "distro")
    if resolve and args.refresh_lists is not None:
        out["lists"] = lists.refresh(plat.family, args.refresh_lists)
    notes = []
    if args.driver_branch:
        plan, driver = converge.driver(
            plat, source=args.driver_source, branch=args.driver_branch,
            version=args.driver_version, flavor=args.flavor, kernel_module=args.kernel_module,
            gpus=gpus, resolve=args.driver_source == "distro",
            fabric=fabric.Fabric(fabric_facts["nvswitches"], fabric_facts["nvlink5_gpus"])
            if fabric_facts
            else None,
        )  # fmt: skip
        out["driver"] = driver
        notes.append(f"driver {plan.pin} ({plan.flavor})")
    versions = _cuda_list(args.cuda)
    if versions and args.cuda_source == "distro":
        cplan = sources.cuda_plan(
            plat, source=args.cuda_source, versions=versions, default=args.cuda_default,
            package_set=args.package_set,
        )  # fmt: skip
        out["cuda"] = packages.resolve_cuda(
            plat.family, cplan.version_packages, "cuda_toolkit_versions"
        )
        notes.append(f"CUDA {', '.join(cplan.versions)}")
    out["message"] = f"{' and '.join(notes)} available from the package sources"
    return out


def cmd_driver_plan(args: argparse.Namespace) -> int:
    plat = _platform(args)
    out: dict = {}
    if args.resolve and args.refresh_lists is not None:
        out["lists"] = lists.refresh(plat.family, args.refresh_lists)
    root = Path(args.root)
    resolve = args.resolve
    configured = None
    if args.source == "cuda-repo":
        # NVIDIA's repository (or its mirror) must be among the node's sources before its
        # versions can be resolved: on a fresh node the plan says so (repository.configured
        # false, todo.repository) and the role adds it, then plans again
        repo = sources.cuda_repository(plat, args.cuda_repo_url, args.cuda_repo_key_url)
        configured = converge.repository_configured(repo, plat.family, root)
        resolve = resolve and configured
    plan, planned = converge.driver(
        plat, source=args.source, branch=args.branch, version=args.version, flavor=args.flavor,
        kernel_module=args.kernel_module, gpus=_gpus(args, root=root), resolve=resolve,
        fabric=fabric.scan(root), repo_url=args.cuda_repo_url, repo_key_url=args.cuda_repo_key_url,
    )  # fmt: skip
    out.update(planned)
    if configured is not None:
        out["repository"]["configured"] = configured
    out["ok"] = True
    out["message"] = (
        f"driver {plan.pin} ({plan.flavor}: {plan.flavor_reason}) from {plan.source}"
        + _fabric_note(out)
    )
    if args.resolve and not resolve:
        converge.unresolved(plan, out, hold=args.hold)
        out["message"] += (
            f"; NVIDIA's repository {plan.repository['url']} is not among this node's package "
            "sources yet: add it, then plan again (versions unresolved)"
        )
    elif args.resolve:
        converge.driver_state(
            plat, plan, out, pin_file=args.pin_file, hold=args.hold, check=args.check,
            allow_downgrade=args.allow_downgrade, proc_version=args.proc_version,
        )  # fmt: skip
    if args.cuda_plan_args is not None:
        out["cuda"] = _also_cuda_plan(args)
    return _emit(args, out)


def _also_cuda_plan(args: argparse.Namespace) -> dict:
    """driver-plan --cuda-plan-args: cuda-plan's JSON for those arguments, made in this run
    after the driver's plan (one command on the node for both roles' plans), with the
    arguments it was made for (`args`: the CUDA role takes it only when they are its own).
    Its failure is its own result, not the driver plan's."""
    try:
        argv = json.loads(args.cuda_plan_args)
    except ValueError as exc:
        raise ProvisionError(
            f"--cuda-plan-args: not JSON ({exc}); want a list of cuda-plan's arguments"
        ) from None
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise ProvisionError(
            f"--cuda-plan-args: {args.cuda_plan_args!r} is not a list of strings; "
            "want cuda-plan's arguments"
        )
    try:
        sub = args.cuda_plan_parser.parse_args(argv)
    except (UsageError, SystemExit) as exc:
        why = f" ({exc})" if isinstance(exc, UsageError) else ""
        return {"ok": False, "changed": False, "args": argv,
                "message": f"bad arguments for provision cuda-plan: {argv}{why}"}  # fmt: skip
    try:
        result = _cuda_plan_result(sub)
    except (ProvisionError, CheckFailed) as exc:
        result = {"ok": False, "message": str(exc)}
    result.setdefault("changed", False)
    return {**result, "args": argv}


def cmd_driver_check(args: argparse.Namespace) -> int:
    return _emit(args, converge.node_match(args.package, args.pin, args.proc_version).to_dict())


def _wait_seconds(maximum: float | None = None):
    """The argparse type of fabric-wait's --timeout/--interval (bad values: one line, exit 2)."""

    def parse(text: str) -> float:
        try:
            return fabric.seconds(text, maximum)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "seconds"
    return parse


def cmd_fabric_wait(args: argparse.Namespace) -> int:
    """Wait (at most --timeout seconds) for the NVSwitch fabric (gpunode.validate.fabric.wait):
    ready (exit 0) when validate's node.fabric_manager verdict passes or the node has no
    NVSwitch; exit 1 with one line at once when the verdict fails in a way no wait heals or
    NVML cannot be read, and when the time is up."""
    from ..validate import fabric as fabric_facts

    waited = fabric_facts.wait(args.timeout, args.interval)
    detail = waited.detail
    if waited.outcome == "timeout":
        message = (
            f"the NVSwitch fabric was not trained within {args.timeout:g} s "
            f"({fabric.WAIT_VARIABLE}): {detail}"
        )
    elif waited.outcome == "failed":
        message = f"the NVSwitch fabric will not be trained by waiting: {detail}"
    elif waited.outcome == "no_driver":
        message = f"cannot judge the NVSwitch fabric: {detail}"
    elif waited.nvswitch:
        message = f"the NVSwitch fabric is ready after {waited.waited_s:.1f} s: {detail}"
    else:
        message = detail
    result = {"ok": waited.ready, "changed": False, "ready": waited.ready,
              "nvswitch": waited.nvswitch, "detail": detail,
              "waited_s": round(waited.waited_s, 3), "polls": waited.polls,
              "message": message}  # fmt: skip
    if args.json:
        print(json.dumps(result, indent=2))
    elif waited.ready:
        print(message)
    if not waited.ready:
        return fail(message, EXIT_FAIL)
    return EXIT_OK


def cmd_cuda_gate(args: argparse.Namespace) -> int:
    driver = datacenter = None
    if args.driver:
        from ..provision.versions import check_exact

        driver = check_exact("--driver", args.driver)
        datacenter = {"yes": True, "no": False}.get(args.datacenter)
    return _emit(
        args,
        converge.cuda_gate(_cuda_list(args.cuda), args.policy, args.source, driver, datacenter),
    )


def _cuda_plan(args: argparse.Namespace) -> tuple[sources.Platform, sources.CudaPlan]:
    plat = _platform(args)
    plan = sources.cuda_plan(
        plat,
        source=args.source,
        versions=_cuda_list(args.cuda),
        default=args.default or "",
        package_set=args.package_set,
        repo_url=args.cuda_repo_url,
        repo_key_url=args.cuda_repo_key_url,
    )
    return plat, plan


def cmd_cuda_plan(args: argparse.Namespace) -> int:
    return _emit(args, _cuda_plan_result(args))


def _cuda_plan_result(args: argparse.Namespace) -> dict:
    out: dict = {}
    compat: list[str] = []
    if args.gate:
        # the compatibility gate first (before the package plan too, which would only say
        # what the distribution ships): nothing is planned for a CUDA the driver cannot run
        gate = converge.cuda_gate(_cuda_list(args.cuda), args.gate, args.source, None, None)
        if not gate["ok"]:
            return {**gate, "gate": gate}
        out["gate"] = gate
        compat = gate["compat_packages"]
    plat, plan = _cuda_plan(args)
    if args.resolve and args.refresh_lists is not None:
        out["lists"] = lists.refresh(plat.family, args.refresh_lists)
    out.update(plan.to_dict())
    out["compat_packages"] = compat
    if args.resolve:
        out["available"] = packages.resolve_cuda(
            plat.family, plan.version_packages, "cuda_toolkit_versions"
        )
    out["ok"] = True
    out["message"] = f"CUDA {', '.join(plan.versions)} ({plan.package_set}) from {plan.source}"
    if args.gate:
        out["message"] = f"{out['gate']['message']}; {out['message']}"
    if args.state:
        converge.cuda_state(
            plat, plan, compat, out, hold=args.hold, profile_script=args.profile_script
        )
    return out


def cmd_cuda_check(args: argparse.Namespace) -> int:
    plat, plan = _cuda_plan(args)
    return _emit(args, converge.cuda_check(plat, plan))


def cmd_install(args: argparse.Namespace) -> int:
    from ..provision import venv

    return _emit(
        args,
        venv.install(Path(args.venv), Path(args.wheels), Path(args.bin_dir), dry_run=args.dry_run),
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


def _repo_args(p: argparse.ArgumentParser) -> None:
    """Where NVIDIA's CUDA repository is (source cuda-repo): NVIDIA's, or a mirror of it."""
    p.add_argument("--cuda-repo-url", default=sources.CUDA_REPO_URL, metavar="URL",
                   help="NVIDIA's CUDA repository or a mirror; placeholders {repo} {arch} "
                   "(default: NVIDIA's)")  # fmt: skip
    p.add_argument("--cuda-repo-key-url", default=sources.CUDA_REPO_KEY_URL, metavar="URL",
                   help="its signing key; placeholders {url} {key} {repo} {arch} "
                   "(default: NVIDIA's key beside the repository)")  # fmt: skip


def _refresh_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--refresh-lists",
        type=int,
        metavar="SECONDS",
        help="refresh the package lists first when older than SECONDS or than a sources file",
    )


def add_arguments(pv: argparse.ArgumentParser) -> None:
    sub = pv.add_subparsers(dest="action", required=True, parser_class=Parser)

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
    v.add_argument("--fabric-wait-timeout", default="", metavar="SECONDS",
                   help="nvidia_driver_fabric_wait_timeout (fabric-wait --timeout)")  # fmt: skip
    v.add_argument("--watch-interval", default="", metavar="SECONDS",
                   help="gpu_watch_interval (gpunode-watch.service's --interval)")  # fmt: skip
    v.add_argument("--gpu-device-id", action="append", default=[])
    v.add_argument("--batch", action="store_true",
                   help="validate many hosts: stdin is JSON {host: [these arguments]}")  # fmt: skip
    _platform_args(v)
    _km(v)
    v.set_defaults(func=cmd_validate, validate_parser=v)

    pf = sub.add_parser("preflight", help="node facts and their verdict")
    pf.add_argument("--min-free-mib", type=int, default=4096)
    pf.add_argument("--secure-boot-signing", action="store_true",
                    help="a MOK is enrolled and DKMS signs modules with it")  # fmt: skip
    pf.add_argument("--containerd-cdi", action="store_true",
                    help="gpunode will enable CDI in containerd: it must be >= 1.7")  # fmt: skip
    pf.add_argument("--root", default="/", help=argparse.SUPPRESS)
    # the requested versions against the node's package sources (gpu_preflight's archive check)
    pf.add_argument("--driver-source", default="distro")
    pf.add_argument("--driver-branch", default="", help="check the driver against the sources")
    pf.add_argument("--driver-version", default="")
    pf.add_argument("--flavor", default="auto")
    pf.add_argument("--gpu-device-id", action="append", default=[], help=argparse.SUPPRESS)
    pf.add_argument("--cuda", action="append", default=[], help="check CUDA against the sources")
    pf.add_argument("--cuda-source", default="distro")
    pf.add_argument("--cuda-default", default="")
    pf.add_argument("--package-set", default="full")
    _refresh_arg(pf)
    _km(pf)
    pf.set_defaults(func=cmd_preflight)

    ins = sub.add_parser("install", help="gpunode into its virtualenv from the copied wheels")
    ins.add_argument("--venv", default="/opt/gpunode")
    ins.add_argument("--wheels", default="/opt/gpunode-wheels", help="directory of the wheels")
    ins.add_argument("--bin-dir", default="/usr/local/bin", help="where the links go")
    ins.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    ins.set_defaults(func=cmd_install)

    dp = sub.add_parser("driver-plan", help="driver packages, repository, pin, hold")
    dp.add_argument("--source", default="distro")
    dp.add_argument("--branch", required=True)
    dp.add_argument("--version", default="", help="exact pin (default: the branch)")
    dp.add_argument("--flavor", default="auto")
    dp.add_argument("--gpu-device-id", action="append", default=[], help="default: PCI sysfs")
    dp.add_argument("--resolve", action="store_true", help="versions from the node's sources")
    dp.add_argument("--pin-file", default="", help="with --resolve: is this pin file current")
    dp.add_argument("--hold", action=argparse.BooleanOptionalAction, default=True,
                    help="with --resolve: the packages are to be held (todo.hold)")  # fmt: skip
    dp.add_argument("--allow-downgrade", action=argparse.BooleanOptionalAction, default=None,
                    help="--no-allow-downgrade: fail when the installed packages are newer")  # fmt: skip
    dp.add_argument("--check", action="store_true",
                    help="with --resolve: the matching-version check once the pin is installed")  # fmt: skip
    dp.add_argument("--proc-version", default="/proc/driver/nvidia/version", help=argparse.SUPPRESS)
    # where PCI sysfs is read (GPUs without --gpu-device-id, NVSwitches): tests' fake trees
    dp.add_argument("--root", default="/", help=argparse.SUPPRESS)
    dp.add_argument("--cuda-plan-args", metavar="JSON",
                    help="also cuda-plan with these arguments (a JSON list), into `cuda`")  # fmt: skip
    _refresh_arg(dp)
    _repo_args(dp)
    _platform_args(dp)
    _km(dp)
    dp.set_defaults(func=cmd_driver_plan)

    dc = sub.add_parser("driver-check", help="matching-version check")
    dc.add_argument("--package", required=True, help="the driver package (driver-plan)")
    dc.add_argument("--pin", required=True, help="exact version or branch")
    dc.add_argument("--proc-version", default="/proc/driver/nvidia/version", help=argparse.SUPPRESS)
    dc.set_defaults(func=cmd_driver_check)

    fw = sub.add_parser("fabric-wait", help="wait (bounded) for the NVSwitch fabric to train")
    fw.add_argument("--timeout", type=_wait_seconds(fabric.WAIT_MAX_S), default=120.0,
                    metavar="SECONDS", help=f"give up after this long (> 0, at most "
                    f"{fabric.WAIT_MAX_S}; default 120)")  # fmt: skip
    fw.add_argument("--interval", type=_wait_seconds(), default=1.0, metavar="SECONDS",
                    help="between two looks (> 0; default 1)")  # fmt: skip
    fw.set_defaults(func=cmd_fabric_wait)

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
            c.add_argument("--resolve", action=argparse.BooleanOptionalAction, default=False)
            c.add_argument("--gate", metavar="POLICY", default="",
                           help="the compatibility gate against this node's driver first")  # fmt: skip
            c.add_argument("--state", action="store_true",
                           help="installed/held packages, `todo` and the version check")  # fmt: skip
            c.add_argument("--hold", action=argparse.BooleanOptionalAction, default=True,
                           help="with --state: the packages are to be held (todo.hold)")  # fmt: skip
            c.add_argument("--profile-script", default="",
                           help="with --state: is this profile.d script current")  # fmt: skip
            _refresh_arg(c)
        _repo_args(c)
        _platform_args(c)
        c.set_defaults(func=func)
        if name == "cuda-plan":
            dp.set_defaults(cuda_plan_parser=c)

    for p in sub.choices.values():
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.set_defaults(func=_guarded(p.get_default("func")))


def _guarded(func):
    return lambda args: _run_guarded(func, args)


def run(args: argparse.Namespace) -> int:
    return args.func(args)


def _run_guarded(func, args: argparse.Namespace) -> int:
    """Run a provision command; bad values exit 2 with one line, failed checks exit 1."""
    try:
        return func(args)
    except ProvisionError as exc:
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "changed": False, "message": str(exc)}))
        return fail(exc, EXIT_USAGE)
    except CheckFailed as exc:
        if getattr(args, "json", False):
            print(json.dumps({"ok": False, "changed": False, "message": str(exc)}))
        return fail(exc, EXIT_FAIL)
