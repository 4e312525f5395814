"""The MIG geometry of the simulated GPUs: the one table, ``mig-geometry.json`` beside this
module (data, read once at import).

It holds what NVML describes for a 7-slice MIG GPU (A100/H100): the GPU instance profiles
(slices, memory slices, placements, GPU instance ids, engines) and the compute instance
profiles (slices, placement step). Everything in the simulator that needs the geometry reads
it from here: the profiles (``sim/profiles``: MIG instance names and placements), the mock
NVML (through the profile payload's ``gip``, ``cip`` and ``migspace`` records that
``profiles.mock_payload`` writes from this table; ``mocknvml/profile.c`` parses them at
start, the initial MIG state among it) and the unit MIG tests' fake NVML. Data, not
code, so that the C mock and Python read the same values instead of keeping copies.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).resolve().with_name("mig-geometry.json")


@dataclass(frozen=True)
class MigShape:
    """A GPU instance profile of a 7-slice MIG GPU, as NVML describes it on an A100/H100.

    ``index`` is the NVML_GPU_INSTANCE_PROFILE_* constant, ``id`` the profile id that
    ``nvidia-smi mig -lgip`` shows; ``starts`` are the valid placements (memory slots of
    ``size``). Engine counts are the A100's.
    """

    slices: int
    memory_slices: int
    suffix: str
    index: int
    id: int
    starts: tuple[int, ...]
    size: int
    instances: int
    sm: int
    ce: int
    dec: int
    enc: int
    jpeg: int
    ofa: int
    first_gi: int  # the GPU instance id at placement 0; ids step by one per placement

    def name(self, memory_mib: int) -> str:
        gib = memory_mib / 1024 * self.memory_slices / MIG_MEMORY_SLICES
        return f"{self.slices}g.{int(gib + 0.5)}gb{self.suffix}"

    def memory_mib(self, memory_mib: int) -> int:
        return memory_mib * self.memory_slices // MIG_MEMORY_SLICES

    def gi_id(self, start: int) -> int:
        return self.first_gi + self.starts.index(start)

    def slots(self, start: int) -> frozenset[int]:
        """The memory slots an instance placed at ``start`` takes: instances whose slots
        meet cannot both exist."""
        return frozenset(range(start, start + self.size))


@dataclass(frozen=True)
class CiShape:
    """A compute instance profile: ``index`` is NVML_COMPUTE_INSTANCE_PROFILE_* and also the
    profile id; it spans ``slices`` of its GPU instance, starting at a multiple of ``step``."""

    index: int
    slices: int
    step: int

    def count_in(self, gi_slices: int) -> int:
        """How many of it a GPU instance of ``gi_slices`` compute slices holds (0: it does
        not offer this profile)."""
        return gi_slices // self.slices if self.slices <= gi_slices else 0


def _load(path: Path) -> tuple[int, int, tuple[MigShape, ...], tuple[CiShape, ...]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    gis = tuple(
        MigShape(**{**row, "starts": tuple(row["starts"])}) for row in data["gpu_instance_profiles"]
    )
    cis = tuple(CiShape(**row) for row in data["compute_instance_profiles"])
    if [c.index for c in cis] != list(range(len(cis))):
        raise ValueError(f"{path}: compute instance profile indexes must be 0, 1, ... in order")
    return data["compute_slices"], data["memory_slots"], gis, cis


MIG_COMPUTE_SLICES, MIG_MEMORY_SLICES, MIG_SHAPES, CI_SHAPES = _load(TABLE)


def ci_spanning(slices: int) -> CiShape:
    """The compute instance profile that spans a GPU instance of *slices* compute slices."""
    return next(c for c in CI_SHAPES if c.slices == slices)
