"""A CRI client for containerd's CRI plugin: what kubelet does for one pod, without kubelet.

Why a client of our own and not crictl: no kubelet or cri-tools binary is installable on our
machines, and the proof has to be the protocol kubelet speaks — the same messages, field
numbers and service names (``api.proto``), so containerd cannot tell us from kubelet.

Decisions:

* Only the request/response messages are generated (``proto``); the RPCs are called by their
  full method names (``/runtime.v1.RuntimeService/<Method>``) from ``METHODS``, one home for
  which method takes and returns what.
* Every call has a deadline (``timeout``); a failed call raises :class:`CRIError` whose text is
  one line, ``<Method>: <grpc code>: <what containerd said>``. Callers print it as it is.
* Pods run in the node's network namespace (``NamespaceMode.NODE``): containerd then needs no
  CNI plugin, which a GPU isolation proof does not need either.
* Output is read as kubelet reads it: from the file ``log_directory/log_path`` that containerd
  writes in the CRI log format (``<time> <stream> <P|F> <text>``), seen under ``root`` — the
  filesystem the CRI socket lives in (``/`` on the node itself; ``/proc/<pid>/root`` of a node
  container from its host).
* :meth:`Client.run_pod` always stops and removes the pod it started, whatever failed.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

from . import proto

SERVICE = "runtime.v1.RuntimeService"
# method: (request message, response message)
METHODS = {
    "Version": ("VersionRequest", "VersionResponse"),
    "RunPodSandbox": ("RunPodSandboxRequest", "RunPodSandboxResponse"),
    "StopPodSandbox": ("StopPodSandboxRequest", "StopPodSandboxResponse"),
    "RemovePodSandbox": ("RemovePodSandboxRequest", "RemovePodSandboxResponse"),
    "CreateContainer": ("CreateContainerRequest", "CreateContainerResponse"),
    "StartContainer": ("StartContainerRequest", "StartContainerResponse"),
    "RemoveContainer": ("RemoveContainerRequest", "RemoveContainerResponse"),
    "ContainerStatus": ("ContainerStatusRequest", "ContainerStatusResponse"),
}
CRI_VERSION = "v1"
CONTAINERD_SOCKET = "/run/containerd/containerd.sock"
LOG_DIRECTORY = "/var/log/pods"
_SUN_PATH_MAX = 107  # sockaddr_un.sun_path minus the terminating NUL


class CRIError(RuntimeError):
    """A CRI call failed; ``str()`` is one line naming the method and the runtime's reason."""

    def __init__(self, method: str, code: str, detail: str):
        self.method, self.code, self.detail = method, code, one_line(detail)
        super().__init__(f"{method}: {code}: {self.detail}")


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def rpc_error(method: str, exc: Exception) -> CRIError:
    """The one-line error for a failed call (a grpc.RpcError or anything else it raised)."""
    code = getattr(exc, "code", None)
    details = getattr(exc, "details", None)
    if callable(code) and callable(details):
        name = getattr(code(), "name", str(code())).lower()
        return CRIError(method, name, details() or "no details")
    return CRIError(method, type(exc).__name__, str(exc) or "failed")


@dataclass
class LogLines:
    stdout: str = ""
    stderr: str = ""


def parse_log(data: str) -> LogLines:
    """Split a CRI log file (``<RFC3339 time> <stdout|stderr> <P|F> <text>`` per line; P: the
    line continues in the next entry) into the two streams' text."""
    out = {"stdout": [], "stderr": []}
    for n, line in enumerate(data.splitlines(), 1):
        parts = line.split(" ", 3)
        if len(parts) < 3 or parts[1] not in out or parts[2] not in ("P", "F"):
            raise ValueError(f"line {n} is not in the CRI log format: {line[:80]!r}")
        text = parts[3] if len(parts) == 4 else ""
        out[parts[1]].append(text if parts[2] == "P" else text + "\n")
    return LogLines("".join(out["stdout"]), "".join(out["stderr"]))


@dataclass
class PodResult:
    """What a pod's one container did, as its status and log tell it."""

    pod_id: str
    container_id: str
    state: str
    exit_code: int
    reason: str
    message: str
    stdout: str
    stderr: str
    annotations: dict = field(default_factory=dict)


def _pairs(env) -> list[tuple[str, str]]:
    """``env`` as CRI KeyValue pairs in order: a mapping, or a sequence of (key, value)
    pairs, which may name a variable twice as kubelet's list does (a device plugin's
    entry and the pod's own)."""
    if env is None:
        return []
    return list(env.items()) if hasattr(env, "items") else [(k, v) for k, v in env]


@contextlib.contextmanager
def _cleanup(*steps):
    """Run *steps* in order on leaving. When the body failed, its error is the one raised and a
    failing step does not hide it; otherwise a failing step's CRIError is raised (after the
    other steps ran)."""
    try:
        yield
    except BaseException:
        for step in steps:
            with contextlib.suppress(CRIError):
                step()
        raise
    first: CRIError | None = None
    for step in steps:
        try:
            step()
        except CRIError as exc:
            first = first or exc
    if first is not None:
        raise first


class Client:
    """A connection to a CRI runtime service on a unix socket."""

    def __init__(self, socket: str = CONTAINERD_SOCKET, *, root: str = "/", timeout: float = 60):
        try:
            import grpc
        except ImportError:
            raise CRIError(
                "connect",
                "missing",
                "grpcio is not installed (pip install -r requirements-dev.txt)",
            ) from None
        self.root, self.timeout = root, timeout
        self.socket = os.path.join(root, socket.lstrip("/"))
        if len(self.socket.encode()) > _SUN_PATH_MAX:
            raise CRIError("connect", "invalid_argument", f"socket path too long: {self.socket}")
        self.pb = proto.messages()
        self._channel = grpc.insecure_channel(f"unix://{self.socket}")
        self._calls = {
            m: self._channel.unary_unary(
                f"/{SERVICE}/{m}",
                request_serializer=getattr(self.pb, req).SerializeToString,
                response_deserializer=getattr(self.pb, resp).FromString,
            )
            for m, (req, resp) in METHODS.items()
        }

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def call(self, method: str, timeout: float | None = None, **fields):
        request = getattr(self.pb, METHODS[method][0])(**fields)
        try:
            return self._calls[method](request, timeout=timeout or self.timeout)
        except Exception as exc:  # grpc.RpcError and serialization errors alike
            raise rpc_error(method, exc) from None

    # ------------------------------------------------------------------ calls

    def version(self):
        return self.call("Version", version=CRI_VERSION)

    def pod_config(
        self, name: str, annotations: Mapping[str, str] | None = None, privileged: bool = False
    ):
        """``privileged``: the sandbox may hold privileged containers (kubelet sets it when a
        container of the pod is privileged; containerd refuses one otherwise)."""
        pb = self.pb
        uid = uuid.uuid4().hex
        return pb.PodSandboxConfig(
            metadata=pb.PodSandboxMetadata(name=name, uid=uid, namespace="default"),
            log_directory=f"{LOG_DIRECTORY}/default_{name}_{uid}",
            annotations=dict(annotations or {}),
            linux=pb.LinuxPodSandboxConfig(
                security_context=pb.LinuxSandboxSecurityContext(
                    namespace_options=pb.NamespaceOption(network=pb.NODE),
                    privileged=privileged,
                )
            ),
        )

    def container_config(
        self,
        name: str,
        image: str,
        command: list[str],
        *,
        env: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        cdi_devices: list[str] | None = None,
        mounts: list[Mapping] | None = None,
        privileged: bool = False,
    ):
        """*mounts*: CRI ``Mount`` fields as keywords (``container_path``, ``host_path``,
        ``readonly``), as kubelet turns a volume or a device plugin's mount into one."""
        pb = self.pb
        return pb.ContainerConfig(
            metadata=pb.ContainerMetadata(name=name),
            image=pb.ImageSpec(image=image),
            command=command,
            envs=[pb.KeyValue(key=k, value=v) for k, v in _pairs(env)],
            mounts=[pb.Mount(**m) for m in mounts or []],
            annotations=dict(annotations or {}),
            log_path=f"{name}/0.log",
            CDI_devices=[pb.CDIDevice(name=d) for d in cdi_devices or []],
            linux=pb.LinuxContainerConfig(
                security_context=pb.LinuxContainerSecurityContext(privileged=privileged)
            ),
        )

    def status(self, container_id: str):
        return self.call("ContainerStatus", container_id=container_id).status

    def wait_exited(self, container_id: str, timeout: float | None = None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            status = self.status(container_id)
            if status.state == self.pb.CONTAINER_EXITED:
                return status
            if time.monotonic() > deadline:
                state = self.pb.ContainerState.Name(status.state)
                raise CRIError(
                    "ContainerStatus", "deadline_exceeded", f"{container_id} still {state}"
                )
            time.sleep(0.1)

    def read_log(self, log_path: str) -> LogLines:
        path = os.path.join(self.root, log_path.lstrip("/"))
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return parse_log(fh.read())
        except FileNotFoundError:
            return LogLines()  # the container never wrote (e.g. it did not start)
        except (OSError, ValueError) as exc:
            raise CRIError("log", "unreadable", f"{log_path}: {exc}") from None

    @contextlib.contextmanager
    def pod(
        self,
        name: str,
        handler: str = "",
        annotations: Mapping[str, str] | None = None,
        privileged: bool = False,
    ) -> Iterator[tuple[str, object]]:
        """A running pod sandbox (id, config), stopped and removed on leaving."""
        config = self.pod_config(name, annotations, privileged)
        pod_id = self.call("RunPodSandbox", config=config, runtime_handler=handler).pod_sandbox_id
        with _cleanup(
            lambda: self.call("StopPodSandbox", pod_sandbox_id=pod_id),
            lambda: self.call("RemovePodSandbox", pod_sandbox_id=pod_id),
        ):
            yield pod_id, config

    def run_pod(
        self,
        name: str,
        image: str,
        command: list[str],
        *,
        handler: str = "",
        env: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None,
        cdi_devices: list[str] | None = None,
        mounts: list[Mapping] | None = None,
        privileged: bool = False,
    ) -> PodResult:
        """One pod with one container run to its end, as kubelet runs it; everything removed
        afterwards. A refused CreateContainer raises CRIError; a container that could not be
        started is returned with its status (reason, message), as kubelet reports it."""
        with self.pod(name, handler, annotations, privileged) as (pod_id, pod_config):
            config = self.container_config(
                name,
                image,
                command,
                env=env,
                annotations=annotations,
                cdi_devices=cdi_devices,
                mounts=mounts,
                privileged=privileged,
            )
            cid = self.call(
                "CreateContainer", pod_sandbox_id=pod_id, config=config, sandbox_config=pod_config
            ).container_id
            with _cleanup(lambda: self.call("RemoveContainer", container_id=cid)):
                with contextlib.suppress(CRIError):  # the status says why
                    self.call("StartContainer", container_id=cid)
                status = self.wait_exited(cid)
                log = self.read_log(status.log_path)
                return PodResult(
                    pod_id,
                    cid,
                    self.pb.ContainerState.Name(status.state),
                    status.exit_code,
                    status.reason,
                    one_line(status.message),
                    log.stdout,
                    log.stderr,
                    dict(config.annotations),
                )
