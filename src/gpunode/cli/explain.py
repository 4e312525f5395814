"""`gpunode explain`: what a container with this request would get on this node, or the
exact error it would get (the runtime's own plan, gpunode.runtime.plan)."""

from __future__ import annotations

import argparse

from ..util.command import EXIT_FAIL, EXIT_OK, UsageError, print_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--privileged", action="store_true")
    p.add_argument("--mount", action="append", default=[], metavar="SRC:DST")
    p.add_argument("--annotation", action="append", default=[], metavar="K=V")
    p.add_argument("--rootfs", help="the container's root filesystem (decides the lib dir)")
    p.add_argument("--config", help="runtime.toml (default /etc/gpunode/runtime.toml)")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ..runtime import config, plan
    from ..runtime.edits import EditError
    from ..runtime.request import RequestError, parse_request

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
        req = parse_request(
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
        p = plan.make(req, cfg, args.rootfs)
        if p.edits is not None:
            out["selected"] = [
                {"index": g.index, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id} for g in p.selected
            ]
            out["edits"] = p.edits.to_dict()
    except (RequestError, EditError) as exc:
        out["error"] = str(exc)
    if args.json:
        print_json(out)
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
        # the runtime does this itself; only the CDI path runs it as a createContainer hook
        print(f"setup (in the runtime, no hook process): {' '.join(h['args'][1:])}")
    for v in e["env"]:
        print(f"env {v}")
