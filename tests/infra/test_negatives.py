"""Requests the node cannot satisfy fail `docker run` with the clear message: an unknown
GPU index, and an NVIDIA_REQUIRE_CUDA newer than the driver supports."""

from __future__ import annotations

from .conftest import node_inventory
from .matrix import image, prepare


def test_unknown_index_fails_with_the_gpus_listed(node):
    inv = node_inventory(node)
    mounts = prepare(node)
    n = len(inv["gpus"])
    r = node.run(
        f"docker run --rm --runtime gpunode -e NVIDIA_VISIBLE_DEVICES={n} {mounts} "
        f"{image(node)} true"
    )
    assert r.rc != 0, f"{node.name}: a container with unknown GPU {n} started"
    assert f"unknown device '{n}' requested" in r.stderr, (node.name, r.stderr[-500:])
    for g in inv["gpus"]:
        assert g["uuid"] in r.stderr, (node.name, "the message lists the node's GPUs")


def test_unsatisfiable_cuda_requirement_fails(node):
    inv = node_inventory(node)
    mounts = prepare(node)
    major = int(str(inv["cuda_driver_version"]).split(".")[0])
    need = f"cuda>={major + 1}.0"
    r = node.run(
        f"docker run --rm --runtime gpunode -e NVIDIA_VISIBLE_DEVICES=all "
        f"-e 'NVIDIA_REQUIRE_CUDA={need}' {mounts} {image(node)} true"
    )
    assert r.rc != 0, f"{node.name}: a container requiring {need} started"
    assert f"unsatisfied condition: {need}" in r.stderr, (node.name, r.stderr[-500:])
