"""`gpunode mig` against the simulator's real mock NVML (sim/mocknvml/) loaded by an
unmodified pynvml: MIG state that NVML changes and every process sees (the mock keeps it
under /proc/driver/.gpunode-sim, as the driver keeps it). Each case runs in a private mount
namespace whose /dev, /proc/driver and /var/lib are tmpfs, so nothing of the host changes."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from gpunode.mig import apply as mig_apply
from gpunode.mig import config, layout
from gpunode.sim import mocknvml
from gpunode.sim.profiles import load_profile, mock_payload

from ...conftest import ROOT, UNSHARE_PROBLEM
from .fakenvml import FakeNvml, Gpu

pytestmark = pytest.mark.skipif(
    UNSHARE_PROBLEM is not None, reason=f"needs unshare -m as root: {UNSHARE_PROBLEM}"
)

PROFILE = """
name: mig-cli-test
driver: {version: "535.261.03", cuda_version: "12.2", kernel_module: proprietary}
defaults:
  model: NVIDIA A100-SXM4-80GB
  memory_mib: 81920
  compute_capability: "8.0"
  pci_device_id: 0x20B2
gpus:
  - uuid: GPU-7c41e0a2-5f3b-4d19-a8e6-2b9d0c4f6a51
    bus_id: "0000:07:00.0"
    mig:
      - {profile: 3g.40gb, placement: 4, uuid: MIG-0f6b2d84-3a1c-5e97-b2d4-8c1e6a3f9b01}
  - uuid: GPU-7c41e0a2-5f3b-4d19-a8e6-2b9d0c4f6a52
    bus_id: "0000:0f:00.0"
"""

CONFIG = """
version: v1
mig-configs:
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  mixed:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}
    - devices: [1]
      mig-enabled: false
  too-much:
    - devices: all
      mig-enabled: true
      mig-devices: {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}
  unknown:
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
"""

# Runs inside the namespace: each step is a fresh `python -m gpunode` process (the state
# lives in the node's /proc/driver, not in a process); prints one JSON line per step.
CHILD = textwrap.dedent(
    """
    import json, os, shutil, subprocess, sys
    cfg, steps = sys.argv[1], json.loads(sys.argv[2])
    shutil.copy(cfg, "/run/mig.yaml")  # where a user other than root can read it
    os.chmod("/run/mig.yaml", 0o644)
    for argv, as_user in steps:
        if as_user == "parallel":  # several `gpunode` runs started together
            procs = [subprocess.Popen([sys.executable, "-m", "gpunode", *a], text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                     for a in argv]
            print(json.dumps([[p.wait(), *p.communicate()] for p in procs]))
            continue
        if as_user:
            cmd = ["-c", AS_NOBODY, json.dumps(argv)]
        elif argv[0] == "-c":
            cmd = argv
        else:
            cmd = ["-m", "gpunode", *argv]
        p = subprocess.run([sys.executable, *cmd], capture_output=True, text=True)
        print(json.dumps([p.returncode, p.stdout, p.stderr]))
    """
)
# `gpunode ...` with the effective uid of nobody: what it loads is loaded while root (the
# interpreter, the test's mock library and temporary files are root's)
AS_NOBODY = textwrap.dedent(
    """
    import ctypes, difflib, fcntl, json, os, sys
    import pynvml, yaml
    import gpunode.cli.main, gpunode.cli.mig, gpunode.mig.apply, gpunode.engines.common
    import gpunode.runtime.config, gpunode.runtime.discovery
    ctypes.CDLL("libnvidia-ml.so.1")
    os.setegid(65534)
    os.seteuid(65534)
    sys.exit(gpunode.cli.main.main(json.loads(sys.argv[1])))
    """
)
CHILD = CHILD.replace("AS_NOBODY", repr(AS_NOBODY))


@pytest.fixture(scope="module")
def libdir(tmp_path_factory, mock_lib) -> Path:
    where = tmp_path_factory.mktemp("mig-mock")
    (where / "lib").mkdir()
    (where / "profile.yaml").write_text(PROFILE)
    payload = mock_payload(load_profile(str(where / "profile.yaml")))
    mocknvml.embed_profile(mock_lib, payload, where / "lib" / "libnvidia-ml.so.1")
    os.chmod(where, 0o755)
    return where / "lib"


def run_steps(tmp_path: Path, libdir: Path, steps: list) -> list[tuple[int, str, str]]:
    cfg = tmp_path / "mig.yaml"
    cfg.write_text(CONFIG)
    child = tmp_path / "child.py"
    child.write_text(CHILD)
    for p in (tmp_path, cfg, child):
        os.chmod(p, 0o755)
    def fill(argv):
        return [fill(a) if isinstance(a, list) else a.replace("@CFG", "/run/mig.yaml")
                for a in argv]

    steps = [(fill(argv), user) for argv, user in steps]
    setup = [
        "mount -t tmpfs -o mode=755 none /dev",
        "mount -t tmpfs -o mode=755 none /proc/driver",
        "mount -t tmpfs -o mode=755 none /var/lib",
        "mount -t tmpfs -o mode=1777 none /run",  # the default lock, /run/gpunode/mig.lock
        "mknod -m 666 /dev/null c 1 3",
        "mknod -m 666 /dev/nvidiactl c 195 255",
        "mknod -m 666 /dev/nvidia0 c 195 0",
        "mknod -m 666 /dev/nvidia1 c 195 1",
        "mkdir /dev/nvidia-caps",
        "mknod /dev/nvidia-caps/nvidia-cap1 c 511 1",
        "mknod /dev/nvidia-caps/nvidia-cap2 c 511 2",
    ]
    script = " && ".join(setup) + ' && exec "$@"'
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", script, "sh", sys.executable, str(child), str(cfg),
         json.dumps(steps)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "LD_LIBRARY_PATH": str(libdir)},
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


# the MIG devices NVML enumerates (gpunode's one NVML walker), per GPU
DEVICES = (["-c", textwrap.dedent(
    """
    import json
    from gpunode.nvidia import nvml
    with nvml.Session() as nv:
        print(json.dumps([[(m.uuid, m.profile) for m in nvml.gpu_facts(nv, i, h).mig]
                          for i, h, _ in nvml.handles(nv)]))
    """)], False)


def apply(name, *extra):
    return (["mig", "apply", "-f", "@CFG", "-c", name, "--json", *extra], False)


def test_apply_twice_assert_export(tmp_path, libdir):
    export = (["mig", "export", "--json"], False)
    results = run_steps(tmp_path, libdir, [
        export,
        apply("all-1g.10gb"),
        apply("all-1g.10gb"),
        (["mig", "assert", "-f", "@CFG", "-c", "all-1g.10gb"], False),
        (["mig", "assert", "-f", "@CFG", "-c", "mixed"], False),
        apply("mixed"),
        (["mig", "assert", "-f", "@CFG", "-c", "mixed"], False),
        export,
        DEVICES,
    ])
    (c0, before, _), (c1, first, e1), (c2, second, e2), a1, a2, (c3, _, e3), a3, \
        (c4, after, _), (c5, inv, _) = results
    assert json.loads(before)["mig-configs"]["current"] == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.40gb": 1}},
        {"devices": [1], "mig-enabled": False, "mig-devices": {}},
    ]
    assert (c1, e1) == (0, "")
    first = json.loads(first)
    assert first["changed"] is True and [g["changed"] for g in first["gpus"]] == [True, True]
    assert first["gpus"][0]["before"] == {"mig_enabled": True, "devices": {"3g.40gb": 1}}
    assert first["gpus"][1]["after"] == {"mig_enabled": True, "devices": {"1g.10gb": 7}}
    assert (c2, e2) == (0, "")
    assert json.loads(second)["changed"] is False
    assert a1[0] == 0
    assert a2[:2] == [1, "selected configuration not currently applied: GPU 0: 1g.10gb: 2 "
                         "wanted, 7 present\n"]
    assert (c3, e3) == (0, "")
    assert a3[0] == 0
    assert json.loads(after)["mig-configs"]["current"] == [
        {"devices": [0], "mig-enabled": True,
         "mig-devices": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}},
        {"devices": [1], "mig-enabled": False, "mig-devices": {}},
    ]
    # the MIG devices NVML now enumerates are the layout's, under their GPU
    gpus = json.loads(inv)
    assert sorted(p for _, p in gpus[0]) == ["1g.10gb", "1g.10gb", "2g.20gb", "3g.40gb"]
    assert gpus[1] == []
    assert c0 == c4 == c5 == 0


def test_untouched_gpu_keeps_its_instances(tmp_path, libdir):
    results = run_steps(tmp_path, libdir, [
        DEVICES,
        apply("mixed"),
        DEVICES,
        apply("all-1g.10gb"),
        DEVICES,
    ])
    inv0, (_, mixed, _), inv1, (_, seven, _), inv2 = results
    # mixed keeps GPU 0's 3g.40gb at 4 (the others are placed around it): same UUID
    ((uuid, profile),) = json.loads(inv0[1])[0]
    assert profile == "3g.40gb"
    assert uuid in {u for u, _ in json.loads(inv1[1])[0]}
    assert json.loads(mixed)["gpus"][0]["destroy"] == []
    # all-1g.10gb changes both; GPU 0's old devices are gone
    assert [g["changed"] for g in json.loads(seven)["gpus"]] == [True, True]
    assert uuid not in {u for u, _ in json.loads(inv2[1])[0]}
    assert [len(g) for g in json.loads(inv2[1])] == [7, 7]


def test_refusals_change_nothing(tmp_path, libdir):
    export = (["mig", "export", "--json"], False)
    results = run_steps(tmp_path, libdir, [
        export,
        (apply("all-1g.10gb")[0], True),  # not root: NVML refuses (nobody may lock here)
        apply("too-much"),
        apply("unknown"),
        apply("all-1g.10gb", "--dry-run"),
        (["mig", "apply", "-f", "@CFG", "-c", "all-1g.10gb", "--lock-file", "/lock/x"], True),
        (apply("all-1g.10gb", "--dry-run")[0], True),  # reading needs no root
        export,
    ])
    (_, before, _), user, too, unknown, (cd, dry, _), user_lock, user_dry, (_, after, _) = \
        results
    assert too[:2] == [2, ""]
    assert too[2] == ("gpunode: error: mig-configs.too-much[0]: GPU 0 (NVIDIA A100-SXM4-80GB): "
                      "4g.40gb x1 + 3g.40gb x1 + 1g.10gb x1 needs 8 compute slices, the GPU "
                      "has 7\n")
    assert unknown[0] == 2 and unknown[2].startswith(
        "gpunode: error: mig-configs.unknown[0]: GPU 1 (NVIDIA A100-SXM4-80GB): mig-devices "
        "'1g.5gb' is not a GPU instance profile of this GPU; accepted: 1g.10gb")
    assert cd == 0 and json.loads(dry)["changed"] is True and json.loads(dry)["dry_run"]
    assert user[0] == 1 and user[2].count("\n") == 1
    assert user[2] == ("gpunode: error: GPU 0: destroying compute instance 0 of GPU instance 2 "
                       "needs root (NVML: Insufficient Permissions)\n"), user[2]
    assert user_lock == [1, "", "gpunode: error: /lock/x: the lock cannot be taken "
                         "(Permission denied); gpunode mig apply needs root\n"]
    assert user_dry[0] == 0 and json.loads(user_dry[1])["changed"] is True
    assert json.loads(after) == json.loads(before)


def test_two_applies_at_once_do_not_interleave(tmp_path, libdir):
    """Started together, one apply makes the layout and the other, serialized behind it by
    the lock, finds it made."""
    both = [apply("all-1g.10gb")[0]] * 2
    (runs, dev) = run_steps(tmp_path, libdir, [(both, "parallel"), DEVICES])
    assert [r[0] for r in runs] == [0, 0], runs
    assert sorted(json.loads(r[1])["changed"] for r in runs) == [False, True]
    assert [len(g) for g in json.loads(dev[1])] == [7, 7]


# GPU 0 given a 2g.20gb GPU instance (at 0) holding one 1-slice compute instance, beside
# the profile's 3g.40gb: a MIG device narrower than its GPU instance
NARROW = (["-c", textwrap.dedent(
    """
    import pynvml as N
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(0)
    info = N.nvmlDeviceGetGpuInstanceProfileInfo(h, N.NVML_GPU_INSTANCE_PROFILE_2_SLICE)
    gi = N.nvmlDeviceCreateGpuInstance(h, info.id)
    N.nvmlGpuInstanceCreateComputeInstance(gi, N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
    """)], False)
# both answers to "is config 'c' applied?": gpunode mig assert's and validate's mig.layout
BOTH = (["-c", textwrap.dedent(
    """
    import json
    from gpunode.mig import layout
    from gpunode.nvidia import inventory, nvml
    from gpunode.validate import mig
    doc = {"version": "v1", "mig-configs": {"c": [{"devices": [0], "mig-enabled": True,
           "mig-devices": {"3g.40gb": 1, "2g.20gb": 1}}]}}
    wanted = mig.parse_layout(doc, "c", "x")
    with nvml.Session() as nv:
        asserted = layout.first_difference(layout.plan(layout.read_node(nv), wanted.entries))
    checks = mig.evaluate(inventory.collect(), wanted)
    print(json.dumps([asserted, [[c.status, c.detail] for c in checks
                                 if (c.id, c.gpu) == ("mig.layout", 0)]]))
    """)], False)


def test_a_narrower_compute_instance_is_one_answer_for_assert_and_validate(tmp_path, libdir):
    _narrow, (rc, out, err) = run_steps(tmp_path, libdir, [NARROW, BOTH])
    assert (rc, err) == (0, ""), err
    asserted, [[status, detail]] = json.loads(out)
    assert asserted == "GPU 0: 1c.2g.20gb: 0 wanted, 1 present"
    assert status == "fail" and detail.startswith("found 1x 1c.2g.20gb, 1x 3g.40gb;")



def shown(gpus):
    """What gpunode mig reads of each GPU (layout.read_node), less UUIDs and handles."""
    return [
        {
            "gpu": [g.index, g.name, g.pci_device_id, g.mig_capable, g.mig_enabled, g.mig_pending],
            "profiles": [[p.index, p.id, p.name, p.slices, p.instances, p.memory_mib,
                          [list(x) for x in p.placements]] for p in g.profiles or ()],
            "instances": [[gi.id, gi.profile_id, gi.start, gi.size,
                           [[c.id, c.profile_id, c.slices] for c in gi.cis]]
                          for gi in g.instances],
        }
        for g in gpus
    ]  # fmt: skip


READ = (["-c", "import json\nfrom gpunode.mig import layout\nfrom gpunode.nvidia import nvml\n"
         + inspect.getsource(shown)
         + "with nvml.Session() as nv:\n    print(json.dumps(shown(layout.read_node(nv))))\n"],
        False)  # fmt: skip


def test_the_unit_tests_fake_nvml_reads_as_the_mock_does(tmp_path, libdir):
    """tests/unit/mig/fakenvml.py stands in for this mock where a test must reach into NVML
    in-process (docs/architecture.md says why it stays): the same layout, and the same
    layout changed by the same apply, read through either, is the same to gpunode mig."""
    before, _, after = run_steps(tmp_path, libdir, [READ, apply("mixed"), READ])
    assert before[0] == after[0] == 0, before[2] + after[2]
    nv = FakeNvml([Gpu(0, mig=True), Gpu(1)])
    nv.make(0, "3g.40gb", 4)  # PROFILE's node
    assert json.loads(json.dumps(shown(layout.read_node(nv)))) == json.loads(before[1])
    entries = config.parse(yaml.safe_load(CONFIG))["mixed"]
    assert mig_apply.apply(nv, "mixed", entries, lock_file=str(tmp_path / "lock"))["changed"]
    assert json.loads(json.dumps(shown(layout.read_node(nv)))) == json.loads(after[1])
