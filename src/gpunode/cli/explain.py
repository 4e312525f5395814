"""`gpunode explain`: what a container with this request would get on this node, or the
exact error it would get (the runtime's own plan, gpunode.runtime.plan)."""

from __future__ import annotations

import argparse

from ..util.command import EXIT_FAIL, EXIT_OK, UsageError, print_json


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--env", action="append", default=[], metavar="K=V")
    p.add_argument("--privileged", action="store_true")
    p.add_argument(
        "--gpus-hook",
        action="store_true",
        help="the spec carries NVIDIA's prestart hook, as Docker's --gpus puts it there",
    )
    p.add_argument("--mount", action="append", default=[], metavar="SRC:DST")
    p.add_argument("--annotation", action="append", default=[], metavar="K=V")
    p.add_argument("--rootfs", help="the container's root filesystem (decides the lib dir)")
    p.add_argument("--config", help="runtime.toml (default /etc/gpunode/runtime.toml)")
    p.add_argument("--json", action="store_true")


def run(args: argparse.Namespace) -> int:
    from ..runtime import config, plan
    from ..runtime.edits import EditError
    from ..runtime.request import parse_request
    from ..runtime.userinput import RequestError

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
            env,
            privileged=args.privileged,
            engine_hook=args.gpus_hook,
            mounts=mounts,
            annotations=annotations,
            cfg=cfg,
        )
        out["gpu_container"] = req.is_gpu
        out["request"] = {
            "devices": None if req.devices is None else list(req.devices),
            "cdi_devices": list(req.cdi_devices),
            "source": req.source,
            "capabilities": sorted(req.capabilities),
            "requirements": list(req.requirements),
            "legacy": req.legacy,
            "mig_config": req.mig_config,
            "mig_monitor": req.mig_monitor,
        }
        p = plan.make(req, cfg, args.rootfs)
        if p.edits is not None:
            out["selected"] = [
                {"index": g.index, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id} for g in p.selected
            ]
            out["mig"] = [_mig(m, p, cfg.dev_root) for m in p.migs]
            out["edits"] = p.edits.to_dict()
    except (RequestError, EditError) as exc:
        out["error"] = str(exc)
    if args.json:
        print_json(out)
    else:
        _print_explain(out)
    return EXIT_FAIL if "error" in out else EXIT_OK


def _mig(sel, p, dev_root: str) -> dict:
    """A selected MIG device as explain shows it: its parent, ids and cap nodes."""
    from ..nvidia.devices import under
    from ..runtime.edits import mig_cap_nodes

    gi, ci = mig_cap_nodes(sel, under(p.discovery.files.root, "/proc/driver/nvidia"), dev_root)
    return {
        "name": sel.name,
        "uuid": sel.mig.uuid,
        "parent": {
            "index": sel.parent.index,
            "uuid": sel.parent.uuid,
            "pci_bus_id": sel.parent.pci_bus_id,
            "minor": sel.parent.minor,
        },
        "gi": sel.mig.gi,
        "ci": sel.mig.ci,
        "profile": sel.mig.profile,
        "gi_cap": {"path": gi.path, "major": gi.major, "minor": gi.minor},
        "ci_cap": {"path": ci.path, "major": ci.major, "minor": ci.minor},
    }


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
    for m in out["mig"]:
        parent = m["parent"]
        print(
            f"mig {m['name']}: {m['uuid']} on gpu {parent['index']} ({parent['uuid']}), "
            f"gi {m['gi']} ci {m['ci']}{' ' + m['profile'] if m['profile'] else ''}, "
            f"caps {m['gi_cap']['path']} {m['ci_cap']['path']}"
        )
    if req["mig_config"] or req["mig_monitor"]:
        which = [w for w in ("config", "monitor") if req[f"mig_{w}"]]
        print(f"MIG {'/'.join(which)}: every MIG capability of the selected MIG-enabled GPUs")
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
