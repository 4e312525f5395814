"""The parts of an OCI spec that decide what a GPU container gets, and nothing else: its
request inputs (what gpunode.runtime.request reads) and its image's library layout.

gpunode.runtime.plan hands exactly these to the request parser and the edits, and
gpunode.runtime.prepared keys its prepared edits on them: two specs with equal inputs get
the same edits on the same node, so a create can be served from edits prepared for an
earlier one without importing the parser. Everything else in a spec (HOSTNAME and PATH in
the env, Kubernetes' per-pod annotations, the mounts Docker adds, the rootfs path)
differs between containers and must not be part of it.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing costs ~5 ms on every GPU container start
if TYPE_CHECKING:
    from typing import Any

    from .config import RuntimeConfig

# The request's environment: every NVIDIA_* variable (gpunode.runtime.request reads only
# names of that prefix: tests/unit/runtime/test_specinputs.py holds it to that) and
# the legacy CUDA_VERSION of old CUDA images.
ENV_PREFIX = "NVIDIA_"
ENV_CUDA_VERSION = "CUDA_VERSION"
# Volume-mount requests (accept-volume-mounts): /dev/null mounted at these destinations.
DEVICE_MOUNT_ROOT = "/var/run/nvidia-container-devices/"
# Prestart hooks that NVIDIA's toolkit (or Docker's --gpus) puts in a spec, by basename.
# gpunode.runtime.oci removes them (gpunode does their job); their presence is also a request
# input (engine_hook): an engine put it there, never an image or a pod.
NVIDIA_HOOK_NAMES = ("nvidia-container-runtime-hook", "nvidia-container-toolkit")
# Where a container's driver libraries go (container_libdir)
DEBIAN_LIBDIR = "/usr/lib/x86_64-linux-gnu"
OTHER_LIBDIR = "/usr/lib64"


def rootfs_of(spec: dict[str, Any], bundle: str) -> str:
    """The container's root filesystem, absolute: root.path of the spec, relative to the
    bundle."""
    root = (spec.get("root") or {}).get("path", "rootfs")
    return os.path.abspath(root if os.path.isabs(root) else os.path.join(bundle, root))


def container_libdir(rootfs: str | None) -> str:
    """Where libraries go: the multiarch dir on Debian-family images (an
    ``/etc/debian_version`` in the image, resolved inside its root like every container
    path: an image's links never lead this question onto the host), else /usr/lib64."""
    if rootfs is None:
        return DEBIAN_LIBDIR
    from ..util.safepath import exists_in_root

    return DEBIAN_LIBDIR if exists_in_root(rootfs, "/etc/debian_version") else OTHER_LIBDIR


def is_privileged(spec: dict) -> bool:
    """CAP_SYS_ADMIN in the OCI spec's bounding set (a flat list in pre-1.0 specs)."""
    process = spec.get("process") if isinstance(spec, dict) else None
    caps = process.get("capabilities") if isinstance(process, dict) else None
    if isinstance(caps, dict):
        caps = caps.get("bounding")
    return isinstance(caps, list) and "CAP_SYS_ADMIN" in caps


def is_nvidia_hook(hook: Any) -> bool:
    """A prestart hook entry that runs NVIDIA's legacy hook (by the basename of its path)."""
    return (
        isinstance(hook, dict) and os.path.basename(str(hook.get("path", ""))) in NVIDIA_HOOK_NAMES
    )


def engine_hook(spec: dict[str, Any]) -> bool:
    """Whether the spec carries NVIDIA's legacy prestart hook (NVIDIA_HOOK_NAMES): what
    Docker's ``--gpus`` adds (moby daemon/nvidia_linux.go), with the NVIDIA_VISIBLE_DEVICES
    it sets. Only the engine writes a spec's hooks: an image cannot carry one, and
    containerd's CRI adds none of its own for a pod (hooks come only from CDI specs and NRI
    plugins, both the node administrator's). So an env request in such a spec is the
    engine's request, honoured under accept-envvar-unprivileged = false too
    (gpunode.runtime.request.parse_request). An administrator's OCI hooks directory that
    adds the hook to every container (podman's or CRI-O's hooks.d with `always`) defeats
    this; README "Kubernetes nodes", Security says to keep such an entry off those nodes."""
    hooks = spec.get("hooks") if isinstance(spec, dict) else None
    prestart = hooks.get("prestart") if isinstance(hooks, dict) else None
    return isinstance(prestart, list) and any(is_nvidia_hook(h) for h in prestart)


def request_env(env: Any) -> list[str]:
    """The entries of an OCI process env the request reads, in their order (later
    duplicates still win, as in the full env)."""
    if not isinstance(env, list):
        return []
    cuda = ENV_CUDA_VERSION + "="
    return [
        e for e in env if isinstance(e, str) and (e.startswith(ENV_PREFIX) or e.startswith(cuda))
    ]


def inputs(spec: dict[str, Any], cfg: RuntimeConfig) -> dict[str, Any]:
    """The request inputs of `spec` under `cfg`: {"env", "privileged", "engine_hook",
    "annotations", "mounts"}, JSON values. Annotations: those under cfg's annotation
    prefixes. Mounts: the volume-mount requests, only when cfg accepts them. Taken before
    the shim removes NVIDIA's hook from the spec."""
    process = spec.get("process") or {}
    annotations = spec.get("annotations") or {}
    if not isinstance(annotations, dict):
        annotations = {}
    prefixes = tuple(cfg.annotation_prefixes)
    mounts = []
    if cfg.accept_volume_mounts:
        mounts = [
            m
            for m in spec.get("mounts") or []
            if isinstance(m, dict)
            and isinstance(m.get("destination"), str)
            and m["destination"].startswith(DEVICE_MOUNT_ROOT)
        ]
    return {
        "env": request_env(process.get("env") if isinstance(process, dict) else None),
        "privileged": is_privileged(spec),
        "engine_hook": engine_hook(spec),
        "annotations": {
            k: v for k, v in annotations.items() if isinstance(k, str) and k.startswith(prefixes)
        },
        "mounts": mounts,
    }
