"""`nvidia-container-runtime-hook` stand-in, installed only where NVIDIA's toolkit is absent.

Docker's ``--gpus`` inserts a prestart hook with this name. When gpunode is the container's
runtime it removes that hook and does the work itself, so this program only runs when a
container asked for GPUs through a runtime that is *not* gpunode — then it fails, clearly.
"""

import sys

MESSAGE = (
    "nvidia-container-runtime-hook (gpunode): GPUs were requested, but this container's "
    "runtime is not gpunode. Use `docker run --runtime gpunode ...` or make gpunode the "
    "default runtime (`gpunode runtime configure docker --set-as-default`)."
)


def main(argv=None) -> int:
    argv = sys.argv if argv is None else argv
    if len(argv) > 1 and argv[1] in ("poststart", "poststop"):
        return 0  # no-ops, as in NVIDIA's hook
    sys.stderr.write(MESSAGE + "\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
