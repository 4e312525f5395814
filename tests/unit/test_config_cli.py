"""runtime.toml, `gpunode explain`, `gpunode runtime configure`, the nvidia hook stand-in."""

from __future__ import annotations

import json
import os

import pytest

from gpunode import cli, install
from gpunode.nvidia.facts import GpuFacts, NodeFacts
from gpunode.runtime import discovery, shim
from gpunode.runtime.discovery import Discovery, DriverFiles

GPU = GpuFacts(
    0, 0, "GPU-00000000-0000-4000-8000-000000000000", "00000000:10:00.0", "Tesla T4", "tesla", "7.5"
)


@pytest.fixture
def fake_node(tmp_path, monkeypatch):
    import os
    import stat

    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    dev = tmp_path / "dev"
    dev.mkdir()
    os.mknod(dev / "nvidiactl", stat.S_IFCHR | 0o666, os.makedev(195, 255))
    os.mknod(dev / "nvidia0", stat.S_IFCHR | 0o666, os.makedev(195, 0))
    cfg_file = tmp_path / "runtime.toml"
    cfg_file.write_text(f'dev-root = "{tmp_path}"\ncache-file = "{tmp_path}/cache.json"\n')
    disc = Discovery(
        NodeFacts("535.261.03", "12.2", (GPU,)),
        DriverFiles(libraries={"utility": ["/usr/lib/libnvidia-ml.so.535.261.03"]}),
        key={},
    )
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    return cfg_file


def test_explain_gpu_request(fake_node, capsys):
    rc = cli.main(
        ["explain", "--config", str(fake_node), "--env", "NVIDIA_VISIBLE_DEVICES=0", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["gpu_container"] is True and out["selected"][0]["uuid"] == GPU.uuid
    assert [d["path"] for d in out["edits"]["devices"]] == ["/dev/nvidiactl", "/dev/nvidia0"]


def test_explain_human_and_errors(fake_node, capsys):
    assert cli.main(["explain", "--config", str(fake_node)]) == 0
    assert "not a GPU container" in capsys.readouterr().out
    rc = cli.main(["explain", "--config", str(fake_node), "--env", "NVIDIA_VISIBLE_DEVICES=3"])
    assert rc == 1
    assert "error: unknown device '3'" in capsys.readouterr().out
    rc = cli.main(
        [
            "explain",
            "--config",
            str(fake_node),
            "--env",
            "NVIDIA_VISIBLE_DEVICES=all",
            "--env",
            "NVIDIA_REQUIRE_CUDA=cuda>=12.4",
        ]
    )
    assert rc == 1 and "unsatisfied condition: cuda>=12.4" in capsys.readouterr().out
    assert cli.main(["explain", "--env", "NOEQUALS"]) == 2


def test_runtime_configure_docker_json(tmp_path, capsys):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-driver": "journald"}')
    args = ["runtime", "configure", "docker", "--config", str(daemon), "--set-as-default", "--json"]
    assert cli.main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["changed"] is True
    data = json.loads(daemon.read_text())
    assert data["default-runtime"] == "gpunode" and data["log-driver"] == "journald"
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is False


def test_runtime_configure_bad_json_is_one_line(tmp_path, capsys):
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{nope")
    assert cli.main(["runtime", "configure", "docker", "--config", str(daemon)]) == 2  # bad input
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"gpunode: error: {daemon}: not valid JSON (line 1 column 2: Expecting property name "
        "enclosed in double quotes); left unchanged"
    ]
    assert daemon.read_text() == "{nope" and os.listdir(tmp_path) == ["daemon.json"]


def test_runtime_configure_missing_containerd_is_a_failure_not_bad_input(
    tmp_path, capsys, monkeypatch
):
    from gpunode import engines

    monkeypatch.setattr(engines, "CONTAINERD", "no-such-containerd")
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "50-ops.toml").write_text("version = 2\n")
    main = tmp_path / "config.toml"
    args = ["runtime", "configure", "containerd", "--config", str(main)]
    assert cli.main([*args, "--drop-in-dir", str(tmp_path / "conf.d")]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"gpunode: error: {main}: no-such-containerd not")


def test_runtime_configure_dangling_symlink_is_bad_input(tmp_path, capsys):
    daemon = tmp_path / "daemon.json"
    daemon.symlink_to(tmp_path / "gone" / "daemon.json")
    assert cli.main(["runtime", "configure", "docker", "--config", str(daemon)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"gpunode: error: {daemon}: symbolic link to {tmp_path}/gone/daemon.json, which does "
        "not exist; create the target or remove the link; left unchanged"
    ]
    assert not (tmp_path / "gone").exists()


def test_install_links_respects_nvidia_toolkit(tmp_path, monkeypatch):
    bindir = tmp_path / "venv-bin"
    bindir.mkdir()
    prefix = tmp_path / "bin"
    monkeypatch.setattr(install.shutil, "which", lambda *a, **k: None)
    res = install.install_links(prefix, bindir)
    assert res["changed"] and (prefix / "nvidia-container-runtime-hook").is_symlink()
    assert install.install_links(prefix, bindir)["changed"] is False
    other = tmp_path / "nvidia"
    other.write_text("")
    prefix2 = tmp_path / "bin2"
    monkeypatch.setattr(install.shutil, "which", lambda *a, **k: str(other))
    res = install.install_links(prefix2, bindir)
    assert not (prefix2 / "nvidia-container-runtime-hook").exists()
    assert res["nvidia_toolkit_hook"] == str(other)


def _dispatch(tmp_path, argv, spec_text=None, config=False):
    import subprocess

    fake = tmp_path / "fakebin"
    fake.mkdir(exist_ok=True)
    for name in ("runc", "python-runtime"):
        f = fake / name
        f.write_text(f'#!/bin/sh\necho {name} "$@"\n')
        f.chmod(0o755)
    script = tmp_path / "gpunode-container-runtime"
    script.write_text(install.dispatcher(str(fake / "python-runtime")))
    bundle = tmp_path / "bundle"
    bundle.mkdir(exist_ok=True)
    if spec_text is not None:
        (bundle / "config.json").write_text(spec_text)
    conf = tmp_path / "runtime.toml"
    if config:
        conf.write_text("")
    argv = [a.replace("BUNDLE", str(bundle)) for a in argv]
    env = {"PATH": f"{fake}:/usr/bin:/bin", "GPUNODE_RUNTIME_CONFIG": str(conf)}
    out = subprocess.run(
        ["sh", str(script), *argv], capture_output=True, text=True, env=env, check=True
    ).stdout.split()
    return out[0]


PLAIN = json.dumps({"process": {"env": ["PATH=/bin"], "args": ["true"]}})
GPU_SPEC = json.dumps({"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}})


@pytest.mark.parametrize(
    ("argv", "spec", "config", "expect"),
    [
        (["start", "id"], None, False, "runc"),
        (
            [
                "--root",
                "/r",
                "--log",
                "/l",
                "--log-format",
                "json",
                "create",
                "--bundle",
                "BUNDLE",
                "id",
            ],
            PLAIN,
            False,
            "runc",
        ),
        (["create", "--bundle", "BUNDLE", "id"], GPU_SPEC, False, "python-runtime"),
        (["create", "-b=BUNDLE", "id"], GPU_SPEC, False, "python-runtime"),
        (["--log=create", "start", "create"], None, False, "runc"),  # "create" as a value/id
        (["--root", "create", "delete", "x"], None, False, "runc"),
        (["create", "--bundle", "BUNDLE", "id"], None, False, "python-runtime"),  # unreadable
        (
            ["create", "--bundle", "BUNDLE", "id"],
            json.dumps({"annotations": {"x": "y"}}),
            True,
            "python-runtime",
        ),
        (["start", "id"], None, True, "python-runtime"),  # runtime.toml may name runtimes
        # NVIDIA's jit-CDI names and unknown NVIDIA kinds reach Python (which selects GPUs
        # or refuses them), from the env and from cdi.k8s.io annotations
        *(
            (["create", "--bundle", "BUNDLE", "id"], json.dumps(spec), False, "python-runtime")
            for name in ("runtime.nvidia.com/gpu=all", "nvidia.com/foo=1")
            for spec in (
                {"process": {"env": [f"NVIDIA_VISIBLE_DEVICES={name}"]}},
                {"process": {"env": []}, "annotations": {"cdi.k8s.io/gpu": name}},
            )
        ),
    ],
)
def test_sh_dispatcher_matches_the_python_runtime(tmp_path, argv, spec, config, expect):
    assert _dispatch(tmp_path, argv, spec, config) == expect
    if expect == "runc" and not config:
        # the Python runtime would have made the same decision
        parsed = shim.parse_args(["rt", *argv])
        assert not parsed[0] or shim.surely_not_gpu(spec.encode(), config)


def test_cdi_generate_install_uses_the_first_spec_dir(fake_node, tmp_path, capsys):
    with open(fake_node, "a") as fh:
        fh.write(f'cdi-spec-dirs = ["{tmp_path}/etc-cdi", "{tmp_path}/run-cdi"]\n')
    args = ["cdi", "generate", "--config", str(fake_node), "--install", "--json"]
    assert cli.main(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["path"] == f"{tmp_path}/etc-cdi/nvidia.yaml" and out["changed"] is True
    assert cli.main(args) == 0
    assert json.loads(capsys.readouterr().out)["changed"] is False
    assert cli.main([*args, "--output", "/x.yaml"]) == 2






