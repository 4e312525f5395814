"""playbooks/validate.yml and `gpunode report --run` on the controller, with local "nodes"
whose `gpunode validate` is a stand-in (fake_validate.py) and stand-in engines for the nodes
without GPU: expectations come from the inventory variables (on validate's stdin), an
unreachable node and one where validate cannot run are failed rows, nodes without GPU rows of
skips with their engine check, one module run per node, and the report lands under the
report directory (the results, with gpunode_validate_results_dir, in one results file)."""

from __future__ import annotations

import json
import os
import re
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
    # no NVIDIA GPU, its engine asked (fake_engines: docker answers, podman does not)
    hosts["n-cpu-docker"] = {"ansible_connection": "local", "gpunode_expected_gpus": 0}
    hosts["n-cpu-podman"] = {"ansible_connection": "local", "gpunode_expected_gpus": 0,
                             "gpunode_validate_engine": "podman"}  # fmt: skip
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


def fake_engines(tmp_path: Path) -> Path:
    """`docker version` that answers 26.1.5 and `podman version` that cannot connect."""
    bindir = tmp_path / "engines"
    bindir.mkdir(exist_ok=True)
    for name, body in {
        "docker": 'echo "$@" >> "$FAKE_LOG.engine"; echo 26.1.5',
        "podman": "echo 'Error: cannot connect to Podman socket' >&2; exit 125",
    }.items():
        (bindir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bindir / name).chmod(0o755)
    return bindir


def env(tmp_path: Path) -> dict:
    return os.environ | {
        "FAKE_LOG": str(tmp_path / "calls.log"),
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "PATH": f"{fake_engines(tmp_path)}:{BIN}:{os.environ['PATH']}",
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


def recap(stdout: str) -> dict[str, dict[str, int]]:
    out = {}
    for m in re.finditer(r"^(\S+)\s*:\s*((?:\w+=\d+\s*)+)$", stdout, re.M):
        out[m[1]] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m[2])}
    return out


NODES = {"n-a100", "n-t4", "n-broken", "n-down", "n-cpu", "n-cpu-docker", "n-cpu-podman"}
FAILED = ["n-broken", "n-cpu-podman", "n-down", "n-t4"]


def check_report(out: Path) -> dict:
    merged = json.loads((out / "report.json").read_text())
    nodes = {n["node"]: n for n in merged["nodes"]}
    assert set(nodes) == NODES
    assert nodes["n-a100"]["status"] == "pass"
    cpu = nodes["n-cpu"]  # a row of skips saying why, not "could not run"
    assert cpu["status"] == "pass" and cpu["no_gpu"] and not cpu.get("error")
    assert {c["detail"] for c in cpu["checks"] if c["id"] != "node.reachable"} == {
        "no NVIDIA GPU: engine only"
    }
    # without GPU, engine asked: its answer is the row's one check, the rest skips saying why
    for name, status, detail in [
        ("n-cpu-docker", "pass", "docker 26.1.5 answers"),
        ("n-cpu-podman", "fail", "podman: Error: cannot connect to Podman socket (rc 125)"),
    ]:
        row = nodes[name]
        assert row["status"] == status and row["no_gpu"] and not row.get("error"), row
        by = {c["id"]: c for c in row["checks"]}
        assert (by["engine.active"]["status"], by["engine.active"]["detail"]) == (status, detail)
        others = {c["detail"] for c in row["checks"] if c["id"] not in ("node.reachable",
                                                                          "engine.active")}  # fmt: skip
        assert others == {"no NVIDIA GPU: engine only"}
    assert nodes["n-down"]["unreachable"] and nodes["n-down"]["status"] == "fail"
    assert nodes["n-broken"]["checks"][-1]["id"] == "node.validate"
    assert (
        "docker is not installed on this node (rc 2)" in nodes["n-broken"]["checks"][-1]["detail"]
    )
    ecc = [c for c in nodes["n-t4"]["checks"] if c["status"] == "fail"]
    assert [(c["id"], c["gpu"]) for c in ecc] == [("gpu.ecc_uncorrectable", 1)]
    assert merged["summary"]["failed"] == FAILED
    return merged


def test_validate_playbook_builds_the_report(tmp_path):
    out = tmp_path / "reports"
    proc = playbook(tmp_path, out, "-e", "gpunode_validate_fail=false")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"report: {out}/index.html" in proc.stdout
    check_report(out)
    argv = calls(tmp_path)
    a100 = argv["n-a100"]
    # the expectations come on standard input: no file on the node
    assert a100["argv"] == ["validate", "--json", "--node", "n-a100", "--vars", "-"]
    assert a100["vars"] == {
        "gpunode_expected_gpus": 4,
        "nvidia_driver_version": "535.261.03",
        "cuda_toolkit_versions": ["11.8", "12.2"],
        "cuda_toolkit_compat_policy": "minor",
        "gpu_container_runtime_docker_default": True,
    }
    assert argv["n-t4"]["vars"]["nvidia_driver_version"] == "550.163.01"
    assert argv["n-t4"]["vars"]["cuda_toolkit_versions"] == ["12.4"]
    assert set(argv) == {"n-a100", "n-t4", "n-broken"}  # not unreachable, not without GPU
    # the engine was asked on the one node without GPU that wants docker, as the play says
    engine = (tmp_path / "calls.log.engine").read_text().splitlines()
    assert engine == ["version --format {{.Server.Version}}"]
    # what it costs: on the nodes the validate command (or, without GPU, the engine's) and
    # nothing else; on the controller tasks run once, none looping over the nodes
    counts = recap(proc.stdout)
    assert set(counts) == NODES
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in counts.values()), counts
    controller = set(re.findall(r"\[(\S+) -> localhost\]", proc.stdout))
    assert len(controller) == 1, controller  # run_once: on behalf of one host
    per_node = {h: c["ok"] + c["skipped"] for h, c in counts.items() if h not in controller}
    assert per_node == dict.fromkeys(NODES - controller, 2), proc.stdout[-3000:]
    ran = {h: c["ok"] for h, c in counts.items() if h not in controller | {"n-cpu"}}
    assert ran == dict.fromkeys(NODES - controller - {"n-cpu"}, 1)  # one gpunode command each
    assert "(item=" not in proc.stdout


def test_validate_playbook_fails_after_writing_the_report_by_default(tmp_path):
    out = tmp_path / "r"
    proc = playbook(tmp_path, out)
    assert proc.returncode != 0 and (out / "index.html").exists()
    assert f"report: {out}/index.html" in proc.stdout  # printed before the failure
    assert f"validation failed on {', '.join(FAILED)}; see" in proc.stdout, proc.stdout[-2000:]


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
    assert progress == sorted(NODES), lines
    assert any(ln.startswith("n-down: unreachable: ") for ln in lines)
    assert any(ln.startswith("n-t4: FAILED (") for ln in lines)
    assert any(ln.startswith("n-a100: ok (") for ln in lines)
    assert any(ln.startswith("n-broken: could not run: gpunode: error: --engine") for ln in lines)
    assert lines[-1] == f"report: {out}/index.html"
    check_report(out)


def test_results_dir_keeps_every_nodes_result_for_gpunode_report(tmp_path):
    """gpunode_validate_results_dir: one results file there (and, with
    gpunode_validate_report=false, no report); `gpunode report DIR` builds the report."""
    kept, out = tmp_path / "results", tmp_path / "r"
    kept.mkdir()
    proc = playbook(tmp_path, out, "-e", f"gpunode_validate_results_dir={kept}",
                    "-e", "gpunode_validate_report=false")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert os.listdir(kept) == ["results.json"] and not out.exists()
    doc = json.loads((kept / "results.json").read_text())
    assert doc["schema"] == "gpunode.results/v1"
    assert sorted(r["node"] for r in doc["results"]) == sorted(NODES)
    built = tmp_path / "built"
    proc = run(tmp_path, "gpunode", "report", "-q", "-o", str(built), str(kept))
    assert proc.returncode == 1, proc.stdout + proc.stderr  # nodes failed: exit 1
    check_report(built)


def test_report_run_limit(tmp_path):
    extra = ["--limit", "n-a100"]
    out = tmp_path / "reports"
    proc = report_run(tmp_path, out, "-q", *extra)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == f"report: {out}/index.html\n"
    assert [n["node"] for n in json.loads((out / "report.json").read_text())["nodes"]] == ["n-a100"]


def test_report_run_installed_from_the_wheel_needs_the_project(tmp_path, collections_path):
    """gpunode as the node wheel installs it (no playbooks beside it): --run says to pass
    --project (or GPUNODE_PROJECT) and, given it, runs that project's playbook: a checkout,
    or the installed collection (no ansible.cfg anywhere)."""
    import zipfile

    from ..helpers import build_node_wheel

    site = tmp_path / "site-packages"
    zipfile.ZipFile(build_node_wheel(ROOT, tmp_path / "wheels")).extractall(site)
    inv, out = str(inventory(tmp_path)), tmp_path / "reports"
    argv = [sys.executable, "-m", "gpunode", "report", "--run", "-i", inv, "-o", str(out), "-q"]
    installed = {k: v for k, v in env(tmp_path).items() if k != "GPUNODE_PROJECT"}
    installed["PYTHONPATH"] = str(site)  # before the editable install's src on sys.path

    def gpunode(*extra: str, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*argv, *extra], cwd=tmp_path, env=installed | more, capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip

    where = gpunode("--help")
    assert where.returncode == 0 and "--project" in where.stdout
    proc = gpunode("--limit", "n-a100")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "pass --project DIR or set GPUNODE_PROJECT" in proc.stderr
    assert not out.exists()
    proc = gpunode("--limit", "n-a100", "--project", str(ROOT))
    assert (proc.returncode, proc.stdout) == (0, f"report: {out}/index.html\n"), proc.stderr
    (out / "index.html").unlink()
    collection = collections_path / "ansible_collections/gpunode/gpunode"
    bare = {k: v for k, v in installed.items() if k != "ANSIBLE_CONFIG"}
    bare["ANSIBLE_COLLECTIONS_PATH"] = str(collections_path)
    proc = subprocess.run(
        [*argv, "--limit", "n-a100", "--project", str(collection)], cwd=tmp_path, env=bare,
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert (proc.returncode, proc.stdout) == (0, f"report: {out}/index.html\n"), proc.stderr
    assert (out / "index.html").is_file()
    proc = gpunode("--limit", "n-a100", GPUNODE_PROJECT=str(tmp_path / "nowhere"))
    assert proc.returncode == 2 and f"project {tmp_path}/nowhere is not a directory" in proc.stderr
