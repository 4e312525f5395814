"""NVIDIA's hook command line, served by gpunode-hook's code: what the CDI specs of NVIDIA's
device plugin and of ``nvidia-ctk cdi generate`` call, so that a node without NVIDIA's
toolkit runs them. The launcher ``nvidia-cdi-hook`` (in gpunode's own directory, written
by ``gpunode runtime install-links``: gpunode.launch.firststage) imports this module.

Forms, by the program name (argv[0]'s basename): ``nvidia-ctk hook SUBCOMMAND [OPTIONS]``
and, for any other name (``nvidia-cdi-hook``), ``SUBCOMMAND [OPTIONS]``. Options as
``--opt value`` or ``--opt=value``; gpunode's ``--root ROOTFS`` is also accepted (instead of
the OCI state on stdin). An unknown subcommand or option is one line on stderr, exit 1.

Subcommands (gpunode.hook.args.NVIDIA_OPTIONS), each with the protections of gpunode's own:

* ``create-symlinks --link TARGET::LINK...``: gpunode.hook.symlinks (LINK's parents
  resolved inside the container root, the link made under a temporary name and renamed).
* ``update-ldcache --folder DIR...``: the SONAME-shaped entries of the folders into the
  container's ld.so.cache, the folders into its ld.so.conf.d drop-in
  (gpunode.hook.ldcache.cmd_nvidia_update_ldcache). ``--ldconfig-path`` is accepted and
  ignored: gpunode runs no ldconfig, the host's or the image's.
* ``enable-cuda-compat --host-driver-version=V``: gpunode.hook.cudacompat.
* ``disable-device-node-modification``: the container's /proc/driver/nvidia as gpunode's
  ``mount-proc-driver`` makes it in CDI mode: a read-only tmpfs whose ``params`` says
  ``ModifyDeviceFiles: 0`` (what NVIDIA's subcommand does), holding only the GPUs (and MIG
  capabilities) whose device nodes the container was given (more than NVIDIA's: the other
  GPUs' /proc entries are hidden too).
* ``update-application-profile``: a no-op that succeeds. NVIDIA's writes the EGL
  application profile limiting EGL to the container's GPUs, which only matters to graphics;
  EGL cannot open a GPU whose device node the container lacks, so nothing is exposed
  without it, and gpunode writes no profile for its own containers either.
"""

from __future__ import annotations

import os
import sys

from .args import NVIDIA_OPTIONS
from .configure import proc_sources
from .cudacompat import cmd_enable_cuda_compat
from .ldcache import cmd_nvidia_update_ldcache
from .main import run
from .procdriver import install_at
from .symlinks import cmd_create_symlinks

NVIDIA_CTK = "nvidia-ctk"
NVIDIA_CDI_HOOK = "nvidia-cdi-hook"


def cmd_disable_device_node_modification(args, root_path: str) -> int:
    args.proc_driver = True  # the GPUs: from the container's device nodes (CDI)
    src = proc_sources(args, root_path)
    if src is not None:
        install_at(src, root_path)
    return 0


def cmd_update_application_profile(args, root_path: str) -> int:
    return 0  # see the module docstring


COMMANDS = {
    "create-symlinks": cmd_create_symlinks,
    "enable-cuda-compat": cmd_enable_cuda_compat,
    "update-ldcache": cmd_nvidia_update_ldcache,
    "disable-device-node-modification": cmd_disable_device_node_modification,
    "update-application-profile": cmd_update_application_profile,
}
USAGE = f"""usage: {NVIDIA_CDI_HOOK} SUBCOMMAND [OPTIONS]  or  {NVIDIA_CTK} hook SUBCOMMAND [OPTIONS]
NVIDIA's CDI hook command line, served by gpunode-hook (the OCI state on stdin, or --root).
  create-symlinks --link TARGET::LINK...
  enable-cuda-compat --host-driver-version=VERSION
  update-ldcache --folder DIR... [--ldconfig-path PATH (ignored: no ldconfig is run)]
  disable-device-node-modification
  update-application-profile   (no-op)"""


def main(argv: list[str] | None = None) -> int:
    """*argv* with the program name first (sys.argv by default)."""
    argv = list(sys.argv if argv is None else argv)
    rest = argv[1:]
    prog = NVIDIA_CDI_HOOK  # the name its errors carry, whatever the launcher's name
    if argv and os.path.basename(argv[0]) == NVIDIA_CTK:
        if not rest or rest[0] != "hook":
            got = repr(rest[0][:60]) if rest else "nothing"
            print(
                f"{NVIDIA_CTK}: gpunode serves only `{NVIDIA_CTK} hook SUBCOMMAND`; got {got}",
                file=sys.stderr,
            )
            return 1
        rest, prog = rest[1:], f"{NVIDIA_CTK} hook"
    return run(rest, prog, NVIDIA_OPTIONS, COMMANDS, USAGE)


if __name__ == "__main__":
    sys.exit(main())
