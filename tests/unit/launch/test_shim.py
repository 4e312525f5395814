"""The runtime shim: argument parsing, the fast pre-check, the create path on the fake node,
and exec of the low-level runtime."""

from __future__ import annotations

import json

import pytest

import gpunode.runtime as runtime_pkg
from gpunode.launch import shim
from gpunode.nvidia.facts import NodeFacts
from gpunode.runtime import bundle as spec_bundle
from gpunode.runtime import config, discovery

from ..runtime.fake_node import (
    GPUS,
    VERSION,
    ldcache_of_driver_tree,
    make_bundle,
    run_shim,
    shim_env,
)

PLAIN = json.dumps({"process": {"env": ["PATH=/bin"], "args": ["true"]}})


def test_shim_leaves_non_gpu_spec_untouched_even_without_driver(tmp_path, monkeypatch):
    def broken(*a, **k):
        raise AssertionError("discovery must not run for a non-GPU container")

    monkeypatch.setattr(discovery, "load", broken)
    cfg = config.RuntimeConfig(cache_file=str(tmp_path / "nope.json"))
    for env in ([], ["NVIDIA_VISIBLE_DEVICES=void"], ["NVIDIA_VISIBLE_DEVICES="]):
        bundle, raw = make_bundle(tmp_path, ["PATH=/bin", *env])
        assert spec_bundle.modify_bundle(str(bundle), cfg) is None
        assert (bundle / "config.json").read_bytes() == raw


def test_shim_edits_gpu_spec(tmp_path, monkeypatch, disc, devroot):
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(dev_root=str(devroot), hook_path="/usr/local/bin/gpunode-hook")
    bundle, _ = make_bundle(
        tmp_path, ["NVIDIA_VISIBLE_DEVICES=GPU-00000000-0000-4000-8000-000000000002"]
    )
    job = spec_bundle.modify_bundle(str(bundle), cfg)
    assert "GPUs [2]" in job.summary
    spec = json.loads((bundle / "config.json").read_text())
    assert [d["path"] for d in spec["linux"]["devices"]][-1] == "/dev/nvidia2"
    # no hook on the shim's path: the shim does the hook's work itself, with these args
    assert "hooks" not in spec
    assert job.rootfs == str(bundle / "rootfs")
    assert job.args.gpu == [GPUS[2].procfs_bus_id] and job.args.gpus_selected
    assert job.args.proc_driver and job.args.link


def test_shim_unknown_device_error_lists_gpus(tmp_path, monkeypatch, disc, devroot):
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(dev_root=str(devroot))
    bundle, raw = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=9"])
    with pytest.raises(ValueError, match="unknown device '9'") as err:
        spec_bundle.modify_bundle(str(bundle), cfg)
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
    assert shim.parse_args(argv) == expect


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
    assert runtime_pkg.surely_not_gpu(json.dumps(spec).encode(), config_exists) is expect
    args = {"process": {"args": ["echo", "NVIDIA_VISIBLE_DEVICES"]}}
    assert runtime_pkg.surely_not_gpu(json.dumps(args).encode(), False) is False  # conservative


def test_runtime_with_a_driver_root(tmp_path, driver_tree, devroot, monkeypatch):
    """Sources under the driver root, container paths without it, and the hook told the
    driver root; the deprecated ldconfig key changes nothing."""
    monkeypatch.setattr(discovery, "ldcache_libraries", ldcache_of_driver_tree)
    roots = []
    monkeypatch.setattr(
        discovery,
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
    bundle, _ = make_bundle(
        tmp_path, ["NVIDIA_VISIBLE_DEVICES=1", "NVIDIA_DRIVER_CAPABILITIES=all"]
    )
    job = spec_bundle.modify_bundle(str(bundle), cfg)
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
    assert "hooks" not in spec
    assert job.args.driver_root == root
    assert "/sbin/ldconfig.real" not in str(vars(job.args))  # the key is ignored now


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
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(dev_root=str(devroot))
    for env, extra in (
        ([f"NVIDIA_VISIBLE_DEVICES={value}"], None),
        ([], {"annotations": {"cdi.k8s.io/gpu": value}}),
    ):
        bundle, _ = make_bundle(tmp_path, env, extra)
        assert spec_bundle.modify_bundle(str(bundle), cfg) is not None
        spec = json.loads((bundle / "config.json").read_text())
        gpus = [d["path"] for d in spec["linux"]["devices"] if d["path"][11:].isdigit()]
        assert gpus == want


@pytest.mark.parametrize("value", ["nvidia.com/foo=1", "runtime.nvidia.com/foo=0"])
def test_shim_refuses_unknown_nvidia_cdi_names(tmp_path, monkeypatch, disc, devroot, value):
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    cfg = config.RuntimeConfig(dev_root=str(devroot))
    bundle, raw = make_bundle(tmp_path, [f"NVIDIA_VISIBLE_DEVICES={value}"])
    with pytest.raises(ValueError, match=f"unknown CDI device '{value}' requested"):
        spec_bundle.modify_bundle(str(bundle), cfg)
    assert (bundle / "config.json").read_bytes() == raw


# ------------------------------------------------------- low-level runtime exec (item 9)


def _runtime_subprocess(tmp_path, runtimes, argv):

    conf = tmp_path / "runtime.toml"
    conf.write_text(f"runtimes = {json.dumps(runtimes)}\nlog-file = ''\n")
    return run_shim(argv, shim_env(conf), cwd=tmp_path)


@pytest.fixture
def bad_runtimes(tmp_path):
    """Entries execve refuses: a directory, a non-executable format, a missing interpreter."""
    d = tmp_path / "rt-dir"
    d.mkdir()
    garbage = tmp_path / "rt-garbage"
    garbage.write_bytes(b"\x00\x01not an executable format\n")
    garbage.chmod(0o755)
    nointerp = tmp_path / "rt-nointerp"
    nointerp.write_text("#!/nonexistent/interpreter\n")
    nointerp.chmod(0o755)
    return [str(d), str(garbage), str(nointerp)]


@pytest.mark.parametrize("command", ["start", "create"])
def test_runtime_skips_entries_that_cannot_be_executed(tmp_path, bad_runtimes, command):
    good = tmp_path / "rt-good"
    good.write_text('#!/bin/sh\necho fake-runc "$@"\n')
    good.chmod(0o755)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text(PLAIN)
    argv = [command, "--bundle", str(bundle), "id"] if command == "create" else [command, "id"]
    proc = _runtime_subprocess(tmp_path, [*bad_runtimes, str(good)], argv)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["fake-runc", *argv]


@pytest.mark.parametrize("log_format", ["json", "text"])
def test_runtime_exec_failure_is_one_line_and_logged(tmp_path, bad_runtimes, log_format):
    log = tmp_path / "runc.log"
    argv = ["--log", str(log), "--log-format", log_format, "delete", "id"]
    proc = _runtime_subprocess(tmp_path, bad_runtimes, argv)
    assert proc.returncode == 1
    (line,) = proc.stderr.splitlines()
    assert line.startswith(
        "gpunode-container-runtime: error: no low-level OCI runtime could be run from runtimes "
    ), line
    assert f"{bad_runtimes[0]}: is a directory" in line
    assert f"{bad_runtimes[1]}: Exec format error" in line
    assert f"{bad_runtimes[2]}: No such file or directory" in line
    (logged,) = log.read_text().splitlines()
    message = line.removeprefix("gpunode-container-runtime: error: ")
    if log_format == "json":
        assert json.loads(logged)["level"] == "error" and json.loads(logged)["msg"] == message
    else:
        assert "level=error" in logged and message in logged


# ------------------------------------------- the secure gate's ignored request, said (issue 36)


def _secure_create(tmp_path, env, accept="false"):
    """A create of a spec with ``env`` through the runtime (a subprocess) under
    accept-envvar-unprivileged = ``accept``: (process, config.json before, after, log lines)."""
    runc = tmp_path / "rt-runc"
    runc.write_text('#!/bin/sh\necho fake-runc "$@"\n')
    runc.chmod(0o755)
    log = tmp_path / "runtime.log"
    conf = tmp_path / "runtime.toml"
    conf.write_text(
        f"runtimes = {json.dumps([str(runc)])}\nlog-file = {json.dumps(str(log))}\n"
        f"accept-envvar-unprivileged = {accept}\n"
    )
    bundle, raw = make_bundle(tmp_path, env)
    argv = ["create", "--bundle", str(bundle), "id"]
    proc = run_shim(argv, shim_env(conf), cwd=tmp_path)
    lines = log.read_text().splitlines() if log.exists() else []
    return proc, raw, (bundle / "config.json").read_bytes(), lines


def test_secure_gate_says_the_ignored_env_request_in_one_log_line(tmp_path):
    proc, raw, after, lines = _secure_create(tmp_path, ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=all"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "fake-runc",
        "create",
        "--bundle",
        str(tmp_path / "bundle"),
        "id",
    ]
    assert after == raw  # no GPU given, the spec untouched
    (line,) = [ln for ln in lines if "NVIDIA_VISIBLE_DEVICES" in ln]
    assert " info " in line and "GPU request ignored: NVIDIA_VISIBLE_DEVICES=all " in line
    assert "accept-envvar-unprivileged = false" in line
    assert len(lines) == 1, lines


def test_secure_gate_line_is_bounded_whatever_the_value(tmp_path):
    value = "x" * 5000 + "\n" + "y" * 4999
    proc, raw, after, lines = _secure_create(tmp_path, [f"NVIDIA_VISIBLE_DEVICES={value}"])
    assert proc.returncode == 0, proc.stderr
    assert after == raw
    (line,) = lines  # the newline did not get through: one line
    shown = line.split("NVIDIA_VISIBLE_DEVICES=", 1)[1].split(" in an unprivileged")[0]
    assert shown == "x" * 200 + "... (10000 characters)"
    assert len(line) < 600


def test_secure_gate_names_a_legacy_cuda_version(tmp_path):
    _, raw, after, lines = _secure_create(tmp_path, ["CUDA_VERSION=11.8"])
    assert after == raw
    (line,) = lines
    assert "GPU request ignored: CUDA_VERSION=11.8 " in line


@pytest.mark.parametrize(
    "env, accept, privileged",
    [
        (["NVIDIA_VISIBLE_DEVICES=void"], "false", False),  # asks for nothing
        (["NVIDIA_VISIBLE_DEVICES="], "false", False),
        (["NVIDIA_VISIBLE_DEVICES=all"], "false", True),  # privileged: read
        (["NVIDIA_VISIBLE_DEVICES=all"], "true", False),  # open: read
    ],
)
def test_no_ignored_line_where_the_env_is_read_or_asks_nothing(
    tmp_path, monkeypatch, disc, devroot, env, accept, privileged
):
    from gpunode.runtime import request as request_mod

    cfg = config.RuntimeConfig(accept_envvar_unprivileged=accept == "true", dev_root=str(devroot))
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    caps = {"capabilities": {"bounding": ["CAP_SYS_ADMIN"]}} if privileged else {}
    bundle, _ = make_bundle(tmp_path, env)
    if caps:
        spec = json.loads((bundle / "config.json").read_text())
        spec["process"].update(caps)
        (bundle / "config.json").write_text(json.dumps(spec))
    logged = []
    spec_bundle.modify_bundle(str(bundle), cfg, lambda lvl, msg: logged.append(msg))
    assert not [m for m in logged if "GPU request ignored" in m], logged
    assert (
        request_mod.ignored_note(request_mod.parse_request(env, privileged=privileged, cfg=cfg))
        is None
    )
