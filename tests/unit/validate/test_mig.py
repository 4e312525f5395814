"""mig.mode and mig.layout: the MIG layout found against a mig-parted config."""

from __future__ import annotations

import pytest

from gpunode.mig import MigConfigError
from gpunode.validate import mig
from gpunode.validate.expect import BadInput, build

from .fakes import healthy_gpu, inventory, mig_gpu

DOC = {
    "version": "v1",
    "mig-configs": {
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
        "mixed": [
            {"devices": [0], "mig-enabled": True,
             "mig-devices": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 1}},
            {"devices": [1], "mig-enabled": False, "mig-devices": {}},
        ],
        "twice": [
            {"devices": "all", "mig-enabled": False},
            {"devices": [1], "mig-enabled": False},
        ],
        "seven": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    },
}  # fmt: skip


def by(checks):
    return {(c.id, c.gpu): c for c in checks}


def test_layout_as_expected_passes_per_gpu():
    layout = mig.parse_layout(DOC, "mixed", "gpu_mig_configs")
    inv = inventory([mig_gpu(0), healthy_gpu(1, mig_mode=False, mig_mode_pending=False)])
    c = by(mig.evaluate(inv, layout))
    assert c[("mig.layout", 0)].status == "pass"
    assert c[("mig.layout", 0)].detail.startswith("1x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb, as config")
    assert c[("mig.layout", 1)].status == "pass" and "MIG off" in c[("mig.layout", 1)].detail
    assert c[("mig.mode", 0)].status == "pass" and c[("mig.mode", 0)].uuid == inv.gpus[0].uuid
    assert c[("mig.mode", 1)].detail == "MIG off (the GPU is used whole)"


def test_wrong_profiles_fail_naming_what_was_found_and_how_to_apply(tmp_path):
    path = tmp_path / "mig.yaml"
    path.write_text("version: v1\nmig-configs:\n  seven:\n    - devices: [0]\n"
                    "      mig-enabled: true\n      mig-devices: {1g.10gb: 7}\n")  # fmt: skip
    layout = mig.load_layout(str(path), "seven")
    c = by(mig.evaluate(inventory([mig_gpu(0), healthy_gpu(1)]), layout))
    bad = c[("mig.layout", 0)]
    assert bad.status == "fail"
    assert bad.detail.startswith("found 1x 1g.10gb, 1x 2g.20gb, 1x 3g.40gb; config 'seven'")
    assert f"gpunode mig apply --config-file {path} --config seven" in bad.detail
    assert c[("mig.layout", 1)].status == "skip" and "in no entry" in c[("mig.layout", 1)].detail


def test_mode_differs_fail_and_pending_mode_warns_with_the_reset():
    layout = mig.parse_layout(DOC, "all-disabled", "gpu_mig_configs")
    inv = inventory([mig_gpu(0), mig_gpu(1, pending=False)])
    c = by(mig.evaluate(inv, layout))
    assert c[("mig.layout", 0)].status == "fail"
    assert "MIG on, config 'all-disabled' (gpu_mig_configs) expects MIG off: apply it" in (
        c[("mig.layout", 0)].detail)  # fmt: skip
    assert "nvidia-smi -r -i 1" in c[("mig.layout", 1)].detail  # off is pending: reset
    warn = c[("mig.mode", 1)]
    assert warn.status == "warn" and warn.detail.startswith("MIG mode is on, off pending: reset")


def test_gpu_without_mig():
    t4 = healthy_gpu(0, name="Tesla T4")  # mig_mode None: NVML says NOT_SUPPORTED
    c = by(mig.evaluate(inventory([t4]), mig.parse_layout(DOC, "seven", "x")))
    assert ("mig.mode", 0) not in c
    assert c[("mig.layout", 0)].status == "fail"
    assert "Tesla T4 cannot do MIG" in c[("mig.layout", 0)].detail
    c = by(mig.evaluate(inventory([t4]), mig.parse_layout(DOC, "all-disabled", "x")))
    assert c[("mig.layout", 0)].status == "pass"
    # devices: all with MIG on skips a GPU that cannot do MIG, as gpunode mig apply does
    c = by(mig.evaluate(inventory([t4]), mig.parse_layout(
        {"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": True}]}},
        "a", "x")))  # fmt: skip
    assert c[("mig.layout", 0)].status == "pass" and "leaves it whole" in c[("mig.layout", 0)].detail


def test_a_gpu_two_entries_select_fails_and_device_filter_selects_by_pci_id():
    c = by(mig.evaluate(inventory([mig_gpu(0, mig_mode=False), healthy_gpu(1)]),
                        mig.parse_layout(DOC, "twice", "x")))  # fmt: skip
    assert c[("mig.layout", 0)].status == "pass"
    bad = c[("mig.layout", 1)]
    assert bad.status == "fail" and "selected by mig-configs.twice[0], mig-configs.twice[1]" in bad.detail
    doc = {"version": "v1", "mig-configs": {"f": [
        {"devices": "all", "device-filter": "0x20B210DE", "mig-enabled": False}]}}  # fmt: skip
    a100 = healthy_gpu(0, pci_device_id=0x20B210DE, mig_mode=False, mig_mode_pending=False)
    other = healthy_gpu(1, pci_device_id=0x1EB810DE)
    unknown = healthy_gpu(2)  # procfs inventory: no PCI device id
    c = by(mig.evaluate(inventory([a100, other, unknown]), mig.parse_layout(doc, "f", "x")))
    assert c[("mig.layout", 0)].status == "pass"
    assert c[("mig.layout", 1)].status == "skip" and "in no entry" in c[("mig.layout", 1)].detail
    assert c[("mig.layout", 2)].status == "skip" and "device-filter" in c[("mig.layout", 2)].detail


def test_no_layout_is_one_node_level_skip_naming_the_flags():
    (c,) = mig.evaluate(inventory([healthy_gpu(0)]), None)
    assert (c.id, c.gpu, c.status) == ("mig.layout", None, "skip")
    assert "--expect-mig-config FILE --expect-mig-name NAME" in c.detail
    assert "gpu_mig_config" in c.detail
    (c,) = mig.evaluate(None, None)
    assert c.status == "skip" and "no NVIDIA driver" in c.detail


@pytest.mark.parametrize(
    ("doc", "name", "message"),
    [
        ([], "x", "x-src: [] is not accepted; accepted: a mapping with keys version"),
        ({"version": "v2", "mig-configs": {}}, "x", "version: 'v2' is not accepted; accepted: v1"),
        ({"version": "v1", "mig-configs": {"a": [{"devices": "all", "mig-enabled": False}]}},
         "x", "x-src: no config 'x' under mig-configs; accepted: a"),
        ({"version": "v1", "mig-configs": {"x": [{"devices": "some", "mig-enabled": True}]}},
         "x", "mig-configs.x[0].devices: 'some' is not accepted; accepted: all or a list"),
        ({"version": "v1", "mig-configs": {"x": [{"devices": [0], "mig-enabled": "yes"}]}},
         "x", "mig-configs.x[0].mig-enabled: 'yes' is not accepted; accepted: true or false"),
        ({"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": True,
                                                  "mig-devices": {"1g.10gb": -1}}]}},
         "x", "mig-devices.1g.10gb: -1 is not accepted; accepted: a count (0 or more)"),
        ({"version": "v1", "mig-configs": {"x": [{"devices": "all", "mig-enabled": False,
                                                  "mig-devices": {"1g.10gb": 7}}]}},
         "x", "with mig-enabled: false"),
    ],
)  # fmt: skip
def test_bad_configs_are_one_line_naming_the_value(doc, name, message):
    """The file is parsed by gpunode.mig.config: validate refuses what gpunode mig refuses."""
    with pytest.raises(MigConfigError) as err:
        mig.parse_layout(doc, name, "x-src")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_expectation_from_flags_or_variables(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("version: v1\nmig-configs:\n  none: [{devices: all, mig-enabled: false}]\n")
    e = build(mig_config_file=str(path), mig_config_name="none")
    assert e.mig_layout.name == "none" and e.mig_layout.from_file
    assert "MIG layout" not in " ".join(e.missing())
    vars_file = tmp_path / "vars.json"
    import json

    vars_file.write_text(json.dumps({"gpu_mig_config": "seven", "gpu_mig_configs": DOC}))
    e = build(vars_file=str(vars_file))
    assert e.mig_layout.source == "gpu_mig_configs" and e.mig_layout.entries[0].devices == (0,)
    vars_file.write_text(json.dumps({"gpu_mig_config": "seven",
                                     "gpu_mig_configs": DOC["mig-configs"]}))  # fmt: skip
    assert build(vars_file=str(vars_file)).mig_layout.entries[0].mig_devices == {"1g.10gb": 7}
    vars_file.write_text(json.dumps({"gpu_mig_config": "none", "gpu_mig_config_path": str(path)}))
    assert build(vars_file=str(vars_file)).mig_layout.source == str(path)
    vars_file.write_text(json.dumps({"gpu_mig_config": "", "gpu_mig_configs": {}}))  # role defaults
    assert build(vars_file=str(vars_file)).mig_layout is None
    assert build().mig_layout is None
    assert "MIG layout (--expect-mig-config FILE" in " ".join(build().missing())


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"mig_config_file": "f.yaml"}, "--expect-mig-config is given without the config"),
        ({"mig_config_file": "/nonexistent/m.yaml", "mig_config_name": "x"},
         "/nonexistent/m.yaml: cannot be read (No such file or directory)"),
    ],
)  # fmt: skip
def test_expectation_half_given_is_bad_input(kw, message):
    with pytest.raises(BadInput) as err:
        build(**kw)
    assert str(err.value).startswith(message)


def test_config_missing_from_the_file_is_bad_input(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("version: v1\nmig-configs:\n  none: [{devices: all, mig-enabled: false}]\n")
    with pytest.raises(BadInput, match=r"no config 'on' under mig-configs; accepted: none$"):
        build(mig_config_file=str(path), mig_config_name="on")


def test_a_name_alone_reads_the_gpu_mig_roles_file(monkeypatch, tmp_path):
    from gpunode.validate import expect

    path = tmp_path / "mig-config.yaml"
    path.write_text("version: v1\nmig-configs:\n  none: [{devices: all, mig-enabled: false}]\n")
    monkeypatch.setattr(expect, "MIG_CONFIG_PATH", str(path))
    assert build(mig_config_name="none").mig_layout.source == str(path)
    path.unlink()
    with pytest.raises(BadInput, match=r"mig-config.yaml: cannot be read"):
        build(mig_config_name="none")


def test_mode_as_expected_now_but_not_after_a_reset_fails():
    layout = mig.parse_layout(DOC, "mixed", "gpu_mig_configs")
    c = by(mig.evaluate(inventory([mig_gpu(0, pending=False)]), layout))
    assert c[("mig.layout", 0)].status == "fail"
    assert c[("mig.layout", 0)].detail.startswith(
        "MIG on, off after the next GPU reset; config 'mixed' (gpu_mig_configs) expects MIG on: "
        "apply it with the gpu_mig role")
