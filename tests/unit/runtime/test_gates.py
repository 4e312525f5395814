"""The request gates of a Kubernetes node (issue 25 item 1): who may ask for GPUs by env.

Every combination of privileged / unprivileged x the request's channel (env, volume
mounts, CDI annotations) x the secure mode (accept-envvar-unprivileged = false,
accept-volume-mounts = true) / the open opt-in x NVIDIA's prestart hook put in by the
engine (Docker's --gpus) present / absent, against the rule written once below; then the
same through whole OCI specs as containerd and Docker write them (env order, an image's ENV,
CDI already injected).
"""

from __future__ import annotations

import itertools
import json

import pytest

from gpunode.runtime import bundle as spec_bundle
from gpunode.runtime import config, discovery, plan, specinputs
from gpunode.runtime.config import RuntimeConfig
from gpunode.runtime.request import cdi_injected, parse_request

from .fake_node import make_bundle

SECURE = RuntimeConfig(accept_envvar_unprivileged=False, accept_volume_mounts=True)
OPEN = RuntimeConfig(accept_envvar_unprivileged=True, accept_volume_mounts=True)
DOCKER_HOOK = {
    "path": "/usr/bin/nvidia-container-runtime-hook",
    "args": ["nvidia-container-runtime-hook", "prestart"],
}
ADMIN = {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}
PLAIN = {"bounding": ["CAP_CHOWN", "CAP_KILL"]}
DEVICES_DIR = "/var/run/nvidia-container-devices"


def volume(device_id: str) -> dict:
    """A device plugin's volume-mounts allocation as it reaches the OCI spec."""
    return {"source": "/dev/null", "destination": f"{DEVICES_DIR}/{device_id}", "type": "bind",
            "options": ["rbind", "rprivate"]}  # fmt: skip


# The channel a request comes by: (env, mounts, annotations). Each asks for GPU 1; env
# entries of the other channels say `all` (a CUDA image's ENV, or the pod's own), so a
# channel that lets the env through where it must not gives ("all",), not ("1",).
CHANNELS = {
    "env": (["NVIDIA_VISIBLE_DEVICES=1"], [], {}),
    "mounts": (["NVIDIA_VISIBLE_DEVICES=all"], [volume("1")], {}),
    "annotations": (["NVIDIA_VISIBLE_DEVICES=all"], [], {"cdi.k8s.io/gpu": "nvidia.com/gpu=1"}),
    "env-all": (["NVIDIA_VISIBLE_DEVICES=all"], [], {}),
}


def expected(channel: str, privileged: bool, secure: bool, hook: bool):
    """The rule: the device plugin's channels (mounts, annotations) give exactly what they
    name; the env is read only from a privileged container, a spec carrying the engine's
    hook, or in the open mode."""
    if channel in ("mounts", "annotations"):
        return ("1",), channel.replace("mounts", "volume-mounts")
    if privileged or hook or not secure:
        return (("1",) if channel == "env" else ("all",)), "env"
    return None, "none"


COMBOS = list(itertools.product(CHANNELS, (False, True), (True, False), (False, True)))


@pytest.mark.parametrize(
    ("channel", "privileged", "secure", "hook"),
    COMBOS,
    ids=[
        f"{c}-{'priv' if p else 'unpriv'}-{'secure' if s else 'open'}-{'hook' if h else 'nohook'}"
        for c, p, s, h in COMBOS
    ],
)
def test_every_combination_of_the_gates(channel, privileged, secure, hook):
    env, mounts, annotations = CHANNELS[channel]
    cfg = SECURE if secure else OPEN
    r = parse_request(
        env, privileged=privileged, engine_hook=hook, mounts=mounts, annotations=annotations,
        cfg=cfg,
    )  # fmt: skip
    assert (r.devices, r.source) == expected(channel, privileged, secure, hook)


@pytest.mark.parametrize(("channel", "privileged", "secure", "hook"), COMBOS)
def test_the_same_through_a_whole_spec(channel, privileged, secure, hook):
    """specinputs reads CAP_SYS_ADMIN, the hook, the mounts and the annotations from the spec
    the engine wrote, and the plan reads the request from them."""
    env, mounts, annotations = CHANNELS[channel]
    spec = {
        "process": {"env": ["PATH=/bin", *env], "capabilities": ADMIN if privileged else PLAIN},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}, *mounts],
        "annotations": {"io.kubernetes.cri.container-type": "container", **annotations},
    }
    if hook:
        spec["hooks"] = {"prestart": [DOCKER_HOOK]}
    cfg = SECURE if secure else OPEN
    r = plan.request_from_spec(spec, cfg)
    assert (r.devices, r.source) == expected(channel, privileged, secure, hook)


def test_the_secure_mode_gives_an_unallocated_cuda_image_nothing_silently():
    """A CUDA base image's ENV (NVIDIA_VISIBLE_DEVICES=all, NVIDIA_DRIVER_CAPABILITIES,
    NVIDIA_REQUIRE_CUDA, CUDA_VERSION): not a GPU container, no error, even with a
    requirement the node could not meet."""
    image = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_DRIVER_CAPABILITIES=compute,utility",
             "CUDA_VERSION=12.4.1", "NVIDIA_REQUIRE_CUDA=cuda>=99.0 brand=nope"]  # fmt: skip
    r = parse_request(image, cfg=SECURE)
    assert r.is_gpu is False and r.source == "none"
    legacy = ["CUDA_VERSION=9.0.116"]  # a legacy image: all GPUs by NVIDIA's rule, if read
    assert parse_request(legacy, cfg=SECURE).is_gpu is False
    assert parse_request(legacy, cfg=OPEN).devices == ("all",)


def test_env_order_as_kubelet_and_containerd_write_it():
    """kubelet puts the device plugin's envs first, the pod's own after; containerd puts the
    image's ENV before both. Later duplicates win in the env (as in NVIDIA's reader), so in
    the open mode a pod's own `all` after the plugin's `1` widens it; the secure mode reads
    neither, and the allocation comes by the mounts."""
    env = ["NVIDIA_VISIBLE_DEVICES=all",  # the image's ENV
           "NVIDIA_VISIBLE_DEVICES=1",  # the plugin's (envvar strategy)
           "NVIDIA_VISIBLE_DEVICES=all"]  # the pod's own  # fmt: skip
    assert parse_request(env, cfg=OPEN).devices == ("all",)
    assert parse_request(env, cfg=SECURE).devices is None
    with_mounts = parse_request(env, mounts=[volume("1")], cfg=SECURE)
    assert (with_mounts.devices, with_mounts.source) == (("1",), "volume-mounts")


def test_docker_gpus_sets_its_env_after_the_images():
    """Docker's --gpus appends NVIDIA_VISIBLE_DEVICES after the image's ENV: the engine's
    value wins, the image's `all` does not widen `--gpus 1`."""
    spec = {
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES=1"]},
        "hooks": {"prestart": [DOCKER_HOOK]},
    }
    assert plan.request_from_spec(spec, SECURE).devices == ("1",)


@pytest.mark.parametrize(
    "hook",
    [
        {"path": "/usr/bin/nvidia-container-toolkit", "args": ["nvidia-container-toolkit"]},
        {"path": "/usr/local/bin/nvidia-container-runtime-hook"},
    ],
)
def test_engine_hook_is_nvidias_prestart_hook_by_basename(hook):
    assert specinputs.engine_hook({"hooks": {"prestart": [hook]}}) is True


@pytest.mark.parametrize(
    "hooks",
    [
        None,
        {},
        {"prestart": []},
        # the same program in another stage: not what Docker's --gpus writes
        {"createContainer": [DOCKER_HOOK]},
        {"createRuntime": [DOCKER_HOOK]},
        # CDI hooks (gpunode's, NVIDIA's): not the legacy hook
        {"createContainer": [{"path": "/usr/local/bin/gpunode-hook"}]},
        {"prestart": [{"path": "/usr/bin/nvidia-cdi-hook"}, {"path": "/usr/bin/nvidia-ctk"}]},
        {"prestart": [{"path": "/usr/bin/nvidia-container-runtime-hook-x"}]},
        {"prestart": "nvidia-container-runtime-hook"},
        {"prestart": [["/usr/bin/nvidia-container-runtime-hook"]]},
    ],
)
def test_engine_hook_absent(hooks):
    spec = {} if hooks is None else {"hooks": hooks}
    assert specinputs.engine_hook(spec) is False


@pytest.mark.parametrize(
    ("env", "injected"),
    [
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, True),
        ({"NVIDIA_VISIBLE_DEVICES": "0,void"}, True),
        ({"NVIDIA_VISIBLE_DEVICES": " void "}, True),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, False),
        ({"NVIDIA_VISIBLE_DEVICES": "voids"}, False),
        ({}, False),
    ],
)
def test_cdi_injected(env, injected):
    assert cdi_injected(env) is injected


@pytest.mark.parametrize("cfg", [SECURE, OPEN], ids=["secure", "open"])
def test_annotations_already_resolved_by_the_engine_are_not_injected_again(cfg):
    """containerd >= 1.7 applied the CDI spec named by the annotation (its common edits set
    NVIDIA_VISIBLE_DEVICES=void); a handler that also passes the annotation on must not
    get the GPU injected a second time (issue 25 item 3)."""
    ann = {"cdi.k8s.io/nvidia-device-plugin_x": "nvidia.com/gpu=1"}
    after_cdi = ["NVIDIA_VISIBLE_DEVICES=void", "NVIDIA_CTK_LIBCUDA_DIR=/usr/lib"]
    assert parse_request(after_cdi, annotations=ann, cfg=cfg).is_gpu is False
    # containerd 1.6 (no CDI): nothing resolved them, the runtime serves them
    r = parse_request([], annotations=ann, cfg=cfg)
    assert (r.devices, r.source) == (("1",), "annotations")
    # a pod's own env `all` beside an annotation on 1.6: the annotation decides
    r = parse_request(["NVIDIA_VISIBLE_DEVICES=all"], annotations=ann, cfg=cfg)
    assert r.devices == ("1",)


# --------------------------------------------------------------------------- the shim


@pytest.mark.parametrize(
    ("hook", "env", "gpu"),
    [
        (True, ["NVIDIA_VISIBLE_DEVICES=1"], True),  # docker run --gpus 1
        (False, ["NVIDIA_VISIBLE_DEVICES=1"], False),  # docker run -e NVIDIA_VISIBLE_DEVICES=1
        (False, ["NVIDIA_VISIBLE_DEVICES=all"], False),  # a CUDA image's ENV
    ],
)
def test_shim_under_the_secure_mode(tmp_path, monkeypatch, disc, devroot, hook, env, gpu):
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(
        dev_root=str(devroot), accept_envvar_unprivileged=False, accept_volume_mounts=True
    )
    extra = {"hooks": {"prestart": [DOCKER_HOOK]}} if hook else {}
    bundle, raw = make_bundle(tmp_path, ["PATH=/bin", *env], extra)
    job = spec_bundle.modify_bundle(str(bundle), cfg)
    spec = json.loads((bundle / "config.json").read_text())
    assert "hooks" not in spec or not spec["hooks"].get("prestart")  # never left to run
    if gpu:
        assert "GPUs [1]" in job.summary
        assert [d["path"] for d in spec["linux"]["devices"]][-1] == "/dev/nvidia1"
    else:
        assert job is None
        assert (bundle / "config.json").read_bytes() == raw
