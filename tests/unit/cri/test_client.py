"""The CRI client's pieces that need no node: log format, one-line errors, the call sequence
of a pod (against an in-process gRPC server speaking the same messages; the real containerd is
tests/integration/test_cri.py)."""

from __future__ import annotations

from concurrent import futures
from pathlib import Path

import grpc
import pytest

from gpunode.cri import client as cri
from gpunode.cri import proto


def test_parse_log_joins_partial_lines_per_stream():
    data = (
        "2026-01-01T00:00:00.1Z stdout P hel\n"
        "2026-01-01T00:00:00.2Z stderr F oops\n"
        "2026-01-01T00:00:00.3Z stdout F lo world\n"
        "2026-01-01T00:00:00.4Z stdout F \n"
    )
    log = cri.parse_log(data)
    assert log.stdout == "hello world\n\n"
    assert log.stderr == "oops\n"


def test_parse_log_refuses_other_formats():
    with pytest.raises(ValueError, match="line 2 is not in the CRI log format"):
        cri.parse_log('2026-01-01T00:00:00Z stdout F ok\n{"log": "docker json"}\n')


class FakeRpcError(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.UNKNOWN

    def details(self):
        return "failed to create task:\n  unknown device '7'\n"


def test_rpc_error_is_one_line():
    err = cri.rpc_error("StartContainer", FakeRpcError())
    assert str(err) == "StartContainer: unknown: failed to create task: unknown device '7'"
    assert err.detail == "failed to create task: unknown device '7'"
    assert (
        str(cri.rpc_error("Version", ValueError("bad\nvalue"))) == "Version: ValueError: bad value"
    )


def test_unreachable_socket_is_one_line_error(tmp_path):
    client = cri.Client(str(tmp_path / "no.sock"), timeout=2)
    with pytest.raises(cri.CRIError) as err:
        client.version()
    assert str(err.value).startswith("Version: unavailable: ")
    assert "\n" not in str(err.value)


def test_socket_path_too_long_is_refused():
    with pytest.raises(cri.CRIError, match="socket path too long"):
        cri.Client("/run/containerd.sock", root="/" + "x" * 120)


class FakeRuntime:
    """RuntimeService methods as containerd answers them, recording the calls."""

    def __init__(self, pb, log_dir: Path, start_error: str | None = None):
        self.pb, self.log_dir, self.start_error = pb, log_dir, start_error
        self.calls: list[tuple[str, object]] = []
        self.log_path = ""

    def handler(self, method):
        def call(request, context):
            self.calls.append((method, request))
            return getattr(self, method)(request, context)

        return call

    def Version(self, req, ctx):
        return self.pb.VersionResponse(runtime_name="fake", runtime_api_version="v1")

    def RunPodSandbox(self, req, ctx):
        return self.pb.RunPodSandboxResponse(pod_sandbox_id="pod1")

    def CreateContainer(self, req, ctx):
        self.log_path = f"{req.sandbox_config.log_directory}/{req.config.log_path}"
        return self.pb.CreateContainerResponse(container_id="c1")

    def StartContainer(self, req, ctx):
        if self.start_error:
            ctx.abort(grpc.StatusCode.UNKNOWN, self.start_error)
        path = self.log_dir / self.log_path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("2026-01-01T00:00:00Z stdout F hi\n")
        return self.pb.StartContainerResponse()

    def ContainerStatus(self, req, ctx):
        failed = self.start_error is not None
        return self.pb.ContainerStatusResponse(
            status=self.pb.ContainerStatus(
                id=req.container_id,
                state=self.pb.CONTAINER_EXITED,
                exit_code=128 if failed else 0,
                reason="StartError" if failed else "Completed",
                message=self.start_error or "",
                log_path=self.log_path,
            )
        )

    def RemoveContainer(self, req, ctx):
        return self.pb.RemoveContainerResponse()

    def StopPodSandbox(self, req, ctx):
        return self.pb.StopPodSandboxResponse()

    def RemovePodSandbox(self, req, ctx):
        return self.pb.RemovePodSandboxResponse()


@pytest.fixture
def fake(tmp_path):
    def start(start_error=None):
        pb = proto.messages()
        runtime = FakeRuntime(pb, tmp_path, start_error)
        handlers = {
            m: grpc.unary_unary_rpc_method_handler(
                runtime.handler(m),
                request_deserializer=getattr(pb, req).FromString,
                response_serializer=getattr(pb, resp).SerializeToString,
            )
            for m, (req, resp) in cri.METHODS.items()
        }
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler(cri.SERVICE, handlers),)
        )
        sock = tmp_path / "cri.sock"
        server.add_insecure_port(f"unix://{sock}")
        server.start()
        servers.append(server)
        return runtime, cri.Client("/cri.sock", root=str(tmp_path), timeout=5)

    servers: list = []
    yield start
    for s in servers:
        s.stop(None)


def test_run_pod_is_kubelets_sequence_and_cleans_up(fake):
    runtime, client = fake()
    res = client.run_pod(
        "p",
        "img",
        ["true"],
        handler="nvidia",
        env={"NVIDIA_VISIBLE_DEVICES": "1"},
        annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=0"},
        cdi_devices=["nvidia.com/gpu=2"],
        mounts=[
            {"container_path": "/var/run/nvidia-container-devices/0", "host_path": "/dev/null"}
        ],
    )
    assert [m for m, _ in runtime.calls] == [
        "RunPodSandbox",
        "CreateContainer",
        "StartContainer",
        "ContainerStatus",
        "RemoveContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ]
    run, create = runtime.calls[0][1], runtime.calls[1][1]
    assert run.runtime_handler == "nvidia"
    assert run.config.linux.security_context.namespace_options.network == client.pb.NODE
    assert create.pod_sandbox_id == "pod1" and create.sandbox_config == run.config
    assert [(e.key, e.value) for e in create.config.envs] == [("NVIDIA_VISIBLE_DEVICES", "1")]
    assert [d.name for d in create.config.CDI_devices] == ["nvidia.com/gpu=2"]
    assert [(m.container_path, m.host_path, m.readonly) for m in create.config.mounts] == [
        ("/var/run/nvidia-container-devices/0", "/dev/null", False)
    ]
    assert dict(create.config.annotations) == {"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}
    assert (res.state, res.exit_code, res.stdout, res.stderr) == ("CONTAINER_EXITED", 0, "hi\n", "")


def test_privileged_pod_is_privileged_in_the_sandbox_and_the_container(fake):
    """kubelet marks the sandbox privileged when a container of the pod is (containerd
    refuses a privileged container in a sandbox that is not); unprivileged by default."""
    runtime, client = fake()
    client.run_pod("p", "img", ["true"], privileged=True)
    run, create = runtime.calls[0][1], runtime.calls[1][1]
    assert run.config.linux.security_context.privileged is True
    assert create.config.linux.security_context.privileged is True
    client.run_pod("q", "img", ["true"], env=[("A", "1"), ("A", "2")])
    run, create = runtime.calls[7][1], runtime.calls[8][1]
    assert [(e.key, e.value) for e in create.config.envs] == [("A", "1"), ("A", "2")]
    assert run.config.linux.security_context.privileged is False
    assert create.config.linux.security_context.privileged is False


def test_repeated_env_names_are_sent_in_order(fake):
    """env pairs keep a repeated name in order, as kubelet sends the device plugin's variable
    and then the pod's own of the same name (the later one wins in the OCI spec)."""
    runtime, client = fake()
    env = [("NVIDIA_VISIBLE_DEVICES", "GPU-1"), ("NVIDIA_VISIBLE_DEVICES", "all")]
    client.run_pod("p", "img", ["true"], env=env)
    assert [(e.key, e.value) for e in runtime.calls[1][1].config.envs] == env


def test_start_error_is_in_the_status_and_everything_removed(fake):
    runtime, client = fake(start_error="OCI runtime create failed:\nunknown device '7'")
    res = client.run_pod("p", "img", ["true"])
    assert (res.reason, res.exit_code) == ("StartError", 128)
    assert res.message == "OCI runtime create failed: unknown device '7'"
    assert [m for m, _ in runtime.calls][-3:] == [
        "RemoveContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ]


def test_refused_create_raises_and_removes_the_pod(fake):
    runtime, client = fake()

    def refuse(req, ctx):
        ctx.abort(grpc.StatusCode.UNKNOWN, "CDI device injection failed: unresolvable CDI devices")

    runtime.CreateContainer = refuse
    with pytest.raises(cri.CRIError) as err:
        client.run_pod("p", "img", ["true"], cdi_devices=["nvidia.com/gpu=7"])
    assert str(err.value) == (
        "CreateContainer: unknown: CDI device injection failed: unresolvable CDI devices"
    )
    assert [m for m, _ in runtime.calls] == [
        "RunPodSandbox",
        "CreateContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ]


def test_cleanup_failure_does_not_hide_the_first_error(fake):
    runtime, client = fake()

    def refuse(req, ctx):
        ctx.abort(grpc.StatusCode.UNKNOWN, "refused")

    def stop_fails(req, ctx):
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "containerd went away")

    runtime.CreateContainer = refuse
    runtime.StopPodSandbox = stop_fails
    with pytest.raises(cri.CRIError, match=r"^CreateContainer: unknown: refused$"):
        client.run_pod("p", "img", ["true"])
    assert [m for m, _ in runtime.calls][-2:] == ["StopPodSandbox", "RemovePodSandbox"]


def test_cleanup_failure_after_success_is_raised_after_every_step(fake):
    runtime, client = fake()

    def stop_fails(req, ctx):
        ctx.abort(grpc.StatusCode.UNAVAILABLE, "containerd went away")

    runtime.StopPodSandbox = stop_fails
    with pytest.raises(cri.CRIError, match=r"^StopPodSandbox: unavailable: containerd went away$"):
        client.run_pod("p", "img", ["true"])
    assert [m for m, _ in runtime.calls][-3:] == [
        "RemoveContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ]
