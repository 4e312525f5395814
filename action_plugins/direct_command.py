"""direct_command: run one command on the host through the connection itself, without a
module run (no AnsiballZ payload, no Python started on the host for Ansible).

The roles call the gpunode CLI for their logic and read its --json. With
``ansible.builtin.command`` each call is a module run: the host starts Python and compiles
``ansible.module_utils.basic`` from the payload's zip before the command starts (0.25-0.3 s
of the host's CPU per call, measured; docs/provisioning.md "At fleet size"), and the
controller builds and sends that payload. This action sends only the command line (and its
standard input), as ``raw`` does, and returns what ``command`` returns (rc, stdout, stderr,
their lines, cmd, msg on a non-zero rc), so the tasks' ``register``, ``changed_when`` and
``failed_when`` read it unchanged.

Arguments (library/direct_command.py holds the documentation ansible-doc and ansible-lint
read): argv (the command, a list: each item is quoted, no shell), stdin (text on its
standard input, a newline added as command's stdin_add_newline does), removes (run only when
this path exists, as command's ``removes``). The task's ``environment`` is set for the
command. Check mode is not supported (like command): the roles' read-only calls say
``check_mode: false``.

Standard input is always sent (a newline when the task gives none): over ssh a command
without input data is given a tty (``-tt``), which merges stderr into stdout, and the roles
parse stdout as JSON and show stderr as the error line.
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase

ARGUMENT_SPEC = {
    "argv": {"type": "list", "elements": "str", "required": True},
    "stdin": {"type": "str"},
    # str, not path: a path is expanded (~, $VARS) on the controller, and this one is the
    # host's (the roles pass absolute paths)
    "removes": {"type": "str"},
}


class ActionModule(ActionBase):
    _supports_check_mode = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        _, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        argv = args["argv"]  # a list of str: the argument spec converted it
        if not argv or not argv[0]:
            return {**result, "failed": True, "msg": f"argv must name a command; got {argv!r}"}
        command = " ".join(shlex.quote(a) for a in argv)
        env = self._compute_environment_string()
        if env:
            command = f"{env} {command}"
        removes = args.get("removes")
        if removes:
            skipped = f"skipped, since {removes} does not exist"
            command = (
                # -L too: command's `removes` counts a dangling link as there
                f"if [ -e {shlex.quote(removes)} ] || [ -L {shlex.quote(removes)} ]; then {command}; "
                f"else printf '%s' {shlex.quote(skipped)}; fi"
            )
        stdin = args.get("stdin")
        in_data = to_bytes(
            (stdin if stdin is not None else "") + "\n", errors="surrogate_or_strict"
        )
        run = self._low_level_execute_command(command, in_data=in_data)
        stdout = run.get("stdout", "").rstrip("\r\n")
        stderr = run.get("stderr", "").rstrip("\r\n")
        result.update(
            cmd=argv,
            rc=run.get("rc", 0),
            stdout=stdout,
            stderr=stderr,
            stdout_lines=stdout.splitlines(),
            stderr_lines=stderr.splitlines(),
            changed=True,  # as command: the tasks say when a call changed something
        )
        if removes and stdout == skipped and result["rc"] == 0:
            result["msg"] = f"Did not run command since '{removes}' does not exist"
        elif result["rc"] != 0:
            result.update(failed=True, msg="non-zero return code")
        return result
