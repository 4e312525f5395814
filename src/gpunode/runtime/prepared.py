"""Prepared edits: what a GPU create adds to a spec, kept for the next container that
makes the same request on the same node.

A GPU create worked out from scratch parses the request, loads discovery, selects and
checks the GPUs and builds the edits (gpunode.runtime.plan); importing those modules
alone is ~4 ms of every GPU container's start. The result depends only on:

* the request inputs and the image's library layout (gpunode.runtime.specinputs),
* the runtime configuration (every field of it),
* the driver (gpunode.runtime.driverkey) and the inventory cache the GPUs come from
  (its identity: a refresh that finds a GPU gone rewrites it),
* the device nodes, which are stat'ed for every container all the same: an entry whose
  device nodes are not exactly as recorded (gone, another major/minor, mode or owner) is
  not used, so the full path reports the problem as before.
* for a request involving MIG, the MIG layout (it changes without a driver change): the
  entry keeps the (gi, ci) pairs per GPU it was made with (``mig``) and is used only
  while the driver's capability tree shows exactly those (gpunode.nvidia.mig.instances).

So the shim keeps each result under a key made of all of those (``key``), and a create
whose key matches gets the recorded spec edits and hook arguments (``lookup``) and
skips everything else. Requests that fail are never kept: they take the full path,
which gives their error.

The file (PREPARED, /run/gpunode/prepared.json; $GPUNODE_PREPARED_CACHE moves it, ""
turns it off) is a JSON object {"schema", "entries": {key: entry}} holding the
MAX_ENTRIES newest entries. It is trusted only as a regular file (not a symlink) owned
by the runtime's user and writable by no one else, as the parsed-config cache is; it
lives in /run, so a reboot (a new driver, new device nodes) starts it empty. Writes are
atomic; two creates storing at once can lose one of the two entries, which only costs
that request one more full create, so there is no lock to wait on.
"""

from __future__ import annotations

import os

from ..nvidia.devices import stat_device
from ..util import fastjson
from ..util.record import fields
from . import driverkey, specinputs

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any

    from .config import RuntimeConfig

SCHEMA = 2  # 2: spec edits carry "allow", entries "mig"
PREPARED = "/run/gpunode/prepared.json"
MAX_ENTRIES = 32
_MAX_BYTES = 4 << 20


def cache_path() -> str:
    return os.environ.get("GPUNODE_PREPARED_CACHE", PREPARED)


def key(
    spec: dict[str, Any],
    cfg: RuntimeConfig,
    rootfs: str,
    inputs: dict[str, Any] | None = None,
) -> str | None:
    """The key of what `spec` gets on this node now (see the module docstring); None for
    a spec whose inputs JSON cannot write (it then always takes the full path).
    ``inputs``: the spec's request inputs when already taken (specinputs.inputs; the shim
    takes them before it removes NVIDIA's hook, itself an input)."""
    try:
        return fastjson.dumps(
            [
                SCHEMA,
                specinputs.inputs(spec, cfg) if inputs is None else inputs,
                specinputs.container_libdir(rootfs),
                [getattr(cfg, name) for name in fields(cfg)],
                driverkey.cache_key(cfg.driver_root),
                driverkey.ident(cfg.cache_file),
            ]
        )
    except (TypeError, ValueError, RecursionError):
        return None


def entry(edits: dict[str, Any], hook_argv: list[str], summary: str, mig_watch: tuple = ()) -> dict:
    """What is kept for a create: its spec edits (gpunode.runtime.oci.spec_edits form,
    without hooks), the arguments of the work the shim does itself (the hook's), the log
    summary, the device nodes as stat'ed now and the MIG layout it depends on
    (gpunode.runtime.plan.Plan.mig_watch)."""
    checks = [
        [d["path"], d["major"], d["minor"], d["fileMode"], d["uid"], d["gid"]]
        for d in edits["devices"]
    ]
    out = {"edits": edits, "hook_argv": hook_argv, "summary": summary, "devices": checks}
    if mig_watch:
        out["mig"] = [[minor, [list(p) for p in pairs]] for minor, pairs in mig_watch]
    return out


def _mig_layout_shown(watch: Any, driver_root: str) -> bool:
    from ..nvidia import mig  # only for an entry of a MIG request

    return mig.layout_shown(driver_root, watch)


def _devices_unchanged(checks: Any, dev_root: str) -> bool:
    """Whether each recorded device node still stats as recorded (a character device with
    that major/minor, mode and owner), as gpunode.nvidia.devices.stat_device sees it."""
    for path, *recorded in checks:
        dev = stat_device(path, dev_root)
        if dev is None or [dev.major, dev.minor, dev.mode, dev.uid, dev.gid] != recorded:
            return False
    return True


def _read(path: str) -> dict[str, Any]:
    """The entries of the file at `path`; {} when missing, untrusted (util.files.read_owned)
    or malformed."""
    from ..util.files import read_owned

    raw = read_owned(path, _MAX_BYTES)
    if raw is None:
        return {}
    try:
        data = fastjson.loads(raw)
    except (ValueError, RecursionError):
        return {}
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return {}
    entries = data.get("entries")
    return entries if isinstance(entries, dict) else {}


def lookup(k: str | None, dev_root: str, driver_root: str = "/") -> dict[str, Any] | None:
    """The entry kept under key `k`, if its device nodes (under `dev_root`) are as
    recorded and, for a MIG request, the MIG layout (under `driver_root`) too; else None."""
    path = cache_path()
    if not path or k is None:
        return None
    found = _read(path).get(k)
    try:
        if (
            isinstance(found, dict)
            and isinstance(found["hook_argv"], list)
            and isinstance(found["summary"], str)
            and all(isinstance(found["edits"][f], list) for f in ("devices", "mounts", "env"))
            and _devices_unchanged(found["devices"], dev_root)
            and ("mig" not in found or _mig_layout_shown(found["mig"], driver_root))
        ):
            return found
    except (KeyError, TypeError, ValueError):  # another shape: not ours to use
        pass
    return None


def store(k: str | None, value: dict[str, Any]) -> None:
    """Keep `value` under `k` (best effort: a read-only /run or another user only makes
    the next create of this request do the full work again)."""
    path = cache_path()
    if not path or k is None:
        return
    entries = _read(path)
    entries.pop(k, None)
    entries[k] = value  # the newest last: the oldest are dropped first
    while len(entries) > MAX_ENTRIES:
        del entries[next(iter(entries))]
    from ..util.files import private_dir, write_atomic

    if not private_dir(os.path.dirname(path) or "."):
        return
    try:
        body = fastjson.dumps({"schema": SCHEMA, "entries": entries}).encode()
        write_atomic(path, body, 0o644, skip_if_same=False, durable=False)
    except (OSError, TypeError, ValueError):
        pass
