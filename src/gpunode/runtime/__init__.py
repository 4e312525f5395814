"""The container-create path: the OCI runtime shim and what it runs for a GPU container.

shim (argv, fast pre-check, exec) → plan (request → discovery → GPU selection →
requirement check → edits) → oci (edits applied to config.json). cdi turns the same edits
into a CDI spec; nvhook stands in for NVIDIA's hook. Nothing is imported here: the shim's
launcher imports gpunode.runtime.shim on every container operation.
"""
