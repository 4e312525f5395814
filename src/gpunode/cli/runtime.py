"""`gpunode runtime configure|refresh|install-links`: register the runtime with an engine
(gpunode.cli.engines), rediscover the driver, put the executables on PATH
(gpunode.cli.install)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .base import EXIT_OK, Parser, print_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .engines.common import RUNTIME_PATH
    from .engines.containerd import DROP_IN_DIR, DROP_IN_NAME

    rtsub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    conf = rtsub.add_parser("configure", help="register gpunode with a container engine")
    conf.add_argument("engine", choices=["docker", "containerd"])
    conf.add_argument("--set-as-default", action="store_true")
    conf.add_argument("--cdi", action="store_true", help="enable CDI in the engine")
    conf.add_argument("--config", dest="config_path", help="the engine's config file")
    conf.add_argument("--name", default="gpunode", help="runtime name (default gpunode)")
    conf.add_argument("--runtime-path", default=RUNTIME_PATH)
    conf.add_argument("--dry-run", action="store_true", help="print the result, write nothing")
    conf.add_argument(
        "--drop-in-dir",
        default=DROP_IN_DIR,
        help=f"containerd: where the {DROP_IN_NAME} drop-in goes",
    )
    conf.add_argument("--json", action="store_true")
    ref = rtsub.add_parser("refresh", help="rediscover the driver and rewrite the cache")
    ref.add_argument("--config", help="runtime.toml (default /etc/gpunode/runtime.toml)")
    ref.add_argument("--json", action="store_true")
    links = rtsub.add_parser("install-links", help="link the executables into a bin dir")
    links.add_argument("--prefix", default="/usr/local/bin")
    links.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    if args.action == "refresh":
        from ..runtime import config, discovery

        cfg = config.load(args.config, first_stage_force=True)  # and the sh stage's file
        disc = discovery.load(cfg.cache_file, cfg.driver_root, refresh=True)
        result = {
            "cache_file": cfg.cache_file,
            "driver_version": disc.node.driver_version,
            "gpus": len(disc.node.gpus),
        }
        print_json(result) if args.json else print(
            f"{cfg.cache_file}: driver {disc.node.driver_version}, {len(disc.node.gpus)} GPU(s)"
        )
        return EXIT_OK
    if args.action == "install-links":
        from .install import install_links

        result = install_links(Path(args.prefix), Path(sys.executable).parent)
        print_json(result) if args.json else print(
            "\n".join(result["changes"]) if result["changes"] else "unchanged"
        )
        return EXIT_OK
    return configure(args)


def configure(args: argparse.Namespace) -> int:
    kwargs = {
        "runtime_name": args.name,
        "runtime_path": args.runtime_path,
        "set_default": args.set_as_default,
        "cdi": args.cdi,
        "dry_run": args.dry_run,
    }
    if args.engine == "docker":
        from .engines import docker

        res = docker.configure_docker(args.config_path or docker.DAEMON_JSON, **kwargs)
    else:
        from .engines import containerd

        res = containerd.configure_containerd(
            args.config_path or containerd.CONFIG_TOML, drop_in_dir=args.drop_in_dir, **kwargs
        )
    if args.json:
        print_json(res.to_dict())
    elif args.dry_run:
        sys.stdout.write(res.content)
    else:
        print(
            f"{res.path}: {'changed' if res.changed else 'unchanged'}"
            + (f" (backup {res.backup})" if res.backup else "")
        )
    return EXIT_OK
