"""GPU health, decided once: every per-GPU check's verdict on one GPU's record
(gpunode.nvidia.gpu.Gpu).

`gpunode inventory` shows a GPU's health flags and `gpunode validate` its ``gpu.*`` checks;
both come from ``verdicts`` here, so a counter means the same thing wherever it is shown:

* ``verdicts(gpu)``: (check id, status, detail) for every check in CHECKS, in that order,
  each from its judge in JUDGES: a lost GPU fails ``gpu.lost``, one whose device node is
  gone (``gpu.missing``: the kernel lists it, NVML cannot show it) fails
  ``gpu.device_node``, and either skips every check that reads what NVML says (READS_NVML);
* ``flags(gpu)``: the inventory's health flags, the FLAGS names of the verdicts that fail
  or warn;
* on an NVSwitch node (gpunode.nvidia.fabric), ``fabric_node`` is validate's
  node.fabric_manager and ``fabric_gpu`` a GPU's gpu.fabric_manager row with the node's
  fabric manager problems (``fabric_problems``) in it: the fabric manager is the node's,
  and no GPU of the node is ready without it.

A new check is one entry in CHECKS (id, title), its flag per status in FLAGS and its judge
in JUDGES (a function of the GPU's record, gpunode.nvidia.gpu.Gpu); nothing else decides
what a GPU's counters mean.
"""

from __future__ import annotations

from .fabric import GENERATIONS, UNIT, FabricNode
from .xid import classify

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .gpu import Gpu, XidError

PASS, WARN, FAIL, SKIP = "pass", "warn", "fail", "skip"

# id -> title, in the order the checks are listed (validate, the report's columns)
CHECKS = {
    "gpu.lost": "GPU reachable (not fallen off the bus)",
    "gpu.device_node": "Device node present",
    "gpu.ecc_uncorrectable": "Uncorrectable ECC errors",
    "gpu.retired_pages_pending": "Retired pages pending",
    "gpu.row_remap_failure": "Row remapping",
    "gpu.persistence": "Persistence mode",
    "gpu.xid": "Xid errors since boot (DCGM_FR_XID_ERROR)",
    # links and state from NVML, each naming its DCGM counterpart (dcgmi diag, health watches)
    "gpu.pcie_link": "PCIe link width and generation (DCGM_FR_PCIE_WIDTH/GENERATION)",
    "gpu.pcie_replay": "PCIe replays (DCGM_FR_PCI_REPLAY_RATE)",
    "gpu.clocks_event": "Clock event reasons (DCGM_FR_CLOCKS_EVENT_VIOLATION)",
    "gpu.nvlink": "NVLink links up (DCGM_FR_NVLINK_DOWN)",
    "gpu.fabric_manager": "Fabric manager training (DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR)",
    "gpu.inforom": "InfoROM valid (DCGM_FR_CORRUPT_INFOROM)",
}
# (check id, status) -> the inventory's health flag for it
FLAGS = {
    ("gpu.lost", FAIL): "fallen_off_bus",
    ("gpu.ecc_uncorrectable", FAIL): "ecc_uncorrectable",
    ("gpu.retired_pages_pending", FAIL): "retired_pages_pending",
    ("gpu.row_remap_failure", FAIL): "row_remap_failure",
    ("gpu.row_remap_failure", WARN): "row_remap_pending",
    ("gpu.persistence", WARN): "persistence_off",
    ("gpu.xid", FAIL): "xid_error",
    ("gpu.xid", WARN): "xid_application_error",
    ("gpu.pcie_link", FAIL): "pcie_link_degraded",
    ("gpu.pcie_link", WARN): "pcie_link_degraded",
    ("gpu.pcie_replay", WARN): "pcie_replays",
    ("gpu.clocks_event", FAIL): "clocks_hw_slowdown",
    ("gpu.clocks_event", WARN): "clocks_sw_thermal",
    ("gpu.nvlink", FAIL): "nvlink_down",
    ("gpu.fabric_manager", FAIL): "fabric_manager_failed",
    ("gpu.fabric_manager", WARN): "fabric_manager_training",
    ("gpu.inforom", FAIL): "inforom_corrupt",
}

# PCIe replays: DCGM's health watch warns above 8 replays a minute (DCGM_LIMIT_MAX_PCIREPLAY_RATE,
# "the maximum recommended by RM"). validate sees one reading of a counter that counts since
# the driver loaded, with no time base to make a rate of; a healthy link replays rarely if
# ever, so more replays in total than DCGM tolerates in a single minute is a warning: look at
# the rate (DCGM's PCIe watch, dcgm-exporter's DCGM_FI_DEV_PCIE_REPLAY_COUNTER).
PCIE_REPLAY_WARN = 8

# nvmlClocksEventReason* bits (the deprecated ...ThrottleReason* have the same values, plus
# 0x200 and 0x400): which mean trouble. HW slowdown, HW thermal slowdown and HW power brake:
# the hardware protects itself (overheating, a power supply or cable fault) -> fail; SW
# thermal slowdown: the driver holds clocks down for temperature -> warn; the rest are the
# GPU doing what it was told or has to (idle, application clocks, power cap, sync boost,
# display) and are normal.
CLOCK_REASONS = {
    0x1: "GPU idle",
    0x2: "application clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake slowdown",
    0x100: "display clock setting",
    0x200: "board limit",
    0x400: "reliability",
}
CLOCKS_FAIL = 0x8 | 0x40 | 0x80
CLOCKS_WARN = 0x20
CLOCKS_IDLE = 0x1

# nvmlGpuFabricState_t
FABRIC_NOT_SUPPORTED, FABRIC_NOT_STARTED, FABRIC_IN_PROGRESS, FABRIC_COMPLETED = 0, 1, 2, 3

Verdict = tuple[str, str, str]  # (check id, status, detail)


def _unreadable(gpu: Gpu) -> str | None:
    """Why NVML cannot read the GPU (then every check in READS_NVML skips), or None."""
    if gpu.missing is not None:  # the kernel lists it, /dev/nvidia<minor> is gone
        return f"NVML cannot show it: /dev/nvidia{gpu.minor} is missing"
    if gpu.lost:
        return "NVML: GPU is lost (fallen off the bus); cannot be read"
    return None


def verdicts(gpu: Gpu) -> list[Verdict]:
    """The verdict of every check for one GPU (see the module docstring)."""
    why = _unreadable(gpu)
    return [(c, SKIP, why) if why and c in READS_NVML else (c, *JUDGES[c](gpu)) for c in CHECKS]


def _lost(gpu: Gpu) -> tuple[str, str]:
    if gpu.missing is not None:
        return SKIP, _unreadable(gpu) or ""
    if gpu.lost:
        return FAIL, (
            "NVML reports GPU_IS_LOST: the GPU fell off the bus; drain the node and reset "
            "or reseat the GPU"
        )
    return PASS, "NVML reads the GPU"


def _device_node(gpu: Gpu) -> tuple[str, str]:
    if gpu.missing is not None:
        return FAIL, gpu.missing
    if gpu.lost:
        return SKIP, _unreadable(gpu) or ""
    return PASS, f"/dev/nvidia{gpu.minor} is a 195:{gpu.minor} device"


def _ecc_uncorrectable(gpu: Gpu) -> tuple[str, str]:
    if not gpu.ecc_mode:
        return SKIP, "ECC is disabled" if gpu.ecc_mode is False else "ECC is not supported"
    n = gpu.ecc_errors.uncorrected_volatile
    if n is None:
        return SKIP, "NVML gives no uncorrected ECC counter"
    agg = gpu.ecc_errors.uncorrected_aggregate
    text = f"{n} uncorrected (volatile)" + (f", {agg} aggregate" if agg is not None else "")
    return (FAIL if n else PASS), text


def _retired_pages(gpu: Gpu) -> tuple[str, str]:
    rp = gpu.retired_pages
    if rp is None:
        return SKIP, "page retirement is not supported"
    text = f"{rp.single_bit} single-bit, {rp.double_bit} double-bit retired"
    if rp.pending:
        return FAIL, f"page retirement pending: reset the GPU ({text})"
    return PASS, f"none pending ({text})"


def _row_remap(gpu: Gpu) -> tuple[str, str]:
    rr = gpu.remapped_rows
    if rr is None:
        return SKIP, "row remapping is not supported (pre-Ampere)"
    text = f"{rr.correctable} correctable, {rr.uncorrectable} uncorrectable remapped"
    if rr.failure:
        return FAIL, f"row remapping failed ({text})"
    if rr.pending:
        return WARN, f"remap pending: reset the GPU ({text})"
    return PASS, f"no failure ({text})"


def _persistence(gpu: Gpu) -> tuple[str, str]:
    if gpu.persistence_mode is None:
        return SKIP, "persistence mode is not supported"
    if gpu.persistence_mode:
        return PASS, "enabled"
    return WARN, "disabled: enable nvidia-persistenced"


def _judge_xid(errors: list[XidError] | None, sources: list[str] = ()) -> tuple[str, str]:
    """Xid errors (gpunode.nvidia.xid's classes): any but an application error fails; the
    detail counts each code and says what the worst one asks for."""
    if errors is None:
        return SKIP, "the kernel log could not be read (see the inventory's kernel_log_error)"
    if not errors:
        return PASS, f"no Xid error in {' or '.join(sources) or 'the kernel log'}"
    counts: dict[int, int] = {}
    for e in errors:
        counts[e.xid] = counts.get(e.xid, 0) + 1
    worst = next((e for e in errors if e.verdict == FAIL), errors[-1])
    codes = ", ".join(f"{code} x{n}" if n > 1 else str(code) for code, n in counts.items())
    what = classify(worst.xid)[2]
    text = f"Xid {codes}; last {worst.xid} ({worst.kind}): {worst.message or '-'}"
    return (FAIL if worst.verdict == FAIL else WARN), f"{text} — {what}"


# Product names of SXM modules that do not say "SXM" (the HGX H100/H200/B200 boards' GPUs);
# their PCIe cards are named "... PCIe" or "... NVL".
SXM_NAMES = ("H100 80GB HBM3", "H100 SXM", "H800", "H200", "H20", "B100", "B200", "GB200")


def board_form(gpu: Gpu) -> str:
    """ "sxm" for a GPU on an SXM module (an HGX/DGX baseboard), "pcie" for a card (or a board
    this cannot tell), from what the driver reports: "SXM" in the product name (A100-SXM4,
    V100-SXM2), a product sold only as an SXM module (SXM_NAMES, not "PCIe"/"NVL"), or an
    NVSwitch fabric NVML reports for the GPU (only baseboards have one)."""
    name = (gpu.name or "").upper()
    if "SXM" in name:
        return "sxm"
    if "PCIE" not in name and " NVL" not in name and any(n.upper() in name for n in SXM_NAMES):
        return "sxm"
    if gpu.fabric is not None and gpu.fabric.state != FABRIC_NOT_SUPPORTED:
        return "sxm"
    return "pcie"


def _pcie_link(gpu: Gpu) -> tuple[str, str]:
    """Width below the maximum is the classic fault (a badly seated GPU or riser, a damaged
    slot). On an SXM module (board_form) it fails, as DCGM fails a width drop on SXM/HGX
    boards: the module sits in a socket of the baseboard, and a narrower link there is a
    hardware fault, never a slot choice. On a PCIe card it warns, and the detail says that
    the node still passes (a warning never fails validation). Generation below the maximum
    warns only when the GPU is not idle: an idle GPU retrains its link to a lower generation
    to save power (and back to full speed under load), so Gen1 on an idle GPU is normal;
    whether it is idle is NVML's "GPU idle" clock event reason. The maxima are NVML's for this GPU in this slot
    (nvmlDeviceGetMaxPcieLinkGeneration/Width); a slot slower than the GPU is a property of
    the server, not a fault, and is only named."""
    pl = gpu.pcie_link
    width, max_width, gen, max_gen = pl.width, pl.max_width, pl.gen, pl.max_gen
    have_width = width is not None and max_width is not None
    have_gen = gen is not None and max_gen is not None
    if not (have_width or have_gen):
        return SKIP, "NVML gives no PCIe link information"
    now = " ".join(([f"Gen{gen}"] if have_gen else []) + ([f"x{width}"] if have_width else []))
    status, notes = PASS, []
    if have_width and width < max_width:
        if board_form(gpu) == "sxm":
            status = FAIL
            notes.append(
                f"link width x{width} of x{max_width} on an SXM module: a "
                "hardware fault on the baseboard; drain the node, reseat the module and have "
                "the board checked (DCGM_FR_PCIE_WIDTH)"
            )
        else:
            status = WARN
            notes.append(
                f"link width x{width} of x{max_width}: reseat the GPU and its "
                "riser or try another slot (DCGM_FR_PCIE_WIDTH)"
            )
    if have_gen and gen < max_gen:
        reasons = gpu.clocks_event_reasons
        if reasons is not None and reasons & CLOCKS_IDLE:
            notes.append(f"Gen{gen} of Gen{max_gen} while idle (power saving)")
        else:
            status = max(status, WARN, key=_SEVERITY.index)
            why = "under load" if reasons is not None else "(NVML cannot tell if it is idle)"
            notes.append(
                f"Gen{gen} of Gen{max_gen} {why}: check the slot's PCIe speed in "
                "the BIOS, the riser and the seating (DCGM_FR_PCIE_GENERATION)"
            )
    gpu_max = pl.gpu_max_gen
    if status == PASS and gpu_max is not None and gpu_max > (99 if max_gen is None else max_gen):
        notes.append(f"the slot limits the GPU's Gen{gpu_max} to Gen{max_gen}")
    if status == WARN:
        notes.append("a warning: the node still passes validation")
    return status, "; ".join([now, *notes]) if notes else f"{now}, the maximum"


_SEVERITY = (PASS, WARN, FAIL)


def _pcie_replay(gpu: Gpu) -> tuple[str, str]:
    n = gpu.pcie_replays
    if n is None:
        return SKIP, "NVML gives no PCIe replay counter"
    text = f"{n} PCIe replays since the driver loaded"
    if n > PCIE_REPLAY_WARN:
        return WARN, (
            f"{text} (more than {PCIE_REPLAY_WARN}): a marginal link; watch the rate (DCGM "
            "warns above 8 a minute) and reseat or replace the riser or GPU if it grows "
            "(DCGM_FR_PCI_REPLAY_RATE)"
        )
    return PASS, text


def clock_reason_names(reasons: int) -> list[str]:
    """The names of the bits set in ``reasons`` (unknown bits in hex)."""
    names = [name for bit, name in CLOCK_REASONS.items() if reasons & bit]
    rest = reasons & ~sum(CLOCK_REASONS)
    return names + ([f"0x{rest:x}"] if rest else [])


def _clocks_event(gpu: Gpu) -> tuple[str, str]:
    reasons = gpu.clocks_event_reasons
    if reasons is None:
        return SKIP, "NVML gives no clock event reasons"
    if reasons & CLOCKS_FAIL:
        bad = ", ".join(clock_reason_names(reasons & CLOCKS_FAIL))
        return FAIL, (
            f"clocks held down by {bad}: the hardware protects itself; check cooling, the "
            "power supply and the GPU's power cables, then reset the GPU "
            "(DCGM_FR_CLOCKS_EVENT_VIOLATION)"
        )
    if reasons & CLOCKS_WARN:
        return WARN, (
            "clocks held down by SW thermal slowdown: the GPU runs hot; check airflow, fans "
            "and the inlet temperature (DCGM_FR_CLOCKS_EVENT_THERMAL)"
        )
    return PASS, "no slowdown (" + (", ".join(clock_reason_names(reasons)) or "none") + ")"


def _nvlink(gpu: Gpu) -> tuple[str, str]:
    links = gpu.nvlinks
    if not links:
        return SKIP, "the GPU has no NVLink"
    down = sorted(int(link) for link, up in links.items() if not up)
    if down:
        names = ", ".join(map(str, down))
        return FAIL, (
            f"NVLink {names} down ({len(down)} of {len(links)} links): reset the GPU; if a "
            "link stays down, check the NVLink bridge or NVSwitch baseboard and the fabric "
            "manager (DCGM_FR_NVLINK_DOWN)"
        )
    return PASS, f"all {len(links)} links up"


def _fabric_manager(gpu: Gpu) -> tuple[str, str]:
    fab = gpu.fabric
    if fab is None or fab.state == FABRIC_NOT_SUPPORTED:
        return SKIP, "NVML reports no NVSwitch fabric for this GPU"
    state = fab.state
    if state == FABRIC_NOT_STARTED:
        return FAIL, (
            "fabric manager has not trained this GPU: start nvidia-fabricmanager (CUDA fails "
            "with 'system not yet initialized' until it has) "
            "(DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR)"
        )
    if state == FABRIC_IN_PROGRESS:
        return WARN, "fabric training in progress: check again in a minute"
    if state == FABRIC_COMPLETED:
        if not fab.status:
            return PASS, "fabric training completed"
        text = fab.status_text or f"NVML error {fab.status}"
        return FAIL, (
            f"fabric training failed ({text}): read nvidia-fabricmanager's log, restart it "
            "and reset the GPUs (DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR)"
        )
    return WARN, f"unknown fabric state {state}"


FABRIC_STATES = {FABRIC_NOT_STARTED: "not started", FABRIC_IN_PROGRESS: "in progress",
                 FABRIC_COMPLETED: "completed"}  # fmt: skip


def fabric_problems(node: FabricNode, driver_version: str | None) -> list[str]:
    """Why the node's fabric manager cannot have the fabric ready, whatever a GPU says:
    the package missing or not at the loaded driver's version, the unit not active, the
    driver short of switches (gpunode.nvidia.fabric). Empty: none found."""
    out = []
    if node.packages_known and node.package is None:
        out.append(
            "no fabric manager package is installed: install nvidia-fabricmanager at the "
            f"driver's version {driver_version or ''}".rstrip()
        )
    elif node.package and driver_version and node.package[1] != driver_version:
        name, version = node.package
        out.append(
            f"{name} {version} does not match the loaded driver {driver_version}: the "
            "fabric manager must be exactly the driver's version (install both at one "
            "version and hold them)"
        )
    if node.service is not None and node.service != "active":
        why = f": {node.last_words}" if node.last_words else ""
        out.append(f"{UNIT} is {node.service}{why}")
    if node.driver is not None and len(node.driver) < len(node.pci):
        out.append(
            f"the driver registered {len(node.driver)} of the {len(node.pci)} NVSwitches on "
            "the PCI bus: reset or reboot, then check the baseboard"
        )
    return out


def fabric_node(node: FabricNode, driver_version: str | None, gpus: list[Gpu]) -> Verdict:
    """node.fabric_manager: an NVSwitch node's fabric manager and fabric (see
    gpunode.nvidia.fabric); skipped on a node without NVSwitches."""
    cid = "node.fabric_manager"
    if not node.nvswitch:
        return (
            cid,
            SKIP,
            (
                "no NVSwitch on this node (PCI class 0x0680 of NVIDIA, "
                "/proc/driver/nvidia-nvswitch/devices): no fabric manager needed"
            ),
        )
    problems = fabric_problems(node, driver_version)
    hopper = [g for g in gpus if g.fabric is not None]
    untrained = [g for g in hopper if g.fabric.state != FABRIC_COMPLETED or g.fabric.status]
    if untrained:
        states = sorted({FABRIC_STATES.get(g.fabric.state, str(g.fabric.state))
                         if g.fabric.state != FABRIC_COMPLETED else
                         f"completed with {g.fabric.status_text or g.fabric.status}"
                         for g in untrained})  # fmt: skip
        problems.append(
            f"{len(untrained)} of {len(hopper)} GPUs' fabric not trained ({', '.join(states)})"
        )
    board = node.board()
    if problems:
        return (
            cid,
            FAIL,
            f"{board}: "
            + "; ".join(problems)
            + (
                " (CUDA fails with 'system not yet initialized' until the fabric manager of the "
                "driver's version has trained the fabric) (DCGM_FR_FABRIC_MANAGER_TRAINING_ERROR)"
            ),
        )
    unknown = []
    if node.service is None:
        unknown.append(f"cannot tell whether {UNIT} runs (no systemctl)")
    if not node.packages_known:
        unknown.append("no package manager to ask for the fabric manager's version")
    gen = node.generation
    if gen and len(node.pci) != GENERATIONS[gen][1]:
        unknown.append(
            f"{len(node.pci)} NVSwitches where an HGX {GENERATIONS[gen][0]} board carries "
            f"{GENERATIONS[gen][1]}"
        )
    if unknown:
        return cid, WARN, f"{board}: " + "; ".join(unknown) + " (a warning: the node passes)"
    pkg = f"{node.package[0]} {node.package[1]}" if node.package else "fabric manager"
    ready = (
        f"fabric trained on all {len(hopper)} GPUs"
        if hopper
        else "its GPUs report no fabric state (A100 generation): the service is their readiness"
    )
    return cid, PASS, f"{board}; {UNIT} active, {pkg} at the driver's version; {ready}"


def fabric_gpu(gpu: Gpu, verdict: Verdict, node: FabricNode, problems: list[str]) -> Verdict:
    """A GPU's gpu.fabric_manager row on an NVSwitch node: the GPU's own verdict (its NVML
    fabric state, Hopper+), failed with the node's fabric manager problems when there are
    any; a GPU NVML reports no fabric for (A100) passes or fails by the fabric manager.
    Off an NVSwitch node, or for a GPU NVML cannot read, the verdict as it is."""
    cid, status, detail = verdict
    if not node.nvswitch or _unreadable(gpu):
        return verdict
    if problems:
        own = f"{detail}; " if status in (FAIL, WARN) else ""
        return cid, FAIL, f"{own}fabric manager: " + "; ".join(problems)
    if status == SKIP:
        return (
            cid,
            PASS,
            (
                "NVML reports no fabric state for this GPU (A100 generation): its readiness is "
                f"the fabric manager, and {UNIT} is active at the driver's version"
            ),
        )
    return verdict


def _inforom(gpu: Gpu) -> tuple[str, str]:
    if gpu.inforom_valid is None:
        return SKIP, "InfoROM validation is not supported"
    if gpu.inforom_valid:
        return PASS, "InfoROM checksums are valid"
    return FAIL, (
        "InfoROM is corrupted (NVML_ERROR_CORRUPTED_INFOROM): its ECC and page-retirement "
        "records cannot be trusted; drain the node and have the board's InfoROM reflashed or "
        "the GPU replaced (DCGM_FR_CORRUPT_INFOROM)"
    )


def flags(gpu: Gpu) -> list[str]:
    """The inventory's health flags of ``gpu`` (empty: healthy)."""
    return [FLAGS[c, s] for c, s, _ in verdicts(gpu) if (c, s) in FLAGS]


# Each check's judge: (status, detail) of one GPU's record, for every check in CHECKS
JUDGES: dict[str, Callable[[Gpu], tuple[str, str]]] = {
    "gpu.lost": _lost,
    "gpu.device_node": _device_node,
    "gpu.ecc_uncorrectable": _ecc_uncorrectable,
    "gpu.retired_pages_pending": _retired_pages,
    "gpu.row_remap_failure": _row_remap,
    "gpu.persistence": _persistence,
    "gpu.xid": lambda gpu: _judge_xid(gpu.xid_errors, gpu.xid_sources),
    "gpu.pcie_link": _pcie_link,
    "gpu.pcie_replay": _pcie_replay,
    "gpu.clocks_event": _clocks_event,
    "gpu.nvlink": _nvlink,
    "gpu.fabric_manager": _fabric_manager,
    "gpu.inforom": _inforom,
}
# The checks that read what NVML says of the GPU: skipped when NVML cannot read it (lost, or
# its device node missing), with the reason
READS_NVML = frozenset(CHECKS) - {"gpu.lost", "gpu.device_node"}
