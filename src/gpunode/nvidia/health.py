"""GPU health, decided once: every per-GPU check's verdict on one GPU's inventory record.

`gpunode inventory` shows a GPU's health flags and `gpunode validate` its ``gpu.*`` checks;
both come from ``verdicts`` here, so a counter means the same thing wherever it is shown:

* ``verdicts(gpu)``: (check id, status, detail) for every check in CHECKS, in that order:
  a lost GPU fails ``gpu.lost`` and skips the others; one whose device node is gone
  (``gpu.missing``: the kernel lists it, NVML cannot show it) fails ``gpu.device_node``;
* ``flags(gpu)``: the inventory's health flags, the FLAGS names of the verdicts that fail
  or warn.

A new check is one entry in CHECKS (id, title, its flag per status) and one branch in
``_judge``; nothing else decides what a GPU's counters mean.
"""

from __future__ import annotations

from .xid import classify

# ``gpu`` below is an inventory record (gpunode.nvidia.inventory.GpuInfo); not imported,
# not even for typing: the inventory imports this module.

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
}

Verdict = tuple[str, str, str]  # (check id, status, detail)


def _rest(given: list[Verdict], why: str) -> list[Verdict]:
    """``given``, then every other check skipped for ``why``, in CHECKS order."""
    done = {c for c, _, _ in given}
    return given + [(c, SKIP, why) for c in CHECKS if c not in done]


def verdicts(gpu) -> list[Verdict]:
    """The verdict of every check for one GPU (see the module docstring)."""
    if gpu.missing is not None:  # the kernel lists it, /dev/nvidia<minor> is gone
        why = f"NVML cannot show it: /dev/nvidia{gpu.minor} is missing"
        return _rest([("gpu.lost", SKIP, why), ("gpu.device_node", FAIL, gpu.missing)], why)
    if gpu.lost:
        why = "NVML: GPU is lost (fallen off the bus); cannot be read"
        lost = (
            "NVML reports GPU_IS_LOST: the GPU fell off the bus; drain the node and reset "
            "or reseat the GPU"
        )
        return _rest([("gpu.lost", FAIL, lost), ("gpu.device_node", SKIP, why)], why)
    out = [
        ("gpu.lost", PASS, "NVML reads the GPU"),
        ("gpu.device_node", PASS, f"/dev/nvidia{gpu.minor} is a 195:{gpu.minor} device"),
    ]
    return out + [(c, *_judge(c, gpu)) for c in CHECKS if c not in ("gpu.lost", "gpu.device_node")]


def _judge(check: str, gpu) -> tuple[str, str]:
    """(status, detail) of one counter check of a GPU NVML reads."""
    if check == "gpu.ecc_uncorrectable":
        if not gpu.ecc_mode:
            return SKIP, "ECC is disabled" if gpu.ecc_mode is False else "ECC is not supported"
        if "uncorrected_volatile" not in gpu.ecc_errors:
            return SKIP, "NVML gives no uncorrected ECC counter"
        n = gpu.ecc_errors["uncorrected_volatile"]
        agg = gpu.ecc_errors.get("uncorrected_aggregate")
        text = f"{n} uncorrected (volatile)" + (f", {agg} aggregate" if agg is not None else "")
        return (FAIL if n else PASS), text
    if check == "gpu.retired_pages_pending":
        rp = gpu.retired_pages
        if not rp:
            return SKIP, "page retirement is not supported"
        text = f"{rp['single_bit']} single-bit, {rp['double_bit']} double-bit retired"
        if rp["pending"]:
            return FAIL, f"page retirement pending: reset the GPU ({text})"
        return PASS, f"none pending ({text})"
    if check == "gpu.row_remap_failure":
        rr = gpu.remapped_rows
        if not rr:
            return SKIP, "row remapping is not supported (pre-Ampere)"
        text = f"{rr['correctable']} correctable, {rr['uncorrectable']} uncorrectable remapped"
        if rr["failure"]:
            return FAIL, f"row remapping failed ({text})"
        if rr["pending"]:
            return WARN, f"remap pending: reset the GPU ({text})"
        return PASS, f"no failure ({text})"
    if check == "gpu.persistence":
        if gpu.persistence_mode is None:
            return SKIP, "persistence mode is not supported"
        if gpu.persistence_mode:
            return PASS, "enabled"
        return WARN, "disabled: enable nvidia-persistenced"
    if check == "gpu.xid":
        return _judge_xid(gpu.xid_errors, gpu.xid_sources)
    raise KeyError(check)  # a check in CHECKS without its branch: a bug, caught by tests


def _judge_xid(errors: list[dict] | None, sources: list[str] = ()) -> tuple[str, str]:
    """Xid errors (gpunode.nvidia.xid's classes): any but an application error fails; the
    detail counts each code and says what the worst one asks for."""
    if errors is None:
        return SKIP, "the kernel log could not be read (see the inventory's kernel_log_error)"
    if not errors:
        return PASS, f"no Xid error in {' or '.join(sources) or 'the kernel log'}"
    counts: dict[int, int] = {}
    for e in errors:
        counts[e["xid"]] = counts.get(e["xid"], 0) + 1
    worst = next((e for e in errors if e["verdict"] == FAIL), errors[-1])
    codes = ", ".join(f"{code} x{n}" if n > 1 else str(code) for code, n in counts.items())
    what = classify(worst["xid"])[2]
    text = f"Xid {codes}; last {worst['xid']} ({worst['kind']}): {worst['message'] or '-'}"
    return (FAIL if worst["verdict"] == FAIL else WARN), f"{text} — {what}"


def flags(gpu) -> list[str]:
    """The inventory's health flags of ``gpu`` (empty: healthy)."""
    return [FLAGS[c, s] for c, s, _ in verdicts(gpu) if (c, s) in FLAGS]
