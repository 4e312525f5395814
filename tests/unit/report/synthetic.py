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


def result(node: str, model: str, count: int, faults: dict | None = None) -> dict:
    faults = faults or {}
    gpus = [
        {
            "index": i,
            "uuid": f"GPU-{node[:4]}{i:04d}-0000-0000-0000-000000000000",
            "model": model,
            "pci_bus_id": f"00000000:{7 + 8 * i:02X}:00.0",
            "memory_mib": 81920,
        }
        for i in range(count)
    ]
    checks = []
    for cid, title in NODE_CHECKS:
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
        for cid, title in GPU_CHECKS:
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
