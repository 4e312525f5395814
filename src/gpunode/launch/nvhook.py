"""`nvidia-container-runtime-hook` stand-in for nodes without NVIDIA's toolkit.

Docker's ``--gpus`` inserts a prestart hook with this name. When gpunode is the container's
runtime it removes that hook and does the work itself, so this program only runs when a
container asked for GPUs through a runtime that is *not* gpunode.

The decision is made at run time: if NVIDIA's own hook is installed too (on PATH after this
one, or in one of NVIDIA's install locations) it is exec'd with the same arguments, stdin
and environment, so installing NVIDIA's toolkit after gpunode keeps ``--gpus`` working for
runc users. Without it, the hook fails with a message saying what to do.
"""

import os
import sys

NAME = "nvidia-container-runtime-hook"
MESSAGE = (
    "nvidia-container-runtime-hook (gpunode): GPUs were requested, but this container's "
    "runtime is not gpunode. Use `docker run --runtime gpunode ...` or make gpunode the "
    "default runtime (`gpunode runtime configure docker --set-as-default`)."
)
# Where NVIDIA's packages and its GPU operator put the hook, searched after PATH.
NVIDIA_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/sbin", "/usr/local/nvidia/toolkit")
# Set before exec'ing another hook, so that nothing can chain back into a loop.
CHAINED = "GPUNODE_NVHOOK_CHAINED"


def _is_gpunode(path: str) -> bool:
    """gpunode's own stand-in (a Python launcher importing this module), by content."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return True  # unreadable: never exec it
    # gpunode.runtime.nvhook: where an older gpunode's stand-in imported it from
    return b"gpunode.launch.nvhook" in head or b"gpunode.runtime.nvhook" in head


def nvidia_hook() -> str | None:
    """The first executable named nvidia-container-runtime-hook on PATH, then in NVIDIA's
    install locations, that is not gpunode's stand-in."""
    dirs = os.environ.get("PATH", "").split(os.pathsep) + list(NVIDIA_DIRS)
    for d in dirs:
        if not os.path.isabs(d):
            continue  # never a directory relative to the cwd
        cand = os.path.join(d, NAME)
        if os.path.isfile(cand) and os.access(cand, os.X_OK) and not _is_gpunode(cand):
            return cand
    return None


def main(argv=None) -> int:
    argv = sys.argv if argv is None else argv
    if not os.environ.get(CHAINED):
        other = nvidia_hook()
        if other is not None:
            try:
                os.execve(other, [other, *argv[1:]], {**os.environ, CHAINED: "1"})
            except OSError as exc:
                sys.stderr.write(f"{NAME} (gpunode): cannot run NVIDIA's hook {other}: {exc}\n")
                return 1
    if len(argv) > 1 and argv[1] in ("poststart", "poststop"):
        return 0  # no-ops, as in NVIDIA's hook
    sys.stderr.write(MESSAGE + "\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
