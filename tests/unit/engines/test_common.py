"""The file rules both engines follow: the operator's original kept as the backup, dangling
symlinks refused, concurrent runs serialized."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpunode.engines.common import EngineConfigError
from gpunode.engines.containerd import configure_containerd
from gpunode.engines.docker import configure_docker

from .fakes import BARRIER, DUMP, ctd, dangling, fake_containerd, load, read_json


def test_docker_backup_keeps_the_operators_original(tmp_path):
    p = tmp_path / "daemon.json"
    original = '{"a": 1}'
    p.write_text(original)
    first = configure_docker(str(p))
    backup = Path(first.backup)
    assert backup.read_text() == original
    second = configure_docker(str(p), cdi=True)  # a second changing run
    third = configure_docker(str(p), set_default=True)  # and a third
    assert second.changed and third.changed
    assert second.backup == third.backup == str(backup)
    assert backup.read_text() == original  # never overwritten with gpunode's own output
    assert read_json(p)["features"] == {"cdi": True} and read_json(p)["default-runtime"]
    backup.unlink()  # the operator asks for a new backup
    r = configure_docker(str(p), runtime_name="other")
    assert Path(r.backup).read_text() == third.content


def test_containerd_main_backup_keeps_the_operators_original(tmp_path):
    main, conf_d = ctd(tmp_path, "version = 2\n# ops\n")
    first = configure_containerd(str(main), drop_in_dir=str(conf_d))
    main.write_text("version = 2\n# ops, edited\n")  # someone drops the imports line
    second = configure_containerd(str(main), drop_in_dir=str(conf_d))
    assert second.changed and second.backup == first.backup
    assert Path(first.backup).read_text() == "version = 2\n# ops\n"


def test_docker_dangling_symlink_refused(tmp_path):
    link, target = dangling(tmp_path, "daemon.json")
    for dry_run in (False, True):
        with pytest.raises(EngineConfigError) as exc:
            configure_docker(str(link), dry_run=dry_run)
        msg = str(exc.value)
        assert "\n" not in msg
        assert msg.startswith(f"{link}: symbolic link to {target}, which does not exist")
        assert not (tmp_path / "elsewhere").exists()  # no directory made for the target
        assert link.is_symlink() and os.listdir(link.parent) == ["daemon.json"]


def test_containerd_dangling_symlinks_refused(tmp_path):
    link, target = dangling(tmp_path, "config.toml")
    conf_d = tmp_path / "etc" / "conf.d"
    with pytest.raises(EngineConfigError, match=f"^{link}: symbolic link to {target}, which"):
        configure_containerd(str(link), drop_in_dir=str(conf_d))
    link.unlink()
    conf_d.mkdir()
    (conf_d / "99-gpunode.toml").symlink_to(tmp_path / "elsewhere" / "drop" / "x.toml")
    with pytest.raises(EngineConfigError, match=f"^{conf_d}/99-gpunode.toml: symbolic link"):
        configure_containerd(str(link), drop_in_dir=str(conf_d))
    assert not (tmp_path / "elsewhere").exists() and not link.exists()


def test_docker_parent_is_a_dangling_symlink(tmp_path):
    etc = tmp_path / "etc"
    (etc).symlink_to(tmp_path / "elsewhere" / "etc")
    with pytest.raises(EngineConfigError) as exc:
        configure_docker(str(etc / "docker" / "daemon.json"))
    assert str(exc.value).startswith(f"{etc}: symbolic link to {tmp_path}/elsewhere/etc, which")
    assert not (tmp_path / "elsewhere").exists()
    etc.unlink()
    etc.write_text("a file")
    with pytest.raises(EngineConfigError) as exc:
        configure_docker(str(etc / "docker" / "daemon.json"))
    assert str(exc.value) == f"{etc}/docker: cannot create the directory (Not a directory)"


FAKE_DOCKERD_SLOW = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Docker version 26.1.5, build 411e817"; exit 0; fi
{barrier}
exit 0
"""


@pytest.mark.parametrize("engine", ["docker", "containerd"])
def test_concurrent_runs_keep_both_changes(tmp_path, engine):
    """Two real `gpunode runtime configure` processes, one --set-as-default, one --cdi: both
    read the file, then (without the lock) wait for each other in dockerd --validate or
    containerd config dump, so the second replace would drop the first's change."""
    barrier = BARRIER.format(dir=tmp_path / "barrier")
    (tmp_path / "barrier").mkdir()
    if engine == "docker":
        exe = tmp_path / "bin" / "dockerd"
        exe.parent.mkdir()
        exe.write_text(FAKE_DOCKERD_SLOW.format(barrier=barrier))
        exe.chmod(0o755)
        config = tmp_path / "daemon.json"
        config.write_text('{"log-driver": "journald"}\n')
        extra = []
    else:
        fake_containerd(tmp_path, dump=DUMP, barrier=barrier)
        config, conf_d = ctd(tmp_path, "version = 2\n")
        extra = ["--drop-in-dir", str(conf_d)]
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    cli = [sys.executable, "-m", "gpunode", "runtime", "configure", engine]
    cli += ["--config", str(config), *extra]
    runs = [
        subprocess.Popen([*cli, flag], env=env, stderr=subprocess.PIPE, text=True)
        for flag in ("--set-as-default", "--cdi")
    ]
    for proc in runs:
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
    assert len(os.listdir(tmp_path / "barrier")) == 2  # both really got to the slow step
    if engine == "docker":
        data = read_json(config)
        assert data["default-runtime"] == "gpunode" and data["features"] == {"cdi": True}
        assert data["log-driver"] == "journald"
        assert sorted(os.listdir(tmp_path)) == sorted(
            ["barrier", "bin", "daemon.json", "daemon.json.gpunode-backup"]
        )  # no lock file left behind
    else:
        cri = load(conf_d / "99-gpunode.toml")["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri["containerd"]["default_runtime_name"] == "gpunode"
        assert cri["enable_cdi"] is True
        assert not (config.parent / "config.toml.gpunode-lock").exists()
