"""The container-create path: the OCI runtime shim and what it runs for a GPU container.

shim (argv, fast pre-check, exec) → plan (request → discovery → GPU selection →
requirement check → edits) → oci (edits applied to config.json). cdi turns the same edits
into a CDI spec; nvhook stands in for NVIDIA's hook; firststage generates the sh first stage
and the launchers. Nothing is imported here: the shim's launcher imports
gpunode.runtime.shim on every container operation.

REQUEST_MARKERS is here, in the package the shim loads anyway, because three modules use it
(shim's pre-check, config's first-stage file, firststage's generated sh) and the shim's
no-GPU path must not load any other module for it.
"""

# Byte strings whose absence proves a spec makes no GPU request (see shim.surely_not_gpu).
REQUEST_MARKERS = (
    b"NVIDIA_VISIBLE_DEVICES",
    b"CUDA_VERSION",
    b"nvidia-container-devices",
    b"nvidia-container-runtime-hook",
    b"nvidia-container-toolkit",
    b"cdi.k8s.io/",
)
