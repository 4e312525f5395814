"""`gpunode watch cordon`'s decisions, pure: the taint parsed, the node's name checked, and
the kubectl commands a verdict calls for (gpunode.watch.kubectl runs them).

The verdict is node-problem-detector's (``state.npd_verdict``: 0 OK, 1 a problem, 2
unknown). A problem: the node cordoned and tainted (``--overwrite``: a rerun changes
nothing). OK: nothing, unless ``uncordon`` is asked and the node carries gpunode's taint
key (it cordoned the node itself): then the taint removed and the node uncordoned. A node
an operator cordoned is never uncordoned by this. Unknown: nothing.

Every command is an argv list (never a shell line); nothing the state file says goes into
one: only the operator's kubectl, kubeconfig, node name and taint.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from .state import NPD_OK, NPD_PROBLEM

EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
DEFAULT_TAINT = "gpunode.io/gpu-unhealthy=true:NoSchedule"
# Kubernetes' label syntax (a taint's key and value are label-like): a name segment, an
# optional DNS-subdomain prefix, a value that may be empty
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_SUBDOMAIN = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = re.compile(rf"(?:(?P<prefix>{_SUBDOMAIN})/)?{_NAME}")
_VALUE = re.compile(rf"(?:{_NAME})?")
_NODE = re.compile(_SUBDOMAIN)
TAINT_FORM = f"KEY=VALUE:EFFECT with EFFECT one of {', '.join(EFFECTS)}"


class Taint(NamedTuple):
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}"


def _show(text: str) -> str:
    return repr(text[:60] + ("..." if len(text) > 60 else ""))


def parse_taint(text: str) -> Taint:
    """``KEY=VALUE:EFFECT`` as kubectl takes it; ValueError (one line naming the value and
    the accepted form) otherwise."""
    key, eq, rest = text.partition("=")
    value, colon, effect = rest.rpartition(":")
    if not eq or not colon:
        raise ValueError(f"{_show(text)} is not {TAINT_FORM}")
    if effect not in EFFECTS:
        raise ValueError(
            f"{_show(text)}: effect {_show(effect)} is not one of {', '.join(EFFECTS)}"
        )
    m = _KEY.fullmatch(key)
    if m is None or len(key) > 317 or len(m.group("prefix") or "") > 253:
        raise ValueError(
            f"{_show(text)}: key {_show(key)} is not a Kubernetes label key ([PREFIX/]NAME, "
            "NAME up to 63 letters, digits, '-', '_', '.')"
        )
    if _VALUE.fullmatch(value) is None:
        raise ValueError(
            f"{_show(text)}: value {_show(value)} is not a Kubernetes label value (up to 63 "
            "letters, digits, '-', '_', '.')"
        )
    return Taint(key, value, effect)


def node_name(text: str) -> str:
    """A Kubernetes node's name (a DNS subdomain: lower-case letters, digits, '-', '.', at
    most 253); ValueError otherwise (a name starting with '-' would be an option to kubectl)."""
    if len(text) > 253 or _NODE.fullmatch(text) is None:
        raise ValueError(
            f"{_show(text)} is not a Kubernetes node name (lower-case letters, digits, '-' "
            "and '.', at most 253)"
        )
    return text


def get_node(kubectl: str, kubeconfig: str, node: str) -> list[str]:
    """The read of the node whose taints ``carries`` judges."""
    return [kubectl, "--kubeconfig", kubeconfig, "get", "node", node, "-o", "json"]


def carries(node_doc: object, key: str) -> bool:
    """Whether the node (``kubectl get node -o json``'s document) carries a taint of ``key``:
    one gpunode set."""
    spec = node_doc.get("spec") if isinstance(node_doc, dict) else None
    taints = spec.get("taints") if isinstance(spec, dict) else None
    return isinstance(taints, list) and any(
        isinstance(t, dict) and t.get("key") == key for t in taints
    )


def commands(verdict: int, kubectl: str, kubeconfig: str, node: str, taint: Taint, *,
             uncordon: bool = False, tainted: bool = False) -> list[list[str]]:  # fmt: skip
    """The commands the verdict calls for, in order (empty: nothing to do). ``tainted``:
    the node carries ``taint``'s key (read only where ``uncordon`` is asked)."""
    kc = [kubectl, "--kubeconfig", kubeconfig]
    if verdict == NPD_PROBLEM:
        return [[*kc, "cordon", node], [*kc, "taint", "nodes", node, str(taint), "--overwrite"]]
    if verdict == NPD_OK and uncordon and tainted:
        return [[*kc, "taint", "nodes", node, f"{taint.key}-"], [*kc, "uncordon", node]]
    return []


def summary(verdict: int, line: str, node: str, taint: Taint, *, uncordon: bool = False,
            tainted: bool = False, dry_run: bool = False) -> str:  # fmt: skip
    """One line: what the verdict did to the node, or with ``dry_run`` would do (``line``:
    the check's own line)."""
    if verdict == NPD_PROBLEM:
        did = "would cordon and taint" if dry_run else "cordoned and tainted"
        return f"{node}: {did} {taint} ({line})"
    if verdict == NPD_OK and uncordon and tainted:
        did = "would remove" if dry_run else "removed"
        then = "uncordon" if dry_run else "uncordoned"
        return f"{node}: healthy ({line}); {did} the {taint.key} taint and {then}"
    if verdict == NPD_OK and uncordon:
        return f"{node}: healthy ({line}); no {taint.key} taint, so left as it is"
    if verdict == NPD_OK:
        return (
            f"{node}: healthy ({line}); nothing done (never uncordoned without "
            "--uncordon-when-healthy)"
        )
    return f"{node}: verdict unknown ({line}); nothing done"
