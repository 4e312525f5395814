"""`gpunode runtime configure docker`: register gpunode's OCI runtime in daemon.json.

Behaves like `nvidia-ctk runtime configure` (container-toolkit.md section 5), with the file
rules of gpunode.engines.common; daemon.json is checked with ``dockerd --validate``
(Docker >= 23) before it is replaced.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Callable

from ..util import tool
from .common import (
    VALIDATE_TIMEOUT,
    ConfigureResult,
    EngineConfigError,
    Registration,
    decode,
    locked,
    prepare,
    read,
    replace_with_backup,
    run_tool,
)

# The dockerd executable used for validation; tests point this at a fake.
DOCKERD = "dockerd"
DOCKERD_VALIDATE_MIN_MAJOR = 23  # `dockerd --validate` appeared in Docker 23.0
DAEMON_JSON = "/etc/docker/daemon.json"


def load_daemon_json(path: str, text: str) -> dict:
    """daemon.json's content as a dict (empty text: {}); anything else is an
    EngineConfigError naming ``path``. The one reading of the file: configure and
    gpunode.validate.engine both use it."""
    if not text.strip():
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise EngineConfigError(
            f"{path}: not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg}); "
            "left unchanged"
        ) from exc
    if not isinstance(config, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
            type(config), "a number"
        )
        raise EngineConfigError(
            f"{path}: not valid JSON for daemon.json (top level is {kind}, not an object); "
            "left unchanged"
        )
    return config


def _merge_docker(path: str, config: dict, reg: Registration) -> dict:
    name, runtime_path = reg.runtime_name, reg.runtime_path
    new = copy.deepcopy(config)
    runtimes = new.setdefault("runtimes", {})
    if not isinstance(runtimes, dict):
        raise EngineConfigError(f"{path}: key 'runtimes' is not an object; left unchanged")
    entry = runtimes.get(name)
    if entry is None:
        runtimes[name] = {"path": runtime_path}
    elif isinstance(entry, dict):
        entry["path"] = runtime_path  # keeps runtimeArgs and any other keys
    else:
        raise EngineConfigError(f"{path}: key 'runtimes.{name}' is not an object; left unchanged")
    if reg.set_default:
        new["default-runtime"] = name
    if reg.cdi:
        features = new.setdefault("features", {})
        if not isinstance(features, dict):
            raise EngineConfigError(f"{path}: key 'features' is not an object; left unchanged")
        features["cdi"] = True
    return new


def _canonical(obj: object) -> str:
    # sort_keys makes key order irrelevant; unlike ==, it tells true from 1.
    return json.dumps(obj, sort_keys=True, ensure_ascii=False)


def _dockerd_major(exe: str) -> int | None:
    proc = tool.run([exe, "--version"], timeout=VALIDATE_TIMEOUT)
    if proc.failed:
        return None
    m = re.search(r"version\s+v?(\d+)\.\d+", proc.stdout + proc.stderr)
    return int(m.group(1)) if proc.returncode == 0 and m else None


def _dockerd_validator(path: str) -> tuple[Callable[[str], None] | None, str | None]:
    """A ``validate(tmp)`` callable when dockerd >= 23 is available, else (None, reason)."""
    exe = shutil.which(DOCKERD)
    if exe is None:
        return None, None
    major = _dockerd_major(exe)
    if major is None or major < DOCKERD_VALIDATE_MIN_MAJOR:
        return None, None

    def validate(tmp: str) -> None:
        proc = run_tool(path, "dockerd --validate", [exe, "--validate", "--config-file", tmp])
        if proc.returncode != 0:
            lines = [ln.strip() for ln in (proc.stderr + "\n" + proc.stdout).splitlines()]
            first = next((ln for ln in lines if ln), f"exit status {proc.returncode}")
            raise EngineConfigError(
                f"{path}: dockerd --validate rejected the new configuration: {first}; "
                "left unchanged"
            )

    return validate, "dockerd --validate: ok"


def configure_docker(
    path: str = DAEMON_JSON, *, dry_run: bool = False, validate: bool = True, **registration
) -> ConfigureResult:
    """Register the runtime (keywords of :class:`Registration`) in daemon.json, keeping
    everything else."""
    reg = Registration(**registration)
    real = prepare(path, reg)
    with locked(real, dry_run):
        return _configure_docker(path, real, reg, dry_run, validate)


def _configure_docker(
    path: str, real: str, reg: Registration, dry_run: bool, validate: bool
) -> ConfigureResult:
    old, old_stat = read(real)
    text = decode(path, old)
    config = load_daemon_json(path, text)
    new = _merge_docker(path, config, reg)
    changed = old is None or _canonical(new) != _canonical(config)
    before = None if old is None else text
    if not changed:
        return ConfigureResult(path, False, None, text, dry_run=dry_run, before=before)
    content = json.dumps(new, indent=4, ensure_ascii=False) + "\n"
    if dry_run:
        return ConfigureResult(path, True, None, content, dry_run=True, before=before)
    validator, validated = _dockerd_validator(path) if validate else (None, None)
    backup = replace_with_backup(real, content, old, old_stat, validator)
    return ConfigureResult(path, True, backup, content, validated, before=before)
