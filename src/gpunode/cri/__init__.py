"""A CRI client: gpunode's proof through the real consumer of a node's container runtime.

kubelet talks to containerd through the CRI (gRPC on containerd's socket); device plugins only
hand kubelet environment variables, annotations or CDI device names to put into the CRI
requests. So whether a pod gets exactly its GPUs is decided by containerd's CRI plugin plus the
runtime behind its handler — gpunode's. This package speaks that protocol without kubelet:

  api.proto   the CRI messages used, upstream names and numbers (runtime.v1)
  proto       compiles api.proto with grpcio-tools into a cache keyed by its hash
  client      RunPodSandbox/CreateContainer/StartContainer/ContainerStatus/logs/removal
  pause       the sandbox (pause) image, built locally and packed as an image archive

It runs where the tests and the operator run (grpcio is a development dependency, never
installed on nodes); it imports nothing from the rest of gpunode but util.
"""
