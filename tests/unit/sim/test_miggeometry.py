"""The MIG geometry's one table (sim/mig-geometry.json) and who reads it."""

from __future__ import annotations

import json

import pytest

from gpunode.sim import miggeometry
from gpunode.sim.miggeometry import CI_SHAPES, MIG_SHAPES
from gpunode.sim.profiles import load_profile, mock_payload


def test_the_table_is_an_a100s():
    names = [s.name(81920) for s in MIG_SHAPES]
    assert names == ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
    assert [(c.index, c.slices) for c in CI_SHAPES] == [(0, 1), (1, 2), (2, 3), (3, 4), (4, 7)]
    assert miggeometry.ci_spanning(3).index == 2
    assert (miggeometry.MIG_COMPUTE_SLICES, miggeometry.MIG_MEMORY_SLICES) == (7, 8)


def test_the_rules_read_from_the_table():
    """What the profiles' overlap check and the unit tests' fake NVML take from the table:
    the memory slots an instance takes, the compute instance profiles a GI offers (the
    mock's ci_profile rule: as many as fit, none wider than the GI)."""
    shapes = {s.name(81920): s for s in MIG_SHAPES}
    assert shapes["3g.40gb"].slots(4) == {4, 5, 6, 7}
    assert shapes["1g.20gb"].slots(2) == {2, 3} and shapes["7g.80gb"].slots(0) == set(range(8))
    assert [c.count_in(3) for c in CI_SHAPES] == [3, 1, 1, 0, 0]
    assert [c.count_in(7) for c in CI_SHAPES] == [7, 3, 2, 1, 1]


def test_the_mock_gets_the_table_through_the_payload():
    records = [ln.split("\t") for ln in mock_payload(load_profile("a100x2-mig")).splitlines()]

    def of(kind):
        return [dict(f.split("=", 1) for f in r[1:]) for r in records if r[0] == kind]

    cips = of("cip")
    assert cips == [{"index": str(c.index), "slices": str(c.slices), "step": str(c.step)}
                    for c in CI_SHAPES]  # fmt: skip
    (space,) = of("migspace")
    assert space == {"compute_slices": "7", "memory_slots": "8"}
    gips = of("gip")
    assert [int(f["id"]) for f in gips[: len(MIG_SHAPES)]] == [s.id for s in MIG_SHAPES]
    # a node without a MIG-capable GPU gets no MIG geometry
    assert "cip\t" not in mock_payload(load_profile("t4x2-faulty"))


def test_profile_indexes_out_of_order_are_refused(tmp_path):
    data = json.loads(miggeometry.TABLE.read_text())
    data["compute_instance_profiles"].reverse()
    bad = tmp_path / "mig-geometry.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"indexes must be 0, 1, \.\.\. in order") as info:
        miggeometry._load(bad)
    assert "\n" not in str(info.value)
