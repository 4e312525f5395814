"""Kubernetes-ready GPU nodes (gpu_container_runtime_kubernetes and its parts): containerd's
merged configuration has gpunode's handlers (runc kept), the default runtime, CDI and the
annotations as the inventory says, the RuntimeClass manifest names the handlers, and pods
through containerd's CRI see exactly their GPUs (`gpunode validate --engine cri`), while a
pod that was allocated nothing and asks by env (NVIDIA_VISIBLE_DEVICES=all, as every CUDA
image's ENV does) gets none: runtime.toml is secure by default (issue 25 item 1).

Expectations are the role's knobs with the role's defaults. The CRI smoke test needs, as
kubelet does, the operator's pod sandbox image in containerd and, for gpunode's CRI client,
Debian's python3-grpcio, python3-grpc-tools and python3-protobuf on the node.
"""

from __future__ import annotations

import json
import tomllib

import pytest
import yaml

from gpunode.engines.containerd import runtimes_section

RUNC = "io.containerd.runc.v2"


def knobs(node) -> dict:
    v = node.vars
    k8s = bool(v.get("gpu_container_runtime_kubernetes", False))
    return {
        "containerd": bool(v.get("gpu_container_runtime_containerd", k8s)),
        "handlers": v.get(
            "gpu_container_runtime_containerd_handlers",
            ["gpunode", "nvidia"] if k8s else ["gpunode"],
        ),
        "default": bool(v.get("gpu_container_runtime_containerd_default", False)),
        "cdi": bool(v.get("gpu_container_runtime_containerd_cdi", k8s)),
        "annotations": bool(v.get("gpu_container_runtime_containerd_annotations", k8s)),
        "runtimeclass": v.get(
            "gpu_container_runtime_runtimeclass_file",
            "/etc/gpunode/kubernetes/runtimeclass.yaml" if k8s else "",
        ),
        # runtime.toml's gates: the inventory's settings, else the secure default unless
        # the role's opt-in (the settings may say true only with that opt-in)
        "envvar": bool(
            (v.get("gpu_container_runtime_settings") or {}).get(
                "accept-envvar-unprivileged",
                v.get("gpu_container_runtime_kubernetes_insecure_envvar", False),
            )
        ),
        "volume_mounts": bool(
            (v.get("gpu_container_runtime_settings") or {}).get("accept-volume-mounts", True)
        ),
    }


@pytest.fixture
def want(node) -> dict:
    k = knobs(node)
    if not k["containerd"]:
        pytest.skip(f"{node.name}: gpunode is not registered with containerd here (inventory)")
    return k


@pytest.fixture
def cri(node, want) -> dict:
    """The CRI plugin section of containerd's merged configuration (as it runs it)."""
    dump = tomllib.loads(node.ok("containerd config dump"))
    # by the dump's version: containerd 2.x (Debian 14) dumps version 3, where the runtimes
    # are io.containerd.cri.v1.runtime's and io.containerd.grpc.v1.cri holds gRPC settings
    section = runtimes_section(dump)
    assert section is not None, f"{node.name}: containerd's configuration has no CRI plugin"
    return section


def test_containerd_active(node, want):
    assert node.host.service("containerd").is_running, f"{node.name}: containerd not running"


def test_handlers_registered_and_runc_kept(node, want, cri):
    runtimes = cri["containerd"]["runtimes"]
    for name in want["handlers"]:
        entry = runtimes.get(name)
        assert entry, f"{node.name}: no containerd handler {name!r} ({sorted(runtimes)})"
        assert entry.get("runtime_type") == RUNC, (node.name, name, entry)
        binary = entry.get("options", {}).get("BinaryName", "")
        f = node.host.file(binary)
        assert f.exists and f.mode & 0o111, f"{node.name}: {name}: {binary!r} not executable"
    assert runtimes.get("runc", {}).get("runtime_type") == RUNC, f"{node.name}: runc missing"


def test_default_runtime_as_configured(node, want, cri):
    default = cri["containerd"].get("default_runtime_name", "runc")
    expected = want["handlers"][0] if want["default"] else "runc"
    assert default == expected, f"{node.name}: default runtime {default!r}, expected {expected!r}"


def test_cdi_as_configured(node, want, cri):
    enabled = cri.get("enable_cdi", False)
    assert enabled is want["cdi"], f"{node.name}: enable_cdi {enabled}, expected {want['cdi']}"
    if want["cdi"]:
        dirs = cri.get("cdi_spec_dirs", [])
        spec = [d for d in dirs if node.host.file(f"{d}/nvidia.yaml").exists]
        assert spec, f"{node.name}: gpunode's CDI spec nvidia.yaml in none of {dirs}"


def test_annotations_passed_to_gpunodes_handlers(node, want, cri):
    if not want["annotations"]:
        pytest.skip(f"{node.name}: gpu_container_runtime_containerd_annotations is false")
    for name in want["handlers"]:
        patterns = cri["containerd"]["runtimes"][name].get("container_annotations", [])
        assert "cdi.k8s.io/*" in patterns, f"{node.name}: {name}: container_annotations {patterns}"


def test_runtimeclass_manifest_names_the_handlers(node, want):
    path = want["runtimeclass"]
    if not path:
        pytest.skip(f"{node.name}: no RuntimeClass file wanted (inventory)")
    f = node.host.file(path)
    assert f.exists, f"{node.name}: {path} missing"
    docs = [d for d in yaml.safe_load_all(f.content_string) if d]
    assert [(d["apiVersion"], d["kind"], d["metadata"]["name"], d["handler"]) for d in docs] == [
        ("node.k8s.io/v1", "RuntimeClass", h, h) for h in want["handlers"]
    ], f"{node.name}: {path}: {docs}"


def test_runtime_toml_secure_by_default(node, want):
    """gpunode registered with containerd: runtime.toml says accept-envvar-unprivileged =
    false and accept-volume-mounts = true (an unprivileged pod gets GPUs only through its
    device plugin allocation), unless the inventory opts in to the insecure mode or sets
    the key itself."""
    f = node.host.file("/etc/gpunode/runtime.toml")
    assert f.exists, f"{node.name}: /etc/gpunode/runtime.toml missing"
    data = tomllib.loads(f.content_string)
    envvar = data.get("accept-envvar-unprivileged")
    mounts = data.get("accept-volume-mounts")
    assert envvar is want["envvar"], f"{node.name}: accept-envvar-unprivileged = {envvar!r}"
    assert mounts is want["volume_mounts"], f"{node.name}: accept-volume-mounts = {mounts!r}"


def test_pods_through_the_cri_see_exactly_their_gpus(node, want):
    """`gpunode validate --engine cri` through the first handler: the CRI answers, the
    handler is registered, the probe pods (one GPU, all: by volume mounts, as the device
    plugin's volume-mounts strategy allocates, on a secure node) see exactly theirs, and a
    pod with NVIDIA_VISIBLE_DEVICES=all and no allocation (container.unallocated) sees no
    GPU on a secure node, every GPU on one that opted in to the insecure mode."""
    handler = want["handlers"][0]
    cmd = f"{node.gpunode()} validate --engine cri --runtime-name {handler} --json"
    if want["default"]:
        cmd += " --runtime-default"
    r = node.run(cmd)
    assert r.rc in (0, 1), f"{node.name}: `{cmd}` exited {r.rc}: {r.stderr.strip()}"
    checks = {c["id"]: c for c in json.loads(r.stdout)["checks"]}
    for cid in ("engine.active", "engine.runtime_registered", "container.image",
                "container.isolation"):  # fmt: skip
        c = checks[cid]
        assert c["status"] == "pass", f"{node.name}: {cid} {c['status']}: {c['detail']}"
    c = checks["container.unallocated"]
    expected = "fail" if want["envvar"] else "pass"
    assert c["status"] == expected, (
        f"{node.name}: container.unallocated {c['status']}: {c['detail']}"
    )
