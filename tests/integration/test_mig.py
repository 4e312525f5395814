"""`gpunode mig` on a simulated node: layouts applied through the node's NVML (the mock
keeps MIG as driver state in the node), idempotent, asserted, exported, refused in one line
with nothing changed; the MIG devices then enumerated by NVML are the layout's."""

from __future__ import annotations

import json
import shlex

import pytest

pytestmark = pytest.mark.integration

CONFIG = """\
version: v1
mig-configs:
  test-layout:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    - devices: [2, 3]
      mig-enabled: false
  too-much:
    - devices: [2]
      mig-enabled: true
      mig-devices: {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}
  all-disabled:
    - devices: all
      mig-enabled: false
"""

MIG_DEVICES = """
import json
from gpunode.nvidia import nvml
with nvml.Session() as nv:
    print(json.dumps([sorted(m.profile for m in nvml.gpu_facts(nv, i, h).mig)
                      for i, h, _ in nvml.handles(nv)]))
"""

FILE = "/etc/gpunode/mig-test.yaml"


def test_apply_twice_assert_export_refuse(node):
    node.sh(f"mkdir -p /etc/gpunode && printf %s {shlex.quote(CONFIG)} > {FILE}")
    mig = f"gpunode mig apply --config-file {FILE} --json --config"
    try:
        first = node.json(f"{mig} test-layout")
        assert first["changed"] is True
        assert [g["changed"] for g in first["gpus"]] == [True, True, False, False]
        assert first["gpus"][1]["after"] == {
            "mig_enabled": True, "devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}}
        again = node.json(f"{mig} test-layout")
        assert again["changed"] is False and again["diff"] == ""
        ok = node.sh(f"gpunode mig assert --config-file {FILE} --config test-layout", check=False)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert json.loads(node.sh(f"/opt/gpunode/bin/python -c {shlex.quote(MIG_DEVICES)}")
                          .stdout) == [["1g.10gb"] * 7,
                                       ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"], [], []]
        before = node.sh("gpunode mig export").stdout
        bad = node.sh(f"{mig} too-much", check=False)
        assert (bad.returncode, bad.stdout) == (2, "")
        assert bad.stderr == (
            "gpunode: error: mig-configs.too-much[0]: GPU 2 (NVIDIA A100-SXM4-80GB): 4g.40gb x1 "
            "+ 3g.40gb x1 + 1g.10gb x1 needs 8 compute slices, the GPU has 7\n")
        assert node.sh("gpunode mig export").stdout == before
        not_applied = node.sh(f"gpunode mig assert -f {FILE} -c all-disabled", check=False)
        assert not_applied.returncode == 1
        assert not_applied.stdout == (
            "selected configuration not currently applied: GPU 0: MIG mode disabled wanted, "
            "it is enabled\n")
    finally:
        off = node.sh(f"{mig} all-disabled", check=False)
    assert off.returncode == 0, off.stderr
    assert node.sh(f"gpunode mig assert -f {FILE} -c all-disabled", check=False).returncode == 0


KEEP = """\
version: v1
mig-configs:
  add-one:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
"""

MIG_UUIDS = """
import json
from gpunode.nvidia import nvml
with nvml.Session() as nv:
    print(json.dumps([{m.uuid: m.profile for m in nvml.gpu_facts(nv, i, h).mig}
                      for i, h, _ in nvml.handles(nv)]))
"""


def test_mig_profile_node_keeps_what_fits(node):
    """On the a100x2-mig profile (GPU 0: 3g.40gb at 4, 2g.20gb at 0, 1g.10gb at 2), adding
    a 1g.10gb creates one instance and keeps the three MIG devices and their UUIDs; GPU 1,
    not selected, is not touched."""
    node.apply("a100x2-mig")  # the fixture puts a100x4 back afterwards
    path = "/etc/gpunode/mig-keep.yaml"
    node.sh(f"mkdir -p /etc/gpunode && printf %s {shlex.quote(KEEP)} > {path}")
    probe = f"/opt/gpunode/bin/python -c {shlex.quote(MIG_UUIDS)}"
    before = json.loads(node.sh(probe).stdout)
    assert sorted(before[0].values()) == ["1g.10gb", "2g.20gb", "3g.40gb"]
    assert json.loads(node.sh("gpunode mig export --json").stdout)["mig-configs"]["current"] == [
        {"devices": [0], "mig-enabled": True,
         "mig-devices": {"1g.10gb": 1, "2g.20gb": 1, "3g.40gb": 1}},
        {"devices": [1], "mig-enabled": False, "mig-devices": {}},
    ]
    out = node.json(f"gpunode mig apply -f {path} -c add-one --json")
    assert [g["changed"] for g in out["gpus"]] == [True, False]
    assert (out["gpus"][0]["destroy"], out["gpus"][0]["create"]) == ([], ["1g.10gb at 3"])
    after = json.loads(node.sh(probe).stdout)
    assert set(before[0]) < set(after[0]) and len(after[0]) == 4
    assert after[1] == before[1] == {}
    assert node.json(f"gpunode mig apply -f {path} -c add-one --json")["changed"] is False
