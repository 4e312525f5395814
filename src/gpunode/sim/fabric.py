"""The simulated NVSwitch fabric: its one state, who writes and who reads it, the driver's
NVSwitch footprint, and the fabric manager stand-in that trains it.

On an HGX/DGX baseboard nothing CUDA does works until NVIDIA's fabric manager
(``nv-fabricmanager``, unit ``nvidia-fabricmanager.service``) of exactly the driver's
version has trained the NVSwitch fabric; on Hopper and later NVML reports each GPU's
part in it (``nvmlDeviceGetGpuFabricInfo``/``…InfoV``: state NOT_STARTED (1) until FM
runs, IN_PROGRESS (2) while it trains, COMPLETED (3) with a status once done). A100-class
GPUs answer that query NVML_ERROR_NOT_SUPPORTED; their readiness is the service.

**The state, and its one owner.** The node's fabric state is one small file on the
simulated driver's runtime tmpfs (the node's ``/proc/driver``, which procdriver shows in
every container): :data:`STATE_NAME` in the simulator-private dot-directory
``/proc/driver/.gpunode-sim`` (:data:`gpunode.sim.migstate.SIM_DIR`, beside the MIG state),
one line in :data:`STATE_FORMAT` (``state=<nvmlGpuFabricState_t>``). As in go-nvml's mock,
where the device object holds the answer and every call reads it, there is exactly one
place the state lives and one meaning of it:

* the fabric manager stand-in (:data:`STANDIN`, the only writer while the driver is loaded)
  writes IN_PROGRESS, then COMPLETED, each as a temporary file renamed over the state;
* the mock NVML (``mocknvml/links.c``) reads it on every fabric query of a GPU the profile
  puts on an NVSwitch fabric (Hopper or later with NVLinks); no file, or one it cannot
  parse, is NOT_STARTED. What a trained GPU reports as its status is the hardware's: the
  profile's (the ``fabric_manager_failed`` fault: NVML_ERROR_UNKNOWN), never the file's;
* a driver load resets it: ``gpunode sim apply`` removes the file whenever it (re)loads the
  driver (:func:`reset`: the tmpfs newly mounted, or another profile/driver), and a node
  restart loses the tmpfs with it. Stopping the stand-in leaves the fabric trained, as
  stopping NVIDIA's FM does, until that next load.

The file's name and format are defined here only: the mock gets them through the
generated ``migstate.h`` (``FABRIC_NAME``, ``FABRIC_FORMAT``; :func:`c_defines`), the
stand-in spells them once and tests/unit/sim/test_fabric.py holds it to these values.

**The driver's NVSwitch footprint** (:func:`proc_tree`): the nvidia module creates
``/proc/driver/nvidia-nvswitch/`` with ``permissions`` and a ``devices/`` directory, and
one ``devices/<domain:bus:dev.fn>/information`` per NVSwitch it probed
(open-gpu-kernel-modules ``kernel-open/nvidia/procfs_nvswitch.c``). NVIDIA's driver
container starts FM when that directory is not empty; gpunode's validation counts it. The
switches' PCI functions (vendor 0x10de, class 0x068000, device 0x1af1 on A100 boards,
0x22a3 on H100/H200 boards) are :mod:`gpunode.sim.pcisysfs`'s.

**The stand-in** (``fabricmanager/nv-fabricmanager``, Python 3, run on the node as
``/usr/bin/nv-fabricmanager`` by ``fabricmanager/nvidia-fabricmanager.service``): its own
version is baked in at package build, as NVIDIA's binary carries its own: the script holds
the placeholder :data:`VERSION_PLACEHOLDER`, which :func:`render_standin` (the package
builder's call) replaces; an unrendered script refuses to run. It then does what NVIDIA's
does, in NVIDIA's words: reads the loaded driver's version from
``/proc/driver/nvidia/version``; exits 1 with :data:`MISMATCH` when it differs from its
own; exits 1 with :data:`NOTHING_TO_DO` when the driver registered no NVSwitch; otherwise
trains the fabric (IN_PROGRESS, then COMPLETED) and, with ``DAEMONIZE=1`` (the config's
default), forks: the parent writes :data:`PID_FILE` and exits 0 once the fabric is trained
(systemd's ``Type=forking`` start returns then), the child stays resident until SIGTERM.
"""

from __future__ import annotations

import re
from pathlib import Path

from . import migstate

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .profiles import Profile

# nvmlGpuFabricState_t (NVIDIA's nvml.h, as go-nvml's pkg/nvml/nvml.h carries it)
NOT_SUPPORTED, NOT_STARTED, IN_PROGRESS, COMPLETED = 0, 1, 2, 3

STATE_NAME = "fabric"  # under /proc/driver/<migstate.SIM_DIR>
STATE_FORMAT = "state=%u\n"  # printf/scanf form: the mock's and the stand-in's
STATE_RE = re.compile(r"state=(\d+)\n?")

NVSWITCH_PROC = "nvidia-nvswitch"  # under /proc/driver
# procfs_nvswitch.c: nv_procfs_read_permissions, nv_procfs_read_device_info ("N/A" when the
# driver read no BIOS version; the simulator's switches have none)
PERMISSIONS = "DeviceFileMode: 438\n"
INFORMATION = "BIOS Version: N/A\n"

# The stand-in and its unit, as NVIDIA's package installs them (hgx.md §2: /usr/bin,
# /lib/systemd/system, /usr/share/nvidia/nvswitch).
STANDIN_DIR = Path(__file__).resolve().with_name("fabricmanager")
STANDIN = STANDIN_DIR / "nv-fabricmanager"
UNIT = STANDIN_DIR / "nvidia-fabricmanager.service"
UNIT_NAME = "nvidia-fabricmanager.service"
BINARY = "/usr/bin/nv-fabricmanager"
CONFIG = "/usr/share/nvidia/nvswitch/fabricmanager.cfg"
PID_FILE = "/var/run/nvidia-fabricmanager/nv-fabricmanager.pid"
VERSION_PLACEHOLDER = "@FM_VERSION@"
# NVIDIA's lines (gpu-operator #544; gpud's fabric-manager component, forum reports)
MISMATCH = (
    "fabric manager NVIDIA GPU driver interface version {fm} don't match with driver "
    "version {driver}. Please update with matching NVIDIA driver package."
)
NOTHING_TO_DO = (
    "request to query NVSwitch device information from NVSwitch driver failed with "
    "error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]"
)


def render_standin(version: str, source: Path | None = None) -> str:
    """The stand-in's script for a fabric manager package of ``version`` (the package
    builder's call, gpunode.sim.nvidiarepo; ``source``: the script, default :data:`STANDIN`):
    the placeholder replaced by the version, as NVIDIA's binary has its own compiled in."""
    if not re.fullmatch(r"\d+\.\d+(\.\d+)?", version):
        raise ValueError(f"fabric manager version {version!r}: expected e.g. 550.163.01")
    text = (source or STANDIN).read_text(encoding="utf-8")
    if text.count(VERSION_PLACEHOLDER) != 1:
        raise ValueError(f"{source or STANDIN}: holds {text.count(VERSION_PLACEHOLDER)} "
                         f"{VERSION_PLACEHOLDER} placeholders, not one")  # fmt: skip
    return text.replace(VERSION_PLACEHOLDER, version)


def c_defines() -> dict[str, str]:
    """The state's name and format for the mock (migstate.h, generated at build time)."""
    return {
        "FABRIC_NAME": migstate._c_string(STATE_NAME),
        "FABRIC_FORMAT": migstate._c_string(STATE_FORMAT),
    }


def state_file(proc_driver: Path) -> Path:
    return proc_driver / migstate.SIM_DIR / STATE_NAME


def read_state(proc_driver: Path) -> int:
    """The node's fabric state as the mock reads it: NOT_STARTED without a (valid) file."""
    try:
        m = STATE_RE.fullmatch(state_file(proc_driver).read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError):
        return NOT_STARTED
    return int(m.group(1)) if m else NOT_STARTED


def reset(proc_driver: Path) -> bool:
    """A driver load: the fabric is untrained again (True when a trained or training state
    was dropped)."""
    try:
        state_file(proc_driver).unlink()
    except FileNotFoundError:
        return False
    return True


def proc_tree(profile: Profile) -> dict[str, str]:
    """The driver's /proc/driver/nvidia-nvswitch files (path under /proc/driver -> text) for
    a profile with a driver: ``permissions`` and one ``devices/<address>/information`` per
    NVSwitch the profile's NVLinks reach (none on a board without NVSwitches: the directory
    is empty, as the module leaves it)."""
    from .profiles import nvswitches

    files = {f"{NVSWITCH_PROC}/permissions": PERMISSIONS}
    for bus, _device, _numa in nvswitches(profile):
        files[f"{NVSWITCH_PROC}/devices/{bus.procfs}/information"] = INFORMATION
    return files
