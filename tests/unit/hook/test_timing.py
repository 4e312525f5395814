"""Issue 28's per-phase timings (gpunode.hook.timing): written only while the log file
exists as the process's own regular file, one line per container."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from .helpers import SRC

# the hook as its launcher starts it, with the timing log moved under the test's directory
CODE = """import sys
sys.path[:0] = [{src!r}]
import gpunode.hook.main as m
m.TIMING_LOG = {log!r}
sys.exit(m.main({argv!r}))
"""


def hook(tmp_path, log, stdin=""):
    root = tmp_path / "bundle" / "rootfs"
    root.mkdir(parents=True, exist_ok=True)
    (root.parent / "config.json").write_text(json.dumps({"root": {"path": "rootfs"}}))
    argv = ["configure", "--link", "libcuda.so.1::/usr/lib/libcuda.so"]
    argv += ["--library", "libcuda.so.1::/usr/lib/libcuda.so.1"]
    if not stdin:
        argv[:0] = ["--root", str(root)]
    code = CODE.format(src=str(SRC), log=str(log), argv=argv)
    proc = subprocess.run(
        [sys.executable, "-IS", "-c", code], input=stdin, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert os.readlink(root / "usr/lib/libcuda.so") == "libcuda.so.1"
    return root.parent


def fields(line):
    prog, ident, *items = line.split()
    values = dict(i.split("=") for i in items)
    assert all(float(v) >= 0 for v in values.values()), line
    return prog, ident, list(values)


def test_no_log_file_no_line(tmp_path):
    log = tmp_path / "timing.log"
    hook(tmp_path, log)
    assert not log.exists()  # never created


def test_configure_writes_its_phases_when_the_log_exists(tmp_path):
    log = tmp_path / "timing.log"
    log.write_text("")
    hook(tmp_path, log)
    bundle = hook(tmp_path, log, stdin=json.dumps({"id": "c1", "bundle": str(tmp_path / "bundle")}))
    assert bundle.exists()
    first, second = log.read_text().splitlines()
    phases = ["cpu0", "state", "symlinks", "ldcache", "sources", "proc", "total"]
    assert fields(first) == ("gpunode-hook", "-", phases)  # --root: no container id
    assert fields(second) == ("gpunode-hook", "c1", phases)  # the OCI state's id


def test_a_link_at_the_log_path_is_not_followed(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    log = tmp_path / "timing.log"
    log.symlink_to(target)
    hook(tmp_path, log)
    assert target.read_text() == ""
