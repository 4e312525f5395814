"""`gpunode validate --engine cri`: the engine and container checks through containerd's CRI,
as kubelet runs pods (gpunode.cri.client).

* engine.active: the CRI socket answers ``Version``. No socket there, or no CRI client
  libraries on this node (grpcio, grpcio-tools, protobuf: not dependencies of the wheel
  provisioning installs; Debian's python3-grpcio, python3-grpc-tools and python3-protobuf
  serve, as gpunode's virtualenv sees the system's packages), skips every engine and
  container check with that reason.
* engine.daemon_json: skipped (containerd has none).
* engine.runtime_registered: ``containerd config dump`` has the handler (``--runtime-name``,
  default gpunode) in the CRI plugin's runtimes (config version 2 or 3) as a runc-v2 runtime
  whose ``BinaryName`` is an executable, and it is the default runtime when that is expected.
  Its detail says the mode that handler, and every other handler running gpunode's runtime,
  serves in (runtime_mode, from the runtime.toml the runtime reads): secure (envvar
  requests of unprivileged containers ignored) or open.
* container.image: the probe image (gpunode.validate.container's files, packed as an image
  archive) imported into containerd's ``k8s.io`` namespace with ``ctr images import`` when no
  image of its content is there. The pod sandbox (pause) image is the operator's
  (``sandbox_image``): validate never builds or pulls one itself; containerd pulls it as for
  any pod, and a pod that cannot start says why in container.isolation.
* container.isolation and container.cuda: two pods through the handler, one requesting one
  GPU and one all, judged as the Docker containers are. They ask as NVIDIA's device plugin
  allocates on this node (container.request_channel): by volume mounts (its volume-mounts
  strategy: ``/dev/null`` at ``/var/run/nvidia-container-devices/<id>``) where runtime.toml
  accepts them, as a Kubernetes node's does, else by ``NVIDIA_VISIBLE_DEVICES`` (envvar).
* container.unallocated: a pod through the handler whose env says
  ``NVIDIA_VISIBLE_DEVICES=all`` (its own, or a CUDA image's ENV) and that was allocated
  nothing must start and see no GPU (no device node, NVML sees none): passes on a node set
  up for Kubernetes (accept-envvar-unprivileged = false), fails on an open one naming the
  setting. /proc/driver/nvidia/gpus is not judged: the kernel's procfs lists every GPU in a
  container nothing was injected into.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tomllib
from typing import Any

from ..engines.common import RUNTIME_PATH
from ..engines.containerd import RUNC_SHIM, runtimes_section
from ..util import tool
from . import container
from .model import FAIL, PASS, SKIP, Check, titled

SOCKET = "/run/containerd/containerd.sock"
REPOSITORY = "gpunode.local/validate-probe"
CTR = "ctr"
CONTAINERD = "containerd"
POD_TIMEOUT = 120
DEVICE_MOUNT_DIR = container.DEVICE_MOUNT_DIR  # the device plugin's volume-mounts strategy
UNALLOCATED = "container.unallocated"
TITLES = {UNALLOCATED: "A pod allocated no GPU gets none (NVIDIA_VISIBLE_DEVICES=all)"}


def client(timeout: float = POD_TIMEOUT):
    """A CRI client on the node's containerd socket (tests replace this)."""
    from ..cri.client import Client

    return Client(SOCKET, timeout=timeout)


def connect() -> tuple[Any | None, str, str]:
    """(client, containerd's version, "") when the CRI answers; (None, "", why) otherwise,
    ``why`` starting with "skip:" when there is nothing to validate through (no socket, no
    client libraries) and "fail:" when the socket is there but does not answer."""
    if not os.path.exists(SOCKET):
        return None, "", f"skip:no CRI socket at {SOCKET} (containerd not running here)"
    try:
        import grpc  # noqa: F401 - only whether it is there
        import grpc_tools  # noqa: F401 - compiles the CRI messages
    except ImportError as exc:
        return (
            None,
            "",
            (
                f"skip:the CRI client needs {exc.name}, not on this node (Debian: apt "
                "install python3-grpcio python3-grpc-tools python3-protobuf; gpunode's "
                "virtualenv sees the system's packages)"
            ),
        )
    from ..cri.client import CRIError

    try:
        c = client()
        version = c.version()
    except CRIError as exc:
        return None, "", f"fail:{exc}"
    return c, f"{version.runtime_name} {version.runtime_version}", ""


def _dump() -> tuple[dict | None, str]:
    exe = shutil.which(CONTAINERD)
    if exe is None:
        return None, f"{CONTAINERD} not found on PATH"
    ran = tool.run([exe, "config", "dump"], timeout=60)
    if not ran.ok:
        return None, f"`containerd config dump` failed: {ran.failed or tool.last_line(ran.stderr)}"
    try:
        return tomllib.loads(ran.stdout), ""
    except tomllib.TOMLDecodeError as exc:
        return None, f"`containerd config dump` printed no TOML ({tool.one_line(str(exc))})"


def registration(dump: dict, name: str, want_default: bool) -> tuple[str, str]:
    """(status, detail) of handler ``name`` in containerd's merged configuration."""
    cri = runtimes_section(dump)
    if cri is None:
        return FAIL, "containerd's configuration has no CRI plugin section"
    ctd = cri.get("containerd") if isinstance(cri.get("containerd"), dict) else {}
    runtimes = ctd.get("runtimes") if isinstance(ctd.get("runtimes"), dict) else {}
    entry = runtimes.get(name)
    if not isinstance(entry, dict):
        known = ", ".join(sorted(runtimes)) or "none"
        return FAIL, (
            f"containerd has no handler {name!r} (handlers: {known}; "
            "gpunode runtime configure containerd --name NAME)"
        )
    binary = _binary(entry)
    problems = []
    if entry.get("runtime_type") != RUNC_SHIM:
        problems.append(f"handler {name!r} is {entry.get('runtime_type')!r}, not {RUNC_SHIM}")
    if not binary or not os.access(binary, os.X_OK):
        problems.append(f"handler {name!r} BinaryName {binary!r} is missing or not executable")
    default = ctd.get("default_runtime_name") or "runc"
    if want_default and default != name:
        problems.append(f"default runtime is {default!r}, expected {name!r}")
    mode = runtime_mode()
    others = [
        f"handler {other} ({_binary(runtimes[other])}): {mode}"
        for other in sorted(runtimes)
        if other != name
        and isinstance(runtimes[other], dict)
        and os.path.basename(_binary(runtimes[other])) == RUNTIME_NAME
    ]
    if problems:
        return FAIL, "; ".join([*problems, f"handler {name}: {mode}", *others])
    role = ", the default runtime" if default == name else ""
    return PASS, "; ".join([f"handler {name} ({binary}){role}: {mode}", *others])


RUNTIME_NAME = os.path.basename(RUNTIME_PATH)  # gpunode-container-runtime


def _binary(entry: dict) -> str:
    options = entry.get("options") if isinstance(entry.get("options"), dict) else {}
    return str(options.get("BinaryName") or "")


def runtime_mode() -> str:
    """The mode gpunode's runtime serves every handler in, from the runtime.toml it reads
    ($GPUNODE_RUNTIME_CONFIG, else /etc/gpunode/runtime.toml): "secure" where the env
    of an unprivileged container is not read (accept-envvar-unprivileged = false, a
    Kubernetes node's setting), "open" where any container's env takes any GPU."""
    from ..runtime import config as runtime_config

    try:
        cfg = runtime_config.load(write_caches=False)
    except runtime_config.ConfigError as exc:
        return f"mode unknown ({exc}: the runtime refuses every GPU container)"
    where = cfg.source
    if where == "<defaults>":
        where = f"no {runtime_config.config_path()}, the defaults"
    if cfg.accept_envvar_unprivileged:
        return (
            f"open (any container's NVIDIA_VISIBLE_DEVICES takes any GPU; {where}: "
            "accept-envvar-unprivileged = true)"
        )
    return (
        "secure (envvar requests of unprivileged containers ignored; "
        f"{where}: accept-envvar-unprivileged = false)"
    )


def engine_checks(expect, add) -> Any | None:
    """Add the engine checks; the connected client, or None (the container checks skip)."""
    c, version, why = connect()
    if c is None:
        status, reason = why.split(":", 1)
        add("engine.active", SKIP if status == "skip" else FAIL, reason)
        add("engine.daemon_json", SKIP, "--engine cri: containerd has no daemon.json")
        add("engine.runtime_registered", SKIP, "the CRI does not answer (see engine.active)")
        return None
    add("engine.active", PASS, f"{version} answers the CRI ({SOCKET})")
    add("engine.daemon_json", SKIP, "--engine cri: containerd has no daemon.json")
    dump, why = _dump()
    if dump is None:
        add("engine.runtime_registered", SKIP, why)
    else:
        add("engine.runtime_registered", *registration(dump, expect.runtime_name,
                                                       expect.runtime_default))  # fmt: skip
    return c


# --------------------------------------------------------------------------- the probe image


def image_archive(files: dict[str, str]) -> tuple[bytes, str]:
    """(image archive of the probe's files, its name: the layer's hash) for ctr."""
    from ..cri import pause

    layer = container.build_tar(files)
    name = f"{REPOSITORY}:{hashlib.sha256(layer).hexdigest()[:16]}"
    return pause.archive_layer(layer, name, pause.machine_arch()), name


def ensure_image() -> tuple[str, bool]:
    """(image name, True when imported now) in containerd's k8s.io namespace."""
    from ..cri.pause import IMPORT_COMMAND, K8S_NAMESPACE

    data, name = image_archive(container.image_files())
    have = tool.run([CTR, "-n", K8S_NAMESPACE, "images", "ls", "-q"], timeout=POD_TIMEOUT)
    if have.ok and name in have.stdout.split():
        return name, False
    proc = tool.run([CTR, *IMPORT_COMMAND[1:]], input=data, timeout=POD_TIMEOUT)
    if not proc.ok:
        why = proc.failed or proc.stderr.decode(errors="replace").strip()[-200:]
        raise container.ImageError(f"`ctr images import` failed: {why}")
    return name, True


def pod_request(request: str | None, channel: str) -> dict[str, Any]:
    """``run_pod`` keywords of a probe pod asking for ``request`` (ids, comma-separated, or
    all) by ``channel`` as kubelet passes the device plugin's answer: the volume-mounts
    strategy's env and one mount per id, or the envvar strategy's env. ``None``: a pod
    allocated nothing whose env says NVIDIA_VISIBLE_DEVICES=all (a CUDA image's ENV)."""
    env = {"NVIDIA_DRIVER_CAPABILITIES": "utility,compute"}
    if request is None:
        return {"env": {"NVIDIA_VISIBLE_DEVICES": "all", **env}}
    if channel == "volume-mounts":
        ids = [i for i in request.split(",") if i]
        return {
            "env": {"NVIDIA_VISIBLE_DEVICES": DEVICE_MOUNT_DIR, **env},
            "mounts": [
                {"container_path": f"{DEVICE_MOUNT_DIR}/{i}", "host_path": "/dev/null"} for i in ids
            ],
        }
    return {"env": {"NVIDIA_VISIBLE_DEVICES": request, **env}}


def run_probe(
    c, handler: str, image: str, request: str | None, channel: str = "env"
) -> dict[str, Any]:
    """What a pod requesting ``request`` through ``handler`` sees ({"error": …} when not);
    see pod_request."""
    from ..cri.client import CRIError

    key = f"{channel}:{request}" if request is not None else "unallocated"
    name = "gpunode-validate-" + hashlib.sha256(key.encode()).hexdigest()[:8]
    try:
        res = c.run_pod(
            name,
            image,
            [os.path.realpath(container._python()), "-I", "-S", container.PROBE_PATH],
            handler=handler,
            **pod_request(request, channel),
        )
    except CRIError as exc:
        return {"error": str(exc)}
    if res.exit_code != 0 or res.reason != "Completed":
        why = res.message or tool.last_line(res.stderr) or "no message"
        return {"error": f"pod {res.state} {res.reason} exit {res.exit_code}: {why}"}
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"error": f"the probe printed no JSON: {res.stdout.strip()[-160:]!r}"}


def runner(c, handler: str, channel: str | None = None) -> tuple:
    """container.evaluate's ``runner``: the probe image for containerd, pods through
    ``handler`` asking by ``channel`` (default: container.request_channel())."""
    how = channel or container.request_channel()
    made: dict[str, str] = {}

    def make_image() -> tuple[str, bool]:
        if "tag" in made:  # container.unallocated's pod uses the image of the others
            return made["tag"], False
        tag, built = ensure_image()
        made["tag"] = tag
        return tag, built

    return make_image, lambda tag, request: run_probe(c, handler, tag, request, how)


def unallocated_after(c, handler: str, run: tuple | None, done: list[Check]) -> list[Check]:
    """container.unallocated once the other container checks (``done``) ran: skipped with
    container.image's reason where that did not pass (no CRI, no usable GPU, no image)."""
    image_check = next((x for x in done if x.id == "container.image"), None)
    if c is None or run is None or image_check is None or image_check.status != PASS:
        why = "the CRI does not answer (see engine.active)"
        if image_check is not None and image_check.status == SKIP:
            why = image_check.detail
        elif image_check is not None:
            why = "no probe image (see container.image)"
        return unallocated(c, handler, None, why)
    try:
        tag, _ = run[0]()
    except (container.ImageError, OSError) as exc:
        return unallocated(c, handler, None, f"no probe image: {exc}")
    return unallocated(c, handler, tag)


def unallocated(c, handler: str, image: str | None, why: str = "") -> list[Check]:
    """container.unallocated (module docstring): a pod through ``handler`` with
    NVIDIA_VISIBLE_DEVICES=all and no allocation. ``image`` None: skipped for ``why``."""
    checks: list[Check] = []
    add = titled(checks, TITLES)
    if image is None:
        add(UNALLOCATED, SKIP, why)
        return checks
    seen = run_probe(c, handler, image, None)
    if "error" in seen:
        add(UNALLOCATED, FAIL, f"a pod with NVIDIA_VISIBLE_DEVICES=all and no allocation did "
            f"not run through handler {handler} (a CUDA image's pod must start without a GPU): "
            f"{seen['error']}")  # fmt: skip
        return checks
    nvml = seen.get("nvml") or {}
    uuids = [g.get("uuid") or "?" for g in nvml.get("gpus", [])] if "error" not in nvml else []
    if seen.get("dev") or uuids:
        from ..runtime import config as runtime_config

        got = ", ".join(uuids) or f"device nodes {seen.get('dev')}"
        add(UNALLOCATED, FAIL, f"a pod with NVIDIA_VISIBLE_DEVICES=all and no allocation sees "
            f"{max(len(uuids), len(seen.get('dev') or []))} GPU(s) through handler {handler} "
            f"({got}): {runtime_config.config_path()} accepts NVIDIA_VISIBLE_DEVICES from "
            "unprivileged containers, so any pod (any CUDA image) takes every GPU; set "
            "accept-envvar-unprivileged = false and accept-volume-mounts = true (gpunode "
            "runtime setup --kubernetes; role: gpu_container_runtime_containerd)")  # fmt: skip
        return checks
    add(UNALLOCATED, PASS, f"a pod with NVIDIA_VISIBLE_DEVICES=all and no allocation through "
        f"handler {handler}: no GPU (no device node, NVML sees none)")  # fmt: skip
    return checks
