"""gpunode-hook: the OCI ``createContainer`` hook.

runc runs it inside the container's mount namespace after the rootfs and the spec's
mounts are in place but before pivot_root, so "/" is still the host's view and the
container root is just a directory. Everything under that directory belongs to the
image and may be hostile, hence (see docs, section 7 of the toolkit reference):

* every container path is resolved with ``safepath`` and used as an fd, never as a
  string; mounts go onto ``/proc/self/fd/N``;
* files are written to a temporary name and ``renameat``-ed, relative to a directory fd;
* the hook never consults its own environment (PATH, LD_*); binaries by absolute path.
  It leaves the working directory runc gives it (the container root) at once.

The package: main (the hand-made argument parser and the subcommand table), one module per
subcommand (symlinks: create-symlinks, ldcache: update-ldcache, procdriver:
mount-proc-driver, configure: all three in one run), and what they share: linux (system
calls through ctypes), state (the OCI state and the container root), fileops (fd-relative
file primitives), errors, timing (issue 28's per-phase timings). Nothing is imported here.

TIMING_LOG is here, in the package both start paths load anyway, so that the shim and the
hook can see whether timings are asked for (one stat) without loading gpunode.hook.timing.
"""

# Per-phase timings are appended here while it exists (gpunode.hook.timing).
TIMING_LOG = "/run/gpunode/timing.log"
