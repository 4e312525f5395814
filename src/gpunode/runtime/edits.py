"""Edits: what a GPU container gets — device nodes, mounts, hooks, environment.

Built from a request's capabilities (gpunode.runtime.request), the node's discovery
(gpunode.runtime.discovery) and the selected GPUs (gpunode.runtime.plan runs these steps),
then applied in one of three places: an OCI spec (gpunode.runtime.oci, used by the runtime
shim), a CDI spec (gpunode.runtime.cdi, which converts an Edits value), or shown by
`gpunode explain`.
"""

from __future__ import annotations

import os

from ..nvidia.capabilities import expand_capabilities
from ..nvidia.devices import CONTROL_NODES, Device, gpu_node, stat_device, under
from ..nvidia.facts import GpuFacts
from ..util.record import asdict, factory, record
from .discovery import Discovery
from .specinputs import container_libdir

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from .selection import SelectedMig

LIB_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]
IPC_OPTIONS = ["nosuid", "nodev", "rbind", "rprivate", "noexec"]
# Hooks get exactly this environment: nothing from the image or the engine reaches them
# (CVE-2025-23266 was an image LD_PRELOAD reaching a privileged hook).
HOOK_ENV = ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GPUNODE_HOOK=1"]


class EditError(ValueError):
    """The request cannot be satisfied on this node. One-line message."""


@record(frozen=True)
class Mount:
    source: str
    destination: str
    options: tuple[str, ...]


@record(frozen=True)
class Hook:
    path: str
    args: tuple[str, ...]
    env: tuple[str, ...] = tuple(HOOK_ENV)
    timeout: int = 30


@record
class Edits:
    devices: list[Device] = factory(list)
    mounts: list[Mount] = factory(list)
    hooks: list[Hook] = factory(list)
    env: list[str] = factory(list)
    # cgroup allow rules (c MAJOR:MINOR rwm) without a device node: the MIG capabilities
    # NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES open up
    allow: list[tuple[int, int]] = factory(list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "devices": [asdict(d) for d in self.devices],
            "allow": [list(a) for a in self.allow],
            "mounts": [asdict(m) | {"options": list(m.options)} for m in self.mounts],
            "hooks": [asdict(h) | {"args": list(h.args), "env": list(h.env)} for h in self.hooks],
            "env": list(self.env),
        }


def control_devices(caps: set[str], dev_root: str) -> list[Device]:
    out = []
    wanted = list(CONTROL_NODES["always"])
    if "compute" in caps:
        wanted += CONTROL_NODES["compute"]
    if "display" in caps:
        wanted += CONTROL_NODES["display"]
    for path in wanted:
        dev = stat_device(path, dev_root)
        if dev is None:
            if path == "/dev/nvidiactl":
                raise EditError(
                    f"driver device {path} is missing on this node: is the NVIDIA driver loaded?"
                )
            continue
        out.append(dev)
    return out


def gpu_device(gpu: GpuFacts, dev_root: str) -> Device:
    dev = stat_device(gpu_node(gpu.minor), dev_root)
    if dev is None:
        raise EditError(
            f"GPU {gpu.index} ({gpu.uuid}, {gpu.pci_bus_id}) has no device node "
            f"{gpu_node(gpu.minor)} on this node"
        )
    return dev


def _cap_device(proc_nvidia: str, cap: str, dev_root: str, what: str) -> Device:
    """The cap node of capability ``cap``: its minor read from the driver's access file,
    the node stat'ed (never computed, never an assumed major)."""
    from ..nvidia import mig

    try:
        minor = mig.read_cap_minor(mig.access_file(proc_nvidia, cap))
    except mig.CapsError as exc:
        raise EditError(f"{what}: {exc}") from None
    dev = stat_device(mig.cap_node(minor), dev_root)
    if dev is None:
        raise EditError(f"{what}: no capability device node {mig.cap_node(minor)} on this node")
    return dev


def mig_caps(sel: SelectedMig) -> tuple[str, str]:
    """A MIG device's GI and CI capabilities (gpunode.nvidia.mig names)."""
    from ..nvidia import mig

    return (
        mig.gi_cap(sel.parent.minor, sel.mig.gi),
        mig.ci_cap(sel.parent.minor, sel.mig.gi, sel.mig.ci),
    )


def mig_cap_nodes(sel: SelectedMig, proc_nvidia: str, dev_root: str) -> tuple[Device, Device]:
    """A MIG device's GI and CI cap nodes (/dev/nvidia-caps/nvidia-cap<minor>)."""
    what = f"MIG device {sel.name} ({sel.mig.uuid})"
    gi, ci = mig_caps(sel)
    return (
        _cap_device(proc_nvidia, gi, dev_root, what),
        _cap_device(proc_nvidia, ci, dev_root, what),
    )


def mig_devices(
    migs: Sequence[SelectedMig], proc_nvidia: str, dev_root: str
) -> tuple[list[Device], list[str]]:
    """Per MIG device its GI and CI cap nodes (each once: two compute instances of one GPU
    instance share its GI cap), and the capabilities (paths under
    /proc/driver/nvidia/capabilities) whose access files the container gets."""
    devices: list[Device] = []
    caps: list[str] = []
    for sel in migs:
        for cap, dev in zip(mig_caps(sel), mig_cap_nodes(sel, proc_nvidia, dev_root), strict=True):
            if cap not in caps:
                caps.append(cap)
            if dev not in devices:
                devices.append(dev)
    return devices, caps


def mig_access(
    which: Sequence[str], gpus: Sequence[GpuFacts], proc_nvidia: str, dev_root: str
) -> tuple[list[Device], list[tuple[int, int]]]:
    """NVIDIA_MIG_CONFIG_DEVICES / _MONITOR_DEVICES (``which``: "config", "monitor"): the
    config / monitor cap node, and a cgroup rule for every mig-minor of the given GPUs
    (``/proc/driver/nvidia-caps/mig-minors``), as libnvidia-container's
    setup_mig_minor_cgroups. The rules take the caps major of the stat'ed cap node."""
    from ..nvidia import mig

    devices = [
        _cap_device(
            proc_nvidia,
            mig.CONFIG_CAP if w == "config" else mig.MONITOR_CAP,
            dev_root,
            f"NVIDIA_MIG_{w.upper()}_DEVICES",
        )
        for w in which
    ]
    minors_file = os.path.join(os.path.dirname(proc_nvidia), "nvidia-caps", "mig-minors")
    try:
        with open(minors_file, encoding="ascii", errors="replace") as fh:
            minors = mig.parse_mig_minors(fh.read())
    except OSError as exc:
        raise EditError(
            f"NVIDIA_MIG_{which[0].upper()}_DEVICES: {minors_file} cannot be read "
            f"({exc.strerror or exc})"
        ) from None
    major = devices[0].major
    prefixes = tuple(f"gpu{g.minor}/" for g in gpus)
    allow = [(major, minor) for cap, minor in minors.items() if cap.startswith(prefixes)]
    return devices, sorted(set(allow))


def file_mounts(disc: Discovery, caps: set[str], libdir: str) -> list[Mount]:
    libs, bins, ipc = disc.files.for_capabilities(caps)
    mounts = [Mount(p, f"{libdir}/{os.path.basename(p)}", tuple(LIB_OPTIONS)) for p in libs]
    mounts += [Mount(p, f"/usr/bin/{os.path.basename(p)}", tuple(LIB_OPTIONS)) for p in bins]
    # firmware and IPC sockets keep their paths, without the driver root
    where = disc.files.container_path
    mounts += [Mount(p, where(p), tuple(LIB_OPTIONS)) for p in disc.files.firmware]
    mounts += [Mount(p, where(p), tuple(IPC_OPTIONS)) for p in ipc]
    return mounts


def hook_args(
    disc: Discovery,
    caps: set[str],
    libdir: str,
    gpus: list[GpuFacts] | None,
    mig_caps: Sequence[str] = (),
    mig_caps_all: bool = False,
) -> list[str]:
    """Arguments of the one gpunode-hook invocation a container gets.

    One process does all three jobs (symlinks, ld cache, filtered /proc/driver/nvidia):
    every extra hook is another Python start on the container's critical path.
    `gpus`: the selected GPUs, passed as the complete set (`--gpus-selected`, even when
    empty); None (CDI) lets the hook work them out from the container's device nodes.
    Every injected library gets `--library SONAME::PATH` (its /etc/ld.so.cache entry; the
    path is its SONAME link, or the file itself when the SONAME is its name) and, when
    its SONAME differs from its file name, `--link` for that SONAME link.
    `mig_caps`: the MIG capabilities whose access files the container's
    /proc/driver/nvidia/capabilities shows (`--mig-cap`, bound read-only as the GPUs'
    directories are); `mig_caps_all`: the whole capabilities tree (`--mig-caps-all`,
    NVIDIA_MIG_CONFIG_DEVICES / _MONITOR_DEVICES).
    """
    libs, _, _ = disc.files.for_capabilities(caps)
    names = {os.path.basename(p) for p in libs}
    args: list[str] = []
    for p in libs:
        name = os.path.basename(p)
        soname = disc.files.sonames.get(p, name)  # recorded only where it differs
        if soname != name:
            args += ["--link", f"{name}::{libdir}/{soname}"]
        args += ["--library", f"{soname}::{libdir}/{soname}"]
    suffix = f".so.{disc.node.driver_version}"
    if f"libcuda{suffix}" in names:
        args += ["--link", f"libcuda.so.1::{libdir}/libcuda.so"]
    if f"libnvidia-opticalflow{suffix}" in names:
        args += ["--link", f"libnvidia-opticalflow.so.1::{libdir}/libnvidia-opticalflow.so"]
    if libs:
        args += ["--folder", libdir]
    if disc.files.root not in ("", "/"):
        args += ["--driver-root", disc.files.root]
    for gpu in gpus or []:
        args += ["--gpu", gpu.procfs_bus_id]
    if gpus is not None:
        args.append("--gpus-selected")
    for cap in mig_caps:
        args += ["--mig-cap", cap]
    if mig_caps_all:
        args.append("--mig-caps-all")
    args.append("--proc-driver")
    return args


def build(
    disc: Discovery,
    caps: frozenset[str] | set[str],
    selected: list[GpuFacts] | None,
    *,
    hook_path: str,
    dev_root: str = "/",
    rootfs: str | None = None,
    migs: Sequence[SelectedMig] = (),
    mig_access_caps: Sequence[str] = (),
    mig_gpus: Sequence[GpuFacts] = (),
) -> Edits:
    """Edits for a container given `selected` GPUs and driver capabilities `caps`.

    `selected` None (CDI, whose spec cannot know which GPUs a container gets): no GPU
    device nodes, and the hook works the GPUs out from the container's device nodes.
    `selected` holds every GPU whose /dev/nvidia<minor> the container gets (the MIG
    devices' parents too); `migs` adds each MIG device's GI and CI cap nodes and access
    files. `mig_access_caps` ("config", "monitor"): NVIDIA_MIG_*_DEVICES=all for the
    MIG-enabled GPUs `mig_gpus`.

    No env is set for MIG (nor for full GPUs): the container's NVIDIA_VISIBLE_DEVICES
    stays as the image or engine set it, as under NVIDIA's legacy hook (its jit-CDI mode
    adds NVIDIA_VISIBLE_DEVICES=void; gpunode's CDI spec does the same, in cdi.generate).
    Where libnvidia-container bind-mounts the whole /dev/nvidia-caps directory for
    mig-config / mig-monitor, gpunode gives device nodes (the config / monitor cap and the
    selected MIG devices' caps) plus cgroup rules for every mig-minor of those GPUs: a
    container that creates an instance gets its cap allowed, and sees its node only if it
    has the host's /dev (a privileged container does).
    """
    caps = expand_capabilities(set(caps))
    libdir = container_libdir(rootfs)
    edits = Edits()
    edits.devices = control_devices(caps, dev_root)
    edits.devices += [gpu_device(g, dev_root) for g in selected or []]
    proc_nvidia = under(disc.files.root, "/proc/driver/nvidia")
    mig_caps: list[str] = []
    if mig_access_caps:
        # the whole capabilities tree is shown: the per-device access files are in it
        # (libnvidia-container mounts them only without mig-config / mig-monitor)
        devs, edits.allow = mig_access(mig_access_caps, mig_gpus, proc_nvidia, dev_root)
        edits.devices += devs
    if migs:
        devs, mig_caps = mig_devices(migs, proc_nvidia, dev_root)
        edits.devices += [d for d in devs if d not in edits.devices]
        if mig_access_caps:
            mig_caps = []
    edits.mounts = file_mounts(disc, caps, libdir)
    args = hook_args(disc, caps, libdir, selected, mig_caps, bool(mig_access_caps))
    # No --root: the runtime shim does this work in-process with the rootfs it knows (the
    # hook never reaches an OCI spec), and a CDI hook reads it from the OCI state.
    edits.hooks = [Hook(hook_path, ("gpunode-hook", "configure", *args))]
    return edits
