"""`gpunode runtime configure`: JSON for Ansible, one-line errors with the right exit code."""

from __future__ import annotations

import json
import os

from gpunode.cli import main as cli


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
    from gpunode.engines import containerd

    monkeypatch.setattr(containerd, "CONTAINERD", "no-such-containerd")
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
