"""The pipeline written once: the shim and `gpunode explain` get the same plan, and a GPU
request on a node without a usable driver is the same one-line error for both."""

from __future__ import annotations

import json

import pytest

from gpunode.runtime import config, discovery, edits, oci, plan, specinputs
from gpunode.runtime.request import parse_request

from .fake_node import GPUS, make_bundle


def test_explain_and_the_shim_get_the_same_edits(tmp_path, monkeypatch, disc, devroot):
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(dev_root=str(devroot))
    env = ["NVIDIA_VISIBLE_DEVICES=1,2", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    bundle, raw = make_bundle(tmp_path, env)
    spec = json.loads(raw)
    from_spec = plan.make(
        plan.request_from_spec(spec, cfg), cfg, specinputs.rootfs_of(spec, bundle)
    )
    from_args = plan.make(parse_request(env, cfg=cfg), cfg, str(bundle / "rootfs"))
    assert from_spec == from_args
    assert from_spec.selected == (GPUS[1], GPUS[2])
    oci.apply(spec, from_spec.edits)
    assert [d["path"] for d in spec["linux"]["devices"]][-2:] == ["/dev/nvidia1", "/dev/nvidia2"]


def test_no_gpu_request_needs_no_driver(monkeypatch):
    def broken(*a, **k):
        raise AssertionError("discovery must not run for a non-GPU container")

    monkeypatch.setattr(discovery, "load", broken)
    cfg = config.RuntimeConfig()
    p = plan.make(parse_request(["PATH=/bin"], cfg=cfg), cfg)
    assert (p.discovery, p.selected, p.edits) == (None, (), None)


def test_an_unusable_driver_is_one_line(monkeypatch):
    def broken(*a, **k):
        raise discovery.DiscoveryError("NVML cannot be initialised: Driver Not Loaded")

    monkeypatch.setattr(discovery, "load", broken)
    cfg = config.RuntimeConfig()
    with pytest.raises(edits.EditError) as err:
        plan.make(parse_request(["NVIDIA_VISIBLE_DEVICES=0"], cfg=cfg), cfg)
    assert str(err.value) == (
        "GPUs requested but the NVIDIA driver is not usable: "
        "NVML cannot be initialised: Driver Not Loaded"
    )
