"""gpunode's virtualenv from the wheels: installed only when the wheels differ from the ones it
was installed from."""

from __future__ import annotations

import json
import os

import pytest

from gpunode.cli.main import main as cli_main
from gpunode.provision import venv


@pytest.fixture
def fake_pip(monkeypatch):
    calls = []

    def run(argv, what, hint=""):
        calls.append(argv)
        if argv[1:3] == ["-m", "venv"]:
            os.makedirs(argv[-1] + "/bin", exist_ok=True)
            open(argv[-1] + "/bin/python", "w").close()
        if argv[1:] == ["runtime", "install-links", "--prefix", argv[4], "--json"]:
            return json.dumps({"changed": False, "changes": []})
        return ""

    monkeypatch.setattr(venv, "_run", run)
    return calls


def test_install_only_when_the_wheels_differ(tmp_path, fake_pip):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "gpunode-0.1.0-py3-none-any.whl").write_bytes(b"one")
    target = tmp_path / "venv"
    out = venv.install(target, wheels, tmp_path / "bin")
    assert out["changed"] is True
    assert [c[1:3] for c in fake_pip[:2]] == [["-m", "venv"], ["-m", "pip"]]
    stamp = (target / venv.STAMP).read_text()
    fake_pip.clear()
    again = venv.install(target, wheels, tmp_path / "bin")
    assert again["changed"] is False and again["changes"] == []
    assert [c[1:3] for c in fake_pip] == [["runtime", "install-links"]]  # no venv, no pip
    (wheels / "gpunode-0.1.0-py3-none-any.whl").write_bytes(b"two")
    fake_pip.clear()
    dry = venv.install(target, wheels, tmp_path / "bin", dry_run=True)
    assert dry["changed"] is True and fake_pip == []
    assert (target / venv.STAMP).read_text() == stamp  # a dry run writes nothing
    assert venv.install(target, wheels, tmp_path / "bin")["changed"] is True
    assert fake_pip[0][1:3] == ["-m", "pip"]  # the venv exists: pip only


def test_install_without_wheels_says_so(tmp_path, capsys):
    (tmp_path / "w").mkdir()
    assert cli_main(["provision", "install", "--wheels", str(tmp_path / "w"), "--venv",
                     str(tmp_path / "v"), "--json"]) == 1  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert out["message"].startswith(f"no gpunode wheels in {tmp_path / 'w'}")
