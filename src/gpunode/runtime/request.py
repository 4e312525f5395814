"""How a container's GPU request is read (NVIDIA's image environment semantics).

The spec is section 1 of the container-toolkit reference ("Image environment semantics"):
`internal/config/image/*` and the hook's `container_config.go` for reading the request.

Everything here is pure: no NVML, no file system. `parse_request` turns an OCI spec's
environment, mounts and annotations into a `Request`; `selection.select_devices` resolves its
device ids against the node's GPUs and `requirements.check_requirements` evaluates its
NVIDIA_REQUIRE_* expressions (libnvidia-container's `src/cli/dsl.c` / `src/cli/common.c`).
Every user-facing failure is a `RequestError` (userinput) with a one-line message, because it
ends up as the error `docker run` prints.
"""

from __future__ import annotations

from ..nvidia.capabilities import ALL_CAPABILITIES
from ..util.record import record
from .config import RuntimeConfig
from .requirements import ENV_DISABLE_REQUIRE, ENV_REQUIRE_CUDA
from .requirements import from_env as requirements_from_env
from .specinputs import DEVICE_MOUNT_ROOT, ENV_CUDA_VERSION
from .userinput import RequestError, is_number, show

TYPE_CHECKING = False  # typing and collections cost milliseconds on every GPU container start
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
ENV_DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"

# Fully-qualified CDI device name: vendor/class=name (see is_cdi_name).
# NVIDIA's CDI vendors: `nvidia.com` (generated specs), `runtime.nvidia.com` (the
# toolkit's jit-CDI mode) and `k8s.device-plugin.nvidia.com` (NVIDIA's device plugin in its
# CDI strategies: its own spec's kind, hard-coded in the plugin; its ids are GPU UUIDs,
# indices or MIG UUIDs). Their `gpu` class names select GPUs like plain device ids, so the
# plugin's cdi-annotations reach GPUs through gpunode's runtime on containerd 1.6 (no CDI
# there; the handler must pass cdi.k8s.io/*: `--pass-annotations`); any other name of these
# vendors is refused, never silently ignored.
NVIDIA_CDI_VENDORS = ("nvidia.com", "runtime.nvidia.com", "k8s.device-plugin.nvidia.com")
NVIDIA_GPU_CDI_PREFIXES = tuple(f"{v}/gpu=" for v in NVIDIA_CDI_VENDORS)
ENV_MIG_CONFIG = "NVIDIA_MIG_CONFIG_DEVICES"
ENV_MIG_MONITOR = "NVIDIA_MIG_MONITOR_DEVICES"

# The plain patterns are matched without `re`: its import and compiles cost ~3 ms on every
# GPU container start (only legacy CUDA_VERSION images need requirements._SEMVER, lazily).
_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz0123456789")
_ALNUM = _LOWER | frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_CDI_VENDOR = _LOWER | frozenset(".-")
_CDI_CLASS = _ALNUM | frozenset("._-")
_CDI_DEVICE = _CDI_CLASS | frozenset(":")


def _only(text: str, chars: frozenset[str]) -> bool:
    """``text`` is not empty and has only ``chars``: the regex ``[chars]+``."""
    return bool(text) and all(c in chars for c in text)


def _is_mig_index(text: str) -> bool:
    """``[0-9]+:[0-9]+``"""
    a, sep, b = text.partition(":")
    return bool(sep) and is_number(a) and is_number(b)


def is_cdi_name(text: str) -> bool:
    """A fully-qualified CDI device name: ``[a-z0-9.-]+/[a-zA-Z0-9._-]+=[a-zA-Z0-9._:-]+``."""
    vendor, slash, rest = text.partition("/")
    cls, eq, name = rest.partition("=")
    return (
        bool(slash and eq)
        and _only(vendor, _CDI_VENDOR)
        and _only(cls, _CDI_CLASS)
        and _only(name, _CDI_DEVICE)
    )


_TRUE = frozenset({"1", "t", "T", "true", "TRUE", "True"})  # Go strconv.ParseBool


@record(frozen=True)
class Request:
    # None: not a GPU container (leave the spec alone); (): driver only ("none");
    # ("all",); or device ids as given (index, GPU-uuid, PCI bus id).
    devices: tuple[str, ...] | None
    # Fully-qualified CDI names (vendor/class=name), from annotations, volume mounts or
    # NVIDIA_VISIBLE_DEVICES entries.
    cdi_devices: tuple[str, ...]
    capabilities: frozenset[str]
    # Raw NVIDIA_REQUIRE_* expressions (sorted by variable name), then the legacy
    # cuda>=X.Y one. Empty when requirements are disabled.
    requirements: tuple[str, ...]
    source: str  # "env", "volume-mounts", "annotations" or "none"
    legacy: bool
    # NVIDIA_MIG_CONFIG_DEVICES=all / NVIDIA_MIG_MONITOR_DEVICES=all (privileged only)
    mig_config: bool = False
    mig_monitor: bool = False
    # The secure gate's silent outcome, said: (variable, value) of a GPU request in an
    # unprivileged container's env that accept-envvar-unprivileged = false ignored (its
    # NVIDIA_VISIBLE_DEVICES, or a legacy image's CUDA_VERSION); None when nothing was.
    # The caller logs it (ignored_note); nothing here writes.
    ignored_env: tuple[str, str] | None = None

    @property
    def is_gpu(self) -> bool:
        # Only NVIDIA GPU requests count: a container that names nothing but other
        # vendors' CDI devices (vendor.com/fpga=f0) is left to the engine's own CDI
        # support, and gpunode leaves its spec untouched.
        return self.devices is not None


# --------------------------------------------------------------------------- environment


def _env_dict(env: list[str] | Mapping[str, str] | None) -> dict[str, str]:
    if env is None:
        return {}
    if hasattr(env, "keys"):  # a mapping (as dict() tells one)
        return dict(env)
    out: dict[str, str] = {}
    for entry in env:
        key, sep, value = entry.partition("=")
        if sep:  # Go's image builder skips entries without "="; later duplicates win
            out[key] = value
    return out


def _split(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


def _is_legacy(env: Mapping[str, str]) -> bool:
    return bool(env.get(ENV_CUDA_VERSION)) and not env.get(ENV_REQUIRE_CUDA)


def _parse_bool(value: str) -> bool:
    """Go strconv.ParseBool, where a parse error counts as false (as NVIDIA's code does)."""
    return value in _TRUE


# --------------------------------------------------------------------------- devices


def is_mig_id(device_id: str) -> bool:
    """A MIG device id: ``MIG-...`` or ``<gpu index>:<n>``."""
    return device_id.upper().startswith("MIG-") or _is_mig_index(device_id)


def _devices_from_tokens(
    tokens: Sequence[str],
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """NVIDIA's NewVisibleDevices, extended with CDI names: (devices, cdi_devices).

    Tokens are already trimmed and non-empty. Empty or containing "void": not a GPU
    container. Fully-qualified CDI names go to cdi_devices; the rest are device ids, and the
    first "all" or "none" among the ids decides.

    gpunode choice: an `nvidia.com/gpu=X`, `runtime.nvidia.com/gpu=X` (NVIDIA's jit-CDI
    name) or `k8s.device-plugin.nvidia.com/gpu=X` (NVIDIA's device plugin) CDI name is ALSO
    read as the plain device id X, so gpunode's runtime serves it from its own discovery even
    when no CDI spec file exists on the node. The name stays in cdi_devices too, so a
    CDI-aware consumer still sees exactly what was asked for. Any other name of an NVIDIA
    vendor (`nvidia.com/foo=1`) is an error: a GPU request must never turn into a container
    without GPUs.
    """
    if not tokens or "void" in tokens:
        return None, ()
    cdi: list[str] = []
    ids: list[str] = []
    for token in tokens:
        if is_cdi_name(token):
            cdi.append(token)
            device_id = nvidia_gpu_cdi_id(token)
            if device_id is not None:
                ids.append(device_id)
            elif token.partition("/")[0] in NVIDIA_CDI_VENDORS:
                raise RequestError(
                    f"unknown CDI device '{show(token)}' requested; accepted NVIDIA names: "
                    f"{'X, '.join(NVIDIA_GPU_CDI_PREFIXES)}X with X an index, a GPU UUID, "
                    "a MIG device (<gpu>:<n> or its MIG UUID) or all"
                )
        else:
            ids.append(token)
    devices: tuple[str, ...] | None = tuple(ids) if ids else None
    for device_id in ids:
        if device_id == "all":
            devices = ("all",)
            break
        if device_id == "none":
            devices = ()
            break
    return devices, tuple(cdi)


def nvidia_gpu_cdi_id(name: str) -> str | None:
    """The device id in an NVIDIA GPU CDI name (`nvidia.com/gpu=1` -> "1"), else None."""
    for prefix in NVIDIA_GPU_CDI_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return None


def _tokens_from_annotations(annotations: Mapping[str, str], prefixes: Sequence[str]) -> list[str]:
    tokens: list[str] = []
    for key in sorted(annotations):
        if any(key.startswith(p) for p in prefixes):
            tokens.extend(_split(str(annotations[key])))
    return tokens


def _tokens_from_mounts(mounts: Sequence[Mapping]) -> list[str]:
    tokens: list[str] = []
    for mount in mounts:
        if not isinstance(mount, dict) or mount.get("source") != "/dev/null":
            continue
        dest = mount.get("destination")
        if not isinstance(dest, str) or not dest.startswith(DEVICE_MOUNT_ROOT):
            continue
        rest = dest[len(DEVICE_MOUNT_ROOT) :].strip("/")
        if not rest or rest.startswith("imex/"):
            continue  # imex/<n> are IMEX channels, not GPUs
        if rest.startswith("cdi/"):
            parts = rest[len("cdi/") :].split("/")
            if len(parts) == 3:  # cdi/<vendor>/<class>/<name>
                tokens.append(f"{parts[0]}/{parts[1]}={parts[2]}")
            elif len(parts) == 2 and "=" in parts[1]:  # cdi/<vendor>/<class>=<name>
                tokens.append(f"{parts[0]}/{parts[1]}")
            continue
        tokens.append(rest)
    return tokens


# --------------------------------------------------------------------------- capabilities


def _capabilities(env: Mapping[str, str], legacy: bool, cfg: RuntimeConfig) -> frozenset[str]:
    supported = frozenset(cfg.supported_capabilities)
    raw = env.get(ENV_DRIVER_CAPABILITIES)
    if raw is None and legacy:
        return supported
    requested = _split(raw or "")
    if not requested:
        return frozenset(cfg.default_capabilities) & supported
    if "all" in requested:
        return supported
    for cap in requested:
        if cap not in ALL_CAPABILITIES:
            raise RequestError(
                f"unknown driver capability '{show(cap)}' in {ENV_DRIVER_CAPABILITIES}; accepted: "
                f"all, {', '.join(ALL_CAPABILITIES)}"
            )
        if cap not in supported:
            raise RequestError(
                f"unsupported driver capability '{show(cap)}' in {ENV_DRIVER_CAPABILITIES}; this "
                f"node supports: {', '.join(sorted(supported)) or 'none'}"
            )
    return frozenset(requested)


# --------------------------------------------------------------------------- request


def cdi_injected(env: Mapping[str, str]) -> bool:
    """Whether an engine has already applied an NVIDIA-style CDI spec to this container:
    its env says NVIDIA_VISIBLE_DEVICES=void, which every such spec sets in its common
    edits (gpunode's own, `nvidia-ctk cdi generate`'s, the device plugin's: container-toolkit
    §2b) precisely so that a legacy consumer of the variable keeps off. CDI env edits
    replace a variable of the same name, so after containerd (>= 1.7, enable_cdi) or Docker
    (>= 25, --device) injected such a spec the value is "void" whatever the pod or image
    said. An image that sets void itself asks for no GPU by NVIDIA's rules anyway."""
    return "void" in _split(env.get(ENV_VISIBLE_DEVICES, ""))


def parse_request(
    env: list[str] | dict[str, str],
    *,
    privileged: bool = False,
    engine_hook: bool = False,
    mounts: list[dict] | None = None,
    annotations: dict[str, str] | None = None,
    cfg: RuntimeConfig | None = None,
) -> Request:
    """Read a container's GPU request from its OCI process env, mounts and annotations.

    Device sources, first non-empty wins: CDI annotations, volume mounts (only with
    accept-volume-mounts), then NVIDIA_VISIBLE_DEVICES (only if privileged, or the engine
    put NVIDIA's legacy hook in the spec (``engine_hook``), or accept-envvar-unprivileged).
    Capabilities and requirements always come from the env. For a GPU container they are
    validated here (so errors surface even on a node without GPUs); for a non-GPU container
    they are resolved best-effort and never raise, because such a container must run
    exactly as with runc.

    The gates, and why (README "Kubernetes nodes", Security):

    * The env is the pod's and the image's to write (a CUDA base image carries
      ``ENV NVIDIA_VISIBLE_DEVICES=all``, and an image's ENV reaches the OCI spec exactly
      as a pod's env entry does: containerd merges both into process.env), so with
      accept-envvar-unprivileged = false it is not read for an unprivileged container
      (every CUDA-image pod without a GPU must still start). As NVIDIA's, and, as NVIDIA's
      runtime does, not silently: the request ignored is kept in ``ignored_env`` for the
      runtime's log (ignored_note).
    * ``engine_hook``: NVIDIA's prestart hook, which only an engine writes into a spec
      (Docker's ``--gpus``; gpunode.runtime.specinputs.engine_hook). Docker sets the env
      with it, after the image's, so the env it carries is the engine's request and is
      honoured under accept-envvar-unprivileged = false too. This is where gpunode differs
      from NVIDIA's runtime, whose gate ignores the hook (``--gpus`` then gives nothing on a
      GPU-Operator-configured node): a node running Docker beside Kubernetes keeps
      ``docker run --gpus``. ``docker run -e NVIDIA_VISIBLE_DEVICES=1`` without ``--gpus``
      gets no GPU there, as with NVIDIA's.
    * Privileged containers read the env whatever the setting (NVIDIA's semantics: a
      privileged container has every device node of the host anyway).
    * Volume mounts and annotations come first: a device plugin's allocation (volume-mounts,
      CDI annotations) decides even when the pod's own env says ``all``.
    * Annotations are not read again for a spec an engine already applied an NVIDIA CDI
      spec to (cdi_injected): containerd >= 1.7 resolves ``cdi.k8s.io/*`` itself, and a
      handler that also passes the annotations to the runtime must not get the GPUs
      injected twice (issue 25 item 3: ``/proc/driver/nvidia is already mounted over``).
      On containerd 1.6 nothing resolves them before the runtime, so the env has no void
      and the annotations are served here.
    """
    cfg = cfg or RuntimeConfig()
    envd = _env_dict(env)
    legacy = _is_legacy(envd)

    devices: tuple[str, ...] | None = None
    cdi: tuple[str, ...] = ()
    source = "none"
    ignored_env: tuple[str, str] | None = None
    ann_tokens: list[str] = []
    if not cdi_injected(envd):
        ann_tokens = _tokens_from_annotations(annotations or {}, cfg.annotation_prefixes)
    mount_tokens = _tokens_from_mounts(mounts or []) if cfg.accept_volume_mounts else []
    if ann_tokens:
        devices, cdi = _devices_from_tokens(ann_tokens)
        source = "annotations"
    elif mount_tokens:
        devices, cdi = _devices_from_tokens(mount_tokens)
        source = "volume-mounts"
    elif privileged or engine_hook or cfg.accept_envvar_unprivileged:
        raw = envd.get(ENV_VISIBLE_DEVICES)
        if raw is None:
            if legacy:
                devices = ("all",)
        else:
            devices, cdi = _devices_from_tokens(_split(raw))
        source = "env"
    else:
        ignored_env = _ignored_env_request(envd, legacy)
    if devices is None and not cdi:
        source = "none"

    mig_config = mig_monitor = False
    if devices is not None:
        mig_config, mig_monitor = _mig_env(envd, privileged)
    disabled = cfg.disable_require or _parse_bool(envd.get(ENV_DISABLE_REQUIRE, ""))
    if devices is not None or cdi:
        capabilities = _capabilities(envd, legacy, cfg)
        requirements = () if disabled else requirements_from_env(envd, legacy)
    else:
        try:
            capabilities = _capabilities(envd, legacy, cfg)
        except RequestError:
            capabilities = frozenset()
        try:
            requirements = () if disabled else requirements_from_env(envd, legacy)
        except RequestError:
            requirements = ()
    return Request(
        devices=devices,
        cdi_devices=cdi,
        capabilities=capabilities,
        requirements=requirements,
        source=source,
        legacy=legacy,
        mig_config=mig_config,
        mig_monitor=mig_monitor,
        ignored_env=ignored_env,
    )


def _ignored_env_request(env: Mapping[str, str], legacy: bool) -> tuple[str, str] | None:
    """The env's GPU request the secure gate did not read, as (variable, value): a
    NVIDIA_VISIBLE_DEVICES that would ask for devices (not empty, no "void"), or, without
    it, a legacy image's CUDA_VERSION (which alone asks for every GPU)."""
    raw = env.get(ENV_VISIBLE_DEVICES)
    if raw is not None:
        tokens = _split(raw)
        return (ENV_VISIBLE_DEVICES, raw) if tokens and "void" not in tokens else None
    return (ENV_CUDA_VERSION, env[ENV_CUDA_VERSION]) if legacy else None


IGNORED_VALUE_LIMIT = 200  # characters of the pod's value a log line shows


def ignored_note(request: Request) -> str | None:
    """The one log line for a request the secure gate ignored (Request.ignored_env), or
    None. The value is the pod's or the image's: control characters escaped and the
    result cut to IGNORED_VALUE_LIMIT characters, its length said when cut, so the line
    stays one bounded line whatever the env holds."""
    if request.ignored_env is None:
        return None
    name, value = request.ignored_env
    shown = value[: IGNORED_VALUE_LIMIT + 1]
    if not shown.isprintable():
        shown = shown.encode("unicode_escape").decode("ascii")
    if len(value) > IGNORED_VALUE_LIMIT or len(shown) > IGNORED_VALUE_LIMIT:
        shown = f"{shown[:IGNORED_VALUE_LIMIT]}... ({len(value)} characters)"
    return (
        f"GPU request ignored: {name}={shown} in an unprivileged container's env is not "
        "read with accept-envvar-unprivileged = false (secure mode); the container gets "
        "no GPU (a device plugin's volume-mounts or CDI annotations are read)"
    )


def _mig_env(env: Mapping[str, str], privileged: bool) -> tuple[bool, bool]:
    """NVIDIA_MIG_CONFIG_DEVICES / NVIDIA_MIG_MONITOR_DEVICES as (config, monitor).

    As NVIDIA's: unset or empty is off; set in an unprivileged container it is refused with
    NVIDIA's own message (its hook panics); the only value accepted is `all`
    (libnvidia-container's select_mig_config_devices: "only 'all' devices are currently
    supported"). Whether specific MIG devices were selected is checked with the selection
    (check_mig_access)."""
    out = []
    for name in (ENV_MIG_CONFIG, ENV_MIG_MONITOR):
        value = env.get(name)
        if not value:
            out.append(False)
            continue
        if not privileged:
            raise RequestError(
                f"cannot set {name[len('NVIDIA_') :]} in non privileged container: "
                f"{name}={show(value)} needs a privileged container (CAP_SYS_ADMIN)"
            )
        tokens = _split(value)
        bad = next((t for t in tokens if t.lower() != "all"), None)
        if bad is not None or not tokens:
            raise RequestError(
                f"{name}={show(value)}: '{show(bad or value)}': only 'all' devices are "
                "currently supported"
            )
        out.append(True)
    return out[0], out[1]
