from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from gpunode.validate import output

from .fakes import MIG_UUIDS, UUIDS, mig_result, result


def test_table_has_one_row_per_check_and_a_summary():
    lines = output.table(result()).splitlines()
    assert lines[0].startswith('n"1: 1 GPU(s), driver -')
    assert lines[1].split() == ["STATUS", "CHECK", "GPU", "TIME", "DETAIL"]
    assert lines[3].split()[:3] == ["FAIL", "gpu.ecc_uncorrectable", "0"]
    assert lines[-1] == "1 passed, 1 warning(s), 1 failed, 1 skipped in 4.2s"


def test_textfile_gauges_labels_and_encoding():
    text = output.textfile(result())
    lines = text.splitlines()
    assert (
        "# HELP gpunode_check_status Result of a gpunode validate check: 0 pass, 1 warn, 2 fail, -1 skip."
        in lines
    )
    assert "# TYPE gpunode_check_status gauge" in lines
    assert 'gpunode_check_status{node="n\\"1",check="node.gpu_count",gpu="",uuid=""} 0' in lines
    assert (
        f'gpunode_check_status{{node="n\\"1",check="gpu.ecc_uncorrectable",gpu="0",uuid="{UUIDS[0]}"}} 2'
        in lines
    )
    assert (
        f'gpunode_check_status{{node="n\\"1",check="gpu.persistence",gpu="0",uuid="{UUIDS[0]}"}} 1'
        in lines
    )
    assert 'gpunode_check_status{node="n\\"1",check="container.cuda",gpu="",uuid=""} -1' in lines
    assert 'gpunode_validate_duration_seconds{node="n\\"1"} 4.2' in lines
    assert 'gpunode_validate_last_run_timestamp_seconds{node="n\\"1"} 1795334400' in lines
    assert 'gpunode_validate_checks{node="n\\"1",status="fail"} 1' in lines
    assert 'gpunode_validate_exit_code{node="n\\"1"} 1' in lines
    assert any(
        ln.startswith('gpunode_gpu_info{node="n\\"1",gpu="0",') and ln.endswith(" 1")
        for ln in lines
    )
    assert text.endswith("\n")


def test_label_escaping():
    assert output._labels(a='x\\y"z\nw') == '{a="x\\\\y\\"z\\nw"}'


def test_textfile_path_checks(tmp_path):
    assert output.check_textfile_path(str(tmp_path / "g.prom")) is None
    assert "node_exporter reads only *.prom" in output.check_textfile_path(str(tmp_path / "g.txt"))
    assert output.check_textfile_path(str(tmp_path / "no" / "g.prom")).endswith(
        f"directory {tmp_path / 'no'} does not exist"
    )
    (tmp_path / "d.prom").mkdir()
    assert output.check_textfile_path(str(tmp_path / "d.prom")).endswith("is a directory")


def test_write_replaces_atomically_and_a_failure_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "gpunode.prom"
    path.write_text("old 1\n")
    output.write_textfile(str(path), result())
    assert path.read_text() == output.textfile(result())
    assert sorted(os.listdir(tmp_path)) == ["gpunode.prom"]
    path.write_text("old 1\n")

    def fail(*a, **kw):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="No space left"):
        output.write_textfile(str(path), result())
    assert path.read_text() == "old 1\n" and sorted(os.listdir(tmp_path)) == ["gpunode.prom"]


def test_mig_devices_in_the_table_and_textfile():
    r = mig_result()
    lines = output.table(r).splitlines()
    assert [ln.split()[:3] for ln in lines if "mig.isolation" in ln] == [
        ["ok", "mig.isolation", "1:0"], ["FAIL", "mig.isolation", "1:1"]]  # fmt: skip
    text = output.textfile(r).splitlines()
    assert (f'gpunode_check_status{{node="n\\"1",check="mig.isolation",gpu="1:1",'
            f'uuid="{MIG_UUIDS[1]}"}} 2') in text  # fmt: skip
    assert (f'gpunode_mig_device_info{{node="n\\"1",gpu="1",mig="1",profile="1g.10gb",'
            f'uuid="{MIG_UUIDS[1]}",gi="5",ci="0"}} 1') in text  # fmt: skip
    assert (f'gpunode_mig_device_memory_bytes{{node="n\\"1",gpu="1",mig="0",'
            f'uuid="{MIG_UUIDS[0]}"}} {40192 * 1048576}') in text  # fmt: skip


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool (Debian prometheus) missing")
def test_promtool_accepts_the_textfile_with_mig_devices(tmp_path):
    """promtool check metrics: the exposition format and Prometheus' naming lint."""
    proc = subprocess.run(["promtool", "check", "metrics"], input=output.textfile(mig_result()),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
