"""The container-create path's spec pipeline: what a GPU container gets, decided, with no
process started (gpunode.launch carries it out).

bundle (config.json in, the edited spec out; the fast pre-check) → plan (request →
discovery → GPU selection → requirement check → edits) → oci (edits applied to
config.json). cdi turns the same edits into a CDI spec. Nothing is imported here: the
runtime's launcher loads this package on every container operation.

REQUEST_MARKERS and the pre-check on them (surely_not_gpu) are here, in a package the
runtime loads anyway, because three modules use the markers (the Python runtime's
pre-check, config's first-stage file, launch.firststage's generated sh) and the no-GPU
path must not load any other module for them.
"""

# Byte strings whose absence proves a spec makes no GPU request (see surely_not_gpu).
REQUEST_MARKERS = (
    b"NVIDIA_VISIBLE_DEVICES",
    b"CUDA_VERSION",
    b"nvidia-container-devices",
    b"nvidia-container-runtime-hook",
    b"nvidia-container-toolkit",
    b"cdi.k8s.io/",
)


def surely_not_gpu(raw, config_exists):
    """A cheap, conservative pre-check on the raw config.json bytes.

    True only when no request source can be present: none of the marker strings occurs
    anywhere in the file, and there are no annotations at all when a config file (which
    could name other annotation prefixes) exists. It does not even import json, whose
    import alone (via re) costs more than the 3% budget for containers without GPUs.
    Any occurrence anywhere, even in an argument, sends the spec down the full path.
    """
    if any(m in raw for m in REQUEST_MARKERS):
        return False
    return not (config_exists and b'"annotations"' in raw)
