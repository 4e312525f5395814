"""Package and repository decisions per distribution, release, branch and flavour."""

from __future__ import annotations

import json
import re

import pytest

from gpunode.cli.main import main as cli_main
from gpunode.provision import ProvisionError, sources
from gpunode.provision.sources import PciGpu, cuda_plan, driver_plan, platform

A100, V100, B200 = PciGpu(device_id=0x20B2), PciGpu(device_id=0x1DB4), PciGpu(device_id=0x2901)


def test_debian12_userspace_only_exact_pin():
    p = driver_plan(
        platform("debian", "12"),
        source="distro",
        branch="535",
        version="535.261.03",
        kernel_module=False,
    )
    assert p.packages == ["nvidia-smi", "libcuda1", "libnvidia-ml1"] == p.hold
    assert p.version_package == "libnvidia-ml1" and p.pin_kind == "exact"
    assert (
        "Package: src:nvidia-graphics-drivers\nPin: version 535.261.03-*\nPin-Priority: 1001"
        in p.apt_preferences
    )
    assert p.kernel_packages == [] and p.services == []


def test_debian_kernel_module_flavours():
    prop = driver_plan(platform("debian", "12"), source="distro", branch="535", gpus=[A100])
    assert "nvidia-kernel-dkms" in prop.packages and prop.flavor == "proprietary"
    assert (
        prop.services == ["nvidia-persistenced"]
        and "linux-headers-{kernel}" in prop.kernel_packages
    )
    op = driver_plan(
        platform("debian", "13"), source="distro", branch="550", flavor="open", gpus=[A100]
    )
    assert {"nvidia-open-kernel-dkms", "firmware-nvidia-gsp"} <= set(op.packages)
    assert "src:nvidia-open-gpu-kernel-modules" in op.apt_preferences
    assert "Pin: version 550.*" in op.apt_preferences  # branch pin


def test_debian_branch_left_to_the_archive():
    # the node's real metadata decides (packages.resolve_driver, tested with madison output)
    plan = driver_plan(platform("debian", "12"), source="distro", branch="550")
    assert plan.pin == "550" and plan.known_branches == ["535"]


def test_malformed_pin_and_branch_mismatch():
    with pytest.raises(
        ProvisionError, match=re.escape("nvidia_driver_version: '535.26x' is not a driver version")
    ):
        driver_plan(platform("debian", "12"), source="distro", branch="535", version="535.26x")
    with pytest.raises(
        ProvisionError,
        match=re.escape("nvidia_driver_version: 550.163.01 is not on nvidia_driver_branch 535"),
    ):
        driver_plan(platform("debian", "12"), source="distro", branch="535", version="550.163.01")
    with pytest.raises(ProvisionError, match="nvidia_driver_branch: 'r535' is not a driver branch"):
        driver_plan(platform("debian", "12"), source="distro", branch="r535")


def test_ubuntu_server_branches():
    p = driver_plan(platform("ubuntu", "22.04"), source="distro", branch="535", gpus=[A100])
    assert p.packages == [
        "nvidia-utils-535-server",
        "libnvidia-compute-535-server",
        "nvidia-headless-535-server",
    ]
    assert "src:nvidia-graphics-drivers-535-server" in p.apt_preferences
    op = driver_plan(platform("ubuntu", "24.04"), source="distro", branch="580", gpus=[A100])
    assert op.flavor == "open" and "nvidia-headless-580-server-open" in op.packages
    user = driver_plan(
        platform("ubuntu", "24.04"), source="distro", branch="550", kernel_module=False
    )
    assert user.packages == ["nvidia-utils-550-server", "libnvidia-compute-550-server"]


def test_cuda_repo_ubuntu_keyring_signed_by():
    p = driver_plan(
        platform("ubuntu", "24.04", "aarch64"), source="cuda-repo", branch="570", gpus=[A100]
    )
    r = p.repository
    assert r["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/"
    assert r["key_url"].endswith("/ubuntu2404/sbsa/3bf863cc.pub")
    assert r["line"] == f"deb [signed-by={sources.APT_KEYRING}] {r['url']} /"
    assert p.packages[-1] == "nvidia-open-570"
    prop = driver_plan(platform("ubuntu", "22.04"), source="cuda-repo", branch="535", gpus=[A100])
    assert prop.packages[-1] == "cuda-drivers-535"


@pytest.mark.parametrize(
    ("release", "branch", "version", "flavor", "kernel", "pinning"),
    [
        ("12", "535", "", "proprietary", "nvidia-kernel-dkms", "nvidia-driver-pinning-535"),
        ("12", "570", "570.211.01", "open", "nvidia-kernel-open-dkms",
         "nvidia-driver-pinning-570.211.01"),
        ("12", "580", "", "open", "nvidia-kernel-open-dkms", "nvidia-driver-pinning-580"),
        ("12", "580", "580.105.08", "proprietary", "nvidia-kernel-dkms",
         "nvidia-driver-pinning-580.105.08"),
        ("13", "580", "580.126.09", "open", "nvidia-kernel-open-dkms",
         "nvidia-driver-pinning-580.126.09"),
    ],
)  # fmt: skip
def test_cuda_repo_debian_names_from_nvidias_guide(
    capsys, release, branch, version, flavor, kernel, pinning
):
    """NVIDIA's repository for Debian serves Debian's package names, the same for every
    branch; the branch or version is chosen by NVIDIA's pinning package. Ubuntu's
    ``nvidia-utils-<b>``/``libnvidia-compute-<b>`` do not exist there.

    NVIDIA Driver Installation Guide, https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/
    ("Debian" section, its installation table; the same rows for Debian 12 and 13):

      | system                  | open kernel modules                      | proprietary                          |
      | full (desktop + compute)| apt install nvidia-open                  | apt install cuda-drivers             |
      | compute-only (headless) | nvidia-driver-cuda nvidia-kernel-open-dkms | nvidia-driver-cuda nvidia-kernel-dkms |
      | desktop-only            | nvidia-driver nvidia-kernel-open-dkms    | nvidia-driver nvidia-kernel-dkms     |

    "Version locking" (https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/version-locking.html)
    and "Recent updates" ("Version locking packages for Ubuntu / Debian: driver pinning
    packages ... to track specific driver branches and versions ... we suggest to install the
    pinning package prior to installing the driver"):

      | lock             | package                                | its description (apt-cache search)  |
      | a branch         | nvidia-driver-pinning-<branch> (580-5) | APT driver pinning file for driver  |
      |                  |                                        | branch 580                          |
      | an exact version | nvidia-driver-pinning-<version>        | APT driver pinning file for driver  |
      |                  |                                        | version 580.105.08                  |

    gpunode installs the compute-only set (a data center node has no display; the full
    metapackages add the desktop stack, and cuda-drivers-<branch> depends with ``>=``
    only, so it pins nothing: NVIDIA developer forum, "Debian cuda-drivers-580 package
    580.105.08-1 improperly pulls in v590 components"), nvidia-persistenced with the
    kernel module, and checks nvidia-driver-cuda's version (580.105.08-1: the driver's).
    """
    argv = ["provision", "driver-plan", "--json", "--source", "cuda-repo", "--distro", "debian",
            "--release", release, "--arch", "x86_64", "--branch", branch, "--flavor", flavor,
            "--gpu-device-id", "2330", "--root", "/nonexistent"]  # fmt: skip
    if version:
        argv += ["--version", version]
    assert cli_main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["packages"] == ["nvidia-driver-cuda", kernel, "nvidia-persistenced"]
    # NVML's package (a dependency at the driver's version) held too: the package validate
    # and tests/infra find as the driver's, held on every source
    assert out["hold"] == ["nvidia-driver-cuda", "libnvidia-ml1", kernel]
    assert out["version_package"] == "nvidia-driver-cuda"
    assert out["pin_packages"] == [pinning]
    assert out["pin_kind"] == ("exact" if version else "branch")
    assert out["apt_preferences"] == ""  # NVIDIA's pinning package pins, not a file of ours
    assert out["repository"]["url"] == (
        f"https://developer.download.nvidia.com/compute/cuda/repos/debian{release}/x86_64/"
    )
    assert not {p for p in out["packages"] if re.search(r"-(utils|compute)-[0-9]", p)}
    assert cli_main([*argv, "--no-kernel-module"]) == 0
    user = json.loads(capsys.readouterr().out)
    assert user["packages"] == ["nvidia-driver-cuda"] and user["services"] == []
    assert user["hold"] == ["nvidia-driver-cuda", "libnvidia-ml1"]


def test_cuda_repo_ubuntu2404_lacks_old_branches():
    with pytest.raises(
        ProvisionError,
        match=re.escape(
            "nvidia_driver_branch: 515 is not available from NVIDIA's CUDA repository for ubuntu 24.04"
        ),
    ):
        driver_plan(platform("ubuntu", "24.04"), source="cuda-repo", branch="515")


@pytest.mark.parametrize(("distro", "rel"), [("rhel", "9.4"), ("rocky", "8.10"), ("redhat", "9")])
def test_rhel_module_streams(distro, rel):
    plat = platform(distro, rel)
    p = driver_plan(plat, source="cuda-repo", branch="535", gpus=[A100])
    assert p.dnf_module == "nvidia-driver:535-dkms" and "kmod-nvidia-latest-dkms" in p.packages
    assert p.repository["url"].endswith(f"/rhel{plat.release}/x86_64/")
    assert p.repository["key_url"].endswith("D42D0685.pub")
    assert p.kernel_packages == ["kernel-devel-{kernel}", "dkms"]
    op = driver_plan(plat, source="cuda-repo", branch="565", flavor="open", gpus=[A100])
    assert op.dnf_module == "nvidia-driver:565-open" and "kmod-nvidia-open-dkms" in op.packages
    assert driver_plan(plat, source="cuda-repo", branch="580", gpus=[A100]).dnf_module == ""


def test_rhel_has_no_distro_driver():
    with pytest.raises(ProvisionError, match="use cuda-repo"):
        driver_plan(platform("rocky", "9"), source="distro", branch="535")


def test_unsupported_platforms():
    with pytest.raises(ProvisionError, match="operating system debian 11 is not supported"):
        platform("debian", "11")
    with pytest.raises(ProvisionError, match="architecture ppc64le is not supported"):
        platform("debian", "12", "ppc64le")


def test_debian_14_by_codename_driver_but_no_cuda():
    # Ansible's distribution_major_version on Debian testing, and the bare codename
    assert (
        platform("debian", "forky/sid") == platform("Debian", "forky") == platform("debian", "14")
    )
    plan = driver_plan(platform("debian", "forky/sid"), source="distro", branch="550")
    assert plan.known_branches == ["550"] and "libnvidia-ml1" in plan.packages
    with pytest.raises(ProvisionError) as err:
        cuda_plan(platform("debian", "14"), source="distro", versions=["12.4"])
    assert str(err.value) == (
        "cuda_toolkit_versions: debian 14 ships no CUDA toolkit; set cuda_toolkit_versions: [] "
        "(no toolkit on the host: containers bring their own CUDA)"
    )


def test_flavour_decisions():
    assert sources.choose_flavor("auto", "560", [A100])[0] == "open"
    assert sources.choose_flavor("auto", "550", [A100])[0] == "proprietary"
    assert sources.choose_flavor("auto", "580", [A100, V100])[0] == "proprietary"
    assert sources.choose_flavor("auto", "570", [B200])[0] == "open"
    assert (
        sources.choose_flavor("auto", "570", [PciGpu(compute_capability="7.0")])[0] == "proprietary"
    )
    with pytest.raises(ProvisionError, match="open kernel modules need branch >= 515"):
        sources.choose_flavor("open", "470", [A100])
    with pytest.raises(ProvisionError, match="need Turing or newer"):
        sources.choose_flavor("open", "570", [V100])
    with pytest.raises(ProvisionError, match="Blackwell GPUs need the open kernel modules"):
        sources.choose_flavor("proprietary", "570", [B200])
    with pytest.raises(ProvisionError, match="does not support this node's Blackwell GPUs"):
        sources.choose_flavor("auto", "550", [B200])


def test_cuda_plans():
    deb = cuda_plan(
        platform("debian", "12"), source="distro", versions=["11.8"], package_set="runtime"
    )
    assert deb.packages == {"11.8": ["libcudart11.0"]} and deb.version_packages == {
        "11.8": "libcudart11.0"
    }
    full = cuda_plan(platform("debian", "13"), source="distro", versions=["12.4"])
    assert full.packages == {"12.4": ["nvidia-cuda-toolkit"]}
    with pytest.raises(
        ProvisionError, match=re.escape("cuda_toolkit_versions: debian 12 ships CUDA 11.8 only")
    ):
        cuda_plan(platform("debian", "12"), source="distro", versions=["12.4"])
    repo = cuda_plan(
        platform("rhel", "9"), source="cuda-repo", versions=["12.4", "12.8"], default="12.4"
    )
    assert repo.packages["12.8"] == ["cuda-toolkit-12-8"] and repo.default == "12.4"
    assert repo.bin_dirs["12.4"] == "/usr/local/cuda-12.4/bin"
    with pytest.raises(
        ProvisionError, match=re.escape("cuda_toolkit_default_version: 12.6 is not one of")
    ):
        cuda_plan(platform("rhel", "9"), source="cuda-repo", versions=["12.4"], default="12.6")


# --- a mirror of NVIDIA's repository (nvidia_driver_cuda_repo_url / _key_url) ----------


def test_the_repository_defaults_are_nvidias():
    assert sources.CUDA_REPO_URL == (
        "https://developer.download.nvidia.com/compute/cuda/repos/{repo}/{arch}/"
    )
    deb = driver_plan(platform("debian", "12"), source="cuda-repo", branch="580").repository
    assert deb["url"] == "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"
    assert deb["key_url"] == deb["url"] + "3bf863cc.pub"
    rhel = cuda_plan(platform("rhel", "9"), source="cuda-repo", versions=["12.4"]).repository
    assert rhel["key_url"].endswith("/rhel9/x86_64/D42D0685.pub")


def test_a_mirror_is_used_for_the_plans_repository():
    mirror = "http://10.0.0.5/nvidia/{repo}/{arch}"
    p = driver_plan(
        platform("debian", "12"), source="cuda-repo", branch="580",
        repo_url=mirror, repo_key_url="http://10.0.0.5/keys/{key}",
    )  # fmt: skip
    r = p.repository
    assert r["url"] == "http://10.0.0.5/nvidia/debian12/x86_64/"  # a flat repository's base
    assert r["key_url"] == "http://10.0.0.5/keys/3bf863cc.pub"
    assert r["line"] == f"deb [signed-by={sources.APT_KEYRING}] {r['url']} /"
    fixed = cuda_plan(
        platform("debian", "12"), source="cuda-repo", versions=["12.4"],
        repo_url="https://mirror.example/cuda/", repo_key_url="{url}abcd1234.pub",
    )  # fmt: skip
    assert fixed.repository["url"] == "https://mirror.example/cuda/"
    assert fixed.repository["key_url"] == "https://mirror.example/cuda/abcd1234.pub"
    # the distribution's own archive takes no URL
    distro = driver_plan(platform("debian", "12"), source="distro", branch="535",
                         repo_url="http://unused/")  # fmt: skip
    assert distro.repository == {"name": "debian", "components": ["contrib", "non-free"]}


@pytest.mark.parametrize(
    ("url", "key", "line"),
    [
        ("http://m/{distro}/", "{url}{key}",
         r"^nvidia_driver_cuda_repo_url: 'http://m/\{distro\}/' has a placeholder other than "
         r"\{repo\}, \{arch\}"),
        ("http://m/{repo}/", "{url}{keyring}",
         r"^nvidia_driver_cuda_repo_key_url: .* other than \{url\}, \{key\}, \{repo\}, \{arch\}"),
        ("ftp://m/{repo}/", "{url}{key}",
         r"^nvidia_driver_cuda_repo_url: 'ftp://m/debian12/' is not an http://, https:// or "),
        ("http://m/{repo", "{url}{key}", r"^nvidia_driver_cuda_repo_url: 'http://m/\{repo'"),
    ],
)  # fmt: skip
def test_a_bad_repository_url_is_one_line_naming_the_variable(url, key, line):
    with pytest.raises(ProvisionError, match=line) as exc:
        driver_plan(platform("debian", "12"), source="cuda-repo", branch="580", repo_url=url,
                    repo_key_url=key)  # fmt: skip
    assert "\n" not in str(exc.value)
    with pytest.raises(ProvisionError, match=line.replace("nvidia_driver", "cuda_toolkit")):
        cuda_plan(platform("debian", "12"), source="cuda-repo", versions=["12.4"],
                  repo_url=url, repo_key_url=key)  # fmt: skip


def test_driver_plan_and_cuda_plan_take_the_mirror_options(capsys):
    mirror = ["--cuda-repo-url=http://sim/compute/cuda/repos/{repo}/{arch}/",
              "--cuda-repo-key-url={url}0123abcd.pub"]  # fmt: skip
    rc = cli_main(["provision", "driver-plan", "--json", "--distro=debian", "--release=12",
                   "--source=cuda-repo", "--branch=580", "--gpu-device-id=2330",
                   "--root=/nonexistent", *mirror])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert rc == 0, out
    assert out["repository"]["url"] == "http://sim/compute/cuda/repos/debian12/x86_64/"
    assert out["repository"]["key_url"] == out["repository"]["url"] + "0123abcd.pub"
    rc = cli_main(["provision", "cuda-plan", "--json", "--distro=debian", "--release=12",
                   "--source=cuda-repo", "--cuda=12.4", *mirror])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["repository"]["url"].startswith("http://sim/"), out
    rc = cli_main(["provision", "driver-plan", "--json", "--distro=debian", "--release=12",
                   "--source=cuda-repo", "--branch=580", "--gpu-device-id=2330",
                   "--root=/nonexistent", "--cuda-repo-url=http://sim/{nope}/"])  # fmt: skip
    assert rc == 2
    assert json.loads(capsys.readouterr().out)["message"].startswith("nvidia_driver_cuda_repo_url:")
