"""The container-start path's processes: what carries a create (or a hook's run) out once
gpunode.runtime has decided its spec.

dispatcher.sh (the runtime's sh first stage) and hookstage.sh (the hooks') are rendered by
firststage (install-links) with protocol's names; shim is the Python runtime's program
(argv, the create's skeleton), process its primitives (find, exec, spawn, wait, delete,
one error line), transport the seam (Local, Conversation), resident the service that
serves creates and hooks without a Python start-up, nvhook the stand-in for NVIDIA's hook.
docs/runtime.md draws the routes.

Nothing is imported here: the runtime's launcher imports gpunode.launch.shim on every
container operation.
"""
