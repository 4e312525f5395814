"""api.proto: compiled by grpcio-tools into a content-keyed cache, upstream names and numbers."""

from __future__ import annotations

import subprocess

import pytest

from gpunode.cri import proto

# (message, field, upstream number) from k8s.io/cri-api pkg/apis/runtime/v1/api.proto
UPSTREAM = [
    ("RunPodSandboxRequest", "config", 1),
    ("RunPodSandboxRequest", "runtime_handler", 2),
    ("PodSandboxConfig", "metadata", 1),
    ("PodSandboxConfig", "log_directory", 3),
    ("PodSandboxConfig", "annotations", 7),
    ("PodSandboxConfig", "linux", 8),
    ("LinuxPodSandboxConfig", "security_context", 2),
    ("LinuxSandboxSecurityContext", "namespace_options", 1),
    ("NamespaceOption", "network", 1),
    ("CreateContainerRequest", "sandbox_config", 3),
    ("ContainerConfig", "envs", 6),
    ("ContainerConfig", "annotations", 10),
    ("ContainerConfig", "log_path", 11),
    ("ContainerConfig", "CDI_devices", 17),
    ("ContainerStatus", "state", 3),
    ("ContainerStatus", "exit_code", 7),
    ("ContainerStatus", "reason", 10),
    ("ContainerStatus", "message", 11),
    ("ContainerStatus", "log_path", 15),
    ("ContainerStatusRequest", "verbose", 2),
]


@pytest.mark.parametrize(("message", "name", "number"), UPSTREAM)
def test_fields_carry_the_upstream_numbers(message, name, number):
    descriptor = getattr(proto.messages(), message).DESCRIPTOR
    assert descriptor.full_name == f"runtime.v1.{message}"
    assert descriptor.fields_by_name[name].number == number


def test_wire_bytes_are_kubelets():
    pb = proto.messages()
    # field 17, wire type 2 -> tag varint 0x8a 0x01; then the CDIDevice (field 1 "x")
    wire = pb.ContainerConfig(CDI_devices=[pb.CDIDevice(name="x")]).SerializeToString()
    assert wire == b"\x8a\x01\x03\x0a\x01x"
    assert pb.NODE == 2 and pb.CONTAINER_EXITED == 2


def test_build_once_per_content(tmp_path, monkeypatch):
    first = proto.build(tmp_path)
    assert first.name == "api_pb2.py" and first.parent.parent == tmp_path
    assert "runtime.v1" in first.read_text()

    def no_protoc(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr(subprocess, "run", no_protoc)
    assert proto.build(tmp_path) == first
    assert [p.name for p in tmp_path.iterdir()] == [first.parent.name]  # no leftovers


def test_changed_proto_is_a_new_build(tmp_path, monkeypatch):
    first = proto.build(tmp_path)
    edited = tmp_path / "edited.proto"
    edited.write_text(proto.PROTO.read_text() + "\nmessage Extra { string x = 1; }\n")
    monkeypatch.setattr(proto, "PROTO", edited)
    second = proto.build(tmp_path)
    assert second != first and "_EXTRA" in second.read_text()


def test_protoc_error_is_one_line(tmp_path, monkeypatch):
    bad = tmp_path / "bad.proto"
    bad.write_text('syntax = "proto3";\nmessage A { string x = 1; int32 x = 2; }\n')
    monkeypatch.setattr(proto, "PROTO", bad)
    with pytest.raises(proto.ProtoError) as err:
        proto.build(tmp_path / "cache")
    text = str(err.value)
    assert "\n" not in text and "protoc failed" in text and '"x" is already defined' in text
    assert [p.name for p in (tmp_path / "cache").iterdir()] == []  # nothing half-built
