"""playbooks/validate.yml and `gpunode report --run` on the controller, with local "nodes"
whose `gpunode validate` is a stand-in (fake_validate.py): expectations come from the
inventory variables, an unreachable node and one where validate cannot run are failed rows,
and the report lands under the report directory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
FAKE = Path(__file__).parent / "fake_validate.py"
BIN = Path(sys.executable).parent


def inventory(tmp_path: Path) -> Path:
    def local(name):
        return {
            "ansible_connection": "local",
            "gpunode_validate_cli": [sys.executable, str(FAKE), name],
        }

    hosts = {n: local(n) for n in ("n-a100", "n-t4", "n-broken")}
    hosts["n-down"] = {"ansible_host": "127.0.0.1", "ansible_port": 1, "ansible_connection": "ssh"}
    hosts["n-t4"] |= {"nvidia_driver_version": "550.163.01", "cuda_toolkit_versions": ["12.4"]}
    # no NVIDIA GPU (engine only, no gpunode): never asked to validate; engine check not wanted
    hosts["n-cpu"] = {"ansible_connection": "local", "gpunode_expected_gpus": 0,
                      "gpunode_validate_engine": "none"}  # fmt: skip
    doc = {
        "all": {
            "vars": {
                "ansible_python_interpreter": sys.executable,
                "nvidia_driver_version": "535.261.03",
                "cuda_toolkit_versions": ["11.8", "12.2"],
                "cuda_toolkit_compat_policy": "minor",
                "gpu_container_runtime_docker_default": True,
                "gpunode_expected_gpus": 4,
            },
            "children": {"gpu_nodes": {"hosts": hosts}},
        }
    }
    f = tmp_path / "hosts.yml"
    f.write_text(yaml.safe_dump(doc))
    return f


def env(tmp_path: Path) -> dict:
    return os.environ | {
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "PATH": f"{BIN}:{os.environ['PATH']}",
    }


def run(tmp_path: Path, *argv: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    """A controller command (ansible-playbook, gpunode) with the stand-in nodes."""
    return subprocess.run(
        [str(BIN / argv[0]), *argv[1:]],
        cwd=cwd, env=env(tmp_path), capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def playbook(tmp_path: Path, report_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    inv = str(inventory(tmp_path))
    out = f"gpunode_validate_report_dir={report_dir}"
    return run(tmp_path, "ansible-playbook", "-i", inv, "playbooks/validate.yml", "-e", out, *extra)


def report_run(tmp_path: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    inv = str(inventory(tmp_path))
    return run(
        tmp_path, "gpunode", "report", "--run", "-i", inv, "-o", str(out), *extra, cwd=tmp_path
    )


def calls(tmp_path: Path) -> dict[str, dict]:
    lines = (tmp_path / "calls.log").read_text().splitlines()
    return {d["node"]: d for d in map(json.loads, lines)}


def check_report(out: Path) -> dict:
    merged = json.loads((out / "report.json").read_text())
    nodes = {n["node"]: n for n in merged["nodes"]}
    assert set(nodes) == {"n-a100", "n-t4", "n-broken", "n-down", "n-cpu"}
    assert nodes["n-a100"]["status"] == "pass"
    cpu = nodes["n-cpu"]  # a row of skips saying why, not "could not run"
    assert cpu["status"] == "pass" and cpu["no_gpu"] and not cpu.get("error")
    assert {c["detail"] for c in cpu["checks"] if c["id"] != "node.reachable"} == {
        "no NVIDIA GPU: engine only"
    }
    assert nodes["n-down"]["unreachable"] and nodes["n-down"]["status"] == "fail"
    assert nodes["n-broken"]["checks"][-1]["id"] == "node.validate"
    assert (
        "docker is not installed on this node (rc 2)" in nodes["n-broken"]["checks"][-1]["detail"]
    )
    ecc = [c for c in nodes["n-t4"]["checks"] if c["status"] == "fail"]
    assert [(c["id"], c["gpu"]) for c in ecc] == [("gpu.ecc_uncorrectable", 1)]
    assert merged["summary"]["failed"] == ["n-broken", "n-down", "n-t4"]
    return merged


def test_validate_playbook_builds_the_report(tmp_path):
    out = tmp_path / "reports"
    proc = playbook(tmp_path, out, "-e", "gpunode_validate_fail=false")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"report: {out}/index.html" in proc.stdout
    check_report(out)
    argv = calls(tmp_path)
    a100 = argv["n-a100"]
    assert a100["argv"][:4] == ["validate", "--json", "--node", "n-a100"]
    assert a100["argv"][4] == "--vars" and len(a100["argv"]) == 6
    assert a100["vars"] == {
        "gpunode_expected_gpus": 4,
        "nvidia_driver_version": "535.261.03",
        "cuda_toolkit_versions": ["11.8", "12.2"],
        "cuda_toolkit_compat_policy": "minor",
        "gpu_container_runtime_docker_default": True,
    }
    assert argv["n-t4"]["vars"]["nvidia_driver_version"] == "550.163.01"
    assert argv["n-t4"]["vars"]["cuda_toolkit_versions"] == ["12.4"]
    assert not Path("/tmp/gpunode-validate-vars.n-a100.json").exists()  # removed after
    assert "n-down" not in argv and "n-cpu" not in argv


def test_validate_playbook_fails_after_writing_the_report_by_default(tmp_path):
    out = tmp_path / "r"
    proc = playbook(tmp_path, out)
    assert proc.returncode != 0 and (out / "index.html").exists()
    assert f"report: {out}/index.html" in proc.stdout  # printed before the failure
    assert "validation failed on n-broken, n-down, n-t4; see" in proc.stdout, proc.stdout[-2000:]


def test_validate_playbook_in_check_mode_validates_nothing(tmp_path):
    out = tmp_path / "r"
    proc = playbook(tmp_path, out, "--check")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert not out.exists() and not (tmp_path / "calls.log").exists()


def test_report_run_through_ansible_runner(tmp_path):
    out = tmp_path / "reports"
    proc = report_run(tmp_path, out)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # nodes failed: exit 1
    lines = proc.stdout.splitlines()
    progress = sorted(ln.split(":")[0] for ln in lines[:-2])
    assert progress == ["n-a100", "n-broken", "n-cpu", "n-down", "n-t4"], lines
    assert any(ln.startswith("n-down: unreachable: ") for ln in lines)
    assert any(ln.startswith("n-t4: FAILED (") for ln in lines)
    assert any(ln.startswith("n-a100: ok (") for ln in lines)
    assert any(ln.startswith("n-broken: could not run: gpunode: error: --engine") for ln in lines)
    assert lines[-1] == f"report: {out}/index.html"
    check_report(out)


def test_report_run_limit(tmp_path):
    extra = ["--limit", "n-a100"]
    out = tmp_path / "reports"
    proc = report_run(tmp_path, out, "-q", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == f"report: {out}/index.html\n"
    assert [n["node"] for n in json.loads((out / "report.json").read_text())["nodes"]] == ["n-a100"]
