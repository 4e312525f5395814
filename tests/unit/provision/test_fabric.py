"""NVSwitch baseboards before the driver: detection from fake PCI sysfs trees, the fabric
manager in the driver plan (lockstep with the driver, held, its service), and the one-line
refusals (no FM build at the driver's version, a distro driver without FM, a node whose
kernel module is not managed here without FM, B200-class boards)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpunode.cli.main import main as cli_main
from gpunode.provision import ProvisionError, fabric, packages, preflight
from gpunode.provision.sources import driver_plan, platform
from gpunode.util import tool

H100, A100, B200 = "0x2330", "0x20b2", "0x2901"
GPU_CLASS, SWITCH_CLASS = "0x030200", "0x068000"


def sysfs(root: Path, gpu: str, gpus: int, switch: str | None = None, switches: int = 0) -> Path:
    """A fake host: ``gpus`` NVIDIA GPUs of device id ``gpu`` and ``switches`` NVSwitches,
    plus an Intel function, in <root>/sys/bus/pci/devices."""
    (root / "etc").mkdir(parents=True, exist_ok=True)
    (root / "etc/os-release").write_text('ID=debian\nVERSION_ID="12"\n')
    # NVIDIA's repository among its sources (cuda-repo plans resolve against it)
    (root / "etc/apt/sources.list.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/apt/sources.list.d/cuda.list").write_text(
        "deb [signed-by=/etc/apt/keyrings/nvidia-cuda.asc] "
        "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /\n"
    )
    funcs = [("0x10de", GPU_CLASS, gpu)] * gpus + [("0x10de", SWITCH_CLASS, switch)] * switches
    funcs.append(("0x8086", "0x068000", "0x22a3"))  # not NVIDIA: an Intel bridge, same id
    for i, (vendor, klass, dev) in enumerate(funcs):
        d = root / f"sys/bus/pci/devices/0000:{0x18 + i:02x}:00.0"
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(klass + "\n")
        (d / "device").write_text(dev + "\n")
    return root


# --- detection ----------------------------------------------------------------------


def test_hgx_h100_and_dgx_a100_switches_are_counted_and_named(tmp_path):
    h = fabric.scan(sysfs(tmp_path / "h", H100, 8, "0x22a3", 4))
    assert h.to_dict()["count"] == 4 and h.generation == "LS10" and h.gpus == "H100/H200"
    assert h.describe() == "4 LS10 NVSwitches (H100/H200 baseboard)"
    a = fabric.scan(sysfs(tmp_path / "a", A100, 8, "0x1af1", 6))
    assert a.to_dict()["count"] == 6 and a.generation == "LR10" and not a.nvlink5_gpus


@pytest.mark.parametrize(
    ("device", "generation"),
    [("0x1ae8", "LR10"), ("0x1af0", "LR10"), ("0x1aff", "LR10"), ("0x22a0", "LS10"),
     ("0x22a7", "LS10"), ("0x1ae9", None), ("0x1aef", None), ("0x22b0", None),
     ("0x229f", None),
     # LS10's PCI-PCI bridge and non-transparent bridge functions: not a switch each
     ("0x22a8", None), ("0x22ab", None), ("0x22ac", None), ("0x22af", None)],
)  # fmt: skip
def test_the_driver_id_ranges_bound_the_table(device, generation):
    assert (fabric.nvswitch_generation(int(device, 16)) or (None,))[0] == generation


def test_a_switch_id_in_another_class_is_no_switch(tmp_path):
    root = sysfs(tmp_path, H100, 2, "0x22a3", 0)
    d = root / "sys/bus/pci/devices/0000:99:00.0"
    d.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("class", "0x030200"), ("device", "0x22a3")):
        (d / name).write_text(value)
    assert fabric.scan(root).nvswitches == []


def test_no_sysfs_no_fabric(tmp_path):
    assert fabric.scan(tmp_path).to_dict()["count"] == 0


def test_preflight_says_so(tmp_path):
    facts = preflight.collect(sysfs(tmp_path, H100, 8, "0x22a3", 4), kernel="6.1.0")
    assert facts.fabric["count"] == 4 and facts.fabric["generation"] == "LS10"
    assert facts.fabric["nvswitches"][0]["bus_id"] == "0000:20:00.0"
    assert facts.ok or all(p.check != "nvlink5" for p in facts.problems)


# --- B200: refused in one line --------------------------------------------------------


def test_b200_board_is_refused_before_anything(tmp_path, capsys):
    root = sysfs(tmp_path, B200, 8)
    facts = preflight.collect(root, kernel="6.1.0")
    assert not facts.ok
    (line,) = [p.message for p in facts.problems if p.check == "nvlink5"]
    assert "8 B200 GPU(s) (PCI 10de:2901)" in line and "not supported yet" in line
    assert "nvlsm" in line and "\n" not in line
    code = cli_main(
        ["provision", "driver-plan", "--json", "--branch", "580", "--source", "cuda-repo",
         "--distro", "debian", "--release", "12", "--arch", "x86_64", "--root", str(root)]
    )  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 2 and out["ok"] is False and "not supported yet" in out["message"]


# --- the fabric manager in the plan ---------------------------------------------------


@pytest.mark.parametrize(
    ("distro", "release", "source", "branch", "fm"),
    [
        ("debian", "12", "cuda-repo", "570", "nvidia-fabricmanager-570"),
        ("debian", "12", "cuda-repo", "575", "nvidia-fabricmanager-575"),
        ("debian", "12", "cuda-repo", "580", "nvidia-fabricmanager"),
        ("debian", "12", "cuda-repo", "590", "nvidia-fabricmanager"),
        ("ubuntu", "22.04", "cuda-repo", "550", "nvidia-fabricmanager-550"),
        ("ubuntu", "24.04", "cuda-repo", "580", "nvidia-fabricmanager"),
        ("ubuntu", "24.04", "distro", "580", "nvidia-fabricmanager-580"),  # Ubuntu's archive
        ("debian", "12", "distro", "535", "nvidia-fabricmanager-535"),  # NVIDIA's, if configured
        ("rhel", "9", "cuda-repo", "570", "nvidia-fabric-manager"),
        ("rhel", "9", "cuda-repo", "580", "nvidia-fabricmanager"),
    ],
)
def test_fabric_manager_joins_the_driver(tmp_path, distro, release, source, branch, fm):
    fab = fabric.scan(sysfs(tmp_path, H100, 8, "0x22a3", 4))
    plat = platform(distro, release)
    plain = driver_plan(plat, source=source, branch=branch)
    plan = driver_plan(plat, source=source, branch=branch, fabric=fab)
    assert plan.fabric_manager == fm and plan.fabric["fabric_manager"] == fm
    assert plan.packages == [*plain.packages, fm] and plan.hold == [*plain.hold, fm]
    assert plan.services == ["nvidia-persistenced", "nvidia-fabricmanager"]
    assert plan.version_package == plain.version_package


def test_without_the_kernel_module_fm_is_still_planned(tmp_path):
    """nvidia_driver_kernel_module: false (a preinstalled driver, simulated nodes): the
    fabric manager is userspace, so it is still installed at the driver's version, held and
    its service started; persistenced stays with the kernel module."""
    fab = fabric.scan(sysfs(tmp_path, A100, 4, "0x1af1", 6))
    plat = platform("debian", "12")
    plain = driver_plan(plat, source="distro", branch="535", kernel_module=False)
    plan = driver_plan(plat, source="distro", branch="535", kernel_module=False, fabric=fab)
    fm = "nvidia-fabricmanager-535"
    assert plan.fabric_manager == fm and plan.fabric["fabric_manager"] == fm
    assert plan.packages == [*plain.packages, fm] and plan.hold == [*plain.hold, fm]
    assert plan.services == ["nvidia-fabricmanager"] and plain.services == []
    assert plan.kernel_packages == [] and plan.version_package == plain.version_package


@pytest.mark.parametrize("gpu", [A100, H100])
def test_gpus_without_switches_plan_as_before(tmp_path, gpu, capsys):
    """An a100x4/h100x8-like node whose PCI shows its GPUs and no NVSwitch: no fabric, the
    same plan as without a sysfs tree at all."""
    root = sysfs(tmp_path, gpu, 8 if gpu == H100 else 4)
    outs = []
    for r in (root, tmp_path / "empty"):
        for km in ("--kernel-module", "--no-kernel-module"):
            cli_main(
                ["provision", "driver-plan", "--json", "--branch", "535", "--distro", "debian",
                 "--release", "12", "--arch", "x86_64", "--gpu-device-id", gpu[2:], km,
                 "--root", str(r)]
            )  # fmt: skip
            outs.append(json.loads(capsys.readouterr().out))
    assert outs[:2] == outs[2:]
    assert all(o["fabric"] == {} and o["fabric_manager"] == "" for o in outs)
    assert all("nvidia-fabricmanager" not in o["services"] for o in outs)


def test_persistenced_wherever_the_module_is_managed():
    for distro, release, source, branch in (
        ("debian", "12", "distro", "535"), ("debian", "13", "distro", "550"),
        ("ubuntu", "24.04", "distro", "570"), ("debian", "12", "cuda-repo", "580"),
        ("debian", "13", "cuda-repo", "580"), ("ubuntu", "22.04", "cuda-repo", "535"),
        ("rhel", "9", "cuda-repo", "570"),
    ):  # fmt: skip
        plat = platform(distro, release)
        assert "nvidia-persistenced" in driver_plan(plat, source=source, branch=branch).services
        assert driver_plan(plat, source=source, branch=branch, kernel_module=False).services == []


# --- --resolve: lockstep from the node's package metadata ------------------------------


@pytest.fixture
def apt(monkeypatch):
    """The node's apt as dicts: madison's versions per package, dpkg's installed ones."""
    offered: dict[str, list[str]] = {}
    installed: dict[str, str | tuple[str, bool]] = {}  # a version, or (version, held)
    services: dict[str, tuple[str, str]] = {}  # systemctl is-enabled, is-active

    def run(argv, timeout=None, **_):
        if argv[:2] == ["apt-cache", "madison"]:
            pkg = argv[2]
            out = "".join(
                f" {pkg} | {v} | https://developer.download.nvidia.com/x Packages\n"
                for v in offered.get(pkg, [])
            )
            return tool.Ran(0, out, "")
        if argv[0] == "dpkg-query":
            names = [n for n in argv[4:] if n in installed]
            have = {n: installed[n] if isinstance(installed[n], tuple) else (installed[n], False)
                    for n in names}  # fmt: skip
            out = "".join(f"{n}|{'hold' if h else 'install'}|installed|{v}\n"
                          for n, (v, h) in have.items())  # fmt: skip
            return tool.Ran(0 if out else 1, out, "")
        if argv[0] == "systemctl":
            enabled, active = services.get(argv[2], ("disabled", "inactive"))
            word = enabled if argv[1] == "is-enabled" else active
            return tool.Ran(0 if word in ("enabled", "active") else 3, word + "\n", "")
        raise AssertionError(argv)

    monkeypatch.setattr(tool, "run", run)
    return offered, installed, services


def plan_json(capsys, root, *args):
    code = cli_main(
        ["provision", "driver-plan", "--json", "--resolve", "--distro", "debian", "--release",
         "12", "--arch", "x86_64", "--root", str(root), *args]
    )  # fmt: skip
    return code, json.loads(capsys.readouterr().out)


def test_branch_pin_resolves_to_the_newest_version_with_fm(tmp_path, apt, capsys):
    offered, _, _ = apt
    root = sysfs(tmp_path, H100, 8, "0x22a3", 4)
    drv = ["580.126.09-1", "580.105.08-1", "580.95.05-1"]
    for p in ("nvidia-driver-cuda", "libnvidia-ml1", "nvidia-kernel-open-dkms"):
        offered[p] = drv
    offered["nvidia-fabricmanager"] = ["580.105.08-1", "580.95.05-1"]  # 580.126.09 not yet
    offered["nvidia-driver-pinning-580"] = ["580-5"]
    code, out = plan_json(capsys, root, "--source", "cuda-repo", "--branch", "580")
    assert code == 0, out
    assert out["fabric"]["driver_version"] == "580.105.08"
    assert out["install"] == [
        "nvidia-driver-cuda=580.105.08-1", "nvidia-kernel-open-dkms=580.105.08-1",
        "nvidia-persistenced", "nvidia-fabricmanager=580.105.08-1",
    ]  # fmt: skip
    assert out["todo"]["pin_packages"] == ["nvidia-driver-pinning-580"]
    assert out["todo"]["hold"] == [
        "nvidia-driver-cuda", "libnvidia-ml1", "nvidia-kernel-open-dkms", "nvidia-fabricmanager"
    ]  # fmt: skip
    assert (
        "NVSwitch node: 4 LS10 switches, fabric manager nvidia-fabricmanager at 580.105.08"
        in (out["message"])
    )


def test_exact_pin_without_fm_build_is_refused_in_one_line(tmp_path, apt, capsys):
    offered, _, _ = apt
    root = sysfs(tmp_path, H100, 8, "0x22a3", 4)
    offered["nvidia-driver-cuda"] = ["580.126.09-1", "580.105.08-1"]
    offered["nvidia-fabricmanager"] = ["580.105.08-1"]
    code, out = plan_json(
        capsys, root, "--source", "cuda-repo", "--branch", "580", "--version", "580.126.09"
    )
    assert code == 2 and out["ok"] is False
    assert out["message"] == (
        "nvidia_driver_version: driver 580.126.09 has no fabric manager at the same version in "
        "this node's package sources (nvidia-fabricmanager: 580.105.08; nvidia-driver-cuda: "
        "580.126.09): an NVSwitch node needs the fabric manager at exactly the driver's "
        "version; pin a version both offer"
    )


def test_distro_driver_needs_a_configured_fm(tmp_path, apt, capsys):
    offered, _, _ = apt
    root = sysfs(tmp_path, A100, 8, "0x1af1", 6)
    for p in ("nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-kernel-dkms"):
        offered[p] = ["535.261.03-1~deb12u1"]
    code, out = plan_json(capsys, root, "--source", "distro", "--branch", "535")
    assert code == 2 and "\n" not in out["message"]
    assert out["message"].startswith(
        "nvidia_driver_source: distro: branch 535 has no fabric manager at the same version in "
        "this node's package sources (nvidia-fabricmanager-535: nothing; libnvidia-ml1: "
        "535.261.03)"
    )
    assert out["message"].endswith("or set nvidia_driver_source: cuda-repo")
    # NVIDIA's repository configured by the operator: FM at the archive's driver version
    offered["nvidia-fabricmanager-535"] = ["535.261.03-1"]
    code, out = plan_json(capsys, root, "--source", "distro", "--branch", "535")
    assert code == 0 and "nvidia-fabricmanager-535=535.261.03-1" in out["install"]


def test_no_kernel_module_fm_at_the_driver_version_or_one_line(tmp_path, apt, capsys):
    """kernel_module false on an NVSwitch node: FM is installed in lockstep with the driver
    packages when the configured sources offer it (held, its service started: todo), and
    refused in one line, before anything changes, when they do not."""
    offered, installed, services = apt
    root = sysfs(tmp_path, A100, 4, "0x1af1", 6)
    for p in ("nvidia-smi", "libcuda1", "libnvidia-ml1"):
        offered[p] = ["535.261.03-1"]
    code, out = plan_json(
        capsys, root, "--source", "distro", "--branch", "535", "--no-kernel-module"
    )
    assert code == 2 and "\n" not in out["message"]
    assert out["message"].startswith(
        "nvidia_driver_source: distro: branch 535 has no fabric manager at the same version in "
        "this node's package sources (nvidia-fabricmanager-535: nothing; libnvidia-ml1: "
        "535.261.03)"
    )
    # NVIDIA's repository offers FM at that version: installed, held, its service started
    offered["nvidia-fabricmanager-535"] = ["535.261.03-1", "535.247.01-1"]
    code, out = plan_json(
        capsys, root, "--source", "distro", "--branch", "535", "--no-kernel-module"
    )
    assert code == 0, out
    assert out["install"] == [
        f"{p}=535.261.03-1"
        for p in ("nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-fabricmanager-535")
    ]
    assert out["todo"]["hold"][-1] == "nvidia-fabricmanager-535"
    assert out["todo"]["services"] == ["nvidia-fabricmanager"] and out["todo"]["restart"] == []
    assert "fabric manager nvidia-fabricmanager-535 at 535.261.03" in out["message"]
    # installed, held, running: nothing left to do
    for p in ("nvidia-smi", "libcuda1", "libnvidia-ml1", "nvidia-fabricmanager-535"):
        installed[p] = ("535.261.03-1", True)
    services["nvidia-fabricmanager"] = ("enabled", "active")
    _, out = plan_json(capsys, root, "--source", "distro", "--branch", "535", "--no-kernel-module")
    assert out["todo"]["services"] == [] and out["converged"] is True, out["todo"]
    # stopped (or an FM upgrade): started again (restarted when its package changes)
    services["nvidia-fabricmanager"] = ("enabled", "inactive")
    _, out = plan_json(capsys, root, "--source", "distro", "--branch", "535", "--no-kernel-module")
    assert out["todo"]["services"] == ["nvidia-fabricmanager"] and not out["converged"]
    offered["nvidia-fabricmanager-535"] = offered["libnvidia-ml1"] = ["535.288.01-1"]
    for p in ("nvidia-smi", "libcuda1"):
        offered[p] = ["535.288.01-1"]
    services["nvidia-fabricmanager"] = ("enabled", "active")
    _, out = plan_json(capsys, root, "--source", "distro", "--branch", "535", "--no-kernel-module")
    assert out["todo"]["restart"] == ["nvidia-fabricmanager"]


def test_missing_pinning_package_is_refused(tmp_path, apt, capsys):
    offered, _, _ = apt
    offered["nvidia-driver-cuda"] = offered["nvidia-kernel-dkms"] = ["550.163.01-1"]
    root = sysfs(tmp_path, H100, 0)  # no GPU in PCI: the repository among its sources only
    code, out = plan_json(
        capsys, root, "--source", "cuda-repo", "--branch", "550", "--flavor", "proprietary"
    )
    assert code == 2 and re.fullmatch(
        r"nvidia_driver_branch: 550: NVIDIA's repository offers no nvidia-driver-pinning-550 .*",
        out["message"],
    )


def test_lockstep_function_newest_common_within_the_pin():
    offers = {"d": ["590.48.01-1", "580.126.09-1", "580.105.08-1"],
              "f": ["590.48.01-1", "580.105.08-1"]}  # fmt: skip

    def runner(argv):
        pkg = argv[2]
        return 0, "".join(f"{pkg} | {v} | x\n" for v in offers[pkg]), ""

    assert packages.fm_lockstep("apt", "d", "f", "580", "v", "cuda-repo", runner) == "580.105.08"
    assert packages.fm_lockstep("apt", "d", "f", "590", "v", "cuda-repo", runner) == "590.48.01"
    with pytest.raises(ProvisionError, match=r"^v: driver 580\.126\.09 has no fabric manager"):
        packages.fm_lockstep("apt", "d", "f", "580.126.09", "v", "cuda-repo", runner)


# --- the simulator's profiles: what their PCI sysfs shows, planned as inventories/sim does ---


@pytest.mark.parametrize(("profile", "count", "generation"), [("a100x4", 0, None),
                                                            ("h100x8", 4, "LS10")])  # fmt: skip
def test_simulated_hgx_profiles_plan_fm_on_the_nvswitch_board(tmp_path, capsys, profile, count,
                                                          generation):  # fmt: skip
    """The simulator shows h100x8's NVSwitches in PCI sysfs (gpunode.sim.pcisysfs), so the
    generic detection finds them (a100x4, an HGX A100 4-GPU board, has none); simulated nodes
    run with nvidia_driver_kernel_module: false (inventories/sim), where the plan adds the
    fabric manager on the NVSwitch board only."""
    from gpunode.sim import pcisysfs, profiles

    root = tmp_path / "node"
    for f in pcisysfs.functions(profiles.load_profile(profile)):
        d = root / "sys/bus/pci/devices" / f.address
        d.mkdir(parents=True)
        for name in ("vendor", "device", "class"):
            (d / name).write_text(f.files[name])
    outs = {}
    for r in (root, tmp_path / "empty"):
        cli_main(
            ["provision", "driver-plan", "--json", "--branch", "550", "--distro", "debian",
             "--release", "13", "--arch", "x86_64", "--no-kernel-module", "--root", str(r)]
        )  # fmt: skip
        outs[r] = json.loads(capsys.readouterr().out)
    sim, plain = outs[root], outs[tmp_path / "empty"]
    if count:
        assert sim["fabric"]["count"] == count and sim["fabric"]["generation"] == generation
    else:
        assert sim["fabric"] == {}
    assert plain["fabric"] == {} and plain["fabric_manager"] == ""
    # h100x8: the fabric manager besides the userspace packages, though the kernel module
    # is not managed there (FM is userspace); a100x4: the plain plan
    fm = ["nvidia-fabricmanager-550"] if count else []
    assert sim["fabric_manager"] == (fm[0] if fm else "")
    assert sim["packages"] == plain["packages"] + fm and sim["hold"] == plain["hold"] + fm
    assert sim["services"] == plain["services"] + ["nvidia-fabricmanager"] * bool(fm) == (
        ["nvidia-fabricmanager"] if fm else [])  # fmt: skip
    for key in ("version_package", "apt_preferences", "flavor"):
        assert sim[key] == plain[key], key
