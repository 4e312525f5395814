#!/usr/bin/python
# Copyright: gpunode maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The documentation of the direct_command action (plugins/action/direct_command.py), for
ansible-doc, ansible-lint and ansible-test. The action runs the command itself; this file
is never sent to a host (the action plugin of the same name takes the task), so it holds
the documentation only."""

from __future__ import annotations

DOCUMENTATION = r"""
module: direct_command
short_description: Run a command on the host without a module run
description:
  - Runs O(argv) through the connection as C(raw) does (no Python started on the host for
    Ansible, no module payload sent) and returns what M(ansible.builtin.command) returns,
    so C(register), C(changed_when) and C(failed_when) read it the same way.
  - Used by gpunode's roles for their calls of the gpunode CLI, each of which would
    otherwise cost the host a module run (docs/provisioning.md, "At fleet size").
  - The task's C(environment) is set for the command. Check mode is not supported.
  - The host's shell prints an end line with the command's exit status after it; output
    that arrives without it was lost on the way (a Docker exec can return an empty output
    under load), and the command is run once more, with a warning, then the task fails
    saying so. The commands must therefore be safe to run twice, as gpunode's are.
options:
  argv:
    description: The command and its arguments; each is quoted, no shell runs them.
    type: list
    elements: str
    required: true
  stdin:
    description: Text for the command's standard input (a newline is added).
    type: str
  removes:
    description:
      - Run the command only when this path exists on the host (an absolute path; not
        expanded, and no glob; a symbolic link counts, even a dangling one, as for
        M(ansible.builtin.command)).
    type: str
author: gpunode maintainers (@gpunode)
"""

EXAMPLES = r"""
- name: Plan the driver
  gpunode.gpunode.direct_command:
    argv: [/usr/local/bin/gpunode, provision, driver-plan, --json]
  register: plan
  changed_when: false
"""

RETURN = r"""
rc:
  description: The command's exit status.
  returned: always
  type: int
stdout:
  description: Its standard output, trailing newlines removed.
  returned: always
  type: str
stderr:
  description: Its standard error, trailing newlines removed.
  returned: always
  type: str
"""
