"""Spec edits, the runtime shim's create path and CDI generation, on a fake node: device
nodes made with mknod under a temporary dev root, discovery given directly."""

from __future__ import annotations

import json
import os
import stat

import pytest
import yaml

from gpunode import cdi, config, discover, edits, oci, runtime
from gpunode.discover import Discovery, DriverFiles
from gpunode.nvidia.facts import GpuFacts, NodeFacts

GPUS = tuple(
    GpuFacts(
        index=i,
        minor=i,
        uuid=f"GPU-00000000-0000-4000-8000-00000000000{i}",
        pci_bus_id=f"00000000:{0x10 + i:02X}:00.0",
        name="NVIDIA A100-SXM4-80GB",
        brand="tesla",
        compute_capability="8.0",
    )
    for i in range(3)
)
VERSION = "535.261.03"


@pytest.fixture
def devroot(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    dev = tmp_path / "dev"
    dev.mkdir()
    for name, major, minor in [
        ("nvidiactl", 195, 255),
        ("nvidia-modeset", 195, 254),
        ("nvidia-uvm", 510, 0),
        ("nvidia-uvm-tools", 510, 1),
        ("nvidia0", 195, 0),
        ("nvidia1", 195, 1),
        ("nvidia2", 195, 2),
    ]:
        os.mknod(dev / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    return tmp_path


@pytest.fixture
def disc(tmp_path):
    lib = "/usr/lib/x86_64-linux-gnu"
    files = DriverFiles(
        libraries={
            "utility": [f"{lib}/libnvidia-ml.so.{VERSION}"],
            "compute": [
                f"{lib}/libcuda.so.{VERSION}",
                f"{lib}/libnvidia-ptxjitcompiler.so.{VERSION}",
            ],
            "graphics": [f"{lib}/libnvidia-glcore.so.{VERSION}"],
        },
        binaries={"utility": ["/usr/bin/nvidia-smi"]},
        firmware=[f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"],
        ipc={"utility": ["/run/nvidia-persistenced/socket"]},
        sonames={
            f"{lib}/libnvidia-ml.so.{VERSION}": "libnvidia-ml.so.1",
            f"{lib}/libcuda.so.{VERSION}": "libcuda.so.1",
            f"{lib}/libnvidia-glcore.so.{VERSION}": "libnvidia-glcore.so.1",
        },
    )
    return Discovery(NodeFacts(VERSION, "12.2", GPUS), files, key={})


def test_build_for_compute_utility(disc, devroot):
    e = edits.build(
        disc,
        {"compute", "utility"},
        [GPUS[1]],
        hook_path="/usr/local/bin/gpunode-hook",
        dev_root=str(devroot),
    )
    assert [d.path for d in e.devices] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia1",
    ]
    assert e.devices[1].major == 510
    dests = [m.destination for m in e.mounts]
    assert f"/usr/lib/x86_64-linux-gnu/libcuda.so.{VERSION}" in dests
    assert f"/usr/lib/x86_64-linux-gnu/libnvidia-glcore.so.{VERSION}" not in dests  # graphics
    assert "/usr/bin/nvidia-smi" in dests
    assert all(
        m.options == ("ro", "nosuid", "nodev", "rbind", "rprivate")
        for m in e.mounts
        if "socket" not in m.source
    )
    ipc = next(m for m in e.mounts if m.source.endswith("socket"))
    assert "noexec" in ipc.options and "ro" not in ipc.options
    (hook,) = e.hooks
    assert hook.args[:2] == ("gpunode-hook", "configure")
    assert "libcuda.so.1::/usr/lib/x86_64-linux-gnu/libcuda.so" in hook.args
    assert hook.args[hook.args.index("--gpu") + 1] == "0000:11:00.0"
    assert hook.env == ("PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GPUNODE_HOOK=1")


def test_hook_makes_the_soname_links_of_the_injected_libraries(disc, devroot):
    e = edits.build(disc, {"utility"}, [GPUS[0]], hook_path="/h", dev_root=str(devroot))
    (hook,) = e.hooks
    links = [hook.args[i + 1] for i, a in enumerate(hook.args) if a == "--link"]
    # only the libraries this container gets (utility: NVML), to the multiarch dir
    lib = "/usr/lib/x86_64-linux-gnu"
    assert links == [f"libnvidia-ml.so.{VERSION}::{lib}/libnvidia-ml.so.1"]
    e = edits.build(
        disc, {"compute"}, [], hook_path="/h", dev_root=str(devroot), rootfs="/nonexistent"
    )
    links = [e.hooks[0].args[i + 1] for i, a in enumerate(e.hooks[0].args) if a == "--link"]
    assert f"libcuda.so.{VERSION}::/usr/lib64/libcuda.so.1" in links
    assert "libcuda.so.1::/usr/lib64/libcuda.so" in links


def test_display_adds_modeset_and_graphics(disc, devroot):
    e = edits.build(disc, {"display"}, [], hook_path="/h", dev_root=str(devroot))
    assert "/dev/nvidia-modeset" in [d.path for d in e.devices]
    assert any("glcore" in m.source for m in e.mounts)


def test_missing_gpu_node_is_a_clear_error(disc, devroot):
    os.unlink(devroot / "dev" / "nvidia2")
    with pytest.raises(
        edits.EditError,
        match=r"GPU 2 \(GPU-.*02, 00000000:12:00.0\) has no device node /dev/nvidia2",
    ):
        edits.build(disc, {"utility"}, [GPUS[2]], hook_path="/h", dev_root=str(devroot))


def test_non_debian_image_gets_usr_lib64(disc, devroot, tmp_path):
    rootfs = tmp_path / "rootfs"
    (rootfs / "etc").mkdir(parents=True)
    e = edits.build(
        disc, {"utility"}, [], hook_path="/h", dev_root=str(devroot), rootfs=str(rootfs)
    )
    assert e.mounts[0].destination == f"/usr/lib64/libnvidia-ml.so.{VERSION}"
    (rootfs / "etc" / "debian_version").write_text("12.8\n")
    e = edits.build(
        disc, {"utility"}, [], hook_path="/h", dev_root=str(devroot), rootfs=str(rootfs)
    )
    assert e.mounts[0].destination.startswith("/usr/lib/x86_64-linux-gnu/")


def test_oci_apply_and_docker_gpus_hook_removed(disc, devroot):
    spec = {
        "process": {"env": ["A=1"]},
        "mounts": [{"destination": "/usr/bin/nvidia-smi", "source": "/mine", "type": "bind"}],
        "hooks": {
            "prestart": [
                {
                    "path": "/usr/bin/nvidia-container-runtime-hook",
                    "args": ["nvidia-container-runtime-hook", "prestart"],
                },
                {"path": "/usr/bin/other"},
            ]
        },
        "linux": {"resources": {"devices": [{"allow": False, "access": "rwm"}]}},
    }
    assert oci.remove_nvidia_hooks(spec) == 1
    assert spec["hooks"]["prestart"] == [{"path": "/usr/bin/other"}]
    e = edits.build(disc, {"compute", "utility"}, [GPUS[0]], hook_path="/h", dev_root=str(devroot))
    oci.apply(spec, e)
    assert [d["path"] for d in spec["linux"]["devices"]] == [d.path for d in e.devices]
    allow = spec["linux"]["resources"]["devices"]
    assert allow[0] == {"allow": False, "access": "rwm"}  # the engine's deny-all stays first
    assert {"allow": True, "type": "c", "major": 195, "minor": 0, "access": "rwm"} in allow
    smi = [m for m in spec["mounts"] if m["destination"] == "/usr/bin/nvidia-smi"]
    assert smi == [{"destination": "/usr/bin/nvidia-smi", "source": "/mine", "type": "bind"}]
    (hook,) = spec["hooks"]["createContainer"]
    assert hook["env"] == ["PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GPUNODE_HOOK=1"]


def test_write_atomic_leaves_no_temp(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{}")
    os.chmod(path, 0o640)
    oci.write_atomic(str(path), {"a": 1})
    assert json.loads(path.read_text()) == {"a": 1}
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def _bundle(tmp_path, env, extra=None):
    bundle = tmp_path / "bundle"
    (bundle / "rootfs" / "etc").mkdir(parents=True, exist_ok=True)
    (bundle / "rootfs" / "etc" / "debian_version").write_text("12\n")
    spec = {
        "ociVersion": "1.0.2",
        "process": {"env": env, "args": ["true"]},
        "root": {"path": "rootfs"},
        "mounts": [],
        **(extra or {}),
    }
    raw = json.dumps(spec, indent=3).encode()
    (bundle / "config.json").write_bytes(raw)
    return bundle, raw


def test_shim_leaves_non_gpu_spec_untouched_even_without_driver(tmp_path, monkeypatch):
    def broken(*a, **k):
        raise AssertionError("discovery must not run for a non-GPU container")

    monkeypatch.setattr(discover, "load", broken)
    cfg = config.RuntimeConfig(cache_file=str(tmp_path / "nope.json"))
    for env in ([], ["NVIDIA_VISIBLE_DEVICES=void"], ["NVIDIA_VISIBLE_DEVICES="]):
        bundle, raw = _bundle(tmp_path, ["PATH=/bin", *env])
        assert runtime.modify_bundle(str(bundle), cfg) is None
        assert (bundle / "config.json").read_bytes() == raw


def test_shim_edits_gpu_spec(tmp_path, monkeypatch, disc, devroot):
    monkeypatch.setattr(discover, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(dev_root=str(devroot), hook_path="/usr/local/bin/gpunode-hook")
    bundle, _ = _bundle(
        tmp_path, ["NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-4000-8000-000000000002"]
    )
    summary = runtime.modify_bundle(str(bundle), cfg)
    assert "GPUs [2]" in summary
    spec = json.loads((bundle / "config.json").read_text())
    assert [d["path"] for d in spec["linux"]["devices"]][-1] == "/dev/nvidia2"
    assert spec["hooks"]["createContainer"][0]["path"] == "/usr/local/bin/gpunode-hook"


def test_shim_unknown_device_error_lists_gpus(tmp_path, monkeypatch, disc, devroot):
    monkeypatch.setattr(discover, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(dev_root=str(devroot))
    bundle, raw = _bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=9"])
    with pytest.raises(ValueError, match="unknown device '9'") as err:
        runtime.modify_bundle(str(bundle), cfg)
    assert GPUS[0].uuid in str(err.value) and "\n" not in str(err.value)
    assert (bundle / "config.json").read_bytes() == raw


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (
            [
                "r",
                "--root",
                "/run/runc",
                "--log",
                "/l",
                "--log-format",
                "json",
                "create",
                "--bundle",
                "/b",
                "--pid-file",
                "/p",
                "id",
            ],
            (True, "/b", "/l", "json"),
        ),
        (["r", "create", "-b=create", "x"], (True, "create", None, "text")),
        (["r", "start", "create"], (False, None, None, "text")),
        (["r", "--log=create", "state", "--bundle", "create"], (False, "create", "create", "text")),
        (["r", "create", "--bundle", "/a", "--bundle=/b", "id"], (True, "/b", None, "text")),
        (["r", "run", "--bundle", "/b", "id"], (False, "/b", None, "text")),
    ],
)
def test_runtime_argument_parsing(argv, expect):
    assert runtime.parse_args(argv) == expect


def test_cdi_spec(disc, devroot):
    spec = cdi.generate(disc, hook_path="/usr/local/bin/gpunode-hook", dev_root=str(devroot))
    assert spec["kind"] == "nvidia.com/gpu"
    names = [d["name"] for d in spec["devices"]]
    assert names == ["0", GPUS[0].uuid, "1", GPUS[1].uuid, "2", GPUS[2].uuid, "all"]
    one = spec["devices"][2]["containerEdits"]["deviceNodes"]
    assert [n["path"] for n in one] == ["/dev/nvidia1"]
    # with a dev root other than / the host path differs, which needs CDI 0.5.0
    assert one[0]["hostPath"] == f"{devroot}/dev/nvidia1"
    assert spec["cdiVersion"] == "0.5.0"
    edits_ = spec["containerEdits"]
    assert "NVIDIA_VISIBLE_DEVICES=void" in edits_["env"]
    assert [n["path"] for n in edits_["deviceNodes"]] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
        "/dev/nvidia-modeset",
    ]
    (hook,) = edits_["hooks"]
    assert hook["hookName"] == "createContainer" and hook["env"]
    assert "--proc-driver" in hook["args"] and "--gpu" not in hook["args"]
    assert yaml.safe_load(cdi.dump(spec, "yaml")) == spec


def test_cdi_minimum_version():
    def spec(name, node):
        return {
            "devices": [{"name": name, "containerEdits": {"deviceNodes": [node]}}],
            "containerEdits": {"deviceNodes": [{"path": "/dev/nvidiactl"}]},
        }

    assert cdi.minimum_version(spec("all", {"path": "/dev/nvidia0"})) == "0.3.0"
    # podman 5 rejects a 0.3.0 spec with a device named "0": digits need 0.5.0
    assert cdi.minimum_version(spec("0", {"path": "/dev/nvidia0"})) == "0.5.0"
    assert cdi.minimum_version(spec("all", {"path": "/dev/nvidia0", "hostPath": "/x"})) == "0.5.0"


def test_cdi_write_is_atomic_and_idempotent(tmp_path):
    spec = {"cdiVersion": "0.3.0", "kind": "nvidia.com/gpu", "devices": [], "containerEdits": {}}
    out = tmp_path / "cdi" / "nvidia.yaml"
    assert cdi.write(spec, str(out)) is True
    assert cdi.write(spec, str(out)) is False
    assert sorted(p.name for p in out.parent.iterdir()) == ["nvidia.yaml"]


def test_discovery_cache_roundtrip_and_invalidation(tmp_path, monkeypatch, disc):
    calls = []
    keys = iter([{"k": 1}, {"k": 1}, {"k": 2}, {"k": 2}])
    monkeypatch.setattr(discover, "cache_key", lambda root="/": next(keys))

    def fresh(root="/", key=None):
        calls.append(1)
        return Discovery(disc.node, disc.files, key={"k": len(calls)})

    monkeypatch.setattr(discover, "discover", fresh)
    cache = str(tmp_path / "c" / "inventory.json")
    first = discover.load(cache)
    assert not first.from_cache and len(calls) == 1
    second = discover.load(cache)
    assert second.from_cache and second.node == disc.node and len(calls) == 1
    third = discover.load(cache)  # the key changed: the driver changed
    assert not third.from_cache and len(calls) == 2


@pytest.mark.parametrize(
    ("spec", "config_exists", "expect"),
    [
        ({"process": {"env": ["PATH=/bin", "HOME=/root"]}}, False, True),
        ({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}, False, False),
        ({"process": {"env": ["CUDA_VERSION=12.2"]}}, False, False),
        ({"annotations": {"cdi.k8s.io/gpu": "nvidia.com/gpu=0"}}, False, False),
        ({"annotations": {"org.opencontainers.image.title": "x"}}, False, True),
        ({"annotations": {"org.opencontainers.image.title": "x"}}, True, False),
        ({"mounts": [{"destination": "/var/run/nvidia-container-devices/0"}]}, False, False),
        (
            {"hooks": {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook"}]}},
            False,
            False,
        ),
    ],
)
def test_quick_non_gpu_check_is_conservative(spec, config_exists, expect):
    assert runtime.surely_not_gpu(json.dumps(spec).encode(), config_exists) is expect
    args = {"process": {"args": ["echo", "NVIDIA_VISIBLE_DEVICES"]}}
    assert runtime.surely_not_gpu(json.dumps(args).encode(), False) is False  # conservative


# --------------------------------------------------------------------- corrupt cache (item 6)


def _corrupt(edit):
    def apply(path):
        data = json.loads(path.read_text())
        edit(data)
        path.write_text(json.dumps(data))

    return apply


def _gpu0(data):
    return data["node"]["gpus"][0]


CORRUPTIONS = {
    "truncated-json": lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),
    "not-utf8": lambda p: p.write_bytes(b'{"schema": 4, "key": {"k": 1}, \xff\xfe}'),
    "deeply-nested": lambda p: p.write_text("[" * 100_000),
    "a-list": lambda p: p.write_text("[]"),
    "old-schema": _corrupt(lambda d: d.update(schema=3)),
    "schema-as-string": _corrupt(lambda d: d.update(schema=str(discover.CACHE_SCHEMA))),
    "node-a-list": _corrupt(lambda d: d.update(node=[])),
    "gpus-a-string": _corrupt(lambda d: d["node"].update(gpus="0,1")),
    "gpu-index-a-string": _corrupt(lambda d: _gpu0(d).update(index="0")),
    "gpu-minor-a-bool": _corrupt(lambda d: _gpu0(d).update(minor=True)),
    "gpu-uuid-null": _corrupt(lambda d: _gpu0(d).update(uuid=None)),
    "gpu-bad-bus-id": _corrupt(lambda d: _gpu0(d).update(pci_bus_id="zz:00.0")),
    "gpu-extra-field": _corrupt(lambda d: _gpu0(d).update(bogus=1)),
    "gpu-missing-uuid": _corrupt(lambda d: _gpu0(d).pop("uuid")),
    "driver-version-a-number": _corrupt(lambda d: d["node"].update(driver_version=535)),
    "missing-cuda-version": _corrupt(lambda d: d["node"].pop("cuda_version")),
    "missing-files": _corrupt(lambda d: d.pop("files")),
    "files-missing-ipc": _corrupt(lambda d: d["files"].pop("ipc")),
    "files-extra-field": _corrupt(lambda d: d["files"].update(extra=[])),
    "libraries-a-list": _corrupt(lambda d: d["files"].update(libraries=["/x.so"])),
    "library-list-a-string": _corrupt(lambda d: d["files"]["libraries"].update(utility="/x")),
    "firmware-an-object": _corrupt(lambda d: d["files"].update(firmware={})),
    "binary-a-number": _corrupt(lambda d: d["files"]["binaries"].update(utility=[1])),
    "root-null": _corrupt(lambda d: d["files"].update(root=None)),
    "soname-a-list": _corrupt(lambda d: d["files"].update(sonames={"/x.so.1": ["x.so"]})),
}


@pytest.mark.parametrize("corruption", sorted(CORRUPTIONS))
def test_corrupt_cache_with_matching_key_is_a_miss_and_rewritten(
    tmp_path, monkeypatch, disc, devroot, corruption
):
    """Any cache that cannot be decoded is rediscovered and rewritten; never an error."""
    calls = []
    monkeypatch.setattr(discover, "cache_key", lambda root="/": {"k": 1})

    def fresh(root="/", key=None):
        calls.append(1)
        return Discovery(disc.node, disc.files, key=key)

    monkeypatch.setattr(discover, "discover", fresh)
    cache = tmp_path / "inventory.json"
    assert not discover.load(str(cache)).from_cache and len(calls) == 1
    CORRUPTIONS[corruption](cache)
    # a GPU container starts normally on the corrupt cache ...
    cfg = config.RuntimeConfig(dev_root=str(devroot), cache_file=str(cache))
    bundle, _ = _bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=1"])
    assert "GPUs [1]" in runtime.modify_bundle(str(bundle), cfg)
    assert len(calls) == 2  # ... by rediscovering
    again = discover.load(str(cache))  # ... and the cache was rewritten
    assert again.from_cache and again.node == disc.node and again.files == disc.files
    assert len(calls) == 2


# ------------------------------------------------------------ driver root (item 4)


@pytest.fixture
def driver_tree(tmp_path):
    """A containerised driver's files under <tmp>/driver, laid out as the driver sees them,
    with an absolute symlink that only resolves correctly inside the driver root."""
    root = tmp_path / "driver"
    lib = root / "usr/lib/x86_64-linux-gnu"
    lib.mkdir(parents=True)
    for name in ("libnvidia-ml", "libcuda"):
        (lib / f"{name}.so.{VERSION}").write_bytes(b"\x7fELF")
    (lib / "libnvidia-ml.so.1").symlink_to(f"/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{VERSION}")
    (lib / "libcuda.so.1").symlink_to(f"libcuda.so.{VERSION}")
    (root / "usr/bin").mkdir(parents=True)
    (root / "usr/bin/nvidia-smi").write_text("#!/bin/sh\n")
    (root / "usr/bin/nvidia-smi").chmod(0o755)
    fw = root / f"lib/firmware/nvidia/{VERSION}"
    fw.mkdir(parents=True)
    (fw / "gsp_ga10x.bin").write_bytes(b"fw")
    (root / "run/nvidia-persistenced").mkdir(parents=True)
    (root / "run/nvidia-persistenced/socket").write_bytes(b"")
    return root


def _ldcache(root="/"):
    return [f"/usr/lib/x86_64-linux-gnu/{n}.so.1" for n in ("libnvidia-ml", "libcuda")]


def test_discovery_under_a_driver_root(driver_tree, monkeypatch):
    monkeypatch.setattr(discover, "ldcache_libraries", _ldcache)
    root = str(driver_tree)
    files = discover.discover_files(VERSION, root)
    lib = f"{root}/usr/lib/x86_64-linux-gnu"
    assert files.root == root
    # the absolute libnvidia-ml.so.1 link was followed inside the driver root
    assert files.libraries == {
        "utility": [f"{lib}/libnvidia-ml.so.{VERSION}"],
        "compute": [f"{lib}/libcuda.so.{VERSION}"],
    }
    assert files.binaries == {"utility": [f"{root}/usr/bin/nvidia-smi"]}
    assert files.firmware == [f"{root}/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"]
    assert files.ipc == {"utility": [f"{root}/run/nvidia-persistenced/socket"]}
    assert discover.nvml_library(root) == f"{lib}/libnvidia-ml.so.{VERSION}"
    assert discover.cache_key(root)["driver_root"] == root


def test_nvml_is_loaded_from_the_driver_root(driver_tree, monkeypatch):
    import ctypes

    pynvml = pytest.importorskip("pynvml")
    loaded = []

    def fake_cdll(path, *a, **k):
        loaded.append(path)
        raise OSError("not a real library")

    monkeypatch.setattr(ctypes, "CDLL", fake_cdll)
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    lib = f"{driver_tree}/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{VERSION}"
    with pytest.raises(discover.DiscoveryError, match=f"cannot load {lib}: not a real library"):
        discover.nvml_facts(str(driver_tree))
    assert loaded == [lib]
    with pytest.raises(discover.DiscoveryError, match=r"no libnvidia-ml\.so\.1 under the driver"):
        discover.nvml_facts(str(driver_tree / "empty"))


def test_runtime_with_a_driver_root(tmp_path, driver_tree, devroot, monkeypatch):
    """Sources under the driver root, container paths without it, and the hook told the
    driver root and the configured ldconfig."""
    monkeypatch.setattr(discover, "ldcache_libraries", _ldcache)
    roots = []
    monkeypatch.setattr(
        discover,
        "nvml_facts",
        lambda root="/": roots.append(root) or NodeFacts(VERSION, "12.2", GPUS),
    )
    root = str(driver_tree)
    cfg = config.RuntimeConfig(
        driver_root=root,
        dev_root=str(devroot),
        cache_file=str(tmp_path / "cache.json"),
        ldconfig="/sbin/ldconfig.real",
    )
    bundle, _ = _bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=all"])
    runtime.modify_bundle(str(bundle), cfg)
    assert roots == [root]
    spec = json.loads((bundle / "config.json").read_text())
    mounts = {m["destination"]: m["source"] for m in spec["mounts"] if m["type"] == "bind"}
    lib = "/usr/lib/x86_64-linux-gnu"
    fw = f"/lib/firmware/nvidia/{VERSION}/gsp_ga10x.bin"
    sock = "/run/nvidia-persistenced/socket"
    assert mounts == {
        f"{lib}/libnvidia-ml.so.{VERSION}": f"{root}{lib}/libnvidia-ml.so.{VERSION}",
        f"{lib}/libcuda.so.{VERSION}": f"{root}{lib}/libcuda.so.{VERSION}",
        "/usr/bin/nvidia-smi": f"{root}/usr/bin/nvidia-smi",
        fw: f"{root}{fw}",
        sock: f"{root}{sock}",
    }
    # device nodes still come from the dev root
    assert spec["linux"]["devices"][-1]["path"] == "/dev/nvidia1"
    args = spec["hooks"]["createContainer"][0]["args"]
    assert args[args.index("--driver-root") + 1] == root
    assert args[args.index("--ldconfig-path") + 1] == "/sbin/ldconfig.real"


def test_hook_args_without_driver_root_or_ldconfig(disc, devroot):
    e = edits.build(disc, {"compute", "utility"}, [GPUS[0]], hook_path="/h", dev_root=str(devroot))
    (hook,) = e.hooks
    assert "--driver-root" not in hook.args and "--ldconfig-path" not in hook.args
    # firmware and sockets keep their own paths with the default root
    ipc = next(m for m in e.mounts if m.source.endswith("socket"))
    assert ipc.destination == ipc.source == "/run/nvidia-persistenced/socket"


# ------------------------------------------------------- explicit GPU selection (item 8)


@pytest.mark.parametrize("selected", [[], [1], [0, 2]])
def test_runtime_hook_gets_the_complete_selection(disc, devroot, selected):
    e = edits.build(
        disc, {"utility"}, [GPUS[i] for i in selected], hook_path="/h", dev_root=str(devroot)
    )
    args = list(e.hooks[0].args)
    assert "--gpus-selected" in args and "--proc-driver" in args
    gpus = [args[i + 1] for i, a in enumerate(args) if a == "--gpu"]
    assert gpus == [GPUS[i].procfs_bus_id for i in selected]


def test_cdi_hook_leaves_the_selection_to_the_device_nodes(disc, devroot):
    spec = cdi.generate(disc, hook_path="/h", dev_root=str(devroot))
    args = spec["containerEdits"]["hooks"][0]["args"]
    assert "--gpus-selected" not in args and "--gpu" not in args and "--proc-driver" in args


# ------------------------------------------------------------- jit-CDI names (item 3)


@pytest.mark.parametrize(
    ("value", "want"),
    [
        ("runtime.nvidia.com/gpu=1", ["/dev/nvidia1"]),
        ("runtime.nvidia.com/gpu=all", ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2"]),
        (f"runtime.nvidia.com/gpu={GPUS[2].uuid}", ["/dev/nvidia2"]),
    ],
)
def test_shim_serves_jit_cdi_names(tmp_path, monkeypatch, disc, devroot, value, want):
    monkeypatch.setattr(discover, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(dev_root=str(devroot))
    for env, extra in (
        ([f"NVIDIA_VISIBLE_DEVICES={value}"], None),
        ([], {"annotations": {"cdi.k8s.io/gpu": value}}),
    ):
        bundle, _ = _bundle(tmp_path, env, extra)
        assert runtime.modify_bundle(str(bundle), cfg) is not None
        spec = json.loads((bundle / "config.json").read_text())
        gpus = [d["path"] for d in spec["linux"]["devices"] if d["path"][11:].isdigit()]
        assert gpus == want


@pytest.mark.parametrize("value", ["nvidia.com/foo=1", "runtime.nvidia.com/foo=0"])
def test_shim_refuses_unknown_nvidia_cdi_names(tmp_path, monkeypatch, disc, devroot, value):
    monkeypatch.setattr(discover, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(dev_root=str(devroot))
    bundle, raw = _bundle(tmp_path, [f"NVIDIA_VISIBLE_DEVICES={value}"])
    with pytest.raises(ValueError, match=f"unknown CDI device '{value}' requested"):
        runtime.modify_bundle(str(bundle), cfg)
    assert (bundle / "config.json").read_bytes() == raw
