# Copyright: gpunode maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The roles' one reading of a gpunode command run with --json (registered by a command
task with ``failed_when: false``): its JSON document when it printed one, else a failed
result whose message is its stderr, so the role's assert shows gpunode's own error line.

    _plan: "{{ _plan_run | gpunode_result(converged=false) }}"

gives the parsed stdout when it starts with ``{``, else
``{"ok": false, "converged": false, "message": STDERR or "no output"}`` (the keyword
arguments are what the role reads besides ok and message, with their values for a run
that failed).
"""

from __future__ import annotations

import json
from typing import Any


def gpunode_result(run: Any, **failed: Any) -> dict:
    run = run if isinstance(run, dict) else {}
    stdout = str(run.get("stdout") or "").strip()
    if stdout.startswith("{"):
        return json.loads(stdout)
    stderr = str(run.get("stderr") or "").strip()
    return {"ok": False, **failed, "message": stderr or "no output"}


class FilterModule:
    def filters(self):
        return {"gpunode_result": gpunode_result}
