"""gpunode: provision and validate NVIDIA GPU nodes."""

__version__ = "0.1.0"
