"""mig-parted v1 files parsed strictly: every bad value one line naming it and what is
accepted."""

from __future__ import annotations

import pytest
import yaml

from gpunode.mig import MigConfigError
from gpunode.mig.config import load, parse

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
