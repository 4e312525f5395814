"""`gpunode mig apply|assert|export` through cli.main on a fake NVML: the contract's flags,
exit codes, JSON keys and one-line errors (docs: /work/notes/mig-contract.md section 6)."""

from __future__ import annotations

import json

import pytest
import yaml

from gpunode.cli.main import main
from gpunode.nvidia import nvml

from ..mig.fakenvml import FakeNvml, Gpu, layout_of

CONFIG = """
version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  too-much:
    - devices: [1]
      mig-enabled: true
      mig-devices: {"3g.40gb": 2, "2g.20gb": 1}
  all-disabled:
    - devices: all
      mig-enabled: false
"""


@pytest.fixture
def node(monkeypatch, tmp_path):
    fake = FakeNvml([Gpu(0), Gpu(1)])

    class FakeSession:
        def __init__(self, library=None):
            pass

        def __enter__(self):
            return fake

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(nvml, "Session", FakeSession)
    path = tmp_path / "mig.yaml"
    path.write_text(CONFIG)
    fake.file = str(path)
    fake.lock = ["--lock-file", str(tmp_path / "mig.lock")]
    return fake


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_apply_json_then_unchanged_then_assert(node, capsys):
    args = ["mig", "apply", "--config-file", node.file, "--config", "all-1g.10gb", "--json"]
    code, out, err = run(capsys, *args, *node.lock)
    assert (code, err) == (0, "")
    data = json.loads(out)
    assert {"changed", "config", "diff", "gpus"} <= set(data)
    assert data["changed"] is True and data["config"] == "all-1g.10gb"
    gpu = data["gpus"][0]
    assert {"index", "uuid", "changed", "before", "after"} <= set(gpu)
    assert gpu["after"] == {"mig_enabled": True, "devices": {"1g.10gb": 7}}
    assert [layout_of(g) for g in node.gpus] == [{"1g.10gb": 7}] * 2
    code, out, _ = run(capsys, *args, *node.lock)
    assert code == 0 and json.loads(out)["changed"] is False
    code, out, _ = run(capsys, "mig", "assert", "-f", node.file, "-c", "all-1g.10gb")
    assert code == 0 and out == "selected configuration all-1g.10gb is applied\n"


def test_assert_not_applied(node, capsys):
    code, out, err = run(capsys, "mig", "assert", "--config-file", node.file,
                         "--config", "all-1g.10gb")
    assert code == 1 and err == ""
    assert out == ("selected configuration not currently applied: GPU 0: MIG mode enabled "
                   "wanted, it is disabled\n")
    code, out, err = run(capsys, "mig", "assert", "-f", node.file, "-c", "all-disabled",
                         "--json")
    assert code == 0 and json.loads(out) == {
        "applied": True, "config": "all-disabled", "difference": None}


def test_dry_run_text(node, capsys):
    code, out, _ = run(capsys, "mig", "apply", "-f", node.file, "-c", "all-1g.10gb",
                       "--dry-run", *node.lock)
    assert code == 0 and node.writes == []
    assert out.startswith("GPU 0 (GPU-00000000-0000-4000-8000-000000000000): would change\n")
    assert "+  1g.10gb: 7\n" in out


def test_impossible_layout_exit_2_nothing_changed(node, capsys):
    code, out, err = run(capsys, "mig", "apply", "-f", node.file, "-c", "too-much", *node.lock)
    assert (code, out) == (2, "")
    assert err == ("gpunode: error: mig-configs.too-much[0]: GPU 1 (NVIDIA A100-SXM4-80GB): "
                   "3g.40gb x2 + 2g.20gb x1 needs 8 compute slices, the GPU has 7\n")
    assert node.writes == []


def test_bad_input_exit_2(node, capsys, tmp_path):
    code, _, err = run(capsys, "mig", "apply", "-f", node.file, "-c", "nope", *node.lock)
    assert code == 2 and err.count("\n") == 1 and "no config 'nope' under mig-configs" in err
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: v1\nmig-configs: {x: [{devices: all, mig-enabled: maybe}]}\n")
    code, _, err = run(capsys, "mig", "assert", "-f", str(bad), "-c", "x")
    assert code == 2 and err == ("gpunode: error: mig-configs.x[0].mig-enabled: 'maybe' is not "
                                 "accepted; accepted: true or false\n")
    code, _, err = run(capsys, "mig", "apply", "-c", "x")
    assert code == 2 and "--config-file" in err


def test_not_root_exit_1(node, capsys):
    node.root = False
    code, _, err = run(capsys, "mig", "apply", "-f", node.file, "-c", "all-1g.10gb", *node.lock)
    assert code == 1
    assert err == ("gpunode: error: GPU 0: enabling MIG mode needs root "
                   "(NVML: Insufficient Permissions)\n")


def test_no_driver_exit_3(monkeypatch, capsys):
    class NoDriver:
        def __init__(self, library=None):
            pass

        def __enter__(self):
            raise nvml.NvmlError("NVML cannot be initialised: Driver Not Loaded")

    monkeypatch.setattr(nvml, "Session", NoDriver)
    code, _, err = run(capsys, "mig", "export")
    assert code == 3 and err == "gpunode: error: NVML cannot be initialised: Driver Not Loaded\n"


def test_export_yaml_and_json(node, capsys):
    node.gpus[0].current = node.gpus[0].pending = 1
    node.make(0, "7g.80gb", 0)
    code, out, _ = run(capsys, "mig", "export")
    assert code == 0
    doc = yaml.safe_load(out)
    assert doc == {"version": "v1", "mig-configs": {"current": [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}},
        {"devices": [1], "mig-enabled": False, "mig-devices": {}}]}}
    code, out, _ = run(capsys, "mig", "export", "--json")
    assert json.loads(out) == doc
