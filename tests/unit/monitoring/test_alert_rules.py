"""The alert rules operators load (monitoring/gpunode-alerts.yml): Prometheus' own tool
(promtool, from Debian's prometheus package, which scripts/setup installs) accepts them and
runs their unit tests (monitoring/gpunode-alerts.test.yml); every rule has a case where it
fires and one where it must not, each rule's cases fail when its expression is broken, and
the rules read only the series `gpunode watch` writes (monitoring/metrics.yml, the one list
of their names and labels), with the check ids gpunode.nvidia.health judges."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from gpunode.nvidia.health import CHECKS
from gpunode.validate.output import textfile

from ..validate.fakes import result

ROOT = Path(__file__).resolve().parents[3]
MONITORING = ROOT / "monitoring"
RULES_FILE = MONITORING / "gpunode-alerts.yml"
TESTS_FILE = MONITORING / "gpunode-alerts.test.yml"

RULES = [
    rule for group in yaml.safe_load(RULES_FILE.read_text())["groups"] for rule in group["rules"]
]
CONTRACT = yaml.safe_load((MONITORING / "metrics.yml").read_text())["metrics"]
GPU_LABELS = {"node", "gpu", "uuid", "bus_id", "model"}
TARGET_LABELS = {"job", "instance"}  # what Prometheus adds to every series it scrapes


def promtool(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is not installed; run scripts/setup", pytrace=False)
    return subprocess.run([tool, *args], cwd=cwd, capture_output=True, text=True, check=False,
                          timeout=60)  # fmt: skip


def test_promtool_accepts_the_rules():
    proc = promtool("check", "rules", str(RULES_FILE.relative_to(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(RULES)} rules found" in proc.stdout


def test_the_rules_unit_tests_pass():
    proc = promtool("test", "rules", str(TESTS_FILE.relative_to(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_the_rule_files_are_loaded_from_beside_the_tests():
    assert yaml.safe_load(TESTS_FILE.read_text())["rule_files"] == [RULES_FILE.name]


def test_every_rule_has_a_firing_case_and_a_quiet_one():
    cases = [
        c for t in yaml.safe_load(TESTS_FILE.read_text())["tests"] for c in t["alert_rule_test"]
    ]
    names = {rule["alert"] for rule in RULES}
    assert len(names) == len(RULES), "two rules of one name"
    assert {c["alertname"] for c in cases} <= names, "a test of a rule that is not there"
    firing = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert names - firing == set(), "rules never seen firing"
    assert names - quiet == set(), "rules never seen quiet"
    for case in cases:  # firing cases name every label and annotation
        for alert in case.get("exp_alerts") or []:
            assert set(alert["exp_annotations"]) == {"summary", "description"}, case
            assert {"severity", "node", *TARGET_LABELS} <= set(alert["exp_labels"]), case


# --- what the expressions read -----------------------------------------------------------

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_SELECTOR = re.compile(r"([A-Za-z_:][\w:]*)?\s*\{([^}]*)\}")
_MATCHER_LABEL = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)")
_GROUPING = re.compile(r"\b(?:on|ignoring|by|without|group_left|group_right)\s*\(([^)]*)\)")
_NAME = re.compile(r"(?<![\w.:])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "on", "ignoring", "group_left",
             "group_right", "by", "without", "inf", "nan"}  # fmt: skip


def series_read(expr: str) -> tuple[dict[str, set[str]], set[str]]:
    """What a PromQL expression reads: {metric name: the label names its selectors match
    on} and the label names of its grouping and matching clauses (by, on, group_left …).
    A selector without a name (``{__name__=…}``) reads the metric ""."""
    text = _STRING.sub('""', expr)
    metrics: dict[str, set[str]] = {}
    for m in _SELECTOR.finditer(text):
        metrics.setdefault(m[1] or "", set()).update(_MATCHER_LABEL.findall(m[2]))
    text = _SELECTOR.sub(lambda m: f" {m[1] or ''} ", text)
    grouping = {name for m in _GROUPING.finditer(text) for name in re.findall(r"\w+", m[1])}
    text = re.sub(r"\[[^\]]*\]", " ", _GROUPING.sub(" ", text))  # ranges, subqueries
    for m in _NAME.finditer(text):
        if m[2] is None and m[1].lower() not in _KEYWORDS:  # not a function, not a keyword
            metrics.setdefault(m[1], set())
    return metrics, grouping


def test_series_read_finds_names_labels_and_clauses():
    """The reader the contract test relies on sees what it must flag."""
    assert series_read("up == 0") == ({"up": set()}, set())
    assert series_read('rate(node_cpu_seconds_total{mode!="idle"}[5m]) > 0.5') == (
        {"node_cpu_seconds_total": {"mode"}}, set())  # fmt: skip
    assert series_read(
        'sum by (node) (gpunode_gpu_health{check="a b{c}", gpu=~"0|1"} offset 5m) '
        "* on(node) group_left(serial) gpunode_gpu_serial_info and vector(1)"
    ) == ({"gpunode_gpu_health": {"check", "gpu"}, "gpunode_gpu_serial_info": set()},
          {"node", "serial"})  # fmt: skip
    assert series_read('{__name__="up"}') == ({"": {"__name__"}}, set())
    assert series_read("time() - gpunode_watch_heartbeat_timestamp_seconds > 3 * 1e3") == (
        {"gpunode_watch_heartbeat_timestamp_seconds": set()}, set())  # fmt: skip


@pytest.mark.parametrize("rule", RULES, ids=[r["alert"] for r in RULES])
def test_a_rule_reads_only_the_watchs_series(rule):
    metrics, grouping = series_read(rule["expr"])
    assert metrics, rule["expr"]
    assert set(metrics) <= set(CONTRACT), (
        f"not in monitoring/metrics.yml: {set(metrics) - set(CONTRACT)}"
    )
    for name, matched in metrics.items():
        assert matched <= set(CONTRACT[name]["labels"]) | TARGET_LABELS, (name, matched)
    labels = set().union(*(CONTRACT[name]["labels"] for name in metrics)) | TARGET_LABELS
    assert grouping <= labels, grouping - labels
    # what its annotations show is the series' own labels
    shown = set(re.findall(r"\$labels\.(\w+)", str(rule["annotations"])))
    assert "node" in shown
    assert shown <= labels, shown - labels
    if all(set(CONTRACT[name]["labels"]) >= GPU_LABELS for name in metrics):
        # a GPU's alert names it every way an operator may look it up
        assert set(re.findall(r"\$labels\.(\w+)", rule["annotations"]["description"])) >= GPU_LABELS
    assert rule["labels"]["severity"] in ("critical", "warning")
    assert set(rule["annotations"]) == {"summary", "description"}


def test_the_checks_the_rules_name_are_gpunode_health_checks():
    ids = [
        check
        for rule in RULES
        for m in re.finditer(r'\bcheck\s*(?:=~|=)\s*"([^"]*)"', rule["expr"])
        for check in m[1].split("|")
    ]
    assert ids, "no rule reads a check"
    assert set(ids) <= set(CHECKS), set(ids) - set(CHECKS)


def test_the_contract_is_a_family_of_its_own():
    """validate's textfile and the watch's share one textfile directory: no name in both,
    and every contract entry says its type and labels (node first)."""
    validate = set(re.findall(r"^# TYPE (\w+) ", textfile(result()), re.M))
    assert "gpunode_check_status" in validate
    assert validate & set(CONTRACT) == set()
    for name, entry in CONTRACT.items():
        assert name.startswith("gpunode_"), name
        assert entry["type"] in ("gauge", "counter"), name
        assert name.endswith("_total") == (entry["type"] == "counter"), name
        assert entry["labels"][0] == "node" and entry["help"], name
        if name.startswith("gpunode_gpu_"):
            assert set(entry["labels"]) >= GPU_LABELS, name


# --- the tests can fail --------------------------------------------------------------------


def copy_with(tmp_path: Path, rules: list[dict]) -> Path:
    """The unit tests and the rules ``rules`` in tmp_path (rule_files is relative to the
    test file); the test file's path there."""
    doc = yaml.safe_load(RULES_FILE.read_text())
    doc["groups"][0]["rules"] = rules
    (tmp_path / RULES_FILE.name).write_text(yaml.safe_dump(doc, sort_keys=False))
    return Path(shutil.copy(TESTS_FILE, tmp_path / TESTS_FILE.name))


def test_an_unchanged_copy_passes(tmp_path):
    proc = promtool("test", "rules", str(copy_with(tmp_path, RULES)), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("broken", [r["alert"] for r in RULES])
def test_a_broken_expression_fails_its_tests(tmp_path, broken):
    rules = [dict(r, expr="vector(0) == 1") if r["alert"] == broken else r for r in RULES]
    proc = promtool("test", "rules", str(copy_with(tmp_path, rules)), cwd=tmp_path)
    assert proc.returncode != 0, proc.stdout
    failed = set(re.findall(r"alertname: (\w+)", proc.stdout + proc.stderr))
    assert failed == {broken}, proc.stdout + proc.stderr


# --- what README.md says -------------------------------------------------------------------


def readme_section() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("\n### Alert rules\n", 1)[1].split("\n## ", 1)[0]


def test_the_readme_tables_are_the_contract_and_the_rules():
    rows = [
        [cell.strip().strip("`") for cell in line.strip("|").split("|")]
        for line in readme_section().splitlines()
        if line.startswith("| `")
    ]
    metrics = [row[0] for row in rows if row[0] in CONTRACT or row[0].startswith("gpunode_")]
    assert metrics == list(CONTRACT)
    alerts = {row[0]: row[2] for row in rows if row[0].startswith("Gpunode")}
    assert alerts == {rule["alert"]: rule["labels"]["severity"] for rule in RULES}
