"""A simulated GPU node is indistinguishable, for NVML consumers, from a server with a
loaded NVIDIA driver: pynvml, `gpunode inventory` and containers of the node's own engine."""

from __future__ import annotations

import json
import shlex
import textwrap
from pathlib import Path

import pytest

from gpunode.sim import procfs
from gpunode.sim.profiles import load_profile

from ..proc_devices import NoNvidiaDevices, get, nvidia_devices

pytestmark = pytest.mark.integration

A100 = load_profile("a100x4")

PROBE = textwrap.dedent(
    """
    import json, pynvml as N
    try:
        N.nvmlInit()
    except N.NVMLError as e:
        print(json.dumps({"error": type(e).__name__})); raise SystemExit
    out = {"driver": N.nvmlSystemGetDriverVersion(), "cuda": N.nvmlSystemGetCudaDriverVersion(),
           "count": N.nvmlDeviceGetCount(), "gpus": []}
    for i in range(out["count"]):
        try:
            h = N.nvmlDeviceGetHandleByIndex(i)
        except N.NVMLError as e:
            out["gpus"].append({"error": type(e).__name__}); continue
        ecc = N.nvmlDeviceGetTotalEccErrors(h, N.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                            N.NVML_VOLATILE_ECC)
        out["gpus"].append({
            "uuid": N.nvmlDeviceGetUUID(h), "bus": N.nvmlDeviceGetPciInfo(h).busId,
            "name": N.nvmlDeviceGetName(h), "minor": N.nvmlDeviceGetMinorNumber(h),
            "memory": N.nvmlDeviceGetMemoryInfo(h).total, "ecc_uncorrected": ecc,
            "pending": N.nvmlDeviceGetRetiredPagesPendingStatus(h),
        })
    N.nvmlShutdown()
    print(json.dumps(out))
    """
)


def expected(profile, minors=None):
    return [g for g in profile.gpus if minors is None or g.minor in minors]


def test_pynvml_and_inventory_report_exactly_the_profile(node):
    nv = node.pynvml(PROBE)
    assert nv["driver"] == "535.261.03"
    assert nv["cuda"] == 12020
    assert nv["count"] == 4
    assert [g["uuid"] for g in nv["gpus"]] == [g.uuid for g in A100.gpus]
    assert [g["bus"] for g in nv["gpus"]] == [g.bus_id.nvml for g in A100.gpus]
    assert [g["memory"] for g in nv["gpus"]] == [81920 * 1024 * 1024] * 4

    inv = node.json("gpunode inventory --json")
    assert inv["source"] == "nvml"
    assert inv["driver_version"] == "535.261.03"
    assert inv["gpu_count"] == 4
    assert [g["uuid"] for g in inv["gpus"]] == [g.uuid for g in A100.gpus]
    assert [g["pci_bus_id"] for g in inv["gpus"]] == [g.bus_id.nvml for g in A100.gpus]
    assert [g["memory_total_mib"] for g in inv["gpus"]] == [81920] * 4
    assert inv["healthy"] is True


def test_driver_files_look_like_a_loaded_driver(node):
    listing = node.sh("stat -c '%n %F %t:%T' /dev/nvidia*").stdout.split("\n")
    # stat prints majors/minors in hex
    assert "/dev/nvidiactl character special file c3:ff" in listing
    assert "/dev/nvidia-modeset character special file c3:fe" in listing
    assert "/dev/nvidia2 character special file c3:2" in listing
    uvm = [ln for ln in listing if ln.startswith("/dev/nvidia-uvm ")]
    assert uvm and not uvm[0].endswith("c3:0")  # dynamic major, not 195
    assert "535.261.03" in node.sh("cat /proc/driver/nvidia/version").stdout
    assert node.sh("ls /proc/driver/nvidia/gpus").stdout.split() == [
        g.bus_id.procfs for g in A100.gpus
    ]
    info = node.sh("cat /proc/driver/nvidia/gpus/0000:0f:00.0/information").stdout
    assert f"GPU UUID: \t {A100.gpus[1].uuid}" in info
    assert node.sh("findmnt -no FSTYPE /proc/driver").stdout.strip() == "tmpfs"
    lib = node.sh("readlink /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").stdout.strip()
    assert lib == "libnvidia-ml.so.535.261.03"
    assert "libnvidia-ml.so.1 " in node.sh("ldconfig -p").stdout


PCI_PROBE = (
    "from pathlib import Path; import json; from gpunode.provision.preflight import pci_gpus; "
    "print(json.dumps(pci_gpus(Path('/'))))"
)


def test_pci_sysfs_shows_the_gpus_as_the_kernel_would(node):
    """NVIDIA's tools and gpunode's preflight find the GPUs in the node's PCI sysfs: a tmpfs
    over /sys/bus/pci/devices with the kernel's other entries (issue 25 §5)."""
    assert node.sh("findmnt -no FSTYPE /sys/bus/pci/devices").stdout.strip() == "tmpfs"
    found = node.json(f"/opt/gpunode/bin/python -c {shlex.quote(PCI_PROBE)}")
    assert [(g["bus_id"], g["device_id"], g["class"]) for g in found] == [
        (g.bus_id.procfs, "0x20b2", "0x030200") for g in A100.gpus
    ]
    numa = node.sh("cat /sys/bus/pci/devices/0000:47:00.0/numa_node").stdout.strip()
    assert numa == "1"
    # every other entry is the kernel's: a symlink that resolves, with a vendor to read
    others = node.sh(
        "for e in /sys/bus/pci/devices/*; do [ -L $e ] && { cat $e/vendor || echo unreadable; }"
        "; done; true"
    ).stdout.split()
    assert "unreadable" not in others and "0x10de" not in others
    node.apply("nogpu")
    assert node.sh("findmnt -no FSTYPE /sys/bus/pci/devices", check=False).stdout.strip() == ""
    assert node.json(f"/opt/gpunode/bin/python -c {shlex.quote(PCI_PROBE)}") == []


def test_reapplying_is_idempotent(node):
    assert node.apply("a100x4")["changed"] is False


def test_removing_a_device_node_hides_that_gpu(node):
    node.sh("rm /dev/nvidia2")
    nv = node.pynvml(PROBE)
    want = [g.uuid for g in expected(A100, {0, 1, 3})]
    assert [g["uuid"] for g in nv["gpus"]] == want
    inv = node.json("gpunode inventory --json")
    assert [g["uuid"] for g in inv["gpus"]] == want
    assert [p["uuid"] for p in inv["problems"]] == [A100.gpus[2].uuid]
    # re-applying the profile recreates it
    assert node.apply("a100x4")["changed"] is True
    assert node.pynvml(PROBE)["count"] == 4


def test_profile_faults_surface_through_nvml(node):
    node.apply("t4x2-faulty")
    nv = node.pynvml(PROBE)
    assert [g["name"] for g in nv["gpus"]] == ["Tesla T4", "Tesla T4"]
    assert [g["ecc_uncorrected"] for g in nv["gpus"]] == [0, 2]
    assert [g["pending"] for g in nv["gpus"]] == [0, 1]
    inv = node.json("gpunode inventory --json")
    assert inv["healthy"] is False
    # the double-bit errors are also in the node's kernel log as the driver's Xid 48
    assert set(inv["gpus"][1]["health"]) == {"ecc_uncorrectable", "retired_pages_pending", "xid_error"}
    assert [e["xid"] for e in inv["gpus"][1]["xid_errors"]] == [48] and inv["gpus"][0]["xid_errors"] == []
    # the previous profile's GPUs are gone, not left behind
    assert node.sh("ls /proc/driver/nvidia/gpus").stdout.split() == ["0000:3b:00.0", "0000:d8:00.0"]
    assert node.sh("ls /dev | grep -c '^nvidia[0-9]'").stdout.strip() == "2"


def test_lost_gpu_is_gpu_is_lost(node, tmp_path):
    profile = tmp_path / "lost.yaml"
    profile.write_text(
        textwrap.dedent(f"""
        name: lost
        driver: {{version: "550.163.01", cuda_version: "12.4"}}
        defaults: {{model: NVIDIA H100 80GB HBM3, memory_mib: 81559, compute_capability: "9.0"}}
        gpus:
          - {{uuid: {A100.gpus[0].uuid}, bus_id: "0000:18:00.0"}}
          - {{uuid: {A100.gpus[1].uuid}, bus_id: "0000:2a:00.0", faults: [fallen_off_bus]}}
        """)
    )
    node.apply(str(profile))
    nv = node.pynvml(PROBE)
    assert nv["driver"] == "550.163.01"
    assert nv["gpus"][1] == {"error": "NVMLError_GpuIsLost"}
    inv = node.json("gpunode inventory --json")
    assert inv["gpus"][1]["health"] == ["fallen_off_bus"]
    assert inv["gpus"][1]["uuid"] == A100.gpus[1].uuid
    # the library file carries the new driver version in its name
    assert node.sh("readlink /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1").stdout.strip() == (
        "libnvidia-ml.so.550.163.01"
    )
    assert (
        node.sh("ls /usr/lib/x86_64-linux-gnu/ | grep -c '^libnvidia-ml.so.5'").stdout.strip()
        == "1"
    )


def test_no_driver_node(node):
    node.apply("nogpu")
    proc = node.sh("gpunode inventory", check=False)
    assert proc.returncode == 3
    assert proc.stderr.strip().startswith("gpunode: error: no NVIDIA driver found")
    assert len(proc.stderr.strip().splitlines()) == 1
    # no driver installed at all: no libnvidia-ml either
    assert node.pynvml(PROBE) == {"error": "NVMLError_LibraryNotFound"}
    assert node.sh("ls /dev | grep -c nvidia", check=False).stdout.strip() == "0"


def test_mock_stays_the_nvml_when_debian_packages_install(node):
    """The paths Debian's libnvidia-ml1 ships are diverted to *.gpunode-real."""
    listing = node.sh("dpkg-divert --list 'gpunode-sim' || dpkg-divert --list").stdout
    for path in (
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03",
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.535.261.03",
    ):
        assert f"diversion of {path} to {path}.gpunode-real by gpunode-sim" in listing


def test_inner_container_sees_only_the_gpu_it_was_given(node):
    pynvml_file = node.sh(
        "/opt/gpunode/bin/python -c 'import pynvml; print(pynvml.__file__)'"
    ).stdout.strip()
    lib = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03"
    run = (
        "docker run --rm --network none --device /dev/nvidiactl --device /dev/nvidia1 "
        f"-v {lib}:/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:ro "
        f"-v {pynvml_file}:/opt/pynvml/pynvml.py:ro -e PYTHONPATH=/opt/pynvml "
        f"{node.workload} python3 -c {shlex.quote(PROBE)}"
    )
    nv = json.loads(node.sh(run).stdout)
    assert nv["count"] == 1
    assert [g["uuid"] for g in nv["gpus"]] == [A100.gpus[1].uuid]
    assert nv["gpus"][0]["minor"] == 1
    # and the container has no other GPU device node
    ls = node.sh(
        f"docker run --rm --network none --device /dev/nvidia1 {node.workload} "
        "sh -c 'ls /dev | grep ^nvidia'"
    ).stdout.split()
    assert ls == ["nvidia1"]


DRIVER_TREE = "ls /proc/driver/nvidia /proc/driver/nvidia/gpus; cat /proc/driver/nvidia/params"


def driver_tree(listing: str) -> tuple[list[str], list[str], str]:
    """(entries of /proc/driver/nvidia, of its gpus/, the ModifyDeviceFiles line)"""
    top = listing.split("/proc/driver/nvidia/gpus:")[0].split(":", 1)[1].split()
    gpus = listing.split("/proc/driver/nvidia/gpus:")[1].split("ResmanDebugLevel")[0].split()
    modify = next(ln for ln in listing.splitlines() if ln.startswith("ModifyDeviceFiles"))
    return top, gpus, modify


def test_every_container_sees_the_driver_tree(node):
    """As the kernel module shows /proc/driver/nvidia in every procfs, containers of the
    node's engines (Docker with plain runc, podman with crun, containerd) see the node's
    driver tree, read-only, and its /proc/devices."""
    # capabilities/: the driver's nvidia-caps files (MIG config and monitor), as on a server
    top = ["capabilities", "gpus", "params", "registry", "version"]
    want = (top, sorted(g.bus_id.procfs for g in A100.gpus))
    docker = node.sh(f"docker run --rm --runtime runc {node.workload} sh -c '{DRIVER_TREE}'")
    top, gpus, modify = driver_tree(docker.stdout)
    assert (top, gpus) == want and modify == "ModifyDeviceFiles: 1"
    node.sh(f"docker save {node.workload} -o /tmp/workload.tar")
    node.sh("podman --cgroup-manager cgroupfs load -q -i /tmp/workload.tar")
    podman = node.sh(
        "podman --cgroup-manager cgroupfs run --rm --network none "
        f"{node.workload} sh -c '{DRIVER_TREE}'"
    )
    assert driver_tree(podman.stdout)[:2] == want
    devices = node.sh("cat /proc/devices").stdout
    assert majors(devices) == (195, 510, 511)
    podman_devices = node.sh(
        f"podman --cgroup-manager cgroupfs run --rm --network none {node.workload} "
        "cat /proc/devices"
    )
    assert podman_devices.stdout == devices
    node.sh("ctr -n gpunode-test images import --snapshotter native /tmp/workload.tar")
    ctr = node.sh(
        "ctr -n gpunode-test run --rm --snapshotter native "
        f"docker.io/{node.workload} t-driver-tree /bin/sh -c '{DRIVER_TREE}'"
    )
    assert driver_tree(ctr.stdout)[:2] == want
    ctr_devices = node.sh(
        "ctr -n gpunode-test run --rm --snapshotter native "
        f"docker.io/{node.workload} t-devices /bin/cat /proc/devices"
    )
    assert ctr_devices.stdout == devices
    write = node.sh(
        f"docker run --rm --runtime runc {node.workload} touch /proc/driver/nvidia/params",
        check=False,
    )
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    # a node without a driver: no tree, as on a server without the kernel module
    node.apply("nogpu")
    bare = node.sh(f"docker run --rm --runtime runc {node.workload} ls /proc/driver", check=False)
    assert bare.returncode == 0 and "nvidia" not in bare.stdout


def majors(text: str) -> tuple[int | None, int | None, int | None]:
    """The GPU, nvidia-uvm and nvidia-caps majors NVIDIA's toolkit reads from the text."""
    devices = nvidia_devices(text)
    return get(devices, "nvidia"), get(devices, "nvidia-uvm"), get(devices, "nvidia-caps")


def test_proc_devices_shows_the_drivers_majors_to_every_process(node):
    """As the kernel lists a loaded driver's majors in /proc/devices for every process and
    container (NVIDIA's tools find the device majors there), the node and containers of
    its engine see the kernel's file plus the driver's lines, read-only."""
    kernel = Path("/proc/devices").read_text()  # the node's kernel is this host's
    want = procfs.render_devices(kernel, procfs.driver_chrdevs(A100))
    assert "195 nvidia-frontend\n" in want  # a 535 driver
    seen = {
        "node": node.sh("cat /proc/devices").stdout,
        "node, non-root": node.sh(
            "setpriv --reuid=65534 --regid=65534 --clear-groups cat /proc/devices"
        ).stdout,
        "docker --runtime runc": node.sh(
            f"docker run --rm --runtime runc {node.workload} cat /proc/devices"
        ).stdout,
        "docker, non-root": node.sh(
            f"docker run --rm --runtime runc --user 65534:65534 {node.workload} cat /proc/devices"
        ).stdout,
    }
    assert seen == dict.fromkeys(seen, want)
    assert majors(seen["docker --runtime runc"]) == (195, 510, 511)
    # the majors are those of the device nodes the driver made
    uvm = node.sh("stat -c %t /dev/nvidia-uvm").stdout.strip()
    assert int(uvm, 16) == 510
    write = node.sh(
        f"docker run --rm --runtime runc {node.workload} sh -c 'echo x > /proc/devices'",
        check=False,
    )
    assert write.returncode != 0 and "Read-only file system" in write.stderr
    assert "Read-only file system" in node.sh("echo x > /proc/devices", check=False).stderr
    # the file shown is not ours any more (removed): re-applying mounts a new one
    node.sh("rm /run/gpunode-sim/devices")
    assert "unmounted a stale /proc/devices" in node.apply("a100x4")["changes"]
    assert node.sh("cat /proc/devices").stdout == want

    # One table for all: a running container sees another driver and its unloading.
    node.sh(f"docker run -d --name t-devices --runtime runc {node.workload} sleep 600")
    try:
        node.apply("h100x8")  # a 550 driver
        running = node.sh("docker exec t-devices cat /proc/devices").stdout
        assert running == node.sh("cat /proc/devices").stdout
        assert "195 nvidia\n195 nvidia-modeset\n195 nvidiactl\n" in running
        assert majors(running) == (195, 510, 511)
        node.apply("nogpu")
        for text in (
            node.sh("cat /proc/devices").stdout,
            node.sh("docker exec t-devices cat /proc/devices").stdout,
            node.sh(f"docker run --rm --runtime runc {node.workload} cat /proc/devices").stdout,
        ):
            assert text == kernel
            with pytest.raises(NoNvidiaDevices):
                nvidia_devices(text)
        assert node.sh("findmnt -n /proc/devices", check=False).stdout == ""
    finally:
        node.sh("docker rm -f t-devices", check=False)


MIG_MAKE = textwrap.dedent(
    """
    import json, pynvml as N
    N.nvmlInit()
    h = N.nvmlDeviceGetHandleByIndex(1)  # a100x2-mig: GPU 1 is MIG-capable, MIG disabled
    N.nvmlDeviceSetMigMode(h, 1)
    gi = N.nvmlDeviceCreateGpuInstance(h, 19)  # 1g.10gb
    ci = N.nvmlGpuInstanceCreateComputeInstance(gi, N.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
    gi_id, ci_id = N.nvmlGpuInstanceGetInfo(gi).id, N.nvmlComputeInstanceGetInfo(ci).id
    m = N.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    print(json.dumps({"uuid": N.nvmlDeviceGetUUID(m), "gi": gi_id, "ci": ci_id,
                      "minor": N.nvmlDeviceGetMinorNumber(h)}))
    """
)

MIG_SEEN = textwrap.dedent(
    """
    import json, pynvml as N
    N.nvmlInit()
    seen = []
    for i in range(N.nvmlDeviceGetCount()):
        h = N.nvmlDeviceGetHandleByIndex(i)
        for j in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                seen.append(N.nvmlDeviceGetUUID(N.nvmlDeviceGetMigDeviceHandleByIndex(h, j)))
            except N.NVMLError_NotFound:
                pass
    print(json.dumps(seen))
    """
)


def cap_minor(node, path: str) -> int:
    text = node.sh(f"cat {path}").stdout
    return int(next(ln for ln in text.splitlines() if ln.startswith("DeviceFileMinor:")).split()[1])


def test_a_mig_device_made_on_the_node_reaches_a_container_with_its_cap_nodes(node):
    node.apply("a100x2-mig")
    made = node.pynvml(MIG_MAKE)
    # the driver's footprint: read the minors as product code does, from the access files
    where = f"/proc/driver/nvidia/capabilities/gpu{made['minor']}/mig/gi{made['gi']}"
    gi_minor = cap_minor(node, f"{where}/access")
    ci_minor = cap_minor(node, f"{where}/ci{made['ci']}/access")
    caps = [f"/dev/nvidia-caps/nvidia-cap{m}" for m in (gi_minor, ci_minor)]
    listing = node.sh(f"stat -c '%F %t:%T' {' '.join(caps)}").stdout.split("\n")
    assert listing[:2] == [f"character special file 1ff:{m:x}" for m in (gi_minor, ci_minor)]
    # MIG mode is kept on the node's disk too (real GPUs keep it across reboots)
    modes = node.sh("cat /var/lib/gpunode-sim/mig-mode").stdout
    assert "GPU-7c41e0a2-5f3b-4d19-a8e6-2b9d0c4f6a52\t1\n" in modes
    # every process of the node sees it, and re-applying the same profile keeps it
    assert made["uuid"] in node.pynvml(MIG_SEEN)
    node.apply("a100x2-mig")
    assert made["uuid"] in node.pynvml(MIG_SEEN)

    pynvml_file = node.sh(
        "/opt/gpunode/bin/python -c 'import pynvml; print(pynvml.__file__)'"
    ).stdout.strip()
    lib = "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.535.261.03"
    run = (
        "docker run --rm --runtime runc --network none --device /dev/nvidiactl "
        f"--device /dev/nvidia{made['minor']} {{devices}} "
        f"-v {lib}:/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1:ro "
        f"-v {pynvml_file}:/opt/pynvml/pynvml.py:ro -e PYTHONPATH=/opt/pynvml "
        f"{node.workload} python3 -c {shlex.quote(MIG_SEEN)}"
    )
    given = " ".join(f"--device {c}" for c in caps)
    assert json.loads(node.sh(run.format(devices=given)).stdout) == [made["uuid"]]
    assert json.loads(node.sh(run.format(devices="")).stdout) == []
