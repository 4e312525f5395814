"""monitoring/npd/gpunode-watch.json: node-problem-detector's custom plugin monitor for
`gpunode watch check`, held to the format NPD validates (the keys, types and rules of
/work/shared/reference/node-problem-detector.md: pkg/custompluginmonitor/types/config.go),
and its rules' path and args run as the CLI that exists: no state 2, healthy 0, failing 1,
each with one line of at most max_output_length bytes on stdout."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpunode.cli import watch as cli_watch
from gpunode.cli.main import main
from gpunode.launch import firststage
from gpunode.watch import service, state

from .states import FAILING_LINE, HEALTHY_LINE, write_state

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "monitoring/npd/gpunode-watch.json"
PLUGIN_CONFIG = {  # the fields NPD reads (config.go) and their JSON types
    "invoke_interval": str, "timeout": str, "max_output_length": int, "concurrency": int,
    "enable_message_change_based_condition_update": bool, "skip_initial_status": bool,
}  # fmt: skip
TOP = {"plugin": str, "pluginConfig": dict, "source": str, "metricsReporting": bool,
       "conditions": list, "rules": list}  # fmt: skip
RULE = {"type": str, "condition": str, "reason": str, "path": str, "args": list,
        "timeout": str, "invoke_interval": str}  # fmt: skip
# a Go time.ParseDuration string (NPD's durations): one or more number+unit
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h))+")
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}


def seconds(text: str) -> float:
    assert _DURATION.fullmatch(text), f"{text!r} is not a Go duration"
    return sum(
        float(n) * _UNIT[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)", text)
    )


@pytest.fixture(scope="module")
def config() -> dict:
    return json.loads(CONFIG.read_text())


def typed(doc: dict, schema: dict, where: str) -> None:
    assert set(doc) <= set(schema), f"{where}: keys NPD does not read: {set(doc) - set(schema)}"
    for key, value in doc.items():
        assert type(value) is schema[key], f"{where}.{key}: {value!r} is not {schema[key].__name__}"


def test_the_config_has_the_format_npd_validates(config):
    typed(config, TOP, "config")
    assert config["plugin"] == "custom" and config["source"]
    pc = config["pluginConfig"]
    typed(pc, PLUGIN_CONFIG, "pluginConfig")
    assert seconds(pc["invoke_interval"]) > 0 and seconds(pc["timeout"]) > 0
    assert pc["max_output_length"] > 0 and pc["concurrency"] >= 1
    declared = []
    for i, cond in enumerate(config["conditions"]):
        typed(cond, {"type": str, "reason": str, "message": str}, f"conditions[{i}]")
        assert set(cond) == {"type", "reason", "message"} and all(cond.values())
        declared.append(cond["type"])
    assert len(declared) == len(set(declared))
    assert config["rules"]
    for i, rule in enumerate(config["rules"]):
        typed(rule, RULE, f"rules[{i}]")
        assert rule["type"] in ("temporary", "permanent") and rule["reason"]
        if rule["type"] == "permanent":  # NPD: "does not have preset default condition"
            assert rule["condition"] in declared
        else:
            assert "condition" not in rule  # ignored by NPD for an event: not written
        assert os.path.isabs(rule["path"])  # a relative one is NPD's working directory's
        assert all(isinstance(a, str) for a in rule["args"])
        # NPD: "plugin timeout is greater than global timeout"
        assert seconds(rule.get("timeout", pc["timeout"])) <= seconds(pc["timeout"])


def test_the_condition_and_rules_are_gpunodes(config):
    pc = config["pluginConfig"]
    assert (pc["invoke_interval"], pc["timeout"]) == ("30s", "10s")
    assert pc["max_output_length"] == state.MESSAGE_MAX  # check's line is never cut by NPD
    assert config["conditions"] == [
        {"type": "GPUUnhealthy", "reason": "GPUsHealthy", "message": "GPUs are healthy"}
    ]
    by_type = {r["type"]: r for r in config["rules"]}
    assert sorted(by_type) == ["permanent", "temporary"] and len(config["rules"]) == 2
    assert by_type["permanent"]["condition"] == "GPUUnhealthy"
    for rule in config["rules"]:
        assert rule["reason"] == "GPUWatchFailed"
        assert rule["path"] == "/usr/local/bin/gpunode"
        assert rule["args"] == ["watch", "check", "--state-dir", "/var/lib/gpunode"]


def test_the_path_is_the_link_install_links_makes_and_the_state_dir_the_watchs(config):
    path = config["rules"][0]["path"]
    assert path == os.path.join(firststage.DEFAULT_PREFIX, "gpunode")
    assert "gpunode" in firststage.EXECUTABLES
    args = config["rules"][0]["args"]
    assert args[args.index("--state-dir") + 1] == service.STATE_DIR == cli_watch.STATE_DIR


def rule_args(config: dict, state_dir: Path) -> list[str]:
    """The rules' args with the state directory moved to the test's."""
    args = list(config["rules"][0]["args"])
    args[args.index("--state-dir") + 1] = str(state_dir)
    return args


@pytest.mark.parametrize("case, code, line", [
    ("none", 2, "gpunode watch: no state (is gpunode-watch running?)"),
    ("healthy", 0, HEALTHY_LINE),
    ("failing", 1, FAILING_LINE),
])  # fmt: skip
def test_the_rules_args_are_the_cli_and_speak_npds_protocol(config, tmp_path, capsys, case,
                                                             code, line):  # fmt: skip
    state_dir = (
        tmp_path / "st" if case == "none" else write_state(tmp_path, failing=case == "failing")
    )
    capsys.readouterr()
    assert main(rule_args(config, state_dir)) == code  # gpunode's own parser takes them
    out, err = capsys.readouterr()
    assert out == line + "\n" and err == ""
    assert len(line.encode()) <= config["pluginConfig"]["max_output_length"]


def test_the_rule_runs_as_a_process_with_one_line_on_stdout(config, tmp_path):
    """As NPD runs it: argv, no shell; stdout is the message, the exit code the status."""
    state_dir = write_state(tmp_path, failing=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, "-m", "gpunode", *rule_args(config, state_dir)],
                          capture_output=True, text=True, timeout=10, env=env)  # fmt: skip
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, FAILING_LINE + "\n", "")


def test_the_collection_ships_the_plugin():
    """galaxy.yml's build_ignore leaves monitoring/npd/ in the collection."""
    patterns = yaml.safe_load((ROOT / "galaxy.yml").read_text())["build_ignore"]
    rel = str(CONFIG.relative_to(ROOT)).split("/")
    on_the_way = ["/".join(rel[: i + 1]) for i in range(len(rel))]
    assert not any(fnmatch.fnmatch(p, pat) for p in on_the_way for pat in patterns)
