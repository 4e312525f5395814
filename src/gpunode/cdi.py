"""CDI (Container Device Interface) spec generation: `gpunode cdi generate`.

The spec has kind ``nvidia.com/gpu`` so images and operators' habits keep working
(``podman run --device nvidia.com/gpu=0``, Docker >= 25 with ``features.cdi``). Devices are
named by index, by UUID and ``all``. Common edits carry the control device nodes, the
driver's libraries, binaries, firmware and IPC sockets, and one gpunode-hook invocation
(symlinks, ld cache, and a ``/proc/driver/nvidia`` filtered down to the GPUs whose device
nodes the container was given). ``cdiVersion`` is the smallest version the content needs.
"""

from __future__ import annotations

import json
from typing import Any

from .discover import Discovery
from .edits import HOOK_ENV, control_devices, file_mounts, gpu_device, hook_args
from .nvidia.capabilities import ALL_CAPABILITIES
from .util.files import write_atomic

KIND = "nvidia.com/gpu"
ALL_CAPS = set(ALL_CAPABILITIES)


def _node(dev) -> dict[str, Any]:
    entry: dict[str, Any] = {"path": dev.path}
    if dev.host_path != dev.path:
        entry["hostPath"] = dev.host_path
    return entry


def generate(
    disc: Discovery,
    *,
    hook_path: str,
    dev_root: str = "/",
    libdir: str = "/usr/lib/x86_64-linux-gnu",
    ldconfig: str = "",
) -> dict[str, Any]:
    devices = []
    gpu_nodes = []
    for gpu in disc.node.gpus:
        try:
            node = _node(gpu_device(gpu, dev_root))
        except ValueError:
            continue  # no device node: the GPU cannot be handed out, so it is not listed
        gpu_nodes.append(node)
        for name in (str(gpu.index), gpu.uuid):
            devices.append({"name": name, "containerEdits": {"deviceNodes": [node]}})
    if gpu_nodes:
        devices.append({"name": "all", "containerEdits": {"deviceNodes": gpu_nodes}})
    controls = [_node(d) for d in control_devices({"compute", "display"}, dev_root)]
    mounts = [
        {"hostPath": m.source, "containerPath": m.destination, "options": list(m.options)}
        for m in file_mounts(disc, ALL_CAPS - {"compat32"}, libdir)
    ]
    args = [*hook_args(disc, ALL_CAPS, libdir, None, ldconfig), "--proc-driver"]
    edits: dict[str, Any] = {
        # Neutralise a legacy NVIDIA hook that might also be configured for this engine.
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": controls,
        "mounts": mounts,
        "hooks": [
            {
                "hookName": "createContainer",
                "path": hook_path,
                "args": ["gpunode-hook", "configure", *args],
                "env": list(HOOK_ENV),
            }
        ],
    }
    spec = {"cdiVersion": "0.3.0", "kind": KIND, "devices": devices, "containerEdits": edits}
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


def write(spec: dict[str, Any], path: str) -> bool:
    """Write atomically; True when the content changed."""
    fmt = "json" if path.endswith(".json") else "yaml"
    return write_atomic(path, dump(spec, fmt).encode(), 0o644)
