from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile

import pytest

from gpunode.validate import container, probe
from gpunode.validate.expect import Expectations

from .fakes import MIG_UUIDS, UUIDS, healthy_gpu, inventory, mig_gpu

PROC = ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0"]


def seen(minors, cuda=None):
    return {"dev": minors, "proc": [PROC[m] for m in minors],
            "nvml": {"count": len(minors), "gpus": [{"index": i, "uuid": UUIDS[m]}
                                                    for i, m in enumerate(minors)]},
            "cuda": cuda or {"absent": True, "error": "cannot load libcuda.so.1: x"}}  # fmt: skip


def test_compare_exact_and_each_way_of_seeing_more():
    want = [healthy_gpu(1)]
    assert container.compare("r", want, seen([1]), True) == []
    extra = seen([1])
    extra["dev"] = [1, 2]
    assert "device nodes [1, 2], expected [1]" in container.compare("r", want, extra, True)[0]
    extra = seen([1])
    extra["nvml"] = seen([1, 3])["nvml"]
    assert "NVML lists 2" in container.compare("r", want, extra, True)[0]
    extra = seen([1])
    extra["proc"] = PROC
    assert "/proc/driver/nvidia/gpus" in container.compare("r", want, extra, True)[0]
    assert container.compare("r", want, extra, False) == []  # node without procfs
    assert container.compare("r", want, {"error": "boom"}, True) == ["r: boom"]


@pytest.fixture
def fake_run(monkeypatch):
    calls = []

    def run_probe(engine, runtime, image, request, channel="env"):
        assert channel == fake_run.channel
        calls.append((engine, runtime, image, request))
        return fake_run.answers[request]

    monkeypatch.setattr(container, "run_probe", run_probe)
    fake_run.channel = "env"
    monkeypatch.setattr(container, "request_channel", lambda: fake_run.channel)
    monkeypatch.setattr(
        container, "ensure_image", lambda engine: ("gpunode-validate-probe:x", False)
    )
    monkeypatch.setattr(container, "_host_has_libcuda", lambda: False)
    fake_run.calls = calls
    return fake_run


def checks(inv, engine_up=True, **kw):
    return {c.id: c for c in container.evaluate(inv, Expectations(**kw), engine_up)}


def test_isolation_pass_and_cuda_skipped_when_node_has_no_cuda(fake_run, tmp_path):
    fake_run.answers = {UUIDS[0]: seen([0]), "all": seen([0, 1, 2, 3])}
    c = {x.id: x for x in container.evaluate(inventory(), Expectations(), True,
                                              proc_gpus=str(tmp_path))}  # fmt: skip
    assert c["container.isolation"].status == "pass"
    assert c["container.cuda"].status == "skip"
    assert "no CUDA-capable device" in c["container.cuda"].detail
    assert sorted(r for *_, r in fake_run.calls) == sorted([UUIDS[0], "all"])
    assert {rt for _, rt, *_ in fake_run.calls} == {"gpunode"}


def test_a_container_seeing_another_gpu_fails(fake_run):
    fake_run.answers = {UUIDS[0]: seen([0, 1]), "all": seen([0, 1, 2, 3])}
    c = checks(inventory())
    assert c["container.isolation"].status == "fail"
    assert c["container.isolation"].detail.startswith(
        f"{UUIDS[0]}: device nodes [0, 1], expected [0]"
    )


def test_lost_gpu_is_not_expected_in_all(fake_run):
    g = [healthy_gpu(i) for i in range(4)]
    g[0] = healthy_gpu(0, lost=True)
    fake_run.answers = {UUIDS[1]: seen([1]), "all": seen([1, 2, 3])}
    assert checks(inventory(g))["container.isolation"].status == "pass"


def test_cuda_counts(fake_run):
    ok = {"init": 0, "count": 1}
    fake_run.answers = {UUIDS[0]: seen([0], ok), "all": seen([0, 1, 2, 3], {"init": 0, "count": 4})}
    assert checks(inventory())["container.cuda"].status == "pass"
    fake_run.answers["all"] = seen([0, 1, 2, 3], {"init": 0, "count": 8})
    c = checks(inventory())["container.cuda"]
    assert c.status == "fail" and c.detail == "all: cuDeviceGetCount 8, expected 4"
    no_dev = {"init": 100, "error": "cuInit: CUDA_ERROR_NO_DEVICE (100)"}
    fake_run.answers = {UUIDS[0]: seen([0], no_dev), "all": seen([0, 1, 2, 3], no_dev)}
    assert checks(inventory())["container.cuda"].status == "skip"


def test_libcuda_on_node_but_not_in_container_fails(fake_run, monkeypatch):
    monkeypatch.setattr(container, "_host_has_libcuda", lambda: True)
    fake_run.answers = {UUIDS[0]: seen([0]), "all": seen([0, 1, 2, 3])}
    c = checks(inventory())["container.cuda"]
    assert c.status == "fail" and "could not load it (not injected" in c.detail


def test_image_has_the_system_libraries_libcuda_needs_not_the_driver(monkeypatch, tmp_path):
    """A driver's libcuda.so.1 injected into the probe container needs libdl, libpthread,
    librt from the image (glibc's, as in a CUDA image); NVIDIA's own libraries are the
    runtime's to inject."""
    fake = tmp_path / "libcuda.so.1"
    fake.write_bytes(b"")
    deps = {"/lib/x86_64-linux-gnu/libdl.so.2", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"}
    real_ldd = container._ldd
    monkeypatch.setattr(container, "node_libcuda", lambda: str(fake))
    monkeypatch.setattr(
        container, "_ldd", lambda paths: deps if paths == [str(fake)] else real_ldd(paths)
    )
    files = container.image_files(sys.executable)
    assert "/lib/x86_64-linux-gnu/libdl.so.2" in files
    assert not [f for f in files if "nvidia" in f or "libcuda" in f]


def test_skips_without_engine_or_gpus(fake_run):
    assert {c.status for c in checks(inventory(), engine_up=False).values()} == {"skip"}
    assert {c.status for c in checks(inventory(), engine="none").values()} == {"skip"}
    c = checks(inventory([]))
    assert c["container.isolation"].detail == "no usable GPU on this node to give a container"
    assert fake_run.calls == []


def test_image_error_fails_image_check(fake_run, monkeypatch):
    def boom(engine):
        raise container.ImageError("python3 is not on this node's PATH: the probe image needs it")

    monkeypatch.setattr(container, "ensure_image", boom)
    c = checks(inventory())
    assert c["container.image"].status == "fail" and c["container.isolation"].status == "skip"


def test_image_tar_is_reproducible_and_runs_the_probe_with_only_its_files(tmp_path):
    files = container.image_files(sys.executable)
    a, b = container.build_tar(files), container.build_tar(files)
    assert a == b
    with tarfile.open(fileobj=io.BytesIO(a)) as tar:
        names = tar.getnames()
        assert "gpunode-probe.py" in names and "etc/ld.so.conf" in names
        assert all(m.mtime == 0 and m.uid == 0 for m in tar.getmembers())
        tar.extractall(tmp_path, filter="tar")
    # the probe runs with the image's files only (no site-packages, no gpunode)
    proc = subprocess.run(
        [sys.executable, "-I", "-S", str(tmp_path / "gpunode-probe.py")],
        capture_output=True, text=True, check=True, env={"PYTHONHOME": str(tmp_path / "usr")},
    )  # fmt: skip
    out = json.loads(proc.stdout)
    assert set(out) == {"nvml", "cuda", "dev", "caps", "proc"}


def test_probe_reports_a_missing_nvml_as_an_error():
    out = subprocess.run([sys.executable, "-I", "-S", probe.__file__], capture_output=True,
                         text=True, check=True, env={"LD_LIBRARY_PATH": "/nonexistent"})  # fmt: skip
    data = json.loads(out.stdout)
    assert data["nvml"]["error"].startswith("cannot load libnvidia-ml.so.1")  # no driver here
    assert data["cuda"]["absent"] is True
    assert isinstance(data["dev"], list)


# ---------------------------------------------------------------- mig.isolation


def mig_seen(minor, gpu_uuid, migs, caps):
    return {"dev": [minor], "proc": [PROC[minor]], "caps": caps,
            "nvml": {"count": 1, "gpus": [{"index": 0, "uuid": gpu_uuid, "mig": migs}]},
            "cuda": {"absent": True, "error": "cannot load libcuda.so.1: x"}}  # fmt: skip


@pytest.fixture
def caps_tree(tmp_path):
    """The driver's MIG access files for GPU minor 1: GI g has minor 10g, its CI 0 10g+1."""
    proc = tmp_path / "nvidia"
    (proc / "gpus").mkdir(parents=True)
    for gi in (1, 2, 3):
        d = proc / "capabilities" / "gpu1" / "mig" / f"gi{gi}"
        (d / "ci0").mkdir(parents=True)
        (d / "access").write_text(f"DeviceFileMinor: {10 * gi}\nDeviceFileMode: 292\n")
        (d / "ci0" / "access").write_text(f"DeviceFileMinor: {10 * gi + 1}\nDeviceFileMode: 292\n")
    return proc


def mig_inventory():
    return inventory([healthy_gpu(0), mig_gpu(1)])


def exact_answers(inv):
    g = inv.gpus[1]
    answers = {UUIDS[0]: seen([0]), "all": seen([0, 1])}
    answers["all"]["nvml"]["gpus"][1]["mig"] = [d.uuid for d in g.mig_devices]
    for d in g.mig_devices:
        s = mig_seen(1, g.uuid, [d.uuid], [10 * d.gi, 10 * d.gi + 1])
        answers[f"1:{d.index}"] = answers[d.uuid] = s
    return answers


def test_each_mig_device_requested_both_ways_sees_exactly_itself(fake_run, caps_tree):
    inv = mig_inventory()
    fake_run.answers = exact_answers(inv)
    out = container.evaluate(inv, Expectations(), True, proc_gpus=str(caps_tree / "gpus"))
    migs = [c for c in out if c.id == "mig.isolation"]
    assert [(c.gpu, c.mig, c.uuid, c.status) for c in migs] == [
        (1, n, d.uuid, "pass") for n, d in enumerate(inv.gpus[1].mig_devices)
    ]
    assert migs[2].detail.startswith(f"1:2 and {MIG_UUIDS[5]} (1g.10gb): exactly this MIG device")
    assert "cap nodes 30, 31" in migs[2].detail
    assert next(c for c in out if c.id == "container.isolation").status == "pass"
    requests = {r for *_, r in fake_run.calls}
    assert {"1:0", "1:1", "1:2", MIG_UUIDS[3], MIG_UUIDS[4], MIG_UUIDS[5]} <= requests


def test_all_gives_every_mig_device_and_a_whole_gpu_none(fake_run, caps_tree):
    inv = mig_inventory()
    fake_run.answers = exact_answers(inv)
    fake_run.answers["all"]["nvml"]["gpus"][1]["mig"] = [MIG_UUIDS[3]]
    c = {x.id: x for x in container.evaluate(inv, Expectations(), True,
                                              proc_gpus=str(caps_tree / "gpus"))}  # fmt: skip
    assert c["container.isolation"].status == "fail"
    assert (f"all: NVML lists MIG devices {MIG_UUIDS[3]} of {UUIDS[1]}; expected "
            f"{', '.join(MIG_UUIDS[3:6])}") in c["container.isolation"].detail  # fmt: skip
    # one GPU requested whole: a MIG-enabled one shows none of its MIG devices
    whole = seen([1])
    whole["nvml"]["gpus"][0]["mig"] = [MIG_UUIDS[3]]
    assert "expected none" in container.compare(UUIDS[1], [inv.gpus[1]], whole, False)[0]
    whole["nvml"]["gpus"][0]["mig"] = []
    assert container.compare(UUIDS[1], [inv.gpus[1]], whole, False) == []


def test_the_one_gpu_request_is_a_whole_gpu_where_there_is_one(fake_run, caps_tree):
    inv = inventory([mig_gpu(0), healthy_gpu(1)])
    fake_run.answers = {UUIDS[1]: seen([1]), "all": seen([0, 1])}
    fake_run.answers["all"]["nvml"]["gpus"][0]["mig"] = MIG_UUIDS[:3]
    for d in inv.gpus[0].mig_devices:
        fake_run.answers[f"0:{d.index}"] = fake_run.answers[d.uuid] = {"error": "not here"}
    c = {x.id: x for x in container.evaluate(inv, Expectations(), True, proc_gpus="/nonexistent")}
    assert c["container.isolation"].status == "pass"
    assert UUIDS[1] in c["container.isolation"].detail


@pytest.mark.parametrize(
    ("break_it", "expect"),
    [
        (lambda s: s["nvml"]["gpus"][0].update(mig=[MIG_UUIDS[3], MIG_UUIDS[4]]),
         f"NVML lists MIG devices {MIG_UUIDS[3]}, {MIG_UUIDS[4]}; expected {MIG_UUIDS[3]} alone"),
        (lambda s: s.update(caps=[1, 10, 11]),
         "/dev/nvidia-caps nodes [1, 10, 11], expected [10, 11] (its GI and CI)"),
        (lambda s: s.update(dev=[0, 1]), "device nodes [0, 1], expected [1] (the parent only)"),
        (lambda s: s["nvml"].update(count=2, gpus=[{"uuid": UUIDS[0]}, *s["nvml"]["gpus"]]),
         "NVML lists 2 GPU(s)"),
        (lambda s: s["nvml"]["gpus"][0].update(mig_error="nvmlDeviceGetMaxMigDeviceCount: x"),
         "NVML MIG devices: nvmlDeviceGetMaxMigDeviceCount: x"),
        (lambda s: s.update(error="`docker run` exited 125: unknown device 1:0"),
         "1:0: `docker run` exited 125: unknown device 1:0"),
    ],
)  # fmt: skip
def test_a_mig_container_seeing_more_or_other_fails(fake_run, caps_tree, break_it, expect):
    inv = mig_inventory()
    fake_run.answers = exact_answers(inv)
    broken = json.loads(json.dumps(fake_run.answers["1:0"]))
    break_it(broken)
    fake_run.answers["1:0"] = broken
    out = container.evaluate(inv, Expectations(), True, proc_gpus=str(caps_tree / "gpus"))
    first = next(c for c in out if c.id == "mig.isolation")
    assert first.status == "fail", first.detail
    assert expect in first.detail
    assert "a container asking for MIG device 1:0 does not get exactly it" in first.detail
    assert "`gpunode explain` gives with NVIDIA_VISIBLE_DEVICES=1:0" in first.detail
    others = [c.status for c in out if c.id == "mig.isolation"][1:]
    assert others == ["pass", "pass"]


def test_unreadable_access_files_leave_the_cap_nodes_uncompared(fake_run, tmp_path):
    inv = mig_inventory()
    fake_run.answers = exact_answers(inv)
    (tmp_path / "gpus").mkdir()
    out = container.evaluate(inv, Expectations(), True, proc_gpus=str(tmp_path / "gpus"))
    c = next(c for c in out if c.id == "mig.isolation")
    assert c.status == "pass" and "cap nodes not compared (" in c.detail


def test_mig_isolation_skips_with_the_containers(fake_run):
    out = container.evaluate(mig_inventory(), Expectations(engine="none"), True)
    migs = [c for c in out if c.id == "mig.isolation"]
    assert [(c.gpu, c.mig, c.status) for c in migs] == [(1, 0, "skip"), (1, 1, "skip"), (1, 2, "skip")]
    assert fake_run.calls == []
    # no MIG device: no mig.isolation at all
    fake_run.answers = {UUIDS[0]: seen([0]), "all": seen([0, 1, 2, 3])}
    assert not [c for c in container.evaluate(inventory(), Expectations(), True)
                if c.id == "mig.isolation"]  # fmt: skip


def test_probe_lists_mig_devices_of_a_mig_gpu_only():
    """The probe's MIG walk on a fake NVML: slots 0 and 2 hold devices (1: NOT_FOUND)."""
    import ctypes

    class Lib:
        def nvmlDeviceGetMigMode(self, h, cur, pend):
            cur._obj.value = 1 if h.value == 1 else 0
            return 0

        def nvmlDeviceGetMaxMigDeviceCount(self, h, n):
            n._obj.value = 3
            return 0

        def nvmlDeviceGetMigDeviceHandleByIndex(self, h, slot, out):
            if slot == 1:
                return probe.NVML_ERROR_NOT_FOUND
            out._obj.value = 100 + slot
            return 0

        def nvmlDeviceGetUUID(self, h, buf, size):
            buf.value = f"MIG-{h.value}".encode()
            return 0

    assert probe._mig(Lib(), ctypes.c_void_p(1), str) == {"mig": ["MIG-100", "MIG-102"]}
    assert probe._mig(Lib(), ctypes.c_void_p(2), str) == {}


def test_probe_containers_ask_as_the_node_accepts(fake_run, monkeypatch):
    """A node whose runtime.toml accepts volume mounts (a Kubernetes node: the env of an
    unprivileged container is not read there) gets probe containers asking by volume
    mounts, Docker beside Kubernetes included."""
    fake_run.channel = "volume-mounts"
    fake_run.answers = {UUIDS[0]: seen([0]), "all": seen([0, 1, 2, 3])}
    assert checks(inventory())["container.isolation"].status == "pass"


def test_request_args():
    assert container.request_args("0:1,GPU-a", "volume-mounts") == [
        "-e", "NVIDIA_VISIBLE_DEVICES=/var/run/nvidia-container-devices",
        "--mount", "type=bind,source=/dev/null,target=/var/run/nvidia-container-devices/0:1",
        "--mount", "type=bind,source=/dev/null,target=/var/run/nvidia-container-devices/GPU-a",
    ]  # fmt: skip
    assert container.request_args("all", "env") == ["-e", "NVIDIA_VISIBLE_DEVICES=all"]
