from __future__ import annotations

import json
import os

from gpunode.validate import engine
from gpunode.validate.expect import Expectations

INFO = ({"ServerVersion": "26.1.5", "Runtimes": {"runc": {}, "gpunode": {}},
         "DefaultRuntime": "gpunode"}, "")  # fmt: skip


def run(tmp_path, daemon, info=INFO, **kw):
    path = tmp_path / "daemon.json"
    if daemon is not None:
        path.write_text(daemon if isinstance(daemon, str) else json.dumps(daemon))
    exe = tmp_path / "rt"
    exe.write_text("#!/bin/sh\n")
    os.chmod(exe, 0o755)
    _, checks = engine.evaluate(Expectations(**kw), daemon_json=str(path), info=info)
    return {c.id: c for c in checks}, str(exe)


def registered(tmp_path, default=True):
    exe = tmp_path / "rt"
    d = {"runtimes": {"gpunode": {"path": str(exe)}}, "log-level": "info"}
    if default:
        d["default-runtime"] = "gpunode"
    return d


def test_registered_default_and_running(tmp_path):
    c, _ = run(tmp_path, registered(tmp_path), runtime_default=True)
    assert {k: v.status for k, v in c.items()} == dict.fromkeys(engine.TITLES, "pass")
    assert c["engine.runtime_registered"].detail.endswith("the default runtime")


def test_invalid_daemon_json(tmp_path):
    c, _ = run(tmp_path, '{"runtimes": ')
    assert c["engine.daemon_json"].status == "fail"
    assert "not valid JSON (line 1 column" in c["engine.daemon_json"].detail
    assert c["engine.runtime_registered"].status == "skip"


def test_not_registered_or_not_loaded_or_not_default(tmp_path):
    c, _ = run(tmp_path, {"log-level": "info"})
    assert c["engine.runtime_registered"].status == "fail"
    assert "has no runtimes.gpunode.path" in c["engine.runtime_registered"].detail
    info = ({"ServerVersion": "26", "Runtimes": {"runc": {}}, "DefaultRuntime": "runc"}, "")
    c, _ = run(tmp_path, registered(tmp_path), info=info)
    assert (
        "does not know runtime 'gpunode': restart docker" in c["engine.runtime_registered"].detail
    )
    info = ({"ServerVersion": "26", "Runtimes": {"gpunode": {}}, "DefaultRuntime": "runc"}, "")
    c, _ = run(tmp_path, registered(tmp_path, default=False), info=info, runtime_default=True)
    assert c["engine.runtime_registered"].detail == "default runtime is 'runc', expected 'gpunode'"
    c, _ = run(tmp_path, registered(tmp_path, default=False), info=info)
    assert c["engine.runtime_registered"].status == "pass"  # default not expected


def test_registered_path_missing(tmp_path):
    c, _ = run(tmp_path, {"runtimes": {"gpunode": {"path": "/nonexistent/rt"}}})
    assert c["engine.runtime_registered"].detail == (
        "runtimes.gpunode.path /nonexistent/rt is missing or not executable"
    )


def test_engine_not_installed_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    data, why = engine.engine_info("docker")
    assert data is None and why.startswith("docker: command not found: no docker engine")
    c, _ = run(tmp_path, None, info=(data, why))
    assert c["engine.active"].status == "fail" and "\n" not in c["engine.active"].detail
    assert c["engine.daemon_json"].detail.endswith("absent (Docker's defaults)")


def test_engine_none_skips(tmp_path):
    c, _ = run(tmp_path, None, engine="none")
    assert {v.status for v in c.values()} == {"skip"}


def test_docker_cli_exit_0_with_server_errors_is_not_active(tmp_path, monkeypatch):
    fake = tmp_path / "docker"
    fake.write_text(
        '#!/bin/sh\necho \'{"ServerErrors":["Cannot connect to the Docker daemon at '
        'unix:///var/run/docker.sock. Is the docker daemon running?"],"ClientInfo":{}}\'\n'
    )
    os.chmod(fake, 0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    data, why = engine.engine_info("docker")
    assert data is None
    assert why == (
        "`docker info` failed: Cannot connect to the Docker daemon at "
        "unix:///var/run/docker.sock. Is the docker daemon running?"
    )
