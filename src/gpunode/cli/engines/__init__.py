"""Registering gpunode's runtime with container engines: docker (daemon.json), containerd
(a drop-in and ``imports``), and the file rules both follow (common)."""
