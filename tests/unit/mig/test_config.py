"""mig-parted v1 files parsed strictly: every bad value one line naming it and what is
accepted."""

from __future__ import annotations

import re

import pytest
import yaml

from gpunode.mig import MigConfigError
from gpunode.mig.config import load, parse
from gpunode.util.boundedyaml import describe

GOOD = """
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "1g.10gb": 7
  mixed:
    - device-filter: ["0x20B210DE", 0x20B510DE]
      devices: [0, 1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2, "4g.40gb": 0}
    - devices: [2]
      mig-enabled: false
      mig-devices: {}
"""


def test_parse_good():
    configs = parse(yaml.safe_load(GOOD))
    assert list(configs) == ["all-disabled", "all-1g.10gb", "mixed"]
    (off,) = configs["all-disabled"]
    assert (off.devices, off.mig_enabled, off.mig_devices, off.device_filter) == (
        None, False, {}, None)
    mixed = configs["mixed"]
    assert mixed[0].devices == (0, 1)
    # a hex id YAML read as a number and one kept as a string both count
    assert mixed[0].device_filter == (0x20B210DE, 0x20B510DE)
    assert mixed[0].mig_devices == {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}  # 0: dropped
    assert mixed[0].selects(1, 0x20B210DE) and not mixed[0].selects(2, 0x20B210DE)
    assert not mixed[0].selects(0, 0x1EB810DE)  # a T4
    assert mixed[1].where == "mig-configs.mixed[1]"


@pytest.mark.parametrize(
    "doc, message",
    [
        ("[]", "<config>: [] is not accepted; accepted: a mapping with keys version and mig-configs"),
        ("version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}",
         "<config>: version: 'v2' is not accepted; accepted: v1"),
        ("mig-configs: {a: [{devices: all, mig-enabled: false}]}",
         "<config>: missing required key 'version'; accepted: version: v1"),
        ("version: v1\nmig-config: {}", "<config>: 'mig-config' is not accepted; accepted: "
         "the keys version, mig-configs"),
        ("version: v1\nmig-configs: {a: []}", "mig-configs.a: [] is not accepted; accepted: "
         "a list of entries (devices, mig-enabled, mig-devices)"),
        ("version: v1\nmig-configs: {a: [{devices: some, mig-enabled: true}]}",
         "mig-configs.a[0].devices: 'some' is not accepted; accepted: all or a list of GPU "
         "indexes such as [0, 1]"),
        ("version: v1\nmig-configs: {a: [{devices: [-1], mig-enabled: true}]}",
         "mig-configs.a[0].devices: [-1] is not accepted; accepted: all or a list of GPU "
         "indexes such as [0, 1]"),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: yes please}]}",
         "mig-configs.a[0].mig-enabled: 'yes please' is not accepted; accepted: true or false"),
        ("version: v1\nmig-configs: {a: [{devices: all}]}",
         "mig-configs.a[0]: missing required key 'mig-enabled'"),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, migdevices: {}}]}",
         "mig-configs.a[0]: 'migdevices' is not accepted; accepted: the keys devices, "
         "device-filter, mig-enabled, mig-devices"),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, "
         "mig-devices: {1g.10gb: seven}}]}",
         "mig-configs.a[0].mig-devices.1g.10gb: 'seven' is not accepted; accepted: a count "
         "(0 or more)"),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, "
         "mig-devices: {1g.10gb: 7}}]}",
         "mig-configs.a[0].mig-devices: {'1g.10gb': 7} with mig-enabled: false; accepted: "
         "no mig-devices (or {}) when MIG is disabled"),
        ("version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, "
         "device-filter: A100}]}",
         "mig-configs.a[0].device-filter: 'A100' is not accepted; accepted: a PCI device id "
         'such as "0x20B210DE" (device id, vendor 10DE)'),
    ],
)
def test_parse_refuses(doc, message):
    with pytest.raises(MigConfigError) as exc:
        parse(yaml.safe_load(doc))
    assert str(exc.value) == message
    assert "\n" not in str(exc.value)


def test_load(tmp_path):
    path = tmp_path / "mig.yaml"
    path.write_text(GOOD)
    assert load(str(path), "all-1g.10gb")[0].mig_devices == {"1g.10gb": 7}
    with pytest.raises(MigConfigError, match=r"no config 'nope' under mig-configs; accepted: "
                       r"all-disabled, all-1g.10gb, mixed$"):
        load(str(path), "nope")
    path.write_text("version: v1\nmig-configs: [\n")
    with pytest.raises(MigConfigError, match=r"mig.yaml: not valid YAML at line \d+"):
        load(str(path), "x")
    with pytest.raises(MigConfigError, match=r"missing.yaml: cannot be read \(No such file"):
        load(str(tmp_path / "missing.yaml"), "x")


LOL = '["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]'


def _alias_bomb(levels: int) -> str:
    """Nine aliases per level, each level's anchor defined at its first use (the file's
    keys are checked, so the bomb lives in the one value shown in the error)."""
    text = f"&l0 {LOL}"
    for i in range(1, levels + 1):
        text = f"&l{i} [{text}, " + ", ".join([f"*l{i - 1}"] * 8) + "]"
    return text


def _merge_bomb(levels: int) -> str:
    lines = ["m0: &m0 {" + ", ".join(f"k{i}: {i}" for i in range(9)) + "}"]
    for i in range(1, levels + 1):
        lines.append(f"m{i}: &m{i} {{<<: [" + ", ".join([f"*m{i - 1}"] * 9) + "]}")
    return "\n".join(lines)


HOSTILE = {
    # the review's: nine aliases per level, shown whole in the error (552 bytes: 18.8 s,
    # 645 MiB at 8 levels; 9 levels ~6 GiB)
    "alias-bomb": (
        "version: v1\nmig-configs: {x: [{devices: " + _alias_bomb(9) + ", mig-enabled: true}]}",
        r"mig-configs\.x\[0\]\.devices: \[\[\[\[\[\[\[\[\[\['lol', 'lol'.*\.\.\. \(a list of 9 "
        r"items\) is not accepted; accepted: all or a list of GPU indexes such as \[0, 1\]$",
    ),
    "merge-bomb": (
        _merge_bomb(12) + "\nversion: v1\nmig-configs: {x: [{devices: all, mig-enabled: true}]}",
        r"not valid YAML at line \d+: merge keys copy more than 100000 pairs; accepted: a "
        r"mig-parted YAML file \(at most 1048576 bytes, 100000 nodes, 64 levels deep\)$",
    ),
    "nested": ("[" * 5000, r"not valid YAML at line 1: nested deeper than 64 levels; accepted"),
    "nodes": (
        "[" + "0, " * 200_000 + "]",
        r"not valid YAML at line 1: more than 100000 nodes \(aliases counted each use\)",
    ),
    "huge": ("version: v1\n#" + "x" * (1 << 20), r"larger than 1048576 bytes; accepted"),
    "long-int": (
        "version: v1\nmig-configs: {x: [{devices: [" + "1" * 5000 + "], mig-enabled: true}]}",
        r"not valid YAML: ValueError: Exceeds the limit \(4300 digits\)",
    ),
}

BOUNDED_LOAD = r"""
import resource, sys
resource.setrlimit(resource.RLIMIT_CPU, (20, 20))
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from gpunode.mig import MigConfigError
from gpunode.mig.config import load
try:
    load(sys.argv[1], "x")
except MigConfigError as exc:
    print(exc)
"""


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_yaml_is_one_line_within_bounds(tmp_path, case):
    """Each in a fresh process under a CPU and address-space limit: before, the alias bomb
    ran out of memory showing the value, the merge bomb copying pairs, 5,000 '[' raised
    RecursionError and a 5,000-digit number ValueError, both as tracebacks."""
    import subprocess
    import sys

    doc, message = HOSTILE[case]
    path = tmp_path / "mig.yaml"
    path.write_text(doc)
    proc = subprocess.run(
        [sys.executable, "-c", BOUNDED_LOAD, str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stderr == "", (proc.returncode, proc.stderr[-600:])
    assert proc.stdout.count("\n") == 1 and len(proc.stdout) < 400, proc.stdout[:400]
    assert re.search(message, proc.stdout), proc.stdout


def test_describe_shows_small_values_whole_and_large_ones_by_type_and_size():
    assert describe([-1]) == "[-1]" and describe({"1g.10gb": 7}) == "{'1g.10gb': 7}"
    assert describe("x" * 100) == "'" + "x" * 27 + "... (a string of 100 characters)"
    assert describe(list(range(1000))).endswith("... (a list of 1000 items)")
    assert describe(10**400) == "<an integer of 1329 bits>"
    shared: list = ["lol"] * 9
    for _ in range(30):  # 9**30 'lol's if expanded
        shared = [shared] * 9
    assert len(describe(shared)) <= 60
