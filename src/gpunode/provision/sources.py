"""Where the driver and CUDA come from: packages, repositories, pins and holds.

One function per decision, pure (inputs in, a plan out), so every path — including the ones
that cannot run here (Ubuntu's archive, NVIDIA's repositories for Ubuntu and RHEL) — is
reached by unit tests rather than living as untested YAML.

Sources (``nvidia_driver_source`` / ``cuda_toolkit_source``):
  distro     Debian non-free (tested on simulated nodes), Ubuntu's archive (``-server``
             branches). RHEL/Rocky have no driver in their own repositories.
  cuda-repo  NVIDIA's CUDA repository (developer.download.nvidia.com) for Ubuntu,
             Debian 12/13 and RHEL/Rocky 8/9: keyring + signed-by on apt, gpgkey + dnf module
             streams (``nvidia-driver:<branch>-dkms`` / ``-open``) on RHEL below 575.
             Debian: the names of NVIDIA's driver installation guide (compute-only
             ``nvidia-driver-cuda`` + ``nvidia-kernel-open-dkms`` / ``nvidia-kernel-dkms``)
             locked with NVIDIA's pinning package (``nvidia-driver-pinning-<branch|version>``);
             see ``_cuda_repo_driver``.

NVSwitch baseboards (``fabric``, gpunode.provision.fabric): the plan adds the fabric manager
at exactly the driver's version, held like the driver, and its service — also where the
kernel module is not managed here (FM is userspace); B200-class (NVLink5) boards are
refused.

Kernel module flavour (``nvidia_driver_kernel_module_flavor``): ``auto`` picks the open
modules when the branch is >= 560 (NVIDIA's own default since 560) and no GPU is older
than Turing, and always for Blackwell (which has only open modules); otherwise the
proprietary ones. Open modules exist from 515; pre-Turing GPUs have only proprietary ones.
GPU generation comes from the PCI device id (>= 0x1E00 is Turing or newer, >= 0x2900
Blackwell) or, with a driver loaded, from NVML's compute capability (7.5 / 10.0).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from . import ProvisionError
from .fabric import FM_SERVICE, Fabric, fm_package, refuse_nvlink5
from .versions import check_branch, check_pin, is_branch, key, major_minor

SUPPORTED = {
    ("debian", "12"): "bookworm",
    ("debian", "13"): "trixie",
    ("debian", "14"): "forky",
    ("ubuntu", "22.04"): "jammy",
    ("ubuntu", "24.04"): "noble",
    ("rhel", "8"): "el8",
    ("rhel", "9"): "el9",
    ("rocky", "8"): "el8",
    ("rocky", "9"): "el9",
}
ARCHES = ("x86_64", "aarch64")
SOURCES = ("distro", "cuda-repo")
FLAVORS = ("auto", "open", "proprietary")
PACKAGE_SETS = ("full", "runtime")

# What each Debian release ships (non-free/contrib); informational for branches: the
# node's `apt-cache madison` decides (gpunode provision driver-plan --resolve).
DEBIAN = {
    "12": {"branches": ["535"], "driver": "535.261.03", "cuda": "11.8", "cudart": "libcudart11.0"},
    "13": {"branches": ["550"], "driver": "550.163.01", "cuda": "12.4", "cudart": "libcudart12"},
    # testing (Debian 14 "forky", its archive of 2026-10-30): the driver, no CUDA toolkit
    # (nvidia-cuda-toolkit and libcudart* are not in testing); cuda_toolkit_versions: []
    "14": {"branches": ["550"], "driver": "550.163.01", "cuda": None, "cudart": None},
}
# Ubuntu's archive: -server branches (restricted) and the CUDA its nvidia-cuda-toolkit is.
UBUNTU = {
    "22.04": {"branches": ["470", "535", "550", "570", "575", "580"], "cuda": "11.5",
              "cudart": "libcudart11.0"},
    "24.04": {"branches": ["535", "550", "570", "575", "580"], "cuda": "12.0",
              "cudart": "libcudart12"},
}  # fmt: skip
# NVIDIA's CUDA repository: the branches its cuda-drivers-<branch> / module streams cover.
CUDA_REPO_BRANCHES = {
    "ubuntu2204": ["515", "520", "525", "530", "535", "545", "550", "555", "560", "565", "570",
                   "575", "580", "590"],
    "ubuntu2404": ["550", "555", "560", "565", "570", "575", "580", "590"],
    "debian12": ["525", "530", "535", "545", "550", "555", "560", "565", "570", "575", "580",
                 "590"],
    # published from 2025 (NVIDIA/gpu-driver-container debian13/install.sh uses it); the
    # branches are what it carried when read, `--resolve` (apt-cache madison) decides
    "debian13": ["580", "590"],
    "rhel8": ["450", "455", "460", "465", "470", "495", "510", "515", "520", "525", "530", "535",
              "545", "550", "555", "560", "565", "570", "575", "580", "590"],
    "rhel9": ["515", "520", "525", "530", "535", "545", "550", "555", "560", "565", "570", "575",
              "580", "590"],
}  # fmt: skip
CUDA_REPO_URL = "https://developer.download.nvidia.com/compute/cuda/repos/{repo}/{arch}/"
CUDA_REPO_KEYS = {"apt": "3bf863cc.pub", "dnf": "D42D0685.pub"}
# The key beside the repository, as NVIDIA publishes it: {url} the repository's URL, {key}
# NVIDIA's key file for the package manager (CUDA_REPO_KEYS). A mirror of NVIDIA's
# repository (an air-gapped site, the simulator's) gives its own URL and key URL: the
# repository variables (nvidia_driver_cuda_repo_url, _key_url; cuda_toolkit_'s) with the
# placeholders {repo} (debian12, ubuntu2404, rhel9, ...), {arch} (x86_64, sbsa), and for
# the key also {url} and {key}.
CUDA_REPO_KEY_URL = "{url}{key}"
REPO_URL_SCHEMES = ("https://", "http://", "file:/")
APT_KEYRING = "/etc/apt/keyrings/nvidia-cuda.asc"
# Below this branch NVIDIA's RHEL repository uses dnf module streams; from it on, plain
# packages held with versionlock.
RHEL_MODULES_BEFORE = 575
OPEN_FROM = 515
OPEN_DEFAULT_FROM = 560
BLACKWELL_FROM = 570


@dataclass
class Platform:
    distro: str
    release: str
    arch: str = "x86_64"

    @property
    def family(self) -> str:
        return "apt" if self.distro in ("debian", "ubuntu") else "dnf"

    @property
    def repo_id(self) -> str:
        if self.family == "dnf":
            return f"rhel{self.release}"
        return f"{self.distro}{self.release.replace('.', '')}"

    @property
    def repo_arch(self) -> str:
        return "sbsa" if self.arch == "aarch64" else "x86_64"


def platform(distro: str, release: str, arch: str = "x86_64") -> Platform:
    distro = distro.lower()
    release = str(release)
    if distro == "debian" and not release.isdigit():
        # Debian testing has no number yet: its os-release has no VERSION_ID (gpunode reads
        # VERSION_CODENAME), Ansible's distribution_major_version is "forky/sid"
        codename = release.split("/")[0]
        release = next(
            (r for (d, r), c in SUPPORTED.items() if d == "debian" and c == codename), release
        )
    if distro in ("rhel", "rocky", "redhat"):
        distro = "rocky" if distro == "rocky" else "rhel"
        release = release.split(".")[0]
    if (distro, release) not in SUPPORTED:
        names = ", ".join(f"{d} {r}" for d, r in SUPPORTED)
        raise ProvisionError(
            f"operating system {distro} {release} is not supported; supported: {names}"
        )
    if arch not in ARCHES:
        raise ProvisionError(
            f"architecture {arch} is not supported; supported: {', '.join(ARCHES)}"
        )
    return Platform(distro, release, arch)


@dataclass
class PciGpu:
    """A GPU as the PCI bus shows it before a driver is chosen (lspci's device id, or a
    compute capability given): what the kernel-module flavour depends on. Not the driver's
    record of a GPU (gpunode.nvidia.gpu.Gpu): provisioning runs where no driver is yet."""

    device_id: int | None = None
    compute_capability: str | None = None

    def at_least(self, cc: str, device_id: int) -> bool | None:
        if self.compute_capability:
            return key(self.compute_capability) >= key(cc)
        if self.device_id is not None:
            return self.device_id >= device_id
        return None

    @property
    def turing_or_newer(self) -> bool | None:
        return self.at_least("7.5", 0x1E00)

    @property
    def blackwell(self) -> bool | None:
        return self.at_least("10.0", 0x2900)


def choose_flavor(requested: str, branch: str, gpus: list[PciGpu]) -> tuple[str, str]:
    """(flavour, reason) for the kernel modules."""
    if requested not in FLAVORS:
        raise ProvisionError(
            f"nvidia_driver_kernel_module_flavor: {requested!r} is not one of {', '.join(FLAVORS)}"
        )
    b = int(branch)
    old = [g for g in gpus if g.turing_or_newer is False]
    new = [g for g in gpus if g.blackwell]
    if new and b < BLACKWELL_FROM:
        raise ProvisionError(
            f"nvidia_driver_branch: {branch} does not support this node's Blackwell GPUs; "
            f"use {BLACKWELL_FROM} or newer"
        )
    if requested == "open":
        if b < OPEN_FROM:
            raise ProvisionError(
                f"nvidia_driver_kernel_module_flavor: open kernel modules need branch >= "
                f"{OPEN_FROM}, nvidia_driver_branch is {branch}"
            )
        if old:
            raise ProvisionError(
                "nvidia_driver_kernel_module_flavor: open kernel modules need Turing or newer "
                "GPUs and this node has older ones; use proprietary"
            )
        return "open", "requested"
    if requested == "proprietary":
        if new:
            raise ProvisionError(
                "nvidia_driver_kernel_module_flavor: Blackwell GPUs need the open kernel modules"
            )
        return "proprietary", "requested"
    if new:
        return "open", "Blackwell GPUs have only open kernel modules"
    if old:
        return "proprietary", "a GPU older than Turing needs the proprietary modules"
    if b >= OPEN_DEFAULT_FROM:
        return "open", f"branch {branch} >= {OPEN_DEFAULT_FROM} and no GPU older than Turing"
    return "proprietary", f"branch {branch} < {OPEN_DEFAULT_FROM}: NVIDIA's default is proprietary"


@dataclass
class DriverPlan:
    platform: dict
    source: str
    branch: str
    pin: str
    pin_kind: str  # exact | branch
    flavor: str
    flavor_reason: str
    kernel_module: bool
    packages: list[str]  # to install (without versions; `resolve` adds them)
    hold: list[str]  # held against drift (apt-mark hold / dnf versionlock)
    version_package: str  # its installed version is the driver's (matching-version check)
    kernel_packages: list[str] = field(default_factory=list)  # headers/DKMS for the running kernel
    services: list[str] = field(default_factory=list)
    apt_preferences: str = ""  # /etc/apt/preferences.d content (pin by source package)
    repository: dict | None = None
    dnf_module: str = ""  # e.g. nvidia-driver:535-dkms (reset + enable)
    known_branches: list[str] = field(default_factory=list)
    # installed before the driver packages: NVIDIA's apt pinning package (Debian cuda-repo)
    pin_packages: list[str] = field(default_factory=list)
    # the NVSwitch fabric PCI shows (fabric.Fabric.to_dict, with the fabric manager's
    # package); empty: no NVSwitch
    fabric: dict = field(default_factory=dict)
    # the fabric manager package planned (in packages and hold, at the driver's version);
    # empty: none (no NVSwitch, or the kernel module is not managed here)
    fabric_manager: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


def _apt_pin(sources: list[str], pin: str) -> str:
    """apt_preferences(5): pin every package built from the driver's source packages to the
    version (exact) or branch; priority 1001 lets apt reach it even below the candidate."""
    version = f"{pin}.*" if is_branch(pin) else f"{pin}-*"
    return (
        "# Managed by gpunode (nvidia_driver role): the NVIDIA driver pin.\n"
        f"Package: {' '.join('src:' + s for s in sources)}\n"
        f"Pin: version {version}\n"
        "Pin-Priority: 1001\n"
    )


def _repo_template(variable: str, template: str, **values: str) -> str:
    """A repository URL variable's template filled in, or one line naming it."""
    names = ", ".join("{" + k + "}" for k in values)
    try:
        filled = template.format(**values)
    except (KeyError, IndexError, ValueError) as exc:
        raise ProvisionError(
            f"{variable}: {template!r} has a placeholder other than {names} ({exc}); "
            "give a URL, optionally with those placeholders"
        ) from None
    if not filled.startswith(REPO_URL_SCHEMES):
        raise ProvisionError(f"{variable}: {filled!r} is not an http://, https:// or file:/ URL")
    return filled


def cuda_repository(
    plat: Platform,
    url: str = CUDA_REPO_URL,
    key_url: str = CUDA_REPO_KEY_URL,
    variable: str = "nvidia_driver",
) -> dict:
    """NVIDIA's CUDA repository for the platform, at ``url`` (NVIDIA's, or a mirror of it)
    with its key at ``key_url`` (templates: see CUDA_REPO_KEY_URL); ``variable``: the role
    whose ``<role>_cuda_repo_url``/``_key_url`` they are, for the error lines."""
    if plat.repo_id not in CUDA_REPO_BRANCHES:
        raise ProvisionError(
            f"{variable}_source: NVIDIA's CUDA repository has no {plat.distro} {plat.release}; "
            f"use distro"
        )
    where = {"repo": plat.repo_id, "arch": plat.repo_arch}
    url = _repo_template(f"{variable}_cuda_repo_url", url or CUDA_REPO_URL, **where)
    if not url.endswith("/"):
        url += "/"  # a flat repository's base: the key and the indexes lie in it
    key_url = _repo_template(
        f"{variable}_cuda_repo_key_url", key_url or CUDA_REPO_KEY_URL,
        url=url, key=CUDA_REPO_KEYS[plat.family], **where,
    )  # fmt: skip
    repo = {"name": "nvidia-cuda", "url": url, "key_url": key_url}
    if plat.family == "apt":
        repo.update(
            suites=["/"],
            keyring=APT_KEYRING,
            line=f"deb [signed-by={APT_KEYRING}] {url} /",
        )
    else:
        repo.update(gpgcheck=True, repo_file=f"/etc/yum.repos.d/cuda-{plat.repo_id}.repo")
    return repo


def driver_plan(
    plat: Platform,
    *,
    source: str,
    branch: str,
    version: str = "",
    flavor: str = "auto",
    kernel_module: bool = True,
    gpus: list[PciGpu] | None = None,
    fabric: Fabric | None = None,
    repo_url: str = CUDA_REPO_URL,
    repo_key_url: str = CUDA_REPO_KEY_URL,
) -> DriverPlan:
    """The driver's packages for a platform. ``fabric``: the NVSwitch fabric PCI shows
    (gpunode.provision.fabric.scan); B200-class boards are refused here, first.
    ``repo_url``/``repo_key_url``: where NVIDIA's repository is (cuda-repo; a mirror)."""
    if source not in SOURCES:
        raise ProvisionError(f"nvidia_driver_source: {source!r} is not one of {', '.join(SOURCES)}")
    fabric = fabric or Fabric()
    refuse_nvlink5(fabric)
    branch = check_branch("nvidia_driver_branch", branch)
    pin = check_pin("nvidia_driver_version", version) if version else branch
    if not is_branch(pin) and pin.split(".")[0] != branch:
        raise ProvisionError(
            f"nvidia_driver_version: {pin} is not on nvidia_driver_branch {branch}"
        )
    chosen, reason = choose_flavor(flavor, branch, gpus or [])
    headers = (
        ["kernel-devel-{kernel}", "dkms"]
        if plat.family == "dnf"
        else ["linux-headers-{kernel}", "dkms"]
    )
    plan = DriverPlan(
        platform=asdict(plat),
        source=source,
        branch=branch,
        pin=pin,
        pin_kind="branch" if is_branch(pin) else "exact",
        flavor=chosen,
        flavor_reason=reason,
        kernel_module=kernel_module,
        packages=[],
        hold=[],
        version_package="",
        kernel_packages=headers if kernel_module else [],
        services=["nvidia-persistenced"] if kernel_module else [],
    )
    if source == "distro":
        _distro_driver(plat, plan)
    else:
        plan.repository = cuda_repository(plat, repo_url, repo_key_url)
        _cuda_repo_driver(plat, plan)
    # The distribution's archive is configured on the node: its real metadata decides
    # (`driver-plan --resolve`, apt-cache madison). NVIDIA's repository is not configured
    # before the driver role runs, so its branches are checked against our data here.
    if source == "cuda-repo" and branch not in plan.known_branches:
        raise ProvisionError(
            f"nvidia_driver_branch: {branch} is not available from NVIDIA's CUDA repository for "
            f"{plat.distro} {plat.release}; available: {', '.join(plan.known_branches)}"
        )
    if fabric.nvswitches:
        _fabric_manager(plat, plan, fabric)
    return plan


def _fabric_manager(plat: Platform, plan: DriverPlan, fabric: Fabric) -> None:
    """An NVSwitch node: the fabric manager at exactly the driver's version, held like the
    driver, its service enabled and started. FM is userspace: it is planned whether or not
    this role manages the kernel module (``kernel_module`` false: a preinstalled driver,
    simulated nodes), at the version of the driver packages the plan installs (which the
    matching-version check holds to the loaded module); the resolve refuses, in one line,
    a node whose sources offer no FM at that version (gpunode.provision.packages.fm_lockstep)."""
    fm = fm_package(plat.family, plat.distro, plan.source, plan.branch)
    plan.fabric = {**fabric.to_dict(), "fabric_manager": fm, "service": FM_SERVICE}
    plan.fabric_manager = fm
    plan.packages.append(fm)
    plan.hold.append(fm)
    plan.services.append(FM_SERVICE)


def _distro_driver(plat: Platform, plan: DriverPlan) -> None:
    b, km, open_ = plan.branch, plan.kernel_module, plan.flavor == "open"
    if plat.distro == "debian":
        rel = DEBIAN[plat.release]
        plan.known_branches = list(rel["branches"])
        user = ["nvidia-smi", "libcuda1", "libnvidia-ml1"]
        kernel = (
            ["nvidia-open-kernel-dkms", "firmware-nvidia-gsp"] if open_ else ["nvidia-kernel-dkms"]
        )
        plan.packages = user + ([*kernel, "nvidia-persistenced"] if km else [])
        plan.hold = user + (kernel if km else [])
        plan.version_package = "libnvidia-ml1"
        srcs = ["nvidia-graphics-drivers"] + (
            ["nvidia-open-gpu-kernel-modules"] if km and open_ else []
        )
        plan.apt_preferences = _apt_pin(srcs, plan.pin)
        plan.repository = {"name": "debian", "components": ["contrib", "non-free"]}
    elif plat.distro == "ubuntu":
        plan.known_branches = list(UBUNTU[plat.release]["branches"])
        user = [f"nvidia-utils-{b}-server", f"libnvidia-compute-{b}-server"]
        kernel = [f"nvidia-headless-{b}-server" + ("-open" if open_ else "")]
        plan.packages = user + (kernel if km else [])
        plan.hold = list(plan.packages)
        plan.version_package = f"libnvidia-compute-{b}-server"
        plan.apt_preferences = _apt_pin([f"nvidia-graphics-drivers-{b}-server"], plan.pin)
        plan.repository = {"name": "ubuntu", "components": ["restricted"]}
    else:
        raise ProvisionError(
            f"nvidia_driver_source: {plat.distro} {plat.release} has no NVIDIA driver in its own "
            "repositories; use cuda-repo"
        )


def _cuda_repo_driver(plat: Platform, plan: DriverPlan) -> None:
    b, km, open_ = plan.branch, plan.kernel_module, plan.flavor == "open"
    plan.known_branches = list(CUDA_REPO_BRANCHES[plat.repo_id])
    if plat.distro == "debian":
        _cuda_repo_debian(plan, km, open_)
        return
    if plat.family == "apt":
        user = [f"nvidia-utils-{b}", f"libnvidia-compute-{b}"]
        if open_:
            kernel = [
                f"nvidia-open-{b}" if int(b) >= OPEN_DEFAULT_FROM else f"nvidia-driver-{b}-open"
            ]
        else:
            kernel = [f"cuda-drivers-{b}"]
        plan.packages = user + (kernel if km else [])
        plan.hold = list(plan.packages)
        plan.version_package = f"libnvidia-compute-{b}"
        plan.apt_preferences = _apt_pin([f"nvidia-graphics-drivers-{b}"], plan.pin)
        return
    user = ["nvidia-driver-cuda", "nvidia-driver-cuda-libs"]
    if int(b) < RHEL_MODULES_BEFORE:
        plan.dnf_module = f"nvidia-driver:{b}-{'open' if open_ else 'dkms'}"
    kernel = ["kmod-nvidia-open-dkms" if open_ else "kmod-nvidia-latest-dkms"]
    plan.packages = user + (kernel if km else [])
    plan.hold = list(plan.packages)
    plan.version_package = "nvidia-driver-cuda-libs"


def _cuda_repo_debian(plan: DriverPlan, km: bool, open_: bool) -> None:
    """NVIDIA's repository for Debian 12/13, as NVIDIA's driver installation guide documents
    it (docs.nvidia.com/datacenter/tesla/driver-installation-guide, "Debian" and "Version
    locking"): Debian's own package names, one set for every branch (no ``-<branch>``
    suffix: Ubuntu's ``nvidia-utils-<b>``/``libnvidia-compute-<b>`` do not exist there).

    * compute-only (headless) system, the guide's set for a data center node:
      ``nvidia-driver-cuda`` plus ``nvidia-kernel-open-dkms`` (open kernel modules) or
      ``nvidia-kernel-dkms`` (proprietary). The full metapackages (``nvidia-open``,
      ``cuda-drivers``/``cuda-drivers-<branch>``) add the desktop stack, and
      ``cuda-drivers-<branch>`` depends with ``>=`` only, so it pins nothing (NVIDIA forum:
      "Debian cuda-drivers-580 package 580.105.08-1 improperly pulls in v590 components").
    * the branch or version is chosen by NVIDIA's pinning package, installed before the
      driver: ``nvidia-driver-pinning-<branch>`` ("APT driver pinning file for driver
      branch 580", version 580-5) or ``nvidia-driver-pinning-<version>`` (e.g.
      nvidia-driver-pinning-580.105.08); gpunode writes no pin file of its own there.
    * ``nvidia-driver-cuda``'s version is the driver's (580.105.08-1): the version package.
    * ``nvidia-persistenced`` is its own package, installed with the kernel module.
    """
    kernel = ["nvidia-kernel-open-dkms" if open_ else "nvidia-kernel-dkms"]
    plan.packages = ["nvidia-driver-cuda"] + ([*kernel, "nvidia-persistenced"] if km else [])
    # libnvidia-ml1 (NVML, a dependency at exactly the driver's version) held as well: on
    # every source gpunode holds the package NVML's version comes from, which is what
    # validate and tests/infra find as the driver's package
    plan.hold = ["nvidia-driver-cuda", "libnvidia-ml1"] + (kernel if km else [])
    plan.version_package = "nvidia-driver-cuda"
    plan.pin_packages = [f"nvidia-driver-pinning-{plan.pin}"]
    plan.apt_preferences = ""


@dataclass
class CudaPlan:
    source: str
    package_set: str
    versions: list[str]
    default: str
    packages: dict[str, list[str]]  # per CUDA version
    version_packages: dict[str, str]  # per CUDA version: the package whose version is checked
    homes: dict[str, str]  # per CUDA version: CUDA_HOME
    bin_dirs: dict[str, str]
    repository: dict | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    def profile_script(self) -> str:
        """/etc/profile.d content: CUDA_HOME and PATH for the default version."""
        bin_dir = self.bin_dirs[self.default]
        return (
            f"# Managed by gpunode (cuda_toolkit role). Installed CUDA: {', '.join(self.versions)};\n"
            f"# default {self.default}.\n"
            f"CUDA_HOME={self.homes[self.default]}\n"
            "export CUDA_HOME\n"
            'case ":$PATH:" in\n'
            f"  *:{bin_dir}:*) ;;\n"
            f"  *) PATH={bin_dir}:$PATH; export PATH ;;\n"
            "esac\n"
        )


def cuda_plan(
    plat: Platform,
    *,
    source: str,
    versions: list[str],
    default: str = "",
    package_set: str = "full",
    repo_url: str = CUDA_REPO_URL,
    repo_key_url: str = CUDA_REPO_KEY_URL,
) -> CudaPlan:
    if source not in SOURCES:
        raise ProvisionError(f"cuda_toolkit_source: {source!r} is not one of {', '.join(SOURCES)}")
    if package_set not in PACKAGE_SETS:
        raise ProvisionError(
            f"cuda_toolkit_package_set: {package_set!r} is not one of {', '.join(PACKAGE_SETS)}"
        )
    if not versions:
        raise ProvisionError(
            "cuda_toolkit_versions: empty; give one or more CUDA versions (e.g. ['12.4'])"
        )
    mms = [major_minor(v) for v in versions]
    if len(set(mms)) != len(mms):
        raise ProvisionError(f"cuda_toolkit_versions: {versions} names a CUDA release twice")
    default = major_minor(default) if default else mms[-1]
    if default not in mms:
        raise ProvisionError(
            f"cuda_toolkit_default_version: {default} is not one of cuda_toolkit_versions ({', '.join(mms)})"
        )
    plan = CudaPlan(source, package_set, mms, default, {}, {}, {}, {})
    if source == "distro":
        if plat.distro not in ("debian", "ubuntu"):
            raise ProvisionError(
                f"cuda_toolkit_source: {plat.distro} {plat.release} has no CUDA toolkit in its own "
                "repositories; use cuda-repo"
            )
        rel = (DEBIAN if plat.distro == "debian" else UBUNTU)[plat.release]
        if rel["cuda"] is None:
            raise ProvisionError(
                f"cuda_toolkit_versions: {plat.distro} {plat.release} ships no CUDA toolkit; "
                "set cuda_toolkit_versions: [] (no toolkit on the host: containers bring their "
                "own CUDA)"
            )
        if mms != [rel["cuda"]]:
            raise ProvisionError(
                f"cuda_toolkit_versions: {plat.distro} {plat.release} ships CUDA {rel['cuda']} only; "
                f"request {rel['cuda']} or set cuda_toolkit_source: cuda-repo"
            )
        mm = rel["cuda"]
        full = package_set == "full"
        plan.packages[mm] = ["nvidia-cuda-toolkit"] if full else [rel["cudart"]]
        plan.version_packages[mm] = "nvidia-cuda-toolkit" if full else rel["cudart"]
        plan.homes[mm] = "/usr/lib/nvidia-cuda-toolkit"
        plan.bin_dirs[mm] = "/usr/bin"
        return plan
    plan.repository = cuda_repository(plat, repo_url, repo_key_url, "cuda_toolkit")
    for mm in mms:
        dash = mm.replace(".", "-")
        plan.packages[mm] = [
            f"cuda-toolkit-{dash}" if package_set == "full" else f"cuda-cudart-{dash}"
        ]
        plan.version_packages[mm] = f"cuda-cudart-{dash}"
        plan.homes[mm] = f"/usr/local/cuda-{mm}"
        plan.bin_dirs[mm] = f"/usr/local/cuda-{mm}/bin"
    return plan
