"""How a container's GPU request is read and checked (NVIDIA's image environment semantics)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpunode.nvidia.capabilities import ALL_CAPABILITIES
from gpunode.nvidia.facts import GpuFacts, NodeFacts
from gpunode.runtime import request, userinput
from gpunode.runtime.config import RuntimeConfig
from gpunode.runtime.request import Request, parse_request
from gpunode.runtime.requirements import check_requirements, parse_requirement
from gpunode.runtime.selection import select_devices
from gpunode.runtime.specinputs import is_privileged
from gpunode.runtime.userinput import RequestError


def select_gpus(r, gpus):
    """The GPUs whose device node the container gets."""
    return select_devices(r, gpus).device_gpus


CUDA_IMAGE = {"CUDA_VERSION": "12.2.0", "NVIDIA_REQUIRE_CUDA": "cuda>=12.2"}
LEGACY_IMAGE = {"CUDA_VERSION": "9.0.116"}
DEFAULT_CAPS = frozenset({"compute", "utility"})
ALL_CAPS = frozenset(ALL_CAPABILITIES)

GPUS = (
    GpuFacts(0, 0, "GPU-aaaa0000-0000-0000-0000-000000000000", "00000000:07:00.0", "A100", "tesla",
             "8.0"),
    GpuFacts(1, 1, "GPU-bbbb1111-1111-1111-1111-111111111111", "00000000:0F:00.0", "A100", "tesla",
             "8.0"),
    GpuFacts(2, 2, "GPU-cccc2222-2222-2222-2222-222222222222", "00000001:B1:00.0", "T4", "tesla",
             "7.5"),
)  # fmt: skip
NODE = NodeFacts(driver_version="535.104.05", cuda_version="12.2", gpus=GPUS)


def req(**kw) -> Request:
    base = dict(
        devices=("all",), cdi_devices=(), capabilities=DEFAULT_CAPS, requirements=(),
        source="env", legacy=False,
    )  # fmt: skip
    base.update(kw)
    return Request(**base)


# --------------------------------------------------------------------------- NVIDIA_VISIBLE_DEVICES

VISIBLE_CASES = [
    # (env, expected devices)
    ({}, None),
    ({"NVIDIA_VISIBLE_DEVICES": ""}, None),
    ({"NVIDIA_VISIBLE_DEVICES": "   "}, None),
    ({"NVIDIA_VISIBLE_DEVICES": " , ,"}, None),
    ({"NVIDIA_VISIBLE_DEVICES": "void"}, None),
    ({"NVIDIA_VISIBLE_DEVICES": "void,0"}, None),
    ({"NVIDIA_VISIBLE_DEVICES": "0,void"}, None),
    ({"NVIDIA_VISIBLE_DEVICES": "none"}, ()),
    ({"NVIDIA_VISIBLE_DEVICES": "all"}, ("all",)),
    ({"NVIDIA_VISIBLE_DEVICES": " all "}, ("all",)),
    ({"NVIDIA_VISIBLE_DEVICES": "none,all"}, ()),
    ({"NVIDIA_VISIBLE_DEVICES": "all,none"}, ("all",)),
    ({"NVIDIA_VISIBLE_DEVICES": "0,all"}, ("all",)),
    ({"NVIDIA_VISIBLE_DEVICES": "ALL"}, ("ALL",)),  # case-sensitive at this layer
    ({"NVIDIA_VISIBLE_DEVICES": "0"}, ("0",)),
    ({"NVIDIA_VISIBLE_DEVICES": "0, 1"}, ("0", "1")),
    ({"NVIDIA_VISIBLE_DEVICES": " 1 ,, 0 ,"}, ("1", "0")),
    ({"NVIDIA_VISIBLE_DEVICES": "GPU-abc,0000:07:00.0"}, ("GPU-abc", "0000:07:00.0")),
    # legacy image: unset means all; set values behave as usual
    (LEGACY_IMAGE, ("all",)),
    ({**LEGACY_IMAGE, "NVIDIA_VISIBLE_DEVICES": ""}, None),
    ({**LEGACY_IMAGE, "NVIDIA_VISIBLE_DEVICES": "void"}, None),
    ({**LEGACY_IMAGE, "NVIDIA_VISIBLE_DEVICES": "1"}, ("1",)),
    # CUDA_VERSION with NVIDIA_REQUIRE_CUDA set is not legacy
    (CUDA_IMAGE, None),
    ({"CUDA_VERSION": "", "NVIDIA_REQUIRE_CUDA": ""}, None),
    ({"CUDA_VERSION": "12.2", "NVIDIA_REQUIRE_CUDA": ""}, ("all",)),
]


@pytest.mark.parametrize(("env", "devices"), VISIBLE_CASES)
def test_visible_devices(env, devices):
    r = parse_request(env)
    assert r.devices == devices
    assert r.is_gpu == (devices is not None)
    assert r.source == ("env" if devices is not None else "none")


@pytest.mark.parametrize(
    ("env", "legacy"),
    [
        ({}, False),
        (LEGACY_IMAGE, True),
        (CUDA_IMAGE, False),
        ({"CUDA_VERSION": ""}, False),
        ({"CUDA_VERSION": "11.0", "NVIDIA_REQUIRE_CUDA": ""}, True),
    ],
)
def test_legacy_flag(env, legacy):
    assert parse_request(env).legacy is legacy


def test_env_list_form_later_duplicates_win_and_junk_is_skipped():
    env = ["PATH=/usr/bin", "NVIDIA_VISIBLE_DEVICES=0", "NOEQUALS", "NVIDIA_VISIBLE_DEVICES=1=2"]
    assert parse_request(env).devices == ("1=2",)
    env = ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_VISIBLE_DEVICES="]
    assert parse_request(env).devices is None


@pytest.mark.parametrize(
    ("privileged", "accept", "devices", "source"),
    [
        (False, True, ("0",), "env"),
        (True, True, ("0",), "env"),
        (True, False, ("0",), "env"),
        (False, False, None, "none"),
    ],
)
def test_envvar_gate(privileged, accept, devices, source):
    cfg = RuntimeConfig(accept_envvar_unprivileged=accept)
    r = parse_request(["NVIDIA_VISIBLE_DEVICES=0"], privileged=privileged, cfg=cfg)
    assert (r.devices, r.source) == (devices, source)


def test_envvar_gate_also_ignores_legacy_all():
    cfg = RuntimeConfig(accept_envvar_unprivileged=False)
    assert parse_request(LEGACY_IMAGE, cfg=cfg).devices is None
    assert parse_request(LEGACY_IMAGE, cfg=cfg, privileged=True).devices == ("all",)


# --------------------------------------------------------------------------- volume mounts


def mount(dest, source="/dev/null"):
    return {"source": source, "destination": dest, "type": "bind", "options": ["ro"]}


MOUNTS = [
    mount("/var/run/nvidia-container-devices/1"),
    mount("/var/run/nvidia-container-devices/GPU-abc"),
    mount("/var/run/nvidia-container-devices/cdi/nvidia.com/gpu/0"),
    mount("/var/run/nvidia-container-devices/cdi/vendor.com/net=eth1"),
    mount("/var/run/nvidia-container-devices/imex/3"),  # an IMEX channel, not a GPU
    mount("/var/run/nvidia-container-devices/2", source="/tmp/x"),  # wrong source
    mount("/var/run/other/3"),  # wrong destination
    {"destination": "/proc", "type": "proc", "source": "proc"},
]


def test_volume_mounts_win_over_env_when_accepted():
    cfg = RuntimeConfig(accept_volume_mounts=True)
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "all"}, mounts=MOUNTS, cfg=cfg)
    assert r.source == "volume-mounts"
    assert r.devices == ("1", "GPU-abc", "0")
    assert r.cdi_devices == ("nvidia.com/gpu=0", "vendor.com/net=eth1")


def test_volume_mounts_ignored_by_default():
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "all"}, mounts=MOUNTS)
    assert (r.source, r.devices, r.cdi_devices) == ("env", ("all",), ())
    assert parse_request({}, mounts=MOUNTS).devices is None


def test_volume_mounts_work_without_envvar_gate():
    cfg = RuntimeConfig(accept_volume_mounts=True, accept_envvar_unprivileged=False)
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "all"}, mounts=MOUNTS[:1], cfg=cfg)
    assert (r.source, r.devices) == ("volume-mounts", ("1",))


def test_volume_mounts_empty_falls_back_to_env():
    cfg = RuntimeConfig(accept_volume_mounts=True)
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "0"}, mounts=MOUNTS[4:], cfg=cfg)
    assert (r.source, r.devices) == ("env", ("0",))


# --------------------------------------------------------------------------- annotations / CDI


def test_annotations_win_over_mounts_and_env_sorted_by_key():
    cfg = RuntimeConfig(accept_volume_mounts=True, annotation_prefixes=["cdi.k8s.io/", "x.io/"])
    ann = {
        "x.io/b": "vendor.com/net=eth0",
        "cdi.k8s.io/z": "nvidia.com/gpu=1, nvidia.com/gpu=0",
        "other.io/a": "nvidia.com/gpu=2",  # prefix not configured
    }
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "all"}, mounts=MOUNTS, annotations=ann, cfg=cfg)
    assert r.source == "annotations"
    assert r.cdi_devices == ("nvidia.com/gpu=1", "nvidia.com/gpu=0", "vendor.com/net=eth0")
    assert r.devices == ("1", "0")


def test_annotations_without_matching_prefix_fall_through():
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "0"}, annotations={"foo/bar": "nvidia.com/gpu=1"})
    assert (r.source, r.devices, r.cdi_devices) == ("env", ("0",), ())
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "0"}, annotations={"cdi.k8s.io/x": " , "})
    assert r.source == "env"


def test_annotations_work_without_envvar_gate():
    cfg = RuntimeConfig(accept_envvar_unprivileged=False)
    r = parse_request({}, annotations={"cdi.k8s.io/a": "vendor.com/fpga=f0"}, cfg=cfg)
    assert (r.source, r.devices, r.cdi_devices, r.is_gpu) == (
        "annotations",
        None,
        ("vendor.com/fpga=f0",),
        False,
    )  # fmt: skip  (another vendor's device: left to the engine's CDI support)


@pytest.mark.parametrize(
    ("value", "devices", "cdi"),
    [
        ("nvidia.com/gpu=0", ("0",), ("nvidia.com/gpu=0",)),
        ("nvidia.com/gpu=all", ("all",), ("nvidia.com/gpu=all",)),
        (
            "nvidia.com/gpu=GPU-abc,1",
            ("GPU-abc", "1"),
            ("nvidia.com/gpu=GPU-abc",),
        ),
        ("vendor.com/net=eth0", None, ("vendor.com/net=eth0",)),
        ("0,vendor.com/net=eth0", ("0",), ("vendor.com/net=eth0",)),
        ("nvidia.com/gpu=0,nvidia.com/gpu=0", ("0", "0"), ("nvidia.com/gpu=0", "nvidia.com/gpu=0")),
        ("Vendor.com/net=eth0", ("Vendor.com/net=eth0",), ()),  # not a CDI name: a plain id
        ("nvidia.com/gpu=", ("nvidia.com/gpu=",), ()),
        ("void,nvidia.com/gpu=0", None, ()),
    ],
)
def test_cdi_names_in_visible_devices(value, devices, cdi):
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": value})
    assert (r.devices, r.cdi_devices) == (devices, cdi)
    assert r.is_gpu == (devices is not None)


@pytest.mark.parametrize(
    "value",
    [
        "MIG-1b2c3d4e-0000-0000-0000-000000000000",
        "MIG-GPU-aaaa0000-0000-0000-0000-000000000000/1/0",
        "0:1",
        "0,mig-abc",
        "nvidia.com/gpu=0:1",
        "nvidia.com/gpu=MIG-abc",
    ],
)
def test_mig_ids_are_read_as_device_ids(value):
    # MIG ids are requests like any other (resolved by select_devices: tests/unit/runtime/
    # test_mig.py); nvidia.com/gpu=X names give X
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": value})
    assert r.is_gpu
    assert r.devices == tuple(value.removeprefix("nvidia.com/gpu=").split(","))


def test_mig_after_all_is_dropped_like_nvidia():
    assert parse_request({"NVIDIA_VISIBLE_DEVICES": "all,0:1"}).devices == ("all",)


# --------------------------------------------------------------------------- capabilities


@pytest.mark.parametrize(
    ("env", "caps"),
    [
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, DEFAULT_CAPS),
        ({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": ""}, DEFAULT_CAPS),
        ({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": " , "}, DEFAULT_CAPS),
        ({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "all"}, ALL_CAPS),
        ({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "video,all"}, ALL_CAPS),
        (
            {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": " graphics , utility"},
            frozenset({"graphics", "utility"}),
        ),
        (
            {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_DRIVER_CAPABILITIES": "compute"},
            frozenset({"compute"}),
        ),
        (LEGACY_IMAGE, ALL_CAPS),  # unset on a legacy image: everything supported
        ({**LEGACY_IMAGE, "NVIDIA_DRIVER_CAPABILITIES": ""}, DEFAULT_CAPS),
        ({**CUDA_IMAGE, "NVIDIA_VISIBLE_DEVICES": "0"}, DEFAULT_CAPS),
    ],
)
def test_capabilities(env, caps):
    assert parse_request(env).capabilities == caps


def test_capabilities_respect_supported_and_default():
    cfg = RuntimeConfig(
        supported_capabilities=["compute", "utility", "video"], default_capabilities=["compute"]
    )
    env = {"NVIDIA_VISIBLE_DEVICES": "0"}
    assert parse_request(env, cfg=cfg).capabilities == {"compute"}
    env["NVIDIA_DRIVER_CAPABILITIES"] = "all"
    assert parse_request(env, cfg=cfg).capabilities == {"compute", "utility", "video"}
    assert parse_request(LEGACY_IMAGE, cfg=cfg).capabilities == {"compute", "utility", "video"}
    cfg = RuntimeConfig(supported_capabilities=["compute"])
    assert parse_request({"NVIDIA_VISIBLE_DEVICES": "0"}, cfg=cfg).capabilities == {"compute"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("compute,bogus", r"^unknown driver capability 'bogus' in NVIDIA_DRIVER_CAPABILITIES; "
                          r"accepted: all, compat32, compute"),
        ("Compute", r"^unknown driver capability 'Compute'"),
        ("graphics", r"^unsupported driver capability 'graphics' in NVIDIA_DRIVER_CAPABILITIES"),
    ],
)  # fmt: skip
def test_capability_errors(value, message):
    cfg = RuntimeConfig(supported_capabilities=["compute", "utility"])
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": value}
    with pytest.raises(RequestError, match=message):
        parse_request(env, cfg=cfg)


def test_non_gpu_container_never_fails():
    env = {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "NVIDIA_DRIVER_CAPABILITIES": "bogus",
        "NVIDIA_REQUIRE_X": "nonsense>1",
    }
    r = parse_request(env)
    assert (r.devices, r.is_gpu, r.capabilities, r.requirements) == (None, False, frozenset(), ())
    r = parse_request({"CUDA_VERSION": "junk"}, cfg=RuntimeConfig(accept_envvar_unprivileged=False))
    assert r.devices is None and r.requirements == ()


# --------------------------------------------------------------------------- requirements


@pytest.mark.parametrize(
    ("env", "requirements"),
    [
        ({}, ()),
        ({"NVIDIA_REQUIRE_CUDA": "cuda>=12.2"}, ("cuda>=12.2",)),
        (
            {"NVIDIA_REQUIRE_Z": "driver>=500", "NVIDIA_REQUIRE_A": "arch>=7.0"},
            ("arch>=7.0", "driver>=500"),
        ),
        ({"NVIDIA_REQUIRE_JETPACK": "csv-mounts=all", "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS": ""}, ()),
        ({"NVIDIA_REQUIRE_EMPTY": ""}, ()),
        (LEGACY_IMAGE, ("cuda>=9.0",)),
        ({"CUDA_VERSION": "8"}, ("cuda>=8.0",)),
        ({"CUDA_VERSION": "v11.6"}, ("cuda>=11.6",)),
        ({"CUDA_VERSION": "11.6.1-rc1+b2"}, ("cuda>=11.6",)),
        ({"CUDA_VERSION": "10.2", "NVIDIA_REQUIRE_DRIVER": "driver>=440"}, ("driver>=440", "cuda>=10.2")),
        ({"CUDA_VERSION": "12.2.0", "NVIDIA_REQUIRE_CUDA": "cuda>=12.2 brand=tesla"},
         ("cuda>=12.2 brand=tesla",)),
    ],
)  # fmt: skip
def test_requirements_collected(env, requirements):
    env = {"NVIDIA_VISIBLE_DEVICES": "all", **env}
    assert parse_request(env).requirements == requirements


@pytest.mark.parametrize("version", ["junk", "11.06", "1.2.3.4", " ", "v", "11.x"])
def test_invalid_cuda_version(version):
    with pytest.raises(RequestError, match=rf"^invalid CUDA_VERSION '{version}'"):
        parse_request({"CUDA_VERSION": version})


@pytest.mark.parametrize(
    ("value", "disabled"),
    [
        ("1", True), ("t", True), ("T", True), ("true", True), ("TRUE", True), ("True", True),
        ("0", False), ("f", False), ("false", False), ("FALSE", False), ("False", False),
        ("yes", False), ("tRuE", False), ("", False), (" true", False),
    ],
)  # fmt: skip
def test_disable_require_parsebool(value, disabled):
    env = {
        "NVIDIA_VISIBLE_DEVICES": "all",
        "NVIDIA_REQUIRE_CUDA": "cuda>=99",
        "NVIDIA_DISABLE_REQUIRE": value,
    }
    r = parse_request(env)
    assert r.requirements == (() if disabled else ("cuda>=99",))
    if disabled:
        check_requirements(r.requirements, NODE, GPUS)
    else:
        with pytest.raises(RequestError, match=r"^unsatisfied condition: cuda>=99$"):
            check_requirements(r.requirements, NODE, GPUS)


def test_disable_require_skips_validation_and_config_forces_it():
    env = {
        "NVIDIA_VISIBLE_DEVICES": "0",
        "NVIDIA_REQUIRE_X": "bogus",
        "NVIDIA_DISABLE_REQUIRE": "1",
    }
    assert parse_request(env).requirements == ()
    env = {"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_REQUIRE_X": "cuda>=99", "CUDA_VERSION": "junk"}
    cfg = RuntimeConfig(disable_require=True)
    assert parse_request(env, cfg=cfg).requirements == ()
    # check_requirements honours the config too, whatever the Request says
    check_requirements(("cuda>=99",), NODE, GPUS, cfg=cfg)


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("foo>=1", r"^invalid expression 'foo>=1' in NVIDIA_REQUIRE_X: unknown property.*"
                   r"accepted properties cuda, driver, arch, brand$"),
        ("cuda", r"^invalid expression 'cuda' in NVIDIA_REQUIRE_X: .*accepted properties"),
        (">=11", r"^invalid expression '>=11'"),
        ("cuda>=", r"^invalid expression 'cuda>='.*digits and dots"),
        ("cuda>=11.x", r"^invalid expression 'cuda>=11.x'"),
        ("cuda>=1..2", r"^invalid expression 'cuda>=1..2'"),
        ("cuda=>11", r"^invalid expression 'cuda=>11'"),
        ("cuda!11", r"^invalid expression 'cuda!11'.*bad operator"),
        ("cuda==11", r"^invalid expression 'cuda==11'"),
        ("driver>=v535", r"^invalid expression 'driver>=v535'"),
        ("brand<tesla", r"^invalid expression 'brand<tesla' in NVIDIA_REQUIRE_X: brand accepts "
                        r"only = and !=$"),
        ("brand>=tesla", r"brand accepts only = and !="),
        ("brand=", r"^invalid expression 'brand='"),
        ("cuda>=11.0 brand=tesla,bogus", r"^invalid expression 'bogus'"),
    ],
)  # fmt: skip
def test_invalid_expressions_fail_at_parse_time(expr, message):
    env = {"NVIDIA_VISIBLE_DEVICES": "none", "NVIDIA_REQUIRE_X": expr}
    with pytest.raises(RequestError, match=message):
        parse_request(env)


def test_parse_requirement_structure():
    terms = parse_requirement("cuda>=11.0  BRAND=Tesla,Driver>=450 ")
    assert [[(f.prop, f.op, f.value) for f in t] for t in terms] == [
        [("cuda", ">=", "11.0")],
        [("brand", "=", "Tesla"), ("driver", ">=", "450")],
    ]
    assert parse_requirement("") == ()
    with pytest.raises(RequestError, match=r"^invalid expression 'x' in requirement: "):
        parse_requirement("x")


def node(cuda="12.2", driver="535.104.05", gpus=GPUS):
    return NodeFacts(driver_version=driver, cuda_version=cuda, gpus=gpus)


@pytest.mark.parametrize(
    ("expr", "cuda", "driver", "failure"),
    [
        ("cuda>=12.2", "12.2", "535", None),
        ("cuda>=12.4", "12.2", "535", "cuda>=12.4"),
        ("cuda=11", "11.0", "535", None),  # 11.0 == 11
        ("cuda=11.0.0", "11", "535", None),
        ("cuda!=11.0", "11", "535", "cuda!=11.0"),
        ("cuda>12.9", "12.10", "535", None),  # numeric per component
        ("cuda<12.10", "12.9", "535", None),
        ("cuda<=12.2", "12.2", "535", None),
        ("cuda<12.2", "12.2", "535", "cuda<12.2"),
        ("cuda>12.2", "12.2.1", "535", None),
        ("driver>=535.104.5", "12.2", "535.104.05", None),
        ("driver<535.104.06", "12.2", "535.104.05", None),
        # OR of terms, AND inside a term; the last failing factor is reported
        ("cuda>=11.0 brand=tesla,driver>=450", "10.2", "460", None),
        ("cuda>=11.0 brand=tesla,driver>=450", "10.2", "440", "driver>=450"),
        ("cuda>=11.0 brand=geforce,driver>=450", "10.2", "460", "brand=geforce"),
        ("cuda>=11.0 brand=tesla,driver>=450", "11.0", "300", None),
        ("cuda>=13 driver>=600", "12.2", "535", "driver>=600"),
        ("brand=TESLA,arch>=7.5", "12.2", "535", None),  # every GPU is >= 7.5
        ("brand!=tesla", "12.2", "535", "brand!=tesla"),
        ("CUDA>=12,Driver>=535", "12.2", "535", None),
    ],
)
def test_requirement_evaluation(expr, cuda, driver, failure):
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_REQUIRE_X": expr})
    n = node(cuda=cuda, driver=driver)
    if failure is None:
        check_requirements(r.requirements, n, GPUS)
    else:
        with pytest.raises(RequestError) as exc:
            check_requirements(r.requirements, n, GPUS)
        assert str(exc.value) == f"unsatisfied condition: {failure}"


def test_requirements_are_anded():
    r = req(requirements=("cuda>=12", "driver>=600"))
    with pytest.raises(RequestError, match=r"^unsatisfied condition: driver>=600$"):
        check_requirements(r.requirements, NODE, GPUS)
    check_requirements(req(requirements=("cuda>=12", "driver>=500")).requirements, NODE, GPUS)


def test_legacy_requirement_is_checked():
    r = parse_request({"CUDA_VERSION": "12.4.1"})
    with pytest.raises(RequestError, match=r"^unsatisfied condition: cuda>=12.4$"):
        check_requirements(r.requirements, NODE, select_gpus(r, GPUS))
    check_requirements(parse_request({"CUDA_VERSION": "12.2.0"}).requirements, NODE, GPUS)


def test_arch_checked_per_gpu_one_failing_fails():
    r = req(requirements=("arch>=8.0",))
    check_requirements(r.requirements, NODE, GPUS[:2])
    with pytest.raises(RequestError, match=r"^unsatisfied condition: arch>=8.0$"):
        check_requirements(r.requirements, NODE, GPUS)  # GPU 2 is 7.5
    with pytest.raises(RequestError, match=r"^unsatisfied condition: arch>=8.0$"):
        check_requirements(r.requirements, NODE, [GPUS[2]])


def test_brand_checked_per_gpu():
    mixed = (GPUS[0], GpuFacts(1, 1, "GPU-x", "00000000:10:00.0", "RTX", "geforce", "8.6"))
    r = req(requirements=("brand=tesla",))
    check_requirements(r.requirements, NODE, mixed[:1])
    with pytest.raises(RequestError, match=r"^unsatisfied condition: brand=tesla$"):
        check_requirements(r.requirements, NODE, mixed)


def test_no_selected_gpus_arch_and_brand_pass_vacuously():
    r = req(devices=(), requirements=("arch>=9.0,brand=geforce", "cuda>=12"))
    check_requirements(r.requirements, NODE, [])
    with pytest.raises(RequestError, match=r"^unsatisfied condition: cuda>=13$"):
        check_requirements(("arch>=9.0,cuda>=13",), NODE, [])


def test_unknown_node_value_is_reported():
    gpu = GpuFacts(0, 0, "GPU-x", "00000000:07:00.0", compute_capability="")
    with pytest.raises(RequestError, match=r"^cannot check arch>=8.0: GPU 0's compute"):
        check_requirements(("arch>=8.0",), NODE, [gpu])
    with pytest.raises(RequestError, match=r"^cannot check cuda>=8.0: "):
        check_requirements(("cuda>=8.0",), node(cuda=""), [])


# --------------------------------------------------------------------------- select_gpus


@pytest.mark.parametrize(
    ("devices", "indexes"),
    [
        (("all",), [0, 1, 2]),
        (("ALL",), [0, 1, 2]),  # nvidia-container-cli: case-insensitive
        ((), []),
        (None, []),
        (("1",), [1]),
        (("2", "0"), [2, 0]),
        (("GPU-bbbb1111-1111-1111-1111-111111111111",), [1]),
        (("gpu-BBBB1111-1111-1111-1111-111111111111",), [1]),
        (("00000000:07:00.0",), [0]),
        (("0000:07:00.0",), [0]),
        (("07:00.0",), [0]),
        (("7:0.0",), [0]),
        (("0000:0f:00.0",), [1]),
        (("0f:00.0",), [1]),
        (("0001:b1:00.0",), [2]),
        (("00000001:B1:00.0",), [2]),
        (("1", "GPU-bbbb1111-1111-1111-1111-111111111111", "0f:00.0", "0", "1"), [1, 0]),
        (("2", "all"), [2, 0, 1]),
    ],
)
def test_select_gpus(devices, indexes):
    shuffled = (GPUS[2], GPUS[0], GPUS[1])
    assert [g.index for g in select_gpus(req(devices=devices), shuffled)] == indexes


@pytest.mark.parametrize("device", ["3", "GPU-nope", "b1:00.0", "0000:07:00.1", "foo", "-1", "٣"])
def test_select_unknown_device(device):
    with pytest.raises(RequestError) as exc:
        select_gpus(req(devices=("0", device)), GPUS)
    msg = str(exc.value)
    assert msg == (
        f"unknown device '{device}' requested; this node has: "
        "0 (GPU-aaaa0000-0000-0000-0000-000000000000, 00000000:07:00.0), "
        "1 (GPU-bbbb1111-1111-1111-1111-111111111111, 00000000:0F:00.0), "
        "2 (GPU-cccc2222-2222-2222-2222-222222222222, 00000001:B1:00.0)"
    )
    assert "\n" not in msg


def test_select_on_node_without_gpus():
    assert select_gpus(req(devices=("all",)), []) == []
    with pytest.raises(
        RequestError, match=r"^unknown device '0' requested; this node has no GPUs$"
    ):
        select_gpus(req(devices=("0",)), [])


def test_select_refuses_a_mig_id_on_a_node_without_mig():
    with pytest.raises(RequestError) as err:
        select_gpus(req(devices=("0:1",)), GPUS)
    assert str(err.value) == (
        "unknown MIG device '0:1' requested; accepted: <gpu index>:<n>, MIG-<uuid>, "
        "MIG-GPU-<uuid>/<gi>/<ci>; this node has no MIG devices"
    )


def test_end_to_end_cdi_name_selects_gpu():
    r = parse_request(
        {"NVIDIA_VISIBLE_DEVICES": "nvidia.com/gpu=GPU-cccc2222-2222-2222-2222-222222222222"}
    )
    assert [g.index for g in select_gpus(r, GPUS)] == [2]


# NVIDIA's jit-CDI names (runtime.nvidia.com/gpu=X) select GPUs exactly as nvidia.com/gpu=X
# does, from the env and from cdi.k8s.io annotations alike (issue 6, item 3); so do NVIDIA's
# device plugin's (k8s.device-plugin.nvidia.com/gpu=X, its cdi-annotations on containerd 1.6:
# issue 25, item 2).
DEVICE_PLUGIN = "k8s.device-plugin.nvidia.com"
JIT_CDI_CASES = [
    ("all", [0, 1, 2]),
    ("1", [1]),
    ("GPU-cccc2222-2222-2222-2222-222222222222", [2]),
    ("gpu-AAAA0000-0000-0000-0000-000000000000", [0]),
]


def _request_from(source: str, value: str) -> Request:
    if source == "env":
        return parse_request({"NVIDIA_VISIBLE_DEVICES": value})
    return parse_request({}, annotations={"cdi.k8s.io/gpus": value})


@pytest.mark.parametrize("source", ["env", "annotations"])
@pytest.mark.parametrize(("name", "indexes"), JIT_CDI_CASES)
@pytest.mark.parametrize("vendor", ["nvidia.com", "runtime.nvidia.com", DEVICE_PLUGIN])
def test_nvidia_gpu_cdi_names_select_gpus(vendor, name, indexes, source):
    r = _request_from(source, f"{vendor}/gpu={name}")
    assert r.is_gpu and r.source == source
    assert r.cdi_devices == (f"{vendor}/gpu={name}",)
    assert [g.index for g in select_gpus(r, GPUS)] == indexes


@pytest.mark.parametrize("source", ["env", "annotations"])
@pytest.mark.parametrize(
    "name",
    [
        "nvidia.com/foo=1",
        "runtime.nvidia.com/foo=1",
        "nvidia.com/mig=0",
        "runtime.nvidia.com/gpu.x=all",
        "0,runtime.nvidia.com/bar=all",
        "k8s.device-plugin.nvidia.com/mig-1g.10gb=0",
    ],
)
def test_unknown_nvidia_cdi_kind_is_an_error_naming_it(name, source):
    bad = name.split(",")[-1]
    with pytest.raises(RequestError, match=r"^unknown CDI device '(.*)' requested; ") as err:
        _request_from(source, name)
    assert err.value.args[0].split("'")[1] == bad
    assert "runtime.nvidia.com/gpu=X" in str(err.value)  # says what is accepted


@pytest.mark.parametrize("source", ["env", "annotations"])
@pytest.mark.parametrize("vendor", ["nvidia.com", "runtime.nvidia.com", DEVICE_PLUGIN])
def test_unknown_nvidia_gpu_cdi_device_names_the_request(vendor, source):
    r = _request_from(source, f"{vendor}/gpu=9")
    with pytest.raises(RequestError, match=rf"^unknown device '{vendor}/gpu=9' requested; this"):
        select_gpus(r, GPUS)


def test_other_vendors_cdi_names_still_left_to_the_engine():
    r = parse_request({"NVIDIA_VISIBLE_DEVICES": "nvidia.example.com/gpu=0"})
    assert (r.devices, r.is_gpu) == (None, False)


# --------------------------------------------------------------------------- MIG config/monitor


@pytest.mark.parametrize("var", ["NVIDIA_MIG_CONFIG_DEVICES", "NVIDIA_MIG_MONITOR_DEVICES"])
def test_mig_config_and_monitor_refused_unprivileged_as_nvidia_does(var):
    env = {"NVIDIA_VISIBLE_DEVICES": "0", var: "all"}
    short = var.removeprefix("NVIDIA_")
    with pytest.raises(
        RequestError, match=rf"^cannot set {short} in non privileged container: {var}=all needs"
    ):
        parse_request(env)
    # privileged: only `all` (libnvidia-container's select_mig_config_devices)
    r = parse_request(env, privileged=True)
    assert (r.mig_config, r.mig_monitor) == (
        var.endswith("CONFIG_DEVICES"),
        var.endswith("MONITOR_DEVICES"),
    )
    assert parse_request({**env, var: "ALL"}, privileged=True).is_gpu
    for bad, named in (("0", "0"), ("all,0", "0"), ("MIG-x", "MIG-x"), (" , ", " , ")):
        with pytest.raises(RequestError) as err:
            parse_request({**env, var: bad}, privileged=True)
        assert str(err.value) == (
            f"{var}={bad}: '{named}': only 'all' devices are currently supported"
        )
    # empty, or in a container that asks for no GPU: ignored, as by NVIDIA
    assert parse_request({"NVIDIA_VISIBLE_DEVICES": "0", var: ""}).devices == ("0",)
    assert parse_request({var: "all"}).is_gpu is False
    assert parse_request({"NVIDIA_VISIBLE_DEVICES": "void", var: "all"}).is_gpu is False


# --------------------------------------------------------------------------- is_privileged


@pytest.mark.parametrize(
    ("spec", "privileged"),
    [
        ({"process": {"capabilities": {"bounding": ["CAP_CHOWN", "CAP_SYS_ADMIN"]}}}, True),
        ({"process": {"capabilities": {"bounding": ["CAP_CHOWN"],
                                       "effective": ["CAP_SYS_ADMIN"]}}}, False),
        ({"process": {"capabilities": ["CAP_SYS_ADMIN"]}}, True),  # pre-1.0 flat list
        ({"process": {"capabilities": {}}}, False),
        ({"process": {"capabilities": None}}, False),
        ({"process": {}}, False),
        ({}, False),
    ],
)  # fmt: skip
def test_is_privileged(spec, privileged):
    assert is_privileged(spec) is privileged


# --------------------------------------------------------------------------- property


_TOKENS = [
    "all", "none", "void", "0", "1", " ", "", "GPU-x", "MIG-x", "0:1", "07:00.0",
    "nvidia.com/gpu=0", "a/b=c", "compute", "utility", "bogus", "cuda>=11", "brand=tesla",
    "arch<8", "driver>=450.1", "x>1", ">=", "brand<x", "cuda>=1..2", "\n", "\t",
]  # fmt: skip
_values = st.one_of(
    st.text(max_size=40),
    st.tuples(
        st.lists(st.sampled_from(_TOKENS), max_size=6), st.sampled_from([",", " ", ", "])
    ).map(lambda t: t[1].join(t[0])),
)
_maybe = st.one_of(st.none(), _values)


@settings(max_examples=300, deadline=None)
@given(
    visible=_maybe,
    caps=_maybe,
    require=_maybe,
    cuda_version=st.one_of(st.none(), st.text(max_size=12)),
    privileged=st.booleans(),
    disable=st.one_of(st.none(), st.sampled_from(["1", "true", "0", "x"])),
)
def test_parse_request_only_raises_request_error(
    visible, caps, require, cuda_version, privileged, disable
):
    env = {}
    for key, value in (
        ("NVIDIA_VISIBLE_DEVICES", visible),
        ("NVIDIA_DRIVER_CAPABILITIES", caps),
        ("NVIDIA_REQUIRE_X", require),
        ("CUDA_VERSION", cuda_version),
        ("NVIDIA_DISABLE_REQUIRE", disable),
    ):
        if value is not None:
            env[key] = value
    try:
        r = parse_request(env, privileged=privileged)
    except RequestError as exc:
        assert "\n" not in str(exc)
        return
    assert isinstance(r, Request)
    try:
        check_requirements(r.requirements, NODE, select_gpus(r, GPUS))
    except RequestError as exc:
        assert "\n" not in str(exc)


# The start path matches these patterns without `re` (its import costs every GPU start);
# each hand-written matcher must agree with the regex it replaces.
SAMPLES = [
    "",
    "0",
    "07",
    "12",
    "1.2",
    "1.2.3",
    "1..2",
    ".1",
    "1.",
    "1:2",
    ":2",
    "1:",
    "1:2:3",
    "١٢",
    "1\n",
    "a",
    "nvidia.com/gpu=0",
    "nvidia.com/gpu=all",
    "runtime.nvidia.com/gpu=1",
    "Nvidia.com/gpu=0",
    "nvidia.com/gpu=",
    "nvidia.com/=0",
    "/gpu=0",
    "nvidia.com/gpu=a:b.c-d_e",
    "nvidia.com/gpu=0=1",
    "nvidia.com/g/pu=0",
    "nvidia.com/gpu=0/1",
    "vendor_x/c=d",
    "a/b=c\n",
    "MIG-1",
    "x/y=z ",
    " x/y=z",
]


@pytest.mark.parametrize(
    ("matcher", "pattern"),
    [
        (request.is_cdi_name, r"[a-z0-9.-]+/[a-zA-Z0-9._-]+=[a-zA-Z0-9._:-]+"),
        (request._is_mig_index, r"[0-9]+:[0-9]+"),
        (userinput.is_number, r"[0-9]+"),
        (userinput.is_version, r"[0-9]+(?:\.[0-9]+)*"),
    ],
)
def test_matchers_agree_with_their_regex(matcher, pattern):
    import re

    for text in SAMPLES:
        assert matcher(text) is bool(re.fullmatch(pattern, text)), text


@pytest.mark.parametrize(
    "devices",
    ["9" * 5000, "9" * 5000 + ":0", "0:" + "9" * 5000, "MIG-GPU-x/" + "9" * 5000 + "/0"],
)
def test_a_digit_run_of_any_length_is_an_unknown_device_not_a_crash(devices):
    """An image's env is hostile: int() refuses more than 4,300 digits with a ValueError
    that is no RequestError's one line."""
    with pytest.raises(RequestError, match=r"^unknown (MIG )?device '"):
        select_gpus(req(devices=(devices,)), GPUS)


def test_a_requirement_of_thousands_of_digits_is_one_unsatisfied_line():
    """An image's NVIDIA_REQUIRE_CUDA=cuda>=111...1 (5,000 digits): util.versions compared it
    with int(), whose ValueError (more than 4,300 digits) reached the create as a
    traceback; now it is a version no driver meets, said in one line."""
    r = parse_request(
        {"NVIDIA_VISIBLE_DEVICES": "all", "NVIDIA_REQUIRE_CUDA": "cuda>=" + "1" * 5000}
    )
    with pytest.raises(RequestError) as exc:
        check_requirements(r.requirements, NODE, GPUS)
    text = str(exc.value)
    assert text.startswith("unsatisfied condition: cuda>=111") and "\n" not in text
    # named by its start and its length, never repeated whole
    assert len(text) < 300 and text.endswith("... (5006 characters)"), text
