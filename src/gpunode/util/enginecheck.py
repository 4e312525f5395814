"""engine.active: whether a node's container engine answers, judged by one rule wherever it
is judged. `gpunode validate` asks the engine itself (``docker info``) on a node with GPU; a
node without GPU has no gpunode (provisioning gives it the engine only), so the validation
playbook asks ``docker version`` there and hands the answer, as it came, to `gpunode report`,
which judges it here (gpunode.report.results). In util because both use it and report uses
nothing else (docs/architecture.md)."""

from __future__ import annotations

from typing import Any

ID = "engine.active"
TITLE = "Container engine answers"


def verdict(engine: str, version: str | None, why: str = "") -> tuple[str, str]:
    """(status, detail): the engine answered with its version, or it did not, and why."""
    if version is not None:
        return "pass", f"{engine} {version} answers"
    return "fail", why


def from_command(engine: str, run: dict[str, Any]) -> dict[str, Any]:
    """The check from the playbook's registered ``ENGINE version --format ...`` run: rc,
    stdout (the version), stderr, and msg when the command could not be started."""
    if run.get("rc") == 0:
        status, detail = verdict(engine, str(run.get("stdout") or "").strip())
    else:
        why = str(run.get("stderr") or run.get("msg") or "no output").strip().split("\n")[0]
        status, detail = verdict(engine, None, f"{engine}: {why} (rc {run.get('rc')})")
    return {"id": ID, "title": TITLE, "status": status, "detail": detail}
