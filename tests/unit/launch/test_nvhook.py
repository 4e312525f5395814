"""The nvidia-container-runtime-hook stand-in: a clear failure, NVIDIA's hook installed later
is not shadowed, never chained to itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gpunode.launch import nvhook

SRC = Path(__file__).resolve().parents[3] / "src"


def test_nvidia_hook_stand_in_fails_clearly(capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(nvhook, "NVIDIA_DIRS", ())  # no NVIDIA toolkit here
    monkeypatch.setenv("PATH", str(tmp_path))
    assert nvhook.main(["nvidia-container-runtime-hook", "prestart"]) == 1
    assert "runtime is not gpunode" in capsys.readouterr().err
    assert nvhook.main(["nvidia-container-runtime-hook", "poststop"]) == 0


# ------------------------------------- NVIDIA's hook installed after gpunode ("Also")


def _stand_in(path):
    """gpunode's stand-in as install-links/pip put it on PATH: a launcher of gpunode.launch.nvhook."""

    src = SRC
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(src)!r})\n"
        "from gpunode.launch.nvhook import main\nsys.exit(main())\n"
    )
    path.chmod(0o755)
    return path


def _fake_nvidia_hook(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        '#!/bin/sh\necho "nvidia-hook $*"; cat; echo; echo "chained=$GPUNODE_NVHOOK_CHAINED"\n'
    )
    path.chmod(0o755)
    return path


def test_nvidia_toolkit_installed_later_is_not_shadowed(tmp_path):
    """gpunode's link comes first on PATH (installed before NVIDIA's toolkit): a runc
    container with --gpus still gets NVIDIA's own hook, with the same argv and stdin."""

    ours = _stand_in(tmp_path / "usr-local-bin" / nvhook.NAME)
    _fake_nvidia_hook(tmp_path / "usr-bin" / nvhook.NAME)
    env = {"PATH": f"{ours.parent}:{tmp_path / 'usr-bin'}:/usr/bin:/bin"}
    proc = subprocess.run(
        [str(ours), "prestart"],
        input='{"pid": 42, "bundle": "/b"}',
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "nvidia-hook prestart",
        '{"pid": 42, "bundle": "/b"}',
        "chained=1",
    ]


def test_nvidia_hook_stand_in_never_chains_to_itself(tmp_path, monkeypatch, capsys):
    # Other copies of gpunode's stand-in (another venv, a copy) are not NVIDIA's hook.
    monkeypatch.setattr(nvhook, "NVIDIA_DIRS", ())
    monkeypatch.setenv("PATH", f"{tmp_path / 'a'}:{tmp_path / 'b'}")
    _stand_in(tmp_path / "a" / nvhook.NAME)
    _stand_in(tmp_path / "b" / nvhook.NAME)
    assert nvhook.nvidia_hook() is None
    assert nvhook.main([nvhook.NAME, "prestart"]) == 1
    assert "runtime is not gpunode" in capsys.readouterr().err
    # and once chained, never again (whatever is on PATH)
    nvidia = _fake_nvidia_hook(tmp_path / "c" / nvhook.NAME)
    monkeypatch.setenv("PATH", str(nvidia.parent))
    assert nvhook.nvidia_hook() == str(nvidia)
    monkeypatch.setenv(nvhook.CHAINED, "1")
    assert nvhook.main([nvhook.NAME, "prestart"]) == 1
    # NVIDIA's install locations are searched after PATH
    monkeypatch.setenv("PATH", str(tmp_path / "a"))
    monkeypatch.setattr(nvhook, "NVIDIA_DIRS", (str(nvidia.parent),))
    assert nvhook.nvidia_hook() == str(nvidia)
