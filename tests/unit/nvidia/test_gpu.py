"""gpunode.nvidia.gpu: the one record of a GPU, and the shapes derived from it held in step
with it (the runtime's cached GpuFacts; validate's result row is tests/unit/validate/
test_model.py's)."""

from __future__ import annotations

from gpunode.nvidia import gpu as record
from gpunode.nvidia.facts import GpuFacts, MigFacts, NodeFacts
from gpunode.nvidia.gpu import EccErrors, Fabric, Gpu, MigView, PcieLink
from gpunode.util.record import fields

MIG = MigFacts(0, "MIG-a", 1, 0, "7g.80gb", 81920)


def test_the_cached_facts_are_the_records_fields():
    """Every GpuFacts field is a record field of the same name (FACTS says how), so a fact
    added to the cache is read by the one walk, not beside it."""
    assert list(record.FACTS) == list(fields(GpuFacts))
    assert set(fields(GpuFacts)) <= set(fields(Gpu)) | {"mig", "mig_enabled"}
    assert {"mig_devices", "mig_mode"} <= set(fields(Gpu))  # what mig and mig_enabled read
    g = Gpu(2, 5, "GPU-x", "NVIDIA A100-SXM4-80GB", "00000000:07:00.0", compute_capability="8.0",
            brand="tesla", mig_mode=True, mig_mode_pending=True, mig_devices=[MIG])  # fmt: skip
    assert g.facts() == GpuFacts(2, 5, "GPU-x", "00000000:07:00.0", "NVIDIA A100-SXM4-80GB",
                                 "tesla", "8.0", True, (MIG,))  # fmt: skip
    # what NVML cannot tell is "" in the cache, as before; a pending MIG mode is not on
    bare = Gpu(0, 0, "GPU-y", None, "00000000:0F:00.0", mig_mode=False, mig_mode_pending=True)
    assert bare.facts() == GpuFacts(0, 0, "GPU-y", "00000000:0F:00.0")
    node = NodeFacts("535.261.03", "12.2", (g.facts(), bare.facts()))
    assert NodeFacts.from_dict(node.to_dict()) == node  # the cache takes what the record gives


def test_sub_records_show_the_fields_nvml_reported():
    g = Gpu(0, 0, "GPU-x", "T4", "00000000:07:00.0")
    shown = g.to_dict()
    assert [shown[k] for k in record.SUB_RECORDS] == [{}, {}, {}, {}, {}]
    g.pcie_link = PcieLink(gen=3, width=16)
    g.ecc_errors = EccErrors(uncorrected_volatile=0)
    g.fabric = Fabric(3, 0, "Success")
    shown = g.to_dict()
    assert shown["pcie_link"] == {"gen": 3, "width": 16}
    assert shown["ecc_errors"] == {"uncorrected_volatile": 0}
    assert shown["fabric"] == {"state": 3, "status": 0, "status_text": "Success"}
    assert not set(record.NOT_SHOWN) & set(shown)
    assert list(shown) == [f for f in fields(Gpu) if f not in record.NOT_SHOWN]


def test_the_mig_planners_gpu_holds_the_record():
    """`gpunode mig` holds the record the one walk fills (identity, MIG mode) and adds only
    what it changes (a handle, the GI profiles and the GI/CI tree): none of its fields is a
    fact of the record under its own name, and what it shows of those facts is the
    record's."""
    from gpunode.mig.layout import MigGpu

    assert set(fields(MigGpu)) == {"gpu", "handle", "profiles", "instances"}
    g = Gpu(3, 3, "GPU-x", "NVIDIA A100", "00000000:07:00.0", pci_device_id=0x20B210DE,
            mig_mode=True, mig_mode_pending=False)  # fmt: skip
    m = MigGpu(g)
    shown = (m.index, m.uuid, m.name, m.pci_device_id, m.mig_capable, m.mig_enabled,
             m.mig_pending)  # fmt: skip
    assert shown == (3, "GPU-x", "NVIDIA A100", 0x20B210DE, True, True, False)
    assert not MigGpu(Gpu(0, 0, "GPU-y", "Tesla T4", "00000000:08:00.0")).mig_capable


def test_the_records_mig_view_counts_its_mig_devices_by_profile():
    """What validate's mig.layout judges (gpunode.mig.layout.difference): the modes and the
    MIG devices by profile, an unknown profile as "?"."""
    small = MigFacts(1, "MIG-b", 9, 0, "1g.10gb", 9728)
    g = Gpu(0, 0, "GPU-x", None, "00000000:07:00.0", mig_mode=True, mig_mode_pending=False,
            mig_devices=[MIG, small, small, MigFacts(3, "MIG-c", 10, 0)])  # fmt: skip
    assert g.mig_view() == MigView(True, True, False, {"7g.80gb": 1, "1g.10gb": 2, "?": 1})
    whole = Gpu(1, 1, "GPU-y", None, "00000000:0F:00.0")
    assert whole.mig_view() == MigView(False, False, False, {})
