"""The container-create pipeline, written once: request → discovery → GPU selection →
requirement check → edits.

Used by the shim on ``create`` (edits applied to config.json), by ``gpunode explain`` (the
plan shown, or the error a container would get) and by ``gpunode cdi generate`` (discovery →
edits for every GPU; no request). The only place that turns runtime.toml into these calls.
"""

from __future__ import annotations

from ..util.record import record
from . import discovery, edits, specinputs
from .request import Request, is_mig_id, parse_request
from .requirements import check_requirements
from .selection import check_mig_access, select_devices

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any

    from ..nvidia.facts import GpuFacts, NodeFacts
    from .config import RuntimeConfig
    from .discovery import Discovery
    from .edits import Edits
    from .selection import SelectedMig


@record(frozen=True)
class Plan:
    request: Request
    discovery: Discovery | None = None  # None: not a GPU container
    selected: tuple[GpuFacts, ...] = ()  # every GPU whose device node it gets
    edits: Edits | None = None
    migs: tuple[SelectedMig, ...] = ()
    # The MIG layout this plan depends on ((GPU minor, sorted (gi, ci) pairs) per GPU
    # watched): empty for a request that involves no MIG. gpunode.runtime.prepared keeps
    # it and uses prepared edits only while the driver still shows exactly that layout.
    mig_watch: tuple[tuple[int, tuple[tuple[int, int], ...]], ...] = ()


def request_from_spec(spec: dict[str, Any], cfg: RuntimeConfig) -> Request:
    """The GPU request of an OCI spec, read from its request inputs only
    (gpunode.runtime.specinputs: the NVIDIA_* env, CAP_SYS_ADMIN, NVIDIA's legacy hook
    put in by the engine, the annotations under the configured prefixes and the
    volume-mount requests)."""
    return request_from_inputs(specinputs.inputs(spec, cfg), cfg)


def request_from_inputs(inputs: dict[str, Any], cfg: RuntimeConfig) -> Request:
    return parse_request(
        inputs["env"],
        privileged=inputs["privileged"],
        engine_hook=inputs.get("engine_hook", False),
        mounts=inputs["mounts"],
        annotations=inputs["annotations"],
        cfg=cfg,
    )


def make(request: Request, cfg: RuntimeConfig, rootfs: str | None = None) -> Plan:
    """What a container with ``request`` gets on this node (rootfs decides the library
    directory). Raises RequestError or EditError with the one-line message ``docker run``
    shows."""
    if not request.is_gpu:
        return Plan(request)
    disc = _discover(cfg)
    watch = mig_watch(disc.node, mig_watched(request, disc.node))
    if watch and disc.from_cache:
        from ..nvidia import mig

        if not mig.layout_shown(cfg.driver_root, watch):
            # a MIG layout changes without a driver change: the cache's is stale
            disc = _discover(cfg, refresh=True)
            watch = mig_watch(disc.node, mig_watched(request, disc.node))
    selection = select_devices(request, disc.node.gpus)
    selected = selection.device_gpus
    check_mig_access(request, selection)  # libnvidia-container: before the requirements
    check_requirements(request.requirements, disc.node, selected, cfg)
    mig_gpus = [g for g in selected if g.mig_enabled]
    # libnvidia-container gives the config / monitor capability only when a selected GPU
    # is MIG-capable (mig_config_devices.ngpus); gpunode's facts know MIG mode, so: a
    # selected GPU with MIG mode on (a GPU with MIG off has no MIG capability in use)
    access = [
        w
        for w, on in (("config", request.mig_config), ("monitor", request.mig_monitor))
        if on and mig_gpus
    ]
    e = edits.build(
        disc,
        request.capabilities,
        selected,
        hook_path=cfg.hook_path,
        dev_root=cfg.dev_root,
        rootfs=rootfs,
        migs=selection.migs,
        mig_access_caps=access,
        mig_gpus=mig_gpus,
    )
    return Plan(request, disc, tuple(selected), e, selection.migs, watch)


def _discover(cfg: RuntimeConfig, refresh: bool = False) -> Discovery:
    try:
        return discovery.load(cfg.cache_file, cfg.driver_root, refresh=refresh)
    except discovery.DiscoveryError as exc:
        raise edits.EditError(
            f"GPUs requested but the NVIDIA driver is not usable: {exc}"
        ) from None


def mig_watched(request: Request, node: NodeFacts) -> frozenset[int]:
    """The minors of the GPUs whose MIG layout a request depends on: every GPU for a MIG
    id (a GPU whose MIG mode went on since the cache was written has devices it lacks);
    the MIG-enabled ones for `all` and NVIDIA_MIG_*_DEVICES. Empty when no MIG is
    involved: a node without MIG pays nothing."""
    ids = request.devices or ()
    if any(is_mig_id(d) for d in ids):
        return frozenset(g.minor for g in node.gpus)
    if any(d.lower() == "all" for d in ids) or request.mig_config or request.mig_monitor:
        return frozenset(g.minor for g in node.gpus if g.mig_enabled)
    return frozenset()


def mig_watch(node: NodeFacts, minors: frozenset[int]) -> tuple:
    """Plan.mig_watch: the (gi, ci) pairs ``node`` has for each GPU of ``minors``."""
    return tuple(
        (g.minor, tuple(sorted((m.gi, m.ci) for m in g.mig)))
        for g in node.gpus
        if g.minor in minors
    )


def cdi_spec(cfg: RuntimeConfig, *, store: bool = True) -> dict[str, Any]:
    """The CDI spec of this node, from a fresh discovery (which refreshes the cache, unless
    ``store`` is false)."""
    from . import cdi

    disc = discovery.load(cfg.cache_file, cfg.driver_root, refresh=True, store=store)
    return cdi.generate(disc, hook_path=cfg.hook_path, dev_root=cfg.dev_root)
