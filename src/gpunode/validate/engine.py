"""engine.active, engine.daemon_json, engine.runtime_registered: the engine answers, its
configuration is valid, and gpunode's runtime is registered with the running engine (and is
its default when that is expected).

daemon.json is read with the rules `gpunode runtime configure docker` writes it by
(gpunode.engines); the running engine's view comes from ``docker info``, so a
daemon.json changed without a restart shows as not registered. With ``--engine none`` every
engine and container check is skipped; an engine that is not installed fails engine.active
with one line and the checks that need it are skipped.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from ..engines.common import RUNTIME_PATH, EngineConfigError, decode, read
from ..engines.docker import DAEMON_JSON, load_daemon_json
from ..util import enginecheck, tool
from ..util.tool import first_line
from .expect import Expectations
from .model import FAIL, PASS, SKIP, Check, titled

TITLES = {
    enginecheck.ID: enginecheck.TITLE,  # its verdict: util/enginecheck.py (report uses it too)
    "engine.daemon_json": "daemon.json valid",
    "engine.runtime_registered": "gpunode runtime registered",
}
INFO_TIMEOUT = 30


def engine_info(engine: str) -> tuple[dict[str, Any] | None, str]:
    """(``<engine> info`` as JSON, "") or (None, why it is not available: one line)."""
    exe = shutil.which(engine)
    if exe is None:
        return None, (
            f"{engine}: command not found: no {engine} engine on this node "
            "(--engine none skips the engine and container checks)"
        )
    proc = tool.run([exe, "info", "--format", "{{json .}}"], timeout=INFO_TIMEOUT)
    if proc.timed_out:
        return None, f"`{engine} info` did not answer in {INFO_TIMEOUT}s"
    if not proc.ok:
        why = proc.failed or first_line(proc.stderr) or f"exit status {proc.returncode}"
        return None, f"`{engine} info` failed: {why}"
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return None, f"`{engine} info` printed no JSON: {first_line(proc.stdout)[:120]}"
    # Docker's CLI exits 0 when the daemon does not answer and says so in ServerErrors.
    errors = data.get("ServerErrors") if isinstance(data, dict) else None
    if errors:
        return None, f"`{engine} info` failed: {first_line(str(errors[0]))}"
    return data, ""


def evaluate(
    expect: Expectations, *, daemon_json: str = DAEMON_JSON, info: tuple | None = None
) -> tuple[dict[str, Any] | None, list[Check]]:
    """(the engine's info or None, the engine checks). ``info``: a precomputed
    engine_info() result (tests)."""
    checks: list[Check] = []
    add = titled(checks, TITLES)

    if expect.engine == "none":
        for cid in TITLES:
            add(cid, SKIP, "--engine none: engine checks not requested")
        return None, checks
    if expect.engine == "cri":
        from . import cri

        client = cri.engine_checks(expect, add)
        return ({"cri": client} if client is not None else None), checks
    data, why = info if info is not None else engine_info(expect.engine)
    if data is None:
        add(enginecheck.ID, *enginecheck.verdict(expect.engine, None, why))
    else:
        version = data.get("ServerVersion") or (data.get("version") or {}).get("Version", "?")
        add(enginecheck.ID, *enginecheck.verdict(expect.engine, version))
    if expect.engine == "podman":
        add("engine.daemon_json", SKIP, "podman has no daemon.json")
        if os.access(RUNTIME_PATH, os.X_OK):
            add("engine.runtime_registered", PASS, f"{RUNTIME_PATH} (podman runs it by path)")
        else:
            add("engine.runtime_registered", FAIL, f"{RUNTIME_PATH} is missing or not executable")
        return data, checks

    try:
        raw, _ = read(daemon_json)
        config = load_daemon_json(daemon_json, decode(daemon_json, raw))
    except EngineConfigError as exc:
        add("engine.daemon_json", FAIL, str(exc).replace("; left unchanged", ""))
        add("engine.runtime_registered", SKIP, f"{daemon_json} cannot be read")
        return data, checks
    if raw is None:
        add("engine.daemon_json", PASS, f"{daemon_json} absent (Docker's defaults)")
    else:
        add("engine.daemon_json", PASS, f"{daemon_json}: valid JSON, {len(config)} key(s)")

    name = expect.runtime_name
    entry = (
        (config.get("runtimes") or {}).get(name)
        if isinstance(config.get("runtimes"), dict)
        else None
    )
    problems = []
    if not isinstance(entry, dict) or not entry.get("path"):
        problems.append(
            f"{daemon_json} has no runtimes.{name}.path (gpunode runtime configure docker)"
        )
        path = None
    else:
        path = entry["path"]
        resolved = shutil.which(path) if not os.path.isabs(path) else path
        if not resolved or not os.access(resolved, os.X_OK):
            problems.append(f"runtimes.{name}.path {path} is missing or not executable")
    if data is not None and not problems and name not in (data.get("Runtimes") or {}):
        problems.append(f"the running dockerd does not know runtime {name!r}: restart docker")
    default = data.get("DefaultRuntime") if data is not None else config.get("default-runtime")
    if expect.runtime_default and default != name:
        problems.append(f"default runtime is {default or 'runc'!r}, expected {name!r}")
    if problems:
        add("engine.runtime_registered", FAIL, "; ".join(problems))
    elif data is None:
        add("engine.runtime_registered", SKIP, f"{daemon_json} registers {name} ({path}); "
            "the engine does not answer to confirm it")  # fmt: skip
    else:
        role = ", the default runtime" if default == name else ""
        add("engine.runtime_registered", PASS, f"{name} ({path}){role}")
    return data, checks
