"""Layouts read through (a fake) NVML, the plan, placements solved with backtracking, and
every layout a GPU cannot hold refused in one line before anything changes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpunode.mig import MigConfigError, layout
from gpunode.mig.config import Entry
from gpunode.nvidia import nvml
from gpunode.sim.miggeometry import MIG_SHAPES

from .fakenvml import FakeNvml, Gpu


def mig_entry(devices=None, enabled=True, device_filter=None, **counts):
    return Entry("mig-configs.c[0]", devices, device_filter, enabled, counts)


def node(*gpus, **kw):
    nv = FakeNvml(gpus or [Gpu(0, mig=True)], **kw)
    return nv, layout.read_node(nv)


def test_profiles_named_as_nvidia_smi_prints_them():
    _nv, (gpu,) = node()
    assert [p.name for p in gpu.profiles] == [
        "1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "1g.10gb+me", "1g.20gb"]
    one = gpu.profiles[0]
    assert (one.id, one.slices, one.instances, one.placements[:2]) == (19, 1, 7, ((0, 1), (1, 1)))


class _Info:
    def __init__(self, slices, mb, name=b""):
        self.sliceCount, self.memorySizeMB, self.name = slices, mb, name


@pytest.mark.parametrize(
    "info, index, total, name",
    [
        (_Info(1, 9728, b"MIG 1g.10gb"), 0, 80 * 1024**3, "1g.10gb"),
        # no name (NVML's v1 info): go-nvlib's rule from slices and memory
        (_Info(1, 9728), 0, 80 * 1024**3, "1g.10gb"),
        (_Info(3, 40192), 2, 80 * 1024**3, "3g.40gb"),
        (_Info(1, 9728), 7, 80 * 1024**3, "1g.10gb+me"),
        (_Info(1, 4864), 0, 40536 * 1024**2, "1g.5gb"),  # A100 40GB
        (_Info(1, 11008), 0, 95830 * 1024**2, "1g.12gb"),  # H100 94GB NVL
        (_Info(2, 11968), 1, 24576 * 1024**2, "2g.12gb"),  # A30
    ],
)
def test_profile_names_from_nvml(info, index, total, name):
    assert nvml._gi_name(info, index, total) == name


def test_read_instances_and_devices():
    nv = FakeNvml([Gpu(0, mig=True)])
    nv.make(0, "3g.40gb", 4)
    nv.make(0, "1g.10gb", 0)
    nv.make(0, "2g.20gb", 2, ci_slices=[1, 1])  # two 1-slice CIs in one GI
    (gpu,) = layout.read_node(nv)
    assert [(gi.id, gi.start, gi.size, len(gi.cis)) for gi in gpu.instances] == [
        (2, 4, 4, 1), (4, 2, 2, 2), (7, 0, 1, 1)]
    assert layout.devices(gpu) == {"1c.2g.20gb": 2, "1g.10gb": 1, "3g.40gb": 1}
    assert layout.state(gpu) == {"mig_enabled": True, "devices": layout.devices(gpu)}


def test_seven_1g_on_an_a100():
    _, (gpu,) = node(Gpu(0, mig=False))
    p = layout.plan_gpu(gpu, mig_entry(**{"1g.10gb": 7}))
    assert p.changed and p.set_mode is True and not p.destroy
    assert [(prof.name, start) for prof, start in p.create] == [
        ("1g.10gb", s) for s in range(7)]
    assert p.after == {"mig_enabled": True, "devices": {"1g.10gb": 7}}


def test_mixed_needs_backtracking():
    # 3g at 0 leaves 2g one place (4) and the 1g's none: the solver must move 3g to 4
    _, (gpu,) = node()
    p = layout.plan_gpu(gpu, mig_entry(**{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}))
    assert sorted((prof.name, s) for prof, s in p.create) == [
        ("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4)]
    # and with four 1g's the 3g must also go to 4
    p = layout.plan_gpu(gpu, mig_entry(**{"3g.40gb": 1, "1g.10gb": 4}))
    assert sorted((prof.name, s) for prof, s in p.create) == [
        ("1g.10gb", 0), ("1g.10gb", 1), ("1g.10gb", 2), ("1g.10gb", 3), ("3g.40gb", 4)]


def test_overfull_refused_in_one_line():
    _, (gpu,) = node()
    with pytest.raises(MigConfigError) as exc:
        layout.plan_gpu(gpu, mig_entry(**{"3g.40gb": 2, "2g.20gb": 1}))
    assert str(exc.value) == (
        "mig-configs.c[0]: GPU 0 (NVIDIA A100-SXM4-80GB): 3g.40gb x2 + 2g.20gb x1 needs 8 "
        "compute slices, the GPU has 7")
    with pytest.raises(MigConfigError) as exc:
        layout.plan_gpu(gpu, mig_entry(**{"1g.20gb": 4, "1g.10gb": 1}))
    assert str(exc.value) == (
        "mig-configs.c[0]: GPU 0 (NVIDIA A100-SXM4-80GB): 1g.20gb x4 + 1g.10gb x1 needs 9 "
        "memory slices, the GPU has 8")
    with pytest.raises(MigConfigError) as exc:
        layout.plan_gpu(gpu, mig_entry(**{"1g.10gb": 8}))
    assert str(exc.value) == (
        "mig-configs.c[0]: GPU 0 (NVIDIA A100-SXM4-80GB): mig-devices 1g.10gb: 8 wanted, "
        "this GPU holds at most 7")


def test_slices_and_memory_fit_but_placements_do_not():
    # a GPU whose 3g profile starts only at 0: 3g + 2g + 2g has 7 slices and 8 memory
    # slots, but with 3g on 0-3 only one 2g (at 4) is left a place
    shapes = tuple(replace(s, starts=(0,)) if s.slices == 3 else s for s in MIG_SHAPES)
    _, (gpu,) = node(Gpu(0, "NVIDIA Test-GPU", mig=True, shapes=shapes))
    with pytest.raises(MigConfigError) as exc:
        layout.plan_gpu(gpu, mig_entry(**{"3g.40gb": 1, "2g.20gb": 2}))
    assert str(exc.value) == (
        "mig-configs.c[0]: GPU 0 (NVIDIA Test-GPU): 3g.40gb x1 + 2g.20gb x2 has no valid "
        "placement (start slots: 3g.40gb at 0; 2g.20gb at 0,2,4)")


def test_unknown_profile_refused():
    _, (gpu,) = node()
    with pytest.raises(MigConfigError) as exc:
        layout.plan_gpu(gpu, mig_entry(**{"1g.5gb": 7}))  # an A100 40GB's profile
    assert str(exc.value) == (
        "mig-configs.c[0]: GPU 0 (NVIDIA A100-SXM4-80GB): mig-devices '1g.5gb' is not a GPU "
        "instance profile of this GPU; accepted: 1g.10gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb, "
        "1g.10gb+me, 1g.20gb")


def test_not_mig_capable():
    _, gpus = node(Gpu(0, "Tesla T4", mig_capable=False, pci_device_id=0x1EB810DE))
    assert not layout.plan_gpu(gpus[0], mig_entry(enabled=False)).changed
    # devices: all skips it (as mig-parted does); named by index it is refused
    skipped = layout.plan_gpu(gpus[0], mig_entry(**{"1g.10gb": 1}))
    assert not skipped.changed and skipped.after == {"mig_enabled": False, "devices": {}}
    with pytest.raises(MigConfigError, match=r"GPU 0 \(Tesla T4\): cannot do MIG; accepted "
                       r"for this GPU: mig-enabled: false$"):
        layout.plan_gpu(gpus[0], mig_entry(devices=(0,), **{"1g.10gb": 1}))


def test_idempotent_plan_empty_when_current_is_desired():
    nv = FakeNvml([Gpu(0, mig=True)])
    for s in range(7):
        nv.make(0, "1g.10gb", s)
    (gpu,) = layout.read_node(nv)
    p = layout.plan_gpu(gpu, mig_entry(**{"1g.10gb": 7}))
    assert not p.changed and not p.create and not p.destroy and p.set_mode is None
    assert layout.first_difference([p]) is None


def test_kept_instances_stay_and_misfits_rebuild():
    nv = FakeNvml([Gpu(0, mig=True)])
    nv.make(0, "3g.40gb", 4)
    nv.make(0, "1g.10gb", 0)
    (gpu,) = layout.read_node(nv)
    p = layout.plan_gpu(gpu, mig_entry(**{"3g.40gb": 1, "1g.10gb": 4}))
    assert p.destroy == () and sorted(s for _, s in p.create) == [1, 2, 3]
    # 3g on 0-3 leaves no room for four 1g's: the GPU is rebuilt
    nv = FakeNvml([Gpu(0, mig=True)])
    nv.make(0, "3g.40gb", 0)
    (gpu,) = layout.read_node(nv)
    p = layout.plan_gpu(gpu, mig_entry(**{"3g.40gb": 1, "1g.10gb": 4}))
    assert [gi.start for gi in p.destroy] == [0]
    assert sorted((prof.name, s) for prof, s in p.create)[-1] == ("3g.40gb", 4)
    # a GI with two CIs is not a device gpunode keeps, even of a wanted profile
    nv = FakeNvml([Gpu(0, mig=True)])
    nv.make(0, "2g.20gb", 0, ci_slices=[1, 1])
    (gpu,) = layout.read_node(nv)
    p = layout.plan_gpu(gpu, mig_entry(**{"2g.20gb": 1}))
    assert p.changed and [gi.start for gi in p.destroy] == [0] and len(p.create) == 1
    assert layout.first_difference([p]) == "GPU 0: 1c.2g.20gb: 0 wanted, 2 present"


def test_mig_enabled_false_destroys_then_disables():
    nv = FakeNvml([Gpu(0, mig=True)])
    nv.make(0, "7g.80gb", 0)
    (gpu,) = layout.read_node(nv)
    p = layout.plan_gpu(gpu, mig_entry(enabled=False))
    assert p.changed and p.set_mode is False and len(p.destroy) == 1
    assert p.after == {"mig_enabled": False, "devices": {}}
    assert layout.first_difference([p]) == "GPU 0: MIG mode disabled wanted, it is enabled"


def test_selecting_is_the_entries_of_one_gpu():
    """The one selection `gpunode mig` (select) and validate's mig.layout use: every entry
    selecting the GPU, and None where a device-filter cannot be judged without its id."""
    a100 = mig_entry(device_filter=(0x20B210DE,))
    one = Entry("mig-configs.c[1]", (1,), None, False, {})
    assert layout.selecting((a100, one), 0, 0x20B210DE) == [a100]
    assert layout.selecting((a100, one), 1, 0x20B210DE) == [a100, one]
    assert layout.selecting((a100, one), 1, 0x1EB810DE) == [one]
    assert layout.selecting((a100, one), 2, 0x1EB810DE) == []
    assert layout.selecting((a100, one), 1, None) is None  # the filter may select it
    assert layout.selecting((one, mig_entry(devices=(0,), device_filter=(1,))), 1, None) == [one]


def test_select_devices_and_filter():
    a100 = [Gpu(i) for i in range(2)]
    t4 = Gpu(2, "Tesla T4", mig_capable=False, pci_device_id=0x1EB810DE)
    _nv, gpus = node(*a100, t4)
    assert set(layout.select(gpus, (mig_entry(),))) == {0, 1, 2}
    assert set(layout.select(gpus, (mig_entry(devices=(0, 1)),))) == {0, 1}
    assert set(layout.select(gpus, (mig_entry(devices=(1, 7)),))) == {1}  # 7: not here
    only_a100 = mig_entry(device_filter=(0x20B210DE,))
    assert set(layout.select(gpus, (only_a100,))) == {0, 1}
    plans = layout.plan(gpus, (mig_entry(devices=(1,), **{"7g.80gb": 1}),))
    assert [p.changed for p in plans] == [False, True, False]
    assert plans[0].entry is None and plans[0].after == plans[0].before
    twice = (mig_entry(), Entry("mig-configs.c[1]", (1,), None, False, {}))
    with pytest.raises(MigConfigError) as exc:
        layout.select(gpus, twice)
    assert str(exc.value) == ("mig-configs.c[1]: GPU 1 is already selected by "
                              "mig-configs.c[0]; accepted: each GPU in one entry")


def test_diff_text():
    _, gpus = node(Gpu(0, mig=False), Gpu(1, mig=False))
    plans = layout.plan(gpus, (mig_entry(devices=(0,), **{"3g.40gb": 2}),))
    assert layout.diff(plans) == (
        "--- GPU 0 (GPU-00000000-0000-4000-8000-000000000000) before\n"
        "+++ GPU 0 (GPU-00000000-0000-4000-8000-000000000000) after\n"
        "@@ -1 +1,3 @@\n"
        "-mig-enabled: false\n"
        "+mig-enabled: true\n"
        "+mig-devices:\n"
        "+  3g.40gb: 2\n")


def test_profiles_only_with_mig_on_are_deferred():
    _, (gpu,) = node(Gpu(0, mig=False), profiles_need_mig=True)
    assert gpu.profiles is None
    p = layout.plan_gpu(gpu, mig_entry(**{"1g.10gb": 7}))
    assert p.deferred and p.set_mode is True and p.changed


def test_place_finds_every_placement_that_exists():
    """On the A100's profiles, every multiset of up to four instances: place() finds a
    placement exactly when brute force over all placements does."""
    import itertools

    _, (gpu,) = node()
    profiles = gpu.profiles
    for size in range(1, 5):
        for wanted in itertools.combinations_with_replacement(profiles, size):
            exists = any(
                _disjoint(choice)
                for choice in itertools.product(*[p.placements for p in wanted])
            )
            placed = layout.place(list(wanted))
            assert (placed is not None) == exists, [p.name for p in wanted]
            if placed is not None:
                assert _disjoint([(s, p.placements[0][1]) for p, s in placed])
                assert sorted(p.id for p, _ in placed) == sorted(p.id for p in wanted)


def _disjoint(placements) -> bool:
    slots = [s for start, size in placements for s in range(start, start + size)]
    return len(slots) == len(set(slots))


# ------------------------------------------------------------------ one answer
# `gpunode mig assert` (the plan's first_difference) and `gpunode validate`'s mig.layout
# answer "is this layout applied?" for the same GPU state alike. Each case is one state
# written twice: as NVML shows it to gpunode mig (the fake) and as the inventory records
# it (MIG devices named as the driver names them).


def _answers(nv, gpu_info, doc):
    from gpunode.validate import mig as validate_mig

    from ..validate.fakes import inventory

    wanted = validate_mig.parse_layout(doc, "c", "x")
    asserted = layout.first_difference(layout.plan(layout.read_node(nv), wanted.entries))
    (check,) = [c for c in validate_mig.evaluate(inventory([gpu_info]), wanted)
                if c.id == "mig.layout"]  # fmt: skip
    return asserted is None, check.status == "pass"


def _doc(enabled, **devices):
    entry = {"devices": [0], "mig-enabled": enabled, "mig-devices": devices}
    return {"version": "v1", "mig-configs": {"c": [entry]}}


def _one_answer_cases():
    from gpunode.nvidia.facts import MigFacts

    from ..validate.fakes import MIG_UUIDS, healthy_gpu

    def info(enabled, pending, *names):
        migs = [MigFacts(n, MIG_UUIDS[n], n + 1, 0, p) for n, p in enumerate(names)]
        return healthy_gpu(0, mig_mode=enabled, mig_mode_pending=pending, mig_devices=migs)

    def fake(enabled, pending, *instances):
        nv = FakeNvml([Gpu(0, mig=enabled)])
        nv.gpus[0].pending = int(pending)
        for profile, start, cis in instances:
            nv.make(0, profile, start, ci_slices=cis)
        return nv

    on = _doc(True, **{"3g.40gb": 1})
    yield "applied", True, fake(True, True, ("3g.40gb", 4, None)), info(True, True, "3g.40gb"), on
    # MIG on with the wanted devices, but off once the GPU is reset
    yield ("off pending", False, fake(True, False, ("3g.40gb", 4, None)),
           info(True, False, "3g.40gb"), on)  # fmt: skip
    # MIG off as wanted, but on once the GPU is reset
    yield "on pending", False, fake(False, True), info(False, True), _doc(False)
    yield "off", True, fake(False, False), info(False, False), _doc(False)
    # a GPU instance of the wanted profile holding a narrower compute instance
    yield ("narrow CI", False, fake(True, True, ("3g.40gb", 4, [1])),
           info(True, True, "1c.3g.40gb"), on)  # fmt: skip
    # a GPU instance without a compute instance: no MIG device
    yield "no CI", False, fake(True, True, ("3g.40gb", 4, [])), info(True, True), on


@pytest.mark.parametrize(
    ("applied", "nv", "gpu_info", "doc"),
    [pytest.param(*c[1:], id=c[0]) for c in _one_answer_cases()],
)
def test_assert_and_validate_give_one_answer(applied, nv, gpu_info, doc):
    assert _answers(nv, gpu_info, doc) == (applied, applied)
