"""`gpunode mig`: MIG layouts in mig-parted's format, applied, asserted and exported through
NVML. config.py reads the file, layout.py reads the GPUs and plans (placements included),
apply.py makes the NVML calls."""

from __future__ import annotations

from ..util.command import InputError, OperationError


class MigConfigError(InputError, ValueError):
    """A mig-parted file or a layout this node cannot hold: one line, exit 2."""


class MigApplyError(OperationError):
    """An NVML call that failed while applying (not root, a GPU in use, ...): one line, exit 1."""
