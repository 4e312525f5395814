"""`gpunode validate --engine cri`: engine checks through the CRI socket and containerd's merged
configuration, the probe image for ctr, pods judged as the Docker containers are."""

from __future__ import annotations

import io
import json
import os
import tarfile
from types import SimpleNamespace

import pytest

from gpunode.cri.client import CRIError, PodResult
from gpunode.validate import container, cri, engine
from gpunode.validate.expect import Expectations

from .fakes import UUIDS, inventory
from .test_container import seen


def by_id(checks) -> dict:
    return {c.id: c for c in checks}


def dump(name="gpunode", binary="/bin/sh", default="runc", plugin="io.containerd.grpc.v1.cri"):
    runtimes = {"runc": {"runtime_type": "io.containerd.runc.v2"}}
    if name:
        runtimes[name] = {
            "runtime_type": "io.containerd.runc.v2",
            "options": {"BinaryName": binary},
        }
    cri = {"containerd": {"default_runtime_name": default, "runtimes": runtimes}}
    if plugin == "io.containerd.cri.v1.runtime":  # as containerd 2.x dumps it: version 3,
        # and the gRPC plugin's section still there, with its streaming settings only
        grpc = {"disable_tcp_service": True, "stream_server_address": "127.0.0.1"}
        return {"version": 3, "plugins": {"io.containerd.grpc.v1.cri": grpc, plugin: cri}}
    return {"version": 2, "plugins": {plugin: cri}}


@pytest.fixture
def runtime_toml(monkeypatch, tmp_path):
    """Write the runtime.toml gpunode's runtime reads (its mode)."""

    def write(text):
        conf = tmp_path / "runtime.toml"
        conf.write_text(text)
        monkeypatch.setenv("GPUNODE_RUNTIME_CONFIG", str(conf))
        return conf

    return write


SECURE = "secure (envvar requests of unprivileged containers ignored; "


@pytest.mark.parametrize("plugin", ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"])
def test_registration_pass_in_both_layouts(plugin, runtime_toml):
    conf = runtime_toml("accept-envvar-unprivileged = false\n")
    status, detail = cri.registration(dump(plugin=plugin), "gpunode", False)
    assert (status, detail) == (
        "pass",
        f"handler gpunode (/bin/sh): {SECURE}{conf}: accept-envvar-unprivileged = false)",
    )
    status, detail = cri.registration(dump(default="gpunode", plugin=plugin), "gpunode", True)
    assert status == "pass" and detail.startswith(
        "handler gpunode (/bin/sh), the default runtime: "
    )


def test_registration_says_each_gpunode_handlers_mode(runtime_toml):
    """Every handler running gpunode's runtime gets its mode, one segment each; handlers of
    other runtimes (runc) none."""
    conf = runtime_toml("accept-envvar-unprivileged = true\n")
    d = dump(binary="/usr/local/bin/gpunode-container-runtime")
    runtimes = d["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    runtimes["nvidia"] = {"runtime_type": "io.containerd.runc.v2",
                          "options": {"BinaryName": "/usr/local/bin/gpunode-container-runtime"}}  # fmt: skip
    status, detail = cri.registration(d, "gpunode", False)
    open_mode = (
        "open (any container's NVIDIA_VISIBLE_DEVICES takes any GPU; "
        f"{conf}: accept-envvar-unprivileged = true)"
    )
    assert status == "fail"  # the binary is not installed here; the modes are said anyway
    segments = detail.split("; handler ")
    assert segments[-2:] == [
        f"gpunode: {open_mode}",
        f"nvidia (/usr/local/bin/gpunode-container-runtime): {open_mode}",
    ], detail
    assert "runc" not in detail


def test_registration_mode_of_an_unreadable_runtime_toml(runtime_toml):
    runtime_toml("accept-envvar-unprivileged = 1\n")
    status, detail = cri.registration(dump(), "gpunode", False)
    assert status == "pass" and "mode unknown (" in detail and "\n" not in detail


def test_engine_check_reports_the_mode(cri_node, runtime_toml):
    runtime_toml("accept-volume-mounts = true\naccept-envvar-unprivileged = false\n")
    checks = []
    cri.engine_checks(Expectations(), lambda cid, status, detail: checks.append((cid, detail)))
    (detail,) = [d for cid, d in checks if cid == "engine.runtime_registered"]
    assert SECURE in detail, detail


@pytest.mark.parametrize(
    ("d", "name", "want_default", "fragment"),
    [
        (dump(name=""), "gpunode", False, "containerd has no handler 'gpunode' (handlers: runc;"),
        (dump(binary="/no/such"), "gpunode", False, "BinaryName '/no/such' is missing"),
        (dump(), "gpunode", True, "default runtime is 'runc', expected 'gpunode'"),
        ({"plugins": {}}, "gpunode", False, "no CRI plugin section"),
    ],
)
def test_registration_failures_name_what_is_wrong(d, name, want_default, fragment):
    status, detail = cri.registration(d, name, want_default)
    assert status == "fail" and fragment in detail, detail


def test_no_socket_skips_engine_and_container_checks(monkeypatch, tmp_path):
    monkeypatch.setattr(cri, "SOCKET", str(tmp_path / "containerd.sock"))
    info, checks = engine.evaluate(Expectations(engine="cri"))
    c = by_id(checks)
    assert info is None
    assert c["engine.active"].status == "skip"
    assert c["engine.active"].detail == f"no CRI socket at {tmp_path}/containerd.sock " \
        "(containerd not running here)"  # fmt: skip
    assert {x.status for x in checks} == {"skip"}
    cc = by_id(container.evaluate(inventory(), Expectations(engine="cri"), engine_up=False))
    assert {x.status for x in cc.values()} == {"skip"}
    assert "the cri engine does not answer" in cc["container.isolation"].detail


def test_missing_client_libraries_skip_with_the_reason(monkeypatch, tmp_path):
    sock = tmp_path / "containerd.sock"
    sock.touch()
    monkeypatch.setattr(cri, "SOCKET", str(sock))
    import builtins

    real_import = builtins.__import__

    def no_grpc(name, *args, **kwargs):
        if name == "grpc":
            raise ImportError("No module named 'grpc'", name="grpc")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_grpc)
    c = by_id(engine.evaluate(Expectations(engine="cri"))[1])
    assert c["engine.active"].status == "skip"
    detail = c["engine.active"].detail
    assert detail.startswith("the CRI client needs grpc, not on this node"), detail
    assert "apt install python3-grpcio python3-grpc-tools python3-protobuf" in detail


class FakeClient:
    def __init__(self, answers=None, fail=None):
        self.answers, self.fail, self.pods, self.closed = answers or {}, fail, [], False

    def version(self):
        if self.fail:
            raise CRIError("Version", "unavailable", self.fail)
        return SimpleNamespace(runtime_name="containerd", runtime_version="v1.7.24")

    def run_pod(self, name, image, command, *, handler="", env=None, mounts=None):
        """Answers by what the pod asked: ``mounts:<ids>`` for volume mounts (the device
        plugin's volume-mounts strategy), else the env's NVIDIA_VISIBLE_DEVICES."""
        if mounts:
            assert env["NVIDIA_VISIBLE_DEVICES"] == cri.DEVICE_MOUNT_DIR  # as the plugin sends
            assert {m["host_path"] for m in mounts} == {"/dev/null"}
            key = "mounts:" + ",".join(m["container_path"].rpartition("/")[2] for m in mounts)
        else:
            key = env["NVIDIA_VISIBLE_DEVICES"]
        self.pods.append((name, image, handler, key))
        out = self.answers[key]
        if isinstance(out, PodResult):
            return out
        return PodResult("p", "c", "CONTAINER_EXITED", 0, "Completed", "", json.dumps(out) + "\n",
                         "")  # fmt: skip

    def close(self):
        self.closed = True


@pytest.fixture
def cri_node(monkeypatch, tmp_path):
    sock = tmp_path / "containerd.sock"
    sock.touch()
    monkeypatch.setattr(cri, "SOCKET", str(sock))
    fake = FakeClient()
    monkeypatch.setattr(cri, "client", lambda timeout=cri.POD_TIMEOUT: fake)
    monkeypatch.setattr(cri, "_dump", lambda: (dump(), ""))
    monkeypatch.setattr(cri, "ensure_image", lambda: ("gpunode.local/validate-probe:x", False))
    monkeypatch.setattr(container, "_host_has_libcuda", lambda: False)
    monkeypatch.setattr(container, "_python", lambda: "/usr/bin/python3")
    monkeypatch.setattr(container, "request_channel", lambda: "env")
    return fake


def test_engine_answers_and_pods_see_exactly_their_gpus(cri_node, tmp_path):
    cri_node.answers = {UUIDS[0]: seen([0]), "all": seen([0, 1, 2, 3])}
    expect = Expectations(engine="cri", runtime_name="gpunode")
    info, checks = engine.evaluate(expect)
    c = by_id(checks)
    assert c["engine.active"].status == "pass"
    assert c["engine.active"].detail.startswith("containerd v1.7.24 answers the CRI")
    assert c["engine.daemon_json"].status == "skip"
    assert c["engine.runtime_registered"].status == "pass"
    cc = by_id(container.evaluate(inventory(), expect, True, proc_gpus=str(tmp_path),
                                  runner=cri.runner(info["cri"], "gpunode")))  # fmt: skip
    assert cc["container.isolation"].status == "pass", cc["container.isolation"].detail
    assert sorted(p[3] for p in cri_node.pods) == sorted([UUIDS[0], "all"])
    assert {p[2] for p in cri_node.pods} == {"gpunode"}  # through the handler


def test_a_pod_seeing_another_gpu_or_not_starting_fails(cri_node, tmp_path):
    bad = PodResult("p", "c", "CONTAINER_EXITED", 128, "StartError", "OCI runtime create failed: "
                    "unknown device", "", "")  # fmt: skip
    cri_node.answers = {UUIDS[0]: seen([0, 1]), "all": bad}
    expect = Expectations(engine="cri")
    cc = by_id(container.evaluate(inventory(), expect, True, proc_gpus=str(tmp_path),
                                  runner=cri.runner(cri_node, "gpunode")))  # fmt: skip
    detail = cc["container.isolation"].detail
    assert cc["container.isolation"].status == "fail"
    assert "device nodes [0, 1], expected [0]" in detail
    assert "all: pod CONTAINER_EXITED StartError exit 128: OCI runtime create failed" in detail


def test_version_failure_is_a_failed_engine(monkeypatch, tmp_path):
    sock = tmp_path / "containerd.sock"
    sock.touch()
    monkeypatch.setattr(cri, "SOCKET", str(sock))
    monkeypatch.setattr(cri, "client", lambda timeout=0: FakeClient(fail="connection refused"))
    c = by_id(engine.evaluate(Expectations(engine="cri"))[1])
    assert c["engine.active"].status == "fail"
    assert c["engine.active"].detail == "Version: unavailable: connection refused"


def test_probe_image_archive_is_reproducible_and_importable_layout(tmp_path):
    f = tmp_path / "python3"
    f.write_bytes(b"#!/bin/true\n")
    os.chmod(f, 0o755)
    a, name = cri.image_archive({"/usr/bin/python3": str(f)})
    b, name2 = cri.image_archive({"/usr/bin/python3": str(f)})
    assert a == b and name == name2 and name.startswith("gpunode.local/validate-probe:")
    with tarfile.open(fileobj=io.BytesIO(a)) as tar:
        manifest = json.loads(tar.extractfile("manifest.json").read())
        assert manifest[0]["RepoTags"] == [name]
        layer = tar.extractfile(manifest[0]["Layers"][0]).read()
    with tarfile.open(fileobj=io.BytesIO(layer)) as lt:
        assert "usr/bin/python3" in lt.getnames()
        assert container.PROBE_PATH.lstrip("/") in lt.getnames()


NO_GPU = {"dev": [], "proc": ["0000:07:00.0"], "caps": [],
          "nvml": {"error": "cannot load libnvidia-ml.so.1: not found"},
          "cuda": {"absent": True, "error": "cannot load libcuda.so.1: x"}}  # fmt: skip


def run_cri_checks(cri_node, tmp_path, channel):
    """engine + container checks + container.unallocated, as gpunode.validate.checks runs
    them for --engine cri."""
    expect = Expectations(engine="cri", runtime_name="nvidia")
    info, _ = engine.evaluate(expect)
    run = cri.runner(info["cri"], "nvidia", channel)
    done = container.evaluate(inventory(), expect, True, proc_gpus=str(tmp_path), runner=run)
    return by_id(done + cri.unallocated_after(info["cri"], "nvidia", run, done))


def test_secure_node_pods_ask_by_volume_mounts_and_unallocated_gets_nothing(cri_node, tmp_path):
    """A Kubernetes node (accept-volume-mounts): the probe pods ask as the device plugin's
    volume-mounts strategy sends; the pod whose env says all with no allocation sees no GPU."""
    cri_node.answers = {f"mounts:{UUIDS[0]}": seen([0]), "mounts:all": seen([0, 1, 2, 3]),
                        "all": NO_GPU}  # fmt: skip
    cc = run_cri_checks(cri_node, tmp_path, "volume-mounts")
    assert cc["container.isolation"].status == "pass", cc["container.isolation"].detail
    u = cc["container.unallocated"]
    assert u.status == "pass", u.detail
    assert u.title == "A pod allocated no GPU gets none (NVIDIA_VISIBLE_DEVICES=all)"
    assert "handler nvidia: no GPU" in u.detail
    assert sorted(p[3] for p in cri_node.pods) == sorted(
        [f"mounts:{UUIDS[0]}", "mounts:all", "all"]
    )
    assert {p[2] for p in cri_node.pods} == {"nvidia"}


def test_open_node_fails_unallocated_naming_the_setting(cri_node, tmp_path):
    """accept-envvar-unprivileged = true: the pod that asked by env alone gets every GPU."""
    cri_node.answers = {UUIDS[0]: seen([0]), "all": seen([0, 1, 2, 3])}
    cc = run_cri_checks(cri_node, tmp_path, "env")
    assert cc["container.isolation"].status == "pass"
    u = cc["container.unallocated"]
    assert u.status == "fail"
    assert "sees 4 GPU(s) through handler nvidia" in u.detail
    assert "set accept-envvar-unprivileged = false" in u.detail and "\n" not in u.detail


def test_unallocated_pod_that_does_not_start_fails(cri_node, tmp_path):
    bad = PodResult("p", "c", "CONTAINER_EXITED", 128, "StartError", "unknown device", "", "")
    cri_node.answers = {f"mounts:{UUIDS[0]}": seen([0]), "mounts:all": seen([0, 1, 2, 3]),
                        "all": bad}  # fmt: skip
    u = run_cri_checks(cri_node, tmp_path, "volume-mounts")["container.unallocated"]
    assert u.status == "fail" and "must start without a GPU" in u.detail
    assert "StartError exit 128: unknown device" in u.detail


def test_unallocated_skips_where_the_others_could_not_run(monkeypatch, tmp_path):
    monkeypatch.setattr(cri, "SOCKET", str(tmp_path / "containerd.sock"))
    expect = Expectations(engine="cri")
    done = container.evaluate(inventory(), expect, engine_up=False)
    u = by_id(cri.unallocated_after(None, "gpunode", None, done))["container.unallocated"]
    assert u.status == "skip" and "the cri engine does not answer" in u.detail


def test_pod_request_shapes():
    assert cri.pod_request("GPU-a,GPU-b", "volume-mounts") == {
        "env": {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices",
                "NVIDIA_DRIVER_CAPABILITIES": "utility,compute"},
        "mounts": [
            {"container_path": "/var/run/nvidia-container-devices/GPU-a", "host_path": "/dev/null"},
            {"container_path": "/var/run/nvidia-container-devices/GPU-b", "host_path": "/dev/null"},
        ],
    }  # fmt: skip
    assert cri.pod_request("0:1", "env")["env"]["NVIDIA_VISIBLE_DEVICES"] == "0:1"
    assert cri.pod_request(None, "volume-mounts") == {
        "env": {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "utility,compute"}
    }


@pytest.mark.parametrize(
    ("toml", "channel"),
    [
        ("accept-volume-mounts = true\naccept-envvar-unprivileged = false\n", "volume-mounts"),
        ("", "env"),
        ("accept-volume-mounts = 1\n", "env"),  # the runtime refuses it; pods will say so
    ],
)
def test_request_channel_follows_runtime_toml(monkeypatch, tmp_path, toml, channel):
    conf = tmp_path / "runtime.toml"
    conf.write_text(toml)
    monkeypatch.setenv("GPUNODE_RUNTIME_CONFIG", str(conf))
    assert container.request_channel() == channel


def test_unallocated_reaches_every_output(cri_node, tmp_path):
    """The check goes the one result path: JSON, the Prometheus textfile, and the cluster
    report's JUnit, Markdown and HTML."""
    from gpunode.report import build
    from gpunode.validate import output
    from gpunode.validate.model import Result

    cri_node.answers = {UUIDS[0]: seen([0]), "all": seen([0, 1, 2, 3])}
    cc = run_cri_checks(cri_node, tmp_path, "env")
    result = Result(node="n1", hostname="n1", started="2026-01-01T00:00:00Z",
                    gpunode_version="0")  # fmt: skip
    result.checks = list(cc.values())
    doc = result.to_dict()
    assert any(c["id"] == "container.unallocated" and c["status"] == "fail"
               for c in doc["checks"])  # fmt: skip
    assert 'check="container.unallocated"' in output.textfile(result)
    path = tmp_path / "n1.json"
    path.write_text(json.dumps(doc))
    files = build.render_all(build.model_from([str(path)]))
    for name in ("junit.xml", "summary.md", "index.html", "report.json"):
        assert (
            b"container.unallocated" in files[name] or b"A pod allocated no GPU" in files[name]
        ), name
