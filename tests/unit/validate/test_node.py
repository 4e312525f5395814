"""validate's node checks: nouveau, /dev/char links, drift of the runtime's cache and spec."""

from __future__ import annotations

import json

from gpunode.runtime.config import RuntimeConfig
from gpunode.validate import node

from .fakes import inventory


def test_nouveau_loaded_fails_as_the_preflight_sees_it(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/modules").write_text("nvidia_uvm 1 0 - Live 0x0\nnvidia 2 1 nvidia_uvm, Live 0x0\n")
    assert node.nouveau(str(tmp_path))[1] == "pass"
    (tmp_path / "proc/modules").write_text("nouveau 2 0 - Live 0x0\nnvidia_uvm 1 0 - Live 0x0\n")
    cid, status, detail = node.nouveau(str(tmp_path))
    assert (cid, status) == ("node.nouveau", "fail") and "blacklist" in detail
    (tmp_path / "proc/modules").unlink()  # no /proc/modules (some sandboxes): /sys/module
    assert node.nouveau(str(tmp_path))[1] == "pass"
    (tmp_path / "sys/module/nouveau").mkdir(parents=True)
    assert node.nouveau(str(tmp_path))[1] == "fail"


def test_dev_char_warns_naming_a_missing_link(tmp_path, monkeypatch):
    nodes = [(f"{tmp_path}/nvidia0", 195, 0), (f"{tmp_path}/nvidia1", 195, 1)]
    monkeypatch.setattr(node.devchar, "driver_nodes", lambda dev: nodes)
    monkeypatch.setattr(node.devchar, "missing", lambda dev: [(f"{dev}/char/195:1", nodes[1][0])])
    _cid, status, detail = node.dev_char(str(tmp_path))
    assert status == "warn" and detail.startswith(
        f"{tmp_path}/char/195:1 -> {tmp_path}/nvidia1 missing"
    )
    assert "gpunode runtime refresh" in detail
    monkeypatch.setattr(node.devchar, "missing", lambda dev: [])
    assert node.dev_char(str(tmp_path))[1] == "pass"
    monkeypatch.setattr(node.devchar, "driver_nodes", lambda dev: [])
    assert node.dev_char(str(tmp_path))[1] == "skip"


def _cache(tmp_path, driver, uuids):
    from gpunode.runtime.discovery import CACHE_SCHEMA

    path = tmp_path / "cache" / "inventory.json"
    path.parent.mkdir(mode=0o755, parents=True)
    gpus = [{"uuid": u} for u in uuids]
    path.write_text(
        json.dumps({"schema": CACHE_SCHEMA, "node": {"driver_version": driver, "gpus": gpus}})
    )
    path.chmod(0o644)
    return RuntimeConfig(cache_file=str(path))


def test_the_cache_must_describe_the_driver_and_gpus_the_node_has(tmp_path):
    inv = inventory()
    uuids = [g.uuid for g in inv.gpus]
    assert node.drift_cache(_cache(tmp_path / "a", "535.261.03", uuids), inv)[1] == "pass"
    _cid, status, detail = node.drift_cache(_cache(tmp_path / "b", "535.247.01", uuids), inv)
    assert status == "fail" and "describes driver 535.247.01, the node runs 535.261.03" in detail
    status, detail = node.drift_cache(_cache(tmp_path / "c", "535.261.03", uuids[:3]), inv)[1:]
    assert status == "fail" and uuids[3] in detail
    missing = RuntimeConfig(cache_file=str(tmp_path / "none.json"))
    assert node.drift_cache(missing, inv)[1] == "skip"


def test_a_stale_cdi_spec_fails_naming_the_first_difference(tmp_path, monkeypatch):
    from gpunode.runtime import plan

    cfg = RuntimeConfig(cdi_spec_dirs=[str(tmp_path)])
    monkeypatch.setattr(
        plan, "cdi_spec", lambda cfg, store: {"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu"}
    )
    assert node.drift_cdi(cfg)[1] == "skip"  # no spec installed: CDI not in use
    from gpunode.runtime import cdi

    path = cdi.install_path(cfg.cdi_spec_dirs)
    cdi.write({"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu"}, path)
    assert node.drift_cdi(cfg)[1] == "pass"
    cdi.write({"cdiVersion": "0.3.0", "kind": "nvidia.com/gpu"}, path)
    status, detail = node.drift_cdi(cfg)[1:]
    assert status == "fail" and "0.3.0" in detail and "gpunode cdi generate --install" in detail


DROP_IN = """
version = 2
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpunode]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpunode.options]
BinaryName = "/usr/local/bin/gpunode-container-runtime"
"""


def _fake_containerd(tmp_path, monkeypatch, dump: str, rc: int = 0):
    exe = tmp_path / "bin" / "containerd"
    exe.parent.mkdir(exist_ok=True)
    (tmp_path / "dump.toml").write_text(dump)
    exe.write_text(f"#!/bin/sh\ncat {tmp_path}/dump.toml\nexit {rc}\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{exe.parent}:/usr/bin:/bin")


# containerd 2.x: the drop-in configure writes from a version 3 dump, and the dump itself,
# which keeps io.containerd.grpc.v1.cri (gRPC streaming settings only) beside the runtimes
DROP_IN_V3 = """
version = 3
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gpunode]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gpunode.options]
BinaryName = "/usr/local/bin/gpunode-container-runtime"
"""
DUMP_V3 = """
version = 3
[plugins."io.containerd.grpc.v1.cri"]
disable_tcp_service = true
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
runtime_type = "io.containerd.runc.v2"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gpunode.options]
BinaryName = "/usr/local/bin/gpunode-container-runtime"
"""


def test_containerd_2_handlers_are_read_from_the_runtime_plugin(tmp_path, monkeypatch):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    config = str(tmp_path / "config.toml")
    (conf / "99-gpunode.toml").write_text(DROP_IN_V3)
    _fake_containerd(tmp_path, monkeypatch, DUMP_V3)
    assert node.drift_containerd(config, str(conf))[1:] == (
        "pass",
        "containerd's merged config has gpunode running gpunode's runtime",
    )
    _fake_containerd(
        tmp_path,
        monkeypatch,
        DUMP_V3.split('[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.gpunode')[0],
    )
    status, detail = node.drift_containerd(config, str(conf))[1:]
    assert status == "fail" and "no handler 'gpunode'" in detail, detail


def test_containerd_must_still_run_gpunodes_handlers(tmp_path, monkeypatch):
    conf = tmp_path / "conf.d"
    conf.mkdir()
    config = str(tmp_path / "config.toml")
    assert node.drift_containerd(config, str(conf))[1] == "skip"  # not set up for gpunode
    (conf / "99-gpunode.toml").write_text(DROP_IN)
    _fake_containerd(tmp_path, monkeypatch, DROP_IN)
    assert node.drift_containerd(config, str(conf))[1:] == (
        "pass",
        "containerd's merged config has gpunode running gpunode's runtime",
    )
    # another tool rewrote config.toml without the imports: the dump has runc only
    _fake_containerd(
        tmp_path,
        monkeypatch,
        DROP_IN.split('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.gpunode]')[0],
    )
    status, detail = node.drift_containerd(config, str(conf))[1:]
    assert status == "fail" and "no handler 'gpunode'" in detail and "still imported" in detail
    _fake_containerd(
        tmp_path,
        monkeypatch,
        DROP_IN.replace(
            "/usr/local/bin/gpunode-container-runtime", "/usr/bin/nvidia-container-runtime"
        ),
    )
    status, detail = node.drift_containerd(config, str(conf))[1:]
    assert status == "fail" and "runs /usr/bin/nvidia-container-runtime" in detail
    _fake_containerd(tmp_path, monkeypatch, "", rc=1)
    assert node.drift_containerd(config, str(conf))[1] == "fail"
