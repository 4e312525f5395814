"""Provisioning logic behind the Ansible roles (`gpunode provision ...`).

The roles stay thin: every decision (which packages from which repository, whether a CUDA
release runs on a driver, whether the driver in use matches the packages) is made here,
where unit tests reach it, and handed to Ansible as JSON with ``ok``/``changed``/``message``.

Modules:
  versions   driver/CUDA/package version parsing and the inventory-value formats
  cuda       the CUDA -> minimum driver table and the compatibility gate
  sources    package/repository decisions per distribution, release, branch and flavour
  preflight  facts of the node (OS, arch, GPUs, Secure Boot, headers, disk, conflicts)
  fabric     NVSwitch baseboards from PCI before the driver (the one table of NVSwitch and
             NVLink5 GPU ids) and the fabric manager's package names
  packages   the node's package manager: available versions, installed versions
  matching   NVML vs installed package vs pin vs loaded kernel module
  converge   the plans against the node: `todo`, `converged`, the checks once installed
(`gpunode.cli.provision` is the command line over them)
"""


class ProvisionError(ValueError):
    """A bad inventory value or an impossible request: one line naming the variable."""


class CheckFailed(RuntimeError):
    """A check on the node failed (the message says what to change)."""
