"""The CUDA compatibility gate: can this driver run this CUDA release, under which policy?

The table of minimum drivers is the one data file ``gpunode/data/cuda-driver-table.json``
(NVIDIA's release notes, Table 3, with each row's source and confidence kept).

Policies (the ``cuda_toolkit_compat_policy`` knob):

* ``strict``  the driver is at least the release's own minimum (``min_driver_linux``).
* ``minor``   also accept a driver that meets the *minor-version compatibility* minimum of
              the release's major version: 11.x >= 450.80.02, 12.x >= 525.60.13,
              13.x >= 580. Applications then run, but PTX of a newer minor release cannot
              be JIT-compiled by the older driver.
* ``forward`` also accept *forward compatibility*: the ``cuda-compat-<M>-<m>`` package
              puts the newer user-mode driver next to an older kernel driver. NVIDIA
              supports it on data center GPUs only, and (our reading of the forward
              compatibility notes; medium confidence) on kernel drivers of branch >= 470.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources

from ..util.boundedyaml import describe
from . import ProvisionError
from .versions import at_least, check_cuda, key, major_minor

TABLE = resources.files("gpunode") / "data" / "cuda-driver-table.json"  # works from a wheel too
POLICIES = ("strict", "minor", "forward")
# Minor-version compatibility minimum per CUDA major (NVIDIA's CUDA compatibility guide;
# the table's `minor_version_compat_min_driver` text says the same, a unit test checks).
MINOR_COMPAT_MIN = {11: "450.80.02", 12: "525.60.13", 13: "580"}
FORWARD_COMPAT_MIN = "470"
# Data center products (forward compatibility): NVML brand "tesla", or these model names
# (newer drivers report H100/A100 with the generic brand "nvidia").
DATACENTER_MODELS = (
    "A100", "A30", "A40", "A10", "A16", "A2", "H100", "H200", "H20", "H800", "A800", "L4",
    "L40", "L20", "B100", "B200", "B300", "GB200", "GB300", "GH200", "T4", "V100", "P100",
    "P40", "P4",
)  # fmt: skip


@dataclass(frozen=True)
class Release:
    cuda: str
    release: str
    min_driver: str | None
    source: str
    confidence: str


def load_table(path=TABLE) -> dict[str, Release]:
    rows = json.loads(path.read_text())
    return {
        r["cuda"]: Release(
            r["cuda"], r["release"], r.get("min_driver_linux"), r["source"], r["confidence"]
        )
        for r in rows
    }


def accepted(table: dict[str, Release]) -> list[str]:
    return sorted(table, key=key)


def resolve(variable: str, cuda: str, table: dict[str, Release] | None = None) -> Release:
    """The table row for a requested CUDA version ("12.4" -> the 12.4 GA row)."""
    table = table if table is not None else load_table()
    cuda = check_cuda(variable, cuda)
    if cuda in table:
        return table[cuda]
    if cuda.count(".") == 2 and cuda.endswith(".0") and cuda[:-2] in table:  # 12.4.0 == 12.4
        return table[cuda[:-2]]
    if cuda.count(".") == 1:  # 11.0: the GA row of the 11.0.x releases
        rows = sorted(
            (r for c, r in table.items() if c.startswith(cuda + ".")), key=lambda r: key(r.cuda)
        )
        ga = [r for r in rows if " GA" in r.release]
        if ga or rows:
            return (ga or rows)[0]
    raise ProvisionError(
        f"{variable}: CUDA {cuda!r} is not a known release; accepted: {', '.join(accepted(table))}"
    )


def is_datacenter(name: str, brand: str) -> bool:
    if brand == "tesla":
        return True
    words = name.replace("NVIDIA", "").replace("-", " ").split()
    return any(w.upper() in DATACENTER_MODELS for w in words)


@dataclass
class Verdict:
    cuda: str
    driver: str
    policy: str
    ok: bool
    mode: str  # native | minor | forward | refused | undecided (forward, GPUs unknown)
    minimum: str | None
    message: str
    packages: list[str] = field(default_factory=list)  # extra packages (cuda-compat)

    def to_dict(self) -> dict:
        return {
            "cuda": self.cuda,
            "driver": self.driver,
            "policy": self.policy,
            "ok": self.ok,
            "mode": self.mode,
            "minimum": self.minimum,
            "message": self.message,
            "packages": self.packages,
        }


def newest_native(driver: str, table: dict[str, Release]) -> str | None:
    """The newest CUDA release whose own minimum this driver meets."""
    ok = [r.cuda for r in table.values() if r.min_driver and at_least(driver, r.min_driver)]
    return max(ok, key=key) if ok else None


def gate(
    cuda: str,
    driver: str,
    policy: str = "strict",
    *,
    datacenter: bool | None = None,
    table: dict[str, Release] | None = None,
    variable: str = "cuda_toolkit_versions",
) -> Verdict:
    """Decide whether `driver` runs CUDA `cuda` under `policy`.

    `datacenter`: are all the node's GPUs data center products (None: unknown, e.g. on the
    controller) — needed only for forward compatibility.
    """
    table = table if table is not None else load_table()
    check_policy(policy)
    row = resolve(variable, cuda, table)
    major = int(row.cuda.split(".")[0])
    minor_min = MINOR_COMPAT_MIN.get(major)
    v = Verdict(row.cuda, driver, policy, False, "refused", row.min_driver, "")
    if row.min_driver and at_least(driver, row.min_driver):
        v.ok, v.mode = True, "native"
        v.message = f"CUDA {row.cuda} runs on driver {driver} (minimum {row.min_driver})"
        return v
    if policy in ("minor", "forward") and minor_min and at_least(driver, minor_min):
        v.ok, v.mode, v.minimum = True, "minor", minor_min
        v.message = (
            f"CUDA {row.cuda} runs on driver {driver} with minor-version compatibility "
            f"(CUDA {major}.x needs >= {minor_min}; PTX newer than the driver cannot be JIT-compiled)"
        )
        return v
    if policy == "forward" and at_least(driver, FORWARD_COMPAT_MIN) and datacenter:
        mm = major_minor(row.cuda).replace(".", "-")
        v.ok, v.mode, v.minimum = True, "forward", FORWARD_COMPAT_MIN
        v.packages = [f"cuda-compat-{mm}"]
        v.message = (
            f"CUDA {row.cuda} runs on driver {driver} with forward compatibility "
            f"(package cuda-compat-{mm}, data center GPUs)"
        )
        return v
    if policy == "forward" and datacenter is None and at_least(driver, FORWARD_COMPAT_MIN):
        v.mode = "undecided"
        v.message = (
            f"CUDA {row.cuda} on driver {driver} needs forward compatibility, which is decided "
            "on the node (it needs data center GPUs)"
        )
        return v
    # refused: say what the minimum is and what to change
    need = row.min_driver or minor_min or "unknown"
    native = newest_native(driver, table)
    fixes = [f"install a driver >= {need} (nvidia_driver_version)"]
    if native:
        fixes.append(f"request CUDA <= {native} ({variable})")
    if policy == "strict" and minor_min and at_least(driver, minor_min):
        fixes.append(
            f"or set cuda_toolkit_compat_policy: minor (CUDA {major}.x runs on >= {minor_min})"
        )
    elif policy != "forward" and at_least(driver, FORWARD_COMPAT_MIN) and datacenter is not False:
        fixes.append("or set cuda_toolkit_compat_policy: forward (cuda-compat, data center GPUs)")
    why = ""
    if policy == "forward" and datacenter is False and at_least(driver, FORWARD_COMPAT_MIN):
        why = "; forward compatibility needs data center GPUs and this node has others"
    elif row.min_driver is None:
        why = f"; the table has no minimum for {row.release} ({row.confidence})"
    v.message = (
        f"CUDA {row.cuda} needs NVIDIA driver >= {need} ({policy} policy); driver is {driver}"
        f"{why}: {', '.join(fixes)}"
    )
    return v


def check_policy(value: str) -> str:
    if value not in POLICIES:
        raise ProvisionError(
            f"cuda_toolkit_compat_policy: {describe(value)} is not one of {', '.join(POLICIES)}"
        )
    return value
