"""Synthetic `gpunode validate --json` results (schema gpunode.validate/v1) of a small
cluster: a healthy 4xA100 node, a 2xT4 node whose GPU 1 has uncorrectable ECC errors (and a
warning), and an unreachable node. Used until (and besides) the real producer."""

from __future__ import annotations

import json
from pathlib import Path

NODE_CHECKS = [
    ("node.gpu_count", "GPU count"),
    ("driver.version_match", "Driver loaded = installed = pinned"),
    ("cuda.compatible", "CUDA compatible with the driver"),
    ("engine.daemon_json", "daemon.json valid"),
    ("engine.runtime_registered", "gpunode runtime registered"),
    ("engine.active", "Engine active"),
    ("container.isolation", "Container isolation"),
    ("container.cuda", "CUDA in a container"),
]
GPU_CHECKS = [
    ("gpu.lost", "GPU lost"),
    ("gpu.ecc_uncorrectable", "Uncorrectable ECC errors"),
    ("gpu.retired_pages_pending", "Retired pages pending"),
    ("gpu.row_remap_failure", "Row-remap failure"),
    ("gpu.persistence", "Persistence mode"),
]


def result(
    node: str,
    model: str,
    count: int,
    faults: dict | None = None,
    node_checks: list[tuple[str, str]] = NODE_CHECKS,
    gpu_checks: list[tuple[str, str]] = GPU_CHECKS,
) -> dict:
    """One node's result: ``faults`` (check id, GPU index or None) -> (status, detail);
    every other check passes (container.cuda skips, as on a node without CUDA)."""
    faults = faults or {}
    gpus = [
        {
            "index": i,
            "uuid": f"GPU-{node[:4]}{i:04d}-0000-0000-0000-000000000000",
            "model": model,
            "pci_bus_id": f"00000000:{7 + 8 * i:02X}:00.0",
            "memory_mib": 81920,
            "serial": f"16549220{sum(map(ord, node)) % 1000:03d}{i:02d}",  # the board's
        }
        for i in range(count)
    ]
    checks = []
    for cid, title in node_checks:
        status, detail = faults.get((cid, None), ("pass", f"{title}: ok"))
        if cid == "container.cuda" and (cid, None) not in faults:
            status, detail = "skip", "no CUDA device: cuInit failed (libcuda absent)"
        checks.append(
            {
                "id": cid,
                "title": title,
                "gpu": None,
                "uuid": None,
                "status": status,
                "detail": detail,
                "duration_s": 0.0123,
            }
        )
    for g in gpus:
        for cid, title in gpu_checks:
            status, detail = faults.get((cid, g["index"]), ("pass", "0"))
            checks.append(
                {
                    "id": cid,
                    "title": title,
                    "gpu": g["index"],
                    "uuid": g["uuid"],
                    "status": status,
                    "detail": detail,
                    "duration_s": 0.001,
                }
            )
    summary = {s: sum(c["status"] == s for c in checks) for s in ("pass", "warn", "fail", "skip")}
    return {
        "schema": "gpunode.validate/v1",
        "node": node,
        "hostname": node,
        "started": "2026-11-22T08:00:00Z",
        "duration_s": 4.2,
        "gpunode_version": "0.1.0",
        "versions": {
            "driver_loaded": "535.261.03",
            "driver_installed": "535.261.03",
            "driver_pinned": "535.261.03",
            "cuda_driver_max": "12.2",
            "cuda_installed": ["11.8"],
        },
        "gpus": gpus,
        "checks": checks,
        "summary": summary,
        "exit_code": 1 if summary["fail"] else 0,
    }


FAULTY = "sim-t4-bookworm"
FAULTY_GPU = 1


def cluster() -> dict[str, dict]:
    """file name -> document."""
    return {
        "sim-a100-bookworm.json": result("sim-a100-bookworm", "NVIDIA A100-SXM4-80GB", 4),
        "sim-t4-bookworm.json": result(
            FAULTY,
            "Tesla T4",
            2,
            {
                ("gpu.ecc_uncorrectable", FAULTY_GPU): (
                    "fail",
                    "12 volatile uncorrected ECC errors",
                ),
                ("gpu.persistence", 0): ("warn", "persistence mode is off"),
            },
        ),
        "sim-down.json": {
            "node": "sim-down",
            "unreachable": True,
            "detail": "Failed to connect to the host via ssh",
        },
    }


def write_cluster(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, doc in cluster().items():
        (directory / name).write_text(json.dumps(doc))
    return directory


MIG_NODE = "sim-a100-mig"
MIG_PROFILES = ["3g.40gb", "2g.20gb", "1g.10gb"]


def mig_result(node: str = MIG_NODE, profile_of=None, broken: int | None = None) -> dict:
    """A 2xA100 node whose GPU 1 has MIG on with three MIG devices (GPU 0 used whole):
    mig.layout per GPU, mig.isolation per MIG device (``broken``: that one failed).
    ``profile_of``: n -> the profile text (hostile values for the escaping tests)."""
    doc = result(node, "NVIDIA A100-SXM4-80GB", 2)
    gpu = doc["gpus"][1]
    gpu["mig_enabled"] = True
    gpu["mig"] = [
        {"index": n, "uuid": f"MIG-{node[:4]}{n:04d}-1111-0000-0000-000000000000",
         "gi": n + 1, "ci": 0, "profile": (profile_of or MIG_PROFILES.__getitem__)(n),
         "memory_mib": 10240 * (n + 1)}
        for n in range(3)
    ]  # fmt: skip
    doc["gpus"][0]["mig_enabled"] = False
    doc["gpus"][0]["mig"] = []
    for g in doc["gpus"]:
        doc["checks"].append({"id": "mig.layout", "title": "MIG layout as the inventory expects",
                              "gpu": g["index"], "mig": None, "uuid": g["uuid"],
                              "status": "pass", "detail": "as config 'mixed' expects",
                              "duration_s": 0.0})  # fmt: skip
    for m in gpu["mig"]:
        bad = m["index"] == broken
        doc["checks"].append({
            "id": "mig.isolation", "title": "A container sees exactly the requested MIG device",
            "gpu": 1, "mig": m["index"], "uuid": m["uuid"], "status": "fail" if bad else "pass",
            "detail": (f"1:{m['index']}: NVML lists MIG devices MIG-a, MIG-b; expected "
                       f"{m['uuid']} alone" if bad else "exactly this MIG device"),
            "duration_s": 0.5})  # fmt: skip
    doc["summary"] = {s: sum(c["status"] == s for c in doc["checks"])
                      for s in ("pass", "warn", "fail", "skip")}  # fmt: skip
    doc["exit_code"] = 1 if doc["summary"]["fail"] else 0
    return doc


def write_mig_cluster(directory: Path, broken: int | None = 2) -> Path:
    """The cluster plus the MIG node (its MIG device ``broken`` failing isolation)."""
    write_cluster(directory)
    (directory / f"{MIG_NODE}.json").write_text(json.dumps(mig_result(broken=broken)))
    return directory


# ---- a large cluster: 64 nodes x 8 GPUs with every check of issue 21 (the HTML at scale)

ALL_NODE_CHECKS = [
    *NODE_CHECKS,
    ("node.nouveau", "nouveau not loaded"),
    ("node.dev_char", "/dev/char links for the NVIDIA devices"),
    ("node.drift_cache", "Runtime cache matches the driver"),
    ("node.drift_cdi", "CDI spec matches the devices"),
]
ALL_GPU_CHECKS = [
    *GPU_CHECKS,
    ("gpu.xid", "No critical Xid errors"),
    ("gpu.pcie_link", "PCIe link at its maximum"),
    ("gpu.pcie_replay", "PCIe replay counter"),
    ("gpu.clocks_event", "No clock slowdown events"),
    ("gpu.nvlink", "NVLinks up"),
    ("gpu.fabric_manager", "NVSwitch fabric trained"),
    ("gpu.inforom", "InfoROM valid"),
]
XID79 = "Xid 79 at 2026-11-22T07:12:09Z: GPU has fallen off the bus"
# node number -> faults, for 64 nodes; a larger cluster repeats the 64 nodes' pattern (node i
# as node i % 64), as 64 nodes' result files replicated would
LARGE_FAULTS: dict[int, dict] = {
    5: {("gpu.xid", 3): ("fail", XID79), ("gpu.xid", 6): ("fail", XID79)},
    17: {("gpu.xid", 2): ("fail", "Xid 48 at 2026-11-22T06:58:40Z: double-bit ECC error"),
         ("gpu.ecc_uncorrectable", 2): ("fail", "12 volatile uncorrected ECC errors")},
    23: {("gpu.pcie_link", 4): ("warn", "PCIe Gen4 x8; the slot and GPU do Gen5 x16")},
    31: {("gpu.nvlink", 1): ("fail", "NVLink 5 of 18 down")},
    40: {("node.drift_cdi", None): ("fail", "/etc/cdi/nvidia.yaml names 7 GPUs; 8 present")},
    47: {("gpu.clocks_event", i): ("warn", "HW slowdown (thermal) since 2026-11-22T05:01Z")
         for i in range(8)},
}  # fmt: skip
UNREACHABLE = {52}
MIG_NODES = {12, 36, 60}  # MIG on GPU 1; on 60 its MIG device 2 fails isolation
LARGE_DRIVER2 = {"driver_loaded": "550.163.01", "driver_installed": "550.163.01",
                 "driver_pinned": "550.163.01", "cuda_driver_max": "12.4"}  # fmt: skip


def large_name(i: int) -> str:
    return f"gpu-r{i // 16 + 1:02d}-n{i % 16 + 1:02d}"


def large_cluster(nodes: int = 64, gpus: int = 8) -> dict[str, dict]:
    """file name -> document: ``nodes`` H100 nodes of ``gpus`` GPUs with every check, the
    faults of LARGE_FAULTS, an unreachable node, MIG nodes (one failing) and, on every third
    node, gpu.fabric_manager skipped (no NVSwitch) as on A100 PCIe nodes; past 64 nodes the
    pattern repeats (node i as node i % 64)."""
    out: dict[str, dict] = {}
    for n in range(nodes):
        name, i = large_name(n), n % 64
        if i in UNREACHABLE:
            out[f"{name}.json"] = {"node": name, "unreachable": True,
                                   "detail": "Failed to connect to the host via ssh"}  # fmt: skip
            continue
        faults = dict(LARGE_FAULTS.get(i, {}))
        if i % 3 == 2:
            for g in range(gpus):
                faults.setdefault(("gpu.fabric_manager", g),
                                  ("skip", "no NVSwitch fabric: NVML reports none"))  # fmt: skip
        model = "NVIDIA A100-SXM4-80GB" if i in MIG_NODES else "NVIDIA H100 80GB HBM3"
        doc = result(name, model, gpus, faults, ALL_NODE_CHECKS, ALL_GPU_CHECKS)
        for g in doc["gpus"]:  # UUIDs unique in the cluster, as real ones are
            g["uuid"] = f"GPU-{n:08x}-{g['index']:04x}-4000-8000-000000000000"
        for c in doc["checks"]:
            if c["gpu"] is not None:
                c["uuid"] = doc["gpus"][c["gpu"]]["uuid"]
        if (n // 64) % 2:  # every other replica of the 64 on a newer driver
            doc["versions"].update(LARGE_DRIVER2)
        if i in MIG_NODES and gpus >= 2:  # mig_result's GPUs 0 (whole) and 1 (MIG on)
            mig = mig_result(name, broken=2 if i == 60 else None)
            for g, m in zip(doc["gpus"], mig["gpus"], strict=False):
                g.update(mig_enabled=m["mig_enabled"], mig=m["mig"])
            doc["checks"] += [c for c in mig["checks"] if c["id"].startswith("mig.")]
        doc["summary"] = {s: sum(c["status"] == s for c in doc["checks"])
                          for s in ("pass", "warn", "fail", "skip")}  # fmt: skip
        doc["exit_code"] = 1 if doc["summary"]["fail"] else 0
        out[f"{name}.json"] = doc
    return out


def write_large_cluster(directory: Path, nodes: int = 64, gpus: int = 8) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name, doc in large_cluster(nodes, gpus).items():
        (directory / name).write_text(json.dumps(doc))
    return directory
