"""Result files of `gpunode validate --json` (schema gpunode.validate/v1), read, checked and
merged into one cluster report model.

A result file holds one node's result, or an entry the playbook writes for a node where
gpunode validate did not run: unreachable ({"node": ..., "unreachable": true, "detail": ...}),
validate could not run ({"node": ..., "error": ...}), or a node without NVIDIA GPU that got
the container engine only ({"node": ..., "no_gpu": true, "detail": ..., "engine": the
playbook's `ENGINE version` run as it came, {"name", "rc", "stdout", "stderr", "msg"}},
judged here into engine.active by gpunode.util.enginecheck, the rule `gpunode validate` uses;
or, as older playbooks wrote it, "checks": [that check]): every other check of the report is
a skip there, with that detail as its reason).

A results file (schema gpunode.results/v1, what playbooks/validate.yml writes) holds every
node's: {"schema": "gpunode.results/v1", "results": [entry, ...]}, each entry one of the
documents above. ``-`` names standard input, which holds either kind.

MIG (issue 20): a GPU of a result may list its MIG devices (``mig``: objects with an integer
``index``, the n of ``<gpu>:<n>``, and uuid, gi, ci, profile, memory_mib) and a check may be
about one (``mig``: that n, with ``gpu`` its parent's index); results of a gpunode without
MIG have neither and read as GPUs without MIG devices, checks with ``mig`` null.

Any file that is not such a document is refused with one line naming the file and what is
wrong (in a results file, also the entry: FILE results[i] (node NAME)); nothing is merged
from a file with one bad entry. A JSON object that names no node is said for what it is:
the report's own report.json (gpunode.report/v1, or its shape: nodes and summary), another
schema, or an object with neither, each with what is accepted.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time

from ..util import enginecheck

SCHEMA = "gpunode.validate/v1"
REPORT_SCHEMA = "gpunode.report/v1"
RESULTS_SCHEMA = "gpunode.results/v1"  # one file holding every node's result
STDIN = "-"
STATUSES = ("pass", "warn", "fail", "skip")
# a cell or node showing several checks takes the worst; a skip is allowed (it explains
# itself), so pass outranks it: a node with passes and skips passed
SEVERITY = {"fail": 3, "warn": 2, "pass": 1, "skip": 0}
REACHABLE = "node.reachable"
RAN = "node.validate"  # the backward-compatible "error" entry: validate could not run
NO_GPU = "no NVIDIA GPU: engine only"


ACCEPTED = (f"accepted: a node's `gpunode validate --json` result ({SCHEMA}) or a results "
            f"file ({RESULTS_SCHEMA}, what playbooks/validate.yml writes)")


class ResultError(ValueError):
    """A result file that cannot be used: one line naming the file and the problem."""


def _fail(source: str, what: str) -> ResultError:
    return ResultError(f"{source}: {what}")


def _text(source: str, doc: dict, key: str, label: str, where: str = "") -> str:
    value = doc.get(key)
    if not isinstance(value, str) or not value.strip():
        raise _fail(source, f"{where}{key} is {json.dumps(value)}; expected {label}")
    return value


def check_result(doc: object, source: str) -> dict:
    """One node's result (or unreachable entry), checked; returns it normalised."""
    if not isinstance(doc, dict):
        raise _fail(source, f"expected a JSON object, found {type(doc).__name__}")
    node = _text(source, doc, "node", "the node's name")
    if doc.get("unreachable") is True or isinstance(doc.get("error"), str):
        # a node the playbook could not reach, or where validate could not run at all
        unreachable = doc.get("unreachable") is True
        detail = str(doc.get("detail") or doc.get("error") or "unreachable")
        check, title = (REACHABLE, "Node reachable") if unreachable else (RAN, "Validation ran")
        checks = doc.get("checks") or [
            {"id": check, "title": title, "status": "fail", "detail": detail}
        ]
        out = {"node": node, "unreachable": unreachable, "detail": detail, "gpus": []}
        if not unreachable:
            out["error"] = detail
        out["checks"] = [_check(source, c, i) for i, c in enumerate(_list(source, checks))]
        return out
    if doc.get("no_gpu") is True:
        # gpunode is not installed there (provisioning gives it the engine only): a row of
        # skips with the reason, plus the checks the playbook ran itself
        checks = [_check(source, c, i) for i, c in enumerate(_list(source, doc.get("checks", [])))]
        if "engine" in doc:
            checks.append(_check(source, _engine_answer(source, doc["engine"]), len(checks)))
        detail = str(doc.get("detail") or NO_GPU)
        return {"node": node, "no_gpu": True, "detail": detail, "gpus": [], "versions": {},
                "checks": checks}  # fmt: skip
    if doc.get("schema") != SCHEMA:
        raise _fail(source, f"schema is {json.dumps(doc.get('schema'))}; expected {SCHEMA!r}")
    checks = [_check(source, c, i) for i, c in enumerate(_list(source, doc.get("checks")))]
    gpus = doc.get("gpus", [])
    if not isinstance(gpus, list) or not all(isinstance(g, dict) for g in gpus):
        raise _fail(source, "gpus is not a list of objects")
    gpus = [_gpu(source, g, i) for i, g in enumerate(gpus)]
    versions = doc.get("versions", {})
    if not isinstance(versions, dict):
        raise _fail(source, "versions is not an object")
    return {**doc, "node": node, "checks": checks, "gpus": gpus, "versions": versions}


def _gpu(source: str, g: dict, i: int) -> dict:
    """A GPU of a result; its MIG devices (``mig``: a list of objects, each with an integer
    index; absent in results of a gpunode without MIG) checked and kept in their order."""
    mig = g.get("mig", [])
    if mig is None:
        mig = []
    if not isinstance(mig, list) or not all(isinstance(m, dict) for m in mig):
        raise _fail(source, f"gpus[{i}].mig is {json.dumps(mig)[:40]}; expected a list of "
                            "MIG devices (objects)")  # fmt: skip
    for j, m in enumerate(mig):
        n = m.get("index")
        if not isinstance(n, int) or isinstance(n, bool):
            raise _fail(source, f"gpus[{i}].mig[{j}].index is {json.dumps(n)[:40]}; expected "
                                "the MIG device's n in <gpu>:<n> (an integer)")  # fmt: skip
    return {**g, "mig": mig}


def _engine_answer(source: str, engine: object) -> dict:
    """engine.active of a node without GPU, from the playbook's run of its engine."""
    if not isinstance(engine, dict):
        raise _fail(
            source,
            f"engine is {json.dumps(engine)[:40]}; expected the engine's answer "
            "{name, rc, stdout, stderr}",
        )
    name = _text(source, engine, "name", "the engine's name", "engine.")
    rc = engine.get("rc")
    if not isinstance(rc, int) or isinstance(rc, bool):
        raise _fail(
            source, f"engine.rc is {json.dumps(rc)}; expected the engine command's exit status"
        )
    return enginecheck.from_command(name, engine)


def _list(source: str, checks: object) -> list:
    if not isinstance(checks, list):
        raise _fail(source, f"checks is {json.dumps(checks)[:40]}; expected a list of checks")
    return checks


def _check(source: str, c: object, i: int) -> dict:
    where = f"checks[{i}]."
    if not isinstance(c, dict):
        raise _fail(source, f"checks[{i}] is not an object")
    _text(source, c, "id", "a dotted check id", where)
    status = c.get("status")
    if status not in STATUSES:
        raise _fail(
            source, f"{where}status is {json.dumps(status)}; expected one of {', '.join(STATUSES)}"
        )
    gpu = c.get("gpu")
    if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool)):
        raise _fail(source, f"{where}gpu is {json.dumps(gpu)}; expected a GPU index or null")
    mig = c.get("mig")
    if mig is not None and (not isinstance(mig, int) or isinstance(mig, bool) or gpu is None):
        raise _fail(source, f"{where}mig is {json.dumps(mig)}; expected a MIG device's n in "
                            "<gpu>:<n> (an integer, with gpu set) or null")  # fmt: skip
    return {
        "id": c["id"],
        "title": str(c.get("title") or c["id"]),
        "gpu": gpu,
        "mig": mig,
        "uuid": c.get("uuid"),
        "status": status,
        "detail": str(c.get("detail") or ""),
        "duration_s": c.get("duration_s"),
    }


def _kind(value: object) -> str:
    """What a JSON value is, for a message: "missing or null", "a JSON object", ..."""
    if value is None:
        return "missing or null"
    names = {dict: "object", str: "string", bool: "boolean", int: "number", float: "number"}
    return f"a JSON {names.get(type(value), type(value).__name__)}"


def _read(path: str) -> bytes:
    if path != STDIN:
        with open(path, "rb") as fh:
            return fh.read()
    if sys.stdin is None or sys.stdin.isatty():
        raise _fail("stdin", "is a terminal; pipe the results in, or name result files")
    return sys.stdin.buffer.read()


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _text_only(value):
    """``value`` with every string encodable: JSON may hold a lone surrogate (``"\\ud800"``),
    which json.loads keeps and no page or file could be written with (a valid pair is
    already one character); each becomes U+FFFD."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_text_only(v) for v in value]
    if isinstance(value, dict):
        return {_text_only(k): _text_only(v) for k, v in value.items()}
    return value


def load(path: str) -> list[tuple[str, dict]]:
    """The node results in one file (``-``: standard input), checked: (source, result)
    pairs, one per entry of a results file (source FILE results[i]), else the one."""
    name = "stdin" if path == STDIN else path
    try:
        raw = _read(path)
    except OSError as exc:
        raise _fail(name, f"cannot be read: {exc.strerror or exc}") from None
    try:
        doc = _text_only(json.loads(raw))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _fail(name, f"is not JSON ({exc})") from None
    except RecursionError:
        raise _fail(name, "is nested too deeply to be a result") from None
    if not (isinstance(doc, dict) and ("results" in doc or doc.get("schema") == RESULTS_SCHEMA)):
        if isinstance(doc, dict) and "node" not in doc:
            _not_a_result(name, doc)
        return [(name, check_result(doc, name))]
    if doc.get("schema") != RESULTS_SCHEMA:
        raise _fail(name, f"schema is {json.dumps(doc.get('schema'))}; expected "
                          f"{RESULTS_SCHEMA!r} for a file of results")  # fmt: skip
    entries = doc.get("results")
    if not isinstance(entries, list) or not entries:
        what = "an empty list" if isinstance(entries, list) else _kind(entries)
        raise _fail(name, f"results is {what}; expected a list of the nodes' results")
    out = []
    for i, entry in enumerate(entries):
        source = f"{name} results[{i}]"
        node = entry.get("node") if isinstance(entry, dict) else None
        named = f"{source} (node {node!r})" if isinstance(node, str) and node.strip() else source
        out.append((source, check_result(entry, named)))
    return out


def _not_a_result(name: str, doc: dict) -> None:
    """One line saying what a JSON object without a node is, when it is not a result that
    lost its node (schema gpunode.validate/v1: check_result names the missing node)."""
    schema = doc.get("schema")
    shown = json.dumps(schema)[:60] if isinstance(schema, str) else None
    if (isinstance(schema, str) and schema.startswith("gpunode.report/")) or (
        schema is None and isinstance(doc.get("nodes"), list) and "summary" in doc
    ):
        given = f"schema {shown}" if shown else "nodes and summary"
        raise _fail(name, f"is a cluster report ({given}: `gpunode report`'s report.json), not "
                          f"results; {ACCEPTED}; a report goes to --previous")  # fmt: skip
    if shown is not None and schema != SCHEMA:
        raise _fail(name, f"is a document of schema {shown} without a node; {ACCEPTED}")
    if schema is None:
        keys = ", ".join(sorted(str(k) for k in doc)[:5]) or "none"
        raise _fail(name, f"is a JSON object with no node and no schema (keys: {keys[:80]}); "
                          f"{ACCEPTED}")  # fmt: skip


def result_files(paths: list[str]) -> list[str]:
    """The files named (``-``: standard input, once), and the *.json files in the
    directories named (sorted)."""
    out: list[str] = []
    if paths.count(STDIN) > 1:
        raise ResultError("standard input (-) is named more than once; it can be read once")
    for p in paths:
        if p == STDIN:
            out.append(p)
        elif os.path.isdir(p):
            out += sorted(os.path.join(p, n) for n in os.listdir(p) if n.endswith(".json"))
        elif os.path.exists(p):
            out.append(p)
        else:
            raise _fail(p, "no such file or directory")
    if not out:
        raise ResultError(f"no result files (*.json) in {', '.join(paths)}")
    return out


def _age(started: object, generated: str) -> int | None:
    """Seconds from a result's start (its ``started``) to the report's build."""
    import calendar

    try:
        a, b = (calendar.timegm(time.strptime(str(t), "%Y-%m-%dT%H:%M:%SZ"))
                for t in (started, generated))  # fmt: skip
    except ValueError:
        return None
    return b - a


def worst(statuses) -> str | None:
    return max(statuses, key=SEVERITY.__getitem__, default=None)


def merge(results: list[tuple[str, dict]], generated: str | None = None) -> dict:
    """The cluster report model: the nodes (sorted by name), each with node.reachable first,
    the check columns in first-seen order, and the counts."""
    seen: dict[str, str] = {}
    nodes = []
    # the checks the results hold (an unreachable entry's, or one where validate could not
    # run: its one fail); not the report's own node.reachable pass ("results received") nor
    # the skips a GPU-less node's row is filled with, which no result reported
    counts = dict.fromkeys(STATUSES, 0)
    for source, r in results:
        for c in r["checks"]:
            if r.get("unreachable") or c["id"] != REACHABLE:  # merge puts its own in place
                counts[c["status"]] += 1
        if r["node"] in seen:
            raise _fail(source, f"node {r['node']!r} is also in {seen[r['node']]}")
        seen[r["node"]] = source
        if not r.get("unreachable"):
            reach = {
                "id": REACHABLE,
                "title": "Node reachable",
                "gpu": None,
                "mig": None,
                "uuid": None,
            }
            reach |= {"status": "pass", "detail": "results received", "duration_s": None}
            r = {**r, "checks": [reach] + [c for c in r["checks"] if c["id"] != REACHABLE]}
        status = worst(c["status"] for c in r["checks"]) or "skip"
        nodes.append({**r, "status": status, "source": source})
    nodes.sort(key=lambda n: n["node"])
    columns: list[str] = []
    titles: dict[str, str] = {}
    gpu_checks: set[str] = set()
    # the columns in the order validated nodes report them, then those only GPU-less ones have
    for n in sorted(nodes, key=lambda n: bool(n.get("no_gpu"))):
        for c in n["checks"]:
            if c["id"] not in titles:
                columns.append(c["id"])
                titles[c["id"]] = c["title"]
            if c["gpu"] is not None:
                gpu_checks.add(c["id"])
    for n in nodes:
        if n.get("no_gpu"):  # what was not checked there is a skip saying why
            have = {c["id"] for c in n["checks"]}
            skip = {"gpu": None, "mig": None, "uuid": None, "status": "skip", "detail": n["detail"]}
            n["checks"] += [
                {"id": c, "title": titles[c], **skip, "duration_s": None}
                for c in columns
                if c not in have
            ]
    failed = [n["node"] for n in nodes if n["status"] == "fail"]
    generated = generated or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for n in nodes:  # how old each result is when the report is built
        if n.get("started"):
            n["age_s"] = _age(n["started"], generated)
    return {
        "schema": REPORT_SCHEMA,
        "generated": generated,
        "columns": [{"id": c, "title": titles[c], "per_gpu": c in gpu_checks} for c in columns],
        "summary": {"nodes": len(nodes), "nodes_failed": len(failed), "failed": failed}
        | {"checks": counts},
        "nodes": nodes,
    }
