"""Ansible callback plugin ``gpunode_changes``: what a run changed, per play and host, as JSON.

Enabled by `gpunode sim playbook` for its run only (ANSIBLE_CALLBACK_PLUGINS names this
directory, ANSIBLE_CALLBACKS_ENABLED adds gpunode_changes); the file it writes is named by
GPUNODE_CHANGES_LOG. The record's shape and its reader are gpunode.sim.rerun's. This
directory holds this plugin only: ansible loads every plugin of a callback directory.
"""

from __future__ import annotations

import os

from ansible import context
from ansible.plugins.callback import CallbackBase

from gpunode.sim import rerun

DOCUMENTATION = """
name: gpunode_changes
type: aggregate
short_description: record which tasks changed, per play and host (gpunode sim playbook)
description:
  - Writes, when the run ends, a JSON document (gpunode.sim.changes/v1) to the file named by
    GPUNODE_CHANGES_LOG - each play's source file, every host a task ran on and the tasks
    that reported changed there, check mode, and the options that change what a run applies.
requirements:
  - GPUNODE_CHANGES_LOG in the environment (nothing is written without it)
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "gpunode_changes"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._rec: rerun.Recorder | None = None

    def v2_playbook_on_start(self, playbook) -> None:
        args = context.CLIARGS
        self._rec = rerun.Recorder(bool(args.get("check")), rerun.options_from_cli(args))

    def v2_playbook_on_play_start(self, play) -> None:
        path = play.get_path() or ""  # "FILE:LINE" of the play's definition
        self._rec.play(path.rsplit(":", 1)[0] if ":" in path else path)

    def _record(self, result) -> None:
        self._rec.result(
            result.host.get_name(), result.task.get_name().strip(), result.is_changed()
        )

    def v2_runner_on_ok(self, result) -> None:
        self._record(result)

    def v2_runner_on_failed(self, result, ignore_errors: bool = False) -> None:
        self._record(result)  # an ignored failure may have changed something too

    def v2_runner_on_skipped(self, result) -> None:
        self._record(result)

    def v2_playbook_on_stats(self, stats) -> None:
        path = os.environ.get(rerun.LOG_ENV)
        if path and self._rec is not None:
            self._rec.dump(path)
