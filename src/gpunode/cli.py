"""The `gpunode` command line.

Exit codes (stable; roles and scripts rely on them):
  0  success
  1  the operation failed (engine error, node not reachable, ...)
  2  bad input: unknown option, invalid profile or value
  3  no NVIDIA driver on this node (inventory)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import __version__

EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_NO_DRIVER = 0, 1, 2, 3


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, like every other bad input
        raise UsageError(f"{self.prog}: {message}")


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))


def cmd_inventory(args: argparse.Namespace) -> int:
    from . import inventory

    try:
        inv = inventory.collect(
            proc_root=Path(args.proc_root), dev_root=Path(args.dev_root), use_nvml=not args.no_nvml
        )
    except inventory.NoDriver as exc:
        if args.json:
            _print_json({"schema": inventory.SCHEMA, "error": "no_driver", "detail": str(exc)})
        print(f"gpunode: {exc}", file=sys.stderr)
        return EXIT_NO_DRIVER
    if args.json:
        _print_json(inv.to_dict())
    else:
        print(inventory.format_table(inv))
    return EXIT_OK


def cmd_profile(args: argparse.Namespace) -> int:
    from . import profiles

    if args.action == "list":
        for name in profiles.builtin_names():
            p = profiles.load_profile(name)
            print(f"{name:<14} {p.description}")
        return EXIT_OK
    if not args.ref:
        raise UsageError(f"gpunode profile {args.action}: a profile name or file is required")
    p = profiles.load_profile(args.ref)
    if args.action == "check":
        print(f"{p.source}: ok ({len(p.gpus)} GPU(s))")
    else:
        _print_json(p.to_dict())
    return EXIT_OK


def cmd_sim(args: argparse.Namespace) -> int:
    from .sim import apply as sim_apply

    if args.action == "apply-local":
        from .profiles import load_profile

        if os.geteuid() != 0:
            raise UsageError("gpunode sim apply-local must run as root (it creates device nodes)")
        res = sim_apply.apply_profile(load_profile(args.profile))
        if args.json:
            _print_json({"changed": bool(res.changed), "changes": res.changed})
        else:
            print("\n".join(res.changed) if res.changed else "unchanged")
        return EXIT_OK

    from .sim import cluster, images

    if args.action == "images":
        for release in args.release or list(images.RELEASES):
            images.build("node", release)
        images.build("workload", "bookworm")
        return EXIT_OK
    if args.action == "up":
        inventory = Path(args.inventory)
        art = cluster.Artifacts.build(Path(args.build_dir), Path(args.project))
        nodes = cluster.up(inventory, art)
        print(f"simulated cluster up: {', '.join(n.name for n in nodes)}")
        return EXIT_OK
    if args.action == "down":
        inventory = Path(args.inventory)
        cluster.down(inventory if inventory.exists() else None)
        return EXIT_OK
    if args.action == "apply":
        cluster.apply(args.node, args.profile)
        return EXIT_OK
    raise UsageError(f"unknown sim action {args.action!r}")


def cmd_cdi(args: argparse.Namespace) -> int:
    from . import cdi, config, discover

    cfg = config.load(args.config)
    disc = discover.load(cfg.cache_file, cfg.driver_root, refresh=True)
    spec = cdi.generate(disc, hook_path=cfg.hook_path, dev_root=cfg.dev_root, ldconfig=cfg.ldconfig)
    if args.install:
        if args.output:
            raise UsageError("gpunode cdi generate: --install and --output exclude each other")
        args.output = os.path.join(cfg.cdi_spec_dirs[0], "nvidia.yaml")
    if args.output:
        changed = cdi.write(spec, args.output)
        if args.json:
            _print_json(
                {
                    "changed": changed,
                    "path": args.output,
                    "devices": len(spec["devices"]),
                    "cdiVersion": spec["cdiVersion"],
                }
            )
        else:
            print(
                f"{args.output}: {'written' if changed else 'unchanged'} "
                f"({len(spec['devices'])} devices, cdiVersion {spec['cdiVersion']})"
            )
    else:
        sys.stdout.write(cdi.dump(spec, args.format))
    return EXIT_OK


def cmd_runtime(args: argparse.Namespace) -> int:
    from . import config, discover

    if args.action == "refresh":
        cfg = config.load(args.config)
        disc = discover.load(cfg.cache_file, cfg.driver_root, refresh=True)
        result = {
            "cache_file": cfg.cache_file,
            "driver_version": disc.node.driver_version,
            "gpus": len(disc.node.gpus),
        }
        _print_json(result) if args.json else print(
            f"{cfg.cache_file}: driver {disc.node.driver_version}, {len(disc.node.gpus)} GPU(s)"
        )
        return EXIT_OK
    if args.action == "install-links":
        from .install import install_links

        result = install_links(Path(args.prefix), Path(sys.executable).parent)
        _print_json(result) if args.json else print(
            "\n".join(result["changes"]) if result["changes"] else "unchanged"
        )
        return EXIT_OK
    from . import engines

    kwargs = {
        "runtime_name": args.name,
        "runtime_path": args.runtime_path,
        "set_default": args.set_as_default,
        "cdi": args.cdi,
        "dry_run": args.dry_run,
    }
    if args.engine == "docker":
        res = engines.configure_docker(args.config_path or "/etc/docker/daemon.json", **kwargs)
    else:
        res = engines.configure_containerd(
            args.config_path or "/etc/containerd/config.toml",
            drop_in_dir=args.drop_in_dir,
            **kwargs,
        )
    if args.json:
        _print_json(res.to_dict())
    elif args.dry_run:
        sys.stdout.write(res.content)
    else:
        print(
            f"{res.path}: {'changed' if res.changed else 'unchanged'}"
            + (f" (backup {res.backup})" if res.backup else "")
        )
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from . import config, discover, edits, requests

    cfg = config.load(args.config)
    env = []
    for item in args.env:
        if "=" not in item:
            raise UsageError(f"--env {item!r} is not KEY=VALUE")
        env.append(item)
    mounts = []
    for item in args.mount:
        src, sep, dst = item.partition(":")
        if not sep or not dst.startswith("/"):
            raise UsageError(f"--mount {item!r} is not SRC:/absolute/destination")
        mounts.append({"source": src, "destination": dst, "type": "bind"})
    annotations = {}
    for item in args.annotation:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"--annotation {item!r} is not KEY=VALUE")
        annotations[key] = value
    out: dict[str, object] = {}
    try:
        req = requests.parse_request(
            env, privileged=args.privileged, mounts=mounts, annotations=annotations, cfg=cfg
        )
        out["gpu_container"] = req.is_gpu
        out["request"] = {
            "devices": None if req.devices is None else list(req.devices),
            "cdi_devices": list(req.cdi_devices),
            "source": req.source,
            "capabilities": sorted(req.capabilities),
            "requirements": list(req.requirements),
            "legacy": req.legacy,
        }
        if req.is_gpu:
            disc = discover.load(cfg.cache_file, cfg.driver_root)
            selected = requests.select_gpus(req, disc.node.gpus)
            requests.check_requirements(req, disc.node, selected, cfg)
            out["selected"] = [
                {"index": g.index, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id} for g in selected
            ]
            out["edits"] = edits.build(
                disc,
                req.capabilities,
                selected,
                hook_path=cfg.hook_path,
                dev_root=cfg.dev_root,
                rootfs=args.rootfs,
                ldconfig=cfg.ldconfig,
            ).to_dict()
    except (requests.RequestError, edits.EditError, discover.DiscoveryError) as exc:
        out["error"] = str(exc)
    if args.json:
        _print_json(out)
    else:
        _print_explain(out)
    return EXIT_FAIL if "error" in out else EXIT_OK


def _print_explain(out: dict) -> None:
    if "error" in out and "request" not in out:
        print(f"error: {out['error']}")
        return
    req = out["request"]
    if not out["gpu_container"]:
        print(f"not a GPU container: the spec is left untouched (source: {req['source']})")
        return
    print(
        f"GPU request from {req['source']}: devices {req['devices']}, capabilities "
        f"{','.join(req['capabilities'])}"
    )
    for r in req["requirements"]:
        print(f"requirement: {r}")
    if "error" in out:
        print(f"error: {out['error']}")
        return
    for g in out["selected"]:
        print(f"gpu {g['index']}: {g['uuid']} {g['pci_bus_id']}")
    e = out["edits"]
    for d in e["devices"]:
        print(f"device {d['path']} (c {d['major']}:{d['minor']}, mode {d['mode']:o})")
    for m in e["mounts"]:
        print(f"mount {m['source']} -> {m['destination']} ({','.join(m['options'])})")
    for h in e["hooks"]:
        print(f"hook createContainer: {h['path']} {' '.join(h['args'][1:])}")
    for v in e["env"]:
        print(f"env {v}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="gpunode", description="Provision and validate NVIDIA GPU nodes.")
    p.add_argument("--version", action="version", version=f"gpunode {__version__}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    inv = sub.add_parser("inventory", help="driver, CUDA and GPUs on this node")
    inv.add_argument("--json", action="store_true", help="machine-readable output")
    inv.add_argument("--no-nvml", action="store_true", help="read /proc and /dev only")
    inv.add_argument("--proc-root", default="/proc/driver/nvidia", help=argparse.SUPPRESS)
    inv.add_argument("--dev-root", default="/dev", help=argparse.SUPPRESS)
    inv.set_defaults(func=cmd_inventory)

    prof = sub.add_parser("profile", help="GPU profiles for the simulator")
    prof.add_argument("action", choices=["list", "show", "check"])
    prof.add_argument("ref", nargs="?", help="built-in profile name or path to a .yaml file")
    prof.set_defaults(func=cmd_profile)

    cdi = sub.add_parser("cdi", help="Container Device Interface specs")
    cdisub = cdi.add_subparsers(dest="action", required=True, parser_class=_Parser)
    gen = cdisub.add_parser("generate", help="generate the nvidia.com/gpu CDI spec")
    gen.add_argument("--output", help="write here (e.g. /etc/cdi/nvidia.yaml) instead of stdout")
    gen.add_argument(
        "--install",
        action="store_true",
        help="write nvidia.yaml into the first of cdi-spec-dirs (runtime.toml)",
    )
    gen.add_argument("--format", choices=["yaml", "json"], default="yaml")
    gen.add_argument("--config", help="runtime.toml (default /etc/gpunode/runtime.toml)")
    gen.add_argument("--json", action="store_true", help="report as JSON (with --output)")
    gen.set_defaults(func=cmd_cdi)

    rt = sub.add_parser("runtime", help="the container runtime: configure engines, refresh cache")
    rtsub = rt.add_subparsers(dest="action", required=True, parser_class=_Parser)
    conf = rtsub.add_parser("configure", help="register gpunode with a container engine")
    conf.add_argument("engine", choices=["docker", "containerd"])
    conf.add_argument("--set-as-default", action="store_true")
    conf.add_argument("--cdi", action="store_true", help="enable CDI in the engine")
    conf.add_argument("--config", dest="config_path", help="the engine's config file")
    conf.add_argument("--name", default="gpunode", help="runtime name (default gpunode)")
    conf.add_argument("--runtime-path", default="/usr/local/bin/gpunode-container-runtime")
    conf.add_argument("--dry-run", action="store_true", help="print the result, write nothing")
    conf.add_argument(
        "--drop-in-dir",
        default="/etc/containerd/conf.d",
        help="containerd: where the 99-gpunode.toml drop-in goes",
    )
    conf.add_argument("--json", action="store_true")
    conf.set_defaults(func=cmd_runtime)
    ref = rtsub.add_parser("refresh", help="rediscover the driver and rewrite the cache")
    ref.add_argument("--config", help="runtime.toml (default /etc/gpunode/runtime.toml)")
    ref.add_argument("--json", action="store_true")
    ref.set_defaults(func=cmd_runtime)
    links = rtsub.add_parser("install-links", help="link the executables into a bin dir")
    links.add_argument("--prefix", default="/usr/local/bin")
    links.add_argument("--json", action="store_true")
    links.set_defaults(func=cmd_runtime)

    ex = sub.add_parser("explain", help="what a container with this request would get")
    ex.add_argument("--env", action="append", default=[], metavar="K=V")
    ex.add_argument("--privileged", action="store_true")
    ex.add_argument("--mount", action="append", default=[], metavar="SRC:DST")
    ex.add_argument("--annotation", action="append", default=[], metavar="K=V")
    ex.add_argument("--rootfs", help="the container's root filesystem (decides the lib dir)")
    ex.add_argument("--config", help="runtime.toml (default /etc/gpunode/runtime.toml)")
    ex.add_argument("--json", action="store_true")
    ex.set_defaults(func=cmd_explain)

    sim = sub.add_parser("sim", help="the simulated GPU cluster (development and tests)")
    simsub = sim.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for name, helptext in (
        ("images", "build the node images (debootstrap + docker import, cached)"),
        ("up", "start the nodes of an inventory and apply their profiles"),
        ("down", "remove the nodes and their volumes"),
        ("apply", "apply a profile to a running node"),
        ("apply-local", "apply a profile on this machine (inside a node, as root)"),
    ):
        sp = simsub.add_parser(name, help=helptext)
        sp.set_defaults(func=cmd_sim)
        if name == "apply":
            sp.add_argument("node")
        if name in ("apply", "apply-local"):
            sp.add_argument("profile", help="built-in profile name or path to a .yaml file")
        if name in ("up", "down"):
            sp.add_argument("-i", "--inventory", default="inventories/sim/hosts.yml")
        if name == "up":
            sp.add_argument("--build-dir", default="build", help="where host artifacts go")
            sp.add_argument("--project", default=".", help="gpunode source tree (for the wheel)")
        if name == "images":
            sp.add_argument("--release", action="append", help="Debian release (repeatable)")
        sp.add_argument("--json", action="store_true")

    from .provision.commands import register as register_provision  # issue 9: provisioning

    register_provision(sub)
    return p


def _known_errors() -> tuple[type[BaseException], ...]:
    from .config import ConfigError
    from .discover import DiscoveryError
    from .profiles import ProfileError
    from .sim.cluster import SimError
    from .sim.docker import DockerError
    from .sim.images import ImageError
    from .sim.mocknvml import MockBuildError

    return (
        ConfigError,
        DiscoveryError,
        ProfileError,
        SimError,
        DockerError,
        ImageError,
        MockBuildError,
        OSError,
    )


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UsageError as exc:
        print(f"gpunode: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        from .engines import EngineConfigError, EngineRunError
        from .profiles import ProfileError

        if os.environ.get("GPUNODE_DEBUG"):
            raise
        if isinstance(exc, EngineRunError):
            print(f"gpunode: error: {exc}", file=sys.stderr)
            return EXIT_FAIL
        if isinstance(exc, ProfileError | EngineConfigError):  # bad input (a config file)
            print(f"gpunode: error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        if isinstance(exc, _known_errors()):
            print(f"gpunode: error: {exc}", file=sys.stderr)
            return EXIT_FAIL
        print(
            f"gpunode: internal error: {type(exc).__name__}: {exc} "
            "(set GPUNODE_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return EXIT_FAIL


if __name__ == "__main__":
    sys.exit(main())
