"""CDI (Container Device Interface) spec generation: `gpunode cdi generate`.

The spec has kind ``nvidia.com/gpu`` so images and operators' habits keep working
(``podman run --device nvidia.com/gpu=0``, Docker >= 25 with ``features.cdi``). Devices are
named by index, by UUID and ``all``. Common edits carry the control device nodes, the
driver's libraries, binaries, firmware and IPC sockets, and one gpunode-hook invocation
(symlinks, ld cache, and a ``/proc/driver/nvidia`` filtered down to the GPUs whose device
nodes the container was given). ``cdiVersion`` is the smallest version the content needs.

MIG, as ``nvidia-ctk cdi generate`` (its default ``[index, uuid]`` naming): a MIG device is
named ``<gpu>:<n>`` and by its MIG UUID; its deviceNodes are the parent's /dev/nvidia<minor>
and its GI and CI cap nodes. A MIG-enabled GPU is not listed as a full GPU, and ``all`` is
the full GPUs with MIG off plus every MIG device. The MIG devices' access files under
/proc/driver/nvidia/capabilities come from the common hook, as the GPUs' /proc directories
do: it works them out from the cap nodes the engine gave the container (CDI has no way of
its own to mount under /proc, which runc refuses).
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..nvidia.capabilities import ALL_CAPABILITIES
from ..nvidia.devices import under
from ..util.files import write_atomic
from .discovery import Discovery
from .edits import EditError, Edits, build, gpu_device, mig_devices
from .selection import SelectedMig

KIND = "nvidia.com/gpu"
SPEC_NAME = "nvidia.yaml"  # what `--install` writes into the first of cdi-spec-dirs


def container_edits(edits: Edits) -> dict[str, Any]:
    """An Edits value as CDI containerEdits (the keys it needs, in CDI's order)."""
    out: dict[str, Any] = {}
    if edits.env:
        out["env"] = list(edits.env)
    if edits.devices:
        out["deviceNodes"] = [
            {"path": d.path} | ({"hostPath": d.host_path} if d.host_path != d.path else {})
            for d in edits.devices
        ]
    if edits.mounts:
        out["mounts"] = [
            {"hostPath": m.source, "containerPath": m.destination, "options": list(m.options)}
            for m in edits.mounts
        ]
    if edits.hooks:
        out["hooks"] = [
            {
                "hookName": "createContainer",
                "path": h.path,
                "args": list(h.args),
                "env": list(h.env),
            }
            for h in edits.hooks
        ]
    return out


def generate(disc: Discovery, *, hook_path: str, dev_root: str = "/") -> dict[str, Any]:
    """The spec: one device per GPU with a device node (by index and by UUID) and "all";
    the common edits are what a container with every capability gets, GPUs left to the
    device nodes the engine creates."""
    devices = []
    gpu_nodes = []
    proc_nvidia = under(disc.files.root, "/proc/driver/nvidia")
    for gpu in disc.node.gpus:
        try:
            node = gpu_device(gpu, dev_root)
        except EditError:
            continue  # no device node: the GPU cannot be handed out, so it is not listed
        if not gpu.mig_enabled:
            gpu_nodes.append(node)
            for name in (str(gpu.index), gpu.uuid):
                devices.append({"name": name, "containerEdits": container_edits(Edits([node]))})
            continue
        for m in gpu.mig:
            sel = SelectedMig(gpu, m)
            try:
                caps, _ = mig_devices([sel], proc_nvidia, dev_root)
            except EditError:
                continue  # a capability without access file or node: not listed
            nodes = [node, *caps]
            gpu_nodes += [n for n in nodes if n not in gpu_nodes]
            for name in (sel.name, m.uuid):
                devices.append({"name": name, "containerEdits": container_edits(Edits(nodes))})
    if gpu_nodes:
        devices.append({"name": "all", "containerEdits": container_edits(Edits(gpu_nodes))})
    common = build(disc, set(ALL_CAPABILITIES), None, hook_path=hook_path, dev_root=dev_root)
    # Neutralise a legacy NVIDIA hook that might also be configured for this engine.
    common.env.append("NVIDIA_VISIBLE_DEVICES=void")
    spec = {
        "cdiVersion": "0.3.0",
        "kind": KIND,
        "devices": devices,
        "containerEdits": container_edits(common),
    }
    spec["cdiVersion"] = minimum_version(spec)
    return spec


def minimum_version(spec: dict[str, Any]) -> str:
    """The smallest CDI version whose schema covers what the spec uses."""
    nodes = [n for d in spec["devices"] for n in d["containerEdits"].get("deviceNodes", [])]
    nodes += spec["containerEdits"].get("deviceNodes", [])
    if any("annotations" in d for d in spec["devices"]) or "annotations" in spec:
        return "0.6.0"
    if any("hostPath" in n for n in nodes):
        return "0.5.0"  # deviceNodes[].hostPath arrived in CDI 0.5.0
    if any(d["name"][:1].isdigit() for d in spec["devices"]):
        return "0.5.0"  # so did device names starting with a digit ("0", "1", ...)
    return "0.3.0"


def dump(spec: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(spec, indent=2) + "\n"
    import yaml

    return yaml.safe_dump(spec, sort_keys=False, default_flow_style=False)


def install_path(cdi_spec_dirs: list[str]) -> str:
    """Where the spec is installed: nvidia.yaml in the first of runtime.toml's cdi-spec-dirs."""
    return os.path.join(cdi_spec_dirs[0], SPEC_NAME)


def render(spec: dict[str, Any], path: str) -> str:
    """The spec as it is written to ``path`` (JSON for a ``.json`` file, else YAML)."""
    return dump(spec, "json" if path.endswith(".json") else "yaml")


def write(spec: dict[str, Any], path: str) -> bool:
    """Write atomically; True when the content changed."""
    return write_atomic(path, render(spec, path).encode(), 0o644)
