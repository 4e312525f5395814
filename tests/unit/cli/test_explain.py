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
