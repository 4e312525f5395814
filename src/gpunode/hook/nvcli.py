"""NVIDIA's hook command line, served by gpunode-hook's code: what the CDI specs of NVIDIA's
device plugin and of ``nvidia-ctk cdi generate`` call, so that a node without NVIDIA's
toolkit runs them. The launcher ``nvidia-cdi-hook`` (in gpunode's own directory, written
by ``gpunode runtime install-links``: gpunode.launch.firststage) imports this module.

Forms, by the program name (argv[0]'s basename): ``nvidia-ctk hook SUBCOMMAND [OPTIONS]``
and, for any other name (``nvidia-cdi-hook``), ``SUBCOMMAND [OPTIONS]``. Options as
``--opt value`` or ``--opt=value``; gpunode's ``--root ROOTFS`` is also accepted (instead of
the OCI state on stdin).

Forward-compatible as NVIDIA's (cmd/nvidia-cdi-hook/commands: its CLI's default action and
CommandNotFound log "Unsupported CDI hook" and return nil): a subcommand gpunode does not
serve, or none, is one warning line on stderr naming it and what gpunode serves, exit 0,
nothing read or changed, so a spec from a newer generator (a hook added) or an older one
(a hook removed) never fails every container. A served subcommand with an option it does
not take, or a bad value, keeps failing (one line, exit 1): NVIDIA's OnUsageError returns
the flag error as is when the first word is a known hook, and its main exits 1 on it.

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
* ``chmod --mode MODE --path PATH...``: gpunode.hook.chmod (each PATH resolved inside the
  container root, a symlink at its last component not followed, MODE strictly octal, at
  most 777). Imported only when called.
* ``create-soname-symlinks --folder DIR... [--ldconfig-path PATH]``: the SONAME link of
  each library in the folders, as ``ldconfig -N -n`` would (gpunode.hook.sonamelinks:
  folders resolved inside the root, the SONAMEs read bounded, the links made as
  create-symlinks makes them). ``--ldconfig-path`` accepted and ignored. Imported only
  when called.
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


def cmd_chmod(args, root_path: str) -> int:
    from .chmod import cmd_chmod  # off the other hooks' start path

    return cmd_chmod(args, root_path)


def cmd_create_soname_symlinks(args, root_path: str) -> int:
    from .sonamelinks import cmd_create_soname_symlinks  # ELF reading: this hook's only

    return cmd_create_soname_symlinks(args, root_path)


COMMANDS = {
    "create-symlinks": cmd_create_symlinks,
    "enable-cuda-compat": cmd_enable_cuda_compat,
    "update-ldcache": cmd_nvidia_update_ldcache,
    "disable-device-node-modification": cmd_disable_device_node_modification,
    "update-application-profile": cmd_update_application_profile,
    "chmod": cmd_chmod,
    "create-soname-symlinks": cmd_create_soname_symlinks,
}
USAGE = f"""usage: {NVIDIA_CDI_HOOK} SUBCOMMAND [OPTIONS]  or  {NVIDIA_CTK} hook SUBCOMMAND [OPTIONS]
NVIDIA's CDI hook command line, served by gpunode-hook (the OCI state on stdin, or --root).
  create-symlinks --link TARGET::LINK...
  enable-cuda-compat --host-driver-version=VERSION
  update-ldcache --folder DIR... [--ldconfig-path PATH (ignored: no ldconfig is run)]
  disable-device-node-modification
  update-application-profile   (no-op)
  chmod --mode MODE --path PATH...   (MODE: octal, 0 to 777)
  create-soname-symlinks --folder DIR... [--ldconfig-path PATH (ignored)]
Another subcommand (a hook gpunode does not serve) is a warning, exit 0, as NVIDIA's."""


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
    hook = subcommand(rest)
    if hook not in COMMANDS and not (hook is None and HELP.intersection(rest)):
        what = "no hook given" if hook is None else f"unsupported hook {hook[:60]!r}"
        print(
            f"{prog}: warning: {what}, ignored (gpunode serves {', '.join(COMMANDS)})",
            file=sys.stderr,
        )
        return 0
    return run(rest, prog, NVIDIA_OPTIONS, COMMANDS, USAGE)


HELP = frozenset(("-h", "--help", "--version"))


def subcommand(argv: list[str]) -> str | None:
    """The first word of *argv* that is not an option (nor --root's value): the hook."""
    i = 0
    while i < len(argv):
        if argv[i] == "--root":
            i += 2
        elif argv[i].startswith("-"):
            i += 1
        else:
            return argv[i]
    return None


if __name__ == "__main__":
    sys.exit(main())
