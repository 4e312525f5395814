"""The container-create pipeline, written once: request → discovery → GPU selection →
requirement check → edits.

Used by the shim on ``create`` (edits applied to config.json), by ``gpunode explain`` (the
plan shown, or the error a container would get) and by ``gpunode cdi generate`` (discovery →
edits for every GPU; no request). The only place that turns runtime.toml into these calls.
"""

from __future__ import annotations

from ..util.record import record
from . import discovery, edits, specinputs
from .request import Request, check_requirements, parse_request, select_gpus

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any

    from ..nvidia.facts import GpuFacts
    from .config import RuntimeConfig
    from .discovery import Discovery
    from .edits import Edits


@record(frozen=True)
class Plan:
    request: Request
    discovery: Discovery | None = None  # None: not a GPU container
    selected: tuple[GpuFacts, ...] = ()
    edits: Edits | None = None


def request_from_spec(spec: dict[str, Any], cfg: RuntimeConfig) -> Request:
    """The GPU request of an OCI spec, read from its request inputs only
    (gpunode.runtime.specinputs: the NVIDIA_* env, CAP_SYS_ADMIN, the annotations under
    the configured prefixes and the volume-mount requests)."""
    return request_from_inputs(specinputs.inputs(spec, cfg), cfg)


def request_from_inputs(inputs: dict[str, Any], cfg: RuntimeConfig) -> Request:
    return parse_request(
        inputs["env"],
        privileged=inputs["privileged"],
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
    try:
        disc = discovery.load(cfg.cache_file, cfg.driver_root)
    except discovery.DiscoveryError as exc:
        raise edits.EditError(
            f"GPUs requested but the NVIDIA driver is not usable: {exc}"
        ) from None
    selected = select_gpus(request, disc.node.gpus)
    check_requirements(request, disc.node, selected, cfg)
    e = edits.build(
        disc,
        request.capabilities,
        selected,
        hook_path=cfg.hook_path,
        dev_root=cfg.dev_root,
        rootfs=rootfs,
    )
    return Plan(request, disc, tuple(selected), e)


def cdi_spec(cfg: RuntimeConfig, *, store: bool = True) -> dict[str, Any]:
    """The CDI spec of this node, from a fresh discovery (which refreshes the cache, unless
    ``store`` is false)."""
    from . import cdi

    disc = discovery.load(cfg.cache_file, cfg.driver_root, refresh=True, store=store)
    return cdi.generate(disc, hook_path=cfg.hook_path, dev_root=cfg.dev_root)
