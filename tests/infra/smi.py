"""nvidia-smi's views read as an operator reads them, and compared with what NVML says.

`expected_rows` and `compare` take NVML's view of the node in the shape of `gpunode
inventory --json` (on a real node the driver's NVML; on a simulated node the same mock the
profile feeds), so the comparison proves the same thing on both: that NVIDIA's own tool and
NVML agree on every GPU, its identity, its faults and its links. Used by
tests/infra/test_nvidia_smi.py (any inventory) and tests/integration/test_nvidia_smi.py
(each built-in profile on provisioned simulated nodes).

Every function returns a list of differences ("what: nvidia-smi says X, NVML Y"), empty
when the two agree, so a failure names all of them at once.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

# `nvidia-smi -L`: a GPU line, then its MIG devices indented below it
GPU_LINE = re.compile(r"^GPU (\d+): (.+) \(UUID: (GPU-[0-9a-fA-F-]+)\)$")
MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[0-9a-fA-F-]+)\)$")
# the default view's header
HEADER = re.compile(r"NVIDIA-SMI ([\d.]+)\s+Driver Version: ([\d.]+)\s+CUDA Version: ([\d.]+)")
QUERY = (
    "index,uuid,pci.bus_id,name,driver_version,memory.total,"
    "ecc.errors.uncorrected.volatile.total,pcie.link.width.current"
)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def listing(text: str) -> list[dict]:
    """`nvidia-smi -L`: [{index, name, uuid, migs: [(profile, device, uuid)]}]."""
    gpus: list[dict] = []
    for line in text.splitlines():
        if m := GPU_LINE.match(line):
            gpus.append({"index": int(m[1]), "name": m[2], "uuid": m[3], "migs": []})
        elif (m := MIG_LINE.match(line)) and gpus:
            gpus[-1]["migs"].append((m[1], int(m[2]), m[3]))
    return gpus


def csv_rows(text: str) -> list[list[str]]:
    """`--format=csv,noheader,nounits`: the rows' fields."""
    return [[f.strip() for f in line.split(",")] for line in text.splitlines() if line.strip()]


def topo(text: str) -> tuple[list[str], dict[str, list[str]]]:
    """`nvidia-smi topo -m`: the GPU columns of the header and each GPU row's cells for
    them (the affinity columns after them left out)."""
    lines = [ANSI.sub("", ln) for ln in text.splitlines()]
    header = next((ln.split() for ln in lines if ln.strip().startswith("GPU0")), [])
    gpus = [c for c in header if re.fullmatch(r"GPU\d+", c)]
    rows = {}
    for line in lines:
        cells = line.split("\t")
        if cells and re.fullmatch(r"GPU\d+", cells[0].strip()) and len(cells) > len(gpus):
            rows[cells[0].strip()] = [c.strip() for c in cells[1 : 1 + len(gpus)]]
    return gpus, rows


def nvlink_status(text: str) -> dict[int, dict[int, str]]:
    """`nvidia-smi nvlink -s`: {GPU index: {link: "26.562 GB/s" or "<inactive>"}}."""
    out: dict[int, dict[int, str]] = {}
    current = None
    for line in text.splitlines():
        if m := GPU_LINE.match(line):
            current = out.setdefault(int(m[1]), {})
        elif (m := re.match(r"^\s+Link (\d+): (.+)$", line)) and current is not None:
            current[int(m[1])] = m[2].strip()
    return out


def gi_rows(text: str) -> list[tuple[int, str, int]]:
    """`nvidia-smi mig -lgi`: (GPU, profile name, GPU instance id) per GPU instance."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\|\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+(\d+)\s+\d+:\d+\s+\|$", line)
        if m:
            out.append((int(m[1]), m[2], int(m[4])))
    return sorted(out)


def ci_rows(text: str) -> list[tuple[int, int, str, int]]:
    """`nvidia-smi mig -lci`: (GPU, GPU instance id, profile name, compute instance id)."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\|\s+(\d+)\s+(\d+)\s+MIG (\S+)\s+(\d+)\s+(\d+)\s+\d+:\d+\s+\|$", line)
        if m:
            out.append((int(m[1]), int(m[2]), m[3], int(m[5])))
    return sorted(out)


def norm_bus(bus_id: str) -> str:
    """A PCI address as NVML's 8-digit domain form, upper case (nvidia-smi's -q and CSV
    print NVML's; inventories may carry either)."""
    dom, rest = bus_id.split(":", 1)
    return f"{int(dom, 16):08X}:{rest.upper()}"


def compare_listing(text: str, inventory: dict) -> list[str]:
    """-L against NVML: the same GPUs in the same order, names, UUIDs; MIG devices."""
    got, diffs = listing(text), []
    gpus = inventory["gpus"]
    if [g["uuid"] for g in got] != [g["uuid"] for g in gpus]:
        diffs.append(f"-L UUIDs: nvidia-smi {[g['uuid'] for g in got]}, NVML "
                     f"{[g['uuid'] for g in gpus]}")  # fmt: skip
        return diffs
    for mine, nv in zip(got, gpus, strict=True):
        if mine["name"] != nv["name"] or mine["index"] != nv["index"]:
            diffs.append(f"-L GPU {nv['index']}: nvidia-smi {mine['index']} {mine['name']!r}, "
                         f"NVML {nv['index']} {nv['name']!r}")  # fmt: skip
        want = sorted((m["profile"], m["uuid"]) for m in nv.get("mig_devices") or [])
        have = sorted((p, u) for p, _, u in mine["migs"])
        if have != want:
            diffs.append(f"-L GPU {nv['index']} MIG devices: nvidia-smi {have}, NVML {want}")
    return diffs


def compare_query(text: str, inventory: dict) -> list[str]:
    """The CSV query (QUERY, csv,noheader,nounits) against NVML, field by field."""
    diffs = []
    rows = csv_rows(text)
    if len(rows) != len(inventory["gpus"]):
        return [f"--query-gpu: {len(rows)} rows, NVML has {len(inventory['gpus'])} GPUs"]
    for row, g in zip(rows, inventory["gpus"], strict=True):
        ecc = g.get("ecc_errors") or {}
        want = [
            str(g["index"]),
            g["uuid"],
            norm_bus(g["pci_bus_id"]),
            g["name"],
            inventory["driver_version"],
            str(g["memory_total_mib"]),
            "[N/A]" if not g.get("ecc_mode") else str(ecc.get("uncorrected_volatile", 0)),
            str((g.get("pcie_link") or {}).get("width", "[N/A]")),
        ]
        if row != want:
            diffs.append(f"--query-gpu GPU {g['index']}: nvidia-smi {row}, NVML {want}")
    return diffs


def _text(el: ET.Element | None, path: str) -> str | None:
    found = None if el is None else el.find(path)
    return None if found is None else (found.text or "").strip()


FABRIC_STATES = {1: "Not Started", 2: "In Progress", 3: "Completed"}


def compare_xml(text: str, inventory: dict) -> list[str]:
    """`nvidia-smi -q -x`: a valid document whose GPUs are NVML's, with their ECC
    counts, retired pages, remapped rows, MIG mode and (NVSwitch GPUs) fabric state."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        return [f"-q -x is not well-formed XML: {exc}"]
    diffs = []
    gpus = root.findall("gpu")
    attached = _text(root, "attached_gpus")
    if attached != str(len(inventory["gpus"])) or len(gpus) != len(inventory["gpus"]):
        return [f"-q -x: attached_gpus {attached}, {len(gpus)} <gpu>; NVML has "
                f"{len(inventory['gpus'])}"]  # fmt: skip
    if _text(root, "driver_version") != inventory["driver_version"]:
        diffs.append(f"-q -x driver_version {_text(root, 'driver_version')}, NVML "
                     f"{inventory['driver_version']}")  # fmt: skip
    for el, g in zip(gpus, inventory["gpus"], strict=True):
        i = g["index"]
        have = {"id": norm_bus(el.get("id", "0:0")), "uuid": _text(el, "uuid"),
                "name": _text(el, "product_name")}  # fmt: skip
        want = {"id": norm_bus(g["pci_bus_id"]), "uuid": g["uuid"], "name": g["name"]}
        if have != want:
            diffs.append(f"-q -x GPU {i}: nvidia-smi {have}, NVML {want}")
        if g.get("ecc_mode"):
            ecc = g.get("ecc_errors") or {}
            have_ecc = [_text(el, "ecc_errors/volatile/dram_uncorrectable"),
                        _text(el, "ecc_errors/aggregate/dram_uncorrectable")]  # fmt: skip
            want_ecc = [str(ecc.get("uncorrected_volatile")), str(ecc.get("uncorrected_aggregate"))]
            if not g.get("mig_mode") and have_ecc != want_ecc:
                diffs.append(f"-q -x GPU {i} uncorrectable ECC (volatile, aggregate): "
                             f"nvidia-smi {have_ecc}, NVML {want_ecc}")  # fmt: skip
        pages = g.get("retired_pages")
        if pages:
            have_pages = [_text(el, "retired_pages/multiple_single_bit_retirement/retired_count"),
                          _text(el, "retired_pages/double_bit_retirement/retired_count"),
                          _text(el, "retired_pages/pending_retirement")]  # fmt: skip
            want_pages = [str(pages["single_bit"]), str(pages["double_bit"]),
                          "Yes" if pages["pending"] else "No"]  # fmt: skip
            if have_pages != want_pages:
                diffs.append(f"-q -x GPU {i} retired pages (SBE, DBE, pending): nvidia-smi "
                             f"{have_pages}, NVML {want_pages}")  # fmt: skip
        rows = g.get("remapped_rows")
        if rows:
            have_rows = [_text(el, "remapped_rows/remapped_row_unc"),
                         _text(el, "remapped_rows/remapped_row_failure")]  # fmt: skip
            want_rows = [str(rows["uncorrectable"]), "Yes" if rows["failure"] else "No"]
            if have_rows != want_rows:
                diffs.append(f"-q -x GPU {i} remapped rows (uncorrectable, failure): "
                             f"nvidia-smi {have_rows}, NVML {want_rows}")  # fmt: skip
        if g.get("mig_mode") is not None:
            want_mig = "Enabled" if g["mig_mode"] else "Disabled"
            if _text(el, "mig_mode/current_mig") != want_mig:
                diffs.append(f"-q -x GPU {i} MIG mode: nvidia-smi "
                             f"{_text(el, 'mig_mode/current_mig')}, NVML {want_mig}")  # fmt: skip
        fabric = g.get("fabric") or {}
        if "state" in fabric:
            want_state = FABRIC_STATES.get(fabric["state"], str(fabric["state"]))
            if _text(el, "fabric/state") != want_state:
                diffs.append(f"-q -x GPU {i} fabric state: nvidia-smi "
                             f"{_text(el, 'fabric/state')}, NVML {want_state}")  # fmt: skip
    return diffs


def active_links(gpu: dict) -> set[int]:
    return {int(link) for link, up in (gpu.get("nvlinks") or {}).items() if up}


def compare_topo(text: str, inventory: dict) -> list[str]:
    """`topo -m`: a row and a column per GPU, X on the diagonal, and an NV# cell exactly
    where both GPUs have NVLinks up (NVLink peers or the same NVSwitches) -- PCIe cells
    everywhere else."""
    gpus = inventory["gpus"]
    cols, rows = topo(text)
    names = [f"GPU{g['index']}" for g in gpus]
    if cols != names or sorted(rows) != sorted(names):
        return [f"topo -m GPUs: columns {cols}, rows {sorted(rows)}; NVML {names}"]
    diffs = []
    pcie = {"PIX", "PXB", "PHB", "NODE", "SYS"}
    for a in gpus:
        for b in gpus:
            cell = rows[f"GPU{a['index']}"][b["index"]]
            if a is b:
                ok = cell == "X"
            elif active_links(a) and active_links(b):
                ok = re.fullmatch(r"NV\d+", cell) is not None
            else:
                ok = cell in pcie
            if not ok:
                diffs.append(f"topo -m GPU{a['index']}/GPU{b['index']}: {cell!r} (NVLinks up: "
                             f"{len(active_links(a))}, {len(active_links(b))})")  # fmt: skip
    return diffs


def compare_nvlink(text: str, inventory: dict) -> list[str]:
    """`nvlink -s`: every NVLink of every GPU that has them, <inactive> exactly where NVML
    says the link is down; no lines for GPUs without NVLink."""
    got, diffs = nvlink_status(text), []
    for g in inventory["gpus"]:
        links = {int(k): up for k, up in (g.get("nvlinks") or {}).items()}
        have = got.get(g["index"], {})
        if sorted(have) != sorted(links):
            diffs.append(f"nvlink -s GPU {g['index']}: links {sorted(have)}, NVML {sorted(links)}")
            continue
        down = sorted(link for link, s in have.items() if s == "<inactive>")
        if down != sorted(link for link, up in links.items() if not up):
            diffs.append(f"nvlink -s GPU {g['index']}: inactive {down}, NVML down "
                         f"{sorted(k for k, up in links.items() if not up)}")  # fmt: skip
        if any(s != "<inactive>" and not re.fullmatch(r"[\d.]+ GB/s", s) for s in have.values()):
            diffs.append(f"nvlink -s GPU {g['index']}: speeds {sorted(set(have.values()))}")
    return diffs


def compare_mig(lgi: str, lci: str, inventory: dict) -> list[str]:
    """`mig -lgi` / `-lci`: the GPU and compute instances of NVML's MIG devices."""
    want_gi = sorted({(g["index"], m["profile"], m["gi"]) for g in inventory["gpus"]
                      for m in g.get("mig_devices") or []})  # fmt: skip
    want_ci = sorted((g["index"], m["gi"], m["profile"], m["ci"]) for g in inventory["gpus"]
                     for m in g.get("mig_devices") or [])  # fmt: skip
    diffs = []
    if gi_rows(lgi) != want_gi:
        diffs.append(f"mig -lgi: nvidia-smi {gi_rows(lgi)}, NVML {want_gi}")
    if ci_rows(lci) != want_ci:
        diffs.append(f"mig -lci: nvidia-smi {ci_rows(lci)}, NVML {want_ci}")
    return diffs


# Each view (nvidia-smi's arguments) and the comparison that holds it to NVML.
VIEWS = {
    "-L": compare_listing,
    f"--query-gpu={QUERY} --format=csv,noheader,nounits": compare_query,
    "-q -x": compare_xml,
    "topo -m": compare_topo,
    "nvlink -s": compare_nvlink,
}
