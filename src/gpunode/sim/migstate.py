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

One home: this module owns the state's definition, for both sides that write it (``sim
apply`` here, at setup; the mock NVML in C, in whichever process or container changes MIG
through NVML): the file names, the magic, the record formats (:data:`RECORDS`), the
capability files' format and the cap-minor layout. The mock does not spell them out: it
includes ``migstate.h``, which :func:`c_header` writes from these values at build time
(``gpunode.sim.mocknvml.build_library``; docs/architecture.md says why).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Protocol

from ..util.files import write_atomic
from .devnodes import ensure_chr
from .miggeometry import ci_spanning
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


PROC_DRIVER = "/proc/driver"  # on a node; sim apply's Paths.proc_driver (a test: elsewhere)
DEV = "/dev"
NODE_DISK = "/var/lib/gpunode-sim"  # the simulator's records on the node's disk
SIM_DIR = ".gpunode-sim"  # under /proc/driver; simulator-private, read by no product code
STATE_NAME = "mig-state"
LOCK_NAME = "mig.lock"
EVENT_NAME = "events"  # the driver's event log the simulator appends to (sim/xidraise)
MODE_NAME = "mig-mode"  # in NODE_DISK, beside apply.STATE_FILE
MAGIC = "gpunode-sim-mig-state v1"
CAPS_DIR = "nvidia/capabilities"  # under /proc/driver
DEVCAPS_DIR = "nvidia-caps"  # under /dev
# The state file's records after the magic and "key<TAB><profile key>" lines: kind, then
# name=value fields in this order ("s": text, "u": a number; the mock's printf conversions).
RECORDS = {
    "gpu": (("uuid", "s"), ("mode", "u"), ("counter", "u")),
    "gi": (("parent", "s"), ("id", "u"), ("profile", "u"), ("start", "u")),
    "ci": (
        ("parent", "s"),
        ("gi", "u"),
        ("id", "u"),
        ("profile", "u"),
        ("start", "u"),
        ("uuid", "s"),
    ),
}
# A capability file as the driver shows it (mode 256 for config, 292 otherwise).
ACCESS = "DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"

CAP_CONFIG_MINOR = 1
CAP_MONITOR_MINOR = 2
FIRST_GI_MINOR = 3  # gpu0/gi0
CAPS_PER_GPU = 135  # 15 GPU instance ids x (the GI + 8 compute instances)
CAPS_PER_GI = 9
MAX_GI = 15
MAX_CI = 8
MIG_MINORS_GPUS = 32  # the driver lists every possible cap of gpu0..gpu31


def gi_minor(gpu_minor: int, gi: int) -> int:
    """The simulator's cap minor of a GPU instance (fits NVIDIA's sample mig-minors lines;
    product code reads it from the access file). The mock's GI_MINOR: see c_header."""
    return FIRST_GI_MINOR + CAPS_PER_GPU * gpu_minor + CAPS_PER_GI * gi


def ci_minor(gpu_minor: int, gi: int, ci: int) -> int:
    return gi_minor(gpu_minor, gi) + 1 + ci


# The same two formulas for the mock (c_header), beside the Python ones.
_C_MINORS = (
    "#define GI_MINOR(gpu, gi) (FIRST_GI_MINOR + CAPS_PER_GPU * (gpu) + CAPS_PER_GI * (gi))",
    "#define CI_MINOR(gpu, gi, ci) (GI_MINOR(gpu, gi) + 1 + (ci))",
)


def render_access(minor: int, mode: int = 292) -> str:
    """A capability file as the driver shows it (mode 256 for config, 292 otherwise)."""
    return ACCESS.format(minor=minor, mode=mode)


def record(kind: str, **values: object) -> str:
    """One line of the state file (no newline): *kind*'s fields, in RECORDS' order."""
    return "\t".join([kind, *(f"{name}={values[name]}" for name, _ in RECORDS[kind])])


def records(text: str) -> list[tuple[str, dict[str, str]]]:
    """(kind, fields) of each record of a state file's text, in order."""
    out = []
    for line in text.splitlines()[2:]:
        kind, _, rest = line.partition("\t")
        if kind in RECORDS:
            out.append((kind, dict(f.split("=", 1) for f in rest.split("\t") if "=" in f)))
    return out


def _c_string(text: str) -> str:
    return json.dumps(text)  # ASCII with \t, \n and \" escapes: a C string literal too


def c_header() -> str:
    """``migstate.h`` for the mock NVML: this module's definition of the state, its files
    (the Xid event log's, which sim/xidraise appends to, among them) and the cap minors as
    C macros (generated at build time; nothing else defines them). The roots
    (``PROC_DRIVER``, ``DEV_DIR``, ``MODE_DIR``) are a node's; the files under them have a
    ``*_SUB`` or ``*_NAME`` form too, for the mock's paths under other roots."""
    defines = {
        "PROC_DRIVER": _c_string(PROC_DRIVER),
        "DEV_DIR": _c_string(DEV),
        "MODE_DIR": _c_string(NODE_DISK),
        "SIM_SUB": _c_string(SIM_DIR),
        "STATE_NAME": _c_string(STATE_NAME),
        "LOCK_NAME": _c_string(LOCK_NAME),
        "MODE_NAME": _c_string(MODE_NAME),
        "CAPS_SUB": _c_string(CAPS_DIR),
        "DEVCAPS_SUB": _c_string(DEVCAPS_DIR),
        "SIM_DIR": 'PROC_DRIVER "/" SIM_SUB',
        "STATE_FILE": 'SIM_DIR "/" STATE_NAME',
        "LOCK_FILE": 'SIM_DIR "/" LOCK_NAME',
        "EVENT_LOG": f'SIM_DIR "/{EVENT_NAME}"',
        "STATE_MAGIC": _c_string(MAGIC),
        "MODE_FILE": 'MODE_DIR "/" MODE_NAME',
        "CAPS_PROC": 'PROC_DRIVER "/" CAPS_SUB',
        "CAPS_DEV": 'DEV_DIR "/" DEVCAPS_SUB',
        "CAPS_MAJOR": str(CAPS_MAJOR),
        "CAP_CONFIG_MINOR": str(CAP_CONFIG_MINOR),
        "CAP_MONITOR_MINOR": str(CAP_MONITOR_MINOR),
        "FIRST_GI_MINOR": str(FIRST_GI_MINOR),
        "CAPS_PER_GPU": str(CAPS_PER_GPU),
        "CAPS_PER_GI": str(CAPS_PER_GI),
        "MAX_CIS_PER_GI": str(MAX_CI),
        "STATE_KEY_FORMAT": _c_string("key\t%s\n"),
        "MODE_LINE_FORMAT": _c_string("%s\t%u\n"),
        "ACCESS_FORMAT": _c_string(ACCESS.format(minor="%u", mode="%u")),
    }
    for kind, fields in RECORDS.items():
        fmt = "\t".join([kind, *(f"{name}=%{conv}" for name, conv in fields)]) + "\n"
        defines[f"STATE_{kind.upper()}_FORMAT"] = _c_string(fmt)
    lines = [
        "/* Generated by gpunode.sim.migstate.c_header at build time: do not edit. */",
        "#ifndef GPUNODE_MIGSTATE_H",
        "#define GPUNODE_MIGSTATE_H",
        *(f"#define {name} {value}" for name, value in defines.items()),
        *_C_MINORS,
        "#endif",
    ]
    return "\n".join(lines) + "\n"


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


def render_state(key: str, recs: list[str]) -> str:
    """A state file's text: the magic, the profile key and the records (from record())."""
    return "\n".join([MAGIC, f"key\t{key}", *recs]) + "\n"


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


def modes_of(profile: Profile, saved: dict[str, bool] | None = None) -> dict[str, bool]:
    """The MIG mode of each MIG-capable GPU: the *saved* one (a restart) or the profile's."""
    saved = saved or {}
    return {g.uuid: saved.get(g.uuid, g.mig) for g in profile.gpus if g.mig_capable}


def render_modes(key: str, modes: dict[str, bool]) -> str:
    """The mode file's text (what the mock writes on each mode change)."""
    return "".join([f"key\t{key}\n", *(f"{uuid}\t{int(on)}\n" for uuid, on in modes.items())])


def initial_state(profile: Profile, key: str, modes: dict[str, bool] | None = None) -> str:
    """The state file's text for *profile*: its MIG modes (or the saved *modes*) and its
    instances (one GPU instance with one compute instance spanning it, CI id 0)."""
    modes = modes_of(profile, modes)
    gpus, gis, cis = [], [], []
    for g in profile.gpus:
        if g.uuid not in modes:
            continue
        mode = modes[g.uuid]
        gpus.append(record("gpu", uuid=g.uuid, mode=int(mode), counter=0))
        if not (mode and g.mig):
            continue  # a mode changed since the profile set it: the GPU came up empty
        for inst in g.mig_instances:
            gi = inst.gi_id
            gis.append(record("gi", parent=g.uuid, id=gi, profile=inst.shape.id,
                              start=inst.placement))  # fmt: skip
            profile_id = ci_spanning(inst.shape.slices).index
            cis.append(record("ci", parent=g.uuid, gi=gi, id=0, profile=profile_id, start=0,
                              uuid=inst.uuid))  # fmt: skip
    return render_state(key, gpus + gis + cis)


def instances_of(text: str) -> list[tuple[str, int, int | None]]:
    """(parent uuid, gi, ci or None) of every instance in a state file's text."""
    out: list[tuple[str, int, int | None]] = []
    for kind, fields in records(text):
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
    caps = paths.proc_driver / CAPS_DIR
    devcaps = paths.dev / DEVCAPS_DIR
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
        for path in (sim_dir, paths.proc_driver / "nvidia-caps", paths.dev / DEVCAPS_DIR):
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
        saved: dict[str, bool] = {}
        if state is None and mode_path.is_file():
            # the node restarted: MIG mode is kept across reboots
            saved = saved_modes(mode_path.read_text(encoding="utf-8"), key)
        modes = modes_of(profile, saved)
        state = initial_state(profile, key, modes)
        if write_atomic(state_path, state.encode(), 0o644):
            res.note(f"wrote {state_path}")
        if mode_path.parent.is_dir():
            write_atomic(mode_path, render_modes(key, modes).encode(), 0o644)
        sync_footprint(profile, state, paths, res)
    finally:
        os.close(fd)
