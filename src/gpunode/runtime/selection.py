"""Device selection: a request's device ids resolved against the node's GPUs and MIG
devices, as libnvidia-container's select_devices does, and the MIG config/monitor rule that
depends on what was selected.

Pure: no NVML, no file system. An id the node does not have is a RequestError naming it and
listing what the node has.
"""

from __future__ import annotations

from ..nvidia.busid import BusId
from ..nvidia.facts import GpuFacts, MigFacts
from ..util.record import record
from .request import (
    ENV_MIG_CONFIG,
    ENV_MIG_MONITOR,
    ENV_VISIBLE_DEVICES,
    Request,
    is_mig_id,
    nvidia_gpu_cdi_id,
)
from .userinput import RequestError, as_index, is_number, show

TYPE_CHECKING = False  # typing and collections cost milliseconds on every GPU container start
if TYPE_CHECKING:
    from collections.abc import Sequence


def _pci_key(bus_id: str) -> BusId | None:
    try:
        return BusId.parse(bus_id)
    except ValueError:
        return None


def _describe(gpus: Sequence[GpuFacts]) -> str:
    if not gpus:
        return "this node has no GPUs"
    listed = ", ".join(f"{g.index} ({g.uuid}, {g.pci_bus_id})" for g in gpus)
    return f"this node has: {listed}"


@record(frozen=True)
class SelectedMig:
    """A selected MIG device and its parent GPU."""

    parent: GpuFacts
    mig: MigFacts

    @property
    def name(self) -> str:
        """``<gpu index>:<n>``, as NVIDIA names it."""
        return f"{self.parent.index}:{self.mig.index}"


@record(frozen=True)
class Selection:
    """What a request selects: full GPUs (in request order) and MIG devices."""

    gpus: tuple[GpuFacts, ...] = ()
    migs: tuple[SelectedMig, ...] = ()

    @property
    def device_gpus(self) -> list[GpuFacts]:
        """Every GPU whose /dev/nvidia<minor> the container gets: the full GPUs, then the
        parents of the MIG devices (libnvidia-container adds a MIG device's parent to its
        GPUs), each once. NVIDIA_REQUIRE_* is evaluated on these."""
        out = list(self.gpus)
        for m in self.migs:
            if m.parent not in out:
                out.append(m.parent)
        return out


def _describe_migs(gpus: Sequence[GpuFacts]) -> str:
    listed = [f"{g.index}:{m.index} ({m.uuid}, gi {m.gi} ci {m.ci})" for g in gpus for m in g.mig]
    if not listed:
        return "this node has no MIG devices"
    return f"this node's MIG devices: {', '.join(listed)}"


def _mig_by_legacy_uuid(device_id: str, gpus: Sequence[GpuFacts]) -> list[SelectedMig]:
    """``MIG-GPU-<parent uuid>/<gi>/<ci>`` (the MIG UUID form of older drivers, which
    go-nvlib still accepts): the MIG device with that GI and CI on that GPU."""
    parent_uuid, _, rest = device_id[len("MIG-") :].partition("/")
    gi, _, ci = rest.partition("/")
    if not (is_number(gi) and is_number(ci)):
        return []
    return [
        SelectedMig(g, m)
        for g in gpus
        if g.uuid.lower() == parent_uuid.lower()
        for m in g.mig
        if (m.gi, m.ci) == (as_index(gi), as_index(ci))
    ]


def _find_mig(device_id: str, gpus: Sequence[GpuFacts]) -> list[SelectedMig]:
    """A MIG device id (libnvidia-container's select_mig_device): a MIG UUID (either form,
    case-insensitive) or ``<gpu index>:<n>``, n the MIG device's position in its GPU's
    list (not its GPU instance id)."""
    if device_id.upper().startswith("MIG-"):
        found = [
            SelectedMig(g, m) for g in gpus for m in g.mig if m.uuid.lower() == device_id.lower()
        ]
        if not found and device_id.upper().startswith("MIG-GPU-"):
            found = _mig_by_legacy_uuid(device_id, gpus)
        return found
    a, _, b = device_id.partition(":")
    return [
        SelectedMig(g, m)
        for g in gpus
        if g.index == as_index(a)
        for m in g.mig
        if m.index == as_index(b)
    ]


def select_devices(request: Request, gpus: Sequence[GpuFacts]) -> Selection:
    """Resolve the request's device ids to full GPUs and MIG devices, as
    libnvidia-container's select_devices does.

    Full-GPU ids: decimal index, GPU UUID (case-insensitive), PCI bus id (0000:07:00.0,
    00000000:07:00.0 or 07:00.0; case-insensitive, compared numerically). MIG ids:
    ``MIG-<uuid>``, ``MIG-GPU-<uuid>/<gi>/<ci>``, ``<gpu index>:<n>``. Duplicates are
    dropped, first-seen order kept. An unknown id raises RequestError naming it and listing
    what the node has.

    ``all``: every full GPU whose MIG mode is off, and every MIG device. A MIG-enabled GPU
    is not given as a full GPU by ``all`` (its /dev/nvidia<minor> comes with its MIG
    devices, as nvidia-ctk's CDI ``all`` and the contract define it).

    A MIG-enabled GPU named by index, UUID or bus id: gpunode gives the full GPU, as
    libnvidia-container does (select_gpu_device matches before any MIG rule and its
    device_mount gives /dev/nvidia<minor> and the GPU's /proc directory; no MIG
    capability is added). NVML in such a container sees the GPU in MIG mode but none of its
    MIG devices (it has no GI/CI capability), exactly as under NVIDIA's runtime; refusing
    it would break images and device plugins that work with NVIDIA's.
    """
    ordered = sorted(gpus, key=lambda g: g.index)
    if not request.devices:
        return Selection()
    chosen: list[GpuFacts] = []
    migs: list[SelectedMig] = []
    for device_id in request.devices:
        if device_id.lower() == "all":  # nvidia-container-cli: "all" is case-insensitive
            chosen.extend(g for g in ordered if not g.mig_enabled and g not in chosen)
            migs.extend(
                m for g in ordered for m in (SelectedMig(g, x) for x in g.mig) if m not in migs
            )
            continue
        found_migs: list[SelectedMig] = []
        if is_number(device_id):
            matches = [g for g in ordered if g.index == as_index(device_id)]
        elif device_id.upper().startswith("GPU-"):
            matches = [g for g in ordered if g.uuid.lower() == device_id.lower()]
        elif is_mig_id(device_id):
            matches = []
            found_migs = _find_mig(device_id, ordered)
            if not found_migs:
                raise RequestError(
                    f"unknown MIG device '{show(_asked(request, device_id))}' requested; "
                    f"accepted: <gpu index>:<n>, MIG-<uuid>, MIG-GPU-<uuid>/<gi>/<ci>; "
                    f"{_describe_migs(ordered)}"
                )
        elif (key := _pci_key(device_id)) is not None:
            matches = [g for g in ordered if _pci_key(g.pci_bus_id) == key]
        else:
            matches = []
        if not matches and not found_migs:
            raise RequestError(
                f"unknown device '{show(_asked(request, device_id))}' requested; "
                f"{_describe(ordered)}"
            )
        for gpu in matches:
            if gpu not in chosen:
                chosen.append(gpu)
        for m in found_migs:
            if m not in migs:
                migs.append(m)
    return Selection(tuple(chosen), tuple(migs))


def _asked(request: Request, device_id: str) -> str:
    """The id as the request wrote it (its CDI name when it came as one)."""
    return next((c for c in request.cdi_devices if nvidia_gpu_cdi_id(c) == device_id), device_id)


def check_mig_access(request: Request, selection: Selection) -> None:
    """NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES with specific MIG devices
    selected are refused (libnvidia-container: "cannot enable mig-config with specific MIG
    devices selected"); with `all` or full GPUs they are allowed."""
    if request.devices == ("all",) or not selection.migs:
        return
    for flag, name in (
        (request.mig_config, ENV_MIG_CONFIG),
        (request.mig_monitor, ENV_MIG_MONITOR),
    ):
        if flag:
            what = "mig-config" if name == ENV_MIG_CONFIG else "mig-monitor"
            raise RequestError(
                f"{name}=all: cannot enable {what} with specific MIG devices selected "
                f"({', '.join(m.name for m in selection.migs)}); accepted with "
                f"{ENV_VISIBLE_DEVICES}=all or full GPUs"
            )
