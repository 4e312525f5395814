"""Prepared edits (gpunode.runtime.prepared): a request served again on an unchanged node
gets exactly the spec the full path gives, and anything that could change what it gets
(its request inputs, the image's layout, the configuration, the driver, the inventory,
the device nodes) sends it down the full path again. The file is trusted only as the
runtime's own."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from gpunode.nvidia.facts import NodeFacts
from gpunode.runtime import bundle as spec_bundle
from gpunode.runtime import discovery, prepared, request, requirements, specinputs
from gpunode.runtime.config import RuntimeConfig
from gpunode.runtime.edits import EditError
from gpunode.runtime.userinput import RequestError

from .fake_node import GPUS, VERSION

LIBDIR = "/usr/lib/x86_64-linux-gnu"


@pytest.fixture
def node(tmp_path, devroot):
    """Driver root (version file, NVML, ld.so.cache), device nodes (devroot), a valid
    inventory cache, and the runtime configuration naming them."""
    driver = tmp_path / "driver"
    (driver / "proc/driver/nvidia").mkdir(parents=True)
    (driver / "proc/driver/nvidia/version").write_text(
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {VERSION}  Thu Jan  1 2026\n"
    )
    (driver / LIBDIR.lstrip("/")).mkdir(parents=True)
    (driver / LIBDIR.lstrip("/") / "libnvidia-ml.so.1").write_bytes(b"\x7fELF nvml")
    (driver / "etc").mkdir()
    (driver / "etc/ld.so.cache").write_bytes(b"cache")
    cfg = RuntimeConfig(
        driver_root=str(driver),
        dev_root=str(devroot),
        cache_file=str(tmp_path / "inventory.json"),
        log_file="",
    )
    write_inventory(cfg, GPUS)
    return cfg


def write_inventory(cfg, gpus):
    lib = f"{cfg.driver_root}{LIBDIR}/libnvidia-ml.so.{VERSION}"
    files = discovery.DriverFiles(
        root=cfg.driver_root, libraries={"utility": [lib]}, sonames={lib: "libnvidia-ml.so.1"}
    )
    key = discovery.cache_key(cfg.driver_root)
    d = discovery.Discovery(NodeFacts(VERSION, "12.2", tuple(gpus)), files, key)
    discovery.write_cache(d, cfg.cache_file)


def create(tmp_path, cfg, env=("NVIDIA_VISIBLE_DEVICES=0",), debian=True, **spec_extra):
    """modify_bundle on a fresh bundle: (the edited spec, the GpuCreate)."""
    bundle = tmp_path / "bundle"
    root = bundle / "rootfs"
    (root / "etc").mkdir(parents=True, exist_ok=True)
    marker = root / "etc/debian_version"
    if debian:
        marker.write_text("12\n")
    else:
        marker.unlink(missing_ok=True)
    spec = {"process": {"env": ["PATH=/bin", *env], "args": ["true"]}, "root": {"path": "rootfs"}}
    spec.update(spec_extra)
    (bundle / "config.json").write_text(json.dumps(spec))
    job = spec_bundle.modify_bundle(str(bundle), cfg)
    return json.loads((bundle / "config.json").read_text()), job


def rewrite(path, data: bytes):
    with open(path, "wb") as fh:
        fh.write(data)


def read_json(path):
    with open(path) as fh:
        return json.load(fh)


def served(job) -> bool:
    return job.summary.endswith(", prepared")


def test_the_same_request_again_gets_the_same_spec_from_the_prepared_edits(tmp_path, node):
    first, job1 = create(tmp_path, node)
    again, job2 = create(tmp_path, node, env=("NVIDIA_VISIBLE_DEVICES=0", "HOSTNAME=other"))
    assert not served(job1) and served(job2)
    first["process"]["env"].append("HOSTNAME=other")  # the one difference in the input
    assert again == first
    assert job2.hook_argv == job1.hook_argv and "--root" not in job2.hook_argv
    assert job2.args.gpu == job1.args.gpu == [GPUS[0].procfs_bus_id]
    assert [d["path"] for d in again["linux"]["devices"]][-1] == "/dev/nvidia0"


@pytest.mark.parametrize(
    ("change", "expect"),
    [
        ({"env": ("NVIDIA_VISIBLE_DEVICES=1",)}, "/dev/nvidia1"),
        ({"env": ("NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute")}, None),
        ({"env": ("NVIDIA_VISIBLE_DEVICES=0", "CUDA_VERSION=12.0")}, None),
        ({"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=2"}}, "/dev/nvidia2"),
        (
            {
                "process": {
                    "env": ["NVIDIA_VISIBLE_DEVICES=0"],
                    "capabilities": {"bounding": ["CAP_SYS_ADMIN"]},
                }
            },
            None,
        ),
        ({"debian": False}, "/usr/lib64/libnvidia-ml.so.535"),
    ],
    ids=["devices", "capabilities", "legacy-cuda", "annotation", "privileged", "image-layout"],
)
def test_a_changed_request_input_is_worked_out_again(tmp_path, node, change, expect):
    create(tmp_path, node)
    change = dict(change)
    spec, job = create(tmp_path, node, **change)
    assert not served(job), change
    if expect:
        assert expect in json.dumps(spec)
    spec2, job2 = create(tmp_path, node, **change)  # and is then kept itself
    assert served(job2) and spec2 == spec


def test_other_annotations_and_env_do_not_miss(tmp_path, node):
    create(tmp_path, node)
    _, job = create(
        tmp_path,
        node,
        env=("NVIDIA_VISIBLE_DEVICES=0", "HOME=/root"),
        annotations={"io.kubernetes.cri.sandbox-id": "abc123"},
    )
    assert served(job)


def test_a_changed_configuration_is_worked_out_again(tmp_path, node):
    create(tmp_path, node)
    node.hook_path = "/opt/other/gpunode-hook"
    _, job = create(tmp_path, node)
    assert not served(job)


@pytest.mark.parametrize(
    "change",
    [
        lambda cfg: rewrite(
            f"{cfg.driver_root}/proc/driver/nvidia/version",
            b"NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.163.01  Thu Jan  1 2026\n",
        ),
        lambda cfg: rewrite(f"{cfg.driver_root}{LIBDIR}/libnvidia-ml.so.1", b"\x7fELF new"),
        lambda cfg: rewrite(f"{cfg.driver_root}/etc/ld.so.cache", b"new cache"),
        lambda cfg: write_inventory(cfg, GPUS[:1]),
    ],
    ids=["kernel-driver", "nvml", "ld-cache", "inventory"],
)
def test_the_key_names_the_driver_and_the_inventory(tmp_path, node, change):
    spec = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}
    before = prepared.key(spec, node, str(tmp_path))
    change(node)
    assert prepared.key(spec, node, str(tmp_path)) != before


def test_a_refreshed_inventory_without_the_gpu_is_not_served_stale(tmp_path, node):
    create(tmp_path, node)
    create(tmp_path, node)
    write_inventory(node, GPUS[1:])  # a refresh found GPU 0 gone
    with pytest.raises(RequestError, match="0"):
        create(tmp_path, node)


@pytest.mark.parametrize("how", ["other-minor", "gone", "mode"])
def test_a_changed_device_node_is_worked_out_again(tmp_path, node, how):
    create(tmp_path, node)
    create(tmp_path, node)
    dev = os.path.join(node.dev_root, "dev/nvidia0")
    os.unlink(dev)
    if how == "gone":
        with pytest.raises(EditError, match="no device node /dev/nvidia0"):
            create(tmp_path, node)
        return
    minor, mode = (9, 0o666) if how == "other-minor" else (0, 0o600)
    os.mknod(dev, stat.S_IFCHR | mode, os.makedev(195, minor))
    os.chmod(dev, mode)
    spec, job = create(tmp_path, node)
    assert not served(job)
    nv0 = next(d for d in spec["linux"]["devices"] if d["path"] == "/dev/nvidia0")
    assert (nv0["minor"], nv0["fileMode"]) == (minor, mode)


def test_a_failing_request_is_not_kept(tmp_path, node):
    with pytest.raises(RequestError):
        create(tmp_path, node, env=("NVIDIA_VISIBLE_DEVICES=7",))
    assert not os.path.exists(prepared.cache_path())


@pytest.mark.parametrize(
    "how",
    ["group-writable", "symlink", "garbage", "other-schema", "other-owner", "open-directory"],
)
def test_a_file_that_is_not_the_runtimes_own_is_not_used(tmp_path, node, how):
    create(tmp_path, node)
    path = prepared.cache_path()
    if how in ("other-owner", "open-directory") and os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    if how == "group-writable":
        os.chmod(path, 0o664)
    elif how == "other-owner":  # another user's file with exactly the runtime's entries
        os.chown(path, 65534, 65534)
    elif how == "open-directory":  # a directory others can write: its files anyone's
        os.chmod(os.path.dirname(path), 0o777)
    elif how == "symlink":
        os.rename(path, path + ".real")
        os.symlink(path + ".real", path)
    elif how == "garbage":
        with open(path, "r+b") as fh:
            fh.truncate(20)
    else:
        data = read_json(path)
        data["schema"] = 0
        rewrite(path, json.dumps(data).encode())
    _, job = create(tmp_path, node)
    assert not served(job)
    if how == "open-directory":  # and nothing is written into it either
        assert os.stat(path).st_uid == os.geteuid()
        os.unlink(path)
        create(tmp_path, node)
        assert not os.path.exists(path)


def test_the_file_keeps_the_newest_entries(tmp_path, node, monkeypatch):
    monkeypatch.setattr(prepared, "MAX_ENTRIES", 2)
    for i in range(3):
        create(tmp_path, node, env=(f"NVIDIA_VISIBLE_DEVICES={i}",))
    entries = read_json(prepared.cache_path())["entries"]
    assert len(entries) == 2
    assert not served(create(tmp_path, node, env=("NVIDIA_VISIBLE_DEVICES=0",))[1])
    assert served(create(tmp_path, node, env=("NVIDIA_VISIBLE_DEVICES=2",))[1])


def test_off_when_the_path_is_empty(tmp_path, node, monkeypatch):
    monkeypatch.setenv("GPUNODE_PREPARED_CACHE", "")
    create(tmp_path, node)
    assert not served(create(tmp_path, node)[1])


def test_the_request_reads_no_env_name_the_inputs_leave_out():
    """Every environment name the request's modules (request, requirements) read is one
    specinputs keeps."""
    names = [
        v
        for module in (request, requirements)
        for k, v in vars(module).items()
        if k.startswith("ENV_") and isinstance(v, str)
    ]
    assert "NVIDIA_VISIBLE_DEVICES" in names and "CUDA_VERSION" in names
    for name in names:
        assert name.startswith(specinputs.ENV_PREFIX) or name == specinputs.ENV_CUDA_VERSION
    env = ["PATH=/bin", "CUDA_VERSION=11.0", "NVIDIA_VISIBLE_DEVICES=0", "CUDA_HOME=/x"]
    assert specinputs.request_env(env) == ["CUDA_VERSION=11.0", "NVIDIA_VISIBLE_DEVICES=0"]


def test_dockers_gpus_hook_is_removed_on_both_paths(tmp_path, node):
    """`docker run --gpus` puts NVIDIA's prestart hook in the spec; gpunode does its work."""
    hook = {"path": "/usr/bin/nvidia-container-runtime-hook", "args": ["x", "prestart"]}
    for _ in range(2):
        spec, job = create(tmp_path, node, hooks={"prestart": [hook]})
        assert "hooks" not in spec or not spec["hooks"].get("prestart"), spec.get("hooks")
    assert served(job)


def test_no_key_means_no_lookup_and_no_store(node):
    """key() gives None for inputs JSON cannot write: nothing is looked up or kept."""
    assert prepared.lookup(None, node.dev_root) is None
    prepared.store(None, {})
    assert not os.path.exists(prepared.cache_path())


def test_a_mig_request_is_not_served_after_the_layout_changed(tmp_path, node, monkeypatch):
    """A MIG layout changes without a driver change: the prepared edits of `0:1` are used
    while the driver shows the same instances, and worked out again (the inventory
    rediscovered) once GI 7 is gone and GI 8 is there (now `0:1`)."""
    import shutil

    from gpunode.nvidia.facts import GpuFacts, MigFacts

    from . import mig_node

    mig_node.make_driver_root(Path(node.driver_root))
    mig_node.make_dev_root(Path(node.dev_root))
    write_inventory(node, mig_node.GPUS)
    first, job1 = create(tmp_path, node, env=("NVIDIA_VISIBLE_DEVICES=0:1",))
    again, job2 = create(tmp_path, node, env=("NVIDIA_VISIBLE_DEVICES=0:1",))
    assert not served(job1) and served(job2) and again == first
    ci7 = f"/dev/nvidia-caps/nvidia-cap{mig_node.cap_minor('gpu0/mig/gi7/ci0/access')}"
    assert ci7 in [d["path"] for d in first["linux"]["devices"]]
    assert job2.args.mig_cap == ["gpu0/mig/gi7/access", "gpu0/mig/gi7/ci0/access"]

    caps = Path(node.driver_root) / "proc/driver/nvidia/capabilities/gpu0/mig"
    shutil.rmtree(caps / "gi7")
    (caps / "gi8/ci0").mkdir(parents=True)
    gi8, ci8 = (
        mig_node.cap_minor("gpu0/mig/gi8/access"),
        mig_node.cap_minor("gpu0/mig/gi8/ci0/access"),
    )
    (caps / "gi8/access").write_text(mig_node.access_text(gi8))
    (caps / "gi8/ci0/access").write_text(mig_node.access_text(ci8))
    for minor in (gi8, ci8):
        path = f"{node.dev_root}/dev/nvidia-caps/nvidia-cap{minor}"
        os.mknod(path, stat.S_IFCHR | 0o444, os.makedev(mig_node.CAPS_MAJOR, minor))
    g0 = mig_node.GPUS[0]
    new0 = GpuFacts(
        g0.index, g0.minor, g0.uuid, g0.pci_bus_id, g0.name, g0.brand, g0.compute_capability,
        True, (g0.mig[0], MigFacts(1, "MIG-a8000000-0000-5000-8000-000000000000", 8, 0)),
    )  # fmt: skip
    fresh = NodeFacts(VERSION, "12.2", (new0, *mig_node.GPUS[1:]))
    monkeypatch.setattr(discovery, "nvml_facts", lambda root: fresh)
    monkeypatch.setattr(discovery, "discover_files", lambda *a: discovery.DriverFiles(root=a[1]))
    after, job3 = create(tmp_path, node, env=("NVIDIA_VISIBLE_DEVICES=0:1",))
    assert not served(job3) and "discovery fresh" in job3.summary
    paths = [d["path"] for d in after["linux"]["devices"]]
    assert f"/dev/nvidia-caps/nvidia-cap{ci8}" in paths and ci7 not in paths
    assert job3.args.mig_cap == ["gpu0/mig/gi8/access", "gpu0/mig/gi8/ci0/access"]


def test_docker_gpus_hook_is_part_of_the_key(tmp_path, node):
    """Under accept-envvar-unprivileged = false a spec with Docker's --gpus hook gets its
    GPU; the prepared edits kept for it are never served to the same env without the hook
    (an image's or a pod's NVIDIA_VISIBLE_DEVICES), which gets no GPU."""
    node.accept_envvar_unprivileged = False
    hook = {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook",
                          "args": ["nvidia-container-runtime-hook", "prestart"]}]}  # fmt: skip
    spec, job = create(tmp_path, node, hooks=hook)
    assert not served(job) and "/dev/nvidia0" in json.dumps(spec)
    assert "prestart" not in spec.get("hooks", {})
    _, job = create(tmp_path, node, hooks=hook)
    assert served(job)
    spec, job = create(tmp_path, node)
    assert job is None and "linux" not in spec
