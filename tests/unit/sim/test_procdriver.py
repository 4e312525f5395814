"""The simulator's procdriver as the node's runc/crun: what it hands the real runtime.

The real runtime is replaced by a script that prints its arguments; the mount the hook
makes is exercised on simulated nodes (tests/integration/test_sim_node.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from gpunode.sim import procdriver
from gpunode.sim.apply import Paths, Result, apply_procdriver

FAKE_REAL = '#!/bin/sh\necho "ARGS $*"\n'


@pytest.fixture(scope="module")
def binary(tmp_path_factory) -> Path:
    return procdriver.build(tmp_path_factory.mktemp("procdriver") / "gpunode-sim-procdriver")


@pytest.fixture
def runc(binary, tmp_path) -> Path:
    """procdriver installed as tmp/runc in front of a fake real runc."""
    wrapper = tmp_path / "runc"
    wrapper.write_bytes(binary.read_bytes())
    wrapper.chmod(0o755)
    real = tmp_path / "runc.gpunode-real"
    real.write_text(FAKE_REAL)
    real.chmod(0o755)
    return wrapper


def run(runc: Path, *args: str, cwd: Path | None = None) -> list[str]:
    proc = subprocess.run(
        [str(runc), *args], capture_output=True, text=True, cwd=cwd, check=True, timeout=30
    )
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("ARGS "))
    return line.split()[1:]


SPECS = {
    "hooks-with-prestart": {
        "root": {"path": "rootfs", "readonly": True},
        "hooks": {"prestart": [{"path": "/usr/bin/other"}], "createContainer": []},
        "process": {"args": ["sh"]},
    },
    "no-hooks": {"ociVersion": "1.0.2", "root": {"path": "rootfs"}},
    "hooks-without-prestart": {"hooks": {"poststop": [{"path": "/x"}]}, "root": {"path": "rootfs"}},
    "empty-prestart": {"root": {"path": "rootfs"}, "hooks": {"prestart": []}},
    "absolute-root": {"root": {"path": '/srv/ro"ot fs'}, "hooks": {}},
}


@pytest.mark.parametrize("case", sorted(SPECS))
def test_create_gets_the_hook_first_and_the_engines_spec_stays(runc, tmp_path, case):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    original = json.dumps(SPECS[case], indent=2).encode()
    (bundle / "config.json").write_bytes(original)
    args = run(runc, "--root", "/run/x", "--log=/tmp/l", "create", "--bundle", str(bundle), "c1")
    shadow = bundle / ".gpunode-sim"
    assert args == ["--root", "/run/x", "--log=/tmp/l", "create", "--bundle", str(shadow), "c1"]
    assert (bundle / "config.json").read_bytes() == original  # byte for byte
    spec = json.loads((shadow / "config.json").read_text())
    rootfs = SPECS[case]["root"]["path"]
    rootfs = rootfs if rootfs.startswith("/") else f"{bundle}/{rootfs}"
    assert spec["root"]["path"] == rootfs
    first = spec["hooks"]["prestart"][0]
    assert first == {
        "path": str(runc),
        "args": ["gpunode-sim-procdriver", "--gpunode-sim-hook", rootfs],
    }
    # everything else is the engine's
    want = json.loads(original)
    want["root"]["path"] = rootfs
    want.setdefault("hooks", {}).setdefault("prestart", []).insert(0, first)
    assert spec == want


def test_bundle_from_cwd_and_short_option(runc, tmp_path):
    bundle = tmp_path / "b"
    bundle.mkdir()
    (bundle / "config.json").write_text('{"root":{"path":"r"}}')
    assert run(runc, "run", "c2", cwd=bundle) == ["run", "--bundle", f"{bundle}/.gpunode-sim", "c2"]
    assert run(runc, "create", "-b", "b", "c3", cwd=tmp_path)[:3] == [
        "create",
        "--bundle",
        f"{tmp_path}/b/.gpunode-sim",
    ]


@pytest.mark.parametrize(
    "args", [["--version"], ["start", "c1"], ["state", "c1"], ["delete", "-f", "c1"], ["features"]]
)
def test_other_calls_pass_through_untouched(runc, tmp_path, args):
    assert run(runc, *args, cwd=tmp_path) == args
    assert not list(tmp_path.glob("**/.gpunode-sim"))


def test_spec_it_cannot_read_starts_the_container_without_the_tree(runc, tmp_path):
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "config.json").write_text('{"root": {"path": "\\u0072ootfs"}}')  # an escape
    proc = subprocess.run(
        [str(runc), "create", "--bundle", str(bundle), "c4"], capture_output=True, text=True
    )
    assert proc.stdout.split()[1:] == ["create", "--bundle", str(bundle), "c4"]
    assert "gpunode-sim-procdriver: warning: no driver tree" in proc.stderr


def test_missing_real_runtime_is_one_line(runc, tmp_path):
    (tmp_path / "runc.gpunode-real").unlink()
    proc = subprocess.run([str(runc), "--version"], capture_output=True, text=True)
    assert proc.returncode == 127
    assert proc.stderr.strip() == (
        f"gpunode-sim-procdriver: cannot run the real runtime {runc}.gpunode-real: "
        "No such file or directory"
    )


def test_apply_puts_it_in_front_of_each_installed_runtime(binary, tmp_path):
    runc, crun, absent = tmp_path / "runc", tmp_path / "crun", tmp_path / "youki"
    runc.write_text("real runc")
    crun.write_text("real crun")
    paths = Paths(procdriver=binary, runtimes=(runc, crun, absent), real_system=False)
    res = Result()
    apply_procdriver(paths, res)
    assert runc.read_bytes() == crun.read_bytes() == binary.read_bytes()
    assert (tmp_path / "runc.gpunode-real").read_text() == "real runc"
    assert (tmp_path / "crun.gpunode-real").read_text() == "real crun"
    assert not absent.exists() and not (tmp_path / "youki.gpunode-real").exists()
    assert len(res.changed) == 4
    again = Result()
    apply_procdriver(paths, again)
    assert again.changed == []
    assert (tmp_path / "runc.gpunode-real").read_text() == "real runc"
    # without runtimes to wrap the binary is not even needed
    apply_procdriver(Paths(procdriver=tmp_path / "missing", real_system=False), Result())
