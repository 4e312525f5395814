"""The simulated driver's MIG state on a node, as ``gpunode sim apply`` sets it up.

MIG mode and the GPU and compute instances are driver state: the mock NVML
(``mocknvml/migstate.c``) keeps them in a simulator-private file on the node's
simulated ``/proc/driver`` tmpfs, :data:`STATE_NAME` under the dot-directory :data:`SIM_DIR`,
which no product code reads (product code asks NVML and reads the driver's capability
files). Every process and container of the node sees that one file; it is gone when the
node restarts, like kernel state. Applying a profile sets the state from the profile's
``mig:``; re-applying the same profile keeps the state (instances processes made since
stay), applying another replaces it.

MIG mode survives a reboot on real GPUs. The mock also writes each mode change to
:data:`MODE_NAME` beside the simulator's profile record on the node's disk
(``/var/lib/gpunode-sim``); when the tmpfs state is gone (the node restarted) and the same
profile is applied again, the GPUs get that mode back: a GPU whose mode was disabled comes
up without instances, one the profile leaves disabled but a process enabled comes up
enabled without instances; otherwise the profile's instances are created again (what a
boot-time MIG configuration service does on a real node).

Besides the state this module writes the driver's visible footprint (the MIG contract,
section 1): ``/proc/driver/nvidia/capabilities/mig/{config,monitor}``, the static
``/proc/driver/nvidia-caps/mig-minors``, ``capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access``
of the instances, and ``/dev/nvidia-caps/nvidia-cap<minor>`` nodes for config, monitor and
each instance. The mock rewrites the per-instance part on every change.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
from pathlib import Path
from typing import Protocol

from ..util.files import write_atomic
from .devnodes import ensure_chr
from .procfs import CAPS_MAJOR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .profiles import Profile


class Where(Protocol):
    """Where the node's files are (gpunode.sim.apply.Paths)."""

    dev: Path
    proc_driver: Path
    state: Path  # the simulator's profile record; MODE_NAME goes beside it


class Notes(Protocol):
    """What changed (gpunode.sim.apply.Result)."""

    def note(self, what: str) -> None: ...


SIM_DIR = ".gpunode-sim"  # under /proc/driver; simulator-private, read by no product code
STATE_NAME = "mig-state"
LOCK_NAME = "mig.lock"
MODE_NAME = "mig-mode"  # beside apply.STATE_FILE, on the node's disk
MAGIC = "gpunode-sim-mig-state v1"

CAP_CONFIG_MINOR = 1
CAP_MONITOR_MINOR = 2
CAPS_PER_GPU = 135  # 15 GPU instance ids x (the GI + 8 compute instances)
CAPS_PER_GI = 9
MAX_GI = 15
MAX_CI = 8
MIG_MINORS_GPUS = 32  # the driver lists every possible cap of gpu0..gpu31
# The CI profile id spanning a GPU instance of this many slices (NVML_COMPUTE_INSTANCE_PROFILE_*).
FULL_CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


def gi_minor(gpu_minor: int, gi: int) -> int:
    """The simulator's cap minor of a GPU instance (fits NVIDIA's sample mig-minors lines;
    product code reads it from the access file)."""
    return 3 + CAPS_PER_GPU * gpu_minor + CAPS_PER_GI * gi


def ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gi_minor(gpu_minor, gi) + 1 + ci


def render_access(minor: int, mode: int = 292) -> str:
    """A capability file as the driver shows it (mode 256 for config, 292 otherwise)."""
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


def render_mig_minors() -> str:
    """/proc/driver/nvidia-caps/mig-minors: every cap the driver can make, with its minor."""
    lines = [f"config {CAP_CONFIG_MINOR}", f"monitor {CAP_MONITOR_MINOR}"]
    for gpu in range(MIG_MINORS_GPUS):
        for gi in range(MAX_GI):
            lines.append(f"gpu{gpu}/gi{gi}/access {gi_minor(gpu, gi)}")
            lines += [
                f"gpu{gpu}/gi{gi}/ci{ci}/access {ci_minor(gpu, gi, ci)}" for ci in range(MAX_CI)
            ]
    return "\n".join(lines) + "\n"


def profile_key(payload: str) -> str:
    """Names the profile a state was set up for (the mock NVML's payload digest)."""
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


def state_key(text: str) -> str | None:
    """The key of a state file's text, or None when it is not one."""
    lines = text.split("\n")
    if lines[0] != MAGIC or len(lines) < 2 or not lines[1].startswith("key\t"):
        return None
    return lines[1][4:]


def saved_modes(text: str, key: str) -> dict[str, bool]:
    """The MIG modes in a mode file written for the profile *key* (else none)."""
    lines = text.splitlines()
    if not lines or lines[0] != f"key\t{key}":
        return {}
    modes = {}
    for line in lines[1:]:
        uuid, _, mode = line.partition("\t")
        if mode in ("0", "1"):
            modes[uuid] = mode == "1"
    return modes


def initial_state(profile: Profile, key: str, modes: dict[str, bool] | None = None) -> str:
    """The state file's text for *profile*: its MIG modes (or the saved *modes*) and its
    instances (one GPU instance with one compute instance spanning it, CI id 0)."""
    modes = modes or {}
    gpus, gis, cis = [], [], []
    for g in profile.gpus:
        if not g.mig_capable:
            continue
        mode = modes.get(g.uuid, g.mig)
        gpus.append(f"gpu\tuuid={g.uuid}\tmode={int(mode)}\tcounter=0")
        if not (mode and g.mig):
            continue  # a mode changed since the profile set it: the GPU came up empty
        for inst in g.mig_instances:
            gi = inst.gi_id
            gis.append(
                f"gi\tparent={g.uuid}\tid={gi}\tprofile={inst.shape.id}\tstart={inst.placement}"
            )
            profile_id = FULL_CI_PROFILE[inst.shape.slices]
            cis.append(
                f"ci\tparent={g.uuid}\tgi={gi}\tid=0\tprofile={profile_id}\tstart=0\tuuid={inst.uuid}"
            )
    return "\n".join([MAGIC, f"key\t{key}", *gpus, *gis, *cis]) + "\n"


def instances_of(text: str) -> list[tuple[str, int, int | None]]:
    """(parent uuid, gi, ci or None) of every instance in a state file's text."""
    out: list[tuple[str, int, int | None]] = []
    for line in text.splitlines()[2:]:
        kind, _, rest = line.partition("\t")
        fields = dict(f.split("=", 1) for f in rest.split("\t") if "=" in f)
        if kind == "gi":
            out.append((fields["parent"], int(fields["id"]), None))
        elif kind == "ci":
            out.append((fields["parent"], int(fields["gi"]), int(fields["id"])))
    return out


def _ensure_chr(path: Path, minor: int, mode: int, res: Notes) -> None:
    if ensure_chr(path, CAPS_MAJOR, minor, mode):
        res.note(f"created {path} ({CAPS_MAJOR}:{minor})")


def _write(path: Path, text: str, res: Notes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if write_atomic(path, text.encode(), 0o444):
        res.note(f"wrote {path}")


def sync_footprint(profile: Profile, state: str, paths: Where, res: Notes) -> None:
    """Make the capability files and cap nodes show exactly the instances in *state*."""
    caps = paths.proc_driver / "nvidia" / "capabilities"
    devcaps = paths.dev / "nvidia-caps"
    devcaps.mkdir(mode=0o755, exist_ok=True)
    _write(caps / "mig" / "config", render_access(CAP_CONFIG_MINOR, 256), res)
    _write(caps / "mig" / "monitor", render_access(CAP_MONITOR_MINOR, 292), res)
    _write(paths.proc_driver / "nvidia-caps" / "mig-minors", render_mig_minors(), res)
    _ensure_chr(devcaps / f"nvidia-cap{CAP_CONFIG_MINOR}", CAP_CONFIG_MINOR, 0o400, res)
    _ensure_chr(devcaps / f"nvidia-cap{CAP_MONITOR_MINOR}", CAP_MONITOR_MINOR, 0o444, res)
    minor_of = {g.uuid: g.minor for g in profile.gpus if g.mig_capable}
    files: dict[Path, int] = {}  # access file -> its cap minor
    for parent, gi, ci in instances_of(state):
        if parent not in minor_of:
            continue
        m = minor_of[parent]
        where = caps / f"gpu{m}" / "mig" / f"gi{gi}"
        if ci is None:
            files[where / "access"] = gi_minor(m, gi)
        else:
            files[where / f"ci{ci}" / "access"] = ci_minor(m, gi, ci)
    wanted_dirs = {p.parent for p in files} | {caps / f"gpu{m}" / "mig" for m in minor_of.values()}
    wanted_dirs |= {d.parent for d in wanted_dirs}
    for entry in sorted(caps.glob("gpu*"), reverse=True):
        for sub in sorted(entry.rglob("*"), reverse=True):
            if sub.is_dir() and sub not in wanted_dirs:
                shutil.rmtree(sub)
                res.note(f"removed {sub}")
        if entry not in wanted_dirs:
            shutil.rmtree(entry)
            res.note(f"removed {entry}")
    for m in minor_of.values():  # as the driver: a mig/ directory per MIG-capable GPU
        (caps / f"gpu{m}" / "mig").mkdir(parents=True, exist_ok=True)
    for path, minor in files.items():
        _write(path, render_access(minor), res)
    minors = set(files.values())
    for node in sorted(devcaps.glob("nvidia-cap*")):
        number = node.name[len("nvidia-cap") :]
        if number.isdigit() and int(number) > CAP_MONITOR_MINOR and int(number) not in minors:
            node.unlink()
            res.note(f"removed {node}")
    for minor in sorted(minors):
        _ensure_chr(devcaps / f"nvidia-cap{minor}", minor, 0o444, res)


def apply_mig(profile: Profile, payload: str, paths: Where, res: Notes) -> None:
    """Set up the node's MIG state and footprint for *profile* (idempotent)."""
    sim_dir = paths.proc_driver / SIM_DIR
    if profile.driver is None:
        for path in (sim_dir, paths.proc_driver / "nvidia-caps", paths.dev / "nvidia-caps"):
            if path.exists():
                shutil.rmtree(path)
                res.note(f"removed {path}")
        return
    key = profile_key(payload)
    state_path = sim_dir / STATE_NAME
    mode_path = paths.state.parent / MODE_NAME
    sim_dir.mkdir(mode=0o755, exist_ok=True)
    fd = os.open(sim_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # the lock the mock NVML takes for every change
        try:
            state = state_path.read_text(encoding="utf-8")
        except FileNotFoundError:
            state = None
        if state is not None and state_key(state) == key:
            # the same profile: keep what processes made since
            sync_footprint(profile, state, paths, res)
            return
        modes: dict[str, bool] = {}
        if state is None and mode_path.is_file():
            # the node restarted: MIG mode is kept across reboots
            modes = saved_modes(mode_path.read_text(encoding="utf-8"), key)
        state = initial_state(profile, key, modes)
        if write_atomic(state_path, state.encode(), 0o644):
            res.note(f"wrote {state_path}")
        if mode_path.parent.is_dir():
            lines = [f"key\t{key}"] + [
                line.split("\t")[1][5:] + "\t" + line.split("\t")[2][5:]
                for line in state.splitlines()
                if line.startswith("gpu\t")
            ]
            write_atomic(mode_path, ("\n".join(lines) + "\n").encode(), 0o644)
        sync_footprint(profile, state, paths, res)
    finally:
        os.close(fd)
