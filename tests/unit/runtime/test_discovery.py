"""Discovery: the inventory cache (hits, misses, corrupt files), a containerised driver's
root, NVML loaded from it, SONAMEs recorded for the hook."""

from __future__ import annotations

import json
import os

import pytest

from gpunode.runtime import bundle as spec_bundle
from gpunode.runtime import config, discovery
from gpunode.runtime.discovery import Discovery

from .fake_node import VERSION, ldcache_of_driver_tree, make_bundle


def test_discovery_cache_roundtrip_and_invalidation(tmp_path, monkeypatch, disc):
    calls = []
    keys = iter([{"k": 1}, {"k": 1}, {"k": 2}, {"k": 2}])
    monkeypatch.setattr(discovery, "cache_key", lambda root="/": next(keys))

    def fresh(root="/", key=None):
        calls.append(1)
        return Discovery(disc.node, disc.files, key={"k": len(calls)})

    monkeypatch.setattr(discovery, "discover", fresh)
    cache = str(tmp_path / "c" / "inventory.json")
    first = discovery.load(cache)
    assert not first.from_cache and len(calls) == 1
    second = discovery.load(cache)
    assert second.from_cache and second.node == disc.node and len(calls) == 1
    third = discovery.load(cache)  # the key changed: the driver changed
    assert not third.from_cache and len(calls) == 2


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
    "schema-as-string": _corrupt(lambda d: d.update(schema=str(discovery.CACHE_SCHEMA))),
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
    monkeypatch.setattr(discovery, "cache_key", lambda root="/": {"k": 1})

    def fresh(root="/", key=None):
        calls.append(1)
        return Discovery(disc.node, disc.files, key=key)

    monkeypatch.setattr(discovery, "discover", fresh)
    cache = tmp_path / "inventory.json"
    assert not discovery.load(str(cache)).from_cache and len(calls) == 1
    CORRUPTIONS[corruption](cache)
    # a GPU container starts normally on the corrupt cache ...
    cfg = config.RuntimeConfig(dev_root=str(devroot), cache_file=str(cache))
    bundle, _ = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=1"])
    assert "GPUs [1]" in spec_bundle.modify_bundle(str(bundle), cfg).summary
    assert len(calls) == 2  # ... by rediscovering
    again = discovery.load(str(cache))  # ... and the cache was rewritten
    assert again.from_cache and again.node == disc.node and again.files == disc.files
    assert len(calls) == 2


# ------------------------------------------------------------ driver root (item 4)


def test_discovery_under_a_driver_root(driver_tree, monkeypatch):
    monkeypatch.setattr(discovery, "ldcache_libraries", ldcache_of_driver_tree)
    root = str(driver_tree)
    files = discovery.discover_files(VERSION, root)
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
    assert discovery.nvml_library(root) == f"{lib}/libnvidia-ml.so.{VERSION}"
    assert discovery.cache_key(root)["driver_root"] == root


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
    with pytest.raises(discovery.DiscoveryError, match=f"cannot load {lib}: not a real library"):
        discovery.nvml_facts(str(driver_tree))
    assert loaded == [lib]
    with pytest.raises(discovery.DiscoveryError, match=r"no libnvidia-ml\.so\.1 under the driver"):
        discovery.nvml_facts(str(driver_tree / "empty"))


# ------------------------------------------------------------------------- SONAMEs


def test_library_sonames_only_where_the_name_differs(tmp_path, shared_lib):
    versioned = shared_lib(f"libcuda.so.{VERSION}", "-Wl,-soname,libcuda.so.1")
    same = shared_lib("libsame.so.1", "-Wl,-soname,libsame.so.1")
    none = shared_lib(f"libnvidia-cfg.so.{VERSION}")
    missing = tmp_path / "gone.so.1"
    got = discovery.library_sonames([str(versioned), str(same), str(none), str(missing)])
    assert got == {str(versioned): "libcuda.so.1"}


# ------------------------------------------- a cache nobody else could have written (17.3)


def _planted(path, disc):
    """The cache as someone else would plant it: valid, matching key, a host path of
    their choosing as a library (the review mounted the containerd socket this way)."""
    data = Discovery(disc.node, disc.files, key={"k": 1}).to_dict()
    data["files"]["libraries"]["utility"] = ["/run/containerd/containerd.sock"]
    path.write_text(json.dumps(data))


@pytest.mark.parametrize("how", ["other-owner", "group-writable", "symlink", "open-directory"])
def test_a_cache_nobody_else_could_write_is_the_only_one_read(tmp_path, monkeypatch, disc, how):
    if how in ("other-owner", "open-directory") and os.geteuid() != 0:
        pytest.skip("needs root to give the file to another user")
    monkeypatch.setattr(discovery, "cache_key", lambda root="/": {"k": 1})
    monkeypatch.setattr(
        discovery, "discover", lambda root="/", key=None: Discovery(disc.node, disc.files, key)
    )
    where = tmp_path / "cache"
    where.mkdir(mode=0o755)
    cache = where / "inventory.json"
    target = tmp_path / "planted.json"
    _planted(target if how == "symlink" else cache, disc)
    if how == "other-owner":
        os.chown(cache, 65534, 65534)
    elif how == "group-writable":
        os.chmod(cache, 0o664)
    elif how == "symlink":
        cache.symlink_to(target)
    else:
        os.chmod(where, 0o777)
    size = os.stat(cache).st_size
    got = discovery.load(str(cache))
    assert not got.from_cache
    assert "/run/containerd/containerd.sock" not in got.files.libraries.get("utility", [])
    assert got.files == disc.files
    if how == "open-directory":  # nothing written where others could replace it
        assert os.listdir(where) == ["inventory.json"] and cache.stat().st_size == size
    else:  # replaced by the runtime's own file, which the next start reads
        assert not cache.is_symlink() and cache.stat().st_uid == os.geteuid()
        again = discovery.load(str(cache))
        assert again.from_cache and again.files == disc.files


def test_the_cache_directory_is_created_0755_whatever_the_umask(tmp_path, monkeypatch, disc):
    monkeypatch.setattr(discovery, "cache_key", lambda root="/": {"k": 1})
    monkeypatch.setattr(
        discovery, "discover", lambda root="/", key=None: Discovery(disc.node, disc.files, key)
    )
    cache = tmp_path / "var" / "cache" / "gpunode" / "inventory.json"
    old = os.umask(0)
    try:
        discovery.load(str(cache))
    finally:
        os.umask(old)
    for d in (cache.parent, cache.parent.parent, cache.parent.parent.parent):
        assert d.stat().st_mode & 0o777 == 0o755, d
    assert cache.stat().st_mode & 0o777 == 0o644
    assert discovery.load(str(cache)).from_cache


def test_no_cache_is_written_into_a_directory_others_can_write(tmp_path, monkeypatch, disc):
    monkeypatch.setattr(discovery, "cache_key", lambda root="/": {"k": 1})
    monkeypatch.setattr(
        discovery, "discover", lambda root="/", key=None: Discovery(disc.node, disc.files, key)
    )
    where = tmp_path / "open"
    where.mkdir()
    os.chmod(where, 0o777)
    got = discovery.load(str(where / "inventory.json"))
    assert got.files == disc.files and os.listdir(where) == []
