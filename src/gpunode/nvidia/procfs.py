"""The NVIDIA driver's /proc/driver/nvidia files: read (and, for the hook, patched) here.

Formats follow the kernel module's nv-procfs.c: ``version`` is two lines (``NVRM version:``
and ``GCC version:``), ``params`` is ``Key: value`` lines, and each GPU has
``gpus/<dddd:bb:dd.f>/information`` with tab-separated ``Key: value`` lines. The simulator
writes them in gpunode.sim.procfs; tests read its output back with these parsers.

No ``re`` and no ``pathlib``: the runtime and the hook import this on the container start
path.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .gpu import Gpu

PROC_DRIVER_NVIDIA = "/proc/driver/nvidia"


def parse_version(text: str) -> str | None:
    """The driver version from /proc/driver/nvidia/version, or None.

    The token after "Kernel Module" (proprietary) or the architecture (open module).
    """
    for line in text.splitlines():
        if not line.startswith("NVRM version:"):
            continue
        words = line.split()
        for i, word in enumerate(words[:-1]):
            if word in ("Module", "x86_64", "aarch64"):
                candidate = words[i + 1]
                parts = candidate.split(".")
                if 2 <= len(parts) <= 3 and all(p.isascii() and p.isdigit() for p in parts):
                    return candidate
    return None


def parse_params(text: str) -> list[tuple[str, str]]:
    """``Key: value`` pairs of the params file, in order (keys and values stripped)."""
    out = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out.append((key.strip(), value.strip()))
    return out


def parse_information(text: str) -> dict[str, str]:
    """``Key: value`` pairs of a gpus/<bus>/information file (keys as written)."""
    return dict(parse_params(text))


def set_param(params: bytes, key: str, value: str) -> bytes:
    """The params file with ``key`` set to ``value`` (every line naming it; appended when
    none does). The hook gives containers ``ModifyDeviceFiles: 0`` this way."""
    lines = params.decode(errors="replace").splitlines()
    found = False
    for i, line in enumerate(lines):
        name, sep, _ = line.partition(":")
        if sep and name.strip() == key:
            lines[i] = f"{key}: {value}"
            found = True
    if not found:
        lines.append(f"{key}: {value}")
    return ("\n".join(lines) + "\n").encode()


def read_driver(root: str | os.PathLike = PROC_DRIVER_NVIDIA) -> tuple[str | None, list[Gpu]]:
    """Read driver version and GPUs from a /proc/driver/nvidia tree: each GPU the record
    NVML's walk fills (gpunode.nvidia.gpu), with what the kernel tells (minor, UUID, model as
    its name, bus id in NVML's form; index None: the inventory numbers them), in bus order.
    A directory not named as a bus id is no GPU.

    Returns (None, []) when the tree does not exist (no driver loaded, or inside a
    container that was not given one).
    """
    from .busid import BusId
    from .gpu import Gpu  # not on the start path: only the inventory and validate read GPUs

    root = os.fspath(root)
    try:
        with open(os.path.join(root, "version")) as fh:
            version = parse_version(fh.read())
    except OSError:
        return None, []
    gpus_dir = os.path.join(root, "gpus")
    try:
        entries = sorted(os.listdir(gpus_dir))
    except OSError:
        entries = []
    gpus = []
    for name in entries:
        try:
            with open(os.path.join(gpus_dir, name, "information")) as fh:
                info = parse_information(fh.read())
        except OSError:
            continue
        try:
            bus = BusId.parse(name).nvml
        except ValueError:
            continue
        minor_text = info.get("Device Minor", "")
        gpus.append(
            Gpu(
                index=None,
                minor=int(minor_text) if minor_text.isdigit() else None,
                uuid=info.get("GPU UUID", ""),
                name=info.get("Model", ""),
                pci_bus_id=bus,
            )
        )
    return version, gpus
