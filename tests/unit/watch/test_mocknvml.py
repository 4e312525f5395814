"""`gpunode watch once` through the real mock NVML (an 8-GPU profile applied to temporary
paths in a private /dev, as tests/unit/cli/test_inventory.py does): NVML up, each GPU's
serial, health and Xid series, and promtool accepts the file."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

from gpunode.sim.profiles import load_profile

CHILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    from gpunode.sim.profiles import load_profile
    from gpunode.sim.apply import Paths, apply_profile

    tmp, profile, mock = sys.argv[1:4]
    paths = Paths(dev=Path("/dev"), proc_driver=Path(tmp, "proc"), libdir=Path(tmp, "lib"),
                  mock_base=Path(mock), state=Path(tmp, "state.json"), real_system=False)
    apply_profile(load_profile(profile), paths)
    os.environ["LD_LIBRARY_PATH"] = str(paths.libdir)
    os.execv(sys.executable, [sys.executable, "-m", "gpunode", "watch", *sys.argv[4:]])
    """
)


def test_watch_once_through_the_mock_nvml(private_dev, tmp_path, mock_lib):
    (tmp_path / "tf").mkdir()
    (tmp_path / "boot").write_text("boot-1\n")
    bus = load_profile("h100x8").gpus[3].bus_id
    (tmp_path / "kmsg").write_text(
        f"3,7,1,-;NVRM: Xid (PCI:{bus.procfs}): 48, pid=1, name=x, DBE\n"
    )
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    proc = private_dev([sys.executable, str(script), str(tmp_path), "h100x8", str(mock_lib), "once",
                        "--textfile", str(tmp_path / "tf/w.prom"), "--state-dir", str(tmp_path / "st"),
                        "--kmsg", str(tmp_path / "kmsg"), "--boot-id-file", str(tmp_path / "boot"),
                        "--node", "n1"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "tf/w.prom").read_text()
    p = load_profile("h100x8")
    assert 'gpunode_watch_nvml_up{node="n1"} 1' in text and "gpunode_watch_problem" not in text
    for i, g in enumerate(p.gpus):
        assert f'gpu="{i}",uuid="{g.uuid}",bus_id="{g.bus_id.nvml}",' in text
        assert f'serial="{g.serial}"}} 1' in text
    assert f'bus_id="{bus.nvml}",model="{p.gpus[3].model}",xid="48"}} 1' in text
    assert 'check="gpu.xid"} 2' in text and 'gpunode_node_healthy{node="n1"} 0' in text
    assert text.count('check="gpu.lost"} 0') == 8
    if shutil.which("promtool"):
        check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                               text=True)  # fmt: skip
        assert check.returncode == 0, check.stdout + check.stderr
    else:
        pytest.skip("promtool not installed")
