"""MIG layouts: what a GPU has now (read through NVML), what a config wants of it, and the
plan between them: the MIG mode to set, the GPU instances to destroy and the ones to create
where (placements solved here, so a layout that fits is always found and one that cannot
fit is refused before anything changes).

A MIG device is one GPU instance (GI) with one compute instance (CI) spanning it; that is
the only shape gpunode creates. A GI is kept when it is such a device of a wanted profile
and a placement of the rest exists around the kept ones; otherwise the GPU is rebuilt.
Which entry of a config a GPU gets is `selecting`'s answer and whether its layout is applied
`difference`'s, for `gpunode mig` and validate alike.
"""

from __future__ import annotations

from typing import Any

from ..nvidia import nvml
from ..nvidia.gpu import Gpu, MigView
from ..util.record import record
from . import MigApplyError, MigConfigError
from .config import Entry


@record(frozen=True)
class MigGpu:
    """One GPU as `gpunode mig` changes it: the driver's record of the GPU (identity and MIG
    mode, gpunode.nvidia.gpu.Gpu as the one NVML walk nvml.read_gpu fills it) and what only
    the planner needs: its handle, GPU instance profiles with placements and GPU/compute
    instances. Re-read after each change under the lock."""

    gpu: Gpu
    handle: Any = None
    profiles: tuple | None = ()  # GiProfile; None: NVML names none while MIG is off
    instances: tuple = ()  # GiState, by id

    @property
    def index(self) -> int:
        return self.gpu.index  # type: ignore[return-value]  # NVML's record has one

    @property
    def uuid(self) -> str | None:
        return self.gpu.uuid

    @property
    def name(self) -> str | None:
        return self.gpu.name

    @property
    def pci_device_id(self) -> int:
        return self.gpu.pci_device_id or 0  # no id from NVML: no device-filter selects it

    @property
    def mig_capable(self) -> bool:
        return self.gpu.mig_mode is not None

    @property
    def mig_enabled(self) -> bool:  # current mode
        return bool(self.gpu.mig_mode)

    @property
    def mig_pending(self) -> bool:  # pending mode (differs from current until a GPU reset)
        return bool(self.gpu.mig_mode_pending)

    @property
    def label(self) -> str:
        return f"GPU {self.index} ({self.name})"

    def mig_view(self) -> MigView:
        """Its MIG mode and devices as a layout is judged (`difference`); the devices as
        `devices` names them from the GPU and compute instances read here."""
        return MigView(self.mig_capable, self.mig_enabled, self.mig_pending, devices(self))

    def profile(self, profile_id: int) -> nvml.GiProfile | None:
        for p in self.profiles or ():
            if p.id == profile_id:
                return p
        return None


def read_gpu(nv: Any, index: int, handle: Any) -> MigGpu:
    """A GPU's record (the one NVML walk) with its profiles (with placements) and GPU and
    compute instances."""
    gpu = nvml.read_gpu(nv, index, handle)
    if gpu.mig_mode is None:
        return MigGpu(gpu, handle)
    try:
        profiles: tuple | None = nvml.gpu_instance_profiles(nv, handle)
    except nv.NVMLError:
        if gpu.mig_mode:
            raise
        profiles = None  # a driver that lists profiles only with MIG on
    instances = nvml.gpu_instances(nv, handle, profiles) if gpu.mig_mode and profiles else ()
    return MigGpu(gpu, handle, profiles, instances)


def read_node(nv: Any) -> tuple[MigGpu, ...]:
    out = []
    for index, handle, exc in nvml.handles(nv):
        if handle is None:
            raise MigApplyError(f"GPU {index}: NVML gives no handle for it ({exc})")
        out.append(read_gpu(nv, index, handle))
    return tuple(out)


# ------------------------------------------------------------------ the layout of a GPU


def full_device(gpu: MigGpu, gi: nvml.GiState) -> bool:
    """The GI is one MIG device as gpunode makes them: one CI spanning it."""
    profile = gpu.profile(gi.profile_id)
    return profile is not None and len(gi.cis) == 1 and gi.cis[0].slices == profile.slices


def devices(gpu: MigGpu) -> dict[str, int]:
    """{MIG device profile: count}, as mig-parted and nvidia-smi name them ("3g.40gb"; a CI
    narrower than its GI as "1c.3g.40gb")."""
    counts: dict[str, int] = {}
    for gi in gpu.instances:
        profile = gpu.profile(gi.profile_id)
        name = profile.name if profile else f"profile-{gi.profile_id}"
        names = [
            name if profile and ci.slices == profile.slices else f"{ci.slices}c.{name}"
            for ci in gi.cis
        ] or [f"{name}(no compute instance)"]
        for n in names:
            counts[n] = counts.get(n, 0) + 1
    return dict(sorted(counts.items()))


def state(gpu: MigGpu) -> dict[str, Any]:
    """What JSON shows of a GPU's layout: {"mig_enabled": bool, "devices": {...}}."""
    return {"mig_enabled": gpu.mig_enabled, "devices": devices(gpu)}


def wanted(entry: Entry | None, gpu: MigGpu) -> dict[str, Any]:
    if entry is None:
        return state(gpu)
    return {"mig_enabled": entry.mig_enabled, "devices": dict(sorted(entry.mig_devices.items()))}


@record(frozen=True)
class Difference:
    """How a GPU differs from the layout its entry wants: the first difference only."""

    mode: bool  # True: its MIG mode (current or pending); False: its MIG devices
    # one phrase: "MIG mode enabled wanted, it is disabled", "1g.10gb: 7 wanted, 0 present"
    text: str


def difference(gpu: MigView, entry: Entry) -> Difference | None:
    """THE answer to "is the layout ``entry`` wants applied to this GPU?" (None: it is), for
    `gpunode mig assert|apply` (`MigGpu.mig_view`, the GPU read through NVML) and `gpunode
    validate`'s mig.layout (`Gpu.mig_view`, the inventory's record of it) alike.

    Applied: a GPU that cannot do MIG is left whole when the entry turns MIG off or selects
    `devices: all` (as mig-parted skips it); otherwise the MIG mode, current and pending
    both (a pending one is what the GPU has after its next reset), and the MIG devices'
    profile counts are the entry's."""
    if not gpu.capable:
        if entry.mig_enabled and entry.devices is not None:
            return Difference(True, "MIG mode enabled wanted, it is not supported")
        return None
    if not gpu.enabled == gpu.pending == entry.mig_enabled:
        want = "enabled" if entry.mig_enabled else "disabled"
        return Difference(True, f"MIG mode {want} wanted, it is "
                          f"{_mode_text(True, gpu.enabled, gpu.pending)}")  # fmt: skip
    want_devices = entry.mig_devices if entry.mig_enabled else {}
    have = gpu.devices
    for name in sorted(set(want_devices) | set(have)):
        if want_devices.get(name, 0) != have.get(name, 0):
            return Difference(False, f"{name}: {want_devices.get(name, 0)} wanted, "
                              f"{have.get(name, 0)} present")  # fmt: skip
    return None


def selecting(
    entries: tuple[Entry, ...], index: int, pci_device_id: int | None
) -> list[Entry] | None:
    """THE entries of a config that select GPU ``index`` (NVML's index), for `gpunode mig`
    (`select`) and `gpunode validate`'s mig.layout alike: [] none (the config leaves it
    alone), one, or more (refused: each GPU in one entry); None: an entry has a
    device-filter and the GPU's PCI device id is not known."""
    out = []
    for e in entries:
        if e.device_filter is not None and pci_device_id is None:
            if e.devices is None or index in e.devices:
                return None
            continue
        if e.selects(index, pci_device_id):
            out.append(e)
    return out


def select(gpus: tuple[MigGpu, ...], entries: tuple[Entry, ...]) -> dict[int, Entry]:
    """{GPU index: the entry that selects it} (`selecting`); GPUs no entry selects are left
    alone, a GPU two entries select is refused."""
    chosen: dict[int, Entry] = {}
    for gpu in gpus:
        # MigGpu.pci_device_id is never None: no id from NVML, no device-filter selects it
        found = selecting(entries, gpu.index, gpu.pci_device_id) or []
        if len(found) > 1:
            raise MigConfigError(
                f"{found[1].where}: GPU {gpu.index} is already selected by "
                f"{found[0].where}; accepted: each GPU in one entry"
            )
        if found:
            chosen[gpu.index] = found[0]
    return chosen


# ------------------------------------------------------------------ placements


def place(
    wanted_profiles: list[nvml.GiProfile], occupied: frozenset[int] = frozenset()
) -> list[tuple[nvml.GiProfile, int]] | None:
    """Placements for every profile (one per instance) in free memory slots: the biggest
    first, backtracking over each profile's possible placements. None when none exists."""
    items = sorted(
        wanted_profiles,
        key=lambda p: (
            -max((s for _, s in p.placements), default=0),
            -p.slices,
            len(p.placements),
            p.id,
        ),
    )
    result: list[tuple[nvml.GiProfile, int]] = []

    def go(i: int, used: frozenset[int], min_pos: int) -> bool:
        if i == len(items):
            return True
        profile = items[i]
        for pos, (start, size) in enumerate(profile.placements):
            if pos < min_pos:  # identical instances: one order of placements is enough
                continue
            slots = frozenset(range(start, start + size))
            if slots & used:
                continue
            result.append((profile, start))
            same_next = i + 1 < len(items) and items[i + 1] is profile
            if go(i + 1, used | slots, pos + 1 if same_next else 0):
                return True
            result.pop()
        return False

    return list(result) if go(0, occupied, 0) else None


def _summary(counts: dict[str, int]) -> str:
    return " + ".join(f"{name} x{n}" for name, n in counts.items()) or "no MIG devices"


def check_fits(gpu: MigGpu, entry: Entry) -> list[nvml.GiProfile]:
    """The wanted profiles, one per instance, or MigConfigError naming GPU, profile and why."""
    at = f"{entry.where}: {gpu.label}"
    if not gpu.mig_capable:
        raise MigConfigError(f"{at}: cannot do MIG; accepted for this GPU: mig-enabled: false")
    profiles = {p.name: p for p in gpu.profiles or ()}
    out: list[nvml.GiProfile] = []
    for name, count in entry.mig_devices.items():
        profile = profiles.get(name)
        if profile is None:
            raise MigConfigError(
                f"{at}: mig-devices {name!r} is not a GPU instance profile of this GPU; "
                f"accepted: {', '.join(profiles)}"
            )
        if count > profile.instances:
            raise MigConfigError(
                f"{at}: mig-devices {name}: {count} wanted, this GPU holds at most "
                f"{profile.instances}"
            )
        out.extend([profile] * count)
    compute = max((p.slices for p in profiles.values()), default=0)
    memory = max((s + z for p in profiles.values() for s, z in p.placements), default=0)
    slices = sum(p.slices for p in out)
    summary = _summary(entry.mig_devices)
    if slices > compute:
        raise MigConfigError(
            f"{at}: {summary} needs {slices} compute slices, the GPU has {compute}"
        )
    mem = sum(min((z for _, z in p.placements), default=0) for p in out)
    if mem > memory:
        raise MigConfigError(f"{at}: {summary} needs {mem} memory slices, the GPU has {memory}")
    if place(out) is None:
        starts = "; ".join(
            f"{p.name} at {','.join(str(s) for s, _ in p.placements)}" for p in dict.fromkeys(out)
        )
        raise MigConfigError(f"{at}: {summary} has no valid placement (start slots: {starts})")
    return out


# ------------------------------------------------------------------ the plan


@record(frozen=True)
class GpuPlan:
    gpu: MigGpu
    entry: Entry | None
    before: dict
    after: dict
    changed: bool
    set_mode: bool | None = None  # MIG mode to set first (None: as it is)
    destroy: tuple = ()  # GiState to destroy (their CIs first)
    create: tuple = ()  # (GiProfile, start) to create, each with one spanning CI
    deferred: bool = False  # MIG off and NVML names no profiles yet: planned once it is on

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.gpu.index,
            "uuid": self.gpu.uuid,
            "name": self.gpu.name,
            "changed": self.changed,
            "before": self.before,
            "after": self.after,
            "destroy": [
                f"gi{gi.id} ({_profile_name(self.gpu, gi)} at {gi.start})" for gi in self.destroy
            ],
            "create": [f"{p.name} at {start}" for p, start in self.create],
        }


def _profile_name(gpu: MigGpu, gi: nvml.GiState) -> str:
    profile = gpu.profile(gi.profile_id)
    return profile.name if profile else f"profile {gi.profile_id}"


def plan_gpu(gpu: MigGpu, entry: Entry | None) -> GpuPlan:
    """What to do to give ``gpu`` the layout ``entry`` wants (None: leave it as it is)."""
    before = state(gpu)
    after = wanted(entry, gpu)
    if entry is None or (not gpu.mig_capable and entry.devices is None):
        # a GPU that cannot do MIG is skipped by `devices: all` (as mig-parted does);
        # named by index with mig-enabled: true, it is refused below
        return GpuPlan(gpu, entry, before, before, False)
    if not entry.mig_enabled:
        if difference(gpu.mig_view(), entry) is None:
            return GpuPlan(gpu, entry, before, after, False)
        return GpuPlan(gpu, entry, before, after, True, set_mode=False, destroy=gpu.instances)
    if not gpu.mig_capable:
        check_fits(gpu, entry)  # raises
    if gpu.profiles is None:  # profiles named only once MIG is on
        return GpuPlan(gpu, entry, before, after, True, set_mode=True, deferred=True)
    want = check_fits(gpu, entry)
    if difference(gpu.mig_view(), entry) is None:
        return GpuPlan(gpu, entry, before, after, False)
    set_mode = None if gpu.mig_enabled and gpu.mig_pending else True
    # keep the GIs that are wanted devices already, if the rest can be placed around them
    remaining = list(want)
    keep: list[nvml.GiState] = []
    for gi in gpu.instances:
        profile = gpu.profile(gi.profile_id)
        if full_device(gpu, gi) and profile in remaining:
            remaining.remove(profile)
            keep.append(gi)
    occupied = frozenset(s for gi in keep for s in range(gi.start, gi.start + gi.size))
    placed = place(remaining, occupied)
    if placed is None:  # rebuild the GPU: check_fits proved this places
        keep, placed = [], place(want)
    destroy = tuple(gi for gi in gpu.instances if gi not in keep)
    return GpuPlan(
        gpu,
        entry,
        before,
        after,
        True,
        set_mode=set_mode,
        destroy=destroy,
        create=tuple(placed or ()),
    )


def plan(gpus: tuple[MigGpu, ...], entries: tuple[Entry, ...]) -> list[GpuPlan]:
    """A plan per GPU; MigConfigError (nothing changed yet) when any GPU cannot hold its
    layout."""
    chosen = select(gpus, entries)
    return [plan_gpu(gpu, chosen.get(gpu.index)) for gpu in gpus]


def first_difference(plans: list[GpuPlan]) -> str | None:
    """The first way the node differs from the plans' layout, as one phrase, or None."""
    for p in plans:
        found = difference(p.gpu.mig_view(), p.entry) if p.changed and p.entry else None
        if found is not None:  # a changed plan is one with a difference
            return f"GPU {p.gpu.index}: {found.text}"
    return None


def _mode_text(capable: bool, enabled: bool, pending: bool) -> str:
    if not capable:
        return "not supported"
    now = "enabled" if enabled else "disabled"
    if pending != enabled:
        return f"{now} ({'enable' if pending else 'disable'} pending a GPU reset)"
    return now


def diff(plans: list[GpuPlan]) -> str:
    """Before/after per changed GPU, unified-diff-like."""
    import difflib

    out: list[str] = []
    for p in plans:
        if not p.changed:
            continue
        name = f"GPU {p.gpu.index} ({p.gpu.uuid})"
        out.extend(
            line.rstrip("\n")
            for line in difflib.unified_diff(
                _lines(p.before), _lines(p.after), f"{name} before", f"{name} after", n=50
            )
        )
    return "\n".join(out) + ("\n" if out else "")


def _lines(layout: dict[str, Any]) -> list[str]:
    lines = [f"mig-enabled: {'true' if layout['mig_enabled'] else 'false'}"]
    if layout["devices"]:
        lines.append("mig-devices:")
        lines.extend(f"  {name}: {n}" for name, n in layout["devices"].items())
    return lines
