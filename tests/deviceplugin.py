"""What NVIDIA's Kubernetes device plugin sends: the one home of it in the tests.

Built from /work/shared/reference/device-plugin.md (NVIDIA/k8s-device-plugin at 1b826acc, run
unmodified, its Allocate answers turned into pods as kubelet does) and nothing else; a shape
not written there is not invented here. Two things:

``container_config(strategy, ids, *, uid=UID, env=None) -> dict``
    The plugin's ``ContainerAllocateResponse`` for *ids* under ``DEVICE_LIST_STRATEGY``
    *strategy* (one of ``STRATEGIES``), turned into the pieces of the CRI ContainerConfig that
    kubelet sends, as keywords of ``gpunode.cri.client.Client.run_pod``: ``env`` (the
    plugin's, then the pod's own *env*, which wins on a shared name as it does in
    containerd), ``mounts`` (CRI ``Mount`` fields), ``annotations``, ``cdi_devices``; a key
    is present only when the strategy sends it. *ids* are what Allocate is asked for and
    answers with: GPU UUIDs, indices (``DEVICE_ID_STRATEGY=index``) or MIG UUIDs, as
    strings. *uid* is the allocation's id in the cdi-annotations key.

``cdi_spec(node_spec, *, hook_path=DEFAULT_HOOK_PATH, id_strategy="uuid", enable_hooks=()) -> dict``
    The plugin's own CDI spec (``SPEC_FILE``, kind ``KIND``) for a node, its facts read from
    *node_spec*: the node's own gpunode CDI spec (``gpunode cdi generate --format json`` run
    on it), which names every GPU and MIG device by index and UUID with its device nodes, the
    control nodes, the driver's library mounts and their SONAME links. *hook_path* is
    ``NVIDIA_CDI_HOOK_PATH``; *id_strategy* ``"uuid"`` or ``"index"``
    (``DEVICE_ID_STRATEGY``). *enable_hooks*: NVIDIA's optional hooks to add, as
    ``nvidia-ctk cdi generate --enable-hook NAME`` adds them (``OPTIONAL_HOOKS``: every one
    of them; see "Optional hooks" below); empty, the plugin's spec as device-plugin.md has it.

``allocate(strategy, ids, *, uid=UID) -> dict`` is the ContainerAllocateResponse itself (the
proto's field names); ``hook_args(hook_path, subcommand, *options) -> list[str]`` the argv the spec's hooks
carry (``nvidia-ctk hook <sub> …`` or ``nvidia-cdi-hook <sub> …``).

Optional hooks. The plugin's spec is written by NVIDIA's nvcdi library (the plugin at
1b826acc vendors nvidia-container-toolkit v1.20.0; its internal/cdi/cdi.go passes
``nvcdi.WithDisabledHooks`` from ``CDI_DISABLE_HOOKS`` and has no way to enable a hook), so
"every optional hook enabled" is what that library writes given ``WithEnabledHooks``, which
``nvidia-ctk cdi generate --enable-hook NAME`` passes (cmd/nvidia-ctk/cdi/generate/
generate.go). Read in NVIDIA/nvidia-container-toolkit at v1.18.0 (f8daa5e2), v1.20.0 and
main d34b3046 (2026-08-21), all alike here:

* internal/discover/hooks.go: the hook names are chmod, create-symlinks,
  disable-device-node-modification, enable-cuda-compat, update-ldcache and (from v1.20.0)
  update-application-profile; ``defaultDisabledHooks`` is ``[chmod]`` (off by default since
  v1.18.0-rc.3, "a workaround for older versions of crun", deprecated). So chmod is the one
  optional hook: ``OPTIONAL_HOOKS``. ``--enable-hook all`` is refused by the generator
  ("enabling all hooks is not supported"); enabling a default-on hook changes nothing.
* Its argv (``transformArgs``): ``<hook> chmod --mode 755 [--path FOLDER]...``, the same
  createContainer lifecycle, path and ``NVIDIA_CTK_DEBUG=false`` env as the other hooks.
  An explicitly enabled chmod is created even with no folder (``isDisabled`` returns the
  map's false before its "hooks that require args" check), so ``--mode 755`` alone.
* Where (pkg/nvcdi/full-gpu-nvml.go ``newFullGPUDiscoverer``, workarounds-device-folder-
  permissions.go): in each full GPU's own device edits, after its device nodes, never in the
  common edits and never for a MIG device (mig-device-nvml.go adds none); the folders are
  those of the GPU's device nodes among /dev/dri and /dev/nvidia-caps, each once, in the
  order its nodes name them (``CHMOD_FOLDERS``). A full GPU's nodes are /dev/nvidia<N> and
  its DRM nodes: a GPU without DRM nodes (the simulated nodes') gets ``chmod --mode 755``.
  (Where DRM nodes exist NVIDIA also adds a default-on by-path create-symlinks hook to the
  device, internal/platform-support/dgpu/by-path-hooks.go; not modelled here.)
* CDI injects a spec's common edits before a device's, so the container runs the five
  common hooks, then its GPU's chmod.

Not optional, not here: create-soname-symlinks (``[--ldconfig-path P] --folder DIR...``,
before update-ldcache) existed in v1.18.0-rc.1 only (ced79e51, default-on) and was removed
in rc.2; gpunode's hook still serves it (gpunode.hook.nvcli).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
KIND = "k8s.device-plugin.nvidia.com/gpu"  # vendor hard-coded in plugin-manager.go
SPEC_FILE = "/var/run/cdi/k8s.device-plugin.nvidia.com-gpu.json"
DEFAULT_HOOK_PATH = "/usr/bin/nvidia-ctk"  # api/config/v1/consts.go
VISIBLE = "NVIDIA_VISIBLE_DEVICES"
VOLUME_DIR = "/var/run/nvidia-container-devices"
ANNOTATION_PREFIX = "cdi.k8s.io/nvidia-device-plugin_"
UID = "5f1c4f8e-3b1a-4d2e-9c61-000000000001"  # any allocation id
HOOK_ENV = ["NVIDIA_CTK_DEBUG=false"]
HOOK_SUBCOMMANDS = (
    "create-symlinks",
    "enable-cuda-compat",
    "update-ldcache",
    "disable-device-node-modification",
    "update-application-profile",
)
OPTIONAL_HOOKS = ("chmod",)  # internal/discover/hooks.go defaultDisabledHooks
CHMOD_MODE = "755"  # hooks.go transformArgs
CHMOD_FOLDERS = ("/dev/dri", "/dev/nvidia-caps")  # workarounds-device-folder-permissions.go
CONTROL_NODES = ("nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl")
MOUNT_OPTIONS = ["ro", "nosuid", "nodev", "rbind", "rprivate"]  # container-toolkit.md §2b


def allocate(strategy: str, ids: Sequence[str], *, uid: str = UID) -> dict:
    """The ContainerAllocateResponse (PASS_DEVICE_SPECS off: no ``devices``) as a dict with
    the proto's field names: envs, mounts (host_path, container_path, read_only),
    annotations, cdi_devices (names)."""
    ids = [str(i) for i in ids]
    if strategy == "envvar":
        return {"envs": {VISIBLE: ",".join(ids)}}
    if strategy == "volume-mounts":
        return {
            "envs": {VISIBLE: VOLUME_DIR},
            "mounts": [
                {
                    "host_path": "/dev/null",
                    "container_path": f"{VOLUME_DIR}/{i}",
                    "read_only": False,
                }
                for i in ids
            ],
        }
    if strategy == "cdi-annotations":
        return {"annotations": {ANNOTATION_PREFIX + uid: ",".join(f"{KIND}={i}" for i in ids)}}
    if strategy == "cdi-cri":
        return {"cdi_devices": [f"{KIND}={i}" for i in ids]}
    raise ValueError(f"unknown DEVICE_LIST_STRATEGY {strategy!r}; known: {', '.join(STRATEGIES)}")


def container_config(
    strategy: str, ids: Sequence[str], *, uid: str = UID, env: Mapping[str, str] | None = None
) -> dict:
    """``run_pod`` keywords for a container allocated *ids* (see the module docstring).

    kubelet puts the plugin's envs in the container's list and the pod's own env entries
    after them (GenerateRunContainerOptions); containerd keeps the last entry of a name, so a
    pod variable of the plugin's name wins (issue 25: an allocated pod widens itself with its
    own ``NVIDIA_VISIBLE_DEVICES=all``). ``env`` here is what the runtime then sees, one value
    per name. The mounts keep their read-only flag, the annotations are the container's and
    the CDI names go to ``CDI_devices``."""
    resp = allocate(strategy, ids, uid=uid)
    out: dict = {}
    if env or "envs" in resp:
        out["env"] = {**resp.get("envs", {}), **(env or {})}
    if "mounts" in resp:
        out["mounts"] = [
            {
                "container_path": m["container_path"],
                "host_path": m["host_path"],
                "readonly": m["read_only"],
            }
            for m in resp["mounts"]
        ]
    if "annotations" in resp:
        out["annotations"] = dict(resp["annotations"])
    if "cdi_devices" in resp:
        out["cdi_devices"] = list(resp["cdi_devices"])
    return out


def hook_args(hook_path: str, subcommand: str, *options: str) -> list[str]:
    """argv of one of the spec's hooks: ``nvidia-ctk hook <sub> …`` when the hook path's
    name is nvidia-ctk, else ``<name> <sub> …`` (``nvidia-cdi-hook <sub> …``)."""
    base = os.path.basename(hook_path)
    return (
        [base, "hook", subcommand, *options]
        if base == "nvidia-ctk"
        else [base, subcommand, *options]
    )


def _hook(hook_path: str, subcommand: str, *options: str) -> dict:
    return {
        "hookName": "createContainer",
        "path": hook_path,
        "args": hook_args(hook_path, subcommand, *options),
        "env": list(HOOK_ENV),
    }


def _node_facts(node_spec: Mapping) -> dict:
    """What the plugin's spec needs, read from the node's gpunode spec."""
    common = node_spec["containerEdits"]
    libs = [m for m in common.get("mounts", []) if ".so." in os.path.basename(m["containerPath"])]
    ml = [m for m in libs if os.path.basename(m["containerPath"]).startswith("libnvidia-ml.so.")]
    if not ml:
        raise ValueError("the node's spec mounts no libnvidia-ml.so.<driver version>")
    version = os.path.basename(ml[0]["containerPath"])[len("libnvidia-ml.so.") :]
    libs = [m for m in libs if m["containerPath"].endswith(f".so.{version}")]
    links = []
    for hook in common.get("hooks", []):
        args = hook["args"]
        links += [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--link"]
    cuda = [m for m in libs if os.path.basename(m["containerPath"]).startswith("libcuda.so.")]
    libdir = os.path.dirname((cuda or ml)[0]["containerPath"])
    nodes = {os.path.basename(n["path"]): n for n in common.get("deviceNodes", [])}
    return {
        "version": version,
        "libs": libs,
        "links": links,
        "libdir": libdir,
        "folders": sorted({os.path.dirname(m["containerPath"]) for m in libs}),
        "control": [nodes[n] for n in CONTROL_NODES if n in nodes],
    }


def _is_index(name: str) -> bool:
    return all(part.isdigit() for part in name.split(":")) and name.count(":") <= 1


def _is_full_gpu(name: str) -> bool:
    """A full GPU's name (GPU-<uuid> or <index>), not a MIG device's (MIG-<uuid>, <g>:<m>)."""
    return name.startswith("GPU-") or (name.isdigit() and ":" not in name)


def _enabled_optional(enable_hooks: Sequence[str]) -> frozenset[str]:
    """The optional hooks *enable_hooks* turns on. ``all`` is refused as NVIDIA's generator
    refuses it; a default-on hook's name changes nothing, as there; any other name is refused
    here (NVIDIA's ignores it) so that a misspelt one cannot pass for enabled."""
    if isinstance(enable_hooks, str):
        raise TypeError("enable_hooks is a sequence of hook names, not one string")
    names = tuple(enable_hooks)
    if "all" in names:
        raise ValueError("enabling all hooks is not supported (nvidia-ctk cdi generate)")
    unknown = [n for n in names if n not in OPTIONAL_HOOKS and n not in HOOK_SUBCOMMANDS]
    if unknown:
        raise ValueError(
            f"unknown hook {unknown[0]!r}; optional: {', '.join(OPTIONAL_HOOKS)}; "
            f"default-on: {', '.join(HOOK_SUBCOMMANDS)}"
        )
    return frozenset(names) & frozenset(OPTIONAL_HOOKS)


def chmod_folders(device_nodes: Sequence[Mapping]) -> list[str]:
    """The folders NVIDIA's chmod hook gets for a full GPU with *device_nodes*: those among
    ``CHMOD_FOLDERS`` that hold one of its nodes, each once, in the nodes' order
    (workarounds-device-folder-permissions.go getDeviceSubfolders)."""
    folders: list[str] = []
    for node in device_nodes:
        folder = os.path.dirname(node["path"])
        if folder in CHMOD_FOLDERS and folder not in folders:
            folders.append(folder)
    return folders


def cdi_spec(
    node_spec: Mapping,
    *,
    hook_path: str = DEFAULT_HOOK_PATH,
    id_strategy: str = "uuid",
    enable_hooks: Sequence[str] = (),
) -> dict:
    """The plugin's CDI spec for the node *node_spec* describes (module docstring); with
    *enable_hooks* (e.g. ``OPTIONAL_HOOKS``), NVIDIA's optional hooks added where its
    generator adds them (the module docstring's "Optional hooks")."""
    if id_strategy not in ("uuid", "index"):
        raise ValueError(f"unknown DEVICE_ID_STRATEGY {id_strategy!r}; known: uuid, index")
    optional = _enabled_optional(enable_hooks)
    facts = _node_facts(node_spec)
    devices = []
    for dev in node_spec["devices"]:
        name = dev["name"]
        by_index = _is_index(name)
        by_uuid = name.startswith(("GPU-", "MIG-"))
        if (id_strategy == "index" and by_index) or (id_strategy == "uuid" and by_uuid):
            nodes = [{"path": n["path"]} for n in dev["containerEdits"].get("deviceNodes", [])]
            edits: dict = {"deviceNodes": nodes}
            if "chmod" in optional and _is_full_gpu(name):
                paths = []
                for folder in chmod_folders(nodes):
                    paths += ["--path", folder]
                edits["hooks"] = [_hook(hook_path, "chmod", "--mode", CHMOD_MODE, *paths)]
            devices.append({"name": name, "containerEdits": edits})
    links = []
    for link in facts["links"]:
        links += ["--link", link]
    folders = []
    for folder in facts["folders"]:
        folders += ["--folder", folder]
    edits = {
        "env": [f"NVIDIA_CTK_LIBCUDA_DIR={facts['libdir']}", "NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [{"path": n["path"]} for n in facts["control"]],
        "mounts": [
            {
                "hostPath": m["hostPath"],
                "containerPath": m["containerPath"],
                "options": list(MOUNT_OPTIONS),
            }
            for m in facts["libs"]
        ],
        "hooks": [
            _hook(hook_path, "create-symlinks", *links),
            _hook(hook_path, "enable-cuda-compat", f"--host-driver-version={facts['version']}"),
            _hook(hook_path, "update-ldcache", *folders),
            _hook(hook_path, "disable-device-node-modification"),
            _hook(hook_path, "update-application-profile"),
        ],
    }
    # device-plugin.md: cdiVersion 0.3.0. Device names starting with a digit (index ids) are
    # valid only from CDI 0.5.0 on, and the CDI library refuses a spec whose version is lower
    # than its content needs: with index ids the spec says 0.5.0 (nvcdi writes the minimum
    # version the content needs).
    version = "0.5.0" if id_strategy == "index" else "0.3.0"
    return {"cdiVersion": version, "kind": KIND, "devices": devices, "containerEdits": edits}
