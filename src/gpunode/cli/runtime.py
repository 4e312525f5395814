"""`gpunode runtime configure|refresh|install-links`: register the runtime with an engine
(gpunode.engines), rediscover the driver, put the executables on PATH
(gpunode.launch.firststage)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..util.command import EXIT_OK, Parser, UsageError, print_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..engines.common import RUNTIME_PATH
    from ..engines.containerd import DROP_IN_DIR, DROP_IN_NAME

    rtsub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    conf = rtsub.add_parser("configure", help="register gpunode with a container engine")
    conf.add_argument("engine", choices=["docker", "containerd"])
    conf.add_argument("--set-as-default", action="store_true")
    conf.add_argument("--cdi", action="store_true", help="enable CDI in the engine")
    conf.add_argument("--config", dest="config_path", help="the engine's config file")
    conf.add_argument(
        "--name",
        action="append",
        dest="names",
        metavar="NAME",
        help="runtime name (default gpunode); containerd: repeat for several handler names "
        "in one drop-in (e.g. --name gpunode --name nvidia; the first is the default with "
        "--set-as-default)",
    )
    conf.add_argument(
        "--cdi-spec-dir",
        action="append",
        default=[],
        metavar="DIR",
        help="containerd: add DIR to the CRI plugin's cdi_spec_dirs (with --cdi)",
    )
    conf.add_argument(
        "--pass-annotations",
        action="store_true",
        help="containerd: container_annotations on gpunode's handlers covering runtime.toml's "
        "annotation-prefixes (cdi.k8s.io/* by default)",
    )
    conf.add_argument("--runtime-config", help="runtime.toml for --pass-annotations")
    conf.add_argument("--runtime-path", default=RUNTIME_PATH)
    conf.add_argument("--dry-run", action="store_true", help="print the result, write nothing")
    conf.add_argument(
        "--drop-in-dir",
        default=DROP_IN_DIR,
        help=f"containerd: where the {DROP_IN_NAME} drop-in goes",
    )
    conf.add_argument("--json", action="store_true")
    ref = rtsub.add_parser(
        "refresh",
        help="rediscover the driver, rewrite the cache, link the driver's nodes in /dev/char",
    )
    ref.add_argument("--config", help="runtime.toml (default /etc/gpunode/runtime.toml)")
    ref.add_argument("--json", action="store_true")
    setup = rtsub.add_parser(
        "setup",
        help="runtime.toml, engines, CDI spec and systemd units in one run (the role's work)",
        description="Write runtime.toml (checked first), register gpunode with Docker and "
        "containerd, write the CDI spec and the systemd units; report what changed. Content "
        'comes as JSON: {"config": "<runtime.toml>", "units": {"NAME": "<unit>"}}.',
    )
    setup.add_argument("--input", help="the JSON content document ('-': stdin)")
    setup.add_argument("--config", help="runtime.toml (default /etc/gpunode/runtime.toml)")
    setup.add_argument("--docker", action="store_true", help="register with Docker")
    setup.add_argument("--docker-config", default=None, help="daemon.json")
    setup.add_argument("--docker-name", help="runtime name in daemon.json (default gpunode)")
    setup.add_argument("--docker-runtime-path", help=f"its executable (default {RUNTIME_PATH})")
    setup.add_argument("--docker-default", action="store_true", help='"default-runtime"')
    setup.add_argument("--docker-cdi", action="store_true", help='"features": {"cdi": true}')
    setup.add_argument("--containerd", action="store_true", help="register with containerd")
    setup.add_argument("--containerd-config", default=None, help="containerd's config.toml")
    setup.add_argument("--containerd-default", action="store_true")
    setup.add_argument("--containerd-drop-in-dir", help=f"default {DROP_IN_DIR}")
    setup.add_argument(
        "--containerd-name",
        action="append",
        default=[],
        metavar="NAME",
        help="a handler name (repeat: gpunode and nvidia; default gpunode; the first is the "
        "default with --containerd-default)",
    )
    setup.add_argument(
        "--containerd-cdi",
        action="store_true",
        help="enable_cdi and the CDI spec's directory in cdi_spec_dirs (containerd >= 1.7)",
    )
    setup.add_argument(
        "--containerd-pass-annotations",
        action="store_true",
        help="container_annotations on the handlers covering runtime.toml's annotation-prefixes",
    )
    setup.add_argument(
        "--containerd-runtime-class",
        metavar="FILE",
        help="write a RuntimeClass manifest per handler there, for the operator to apply, and "
        "NVIDIA's device plugin's Helm values matching the node beside it",
    )
    setup.add_argument(
        "--containerd-nvidia-cdi-hook",
        metavar="PATH",
        help="the hook the device plugin's CDI spec names (cdi.nvidiaHookPath in its values; "
        "default: install-links' nvidia-cdi-hook, /usr/local/libexec/gpunode/nvidia-cdi-hook)",
    )
    setup.add_argument(
        "--kubernetes",
        action="store_true",
        help="pods reach gpunode through containerd's CRI: runtime.toml gets "
        "accept-envvar-unprivileged = false and accept-volume-mounts = true where its content "
        "does not set them (a pod gets GPUs only through its device plugin allocation)",
    )
    setup.add_argument(
        "--kubernetes-insecure-envvar",
        action="store_true",
        help="with --kubernetes: INSECURE, any pod may take any GPU by NVIDIA_VISIBLE_DEVICES "
        "(accept-envvar-unprivileged = true)",
    )
    setup.add_argument(
        "--cdi-spec", action="store_true", help="write the CDI spec (as cdi generate --install)"
    )
    setup.add_argument("--unit-dir", default=None, help="where units go (/etc/systemd/system)")
    setup.add_argument("--enable", action="append", default=[], metavar="UNIT")
    setup.add_argument("--start", action="append", default=[], metavar="UNIT")
    setup.add_argument("--stop", action="append", default=[], metavar="UNIT")
    setup.add_argument("--disable", action="append", default=[], metavar="UNIT")
    setup.add_argument("--dry-run", action="store_true", help="compute and report, write nothing")
    setup.add_argument("--json", action="store_true")
    links = rtsub.add_parser("install-links", help="link the executables into a bin dir")
    links.add_argument("--prefix", default="/usr/local/bin")
    links.add_argument(
        "--remove",
        action="store_true",
        help="remove what install-links made there (and in <prefix>/../libexec/gpunode), only that",
    )
    links.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    if args.action == "refresh":
        from ..runtime import config, discovery

        cfg = config.load(args.config, first_stage_force=True)  # and the sh stage's file
        from ..nvidia import devchar
        from ..nvidia.devices import under

        disc = discovery.load(cfg.cache_file, cfg.driver_root, refresh=True)
        links = devchar.create(under(cfg.dev_root, "/dev"))
        result = {
            "cache_file": cfg.cache_file,
            "driver_version": disc.node.driver_version,
            "gpus": len(disc.node.gpus),
            "dev_char_links": links,
        }
        print_json(result) if args.json else print(
            f"{cfg.cache_file}: driver {disc.node.driver_version}, {len(disc.node.gpus)} GPU(s)"
            + (f"; linked {', '.join(links)}" if links else "")
        )
        return EXIT_OK
    if args.action == "install-links":
        from ..launch.firststage import install_links, remove_links

        act = remove_links if args.remove else install_links
        result = act(Path(args.prefix), Path(sys.executable).parent)
        print_json(result) if args.json else print(
            "\n".join(result["changes"]) if result["changes"] else "unchanged"
        )
        return EXIT_OK
    if args.action == "setup":
        return setup(args)
    return configure(args)


def setup(args: argparse.Namespace) -> int:
    from ..engines import containerd, docker
    from ..engines import runtime_setup as rs
    from ..engines.common import RUNTIME_PATH

    for engine in ("docker", "containerd"):  # an engine's options without the engine
        given = [k for k, v in vars(args).items() if k.startswith(f"{engine}_") and v]
        if given and not getattr(args, engine):
            opt = "--" + given[0].replace("_", "-")
            raise UsageError(f"gpunode runtime setup: {opt} needs --{engine}")
    if args.kubernetes_insecure_envvar and not args.kubernetes:
        raise UsageError("gpunode runtime setup: --kubernetes-insecure-envvar needs --kubernetes")
    config_text, units = rs.read_input(args.input)
    s = rs.Setup(
        config_path=args.config,
        config_text=config_text,
        kubernetes=args.kubernetes,
        insecure_envvar=args.kubernetes_insecure_envvar,
        docker=rs.Docker(
            args.docker_config or docker.DAEMON_JSON,
            "gpunode" if args.docker_name is None else args.docker_name,
            args.docker_runtime_path or RUNTIME_PATH,
            args.docker_default,
            args.docker_cdi,
        )
        if args.docker
        else None,
        containerd=rs.Containerd(
            args.containerd_config or containerd.CONFIG_TOML,
            args.containerd_drop_in_dir or containerd.DROP_IN_DIR,
            args.containerd_default,
            tuple(args.containerd_name) or ("gpunode",),
            args.containerd_cdi,
            args.containerd_pass_annotations,
            args.containerd_runtime_class,
            args.containerd_nvidia_cdi_hook,
        )
        if args.containerd
        else None,
        cdi_spec=args.cdi_spec,
        unit_dir=args.unit_dir or rs.UNIT_DIR,
        units=units,
        enable=args.enable,
        start=args.start,
        stop=args.stop,
        disable=args.disable,
    )
    result = rs.setup(s, dry_run=args.dry_run)
    print_json(result.to_dict()) if args.json else print(rs.summary(result))
    return EXIT_OK


def configure(args: argparse.Namespace) -> int:
    names = args.names or ["gpunode"]
    if args.engine == "docker":
        for opt, given in (
            ("--name given twice", len(names) > 1),
            ("--cdi-spec-dir", args.cdi_spec_dir),
            ("--pass-annotations", args.pass_annotations),
        ):
            if given:
                raise UsageError(f"gpunode runtime configure docker: {opt} is for containerd only")
    if args.cdi_spec_dir and not args.cdi:
        raise UsageError("gpunode runtime configure: --cdi-spec-dir needs --cdi")
    kwargs = {
        "runtime_name": names[0],
        "runtime_path": args.runtime_path,
        "set_default": args.set_as_default,
        "cdi": args.cdi,
        "dry_run": args.dry_run,
    }
    if args.engine == "docker":
        from ..engines import docker

        res = docker.configure_docker(args.config_path or docker.DAEMON_JSON, **kwargs)
    else:
        from ..engines import containerd

        annotations: tuple[str, ...] = ()
        if args.pass_annotations:
            from ..runtime import config as runtime_config

            cfg = runtime_config.load(args.runtime_config, write_caches=False)
            annotations = containerd.annotation_patterns(cfg.annotation_prefixes)
        res = containerd.configure_containerd(
            args.config_path or containerd.CONFIG_TOML,
            drop_in_dir=args.drop_in_dir,
            names=names,
            cdi_spec_dirs=args.cdi_spec_dir,
            container_annotations=annotations,
            **kwargs,
        )
    # The engine reads its configuration only when it starts: configure never restarts it
    # (`gpunode runtime setup` reports it in `restart`, and the role restarts it), so it
    # says so, on stderr (stdout stays JSON with --json) and as restart_needed.
    restart_needed = res.changed and not args.dry_run
    if args.json:
        print_json({**res.to_dict(), "restart_needed": restart_needed})
    elif args.dry_run:
        sys.stdout.write(res.diff())
    else:
        print(
            f"{res.path}: {'changed' if res.changed else 'unchanged'}"
            + (f" (backup {res.backup})" if res.backup else "")
        )
    if restart_needed:
        sys.stderr.write(restart_line(args.engine, names) + "\n")
    return EXIT_OK


def restart_line(engine: str, names: list[str]) -> str:
    """What `runtime configure` says after changing an engine's configuration."""
    if engine == "containerd":
        return (
            "restart needed: containerd loads its configuration only when it starts; until "
            "`systemctl restart containerd`, pods through "
            + ", ".join(f"handler {n!r}" for n in names)
            + f' fail with `no runtime for "{names[0]}" is configured`'
        )
    return (
        "restart needed: Docker loads daemon.json only when it starts; "
        "run `systemctl restart docker`"
    )
