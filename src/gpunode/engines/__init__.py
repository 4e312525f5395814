"""Registering gpunode's runtime with container engines: docker (daemon.json), containerd
(a drop-in and ``imports``), the file rules both follow (common), and runtime_setup, the
gpu_container_runtime role's whole work in one run (`gpunode runtime setup`).

Library code, not CLI: gpunode.cli parses the options and prints; gpunode.validate reads
daemon.json through docker.load_daemon_json. runtime_setup lives here rather than in
gpunode.runtime because it composes the engines' editors with the runtime's configuration
and CDI spec: engines sits above runtime, and the runtime (the container-start path, with
its import budget) never imports the engines."""
