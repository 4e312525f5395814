"""The simulated driver's MIG state on a node: its definition, and ``gpunode sim apply``'s
call that sets it up.

MIG mode and the GPU and compute instances are driver state: the mock NVML keeps them in a
simulator-private file on the node's simulated ``/proc/driver`` tmpfs, :data:`STATE_NAME`
under the dot-directory :data:`SIM_DIR`, which no product code reads (product code asks
NVML and reads the driver's capability files). Every process and container of the node
sees that one file; it is gone when the node restarts, like kernel state. Applying a
profile sets the state from the profile's ``mig:``; re-applying the same profile keeps the
state (instances processes made since stay), applying another replaces it.

MIG mode survives a reboot on real GPUs. The mock also writes each mode change to
:data:`MODE_NAME` beside the simulator's profile record on the node's disk
(``/var/lib/gpunode-sim``); when the tmpfs state is gone (the node restarted) and the same
profile is applied again, the GPUs get that mode back: a GPU whose mode was disabled comes
up without instances, one the profile leaves disabled but a process enabled comes up
enabled without instances; otherwise the profile's instances are created again (what a
boot-time MIG configuration service does on a real node).

Besides the state, the driver shows a footprint (the MIG contract, section 1):
``/proc/driver/nvidia/capabilities/mig/{config,monitor}``, the static
``/proc/driver/nvidia-caps/mig-minors``, ``capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access``
of the instances, and ``/dev/nvidia-caps/nvidia-cap<minor>`` nodes for config, monitor and
each instance.

**One implementation, in C** (``mocknvml/``): the state is read, written and shown (its
footprint) by the mock NVML, because the mock must do all three where no Python runs, in
whichever process or container changes MIG through NVML. So the mock also does sim apply's
part: :func:`apply_mig` loads the built mock library (``Paths.mock_base``) with ctypes and
calls its ``gpunode_sim_mig_setup`` (``mocknvml/setup.c``) with the profile's payload and
the node's roots, which reads the state and the saved modes, writes the initial state when
the profile changed, and writes the footprint, each with the code NVML's changes use
(``migstate.c``, ``footprint.c``). Python neither writes nor reads the state.

One definition, in Python: this module defines the state's files, magic, record formats
(:data:`RECORDS`), the capability files' format and the cap-minor layout; the mock does not
spell them out but includes ``migstate.h``, which :func:`c_header` writes from these values
at build time (``gpunode.sim.mocknvml.build_library``; docs/architecture.md says why).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Protocol

from .procfs import CAPS_MAJOR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .profiles import Profile


class Where(Protocol):
    """Where the node's files are (gpunode.sim.apply.Paths)."""

    dev: Path
    proc_driver: Path
    state: Path  # the simulator's profile record; MODE_NAME goes beside it
    mock_base: Path  # the built mock NVML library, which does the work


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
MIG_MINORS = "nvidia-caps/mig-minors"  # under /proc/driver
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
CONFIG_ACCESS_MODE = 256
ACCESS_MODE = 292
CAP_CONFIG_NODE_MODE = 0o400  # /dev/nvidia-caps/nvidia-cap1; the others 0444
CAP_NODE_MODE = 0o444
# The lines of mig-minors: every cap the driver can make, with its minor (%u each).
MIG_MINORS_LINES = {
    "config": "config %u",
    "monitor": "monitor %u",
    "gi": "gpu%u/gi%u/access %u",
    "ci": "gpu%u/gi%u/ci%u/access %u",
}

CAP_CONFIG_MINOR = 1
CAP_MONITOR_MINOR = 2
FIRST_GI_MINOR = 3  # gpu0/gi0
CAPS_PER_GPU = 135  # 15 GPU instance ids x (the GI + 8 compute instances)
CAPS_PER_GI = 9
MAX_GI = 15
MAX_CI = 8
MIG_MINORS_GPUS = 32  # the driver lists every possible cap of gpu0..gpu31

# The simulator's cap minor of a GPU and a compute instance, fitting NVIDIA's sample
# mig-minors lines (product code reads it from the access file, never computes it).
_C_MINORS = (
    "#define GI_MINOR(gpu, gi) (FIRST_GI_MINOR + CAPS_PER_GPU * (gpu) + CAPS_PER_GI * (gi))",
    "#define CI_MINOR(gpu, gi, ci) (GI_MINOR(gpu, gi) + 1 + (ci))",
)


def _c_string(text: str) -> str:
    return json.dumps(text)  # ASCII with \t, \n and \" escapes: a C string literal too


def c_header(extra: dict[str, str] | None = None) -> str:
    """``migstate.h`` for the mock NVML: this module's definition of the state, its files
    (the Xid event log's, which sim/xidraise appends to, among them), the driver's
    capability files and the cap minors as C macros (generated at build time; nothing else
    defines them). The roots (``PROC_DRIVER``, ``DEV_DIR``, ``MODE_DIR``) are a node's; sim
    apply passes others for a test root, so the files under them have a ``*_SUB`` or
    ``*_NAME`` form too."""
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
        "MIG_MINORS_SUB": _c_string(MIG_MINORS),
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
        "GIS_PER_GPU": str(MAX_GI),
        "MAX_CIS_PER_GI": str(MAX_CI),
        "MIG_MINORS_GPUS": str(MIG_MINORS_GPUS),
        "STATE_KEY_FORMAT": _c_string("key\t%s\n"),
        "MODE_LINE_FORMAT": _c_string("%s\t%u\n"),
        "ACCESS_FORMAT": _c_string(ACCESS.format(minor="%u", mode="%u")),
        "CONFIG_ACCESS_MODE": f"{CONFIG_ACCESS_MODE}u",
        "ACCESS_MODE": f"{ACCESS_MODE}u",
        "CAP_CONFIG_NODE_MODE": oct(CAP_CONFIG_NODE_MODE).replace("0o", "0"),
        "CAP_NODE_MODE": oct(CAP_NODE_MODE).replace("0o", "0"),
    }
    # the NVSwitch fabric's state file sits beside the MIG state (gpunode.sim.fabric's
    # c_defines, passed in by the build: fabric imports this module, not the other way)
    defines.update(extra or {})
    for name, line in MIG_MINORS_LINES.items():
        defines[f"MIG_MINORS_{name.upper()}_FORMAT"] = _c_string(line + "\n")
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


def profile_key(payload: str) -> str:
    """Names the profile a state was set up for (the mock NVML's payload digest)."""
    return hashlib.sha256(payload.encode()).hexdigest()[:32]


_NOTE = ctypes.CFUNCTYPE(None, ctypes.c_char_p)


def apply_mig(profile: Profile, payload: str, paths: Where, res: Notes) -> None:
    """Set up the node's MIG state and footprint for *profile* (idempotent): the mock
    NVML's ``gpunode_sim_mig_setup`` does it, noting each file it changes in *res*."""
    if profile.driver is None:
        sim_dir = paths.proc_driver / SIM_DIR
        for path in (sim_dir, paths.proc_driver / "nvidia-caps", paths.dev / DEVCAPS_DIR):
            if path.exists():
                shutil.rmtree(path)
                res.note(f"removed {path}")
        return
    note = _NOTE(lambda what: res.note(what.decode()))
    roots = (paths.proc_driver, paths.dev, paths.state.parent)
    args = [payload.encode(), profile_key(payload).encode(), *(os.fsencode(p) for p in roots)]
    lib = ctypes.CDLL(os.fsdecode(paths.mock_base), use_errno=True)
    try:
        setup = lib.gpunode_sim_mig_setup
        setup.argtypes = [ctypes.c_char_p] * 5 + [_NOTE]
        setup.restype = ctypes.c_int
        failed = setup(*args, note) != 0
        errno = ctypes.get_errno()
    finally:
        # unloaded again: the library's soname is libnvidia-ml.so.1, which a later NVML
        # load by that name in this process would otherwise get (and a rebuilt library
        # at the same path would not be mapped anew)
        _dlclose(lib)
    if failed:
        raise OSError(errno, f"cannot set up the MIG state under {paths.proc_driver}: "
                      f"{os.strerror(errno)}")  # fmt: skip


def _dlclose(lib: ctypes.CDLL) -> None:
    dlclose = ctypes.CDLL(None).dlclose
    dlclose.argtypes = [ctypes.c_void_p]
    if dlclose(lib._handle) != 0:
        raise OSError(f"cannot unload {lib._name}")
