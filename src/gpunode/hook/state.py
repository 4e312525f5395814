"""Which container the hook works on: the OCI state on stdin (bundle → config.json →
root.path) when the runtime did not pass ``--root``, and the container root opened as an
fd."""

from __future__ import annotations

import os

from .errors import HookError

MAX_STATE_BYTES = 1 << 20


def read_state() -> dict:
    raw = b""
    try:
        while len(raw) <= MAX_STATE_BYTES:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            raw += chunk
    except OSError as exc:
        raise HookError(f"cannot read OCI state from stdin: {exc.strerror}") from None
    if len(raw) > MAX_STATE_BYTES:
        raise HookError("OCI state on stdin is too large")
    if not raw.strip():
        raise HookError("no OCI state on stdin (and no --root given)")
    try:
        # without json: `import json` (re, enum) costs ~3 ms of every CDI container start
        from ..util import fastjson

        state = fastjson.loads(raw)
    except ValueError as exc:
        raise HookError(f"invalid OCI state JSON on stdin: {exc}") from None
    except RecursionError:  # within MAX_STATE_BYTES, but nested past the decoder's depth
        raise HookError("invalid OCI state JSON on stdin: nested too deeply") from None
    if not isinstance(state, dict):
        raise HookError("OCI state on stdin is not a JSON object")
    return state


def resolve_rootfs(state: dict) -> str:
    """The container rootfs from the OCI state: ``<bundle>/config.json`` root.path."""
    bundle = state.get("bundle")
    if isinstance(bundle, str) and bundle:
        if not bundle.startswith("/"):
            raise HookError(f"bundle path is not absolute: {bundle!r}")
        try:
            with open(os.path.join(bundle, "config.json"), "rb") as fh:
                from ..util import fastjson

                config = fastjson.loads(fh.read(16 << 20))
        except (OSError, ValueError) as exc:
            raise HookError(f"cannot read {bundle}/config.json: {exc}") from None
        except RecursionError:
            raise HookError(f"cannot read {bundle}/config.json: nested too deeply") from None
        root = config.get("root") if isinstance(config, dict) else None
        path = root.get("path") if isinstance(root, dict) else None
        if isinstance(path, str) and path:
            return path if path.startswith("/") else os.path.join(bundle, path)
        raise HookError(f"{bundle}/config.json has no root.path")
    # Some runtimes put the rootfs in the state as "root" (crun); use it only as a fallback.
    root = state.get("root")
    if isinstance(root, str) and root.startswith("/"):
        return root
    raise HookError("OCI state has no bundle")


def open_root(path: str) -> int:
    if "\0" in path or not path.startswith("/"):
        raise HookError(f"container root must be an absolute path: {path!r}")
    try:
        return os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise HookError(f"cannot open container root {path}: {exc.strerror}") from None
