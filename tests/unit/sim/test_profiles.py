"""Profile parsing: the shipped profiles and every kind of bad input."""

from __future__ import annotations

import copy

import pytest
import yaml

from gpunode.sim.profiles import (
    FAULTS,
    BusId,
    Fault,
    ProfileError,
    builtin_names,
    load_profile,
    mock_payload,
    nvswitches,
    parse_profile,
)

GOOD = {
    "name": "tiny",
    "driver": {"version": "535.261.03", "cuda_version": "12.2"},
    "defaults": {"model": "Tesla T4", "memory_mib": 15360, "compute_capability": "7.5"},
    "gpus": [
        {"uuid": "GPU-7c0e4b9a-2f5d-4e18-a3c6-b9d2e1f40511", "bus_id": "0000:3b:00.0"},
        {
            "uuid": "GPU-0b5f8d3e-c942-4a7b-8e1d-6f3a9c27e512",
            "bus_id": "d8:00.0",
            "faults": ["ecc_uncorrectable"],
        },
    ],
}


def test_shipped_profiles_are_the_promised_ones():
    assert set(builtin_names()) >= {"a100x4", "h100x8", "t4x2-faulty", "nogpu"}
    a100 = load_profile("a100x4")
    assert a100.driver.version == "535.261.03"
    assert [g.model for g in a100.gpus] == ["NVIDIA A100-SXM4-80GB"] * 4
    assert {g.memory_mib for g in a100.gpus} == {81920}
    h100 = load_profile("h100x8")
    assert (len(h100.gpus), h100.driver.version, h100.driver.cuda_version) == (
        8,
        "550.163.01",
        "12.4",
    )
    t4 = load_profile("t4x2-faulty")
    assert [bool(g.faults) for g in t4.gpus] == [False, True]
    nogpu = load_profile("nogpu")
    assert nogpu.driver is None and nogpu.gpus == ()


def test_a100x4_is_an_hgx_a100_4_gpu_board_without_nvswitch():
    """HGX A100 4-GPU: the four SXM4 GPUs fully connected by direct NVLinks, four between
    each pair (12 per GPU), no NVSwitch (so no fabric and no switch in PCI sysfs); the 8-GPU
    boards (h100x8 here) are the ones on NVSwitches."""
    a100 = load_profile("a100x4")
    assert nvswitches(a100) == []
    assert not any(g.fabric for g in a100.gpus)
    for g in a100.gpus:
        others = [o.bus_id for o in a100.gpus if o is not g]
        assert g.nvlinks == 12 and set(g.nvlink_peers) == set(others)
        assert all(g.nvlink_peers.count(o) == 4 for o in others)
    h100 = load_profile("h100x8")
    assert [(b.procfs, dev) for b, dev, _ in nvswitches(h100)] == [
        (f"0000:e{i}:00.0", 0x22A3) for i in range(3, 7)
    ]


def test_uuids_and_bus_ids_are_unique_across_shipped_profiles():
    uuids = [g.uuid for n in builtin_names() for g in load_profile(n).gpus]
    assert len(uuids) == len(set(uuids))


def test_defaults_apply_and_minor_defaults_to_position():
    p = parse_profile(copy.deepcopy(GOOD))
    assert [g.minor for g in p.gpus] == [0, 1]
    assert p.gpus[1].bus_id == BusId(0, 0xD8, 0, 0)
    assert p.gpus[1].bus_id.nvml == "00000000:D8:00.0"
    assert p.gpus[1].bus_id.procfs == "0000:d8:00.0"
    assert p.gpus[1].faults == {"ecc_uncorrectable"}
    assert p.gpus[0].architecture == 6  # Turing


@pytest.mark.parametrize(
    ("mutate", "expect"),
    [
        (lambda d: d["gpus"][0].update(uuid="GPU-1234"), "gpus[0].uuid: 'GPU-1234'"),
        (lambda d: d["gpus"][0].update(bus_id="07:00"), "gpus[0].bus_id: '07:00'"),
        (
            lambda d: d["gpus"][1].update(faults=["on_fire"]),
            "unknown faults: gpus[1].faults 'on_fire'; accepted: one of",
        ),
        (lambda d: d["gpus"][1].update(minor=0), "gpus[1].minor 0 duplicates gpus[0]"),
        (lambda d: d["gpus"][1].update(uuid=d["gpus"][0]["uuid"].upper()), "duplicates gpus[0]"),
        (lambda d: d["driver"].update(version="535"), "driver.version: '535'"),
        (lambda d: d["driver"].update(cuda_version="12"), "driver.cuda_version: '12'"),
        (lambda d: d["driver"].update(kernel_module="nouveau"), "'proprietary' or 'open'"),
        (lambda d: d.update(colour="green"), "unknown key 'colour'"),
        (lambda d: d["gpus"][0].update(memry_mib=1), "unknown key 'memry_mib'"),
        (lambda d: d["defaults"].pop("model"), "missing required key 'model'"),
        (lambda d: d.update(driver=None), "GPUs are listed but 'driver' is missing"),
        (lambda d: d["defaults"].update(memory_mib="lots"), "memory_mib: 'lots'"),
        (lambda d: d["defaults"].update(memory_mib=True), "memory_mib: True"),
        (lambda d: d["defaults"].update(memory_used_mib=20000), "exceeds memory_mib"),
        (
            lambda d: d["defaults"].update(model="a\tb"),
            "model: 'a\\tb' is not valid; expected printable",
        ),
        # what nvidia-smi could not show whole (NVML's buffers), or no real board has
        (lambda d: d["defaults"].update(model="A" * 200), "...' (200 characters) is not valid"),
        (
            lambda d: d["defaults"].update(serial="1" * 30),
            "serial: '111111111111111111111111111111'",
        ),
        (lambda d: d["defaults"].update(vbios="\x1b[31m"), "vbios: '\\x1b[31m' is not valid"),
        (
            lambda d: d["defaults"].update(memory_mib=0),
            "memory_mib: 0 is not valid; expected an integer >= 1",
        ),
        (
            lambda d: d["defaults"].update(pci_device_id=0x1234),
            "pci_device_id: 0x1234 is not an NVIDIA GPU",
        ),
        (lambda d: d.update(name="Bad Name"), "name: 'Bad Name'"),
        (lambda d: d["defaults"].update(brand="acme"), "brand: 'acme'"),
    ],
)
def test_bad_input_is_one_clear_line(mutate, expect):
    data = copy.deepcopy(GOOD)
    mutate(data)
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "x.yaml")
    msg = str(err.value)
    assert expect in msg
    assert "\n" not in msg
    assert msg.startswith("x.yaml")


def test_unknown_builtin_lists_the_choices():
    with pytest.raises(ProfileError, match=r"unknown profile 'a200x9'.*a100x4"):
        load_profile("a200x9")


def test_invalid_yaml_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ProfileError, match=r"bad.yaml: not valid YAML at line \d"):
        load_profile(bad)


def test_missing_file(tmp_path):
    with pytest.raises(ProfileError, match="does not exist"):
        load_profile(tmp_path / "nope.yaml")


def test_profile_file_roundtrip(tmp_path):
    f = tmp_path / "tiny.yaml"
    f.write_text(yaml.safe_dump(GOOD))
    assert load_profile(f).to_dict() == parse_profile(GOOD).to_dict()


def test_payload_carries_faults_as_nvml_counters():
    text = mock_payload(load_profile("t4x2-faulty"))
    lines = text.splitlines()
    assert lines[:3] == [
        "driver_version\t535.261.03",
        "nvml_version\t12.535.261.03",
        "cuda_driver_version\t12020",
    ]
    gpus = [dict(kv.split("=", 1) for kv in line.split("\t")[1:]) for line in lines[3:]]
    assert [g["uuid"] for g in gpus] == [g.uuid for g in load_profile("t4x2-faulty").gpus]
    assert gpus[0]["ecc_uncorrected_volatile"] == "0"
    assert gpus[1]["ecc_uncorrected_volatile"] == "2"
    assert gpus[1]["retired_pending"] == "1"
    assert gpus[1]["pci_device_id"] == "0x1EB810DE"


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_fault_has_its_entry_named_by_the_flag_it_raises(fault):
    """The one fault table: a fault added without what an operator must see of it (the
    checks and statuses sim.expected and the integration tests hold a node to) fails here."""
    from gpunode.nvidia import health

    entry = FAULTS[fault]
    assert isinstance(entry, Fault) and entry.text
    for table in (entry.shows, entry.on_card or entry.shows):
        assert table and set(table.values()) <= {"fail", "warn"}
        assert list(table) == [c for c in health.CHECKS if c in table]  # known, in order
    flags = {health.FLAGS[c, s] for t in (entry.shows, entry.on_card or {}) for c, s in t.items()
             if (c, s) in health.FLAGS}  # fmt: skip
    # the simulator speaks the product's words: a fault is the flag it raises (if any)
    assert fault in flags if flags else fault not in health.FLAGS.values()


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_every_fault_changes_the_payload_device_nodes_or_kernel_log(fault):
    from gpunode.sim.procfs import XID_OF_FAULT, render_kmsg

    good = copy.deepcopy(GOOD)
    if fault in ("nvlink_down", "fabric_manager_failed"):  # faults of an NVSwitch GPU
        good["gpus"][0] |= {"compute_capability": "9.0", "nvlinks": 18}
    data = copy.deepcopy(good)
    data["gpus"][0]["faults"] = [fault]
    base = parse_profile(good)
    faulty = parse_profile(data)
    if fault == "device_node_missing":
        assert faulty.gpus[0].faults == {"device_node_missing"}  # applied by the simulator
    elif fault.startswith("xid_"):  # the kernel log only: NVML shows nothing of these
        assert mock_payload(faulty) == mock_payload(base)
        assert render_kmsg(faulty) != render_kmsg(base) and fault in XID_OF_FAULT
    else:
        assert mock_payload(faulty) != mock_payload(base)


def test_no_driver_profile_has_empty_payload():
    assert mock_payload(load_profile("nogpu")) == ""


A100 = {"model": "NVIDIA A100-SXM4-80GB", "memory_mib": 81920, "compute_capability": "8.0"}
MIG = [
    {"profile": "3g.40gb", "placement": 4, "uuid": "MIG-2b8c1d7e-4f30-4a6b-9d15-7e3c2a1b0f01"},
    {"profile": "1g.10gb", "placement": 0, "uuid": "MIG-2b8c1d7e-4f30-4a6b-9d15-7e3c2a1b0f02"},
]


def mig_profile(mig, defaults=A100):
    data = copy.deepcopy(GOOD)
    data["defaults"] = dict(defaults)
    data["gpus"][1]["mig"] = copy.deepcopy(mig)
    return data


def test_mig_instances_parse_into_the_payload():
    p = parse_profile(mig_profile(MIG))
    plain, mig = p.gpus
    assert (plain.mig, plain.mig_instances, plain.mig_capable) == (False, (), True)
    assert mig.mig and [(i.profile, i.placement, i.gi_id) for i in mig.mig_instances] == [
        ("3g.40gb", 4, 2),
        ("1g.10gb", 0, 7),
    ]
    lines = mock_payload(p).splitlines()
    migs = [
        dict(kv.split("=", 1) for kv in ln.split("\t")[1:]) for ln in lines if ln[:4] == "mig\t"
    ]
    assert [(m["uuid"], m["gi"], m["profile_index"]) for m in migs] == [
        (MIG[0]["uuid"], "2", "2"),
        (MIG[1]["uuid"], "7", "0"),
    ]
    assert {m["parent"] for m in migs} == {mig.uuid}
    gips = [ln for ln in lines if ln.startswith("gip\t")]
    assert len(gips) == 2 * 7  # both GPUs are MIG-capable: their instance profiles
    assert "name=3g.40gb" in "".join(gips)
    # T4s are not MIG-capable: no instance profiles, MIG reported as not supported
    t4 = mock_payload(parse_profile(GOOD))
    assert "gip\t" not in t4 and "mig_capable=0" in t4
    assert parse_profile(mig_profile(True)).gpus[1].mig is True


@pytest.mark.parametrize(
    ("mig", "defaults", "expect"),
    [
        ("yes", A100, "gpus[1].mig: 'yes' is not valid; expected false, true or a list"),
        (True, GOOD["defaults"], "gpus[1].mig: MIG needs a MIG-capable GPU"),
        (
            [{"profile": "3g.40gb", "placement": 0}],
            A100,
            "gpus[1].mig[0]: missing required key 'uuid'",
        ),
        ([dict(MIG[0], colour=1)], A100, "gpus[1].mig[0]: unknown key 'colour'"),
        (
            [dict(MIG[0], profile="3g.20gb")],
            A100,
            "mig[0].profile: '3g.20gb' is not valid; expected one of 1g.10gb",
        ),
        (
            [dict(MIG[0], placement=2)],
            A100,
            "mig[0].placement: 2 is not valid; expected a start slot of 3g.40gb: 0, 4",
        ),
        ([dict(MIG[0], uuid="GPU-1")], A100, "mig[0].uuid: 'GPU-1' is not valid"),
        (
            [MIG[0], dict(MIG[1], placement=5)],
            A100,
            "gpus[1].mig[1]: placement 5 of 1g.10gb overlaps mig[0]",
        ),
        ([MIG[0], dict(MIG[1], uuid=MIG[0]["uuid"])], A100, "gpus[1].mig[1].uuid MIG-2b8c1d7e"),
        (
            [
                {"profile": "1g.10gb+me", "placement": 0, "uuid": MIG[0]["uuid"]},
                {"profile": "1g.10gb+me", "placement": 1, "uuid": MIG[1]["uuid"]},
            ],
            A100,
            "gpus[1].mig[1]: a GPU holds at most 1 1g.10gb+me instance(s); this is number 2",
        ),
    ],
)
def test_bad_mig_is_one_clear_line(mig, defaults, expect):
    data = mig_profile(mig, defaults)
    with pytest.raises(ProfileError) as err:
        parse_profile(data, "x.yaml")
    msg = str(err.value)
    assert expect in msg, msg
    assert "\n" not in msg and msg.startswith("x.yaml")


def renamed_profile() -> dict:
    """GOOD with three GPUs naming faults by their names before commit 524d374, and one
    name that never was a fault."""
    data = copy.deepcopy(GOOD)
    data["gpus"][0]["faults"] = ["pcie_degraded", "persistence_off"]
    data["gpus"][1]["faults"] = ["xid_nvlink", "on_fire"]
    data["gpus"].append({"uuid": "GPU-1c5f8d3e-c942-4a7b-8e1d-6f3a9c27e513",
                         "bus_id": "0000:af:00.0", "faults": ["xid_application"]})  # fmt: skip
    return data


def test_every_bad_fault_is_listed_with_its_new_name():
    """Before: only the first bad name (gpus[0]'s pcie_degraded), without its new name."""
    with pytest.raises(ProfileError) as err:
        parse_profile(renamed_profile(), "x.yaml")
    msg = str(err.value)
    assert msg == (
        "x.yaml: unknown faults: gpus[0].faults 'pcie_degraded' (renamed "
        "pcie_link_degraded), gpus[1].faults 'xid_nvlink' (renamed xid_error), "
        "gpus[1].faults 'on_fire', gpus[2].faults 'xid_application' (renamed "
        f"xid_application_error); accepted: one of {', '.join(sorted(FAULTS))}"
    )


def sim_inventory(tmp_path, profiles: dict[str, str]):
    """An inventory of simulated nodes, each with its profile file written from ``profiles``."""
    hosts = {}
    for node, text in profiles.items():
        (tmp_path / f"{node}.yaml").write_text(text)
        hosts[node] = {"gpunode_sim_profile": str(tmp_path / f"{node}.yaml")}
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return inv


def test_profiles_are_checked_before_any_node_starts(tmp_path, monkeypatch, capsys):
    """Before: `gpunode sim up` built the wheels, started node1, installed gpunode and failed
    applying the profile in it, leaving the container running, naming one bad fault."""
    from gpunode.cli.main import main
    from gpunode.sim import cluster, images

    def reached(*args, **kwargs):
        raise AssertionError("reached a build or a docker call with an invalid profile")

    for module, name in ((cluster.Artifacts, "build"), (images, "build"), (cluster, "docker"),
                         (cluster, "exec_"), (cluster, "start_node")):  # fmt: skip
        monkeypatch.setattr(module, name, reached)
    bad = renamed_profile()
    good = copy.deepcopy(GOOD)
    good["name"] = "fine"
    inv = sim_inventory(tmp_path, {"node1": yaml.safe_dump(good), "node2": yaml.safe_dump(bad),
                                   "node3": "name: [unclosed\n"})  # fmt: skip
    with pytest.raises(ProfileError) as err:
        cluster.up(inv, artifacts=None)
    msg = str(err.value)
    assert "\n" not in msg and "node1" not in msg
    assert msg.startswith("node2: node2.yaml: unknown faults: gpus[0].faults 'pcie_degraded' "
                          "(renamed pcie_link_degraded), ")  # fmt: skip
    assert "(renamed xid_application_error)" in msg
    assert "; node3: node3.yaml: not valid YAML at line 2" in msg

    capsys.readouterr()
    rc = main(["sim", "up", "-i", str(inv)])  # the CLI's path checks before building
    err = capsys.readouterr().err
    assert rc == 2 and err == f"gpunode: error: {msg}\n"
