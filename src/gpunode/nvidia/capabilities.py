"""Driver capabilities (NVIDIA_DRIVER_CAPABILITIES) and the driver files each one brings.

Source: libnvidia-container nvc_info.c and options.h, via ../shared/reference.
"""

from __future__ import annotations

ALL_CAPABILITIES = ("compat32", "compute", "display", "graphics", "ngx", "utility", "video")

# Libraries per capability (file names start with these and end in the driver version).
LIBRARIES: dict[str, tuple[str, ...]] = {
    "utility": ("libnvidia-ml", "libnvidia-cfg", "libnvidia-nscq"),
    "compute": (
        "libcuda",
        "libcudadebugger",
        "libnvidia-opencl",
        "libnvidia-gpucomp",
        "libnvidia-ptxjitcompiler",
        "libnvidia-fatbinaryloader",
        "libnvidia-allocator",
        "libnvidia-compiler",
        "libnvidia-pkcs11",
        "libnvidia-pkcs11-openssl3",
        "libnvidia-nvvm",
        "libnvidia-tileiras",
    ),
    "video": ("libvdpau_nvidia", "libnvidia-encode", "libnvidia-opticalflow", "libnvcuvid"),
    "graphics": (
        "libnvidia-eglcore",
        "libnvidia-glcore",
        "libnvidia-tls",
        "libnvidia-glsi",
        "libnvidia-fbc",
        "libnvidia-ifr",
        "libnvidia-rtcore",
        "libnvoptix",
        "libGLX_nvidia",
        "libEGL_nvidia",
        "libGLESv2_nvidia",
        "libGLESv1_CM_nvidia",
        "libnvidia-glvkspirv",
        "libnvidia-cbl",
    ),
    "ngx": ("libnvidia-ngx",),
}
BINARIES: dict[str, tuple[str, ...]] = {
    "utility": ("nvidia-smi", "nvidia-debugdump", "nvidia-persistenced", "nv-fabricmanager"),
    "compute": ("nvidia-cuda-mps-control", "nvidia-cuda-mps-server"),
}
IPC: dict[str, tuple[str, ...]] = {
    "utility": ("/run/nvidia-persistenced/socket", "/run/nvidia-fabricmanager/socket"),
    "compute": ("/tmp/nvidia-mps",),
}
# Capabilities that pull in others (nvc_info/options.h).
IMPLIES = {"video": {"compute"}, "display": {"graphics"}}


def expand_capabilities(caps: set[str] | frozenset[str]) -> set[str]:
    out = set(caps)
    for cap in list(out):
        out |= IMPLIES.get(cap, set())
    return out
