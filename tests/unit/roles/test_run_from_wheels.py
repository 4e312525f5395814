"""gpunode_install's files/run-from-wheels.py, the launcher gpu_preflight and gpunode_install
run gpunode with: with the controller's sums it runs only from exactly those wheels, and
exits 3 otherwise (the role then copies them), so a changed wheel is never left behind."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
LAUNCHER = (ROOT / "roles/gpunode_install/files/run-from-wheels.py").read_text()
MAIN = "import sys\ndef main():\n    print('ran', sys.argv[1:])\n    return 0\n"


def wheel(path: Path, marker: str = "") -> str:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("gpunode/__init__.py", "")
        z.writestr("gpunode/cli/__init__.py", "")
        z.writestr("gpunode/cli/main.py", MAIN + marker)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run(wheel_dir: Path, sums: dict | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "GPUNODE_WHEELS_SHA256"}
    if sums is not None:
        env["GPUNODE_WHEELS_SHA256"] = json.dumps(sums)
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(wheel_dir), "provision", "preflight"],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip


def test_runs_from_exactly_the_controllers_wheels(tmp_path):
    sums = {"gpunode-0.1.0-py3-none-any.whl": wheel(tmp_path / "gpunode-0.1.0-py3-none-any.whl")}
    ok = run(tmp_path, sums)
    assert ok.returncode == 0 and ok.stdout.strip() == "ran ['provision', 'preflight']"
    # a wheel whose content differs (the controller built a new one)
    changed = run(tmp_path, {"gpunode-0.1.0-py3-none-any.whl": "0" * 64})
    assert changed.returncode == 3
    assert (
        json.loads(changed.stdout)["message"]
        == f"the wheels in {tmp_path} are not the controller's"
    )
    # a wheel the controller no longer has
    wheel(tmp_path / "old-0.0.1-py3-none-any.whl", "# old")
    assert run(tmp_path, sums).returncode == 3
    # missing ones
    (tmp_path / "old-0.0.1-py3-none-any.whl").unlink()
    (tmp_path / "gpunode-0.1.0-py3-none-any.whl").unlink()
    assert run(tmp_path, sums).returncode == 3
    # without sums (later roles): it just runs from what is there
    wheel(tmp_path / "gpunode-0.1.0-py3-none-any.whl")
    assert run(tmp_path, None).returncode == 0
