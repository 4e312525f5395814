"""Applying edits to an OCI runtime spec (config.json)."""

from __future__ import annotations

import os

from ..util import fastjson, files
from .specinputs import is_nvidia_hook

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any

    from .edits import Edits


def remove_nvidia_hooks(spec: dict[str, Any]) -> int:
    """Remove the prestart hooks NVIDIA's toolkit or Docker's --gpus put in a spec
    (specinputs.NVIDIA_HOOK_NAMES): when gpunode is the runtime it does their job itself."""
    hooks = spec.get("hooks") or {}
    prestart = hooks.get("prestart") or []
    kept = [h for h in prestart if not is_nvidia_hook(h)]
    removed = len(prestart) - len(kept)
    if removed:
        if kept:
            hooks["prestart"] = kept
        else:
            hooks.pop("prestart", None)
    return removed


def spec_edits(edits: Edits) -> dict[str, Any]:
    """`edits` in the OCI spec's own form: {"devices", "allow", "mounts", "hooks", "env"}, JSON
    values (what apply_spec_edits adds; gpunode.runtime.prepared keeps them so)."""
    return {
        "devices": [
            {
                "path": d.path,
                "type": "c",
                "major": d.major,
                "minor": d.minor,
                "fileMode": d.mode,
                "uid": d.uid,
                "gid": d.gid,
            }
            for d in edits.devices
        ],
        "allow": [[major, minor] for major, minor in edits.allow],
        "mounts": [
            {
                "destination": m.destination,
                "type": "bind",
                "source": m.source,
                "options": list(m.options),
            }
            for m in edits.mounts
        ],
        "hooks": [
            {"path": h.path, "args": list(h.args), "env": list(h.env), "timeout": h.timeout}
            for h in edits.hooks
        ],
        "env": list(edits.env),
    }


def apply(spec: dict[str, Any], edits: Edits) -> None:
    apply_spec_edits(spec, spec_edits(edits))


def apply_spec_edits(spec: dict[str, Any], edits: dict[str, Any]) -> None:
    """Add `edits` (spec_edits' form) to `spec`: device nodes and their cgroup rules,
    cgroup rules without a node ("allow", absent in older prepared entries), bind mounts
    (a destination the spec mounts already keeps the spec's mount), hooks
    (createContainer) and env (replacing the same names)."""
    linux = spec.setdefault("linux", {})
    devices = linux.get("devices") or []
    have = {d.get("path") for d in devices}
    resources = linux.setdefault("resources", {})
    allow = resources.get("devices") or []
    for d in edits["devices"]:
        if d["path"] not in have:
            devices.append(dict(d))
            have.add(d["path"])
        allow.append(
            {"allow": True, "type": "c", "major": d["major"], "minor": d["minor"], "access": "rwm"}
        )
    for major, minor in edits.get("allow") or ():
        allow.append({"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"})
    linux["devices"] = devices
    resources["devices"] = allow
    mounts = spec.get("mounts") or []
    taken = {m.get("destination") for m in mounts}
    for m in edits["mounts"]:
        if m["destination"] in taken:
            continue  # the operator's own mount wins
        mounts.append(dict(m, options=list(m["options"])))
        taken.add(m["destination"])
    spec["mounts"] = mounts
    if edits["hooks"]:
        hooks = spec.setdefault("hooks", {})
        stage = hooks.get("createContainer") or []
        stage.extend(dict(h) for h in edits["hooks"])
        hooks["createContainer"] = stage
    if edits["env"]:
        process = spec.setdefault("process", {})
        env = process.get("env") or []
        keys = {e.split("=", 1)[0] for e in edits["env"]}
        process["env"] = [e for e in env if e.split("=", 1)[0] not in keys] + list(edits["env"])


def write_atomic(path: str, spec: dict[str, Any]) -> None:
    """Rewrite config.json atomically (temp file + rename), keeping its mode and owner.

    Not fsync'd (~0.5 ms of each GPU container's start on ext4): the low-level runtime
    reads it from the page cache moments later, and a bundle does not survive a crash of
    the machine in any useful way (the engine makes a new one for the next start)."""
    try:
        like = os.stat(path)
    except OSError:
        like = None
    data = fastjson.dumps(spec).encode()
    files.write_atomic(path, data, 0o600, skip_if_same=False, like=like, durable=False)
