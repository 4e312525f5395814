"""Real consumers of `gpunode validate --textfile`: Prometheus' own checker (promtool, from
Debian's prometheus package) accepts the file, and a real node_exporter (Debian's
prometheus-node-exporter) serves our gauges from its textfile collector."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request

import pytest

from gpunode.validate import output
from gpunode.validate.model import Check

from ..unit.validate.fakes import UUIDS, result

pytestmark = pytest.mark.integration


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed; run scripts/setup", pytrace=False)
    return path


def faulty_result():
    r = result()
    r.checks.append(Check("gpu.lost", "GPU reachable", "pass", "ok", gpu=0, uuid=UUIDS[0]))
    return r


def test_promtool_accepts_the_textfile(tmp_path):
    path = tmp_path / "gpunode.prom"
    output.write_textfile(str(path), faulty_result())
    proc = subprocess.run([tool("promtool"), "check", "metrics"], stdin=path.open(),
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout + proc.stderr == ""  # no lint warning either


def test_promtool_would_reject_a_broken_file(tmp_path):
    """The consumer really checks: a counter-style name on a gauge and a bad line fail."""
    bad = '# HELP x_total y\n# TYPE x_total gauge\nx_total{a="1"} 1\nbroken line\n'
    proc = subprocess.run([tool("promtool"), "check", "metrics"], input=bad,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode != 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_node_exporter_serves_our_gauges(tmp_path):
    output.write_textfile(str(tmp_path / "gpunode.prom"), faulty_result())
    port = _free_port()
    proc = subprocess.Popen(
        [tool("prometheus-node-exporter"), f"--web.listen-address=127.0.0.1:{port}",
         f"--collector.textfile.directory={tmp_path}", "--collector.disable-defaults",
         "--collector.textfile"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        body, deadline = "", time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                    body = r.read().decode()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"node_exporter exited: {proc.stderr.read().decode()[-300:]}")
                time.sleep(0.2)
        assert body, "node_exporter did not answer in 20s"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    lines = body.splitlines()
    want = f'gpunode_check_status{{check="gpu.ecc_uncorrectable",gpu="0",node="n\\"1",uuid="{UUIDS[0]}"}} 2'
    assert want in lines
    assert 'gpunode_check_status{check="container.cuda",gpu="",node="n\\"1",uuid=""} -1' in lines
    assert "# TYPE gpunode_check_status gauge" in lines
    assert any(ln.startswith("gpunode_gpu_info{") for ln in lines)
    assert 'gpunode_validate_duration_seconds{node="n\\"1"} 4.2' in lines
    # the collector read our file without error
    assert any(ln.startswith("node_textfile_scrape_error 0") for ln in lines)
