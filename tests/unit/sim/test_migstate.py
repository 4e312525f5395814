"""MIG as driver state in the mock NVML (mocknvml/migstate.c; the MIG contract,
sections 1-3): pynvml changes it as on hardware, every process of the node sees it, the
driver's footprint follows it, a MIG device is visible only with its cap nodes, and its
index is the one NVIDIA's runtime in jit-cdi mode resolves (raw ctypes calls in nvcdi's order).

Each case runs in a private mount namespace with a tmpfs /dev (the device nodes it needs)
and a tmpfs over /proc/driver (the node's simulated driver tree, where the state lives).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

from gpunode.sim.profiles import load_profile, mock_payload

from .test_mocknvml import (  # noqa: F401  (fixtures)
    GIB,
    built_lib,
    in_private_dev,
    install_lib,
    needs_unshare,
    pynvml_ready,
)

# a100x2-mig: GPU 0 (minor 0, bus 07) in MIG mode with 3g.40gb@4 (GI 2), 2g.20gb@0 (GI 3),
# 1g.10gb@2 (GI 9); GPU 1 (minor 1) MIG-capable, disabled.
PROFILE = "a100x2-mig"
UUID_RE = re.compile(r"MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
DRIVER_TREE = ["mount -t tmpfs none /proc/driver", "mkdir /proc/driver/nvidia"]

COMMON = textwrap.dedent(
    r"""
    import json, os, subprocess, sys
    import pynvml as N

    def call(fn, *a):
        try:
            v = fn(*a)
        except N.NVMLError as e:
            return "error:" + type(e).__name__
        return v

    def migs(h):
        out = []
        for i in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
            except N.NVMLError_NotFound:
                continue
            a = N.nvmlDeviceGetAttributes(m)
            out.append({"uuid": N.nvmlDeviceGetUUID(m), "gi": N.nvmlDeviceGetGpuInstanceId(m),
                        "ci": N.nvmlDeviceGetComputeInstanceId(m),
                        "slices": [a.gpuInstanceSliceCount, a.computeInstanceSliceCount],
                        "memory": N.nvmlDeviceGetMemoryInfo(m).total})
        return out

    def placements(h, profile_id):
        arr = (N.c_nvmlGpuInstancePlacement_t * 8)()
        count = N.c_uint(0)
        N.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, arr, N.byref(count))
        return [[arr[i].start, arr[i].size] for i in range(count.value)]

    def ci_placements(gi, profile_id):
        arr = (N.c_nvmlComputeInstancePlacement_t * 8)()
        count = N.c_uint(0)
        N.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, profile_id, arr, N.byref(count))
        return [[arr[i].start, arr[i].size] for i in range(count.value)]

    def gi_at(h, profile_id, start):
        p = N.c_nvmlGpuInstancePlacement_t(start, N.nvmlDeviceGetGpuInstanceProfileInfoById(
            h, profile_id).sliceCount and {19: 1, 20: 1, 15: 2, 14: 2, 9: 4, 5: 4, 0: 8}[profile_id])
        return call(N.nvmlDeviceCreateGpuInstanceWithPlacement, h, profile_id, N.byref(p))

    def ci_at(gi, profile_id, start, size):
        p = N.c_nvmlComputeInstancePlacement_t(start, size)
        return call(N.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, profile_id,
                    N.byref(p))

    def err(v):
        return v if isinstance(v, str) else "ok"

    def footprint():
        caps = "/proc/driver/nvidia/capabilities"
        files = {}
        for root, _, names in os.walk(caps):
            for n in names:
                p = os.path.join(root, n)
                files[p[len(caps) + 1:]] = open(p).read()
        nodes = {}
        for n in sorted(os.listdir("/dev/nvidia-caps")) if os.path.isdir("/dev/nvidia-caps") else []:
            st = os.stat("/dev/nvidia-caps/" + n)
            nodes[n] = [os.major(st.st_rdev), os.minor(st.st_rdev), oct(st.st_mode & 0o777)]
        return {"files": files, "nodes": nodes}

    def in_child(code):
        out = subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True,
                             text=True)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)
    """
)

SCENARIO = r"""
N.nvmlInit()
h = N.nvmlDeviceGetHandleByIndex(0)
off = N.nvmlDeviceGetHandleByIndex(1)
r = {}
r["initial"] = migs(h)
r["modes"] = [N.nvmlDeviceGetMigMode(h), N.nvmlDeviceGetMigMode(off)]
# a MIG-capable GPU with MIG disabled: no instances until the mode is set
r["create_on_disabled"] = err(call(N.nvmlDeviceCreateGpuInstance, off, 19))
r["set_on"] = call(N.nvmlDeviceSetMigMode, off, 1)
r["mode_on"] = N.nvmlDeviceGetMigMode(off)
r["placements_3g"] = placements(off, 9)
r["placements_1g"] = placements(off, 19)
r["capacity"] = [N.nvmlDeviceGetGpuInstanceRemainingCapacity(off, p) for p in (19, 9, 5, 0)]
g3 = gi_at(off, 9, 4)
info = N.nvmlGpuInstanceGetInfo(g3)
r["g3"] = [info.id, info.profileId, info.placement.start, info.placement.size]
r["bad_placement"] = err(gi_at(off, 9, 2))
r["taken"] = err(gi_at(off, 9, 4))
r["overfull_7g"] = err(call(N.nvmlDeviceCreateGpuInstance, off, 0))
g2 = N.nvmlDeviceCreateGpuInstance(off, 14)  # first free placement: 0
g1 = N.nvmlDeviceCreateGpuInstance(off, 19)  # 1g.10gb: slot 2
r["gis"] = [[i.id, i.placement.start] for i in map(N.nvmlGpuInstanceGetInfo, (g2, g1))]
r["capacity_after"] = [N.nvmlDeviceGetGpuInstanceRemainingCapacity(off, p) for p in (19, 14, 9)]
r["ci_placements"] = [ci_placements(g3, p) for p in (0, 1, 2)]
r["ci_capacity"] = [N.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(g3, p) for p in (0, 2)]
c3 = N.nvmlGpuInstanceCreateComputeInstance(g3, 2)  # spanning the 3g GI
c2a = ci_at(g2, 0, 1, 1)
c2b = N.nvmlGpuInstanceCreateComputeInstance(g2, 0)  # the other slice: 0
r["ci_bad_placement"] = err(ci_at(g2, 0, 5, 1))
r["ci_overfull"] = err(call(N.nvmlGpuInstanceCreateComputeInstance, g2, 1))
r["cis"] = [[i.id, i.profileId, i.placement.start, i.placement.size]
            for i in map(N.nvmlComputeInstanceGetInfo, (c3, c2a, c2b))]
r["migs"] = migs(off)
r["by_uuid"] = [N.nvmlDeviceGetUUID(N.nvmlDeviceGetHandleByUUID(m["uuid"])) for m in r["migs"]]
r["destroy_gi_in_use"] = err(call(N.nvmlGpuInstanceDestroy, g3))
r["disable_in_use"] = err(call(N.nvmlDeviceSetMigMode, off, 0))
os.seteuid(65534)
r["not_root"] = [err(call(N.nvmlDeviceSetMigMode, off, 0)),
                 err(call(N.nvmlDeviceCreateGpuInstance, off, 19)),
                 err(call(N.nvmlComputeInstanceDestroy, c3))]
os.seteuid(0)
r["footprint"] = footprint()
# a second process sees the same state and changes it
r["child"] = in_child(
    "N.nvmlInit()\n"
    "h = N.nvmlDeviceGetHandleByIndex(1)\n"
    "before = migs(h)\n"
    "gi = N.nvmlDeviceGetGpuInstanceById(h, 3)\n"
    "N.nvmlComputeInstanceDestroy(N.nvmlGpuInstanceGetComputeInstanceById(gi, 1))\n"
    "print(json.dumps({'before': before, 'after': migs(h)}))\n"
)
r["after_child"] = migs(off)
r["stale_handle"] = err(call(N.nvmlComputeInstanceGetInfo, c2b))
# tear down: compute instances, then GPU instances, then the mode
for c in (c3, c2a):
    N.nvmlComputeInstanceDestroy(c)
for g in (g3, g2, g1):
    N.nvmlGpuInstanceDestroy(g)
r["stale_gi"] = err(call(N.nvmlGpuInstanceGetInfo, g3))
r["disable"] = call(N.nvmlDeviceSetMigMode, off, 0)
r["off_again"] = [N.nvmlDeviceGetMigMode(off), N.nvmlDeviceGetMaxMigDeviceCount(off)]
r["footprint_after"] = footprint()
r["state_file"] = open("/proc/driver/.gpunode-sim/mig-state").read()
print(json.dumps(r))
"""


def run(built_lib, tmp_path, code, minors=(0, 1), caps=True, extra=()):  # noqa: F811
    libdir = install_lib(built_lib, mock_payload(load_profile(PROFILE)), tmp_path)
    script = tmp_path / "case.py"
    script.write_text(f"PRELUDE = {COMMON!r}\n" + COMMON + code)
    env = {"LD_LIBRARY_PATH": str(libdir), "PATH": "/usr/bin:/bin", "PYTHONPATH": ""}
    proc = in_private_dev(
        [sys.executable, script], minors, extra=(*DRIVER_TREE, *extra), env=env, caps=caps
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_unshare
def test_mig_layout_changes_through_nvml(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    scenario(built_lib, tmp_path)


def scenario(built_lib, tmp_path) -> dict:  # noqa: F811
    r = run(built_lib, tmp_path, SCENARIO)
    # the profile's instances, until a process changes them
    assert [(m["gi"], m["ci"]) for m in r["initial"]] == [(2, 0), (3, 0), (9, 0)]
    assert r["modes"] == [[1, 1], [0, 0]]
    assert r["create_on_disabled"] == "error:NVMLError_NotSupported"
    assert r["set_on"] == 0 and r["mode_on"] == [1, 1]  # current = pending at once
    assert r["placements_3g"] == [[0, 4], [4, 4]]
    assert r["placements_1g"] == [[s, 1] for s in range(7)]
    assert r["capacity"] == [7, 2, 1, 1]
    assert r["g3"] == [2, 9, 4, 4]  # GI id fixed by the placement, as the driver does
    assert r["bad_placement"] == "error:NVMLError_InvalidArgument"
    assert r["taken"] == "error:NVMLError_InsufficientResources"
    assert r["overfull_7g"] == "error:NVMLError_InsufficientResources"
    assert r["gis"] == [[3, 0], [9, 2]]  # the first free placements
    assert r["capacity_after"] == [1, 0, 0]
    assert r["ci_placements"] == [[[0, 1], [1, 1], [2, 1]], [[0, 2]], [[0, 3]]]
    assert r["ci_capacity"] == [3, 1]
    assert r["ci_bad_placement"] == "error:NVMLError_InvalidArgument"
    assert r["ci_overfull"] == "error:NVMLError_InsufficientResources"
    assert r["cis"] == [[0, 2, 0, 3], [0, 0, 1, 1], [1, 0, 0, 1]]
    # a MIG device per compute instance, by GI id then CI id; the 1g GI has none
    assert [(m["gi"], m["ci"], m["slices"]) for m in r["migs"]] == [
        (2, 0, [3, 3]),
        (3, 0, [2, 1]),
        (3, 1, [2, 1]),
    ]
    assert [m["memory"] for m in r["migs"]] == [40 * GIB, 20 * GIB, 20 * GIB]
    uuids = [m["uuid"] for m in r["migs"]]
    assert all(UUID_RE.fullmatch(u) for u in uuids) and len(set(uuids)) == 3
    assert r["by_uuid"] == uuids
    assert r["destroy_gi_in_use"] == "error:NVMLError_InUse"
    assert r["disable_in_use"] == "error:NVMLError_InUse"
    assert r["not_root"] == ["error:NVMLError_NoPermission"] * 3
    # another process sees the same state, and its change is seen here
    assert r["child"]["before"] == r["migs"]
    assert r["child"]["after"] == r["migs"][:2] == r["after_child"]
    assert r["stale_handle"] == "error:NVMLError_InvalidArgument"
    assert r["stale_gi"] == "error:NVMLError_InvalidArgument"
    assert r["disable"] == 0 and r["off_again"] == [[0, 0], 0]
    assert "\tmode=0\tcounter=3\n" in r["state_file"]
    return r


def caps_of(layout: dict[int, dict[int, list[int]]]) -> tuple[dict, dict]:
    """Expected capability files and cap nodes: {gpu minor: {gi: [ci, ...]}}, with the
    minors of the MIG contract (GI 3 + 135 * gpu + 9 * gi, CI GI + 1 + ci)."""
    files, nodes = {}, {}
    for gpu, gis in layout.items():
        for gi, cis in gis.items():
            minor = 3 + 135 * gpu + 9 * gi
            files[f"gpu{gpu}/mig/gi{gi}/access"] = ACCESS.format(minor)
            nodes[f"nvidia-cap{minor}"] = [511, minor, "0o444"]
            for ci in cis:
                files[f"gpu{gpu}/mig/gi{gi}/ci{ci}/access"] = ACCESS.format(minor + 1 + ci)
                nodes[f"nvidia-cap{minor + 1 + ci}"] = [511, minor + 1 + ci, "0o444"]
    return files, nodes


ACCESS = "DeviceFileMinor: {}\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
PROFILE_LAYOUT = {2: [0], 3: [0], 9: [0]}


@needs_unshare
def test_the_driver_footprint_follows_every_change(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    r = scenario(built_lib, tmp_path)
    files, nodes = caps_of({0: PROFILE_LAYOUT, 1: {2: [0], 3: [0, 1], 9: []}})
    assert (
        files["gpu1/mig/gi2/access"]
        == "DeviceFileMinor: 156\nDeviceFileMode: 292\nDeviceFileModify: 1\n"
    )
    base = {"nvidia-cap1": [511, 1, "0o644"], "nvidia-cap2": [511, 2, "0o644"]}
    assert r["footprint"] == {"files": files, "nodes": {**base, **nodes}}
    files, nodes = caps_of({0: PROFILE_LAYOUT})
    assert r["footprint_after"] == {"files": files, "nodes": {**base, **nodes}}


@needs_unshare
def test_new_mig_uuids_are_deterministic(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    first = scenario(built_lib, tmp_path / "a")
    second = scenario(built_lib, tmp_path / "b")
    assert [m["uuid"] for m in first["migs"]] == [m["uuid"] for m in second["migs"]]


VISIBILITY = r"""
def seen(euid=0):
    return in_child(
        "N.nvmlInit()\nN.nvmlShutdown()\n"  # loaded as root (the test's files are root's)
        f"os.seteuid({euid})\n"
        "N.nvmlInit()\n"
        "h = N.nvmlDeviceGetHandleByIndex(0)\n"
        "print(json.dumps([[m['gi'], m['ci']] for m in migs(h)]))\n"
    )

def node(minor, major=511, mode=0o444):
    path = f"/dev/nvidia-caps/nvidia-cap{minor}"
    if os.path.lexists(path):
        os.unlink(path)
    if major is not None:
        os.mknod(path, 0o20000 | mode, os.makedev(major, minor))
        os.chmod(path, mode)

os.makedirs("/dev/nvidia-caps", exist_ok=True)
r = {"none": seen()}
node(21); node(22)  # GI 2 (3 + 9 * 2) and its CI 0 of GPU minor 0
r["gi2"] = seen()
node(30); node(31)
r["gi2_gi3"] = seen()
node(22, major=None)  # the CI cap node of GI 2 goes
r["ci_missing"] = seen()
node(22, major=510)  # a node of another major is not the cap
r["wrong_major"] = seen()
node(22)
node(30, major=None); node(31, major=None)
node(1, mode=0o400)  # the config cap: every MIG device, for whoever can open it
r["config"] = seen()
node(21, major=None); node(22, major=None)
r["config_root_only"] = [seen(), seen(65534)]  # EACCES for others: a denied open
node(1, major=None)
node(2, mode=0o444)
r["monitor"] = seen(65534)
print(json.dumps(r))
"""


@needs_unshare
def test_a_mig_device_is_visible_with_its_cap_nodes(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    r = run(built_lib, tmp_path, VISIBILITY, caps=False)
    assert r["none"] == []
    assert r["gi2"] == [[2, 0]]  # exactly that one, as MIG device 0 of its GPU
    assert r["gi2_gi3"] == [[2, 0], [3, 0]]
    assert r["ci_missing"] == [[3, 0]]
    assert r["wrong_major"] == [[3, 0]]
    assert r["config"] == [[2, 0], [3, 0], [9, 0]]
    assert r["config_root_only"] == [[[2, 0], [3, 0], [9, 0]], []]
    assert r["monitor"] == [[2, 0], [3, 0], [9, 0]]


CONCURRENT = r"""
import time
N.nvmlInit()
off = N.nvmlDeviceGetHandleByIndex(1)
N.nvmlDeviceSetMigMode(off, 1)
N.nvmlDeviceCreateGpuInstance(off, 0)  # 7g.80gb: GI 0, room for seven 1c compute instances
one = (
    "import time\n"
    "N.nvmlInit()\n"
    "gi = N.nvmlDeviceGetGpuInstanceById(N.nvmlDeviceGetHandleByIndex(1), 0)\n"
    "while not os.path.exists('/dev/go'):\n"
    "    time.sleep(0.001)\n"
    "made = 0\n"
    "for _ in range(40):\n"
    "    ci = call(N.nvmlGpuInstanceCreateComputeInstance, gi, 0)\n"
    "    if not isinstance(ci, str):\n"
    "        made += 1\n"
    "        N.nvmlComputeInstanceDestroy(ci)\n"
    "print(made)\n"
)
procs = [subprocess.Popen([sys.executable, "-c", PRELUDE + one], stdout=subprocess.PIPE,
                          text=True) for _ in range(8)]
time.sleep(1)
open("/dev/go", "w").close()
made = sum(int(p.communicate()[0]) for p in procs)
state = open("/proc/driver/.gpunode-sim/mig-state").read()
counter = int(state.split("uuid=GPU-7c41e0a2-5f3b-4d19-a8e6-2b9d0c4f6a52\tmode=1\tcounter=")[1].split()[0])
print(json.dumps({"made": made, "counter": counter, "cis": state.count("\nci\t")}))
"""


@needs_unshare
def test_changes_from_many_processes_are_serialized(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    r = run(built_lib, tmp_path, CONCURRENT)
    # every creation counted once (a lost update would count fewer), all destroyed again
    assert r["made"] > 0 and r["counter"] == r["made"]
    assert r["cis"] == 3  # the profile's GPU 0 instances only


def test_the_mocks_migstate_h_is_this_modules_definition(tmp_path):
    """The mock's files, record formats and cap minors come from gpunode.sim.migstate
    (c_header, generated at build time): a C program using the header writes the state,
    the capability files and mig-minors in the formats the module defines."""
    from gpunode.sim import migstate, xidraise
    from gpunode.sim.mocknvml import compile_c

    (tmp_path / "migstate.h").write_text(migstate.c_header())
    prog = tmp_path / "probe.c"
    prog.write_text(
        textwrap.dedent(
            r"""
            #include <stdio.h>
            #include "migstate.h"
            int main(void)
            {
                printf("%u %u %u\n", GI_MINOR(0, 0), GI_MINOR(3, 3), CI_MINOR(6, 11, 7));
                printf(STATE_MAGIC "\n" STATE_KEY_FORMAT, "k1");
                printf(STATE_GPU_FORMAT, "GPU-a", 1u, 3u);
                printf(STATE_GI_FORMAT, "GPU-a", 2u, 9u, 4u);
                printf(STATE_CI_FORMAT, "GPU-a", 2u, 0u, 2u, 0u, "MIG-b");
                printf(ACCESS_FORMAT, 21u, ACCESS_MODE);
                printf(ACCESS_FORMAT, CAP_CONFIG_MINOR, CONFIG_ACCESS_MODE);
                printf(MIG_MINORS_CONFIG_FORMAT MIG_MINORS_MONITOR_FORMAT, 1, 2);
                printf(MIG_MINORS_GI_FORMAT MIG_MINORS_CI_FORMAT, 3, 3, 435, 6, 11, 7, 920);
                printf("%o %o %d\n", CAP_CONFIG_NODE_MODE, CAP_NODE_MODE, MIG_MINORS_GPUS);
                printf("%s %s %s %s %s %u\n", STATE_FILE, LOCK_FILE, MODE_FILE, CAPS_PROC,
                       CAPS_DEV, CAPS_MAJOR);
                printf("%s\n", EVENT_LOG);
                return 0;
            }
            """
        )
    )
    exe = compile_c([prog], tmp_path / "probe", [f"-I{tmp_path}"])
    out = subprocess.run([exe], capture_output=True, text=True, check=True).stdout
    minors, rest = out.split("\n", 1)
    assert minors == "3 435 920"  # NVIDIA's sample mig-minors lines (gpu6/gi11/ci7 920)
    state = (
        "gpunode-sim-mig-state v1\nkey\tk1\n"
        "gpu\tuuid=GPU-a\tmode=1\tcounter=3\n"
        "gi\tparent=GPU-a\tid=2\tprofile=9\tstart=4\n"
        "ci\tparent=GPU-a\tgi=2\tid=0\tprofile=2\tstart=0\tuuid=MIG-b\n"
    )
    access = migstate.ACCESS.format(minor=21, mode=292) + migstate.ACCESS.format(minor=1, mode=256)
    mig_minors = "config 1\nmonitor 2\ngpu3/gi3/access 435\ngpu6/gi11/ci7/access 920\n"
    paths = " ".join(
        [
            f"/proc/driver/{migstate.SIM_DIR}/{migstate.STATE_NAME}",
            f"/proc/driver/{migstate.SIM_DIR}/{migstate.LOCK_NAME}",
            f"{migstate.NODE_DISK}/{migstate.MODE_NAME}",
            "/proc/driver/nvidia/capabilities",
            "/dev/nvidia-caps",
            "511",
        ]
    )
    event_log = f"{xidraise.EVENT_LOG}\n"  # the log sim xid appends to is the one the mock reads
    assert rest == state + access + mig_minors + "400 444 32\n" + paths + "\n" + event_log


# NVIDIA's runtime in jit-cdi mode resolving a MIG UUID (nvcdi's
# newMIGDeviceSpecGeneratorFromNVMLDevice), and its cdi mode enumerating MIG devices
# (go-nvlib's VisitMigDevices): both must name a MIG device "<GPU index>:<MIG index>" alike.
MIG_INDEX = textwrap.dedent(
    r"""
    import ctypes, json, sys
    from ctypes import byref, c_uint, c_void_p

    SUCCESS, NOT_FOUND = 0, 6
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == SUCCESS

    def uuid_of(h):
        buf = ctypes.create_string_buffer(96)
        assert nvml.nvmlDeviceGetUUID(h, buf, 96) == SUCCESS
        return buf.value.decode()

    enumerated, full = {}, []
    count = c_uint()
    assert nvml.nvmlDeviceGetCount_v2(byref(count)) == SUCCESS
    for i in range(count.value):
        h = c_void_p()
        assert nvml.nvmlDeviceGetHandleByIndex_v2(i, byref(h)) == SUCCESS
        index = c_uint()
        assert nvml.nvmlDeviceGetIndex(h, byref(index)) == SUCCESS
        full.append(index.value)
        current, pending = c_uint(), c_uint()
        if nvml.nvmlDeviceGetMigMode(h, byref(current), byref(pending)) != SUCCESS:
            continue
        if current.value != 1:
            continue
        most = c_uint()
        assert nvml.nvmlDeviceGetMaxMigDeviceCount(h, byref(most)) == SUCCESS
        for j in range(most.value):
            m = c_void_p()
            rc = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j, byref(m))
            if rc == NOT_FOUND:
                continue
            assert rc == SUCCESS
            enumerated[uuid_of(m)] = f"{i}:{j}"

    resolved = {}
    for uuid in json.loads(sys.argv[1]):
        m, parent = c_void_p(), c_void_p()
        assert nvml.nvmlDeviceGetHandleByUUID(uuid.encode(), byref(m)) == SUCCESS
        assert nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(m, byref(parent)) == SUCCESS
        parent_index, mig_index = c_uint(), c_uint()
        rc = nvml.nvmlDeviceGetIndex(parent, byref(parent_index))
        assert rc == SUCCESS, f"failed to get parent device index: {rc}"
        rc = nvml.nvmlDeviceGetIndex(m, byref(mig_index))
        resolved[uuid] = (f"{parent_index.value}:{mig_index.value}" if rc == SUCCESS
                          else f"failed to get MIG device index: {rc}")
    nvml.nvmlShutdown()
    print(json.dumps({"full": full, "enumerated": enumerated, "resolved": resolved}))
    """
)


@needs_unshare
def test_a_mig_device_index_is_its_index_within_its_parent(built_lib, tmp_path, pynvml_ready):  # noqa: F811
    profile = load_profile("a100x2-mig")
    uuids = [m.uuid for m in profile.gpus[0].mig_instances]
    libdir = install_lib(built_lib, mock_payload(profile), tmp_path)
    script = tmp_path / "mig_index.py"
    script.write_text(MIG_INDEX)
    env = {"LD_LIBRARY_PATH": str(libdir), "PATH": "/usr/bin:/bin", "PYTHONPATH": ""}
    proc = in_private_dev([sys.executable, str(script), json.dumps(uuids)], [0, 1], env=env)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["full"] == [0, 1]
    # the MIG devices by GPU instance id: 3g.40gb (GI 2), 2g.20gb (GI 3), 1g.10gb (GI 9)
    assert got["enumerated"] == {uuids[0]: "0:0", uuids[1]: "0:1", uuids[2]: "0:2"}
    assert got["resolved"] == got["enumerated"]
