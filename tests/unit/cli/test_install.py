"""`gpunode runtime install-links`: the links, NVIDIA's hook respected, and the sh first
stage deciding as the Python runtime does."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from gpunode.cli import install
from gpunode.runtime import shim


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
    env = {
        "PATH": f"{fake}:/usr/bin:/bin",
        "GPUNODE_RUNTIME_CONFIG": str(conf),
        "GPUNODE_RUNTIME_CONFIG_CACHE": os.environ["GPUNODE_RUNTIME_CONFIG_CACHE"],
    }
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
