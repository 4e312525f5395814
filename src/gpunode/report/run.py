"""`gpunode report --run`'s validation run: playbooks/validate.yml through ansible-runner
into a results directory (results only, no report), with the project's ansible.cfg, and a
line per node as each node's validation ends."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable

from ..util.command import UsageError

# the collection's direct_command action, as playbooks/validate.yml names it
ACTION = "gpunode.gpunode.direct_command"


def progress_line(event: dict) -> str | None:
    """The line printed for one ansible-runner event: the result of a node's validation."""
    kind = event.get("event")
    data = event.get("event_data") or {}
    if data.get("task_action") != ACTION:
        return None
    if "gpunode validate" not in str(data.get("task", "")):
        return None
    host = data.get("host", "?")
    res = data.get("res") or {}
    if kind == "runner_on_unreachable":
        return f"{host}: unreachable: {str(res.get('msg', '')).strip()}"
    if kind == "runner_on_skipped":  # the playbook does not run gpunode on GPU-less nodes
        from .results import NO_GPU

        return f"{host}: {NO_GPU}"
    if kind in ("runner_on_ok", "runner_on_failed"):
        import json

        try:
            doc = json.loads(res.get("stdout") or "")
            counts = ", ".join(f"{v} {k}" for k, v in (doc.get("summary") or {}).items())
            verdict = "FAILED" if doc.get("exit_code") else "ok"
            return f"{host}: {verdict} ({counts}) in {doc.get('duration_s', '?')} s"
        except (ValueError, AttributeError):
            detail = (res.get("stderr") or res.get("msg") or "").strip().splitlines()
            return f"{host}: could not run: {detail[-1] if detail else 'no output'}"
    return None


def validation(
    inventory: str,
    project: str,
    playbook: str,
    results: str,
    limit: str | None,
    on_line: Callable[[str], None],
) -> str | None:
    """Run the validation playbook into ``results``, calling ``on_line`` with each node's
    progress line; None when it ran, else why it failed (one line)."""
    try:
        import ansible_runner
    except ImportError:
        raise UsageError(
            "report: --run needs ansible-runner (pip install ansible-runner)"
        ) from None

    def on_event(event: dict) -> bool:
        line = progress_line(event)
        if line:
            on_line(line)
        return True

    with tempfile.TemporaryDirectory(prefix="gpunode-runner-") as private:
        r = ansible_runner.run(
            private_data_dir=private,
            playbook=os.path.abspath(playbook),
            inventory=os.path.abspath(inventory),
            limit=limit,
            extravars={"gpunode_validate_results_dir": results, "gpunode_validate_report": False},
            event_handler=on_event,
            quiet=True,
            project_dir=os.path.dirname(os.path.abspath(playbook)),
            # the project's ansible.cfg where it has one (a checkout); the installed collection
            # (--project: its directory) has none and needs none: it finds its own code
            envvars=(
                {"ANSIBLE_CONFIG": os.path.join(project, "ansible.cfg")}
                if os.path.isfile(os.path.join(project, "ansible.cfg"))
                else {}
            ),
        )
        if r.rc != 0:
            tail = [ln for ln in r.stdout.read().splitlines() if ln.strip()][-3:]
            return f"validation run failed (rc {r.rc}): {' / '.join(tail)}"
    return None
