"""`gpunode explain` on a fake node."""

from __future__ import annotations

import json

from gpunode.cli import main as cli

from ..conftest import GPU


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


def _mig_node(tmp_path, monkeypatch):
    import os

    import pytest

    from gpunode.runtime import discovery

    from ..runtime.mig_node import discovery_of, make_dev_root, make_driver_root

    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    driver = make_driver_root(tmp_path / "driver")
    make_dev_root(tmp_path)
    disc = discovery_of(driver)
    monkeypatch.setattr(discovery, "load", lambda *a, **k: disc)
    cfg = tmp_path / "runtime.toml"
    cfg.write_text(
        f'dev-root = "{tmp_path}"\ndriver-root = "{driver}"\ncache-file = "{tmp_path}/c.json"\n'
    )
    return cfg


def test_explain_mig_devices(tmp_path, monkeypatch, capsys):
    from ..runtime.mig_node import CAPS_MAJOR, GPUS, cap_minor

    cfg = _mig_node(tmp_path, monkeypatch)
    m = GPUS[0].mig[1]
    argv = ["explain", "--config", str(cfg), "--env", "NVIDIA_VISIBLE_DEVICES=0:1,1"]
    assert cli.main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    gi, ci = cap_minor("gpu0/mig/gi7/access"), cap_minor("gpu0/mig/gi7/ci0/access")
    assert out["mig"] == [
        {
            "name": "0:1",
            "uuid": m.uuid,
            "parent": {
                "index": 0,
                "uuid": GPUS[0].uuid,
                "pci_bus_id": GPUS[0].pci_bus_id,
                "minor": 0,
            },
            "gi": 7,
            "ci": 0,
            "profile": "1g.10gb",
            "gi_cap": {
                "path": f"/dev/nvidia-caps/nvidia-cap{gi}",
                "major": CAPS_MAJOR,
                "minor": gi,
            },
            "ci_cap": {
                "path": f"/dev/nvidia-caps/nvidia-cap{ci}",
                "major": CAPS_MAJOR,
                "minor": ci,
            },
        }
    ]
    assert [g["index"] for g in out["selected"]] == [1, 0]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert (
        f"mig 0:1: {m.uuid} on gpu 0 ({GPUS[0].uuid}), gi 7 ci 0 1g.10gb, caps "
        f"/dev/nvidia-caps/nvidia-cap{gi} /dev/nvidia-caps/nvidia-cap{ci}\n"
    ) in text
    assert f"device /dev/nvidia-caps/nvidia-cap{ci} (c {CAPS_MAJOR}:{ci}, mode 444)" in text
    # an unknown MIG id: the container's one-line error
    argv = ["explain", "--config", str(cfg), "--env", "NVIDIA_VISIBLE_DEVICES=0:9"]
    assert cli.main(argv) == 1
    assert "error: unknown MIG device '0:9' requested; accepted: " in capsys.readouterr().out
    assert cli.main([*argv, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["error"].startswith("unknown MIG device '0:9'")
