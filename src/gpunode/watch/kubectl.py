"""`gpunode watch cordon`'s process part: the kubeconfig and kubectl checked on disk, the
check's verdict read (``service.check``), the node read where the uncordon needs its
taints, and the commands gpunode.watch.cordon decided run (gpunode.util.tool: argv lists,
no shell), in order, stopping at the first that fails.

``act`` returns an ``Outcome``; the CLI prints it. Bad input is a UsageError (one line,
exit 2) before anything runs, whatever the verdict, so a timer set up wrong says so at
once rather than when a GPU fails.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
from typing import NamedTuple

from ..util import tool
from ..util.command import EXIT_FAIL, EXIT_OK, UsageError
from . import cordon, service, state

TIMEOUT_S = 60.0
NODE_JSON_MAX = 4 * 1024 * 1024


class Outcome(NamedTuple):
    code: int  # the exit code
    commands: list[str]  # what ran, or would run with dry_run, one shell-quoted line each
    line: str  # what was done (or, with dry_run, what would be), one line
    error: str | None = None  # kubectl's failure, one line (code 1)


def kubectl_path(text: str) -> str:
    """The kubectl to run: a path to an executable file, or a name found on PATH."""
    found = (text if os.path.isfile(text) and os.access(text, os.X_OK) else None) if "/" in text \
        else shutil.which(text)  # fmt: skip
    if found is None:
        raise UsageError(
            f"--kubectl {text[:200]}: no executable kubectl there (give kubectl's path, or "
            "put kubectl on PATH)"
        )
    return found


def kubeconfig_path(text: str) -> str:
    if not os.path.isfile(text):
        raise UsageError(
            f"--kubeconfig {text[:200]}: no such file (give the kubeconfig of the node's "
            "cluster, a file)"
        )
    return text


def _failed(argv: list[str], ran: tool.Ran) -> str:
    last = ran.failed or tool.last_line(ran.stderr) or tool.last_line(ran.stdout) or "no output"
    what = f"kubectl {shlex.join(argv[3:])} failed (exit {ran.returncode})"
    return f"{what}: {tool.one_line(last)[:300]}"


def act(state_dir: str, max_age: float | None, kubeconfig: str, node: str,
        taint: cordon.Taint, kubectl: str = "kubectl", *, dry_run: bool = False,
        uncordon: bool = False, now: float | None = None) -> Outcome:  # fmt: skip
    kubectl = kubectl_path(kubectl)
    kubeconfig = kubeconfig_path(kubeconfig)
    verdict, line = service.check(state_dir, max_age, now)
    line = tool.one_line(line)
    tainted = False
    if verdict == state.NPD_OK and uncordon:  # the node read (a read, even dry)
        argv = cordon.get_node(kubectl, kubeconfig, node)
        ran = tool.run(argv, timeout=TIMEOUT_S)
        if not ran.ok:
            return Outcome(EXIT_FAIL, [], "", _failed(argv, ran))
        try:
            doc = json.loads(ran.stdout[:NODE_JSON_MAX])
        except ValueError:
            return Outcome(EXIT_FAIL, [], "", f"get node {node}: kubectl printed no JSON")
        tainted = cordon.carries(doc, taint.key)
    todo = cordon.commands(verdict, kubectl, kubeconfig, node, taint, uncordon=uncordon,
                           tainted=tainted)  # fmt: skip
    said = cordon.summary(verdict, line, node, taint, uncordon=uncordon, tainted=tainted,
                          dry_run=dry_run)  # fmt: skip
    if dry_run:
        return Outcome(EXIT_OK, [shlex.join(a) for a in todo], f"dry run: {said}")
    done = []
    for argv in todo:
        ran = tool.run(argv, timeout=TIMEOUT_S)
        if not ran.ok:
            return Outcome(EXIT_FAIL, done, "", _failed(argv, ran))
        done.append(shlex.join(argv))
    return Outcome(EXIT_OK, done, said)
