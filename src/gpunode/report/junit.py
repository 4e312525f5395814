"""The cluster report as JUnit XML for CI systems: a testsuite per node, a testcase per
check (and GPU); fail is a <failure>, skip a <skipped>, warn passes with the detail in
<system-out>. Times have at most three decimals (the common JUnit schema's SUREFIRE_TIME).

Every name and detail comes from a node's result file, so anything may be in it: characters
XML 1.0 cannot hold at all (control characters, NUL, lone surrogates, U+FFFE/U+FFFF) are
dropped (ElementTree would write them, and the whole file would then not parse)."""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

# What XML 1.0 cannot carry, even as a character reference (its production Char).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value) -> str:
    """``value`` as text XML can hold: str() of it, characters XML 1.0 forbids removed."""
    return _NOT_XML.sub("", str(value))


def _element(parent, tag: str, text=None, **attrs) -> ET.Element:
    el = ET.SubElement(parent, tag, {k: xml_text(v) for k, v in attrs.items()})
    if text is not None:
        el.text = xml_text(text)
    return el


def _time(seconds) -> str:
    try:
        return f"{max(float(seconds), 0.0):.3f}"
    except (TypeError, ValueError):
        return "0.000"


def case_name(check: dict) -> str:
    """``id``, ``id[gpu1]``, or for a check about a MIG device ``id[gpu1:0]`` (<gpu>:<n>)."""
    if check["gpu"] is None:
        return check["id"]
    if check.get("mig") is None:
        return f"{check['id']}[gpu{check['gpu']}]"
    return f"{check['id']}[gpu{check['gpu']}:{check['mig']}]"


def render(model: dict) -> bytes:
    root = ET.Element("testsuites", name="gpunode validation")
    totals = {"tests": 0, "failures": 0, "skipped": 0}
    total_time = 0.0
    for n in model["nodes"]:
        checks = n["checks"]
        failures = sum(c["status"] == "fail" for c in checks)
        skipped = sum(c["status"] == "skip" for c in checks)
        node_time = float(n.get("duration_s") or 0.0)
        total_time += node_time
        suite = _element(
            root,
            "testsuite",
            name=n["node"],
            tests=str(len(checks)),
            failures=str(failures),
            errors="0",
            skipped=str(skipped),
            time=_time(node_time),
        )
        if n.get("started"):
            suite.set("timestamp", xml_text(n["started"]))
        if n.get("hostname"):
            suite.set("hostname", xml_text(n["hostname"]))
        props = _element(suite, "properties")
        for key, value in sorted((n.get("versions") or {}).items()):
            text = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            _element(props, "property", name=f"versions.{key}", value=text)
        for g in n.get("gpus") or []:
            _element(
                props,
                "property",
                name=f"gpu{g.get('index')}",
                value=f"{g.get('model')} {g.get('uuid')}",
            )
            for m in g.get("mig") or []:
                _element(
                    props,
                    "property",
                    name=f"gpu{g.get('index')}:{m.get('index')}",
                    value=f"MIG {m.get('profile')} {m.get('uuid')}",
                )
        for c in checks:
            case = _element(
                suite,
                "testcase",
                name=case_name(c),
                classname=f"{n['node']}.{c['id'].split('.')[0]}",
                time=_time(c.get("duration_s")),
            )
            if c["status"] == "fail":
                _element(case, "failure", c["detail"], type=c["id"], message=c["detail"])
            elif c["status"] == "skip":
                _element(case, "skipped", message=c["detail"])
            elif c["status"] == "warn":
                _element(case, "system-out", f"WARNING: {c['detail']}")
        totals["tests"] += len(checks)
        totals["failures"] += failures
        totals["skipped"] += skipped
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("errors", "0")
    root.set("time", _time(total_time))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
