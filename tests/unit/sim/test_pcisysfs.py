"""The node's NVIDIA PCI functions in /sys/bus/pci/devices (gpunode.sim.pcisysfs, applied by
gpunode.sim.apply without the tmpfs mount, on a stand-in for the kernel's directory), read
as NVIDIA's tools read them: go-nvlib's nvpci (what `nvidia-ctk system
create-dev-char-symlinks --create-all` counts GPUs with), go-gpuallocator's NUMA node, and
gpunode's own preflight."""

from __future__ import annotations

import errno
import itertools
import json
import os
from pathlib import Path

import pytest

from gpunode.provision.preflight import pci_gpus
from gpunode.sim.apply import Paths, Result, apply_pci_sysfs
from gpunode.sim.pcisysfs import gpu_function
from gpunode.sim.profiles import load_profile, mock_payload

NVIDIA, MELLANOX = 0x10DE, 0x15B3
VGA, CONTROLLER_3D, NVSWITCH = 0x030000, 0x030200, 0x068000


def read_field(path: Path, field: str) -> int:
    """nvpci's readPCIField: the file, trimmed, parsed as Go's ParseUint(s, 0, n)."""
    return int((path / field).read_text().strip(), 0)


def eval_symlink_base(path: Path) -> str | None:
    """filepath.EvalSymlinks then Base; None where it does not exist (nvpci: no driver)."""
    try:
        return Path(os.path.realpath(path, strict=True)).name
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return None
        raise


def nvpci_all_devices(root: Path) -> list[dict]:
    """go-nvlib pkg/nvpci GetAllDevices / getNvidiaDeviceByPciBusID, transcribed: an entry
    whose vendor cannot be read is an error for the whole listing."""
    found = []
    for address in os.listdir(root):
        path = root / address
        vendor = read_field(path, "vendor")
        if vendor not in (NVIDIA, MELLANOX):
            continue
        dev = {
            "address": address,
            "vendor": vendor,
            "class": read_field(path, "class"),
            "device": read_field(path, "device"),
            "numa_node": int((path / "numa_node").read_text().strip(), 0),
            "subsystem": [
                read_field(path, "subsystem_vendor"),
                read_field(path, "subsystem_device"),
            ],
            "driver": eval_symlink_base(path / "driver") or "",
            "iommu_group": eval_symlink_base(path / "iommu_group"),
        }
        resources = {}
        for i, line in enumerate((path / "resource").read_text().strip().split("\n")):
            values = line.split(" ")
            assert len(values) == 3, f"more than 3 entries in line '{i}' of resource file"
            start, end, flags = (int(v, 0) for v in values)
            if end - start:
                resources[i] = [start, end, flags]
        dev["resources"] = resources
        assert not (path / "physfn").exists() and not (path / "sriov_totalvfs").exists()
        found.append(dev)
    return sorted(found, key=lambda d: int(d["address"].replace(":", "").replace(".", ""), 16))


def nvpci_gpus(root: Path) -> list[dict]:
    """nvpci GetGPUs: VGA or 3D controllers that are no virtual function."""
    return [d for d in nvpci_all_devices(root) if d["class"] in (VGA, CONTROLLER_3D)]


def host(tmp_path: Path) -> Path:
    """A stand-in for the kernel's /sys: /sys/devices/pci0000:00/<function> directories and
    /sys/bus/pci/devices/<function> symlinks to them, with a host bridge, a NIC at an
    address a100x4 gives its GPU 0, and the host's own NVIDIA GPU."""
    sys_ = tmp_path / "sys"
    devices = sys_ / "bus/pci/devices"
    devices.mkdir(parents=True)
    for address, vendor, klass in (
        ("0000:00:00.0", "0x8086", "0x060000"),
        ("0000:07:00.0", "0x8086", "0x020000"),
        ("0000:65:00.0", "0x10de", "0x030000"),
    ):
        real = sys_ / "devices/pci0000:00" / address
        real.mkdir(parents=True)
        (real / "vendor").write_text(vendor + "\n")
        (real / "class").write_text(klass + "\n")
        (devices / address).symlink_to(f"../../../devices/pci0000:00/{address}")
    return devices


KERNEL = {
    "0000:00:00.0": "../../../devices/pci0000:00/0000:00:00.0",
    "0000:07:00.0": "../../../devices/pci0000:00/0000:07:00.0",
    "0000:65:00.0": "../../../devices/pci0000:00/0000:65:00.0",
}


def listing(devices: Path) -> dict[str, str]:
    return {e.name: os.readlink(e) if e.is_symlink() else "dir" for e in sorted(devices.iterdir())}


def apply(name: str, paths: Paths) -> list[str]:
    res = Result()
    apply_pci_sysfs(load_profile(name), paths, res)
    return res.changed


@pytest.fixture
def node(tmp_path) -> Paths:
    host(tmp_path)
    return Paths(
        pci_devices=tmp_path / "sys/bus/pci/devices",
        pci_snapshot=tmp_path / "run/pci-devices.json",
        real_system=False,
    )


def test_nvidia_ctk_finds_the_profiles_gpus(node, tmp_path):
    assert apply("a100x4", node)
    devices = node.pci_devices
    gpus = nvpci_gpus(devices)
    profile = load_profile("a100x4")
    # create-dev-char-symlinks --create-all: one /dev/nvidia<N> per GPU nvpci finds
    assert [g["address"] for g in gpus] == [g.bus_id.procfs for g in profile.gpus]
    assert {(g["vendor"], g["class"], g["device"]) for g in gpus} == {(NVIDIA, 0x030200, 0x20B2)}
    assert [g["numa_node"] for g in gpus] == [0, 0, 1, 1]
    assert {tuple(g["subsystem"]) for g in gpus} == {(0x10DE, 0x147F)}
    # the driver link names nvidia; the host has no NVIDIA module, so it resolves nowhere
    assert {os.readlink(devices / g["address"] / "driver") for g in gpus} == {
        "../../drivers/nvidia"
    }
    assert {g["driver"] for g in gpus} == {""}
    assert {g["iommu_group"] for g in gpus} == {None}
    bars = gpus[0]["resources"]
    assert sorted(bars) == [0, 1, 3]  # BAR0, BAR1 (64-bit), BAR3
    assert bars[1][1] - bars[1][0] + 1 == 128 << 30  # BAR1 covers the 80 GiB framebuffer
    # no two functions' BARs overlap
    everything = nvpci_all_devices(devices)
    spans = sorted((s, e) for g in everything for s, e, _ in g["resources"].values())
    assert len(spans) == 4 * 3
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))
    # HGX A100 4-GPU: the GPUs' NVLinks join them directly; nvpci's GetNVSwitches finds none
    assert not [d for d in everything if d["class"] == NVSWITCH]
    # the host's other functions stay, as the kernel's symlinks; its own NVIDIA GPU and its
    # function at the address of the profile's GPU 0 are not this node's
    assert {n: t for n, t in listing(devices).items() if t != "dir"} == {
        "0000:00:00.0": KERNEL["0000:00:00.0"]
    }
    assert (devices / "0000:00:00.0" / "vendor").read_text() == "0x8086\n"


def test_nvidia_ctk_finds_the_nvswitches_of_an_hgx_board(node):
    apply("h100x8", node)
    everything = nvpci_all_devices(node.pci_devices)
    # the four NVSwitches the GPUs' NVLinks reach, as nvpci's GetNVSwitches sees them
    switches = [d for d in everything if d["class"] == NVSWITCH]
    assert [d["address"] for d in switches] == [f"0000:e{i}:00.0" for i in range(3, 7)]
    assert {d["device"] for d in switches} == {0x22A3}
    # no two functions' BARs overlap (GPUs and NVSwitches)
    spans = sorted((s, e) for g in everything for s, e, _ in g["resources"].values())
    assert len(spans) == 8 * 3 + 4
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


def test_gpunode_and_the_device_plugin_read_it_as_on_a_server(node, tmp_path):
    apply("h100x8", node)
    # gpunode's preflight (vendor 0x10de, a display class): the node's GPUs, by device id
    root = tmp_path
    assert [(g["bus_id"], g["device_id"]) for g in pci_gpus(root)] == [
        (g.bus_id.procfs, "0x2330") for g in load_profile("h100x8").gpus
    ]
    # go-gpuallocator's PciInfo.NumaNode and the plugin's GetNumaNode: NVML's bus id, lower
    # case, one "0000" trimmed, then /sys/bus/pci/devices/<id>/numa_node
    for g in load_profile("h100x8").gpus:
        bus = g.bus_id.nvml.lower().removeprefix("0000")
        assert (node.pci_devices / bus / "numa_node").read_text().strip() == str(g.numa_node)


def test_config_space_and_link_attributes(tmp_path):
    gpu = load_profile("h100x8-degraded").gpus[0]  # pcie_link_degraded: x8 of x16
    f = gpu_function(gpu)
    assert f.files["current_link_speed"] == "32.0 GT/s PCIe\n"
    assert (f.files["current_link_width"], f.files["max_link_width"]) == ("8\n", "16\n")
    # NVML (the mock's payload) shows the same trained width: one owner of the fault's effect
    assert gpu.pcie_trained_width == 8
    payload = mock_payload(load_profile("h100x8-degraded")).splitlines()
    line = next(x for x in payload if x.startswith("gpu\t") and f"uuid={gpu.uuid}" in x)
    assert {"pcie_width=8", "pcie_width_max=16"} <= set(line.split("\t"))
    c = f.config
    assert len(c) == 256
    assert c[0:4] == bytes.fromhex("de103023")  # vendor 10de, device 2330, little-endian
    assert c[8:12] == bytes([0xA1, 0x00, 0x02, 0x03])  # revision, prog-if, 3D controller
    assert c[0x2C:0x30] == bytes.fromhex("de10c116")  # subsystem 10de:16c1
    assert c[0x14] & 0xF == 0xC  # BAR1: 64-bit prefetchable memory
    assert f.files["uevent"].splitlines()[:3] == [
        "DRIVER=nvidia",
        "PCI_CLASS=30200",
        "PCI_ID=10DE:2330",
    ]


def test_reapplying_is_idempotent_and_another_profile_replaces_it(node, tmp_path):
    devices = node.pci_devices
    apply("a100x4", node)
    assert apply("a100x4", node) == []
    assert json.loads(node.pci_snapshot.read_text()) == {
        name: [target, vendor]
        for (name, target), vendor in zip(
            KERNEL.items(), ("0x8086", "0x8086", "0x10de"), strict=True
        )
    }
    apply("h100x8", node)
    h100 = [g.bus_id.procfs for g in load_profile("h100x8").gpus]
    assert [g["address"] for g in nvpci_gpus(devices)] == h100
    # 07:00.0 is no GPU any more: the kernel's function there shows again
    assert listing(devices)["0000:07:00.0"] == KERNEL["0000:07:00.0"]
    apply("t4x2-faulty", node)  # no NVSwitches
    assert not [d for d in nvpci_all_devices(devices) if d["class"] == NVSWITCH]


def test_no_gpus_give_back_the_kernels_directory(node, tmp_path):
    apply("a100x4", node)
    apply("nogpu", node)
    assert listing(node.pci_devices) == KERNEL
    assert not node.pci_snapshot.exists()
    assert apply("nogpu", node) == []


def test_nothing_outside_a_node_unless_asked(tmp_path):
    assert apply("a100x4", Paths(real_system=False)) == []
