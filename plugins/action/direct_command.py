# Copyright: gpunode maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
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

Arguments (plugins/modules/direct_command.py holds the documentation ansible-doc and ansible-lint
read): argv (the command, a list: each item is quoted, no shell), stdin (text on its
standard input, a newline added as command's stdin_add_newline does), removes (run only when
this path exists, as command's ``removes``). The task's ``environment`` is set for the
command. Check mode is not supported (like command): the roles' read-only calls say
``check_mode: false``.

Standard input is always sent (a newline when the task gives none): over ssh a command
without input data is given a tty (``-tt``), which merges stderr into stdout, and the roles
parse stdout as JSON and show stderr as the error line.

The command's output is known to be whole only when it ends with an end line this action
adds (``END`` and the command's exit status, printed by the host's shell after it): the
simulator's Docker API connection, like ``docker exec`` (moby/moby#27289), now and then
returns an exec's output empty with exit status 0 under load, and a role would then parse
"" as the command's JSON (seen once in a full test run beside other work). The exit status
is the end line's; without one, the output was lost on the way and the command is run
again, once (the roles' gpunode calls converge: a second run does what is left, if
anything), with a warning; lost twice, the task fails in one line saying so.
"""

from __future__ import annotations

import shlex

from ansible.module_utils.common.text.converters import to_bytes
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

END = "gpunode-direct-command-end"
TRIES = 2

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
        args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)[1]
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
        command = f"{command}; printf '\\n%s %d\\n' {END} \"$?\""
        for attempt in range(1, TRIES + 1):
            run = self._low_level_execute_command(command, in_data=in_data)
            ended = split_end(run.get("stdout", ""))
            if ended is not None:
                break
            if attempt < TRIES:
                Display().warning(
                    f"direct_command: the connection returned {argv[0]}'s output without its "
                    "end line (lost on the way); running it again"
                )
        else:
            return {**result, "failed": True, "cmd": argv, "rc": run.get("rc", 0),
                    "msg": f"the connection lost {argv[0]}'s output {TRIES} times (no end "
                           f"line {END!r}; stdout {run.get('stdout', '')[-200:]!r}, stderr "
                           f"{run.get('stderr', '')[-200:]!r})"}  # fmt: skip
        stdout, rc = ended
        stderr = run.get("stderr", "").rstrip("\r\n")
        result.update(
            cmd=argv,
            rc=rc,
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


def split_end(stdout: str):
    """(the command's own stdout, its exit status) from what the connection returned, or
    None when the end line is missing (the output did not all arrive)."""
    text = stdout.rstrip("\r\n")
    body, last = text.rpartition("\n")[::2]
    word, status = last.rstrip("\r").partition(" ")[::2]
    if word != END or not status.lstrip("-").isdigit():
        return None
    return body.rstrip("\r\n"), int(status)
