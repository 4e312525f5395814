"""The Helm values of NVIDIA's device plugin (chart ``nvidia-device-plugin``, NVIDIA/
k8s-device-plugin ``deployments/helm/nvidia-device-plugin/values.yaml``) that match a node
gpunode set up for Kubernetes: written by ``gpunode runtime setup`` beside the RuntimeClass
manifest (``VALUES_NAME`` in the same directory) for the operator to pass to the chart
(``helm install … -f <file>``); gpunode never talks to the API server.

Only keys the chart takes: ``deviceListStrategy``, ``deviceIDStrategy``,
``nvidiaDriverRoot``, ``runtimeClassName``, ``cdi.nvidiaHookPath``, ``securityContext``.

Decisions:

* Strategy. containerd with CDI (gpunode registered with ``--cdi``: containerd >= 1.7,
  ``enable_cdi``): ``cdi-cri``. containerd applies the plugin's own spec
  (k8s.device-plugin.nvidia.com/gpu) whose hooks are gpunode's nvidia-cdi-hook, so a pod
  gets exactly its allocation through any handler, and an image's or pod's
  NVIDIA_VISIBLE_DEVICES plays no part. Without CDI (containerd 1.6): ``volume-mounts`` when
  runtime.toml accepts them (the secure default: ``accept-volume-mounts = true``,
  ``accept-envvar-unprivileged = false``); else ``cdi-annotations`` when gpunode's handlers
  pass cdi.k8s.io/* (``--pass-annotations``: gpunode's runtime serves the plugin's kind
  itself); else ``envvar`` only where runtime.toml accepts the variable from unprivileged
  containers (the open mode); none of these: one line saying what to turn on, since a
  plugin whose allocations reach no GPU fails every pod silently.
* ``runtimeClassName``: the plugin's own pod needs NVML, which it gets as NVIDIA's chart
  asks for it (``NVIDIA_VISIBLE_DEVICES=all`` in its env) through gpunode's handler (the
  ``nvidia`` one when registered, else the first); none when gpunode is containerd's
  default runtime. Without CDI the workload pods need the same RuntimeClass too (said in
  the file).
* ``securityContext``: ``capabilities.add: [SYS_ADMIN]``, as the chart itself sets for
  volume-mounts and MIG: with ``accept-envvar-unprivileged = false`` only a container with
  CAP_SYS_ADMIN (privileged, in NVIDIA's terms) gets GPUs by the variable, and the plugin
  must see every GPU. Without it the chart drops every capability and, on a secure node,
  the plugin would see no GPU.
* ``deviceIDStrategy: uuid``: an allocation names the GPU it is, whatever the indices.
* ``cdi.nvidiaHookPath``: gpunode's launcher (gpunode.launch.firststage), always written
  so that a later switch to a CDI strategy keeps working.
"""

from __future__ import annotations

import json
import os

from ..util.command import UsageError

VALUES_NAME = "nvidia-device-plugin-values.yaml"


def values_path(runtime_class_file: str) -> str:
    """Where the values go: beside the RuntimeClass manifest."""
    return os.path.join(os.path.dirname(runtime_class_file), VALUES_NAME)


def strategy(
    *,
    cdi: bool,
    accept_volume_mounts: bool,
    pass_annotations: bool,
    accept_envvar_unprivileged: bool,
) -> str:
    """The DEVICE_LIST_STRATEGY for the node (module docstring)."""
    if cdi:
        return "cdi-cri"
    if accept_volume_mounts:
        return "volume-mounts"
    if pass_annotations:
        return "cdi-annotations"
    if accept_envvar_unprivileged:
        return "envvar"
    raise UsageError(
        "NVIDIA's device plugin has no strategy that reaches GPUs on this node: containerd "
        "without CDI, and runtime.toml accepts neither volume mounts nor the variable from "
        "unprivileged containers; set accept-volume-mounts = true in runtime.toml, or pass "
        "cdi.k8s.io annotations to gpunode's handlers (--containerd-pass-annotations)"
    )


def values(
    *,
    names: tuple[str, ...],
    set_default: bool,
    cdi: bool,
    pass_annotations: bool,
    accept_volume_mounts: bool,
    accept_envvar_unprivileged: bool,
    driver_root: str,
    hook_path: str,
) -> str:
    """The values file's text (YAML; its scalars written as JSON strings, which YAML reads
    as the same strings)."""
    chosen = strategy(
        cdi=cdi,
        accept_volume_mounts=accept_volume_mounts,
        pass_annotations=pass_annotations,
        accept_envvar_unprivileged=accept_envvar_unprivileged,
    )
    handler = None if set_default else ("nvidia" if "nvidia" in names else names[0])

    def q(text: str) -> str:
        return json.dumps(text)

    if cdi:
        how = "applies CDI (enable_cdi): the plugin's own CDI spec runs gpunode's hook."
    else:
        how = "has no CDI here: gpunode's runtime serves the allocations."
    lines = [
        "# Written by `gpunode runtime setup`: values for NVIDIA's device plugin Helm chart",
        "# (nvidia-device-plugin) that match this node. Use them on its nodes:",
        "#   helm install nvidia-device-plugin nvdp/nvidia-device-plugin -f <this file>",
        f"# containerd {how}",
    ]
    if handler and not cdi:
        lines.append(f"# GPU workload pods need runtimeClassName: {handler} too.")
    lines += [
        f"deviceListStrategy: {q(chosen)}",
        'deviceIDStrategy: "uuid"',
        f"nvidiaDriverRoot: {q(driver_root)}",
        f"runtimeClassName: {q(handler) if handler else 'null'}",
        "cdi:",
        f"  nvidiaHookPath: {q(hook_path)}",
        "# CAP_SYS_ADMIN: the plugin's own pod gets every GPU by NVIDIA_VISIBLE_DEVICES=all",
        "# also where unprivileged containers cannot (accept-envvar-unprivileged = false).",
        "securityContext:",
        "  capabilities:",
        '    add: ["SYS_ADMIN"]',
    ]
    return "\n".join(lines) + "\n"
