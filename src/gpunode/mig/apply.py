"""The NVML calls that change a node's MIG layout, under a lock so two applies cannot
interleave: plan everything first (a layout that cannot fit is refused before anything
changes), then per GPU that differs: CIs then GIs destroyed, the MIG mode set, GIs created
at the planned placements, each with one CI spanning it. GPUs already right are not
touched (their instances and UUIDs stay)."""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator
from typing import Any

from ..util.files import Lock, make_dirs
from . import MigApplyError, layout
from .config import Entry, document

LOCK_FILE = "/run/gpunode/mig.lock"


def _call(nv: Any, gpu: layout.MigGpu, what: str, fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except nv.NVMLError_NoPermission as exc:
        raise MigApplyError(f"GPU {gpu.index}: {what} needs root (NVML: {exc})") from None
    except nv.NVMLError as exc:
        raise MigApplyError(f"GPU {gpu.index}: {what} failed (NVML: {exc})") from None


def set_mode(nv: Any, gpu: layout.MigGpu, enable: bool) -> None:
    mode = nv.NVML_DEVICE_MIG_ENABLE if enable else nv.NVML_DEVICE_MIG_DISABLE
    word = "enabling" if enable else "disabling"
    _call(nv, gpu, f"{word} MIG mode", nv.nvmlDeviceSetMigMode, gpu.handle, mode)
    modes = _call(nv, gpu, "reading MIG mode", nv.nvmlDeviceGetMigMode, gpu.handle)
    if bool(modes[0]) != enable:
        raise MigApplyError(
            f"GPU {gpu.index}: {word} MIG mode is pending a GPU reset (stop the GPU's "
            "processes and reset it, e.g. nvidia-smi -r -i "
            f"{gpu.index}, then run again)"
        )


def destroy(nv: Any, gpu: layout.MigGpu, gi: Any) -> None:
    for ci in gi.cis:
        _call(
            nv,
            gpu,
            f"destroying compute instance {ci.id} of GPU instance {gi.id}",
            nv.nvmlComputeInstanceDestroy,
            ci.handle,
        )
    _call(nv, gpu, f"destroying GPU instance {gi.id}", nv.nvmlGpuInstanceDestroy, gi.handle)


def create(nv: Any, gpu: layout.MigGpu, profile: Any, start: int) -> None:
    from ..nvidia import nvml

    what = f"creating {profile.name} at {start}"
    size = next(z for s, z in profile.placements if s == start)
    placement = nv.c_nvmlGpuInstancePlacement_t(start, size)
    gi = _call(
        nv,
        gpu,
        what,
        nv.nvmlDeviceCreateGpuInstanceWithPlacement,
        gpu.handle,
        profile.id,
        ctypes.byref(placement),
    )
    try:
        full = [cid for _i, cid, slices in nvml.ci_profiles(nv, gi) if slices == profile.slices]
        if not full:
            raise MigApplyError(
                f"GPU {gpu.index}: {profile.name} offers no compute instance profile of "
                f"{profile.slices} slices"
            )
        _call(
            nv,
            gpu,
            f"{what}: its compute instance",
            nv.nvmlGpuInstanceCreateComputeInstance,
            gi,
            full[0],
        )
    except BaseException:
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlGpuInstanceDestroy(gi)  # leave no GI without its CI behind
        raise


def execute(nv: Any, p: layout.GpuPlan) -> None:
    gpu = p.gpu
    if p.set_mode is True:
        set_mode(nv, gpu, True)
    for gi in p.destroy:
        destroy(nv, gpu, gi)
    if p.set_mode is False:
        set_mode(nv, gpu, False)
    for profile, start in p.create:
        create(nv, gpu, profile, start)


def _resolve_deferred(nv: Any, plans: list[layout.GpuPlan]) -> list[layout.GpuPlan]:
    """GPUs whose driver names profiles only with MIG on: MIG is turned on, they are read
    and planned; a layout they cannot hold turns MIG off again and is refused."""
    deferred = [p for p in plans if p.deferred]
    if not deferred:
        return plans
    done: list[layout.GpuPlan] = []
    try:
        for p in deferred:
            set_mode(nv, p.gpu, True)
            done.append(p)
        fresh = {
            p.gpu.index: layout.plan_gpu(layout.read_gpu(nv, p.gpu.index, p.gpu.handle), p.entry)
            for p in deferred
        }
    except BaseException:  # refused, or NVML failed: MIG goes back off where it was off
        for p in done:
            with contextlib.suppress(MigApplyError):
                set_mode(nv, p.gpu, False)
        raise
    return [
        layout.GpuPlan(f.gpu, f.entry, p.before, f.after, True, None, f.destroy, f.create)
        if (f := fresh.get(p.gpu.index))
        else p
        for p in plans
    ]


def result(name: str, plans: list[layout.GpuPlan], dry_run: bool) -> dict[str, Any]:
    return {
        "changed": any(p.changed for p in plans),
        "config": name,
        "dry_run": dry_run,
        "diff": layout.diff(plans),
        "gpus": [p.to_dict() for p in plans],
    }


def apply(
    nv: Any,
    name: str,
    entries: tuple[Entry, ...],
    *,
    dry_run: bool = False,
    lock_file: str = LOCK_FILE,
) -> dict[str, Any]:
    """Make the node's layout config ``name`` (its ``entries``); the contract's JSON."""
    if dry_run:
        return result(name, layout.plan(layout.read_node(nv), entries), True)
    with _locked(lock_file):
        plans = layout.plan(layout.read_node(nv), entries)  # refuses before any change
        plans = _resolve_deferred(nv, plans)
        for p in plans:
            if p.changed:
                execute(nv, p)
        if any(p.changed for p in plans):
            left = layout.first_difference(layout.plan(layout.read_node(nv), entries))
            if left:
                raise MigApplyError(f"applied, but the layout still differs: {left}")
    return result(name, plans, False)


@contextlib.contextmanager
def _locked(lock_file: str) -> Iterator[None]:
    """The lock that serializes applies; one line when it cannot be taken (not root)."""
    try:
        make_dirs(os.path.dirname(lock_file) or ".")
        lock = Lock(lock_file)
        lock.__enter__()
    except OSError as exc:
        raise MigApplyError(
            f"{lock_file}: the lock cannot be taken ({exc.strerror or exc}); "
            "gpunode mig apply needs root"
        ) from None
    try:
        yield
    finally:
        lock.__exit__(None, None, None)


def check(nv: Any, entries: tuple[Entry, ...]) -> str | None:
    """None when the node has the layout; else its first difference (one phrase). A layout
    the node cannot hold is MigConfigError, as for apply."""
    return layout.first_difference(layout.plan(layout.read_node(nv), entries))


def export(nv: Any) -> dict[str, Any]:
    """The node's layout as a mig-parted v1 document with one config, ``current``: GPUs
    with the same layout share an entry (``devices: all`` when every GPU does)."""
    gpus = layout.read_node(nv)
    groups: dict[tuple, list[int]] = {}
    for gpu in gpus:
        key = (gpu.mig_enabled, tuple(layout.devices(gpu).items()))
        groups.setdefault(key, []).append(gpu.index)
    entries = []
    for (enabled, devs), indexes in groups.items():
        entries.append(
            {
                "devices": "all" if len(groups) == 1 else indexes,
                "mig-enabled": enabled,
                "mig-devices": dict(devs),
            }
        )
    return document({"current": entries})
