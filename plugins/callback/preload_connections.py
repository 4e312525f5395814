# Copyright: gpunode maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Import the connection plugins of a play's hosts once, in the controller, before Ansible
forks its workers.

Ansible runs each task for each host in a worker forked from the controller process. A
connection plugin is imported on first use, so when the controller has not imported it,
every worker imports it again and throws the import away when it exits:
community.docker.docker_api (the simulated nodes' connection) imports requests and urllib3
with it, about 150 ms of CPU per host and task, most of a re-run's controller time. Imported
here, at the start of each play, the workers inherit it. Plugins whose import is cheap
(ssh, local) gain nothing and lose nothing; a name that cannot be resolved or imported here
(templated, misspelled) is left to the worker, which reports it as before.

Enabled in the repository's ansible.cfg (callbacks_enabled =
gpunode.gpunode.preload_connections); benchmarks/bench_site.py measures it.
"""

from __future__ import annotations

DOCUMENTATION = """
    name: preload_connections
    type: aggregate
    short_description: import the hosts' connection plugins once before the workers fork
    description:
      - At the start of each play, imports the connection plugin of each host of the play
        (its ansible_connection, or the play's connection) in the controller process, so
        the forked workers do not import it again for every task.
"""

import contextlib

from ansible.plugins.callback import CallbackBase
from ansible.plugins.loader import connection_loader


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "preload_connections"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self._loaded: set[str] = set()

    def v2_playbook_on_play_start(self, play):
        try:
            names = self._connections(play)
        except Exception:  # a preload must never fail a run
            return
        for name in names - self._loaded:
            self._loaded.add(name)
            # one that fails here is left to the worker, which reports it as usual
            with contextlib.suppress(Exception):
                connection_loader.get(name, class_only=True)

    @staticmethod
    def _connections(play) -> set[str]:
        names = {play.connection} if isinstance(play.connection, str) else set()
        manager = play.get_variable_manager()
        for host in manager._inventory.get_hosts(play.hosts):
            value = manager.get_vars(play=play, host=host, include_hostvars=False).get(
                "ansible_connection"
            )
            if isinstance(value, str):
                names.add(value)
        return {n for n in names if n and "{{" not in n}
