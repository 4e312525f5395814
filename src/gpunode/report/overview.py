"""What the HTML page shows before the grid, from the report model (results.merge): the
order of the nodes (failures first), which nodes fold, and the counts of nodes, GPUs and
checks by status (which checks fail where). Plain data: html.py renders it, tests read it.
"""

from __future__ import annotations

import re

from .results import worst

# how a node ranks on the page: failures first, then warnings, then the nodes that ran no
# check (unreachable, validate could not run, every check skipped), then the passing ones
RANKS = ("fail", "warn", "unreachable", "skip", "pass")


def kind(n: dict) -> str:
    """The node's standing: fail, warn, unreachable (also: validate could not run), skip
    (every check skipped) or pass (every check passed or skipped with a reason)."""
    if n.get("unreachable") or n.get("error"):
        return "unreachable"
    return n["status"] if n["status"] in RANKS else "skip"


def ordered(nodes: list[dict]) -> list[dict]:
    """The nodes, worst first (RANKS), then by name."""
    return sorted(nodes, key=lambda n: (RANKS.index(kind(n)), n["node"]))


def folded(n: dict) -> bool:
    """A node shown as one closed summary line: every check passed or skipped."""
    return kind(n) in ("pass", "skip")


def gpu_status(n: dict) -> dict[int, str]:
    """GPU index -> the worst status of the checks about it (its MIG devices' included);
    a GPU the result lists that no check is about is "skip"."""
    out: dict[int, str] = {}
    for g in n.get("gpus") or []:
        if isinstance(g.get("index"), int):
            out[g["index"]] = "skip"
    by: dict[int, list[str]] = {}
    for c in n["checks"]:
        if c["gpu"] is not None:
            by.setdefault(c["gpu"], []).append(c["status"])
    for i, statuses in by.items():
        out[i] = worst(statuses) or "skip"
    return dict(sorted(out.items()))


def _where(c: dict) -> str:
    if c["gpu"] is None:
        return "node"
    return "gpu" if c.get("mig") is None else "mig"


UNITS = {"node": ("node", "nodes"), "gpu": ("GPU", "GPUs"), "mig": ("MIG device", "MIG devices")}


def _count(k: int, unit: str) -> str:
    one, many = UNITS[unit]
    return f"{k} {one if k == 1 else many}"


def problems(nodes: list[dict], columns: list[dict]) -> list[dict]:
    """The checks that failed or warned somewhere, failures first (then by how many nodes,
    then in column order): {"id", "title", "status" (the worst), "text" ("3 GPUs on 2
    nodes"; "1 node"), "nodes": the nodes' names in page order, "warn_text" and
    "warn_nodes": of a check that fails, where it only warns}."""
    order = {c["id"]: i for i, c in enumerate(columns)}
    found: dict[str, dict[str, dict]] = {}  # check -> status -> {"what": set, "nodes": [...]}
    for n in ordered(nodes):
        for c in n["checks"]:
            if c["status"] not in ("fail", "warn"):
                continue
            entry = found.setdefault(c["id"], {}).setdefault(
                c["status"], {"what": set(), "nodes": [], "title": c["title"]}
            )
            unit = _where(c)
            entry["what"].add((unit, n["node"], c["gpu"], c.get("mig")))
            if n["node"] not in entry["nodes"]:
                entry["nodes"].append(n["node"])
    out = []
    for cid, by in found.items():
        status = worst(by)
        texts = {}
        for st, e in by.items():
            units: dict[str, int] = {}
            for unit, *_ in e["what"]:
                units[unit] = units.get(unit, 0) + 1
            parts = [_count(units[u], u) for u in ("gpu", "mig") if u in units]
            on = _count(len(e["nodes"]), "node")
            texts[st] = f"{', '.join(parts)} on {on}" if parts else on
        main = by[status]
        other = "warn" if status == "fail" and "warn" in by else None
        # the nodes that only warn on a check that fails elsewhere
        warn_nodes = [m for m in by[other]["nodes"] if m not in main["nodes"]] if other else []
        out.append({
            "id": cid, "title": main["title"], "status": status, "text": texts[status],
            "nodes": main["nodes"], "warn_text": texts[other] if other else "",
            "warn_nodes": warn_nodes,
        })  # fmt: skip
    out.sort(key=lambda p: (p["status"] != "fail", -len(p["nodes"]), order.get(p["id"], 0)))
    return out


def counts(nodes: list[dict]) -> dict:
    """{"nodes": {kind: n} over RANKS, "gpus": {status: n}, "gpu_total", "node_total"}."""
    by_node = dict.fromkeys(RANKS, 0)
    by_gpu = dict.fromkeys(("fail", "warn", "pass", "skip"), 0)
    for n in nodes:
        by_node[kind(n)] += 1
        for status in gpu_status(n).values():
            by_gpu[status] += 1
    return {"nodes": by_node, "gpus": by_gpu, "node_total": len(nodes),
            "gpu_total": sum(by_gpu.values())}  # fmt: skip


def node_line(n: dict) -> str:
    """The one line a node's summary shows after its name: its GPUs and how its checks
    went ("8 GPUs · all 120 checks passed (2 skipped)", "8 GPUs · fail: gpu.xid on GPU 3")."""
    gpus = gpu_status(n)
    head = f"{len(gpus)} GPU{'' if len(gpus) == 1 else 's'}" if gpus else "no GPUs"
    total = len(n["checks"])
    skipped = sum(c["status"] == "skip" for c in n["checks"])
    k = kind(n)
    if k == "unreachable":
        return f"{'unreachable' if n.get('unreachable') else 'validation could not run'}: " + str(
            n.get("detail") or ""
        )
    if k == "skip":
        return f"{head} · no check ran: {'the one check' if total == 1 else f'all {total}'} skipped"
    if k == "pass":
        extra = f" ({skipped} skipped)" if skipped else ""
        passed = total - skipped
        return (
            f"{head} · {'the one check' if passed == 1 else f'all {passed} checks'} passed{extra}"
        )
    bad: dict[tuple[str, str], list[dict]] = {}
    for c in n["checks"]:
        if c["status"] in ("fail", "warn"):
            bad.setdefault((c["status"], c["id"]), []).append(c)
    parts = []
    for (status, cid), checks in sorted(bad.items(), key=lambda kv: kv[0][0] != "fail"):
        gpus = [str(c["gpu"]) for c in checks if c["gpu"] is not None and c.get("mig") is None]
        migs = [f"{c['gpu']}:{c['mig']}" for c in checks if c.get("mig") is not None]
        on = [f"{unit} {', '.join(w)}" for unit, w in (("GPU", gpus), ("MIG", migs)) if w]
        parts.append(f"{status} {cid} on {' and '.join(on)}" if on else f"{status} {cid}")
    return f"{head} · " + "; ".join(parts)


def group_key(n: dict) -> tuple[str, str]:
    """The group a node is counted in: its GPU model(s) and its loaded driver."""
    if n.get("unreachable") or n.get("error"):
        return ("unknown (no result)", "unknown")
    if n.get("no_gpu"):
        return ("no GPU", "none")
    models = sorted({str(g.get("model") or "unknown") for g in n.get("gpus") or []})
    driver = (n.get("versions") or {}).get("driver_loaded") or "?"
    return (" + ".join(models) or "no GPUs", str(driver))


def groups(nodes: list[dict]) -> list[dict]:
    """The nodes by GPU model and driver, the largest group first: {"model", "driver",
    "nodes": names in page order, "kinds": {kind: n} over RANKS}."""
    out: dict[tuple[str, str], dict] = {}
    for n in ordered(nodes):
        model, driver = group_key(n)
        g = out.setdefault((model, driver), {"model": model, "driver": driver, "nodes": [],
                                             "kinds": dict.fromkeys(RANKS, 0)})  # fmt: skip
        g["nodes"].append(n["node"])
        g["kinds"][kind(n)] += 1
    return sorted(out.values(), key=lambda g: (-len(g["nodes"]), g["model"], g["driver"]))


def _failing(n: dict) -> set[str]:
    return {c["id"] for c in n["checks"] if c["status"] == "fail"}


def changes(nodes: list[dict], previous: list[dict]) -> dict:
    """What changed since the previous report (the nodes of both models): {"new": the
    nodes failing now that did not fail then (new nodes too), each {"node", "checks": the
    checks failing now that did not fail then}, "fixed": nodes that failed then and do not
    now, "still": nodes failing both times, "added": nodes not in the previous report,
    "gone": nodes only in the previous one, "failures": per node, check and GPU, the
    failures new and resolved (failure_changes)}; names in page order (gone: by name)."""
    before = {n["node"]: n for n in previous}
    now = {n["node"] for n in nodes}
    out: dict = {"new": [], "fixed": [], "still": [], "added": [], "gone": []}
    for n in ordered(nodes):
        old = before.get(n["node"])
        if old is None:
            out["added"].append(n["node"])
        failed_then = old is not None and old.get("status") == "fail"
        if n["status"] == "fail" and not failed_then:
            then = _failing(old) if old else set()
            out["new"].append({"node": n["node"],
                               "checks": sorted(_failing(n) - then)})  # fmt: skip
        elif n["status"] == "fail":
            out["still"].append(n["node"])
        elif failed_then:
            out["fixed"].append(n["node"])
    out["gone"] = sorted(name for name in before if name not in now)
    out["failures"] = failure_changes(nodes, previous)
    return out


def _key(c: dict) -> tuple:
    """A check's place on a node: its id, GPU and MIG device (a report of an older gpunode
    may lack mig: null)."""
    return (c.get("id"), c.get("gpu"), c.get("mig"))


def failure_changes(nodes: list[dict], previous: list[dict]) -> list[dict]:
    """Per node, check and GPU (or MIG device): each failure now that was not one in the
    previous report ("new": a new fatal Xid on GPU 3 of a node whose GPU 1 already failed is
    one, as is every failure of a node the previous report did not have), then each failure
    then that the check, run now, no longer gives ("resolved"; a failure whose check did not
    run now, a node unreachable or gone, is neither). Each {"change", "node", "check",
    "title", "gpu", "mig", "uuid", "status" and "detail" (now), "was" (the previous detail,
    None for a new failure on a node the previous report lacked)}; nodes in page order."""
    before = {n["node"]: n for n in previous}
    new, resolved = [], []
    for n in ordered(nodes):
        old = before.get(n["node"])
        then = {_key(c): c for c in (old or {}).get("checks") or [] if isinstance(c, dict)}
        now = {_key(c): c for c in n["checks"]}
        for c in n["checks"]:
            was = then.get(_key(c))
            if c["status"] == "fail" and (was is None or was.get("status") != "fail"):
                new.append(_change("new", n, c, was))
        for key, was in then.items():
            c = now.get(key)
            if was.get("status") == "fail" and c is not None and c["status"] != "fail":
                resolved.append(_change("resolved", n, c, was))
    return new + resolved


def _change(change: str, n: dict, c: dict, was: dict | None) -> dict:
    return {"change": change, "node": n["node"], "check": c["id"], "title": c["title"],
            "gpu": c["gpu"], "mig": c.get("mig"), "uuid": c.get("uuid"), "status": c["status"],
            "detail": c["detail"], "was": None if was is None else str(was.get("detail") or "")}  # fmt: skip


def where(c: dict) -> str:
    """Where a check (or a change) is on its node: "GPU 3", "MIG 1:2", or "" (the node)."""
    if c.get("gpu") is None:
        return ""
    return f"GPU {c['gpu']}" if c.get("mig") is None else f"MIG {c['gpu']}:{c['mig']}"


# the codes a gpu.xid detail opens with: "Xid 79, 48 x2; last 79 (...)" (validate's
# health._judge_xid), "Xid 79 at 2026-...: ..." (one record)
_XID = re.compile(r"\bXid ((?:\d+(?: x\d+)?)(?:, \d+(?: x\d+)?)*)")
XID_CHECK = "gpu.xid"


def xid_codes(c: dict) -> list[int]:
    """The Xid codes of a gpu.xid check that failed or warned, in the order its detail
    names them; [] for any other check."""
    if c.get("id") != XID_CHECK or c.get("status") not in ("fail", "warn"):
        return []
    m = _XID.search(str(c.get("detail") or ""))
    if not m:
        return []
    return [int(x) for x in re.findall(r"(\d+)(?: x\d+)?", m[1])]


def xids(n: dict, gpu: int | None = None) -> list[dict]:
    """The Xid codes of a node's gpu.xid failures and warnings (``gpu``: of that GPU only):
    {"code", "status" (the worst), "gpus": the GPUs that logged it}, failures first, then by
    code."""
    out: dict[int, dict] = {}
    for c in n["checks"]:
        if gpu is not None and c["gpu"] != gpu:
            continue
        for code in xid_codes(c):
            e = out.setdefault(code, {"code": code, "status": c["status"], "gpus": []})
            e["status"] = worst((e["status"], c["status"]))
            if c["gpu"] is not None and c["gpu"] not in e["gpus"]:
                e["gpus"].append(c["gpu"])
    return sorted(out.values(), key=lambda e: (e["status"] != "fail", e["code"]))


def age_text(seconds: int | None) -> str:
    """45 s, 12 min, 3 h 05 min, 2 d 4 h; "in the future" for a clock ahead of the report's."""
    if seconds is None:
        return "?"
    if seconds < 0:
        return "in the future"
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def validated(n: dict) -> str:
    """When a node was validated and how old that is at the report's build: "validated
    2026-11-22T08:00:00Z, 3 h 05 min before the report"; "" for a node without a result."""
    if not n.get("started"):
        return ""
    return f"validated {n['started']}, {age_text(n.get('age_s'))} before the report"
