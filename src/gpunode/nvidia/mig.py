"""MIG as the driver shows it outside NVML: the capability files and device nodes that give a
process access to a MIG device.

The driver publishes one "access" file per capability under ``/proc/driver/nvidia/capabilities``:
``mig/config`` and ``mig/monitor`` (reconfigure / watch every MIG device) and, while a GPU
instance or compute instance exists, ``gpu<minor>/mig/gi<G>/access`` and
``gpu<minor>/mig/gi<G>/ci<C>/access`` (``<minor>``: the parent GPU's minor number). Each file
says which ``/dev/nvidia-caps/nvidia-cap<N>`` node grants that capability::

    DeviceFileMinor: 3
    DeviceFileMode: 292
    DeviceFileModify: 1

A process sees a MIG device when it can open both its GI and its CI cap node (NVIDIA's
libnvidia-container injects exactly those, with the parent's /dev/nvidia<minor>).
``/proc/driver/nvidia-caps/mig-minors`` lists every cap the driver may create as
``<cap> <minor>``. Minors are always read from these files, never computed: the numbering is
the driver's business.
"""

from __future__ import annotations

import os

from .devices import under

PROC_NVIDIA = "/proc/driver/nvidia"
CAPS_DIR = "capabilities"  # under /proc/driver/nvidia
CONFIG_CAP = "mig/config"
MONITOR_CAP = "mig/monitor"
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
CAP_NODE_DIR = "/dev/nvidia-caps"
_MAX_ACCESS_FILE = 4096


class CapsError(RuntimeError):
    """A capability file is missing or says no device minor; one line naming the file."""


def gi_cap(gpu_minor: int, gi: int) -> str:
    """The capability name of a GPU instance (as mig-minors spells it)."""
    return f"gpu{gpu_minor}/mig/gi{gi}/access"


def ci_cap(gpu_minor: int, gi: int, ci: int) -> str:
    """The capability name of a compute instance."""
    return f"gpu{gpu_minor}/mig/gi{gi}/ci{ci}/access"


def access_file(proc_nvidia: str, cap: str) -> str:
    """The access file of ``cap`` under the driver's procfs (``/proc/driver/nvidia``)."""
    return os.path.join(proc_nvidia, CAPS_DIR, cap)


def cap_node(minor: int) -> str:
    """The device node that grants the capability with this minor."""
    return f"{CAP_NODE_DIR}/nvidia-cap{minor}"


def parse_access(text: str, where: str) -> int:
    """The ``DeviceFileMinor:`` of an access file's text."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "DeviceFileMinor":
            value = value.strip()
            if value.isdigit() and value.isascii():
                return int(value)
            break
    raise CapsError(f"{where}: no 'DeviceFileMinor: <number>' line")


def read_cap_minor(path: str) -> int:
    """The device minor an access file names."""
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_ACCESS_FILE)
    except OSError as exc:
        raise CapsError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    return parse_access(data.decode("ascii", "replace"), path)


def parse_mig_minors(text: str) -> dict[str, int]:
    """``/proc/driver/nvidia-caps/mig-minors`` as {cap: minor}; malformed lines are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit() and parts[1].isascii():
            out[parts[0]] = int(parts[1])
    return out


def instances(proc_nvidia: str, gpu_minor: int) -> frozenset[tuple[int, int]]:
    """The (GI, CI) pairs the driver shows for a GPU now: the ``gi*/ci*`` directories of its
    capability tree. Cheap (a few directory reads): the runtime compares it with what it
    cached to notice a layout changed behind its back."""
    base = os.path.join(proc_nvidia, CAPS_DIR, f"gpu{gpu_minor}", "mig")
    found: set[tuple[int, int]] = set()
    try:
        gis = os.listdir(base)
    except OSError:
        return frozenset()
    for gi_name in gis:
        gi = _numbered(gi_name, "gi")
        if gi is None:
            continue
        try:
            cis = os.listdir(os.path.join(base, gi_name))
        except OSError:
            continue
        for ci_name in cis:
            ci = _numbered(ci_name, "ci")
            if ci is not None:
                found.add((gi, ci))
    return frozenset(found)


def layout_shown(driver_root: str, watch) -> bool:
    """Whether the driver (its procfs under ``driver_root``) still shows exactly the recorded
    (GI, CI) pairs for each GPU: ``watch`` is ``((gpu minor, ((gi, ci), ...)), ...)`` (lists,
    as JSON keeps it, do too). A few directory reads."""
    proc_nvidia = under(driver_root, PROC_NVIDIA)
    return all(
        instances(proc_nvidia, minor) == {(gi, ci) for gi, ci in pairs} for minor, pairs in watch
    )


def _numbered(name: str, prefix: str) -> int | None:
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(rest) if rest.isdigit() and rest.isascii() else None
