"""Does an alert rule fire on what a node's textfile says? Feeds the series of a
node_exporter textfile (`gpunode watch`'s) to `promtool test rules` as a unit test that
expects each named alert firing exactly once, for the series of its expression's first
metric that the selector picks, with that series' labels and value and the annotations
the rule renders from them ({{ $labels.x }} and {{ $value }}, all the shipped rules use).
promtool compares the whole set: the alert firing for anything else fails too.

  alerts_from_textfile.py TEXTFILE RULES ALERT[:label=value,...] ...  -> exit 0: as expected
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
TEMPLATE = re.compile(r"\{\{\s*(\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)|\$value)\s*\}\}")


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if m is None:
            raise SystemExit(f"alerts_from_textfile: not a sample line: {line!r}")
        labels = {k: v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")
                  for k, v in LABEL.findall(m.group(2) or "")}  # fmt: skip
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def series(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def value_text(v: float) -> str:
    return str(int(v)) if v == int(v) and not math.isinf(v) else repr(v)


def render(template: str, labels: dict[str, str], value: float) -> str:
    def sub(m: re.Match) -> str:
        return value_text(value) if m.group(1) == "$value" else labels.get(m.group(2), "")

    if "{{" in TEMPLATE.sub("", template):
        raise SystemExit(f"alerts_from_textfile: a template this tool does not render: {template!r}")
    return TEMPLATE.sub(sub, template)


def main(argv: list[str]) -> int:
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    textfile, rules_path, alerts = Path(argv[0]), Path(argv[1]), argv[2:]
    data = samples(textfile.read_text())
    rules = {r["alert"]: r for g in yaml.safe_load(rules_path.read_text())["groups"]
             for r in g["rules"] if "alert" in r}  # fmt: skip
    input_series = [{"series": series(n, lab), "values": f"{value_text(v)}x10"}
                    for n, lab, v in data]  # fmt: skip
    tests = []
    for arg in alerts:
        alert, _, sel = arg.partition(":")
        want_labels = dict(kv.split("=", 1) for kv in sel.split(",") if kv)
        rule = rules[alert]
        metric = re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", rule["expr"].strip()).group(0)
        picked = [(lab, v) for n, lab, v in data
                  if n == metric and all(lab.get(k) == w for k, w in want_labels.items())]  # fmt: skip
        if len(picked) != 1:
            raise SystemExit(f"alerts_from_textfile: {arg}: {len(picked)} {metric} series match")
        lab, v = picked[0]
        ann = {k: render(t, lab, v) for k, t in rule.get("annotations", {}).items()}
        tests.append({"eval_time": "1m", "alertname": alert, "exp_alerts": [
            {"exp_labels": {**lab, **rule.get("labels", {})}, "exp_annotations": ann}]})
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(rules_path, Path(tmp) / "rules.yml")
        doc = {"rule_files": ["rules.yml"], "evaluation_interval": "1m",
               "tests": [{"interval": "1m", "input_series": input_series,
                          "alert_rule_test": tests}]}  # fmt: skip
        (Path(tmp) / "test.yml").write_text(yaml.safe_dump(doc, sort_keys=False))
        proc = subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp,
                              capture_output=True, text=True, check=False)  # fmt: skip
    print(proc.stdout + proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
