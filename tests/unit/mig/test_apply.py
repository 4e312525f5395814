"""The NVML calls of `gpunode mig apply` on a fake NVML whose MIG state changes: order
(CIs before GIs, MIG mode around them), placements, untouched GPUs, idempotence, the lock,
refusals before any change, errors as one line."""

from __future__ import annotations

import threading

import pytest

from gpunode.mig import MigApplyError, MigConfigError, apply
from gpunode.mig.config import Entry

from .fakenvml import FakeNvml, Gpu, layout_of


def cfg(devices=None, enabled=True, **counts):
    return (Entry("mig-configs.c[0]", devices, None, enabled, counts),)


@pytest.fixture
def lock(tmp_path):
    return str(tmp_path / "run" / "mig.lock")


def test_apply_then_again_unchanged(lock):
    nv = FakeNvml([Gpu(0), Gpu(1)])
    out = apply.apply(nv, "seven", cfg(**{"1g.10gb": 7}), lock_file=lock)
    assert out["changed"] and out["config"] == "seven"
    assert [g["changed"] for g in out["gpus"]] == [True, True]
    assert out["gpus"][0]["before"] == {"mig_enabled": False, "devices": {}}
    assert out["gpus"][0]["after"] == {"mig_enabled": True, "devices": {"1g.10gb": 7}}
    assert out["gpus"][0]["uuid"] == "GPU-00000000-0000-4000-8000-000000000000"
    assert nv.writes[0] == ("mode", 0, 1)
    assert [layout_of(g) for g in nv.gpus] == [{"1g.10gb": 7}] * 2
    assert all(len(gi.cis) == 1 and gi.cis[0].slices == 1 for gi in nv.gpus[0].gis.values())
    writes = len(nv.writes)
    again = apply.apply(nv, "seven", cfg(**{"1g.10gb": 7}), lock_file=lock)
    assert not again["changed"] and again["diff"] == "" and len(nv.writes) == writes
    assert apply.check(nv, cfg(**{"1g.10gb": 7})) is None


def test_only_differing_gpus_are_touched(lock):
    nv = FakeNvml([Gpu(0, mig=True), Gpu(1, mig=True)])
    keep = [nv.make(0, "3g.40gb", 0), nv.make(0, "3g.40gb", 4)]
    nv.make(1, "7g.80gb", 0)
    out = apply.apply(nv, "c", cfg(**{"3g.40gb": 2}), lock_file=lock)
    assert [g["changed"] for g in out["gpus"]] == [False, True]
    assert list(nv.gpus[0].gis.values()) == keep and all(gi.alive for gi in keep)
    assert all(w[1] == 1 for w in nv.writes)
    assert layout_of(nv.gpus[1]) == {"3g.40gb": 2}
    assert out["gpus"][1]["destroy"] == ["gi0 (7g.80gb at 0)"]
    assert out["gpus"][1]["create"] == ["3g.40gb at 0", "3g.40gb at 4"]


def test_mixed_layout_rearranged_with_cis_destroyed_first(lock):
    nv = FakeNvml([Gpu(0, mig=True)])
    nv.make(0, "3g.40gb", 0)
    nv.make(0, "2g.20gb", 4, ci_slices=[1, 1])
    apply.apply(nv, "c", cfg(**{"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}), lock_file=lock)
    assert layout_of(nv.gpus[0]) == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    starts = sorted((nv.gpus[0].profile_name(gi.shape), gi.start) for gi in nv.gpus[0].gis.values())
    assert starts == [("1g.10gb", 2), ("1g.10gb", 3), ("2g.20gb", 0), ("3g.40gb", 4)]


def test_disable_destroys_instances_first(lock):
    nv = FakeNvml([Gpu(0, mig=True)])
    nv.make(0, "1g.10gb", 0)

    out = apply.apply(nv, "off", cfg(enabled=False), lock_file=lock)
    assert out["changed"] and nv.writes == [("destroy", 0, 7), ("mode", 0, 0)]
    assert nv.gpus[0].current == 0 and not nv.gpus[0].gis


def test_refused_before_anything_changes(lock):
    nv = FakeNvml([Gpu(0), Gpu(1)])
    with pytest.raises(MigConfigError, match=r"GPU 0 .*needs 8 compute slices"):
        apply.apply(nv, "c", cfg(**{"4g.40gb": 1, "2g.20gb": 2}), lock_file=lock)
    assert nv.writes == []


def test_deferred_profiles_refused_turn_mig_off_again(lock):
    nv = FakeNvml([Gpu(0)], profiles_need_mig=True)
    with pytest.raises(MigConfigError, match=r"mig-devices '1g.5gb' is not a GPU instance"):
        apply.apply(nv, "c", cfg(**{"1g.5gb": 1}), lock_file=lock)
    assert nv.writes == [("mode", 0, 1), ("mode", 0, 0)] and nv.gpus[0].current == 0
    out = apply.apply(nv, "c", cfg(**{"2g.20gb": 3}), lock_file=lock)
    assert out["changed"] and layout_of(nv.gpus[0]) == {"2g.20gb": 3}


def test_dry_run_changes_nothing(lock):
    nv = FakeNvml([Gpu(0)])
    out = apply.apply(nv, "c", cfg(**{"7g.80gb": 1}), dry_run=True, lock_file=lock)
    assert out["changed"] and out["dry_run"] and nv.writes == []
    assert "+  7g.80gb: 1" in out["diff"]
    assert apply.check(nv, cfg(**{"7g.80gb": 1})) == (
        "GPU 0: MIG mode enabled wanted, it is disabled")


def test_not_root_is_one_line(lock):
    nv = FakeNvml([Gpu(0)], root=False)
    with pytest.raises(MigApplyError) as exc:
        apply.apply(nv, "c", cfg(**{"7g.80gb": 1}), lock_file=lock)
    assert str(exc.value) == (
        "GPU 0: enabling MIG mode needs root (NVML: Insufficient Permissions)")


def test_pending_reset_is_reported(lock, monkeypatch):
    nv = FakeNvml([Gpu(0)])

    def pending_only(h, mode):
        h.pending = mode

    monkeypatch.setattr(nv, "nvmlDeviceSetMigMode", pending_only)
    with pytest.raises(MigApplyError, match=r"^GPU 0: enabling MIG mode is pending a GPU reset"):
        apply.apply(nv, "c", cfg(**{"7g.80gb": 1}), lock_file=lock)
    assert apply.check(nv, cfg(**{"7g.80gb": 1})) == (
        "GPU 0: MIG mode enabled wanted, it is disabled (enable pending a GPU reset)")


def test_two_applies_do_not_interleave(lock, monkeypatch):
    nv = FakeNvml([Gpu(0)])
    order = []
    real = nv.nvmlDeviceCreateGpuInstanceWithPlacement
    entered = threading.Event()

    def slow_create(*args):
        order.append(threading.current_thread().name)
        entered.set()
        threading.Event().wait(0.01)
        return real(*args)

    monkeypatch.setattr(nv, "nvmlDeviceCreateGpuInstanceWithPlacement", slow_create)
    errors = []

    def run(name):
        try:
            apply.apply(nv, name, cfg(**{"1g.10gb": 7}), lock_file=lock)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    first = threading.Thread(target=run, args=("a",), name="a")
    first.start()
    entered.wait(5)
    second = threading.Thread(target=run, args=("b",), name="b")
    second.start()
    first.join(10)
    second.join(10)
    assert errors == []
    assert order == ["a"] * 7  # the second saw the layout applied and changed nothing
    assert layout_of(nv.gpus[0]) == {"1g.10gb": 7}


def test_export_groups_gpus():
    nv = FakeNvml([Gpu(0, mig=True), Gpu(1, mig=True),
                   Gpu(2, "Tesla T4", mig_capable=False)])
    nv.make(0, "3g.40gb", 4)
    nv.make(1, "3g.40gb", 0)
    doc = apply.export(nv)
    assert doc == {"version": "v1", "mig-configs": {"current": [
        {"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 1}},
        {"devices": [2], "mig-enabled": False, "mig-devices": {}},
    ]}}
    nv = FakeNvml([Gpu(0)])
    assert apply.export(nv)["mig-configs"]["current"] == [
        {"devices": "all", "mig-enabled": False, "mig-devices": {}}]


def test_export_round_trips_through_assert():
    from gpunode.mig import config

    nv = FakeNvml([Gpu(0, mig=True), Gpu(1, mig=True)])
    nv.make(0, "3g.40gb", 4)
    nv.make(0, "2g.20gb", 0)
    entries = config.parse(apply.export(nv))["current"]
    assert apply.check(nv, entries) is None


def test_lock_not_creatable_is_one_line(tmp_path):
    (tmp_path / "file").write_text("")
    nv = FakeNvml([Gpu(0)])
    with pytest.raises(MigApplyError) as exc:
        apply.apply(nv, "c", cfg(**{"7g.80gb": 1}), lock_file=str(tmp_path / "file" / "x.lock"))
    assert str(exc.value) == (
        f"{tmp_path}/file/x.lock: the lock cannot be taken (File exists); "
        "gpunode mig apply needs root")
    assert nv.writes == []
