"""GPU profiles: a YAML description of what a (simulated) node's NVIDIA driver exposes.

A profile names the driver version, the CUDA version that driver supports and each GPU:
model, UUID, PCI bus id, memory, compute capability and injected faults. The simulator
turns a profile into device nodes, a ``/proc/driver/nvidia`` tree and a mock NVML; tests
compare what consumers see against the profile.

Schema (every key is checked; unknown keys are errors so typos cannot pass silently)::

    name: a100x4                      # [a-z0-9][a-z0-9._-]*
    description: free text
    driver:                           # omit (or null) for a node with no NVIDIA driver
      version: "535.261.03"
      cuda_version: "12.2"            # what nvmlSystemGetCudaDriverVersion reports
      kernel_module: proprietary      # or "open": changes the /proc version line
    defaults:                         # any GPU key; applies to every GPU
      model: NVIDIA A100-SXM4-80GB    # printable ASCII, at most 95 characters (NVML's name
                                      #   buffer; serial: 29, vbios: 31)
      pci_device_id: 0x20B2           # a board of sim/gpu-pci-ids.json (0: not given)
      bar1_mib: 131072                # BAR1; default the power of two >= memory_mib
      ...
    gpus:
      - uuid: GPU-...                 # required, GPU-8-4-4-4-12 hex
        bus_id: "0000:07:00.0"        # required, domain:bus:device.function
        minor: 0                      # default: position in the list
        faults: [ecc_uncorrectable]   # see FAULTS
        pcie_gen: 5                   # the link's maximum generation and width, and the
        pcie_width: 16                #   NVLinks (all up): defaults by compute capability
        nvlinks: 18                   #   (LINK_DEFAULTS); NVSwitch fabric: 9.0+ with NVLinks
                                      #   (untrained until a fabric manager runs:
                                      #   gpunode.sim.fabric)
        mig:                          # false (default), true (enabled, no instances) or
          - profile: 3g.40gb          #   the MIG devices: GPU instance profile,
            placement: 0              #   its start slot (see sim/mig-geometry.json)
            uuid: MIG-...             #   and the MIG device's UUID
        numa_node: 0                  # where the GPU sits in the node's PCI tree (see
        pci_host_bridge: 0            #   "PCI and NVLink layout" below); defaults: NUMA
        pci_switches: [sw0, sw0a]     #   node 0, host bridge 0, no PCIe switch
        nvlink_peers: ["0000:0f:00.0", ...]  # the far end of each NVLink, in link order

MIG is only accepted on MIG-capable GPUs (compute capability 8.0, 9.0 or 10.0: A100, A30,
H100, H200, B200); on those NVML reports MIG mode, disabled unless ``mig`` enables it.

PCI and NVLink layout (what NVML's topology calls and the node's PCI sysfs show):

* ``numa_node``: the NUMA node (CPU socket) whose root complex the GPU hangs off; the
  node's ``/sys/bus/pci/devices/<bus id>/numa_node``.
* ``pci_host_bridge``: which host bridge (root complex) of the node; a host bridge belongs
  to one NUMA node.
* ``pci_switches``: the PCIe switches between the host bridge and the GPU, top down, by
  any name (letters, digits, ``.``, ``_``, ``-``). The same name in two GPUs is the same
  switch: it must sit at the same place (same host bridge, same switches above it).

``nvmlDeviceGetTopologyCommonAncestor`` follows from these as the driver derives it from
the PCI tree: the same GPU: INTERNAL; other NUMA nodes: SYSTEM; other host bridges of one
NUMA node: NODE; one host bridge, no switch in common: HOSTBRIDGE; a common switch: SINGLE
when it is the only switch between them, else MULTIPLE. (INTERNAL between two GPUs, a
multi-GPU board, is not modelled: every simulated board holds one GPU.)

* ``nvlink_peers``: exactly ``nvlinks`` PCI addresses, the far end of link 0, 1, ...: a
  GPU of the profile (a direct GPU-to-GPU link; the peer must list as many links back: an
  NVLink bridge, or a board without NVSwitch such as HGX A100 4-GPU, profile a100x4) or
  any other address, an NVSwitch (8-GPU HGX/DGX boards: every GPU lists the same switches,
  so it usually goes in ``defaults``). NVSwitches show in the node's PCI sysfs (class 0x068000)
  with the device id of that GPU generation's NVSwitch (NVSWITCH_DEVICE_IDS). Without
  ``nvlink_peers`` NVML does not know the far ends (Not Supported), as for a GPU whose
  links the driver cannot map.
"""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ..nvidia import fabric as nvfabric
from ..nvidia.busid import BusId
from ..nvidia.nvml import BRANDS
from ..util.command import InputError
from .miggeometry import CI_SHAPES, MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, MIG_SHAPES, MigShape

PCIE_REPLAYS = 120  # the pcie_replays fault's counter (gpunode warns above 8)


@dataclass(frozen=True)
class Fault:
    """A fault a profile injects into a GPU, and what an operator must see of it: on that
    GPU exactly these gpunode.nvidia.health checks bad (`gpunode validate`, the cluster
    report; sim.expected judges a report by them), nothing else."""

    text: str
    shows: dict[str, str]  # check id -> "fail" or "warn", in health.CHECKS order
    # what it shows on a PCIe card instead (a card is judged apart from an SXM module)
    on_card: dict[str, str] | None = None
    # what it also shows on the node's own rows (a GPU's fault the node check sums up)
    node: dict[str, str] | None = None


# The one table of simulated faults. A fault is named by the health flag it raises (the
# inventory's `health`, health.FLAGS), where its check has one; a fault whose check has
# none (device_node_missing: the inventory's `problems`) by what happens.
# tests/unit/sim/test_profiles.py holds every fault to its entry and its name.
FAULTS = {
    "fallen_off_bus": Fault("the GPU fell off the bus: NVML reports GPU_IS_LOST",
                            {"gpu.lost": "fail"}),
    # the driver also logs an Xid 48 for it (sim.procfs.XID_OF_FAULT)
    "ecc_uncorrectable": Fault("uncorrectable (double-bit) ECC errors counted",
                               {"gpu.ecc_uncorrectable": "fail", "gpu.xid": "fail"}),
    "retired_pages_pending": Fault("retired pages waiting for a reset to take effect",
                                   {"gpu.retired_pages_pending": "fail"}),
    "row_remap_failure": Fault("row remapping failed (no spare rows left)",
                               {"gpu.row_remap_failure": "fail"}),
    "persistence_off": Fault("persistence mode disabled", {"gpu.persistence": "warn"}),
    "device_node_missing": Fault("the /dev/nvidia<minor> node was not created",
                                 {"gpu.device_node": "fail"}),
    "xid_application_error": Fault(
        "an application's Xid 13 (graphics exception) in the kernel log", {"gpu.xid": "warn"}),
    "xid_error": Fault("an Xid 74 (NVLink error) in the kernel log", {"gpu.xid": "fail"}),
    # links and state (gpunode.nvidia.health), as NVML shows them
    # a width drop fails on an SXM module (HGX/DGX baseboards, as DCGM judges it) and only
    # warns on a PCIe card
    "pcie_link_degraded": Fault("the PCIe link trained at half its width (x8 of x16)",
                                {"gpu.pcie_link": "fail"}, on_card={"gpu.pcie_link": "warn"}),
    "pcie_replays": Fault(f"the PCIe replay counter reads {PCIE_REPLAYS} (a marginal link)",
                          {"gpu.pcie_replay": "warn"}),
    "clocks_hw_slowdown": Fault("clocks held down by HW slowdown (clock event reason 0x8)",
                                {"gpu.clocks_event": "fail"}),
    "clocks_sw_thermal": Fault(
        "clocks held down by SW thermal slowdown (clock event reason 0x20)",
        {"gpu.clocks_event": "warn"}),
    "nvlink_down": Fault("NVLink 0 is down (a GPU with NVLinks only)", {"gpu.nvlink": "fail"}),
    "inforom_corrupt": Fault("the InfoROM is corrupted: nvmlDeviceValidateInforom fails",
                             {"gpu.inforom": "fail"}),
    # NVSwitch GPUs (Hopper+): shows once a fabric manager has trained the fabric. No fault
    # stands for "fabric manager not installed or not running": that is every NVSwitch
    # node's state until one runs (gpunode.sim.fabric), not something a profile injects.
    # node.fabric_manager sums the node's fabric up: one GPU's failed training fails it
    "fabric_manager_failed": Fault(
        "fabric training completed with an error (NVSwitch GPUs only)",
        {"gpu.fabric_manager": "fail"}, node={"node.fabric_manager": "fail"}),
}  # fmt: skip
# Faults renamed to the flag they raise (commit 524d374): a profile naming the old name is
# told the new one.
RENAMED_FAULTS = {
    "pcie_degraded": "pcie_link_degraded",
    "xid_application": "xid_application_error",
    "xid_nvlink": "xid_error",
}

# nvmlDeviceArchitecture_t by compute-capability major (and 7.5 for Turing).
_ARCH_BY_CC = {3: 2, 5: 3, 6: 4, 7: 5, 8: 7, 9: 9, 10: 10, 12: 10}

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_UUID_RE = re.compile(
    r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE
)
_MIG_UUID_RE = re.compile(
    r"^MIG-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE
)
_VERSION_RE = re.compile(r"^\d+(\.\d+){1,2}$")
_CUDA_RE = re.compile(r"^(\d+)\.(\d+)$")
_CC_RE = re.compile(r"^(\d+)\.(\d+)$")

GPU_KEYS = {
    "model",
    "memory_mib",
    "memory_reserved_mib",
    "memory_used_mib",
    "bar1_mib",
    "compute_capability",
    "pci_device_id",
    "pci_subsystem_id",
    "brand",
    "vbios",
    "serial",
    "power_limit_w",
    "power_usage_w",
    "temperature_c",
    "ecc",
    "mig",
    "irq",
    "uuid",
    "bus_id",
    "minor",
    "faults",
    "pcie_gen",
    "pcie_width",
    "nvlinks",
    "numa_node",
    "pci_host_bridge",
    "pci_switches",
    "nvlink_peers",
}
DEFAULTABLE = GPU_KEYS - {"uuid", "bus_id", "minor", "faults"}
MIG_INSTANCE_KEYS = {"profile", "placement", "uuid"}

# Compute capabilities of the MIG-capable GPUs (A100/A30, H100/H200, B200).
MIG_CAPABLE_CC = {(8, 0), (9, 0), (10, 0)}
TOP_KEYS = {"name", "description", "driver", "defaults", "gpus"}
DRIVER_KEYS = {"version", "cuda_version", "kernel_module"}


class ProfileError(InputError, ValueError):
    """A profile is invalid. The message is one line naming the value and what is accepted."""


@dataclass(frozen=True)
class MigInstance:
    """A MIG device: one GPU instance of ``shape`` at ``placement`` with one compute
    instance (id 0) spanning it."""

    profile: str
    placement: int
    uuid: str
    shape: MigShape

    @property
    def gi_id(self) -> int:
        return self.shape.gi_id(self.placement)


@dataclass(frozen=True)
class Gpu:
    minor: int
    uuid: str
    bus_id: BusId
    model: str
    memory_mib: int
    memory_reserved_mib: int
    memory_used_mib: int
    compute_capability: tuple[int, int]
    pci_device_id: int
    pci_subsystem_id: int
    brand: str
    vbios: str
    serial: str
    power_limit_w: int
    power_usage_w: int
    temperature_c: int
    ecc: bool
    mig: bool
    irq: int
    faults: frozenset[str] = field(default_factory=frozenset)
    mig_instances: tuple[MigInstance, ...] = ()
    pcie_gen: int = 4  # the link's maximum (the GPU's in its slot); healthy: trained at it
    pcie_width: int = 16
    nvlinks: int = 0  # NVLink links, all up when healthy
    # PCI and NVLink layout (see the module docstring)
    numa_node: int = 0
    pci_host_bridge: int = 0
    pci_switches: tuple[str, ...] = ()
    nvlink_peers: tuple[BusId, ...] = ()
    bar1_mib: int = 0  # the BAR1 aperture; 0: the power of two at or above memory_mib

    @property
    def bar1(self) -> int:
        """BAR1's size in MiB: the profile's, or the large BAR of data-center boards (A100
        80GB and H100 80GB: 128 GiB), the power of two at or above the memory."""
        return self.bar1_mib or 1 << (self.memory_mib - 1).bit_length()

    @property
    def fabric(self) -> bool:
        """On an NVSwitch baseboard (Hopper or newer with NVLinks: HGX): NVML reports the
        fabric manager's training of this GPU."""
        return self.compute_capability >= (9, 0) and self.nvlinks > 0

    @property
    def pcie_trained_width(self) -> int:
        """The width the PCIe link trained at: its maximum, half of it with the fault
        pcie_link_degraded. The fault's one effect: NVML (the mock's payload) and PCI sysfs
        (gpunode.sim.pcisysfs) both show this width."""
        return self.pcie_width // 2 if "pcie_link_degraded" in self.faults else self.pcie_width

    @property
    def mig_capable(self) -> bool:
        return self.compute_capability in MIG_CAPABLE_CC

    @property
    def architecture(self) -> int:
        major, minor = self.compute_capability
        if (major, minor) == (7, 5):
            return 6  # Turing
        if (major, minor) == (8, 9):
            return 8  # Ada
        return _ARCH_BY_CC.get(major, 0)

    @property
    def device_node(self) -> str:
        return f"/dev/nvidia{self.minor}"


@dataclass(frozen=True)
class Driver:
    version: str
    cuda_version: str
    kernel_module: str = "proprietary"

    @property
    def cuda_version_int(self) -> int:
        major, minor = (int(x) for x in self.cuda_version.split("."))
        return major * 1000 + minor * 10

    @property
    def nvml_version(self) -> str:
        # NVML reports "<CUDA major>.<driver version>", e.g. 12.535.261.03.
        return f"{self.cuda_version.split('.')[0]}.{self.version}"


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    driver: Driver | None
    gpus: tuple[Gpu, ...]
    source: str = "<memory>"

    def gpu_by_minor(self, minor: int) -> Gpu:
        for gpu in self.gpus:
            if gpu.minor == minor:
                return gpu
        raise KeyError(minor)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "driver_version": self.driver.version if self.driver else None,
            "cuda_driver_version": self.driver.cuda_version if self.driver else None,
            "gpus": [
                {
                    "minor": g.minor,
                    "uuid": g.uuid,
                    "bus_id": g.bus_id.nvml,
                    "model": g.model,
                    "memory_mib": g.memory_mib,
                    "faults": sorted(g.faults),
                }
                for g in self.gpus
            ],
        }


def _err(where: str, value: Any, expected: str) -> ProfileError:
    return ProfileError(f"{where}: {value!r} is not valid; expected {expected}")


def _int(where: str, value: Any, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(value, bool):
        raise _err(where, value, "an integer")
    if isinstance(value, str):
        try:
            value = int(value, 0)
        except ValueError:
            raise _err(where, value, "an integer (decimal or 0x hex)") from None
    if not isinstance(value, int) or value < lo or (hi is not None and value > hi):
        rng = f"{lo}..{hi}" if hi is not None else f">= {lo}"
        raise _err(where, value, f"an integer {rng}")
    return value


def _str(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or "\t" in value or "\n" in value:
        raise _err(where, value, "a non-empty single-line string without tabs")
    return value


# What NVML's buffers hold (the terminating NUL left out), so that nvidia-smi and every other
# NVML caller can print a profile's strings whole: NVML_DEVICE_NAME_V2_BUFFER_SIZE 96,
# NVML_DEVICE_SERIAL_BUFFER_SIZE 30, NVML_DEVICE_VBIOS_VERSION_BUFFER_SIZE 32.
TEXT_LIMITS = {"model": 95, "serial": 29, "vbios": 31}
_PRINTABLE_RE = re.compile(r"^[\x20-\x7e]+$")
# The NVIDIA GPUs a profile may be (PCI device id -> pci.ids' name): gpu-pci-ids.json
PCI_IDS = Path(__file__).with_name("gpu-pci-ids.json")


def _text(where: str, key: str, value: Any) -> str:
    """A string NVML hands out (model, serial, vbios): printable ASCII that fits NVML's
    buffer; a value refused is shown cut short, with its length."""
    limit = TEXT_LIMITS[key]
    fits = isinstance(value, str) and 0 < len(value) <= limit
    if fits and value.strip() and _PRINTABLE_RE.match(value):
        return value
    shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
    size = f" ({len(value)} characters)" if isinstance(value, str) and len(value) > 40 else ""
    raise ProfileError(
        f"{where}.{key}: {shown!r}{size} is not valid; expected printable ASCII of 1 to "
        f"{limit} characters (what NVML's buffer holds)"
    )


@functools.cache
def known_pci_ids() -> dict[int, str]:
    """gpu-pci-ids.json: device id -> name (read once: every GPU of every profile asks)."""
    data = json.loads(PCI_IDS.read_text(encoding="utf-8"))
    return {int(k, 16): v for k, v in data.items() if not k.startswith("_")}


def _pci_id(where: str, value: Any) -> int:
    """A profile's pci_device_id: 0 (not given) or a board of gpu-pci-ids.json."""
    device = _int(f"{where}.pci_device_id", value, 0, 0xFFFF)
    known = known_pci_ids()
    if device and device not in known:
        ids = ", ".join(f"0x{k:04X}" for k in sorted(known))
        raise ProfileError(
            f"{where}.pci_device_id: 0x{device:04X} is not an NVIDIA GPU the simulator knows; "
            f"expected one of {ids} (gpunode/sim/gpu-pci-ids.json)"
        )
    return device


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _err(where, value, "true or false")
    return value


def _mapping(where: str, value: Any, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _err(where, value, "a mapping")
    unknown = sorted(str(k) for k in value if k not in allowed)
    if unknown:
        raise ProfileError(
            f"{where}: unknown key {unknown[0]!r}; accepted keys: {', '.join(sorted(allowed))}"
        )
    return value


def _parse_driver(where: str, raw: Any) -> Driver | None:
    if raw is None:
        return None
    raw = _mapping(where, raw, DRIVER_KEYS)
    for key in ("version", "cuda_version"):
        if key not in raw:
            raise ProfileError(f"{where}: missing required key {key!r}")
    version = str(raw["version"])
    if not _VERSION_RE.match(version):
        raise _err(f"{where}.version", raw["version"], "a driver version like 535.261.03")
    cuda = str(raw["cuda_version"])
    if not _CUDA_RE.match(cuda):
        raise _err(f"{where}.cuda_version", raw["cuda_version"], "MAJOR.MINOR like 12.2")
    module = raw.get("kernel_module", "proprietary")
    if module not in ("proprietary", "open"):
        raise _err(f"{where}.kernel_module", module, "'proprietary' or 'open'")
    return Driver(version=version, cuda_version=cuda, kernel_module=module)


def _parse_gpu(where: str, raw: dict[str, Any], position: int) -> Gpu:
    for key in ("uuid", "bus_id", "model", "memory_mib", "compute_capability"):
        if key not in raw:
            raise ProfileError(
                f"{where}: missing required key {key!r} (set it here or in defaults)"
            )
    uuid = str(raw["uuid"])
    if not _UUID_RE.match(uuid):
        raise _err(f"{where}.uuid", raw["uuid"], "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)")
    try:
        bus = BusId.parse(str(raw["bus_id"]))
    except ValueError:
        raise _err(f"{where}.bus_id", raw["bus_id"], "a PCI address like 0000:07:00.0") from None
    cc_text = str(raw["compute_capability"])
    cc = _CC_RE.match(cc_text)
    if not cc:
        raise _err(f"{where}.compute_capability", raw["compute_capability"], "MAJOR.MINOR like 8.0")
    brand = str(raw.get("brand", "tesla")).lower()
    if brand not in BRANDS:
        raise _err(f"{where}.brand", raw.get("brand"), f"one of {', '.join(sorted(BRANDS))}")
    faults_raw = raw.get("faults", [])
    if not isinstance(faults_raw, list):
        raise _err(f"{where}.faults", faults_raw, "a list")
    # each name is in FAULTS: parse_profile checked every GPU's first (_check_faults)
    memory = _int(f"{where}.memory_mib", raw["memory_mib"], 1)
    compute_capability = (int(cc[1]), int(cc[2]))
    mig, instances = _parse_mig(f"{where}.mig", raw.get("mig", False), memory, compute_capability)
    reserved = _int(f"{where}.memory_reserved_mib", raw.get("memory_reserved_mib", 0))
    used = _int(f"{where}.memory_used_mib", raw.get("memory_used_mib", 0))
    if reserved + used > memory:
        raise ProfileError(
            f"{where}: memory_reserved_mib + memory_used_mib ({reserved + used}) exceeds "
            f"memory_mib ({memory})"
        )
    links = _parse_links(where, raw, compute_capability, frozenset(faults_raw))
    bar1 = _int(f"{where}.bar1_mib", raw.get("bar1_mib", 0), 0, 1 << 24)
    return Gpu(
        bar1_mib=bar1,
        minor=_int(f"{where}.minor", raw.get("minor", position), 0, 253),
        uuid=uuid,
        bus_id=bus,
        model=_text(where, "model", raw["model"]),
        memory_mib=memory,
        memory_reserved_mib=reserved,
        memory_used_mib=used,
        compute_capability=compute_capability,
        pci_device_id=_pci_id(where, raw.get("pci_device_id", 0)),
        pci_subsystem_id=_int(
            f"{where}.pci_subsystem_id", raw.get("pci_subsystem_id", 0), 0, 0xFFFFFFFF
        ),
        brand=brand,
        vbios=_text(where, "vbios", raw.get("vbios", "00.00.00.00.01")),
        serial=_text(where, "serial", raw.get("serial", f"13240{position:08d}")),
        power_limit_w=_int(f"{where}.power_limit_w", raw.get("power_limit_w", 300), 1),
        power_usage_w=_int(f"{where}.power_usage_w", raw.get("power_usage_w", 60)),
        temperature_c=_int(f"{where}.temperature_c", raw.get("temperature_c", 35), 0, 150),
        ecc=_bool(f"{where}.ecc", raw.get("ecc", True)),
        mig=mig,
        irq=_int(f"{where}.irq", raw.get("irq", 100 + position)),
        faults=frozenset(faults_raw),
        mig_instances=instances,
        **links,
        **_parse_layout(where, raw, links["nvlinks"]),
    )


# Healthy links by compute capability: (PCIe generation, width, NVLinks) of the SXM boards
# (V100, A100, H100/H200, B200; T4 and other PCIe cards: no NVLink); a profile can override
# each with pcie_gen, pcie_width and nvlinks.
LINK_DEFAULTS = {
    (7, 0): (3, 16, 6),
    (7, 5): (3, 16, 0),
    (8, 0): (4, 16, 12),
    (9, 0): (5, 16, 18),
    (10, 0): (5, 16, 18),
}
PCIE_WIDTHS = (1, 2, 4, 8, 16, 32)
NVLINK_MAX_LINKS = 36  # NVML_NVLINK_MAX_LINKS
# NVLink's generation by compute capability: (NVML's link version, a link's speed in MB/s,
# what NVML's NVLINK_GET_SPEED field reports and `nvidia-smi nvlink -s` prints in GB/s):
# NVLink 2 on V100, 3 on A100, 4 on H100/H200, 5 on B200.
NVLINK_GENERATIONS = {
    (7, 0): (2, 25781),
    (8, 0): (3, 25000),
    (9, 0): (4, 26562),
    (10, 0): (5, 53125),
}


def _parse_links(
    where: str, raw: dict[str, Any], cc: tuple[int, int], faults: frozenset[str]
) -> dict[str, int]:
    """pcie_gen, pcie_width and nvlinks of a GPU, and the faults that need them."""
    gen, width, links = LINK_DEFAULTS.get(cc, (4 if cc >= (8, 0) else 3, 16, 0))
    gen = _int(f"{where}.pcie_gen", raw.get("pcie_gen", gen), 1, 6)
    width = _int(f"{where}.pcie_width", raw.get("pcie_width", width), 1, 32)
    if width not in PCIE_WIDTHS:
        widths = ", ".join(map(str, PCIE_WIDTHS))
        raise _err(f"{where}.pcie_width", raw["pcie_width"], f"one of {widths}")
    links = _int(f"{where}.nvlinks", raw.get("nvlinks", links), 0, NVLINK_MAX_LINKS)
    if "nvlink_down" in faults and not links:
        raise ProfileError(f"{where}.faults: nvlink_down needs a GPU with NVLinks (nvlinks is 0)")
    if "pcie_link_degraded" in faults and width == 1:
        raise ProfileError(f"{where}.faults: pcie_link_degraded needs a link wider than x1")
    if "fabric_manager_failed" in faults and not (cc >= (9, 0) and links):
        raise ProfileError(
            f"{where}.faults: fabric_manager_failed needs an NVSwitch GPU (compute capability "
            f"9.0 or later with NVLinks); this one has {cc[0]}.{cc[1]} and {links} NVLinks"
        )
    return {"pcie_gen": gen, "pcie_width": width, "nvlinks": links}


# The device id of the NVSwitch on the HGX boards of a GPU generation (by compute
# capability), as the PCI ID database names them: GA100 [A100 NVSwitch], GH100 [H100
# NVSwitch]. What NVML reports for an NVLink whose far end is an NVSwitch, and the
# NVSwitch's "device" in PCI sysfs.
# the id pci.ids names for each generation's switch (gpunode.nvidia.fabric's one table)
NVSWITCH_DEVICE_IDS = {
    (8, 0): nvfabric.GENERATIONS["LR10"][2],
    (9, 0): nvfabric.GENERATIONS["LS10"][2],
}
NVSWITCH_CLASS = 0x068000  # bridge, "other": what NVIDIA's tools look for (nvpci)
_SWITCH_NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")


def _parse_layout(where: str, raw: dict[str, Any], nvlinks: int) -> dict[str, Any]:
    """numa_node, pci_host_bridge, pci_switches and nvlink_peers of one GPU (the checks
    across GPUs are _check_layout's)."""
    switches = raw.get("pci_switches", [])
    if not isinstance(switches, list):
        raise _err(f"{where}.pci_switches", switches, "a list of PCIe switch names")
    for name in switches:
        if not isinstance(name, str) or not _SWITCH_NAME_RE.match(name):
            raise _err(
                f"{where}.pci_switches", name, "a switch name of letters, digits, '.', '_', '-'"
            )
    if len(set(switches)) != len(switches):
        raise _err(f"{where}.pci_switches", switches, "each switch once")
    peers_raw = raw.get("nvlink_peers", [])
    if not isinstance(peers_raw, list):
        raise _err(f"{where}.nvlink_peers", peers_raw, "a list of PCI addresses, one per NVLink")
    peers = []
    for peer in peers_raw:
        try:
            peers.append(BusId.parse(str(peer)))
        except ValueError:
            raise _err(f"{where}.nvlink_peers", peer, "a PCI address like 0000:0f:00.0") from None
    if peers and len(peers) != nvlinks:
        raise ProfileError(
            f"{where}.nvlink_peers: {len(peers)} far ends for {nvlinks} NVLinks; "
            "give one per link (or none)"
        )
    return {
        "numa_node": _int(f"{where}.numa_node", raw.get("numa_node", 0), 0, 63),
        "pci_host_bridge": _int(f"{where}.pci_host_bridge", raw.get("pci_host_bridge", 0), 0, 255),
        "pci_switches": tuple(switches),
        "nvlink_peers": tuple(peers),
    }


def _check_layout(where: str, gpus: list[Gpu]) -> None:
    """The PCI tree and the NVLinks the GPUs describe together are one: a host bridge in one
    NUMA node, a switch in one place, links to a GPU matched by as many links back."""
    bridges: dict[int, tuple[int, int]] = {}  # host bridge -> (NUMA node, first GPU)
    places: dict[str, tuple[tuple[Any, ...], int]] = {}  # switch -> (its path, first GPU)
    by_bus = {g.bus_id: i for i, g in enumerate(gpus)}
    for i, g in enumerate(gpus):
        numa, first = bridges.setdefault(g.pci_host_bridge, (g.numa_node, i))
        if numa != g.numa_node:
            raise ProfileError(
                f"{where}: gpus[{i}].pci_host_bridge {g.pci_host_bridge} is in NUMA node "
                f"{numa} (gpus[{first}]), not {g.numa_node}; a host bridge is in one NUMA node"
            )
        for depth, name in enumerate(g.pci_switches):
            path = (g.pci_host_bridge, *g.pci_switches[:depth])
            seen, first = places.setdefault(name, (path, i))
            if seen != path:
                raise ProfileError(
                    f"{where}: gpus[{i}].pci_switches: switch {name!r} is under "
                    f"{_place(seen)} in gpus[{first}] but under {_place(path)} here; "
                    "a switch has one place in the tree"
                )
        for peer in g.nvlink_peers:
            if peer == g.bus_id:
                raise ProfileError(
                    f"{where}: gpus[{i}].nvlink_peers: {peer.procfs} is this GPU itself"
                )
            j = by_bus.get(peer)
            if j is None:
                if g.compute_capability not in NVSWITCH_DEVICE_IDS:
                    known = ", ".join(f"{a}.{b}" for a, b in sorted(NVSWITCH_DEVICE_IDS))
                    raise ProfileError(
                        f"{where}: gpus[{i}].nvlink_peers: {peer.procfs} is no GPU of the "
                        f"profile, so an NVSwitch; NVSwitch boards are known for compute "
                        f"capability {known}, not {g.compute_capability[0]}."
                        f"{g.compute_capability[1]}"
                    )
                continue
            there = gpus[j].nvlink_peers.count(g.bus_id)
            here = g.nvlink_peers.count(peer)
            if there != here:
                raise ProfileError(
                    f"{where}: gpus[{i}] has {here} NVLink(s) to {peer.procfs} (gpus[{j}]) "
                    f"but gpus[{j}] has {there} back; a link has two ends"
                )


def _place(path: tuple[Any, ...]) -> str:
    return f"host bridge {path[0]}" + "".join(f" > {name}" for name in path[1:])


def _parse_mig(
    where: str, raw: Any, memory_mib: int, cc: tuple[int, int]
) -> tuple[bool, tuple[MigInstance, ...]]:
    if isinstance(raw, bool):
        entries: list[Any] = []
        enabled = raw
    elif isinstance(raw, list):
        entries, enabled = raw, True
    else:
        raise _err(where, raw, "false, true or a list of MIG instances")
    if enabled and cc not in MIG_CAPABLE_CC:
        capable = ", ".join(f"{a}.{b}" for a, b in sorted(MIG_CAPABLE_CC))
        raise ProfileError(
            f"{where}: MIG needs a MIG-capable GPU (compute capability {capable}); "
            f"this GPU has {cc[0]}.{cc[1]}"
        )
    shapes = {shape.name(memory_mib): shape for shape in MIG_SHAPES}
    instances: list[MigInstance] = []
    used_memory: dict[int, int] = {}
    for i, entry in enumerate(entries):
        at = f"{where}[{i}]"
        entry = _mapping(at, entry, MIG_INSTANCE_KEYS)
        for key in sorted(MIG_INSTANCE_KEYS):
            if key not in entry:
                raise ProfileError(f"{at}: missing required key {key!r}")
        shape = shapes.get(str(entry["profile"]))
        if shape is None:
            raise _err(f"{at}.profile", entry["profile"], f"one of {', '.join(shapes)}")
        start = _int(f"{at}.placement", entry["placement"])
        if start not in shape.starts:
            raise _err(
                f"{at}.placement",
                entry["placement"],
                f"a start slot of {entry['profile']}: {', '.join(map(str, shape.starts))}",
            )
        uuid = str(entry["uuid"])
        if not _MIG_UUID_RE.match(uuid):
            raise _err(
                f"{at}.uuid", entry["uuid"], "MIG-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex)"
            )
        for slot in sorted(shape.slots(start)):
            if slot in used_memory:
                raise ProfileError(
                    f"{at}: placement {start} of {entry['profile']} overlaps "
                    f"mig[{used_memory[slot]}]"
                )
            used_memory[slot] = i
        same = sum(1 for inst in instances if inst.shape == shape)
        if same >= shape.instances:
            raise ProfileError(
                f"{at}: a GPU holds at most {shape.instances} {entry['profile']} instance(s); "
                f"this is number {same + 1}"
            )
        instances.append(MigInstance(str(entry["profile"]), start, uuid, shape))
    return enabled, tuple(instances)


def _check_faults(where: str, lists: list[tuple[str, Any]]) -> None:
    """One ProfileError naming every fault of ``lists`` ((where, the faults given)) that is
    not in FAULTS, each renamed one with its new name."""
    bad = []
    for at, faults in lists:
        for fault in faults if isinstance(faults, list) else []:
            if not isinstance(fault, str) or fault not in FAULTS:
                new = RENAMED_FAULTS.get(fault) if isinstance(fault, str) else None
                bad.append(f"{at} {fault!r}" + (f" (renamed {new})" if new else ""))
    if bad:
        raise ProfileError(f"{where}: unknown faults: {', '.join(bad)}; accepted: one of "
                           f"{', '.join(sorted(FAULTS))}")  # fmt: skip


def parse_profile(data: Any, source: str = "<memory>") -> Profile:
    """Validate a loaded YAML document and return a Profile, or raise ProfileError."""
    where = source
    data = _mapping(where, data, TOP_KEYS)
    if "name" not in data:
        raise ProfileError(f"{where}: missing required key 'name'")
    name = str(data["name"])
    if not _NAME_RE.match(name):
        raise _err(f"{where}: name", data["name"], "lower-case letters, digits, '.', '_' or '-'")
    driver = _parse_driver(f"{where}: driver", data.get("driver"))
    defaults = _mapping(f"{where}: defaults", data.get("defaults") or {}, DEFAULTABLE)
    gpus_raw = data.get("gpus") or []
    if not isinstance(gpus_raw, list):
        raise _err(f"{where}: gpus", gpus_raw, "a list of GPUs")
    if gpus_raw and driver is None:
        raise ProfileError(f"{where}: GPUs are listed but 'driver' is missing; GPUs need a driver")
    # every GPU's faults at once: a list of names is what an old profile gets wrong most
    _check_faults(where, [(f"gpus[{i}].faults", g.get("faults")) for i, g in
                          enumerate(gpus_raw) if isinstance(g, dict)])  # fmt: skip
    gpus: list[Gpu] = []
    for i, entry in enumerate(gpus_raw):
        entry = _mapping(f"{where}: gpus[{i}]", entry, GPU_KEYS)
        gpus.append(_parse_gpu(f"{where}: gpus[{i}]", {**defaults, **entry}, i))
    for attr, label in (("minor", "minor"), ("uuid", "uuid"), ("bus_id", "bus_id")):
        seen: dict[Any, int] = {}
        for i, gpu in enumerate(gpus):
            key = getattr(gpu, attr)
            key = key.lower() if isinstance(key, str) else key
            if key in seen:
                raise ProfileError(
                    f"{where}: gpus[{i}].{label} {getattr(gpu, attr)!s} duplicates gpus[{seen[key]}]"
                )
            seen[key] = i
    _check_layout(where, gpus)
    owners: dict[str, str] = {g.uuid.lower(): f"gpus[{i}]" for i, g in enumerate(gpus)}
    for i, gpu in enumerate(gpus):
        for j, inst in enumerate(gpu.mig_instances):
            key = inst.uuid.lower()
            if key in owners:
                raise ProfileError(
                    f"{where}: gpus[{i}].mig[{j}].uuid {inst.uuid} duplicates {owners[key]}"
                )
            owners[key] = f"gpus[{i}].mig[{j}]"
    return Profile(
        name=name,
        description=str(data.get("description", "")),
        driver=driver,
        gpus=tuple(gpus),
        source=source,
    )


def builtin_names() -> list[str]:
    folder = resources.files("gpunode") / "data" / "profiles"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".yaml"))


def load_profile(ref: str | Path) -> Profile:
    """Load a profile from a file path or by the name of a built-in profile."""
    path = Path(ref)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ProfileError(f"profile file {str(ref)!r} does not exist")
        text = path.read_text(encoding="utf-8")
        source = path.name
    else:
        name = str(ref)
        if name not in builtin_names():
            raise ProfileError(
                f"unknown profile {name!r}; built-in profiles: {', '.join(builtin_names())} "
                "(or give a path to a .yaml file)"
            )
        text = (resources.files("gpunode") / "data" / "profiles" / f"{name}.yaml").read_text(
            encoding="utf-8"
        )
        source = f"{name}.yaml"
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise ProfileError(
            f"{source}: not valid YAML{at}: {getattr(exc, 'problem', exc)}"
        ) from None
    return parse_profile(data, source)


def mock_payload(profile: Profile) -> str:
    """The text the mock NVML reads from its embedded blob (see sim/mocknvml/profile.c)."""
    if profile.driver is None:
        return ""
    d = profile.driver
    lines = [
        f"driver_version\t{d.version}",
        f"nvml_version\t{d.nvml_version}",
        f"cuda_driver_version\t{d.cuda_version_int}",
    ]
    mib = 1024 * 1024
    for g in profile.gpus:
        f = g.faults
        ecc_unc = 2 if "ecc_uncorrectable" in f else 0
        fields = {
            "minor": g.minor,
            "uuid": g.uuid,
            "name": g.model,
            "bus_id": g.bus_id.nvml,
            "pci_device_id": f"0x{(g.pci_device_id << 16) | 0x10DE:08X}",
            "pci_subsystem_id": f"0x{g.pci_subsystem_id:08X}",
            "memory_total": g.memory_mib * mib,
            "memory_reserved": g.memory_reserved_mib * mib,
            "memory_used": g.memory_used_mib * mib,
            "bar1_total": g.bar1 * mib,
            "cc_major": g.compute_capability[0],
            "cc_minor": g.compute_capability[1],
            "architecture": g.architecture,
            "brand": BRANDS[g.brand],
            "persistence": 0 if "persistence_off" in f else 1,
            "ecc_enabled": int(g.ecc),
            "mig": int(g.mig),
            "mig_capable": int(g.mig_capable),
            "irq": g.irq,
            "compute_mode": 0,
            "temperature": g.temperature_c,
            "power_usage": g.power_usage_w * 1000,
            "power_limit": g.power_limit_w * 1000,
            "lost": int("fallen_off_bus" in f),
            "ecc_uncorrected_volatile": ecc_unc,
            "ecc_uncorrected_aggregate": ecc_unc,
            "ecc_corrected_volatile": 0,
            "ecc_corrected_aggregate": 0,
            "retired_sbe": 0,
            "retired_dbe": 2 if "retired_pages_pending" in f or ecc_unc else 0,
            "retired_pending": int("retired_pages_pending" in f),
            "remap_corrected": 0,
            "remap_uncorrected": 1 if "row_remap_failure" in f else 0,
            "remap_pending": 0,
            "remap_failure": int("row_remap_failure" in f),
            "serial": g.serial,
            "vbios": g.vbios,
            **_link_fields(g),
            **_layout_fields(g),
        }
        lines.append(_record("gpu", fields))
        if g.mig_capable:
            lines += [_record("gip", _gip_fields(g, shape)) for shape in MIG_SHAPES]
        for inst in g.mig_instances:
            mig = {
                "parent": g.uuid,
                "uuid": inst.uuid,
                "gi": inst.gi_id,
                "ci": 0,
                "profile_index": inst.shape.index,
                "placement_start": inst.placement,
            }
            lines.append(_record("mig", mig))
    if any(g.mig_capable for g in profile.gpus):  # the rest of the MIG geometry
        space = {"compute_slices": MIG_COMPUTE_SLICES, "memory_slots": MIG_MEMORY_SLICES}
        lines.append(_record("migspace", space))
        lines += [_record("cip", vars(c)) for c in CI_SHAPES]
    return "\n".join(lines) + "\n"


def _link_fields(g: Gpu) -> dict[str, Any]:
    """PCIe, clock event reasons, NVLink, fabric and InfoROM as NVML shows them: a healthy
    GPU idle (clock event reason 0x1) on a link trained at its maximum, every NVLink up, the
    InfoROM valid; each fault changes its value. The fabric (NVSwitch GPUs) is untrained
    until the node's fabric manager trains it (gpunode.sim.fabric), as on hardware."""
    f = g.faults
    reasons = (0x8 if "clocks_hw_slowdown" in f else 0) | (0x20 if "clocks_sw_thermal" in f else 0)
    return {
        "pcie_gen_max": g.pcie_gen,
        "pcie_gen": g.pcie_gen,
        "pcie_width_max": g.pcie_width,
        "pcie_width": g.pcie_trained_width,
        "pcie_replays": PCIE_REPLAYS if "pcie_replays" in f else 0,
        "clocks_reasons": reasons or 0x1,
        "nvlinks": g.nvlinks,
        "nvlink_down": int("nvlink_down" in f),  # a bit per link: link 0
        "nvlink_version": NVLINK_GENERATIONS.get(g.compute_capability, (0, 0))[0],
        "nvlink_speed": NVLINK_GENERATIONS.get(g.compute_capability, (0, 0))[1],
        # on an NVSwitch fabric NVML reports (Hopper+): its state is the node's, trained by
        # the fabric manager (gpunode.sim.fabric); the status training ends with is the GPU's
        "fabric": int(g.fabric),
        "fabric_status": 999 if "fabric_manager_failed" in f else 0,  # NVML_ERROR_UNKNOWN
        "inforom_corrupt": int("inforom_corrupt" in f),
    }


def _layout_fields(g: Gpu) -> dict[str, Any]:
    """The GPU's place in the PCI tree as one path (NUMA node/host bridge/switch/...; the
    mock compares two GPUs' paths as the driver walks the tree) and the far end of each
    NVLink (NVML's bus id form), with the device id NVML reports for an NVSwitch end."""
    switch = NVSWITCH_DEVICE_IDS.get(g.compute_capability, 0)
    return {
        "numa_node": g.numa_node,
        "pci_path": "/".join(map(str, (g.numa_node, g.pci_host_bridge, *g.pci_switches))),
        "nvlink_peers": ",".join(peer.nvml for peer in g.nvlink_peers),
        "nvswitch_device_id": f"0x{(switch << 16) | 0x10DE:08X}" if switch else "0",
    }


def nvswitches(profile: Profile) -> list[tuple[BusId, int, int]]:
    """The NVSwitches the profile's NVLinks reach: (address, device id, NUMA node of the
    first GPU linked to it), by address. NVIDIA's tools find them in PCI sysfs."""
    gpus = {g.bus_id for g in profile.gpus}
    found: dict[BusId, tuple[int, int]] = {}
    for g in profile.gpus:
        for peer in g.nvlink_peers:
            if peer not in gpus and peer not in found:
                found[peer] = (NVSWITCH_DEVICE_IDS[g.compute_capability], g.numa_node)
    return [(bus, *found[bus]) for bus in sorted(found, key=lambda b: b.nvml)]


def _record(kind: str, fields: dict[str, Any]) -> str:
    return kind + "\t" + "\t".join(f"{k}={v}" for k, v in fields.items())


def _gip_fields(g: Gpu, shape: MigShape) -> dict[str, Any]:
    return {
        "parent": g.uuid,
        "index": shape.index,
        "id": shape.id,
        "name": shape.name(g.memory_mib),
        "slices": shape.slices,
        "instances": shape.instances,
        "placement_size": shape.size,
        "starts": ":".join(map(str, shape.starts)),
        "first_gi": shape.first_gi,
        "memory_mib": shape.memory_mib(g.memory_mib),
        "sm": shape.sm,
        "ce": shape.ce,
        "dec": shape.dec,
        "enc": shape.enc,
        "jpeg": shape.jpeg,
        "ofa": shape.ofa,
    }
