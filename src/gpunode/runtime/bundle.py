"""A GPU create's spec, decided: the bundle's config.json in, the edited spec written back
and what the create still has to do out (``GpuCreate``: the hook's arguments, the summary,
whether the rootfs files may be written while the runtime creates). No process is started
here: gpunode.launch.shim carries the create out.

gpunode.runtime.surely_not_gpu is the cheap pre-check on the raw bytes that lets a create
without a GPU request skip all of this (the sh first stage applies the same markers).
"""

import os


class GpuCreate:
    """What the create of a GPU container still has to do once its spec is written: the
    hook arguments its edits carry, parsed (``args``, gpunode.hook.args.Args) only when
    first used, which is after runc's create has started."""

    def __init__(
        self, summary: str, bundle: str, rootfs: str, hook_argv: list[str], overlap=True
    ) -> None:
        self.summary = summary
        self.bundle = bundle
        self.rootfs = rootfs
        self.hook_argv = hook_argv
        self.overlap = overlap  # the rootfs files may be written while runc's create runs
        self._args = None

    @property
    def args(self):
        if self._args is None:
            from ..hook.args import parse_args

            self._args = parse_args(self.hook_argv)
        return self._args


def modify_bundle(bundle, cfg, log=lambda level, msg: None, raw=None):
    """Edit <bundle>/config.json for its GPU request. Returns a GpuCreate, or None when the
    container asks for no GPU (the file is then not touched). `raw`: the file's bytes when
    the caller has already read them. The spec gets no hook: the runtime (gpunode.launch.shim) does its work.

    A request this node has served before, unchanged since, gets the edits prepared then
    (gpunode.runtime.prepared) without the request parser, discovery or edits modules."""
    from ..util import fastjson
    from . import oci, prepared, specinputs

    path = os.path.join(bundle, "config.json")
    if raw is None:
        with open(path, "rb") as fh:
            raw = fh.read()
    spec = fastjson.loads(raw)
    rootfs = specinputs.rootfs_of(spec, bundle)
    # the request inputs before NVIDIA's hook goes: Docker's --gpus hook is one of them
    inputs = specinputs.inputs(spec, cfg)
    key = prepared.key(spec, cfg, rootfs, inputs)
    kept = prepared.lookup(key, cfg.dev_root, cfg.driver_root)
    removed_hooks = oci.remove_nvidia_hooks(spec)
    if kept is not None:
        edits = kept["edits"]
        summary = f"{kept['summary']}, prepared"
        hook_argv = kept["hook_argv"]
    else:
        edits, hook_argv, summary = plan_edits(
            spec, cfg, rootfs, key, inputs, lambda lvl, msg: log(lvl, f"{bundle}: {msg}")
        )
        if edits is None:  # no GPU request
            if removed_hooks:
                # Docker's --gpus hook with no GPU request: drop the hook, nothing else.
                oci.write_atomic(path, spec)
            return None
    overlap = not mounts_over_rootfs_files(spec, hook_argv)
    oci.apply_spec_edits(spec, edits)
    oci.write_atomic(path, spec)
    log("info", f"{bundle}: {summary}")
    return GpuCreate(summary, bundle, rootfs, hook_argv, overlap)


def plan_edits(spec, cfg, rootfs, key, inputs, log=lambda level, msg: None):
    """The full work of a GPU create (gpunode.runtime.plan) for the request ``inputs``
    (gpunode.runtime.specinputs): (spec edits without hooks, the hook's arguments,
    summary), kept for the next create of the same request when discovery came from an
    inventory cache still there (see gpunode.runtime.prepared); (None, None, None) for a
    spec without GPU request."""
    from . import oci, plan, prepared

    request = plan.request_from_inputs(inputs, cfg)
    if not request.is_gpu:
        if request.ignored_env is not None:
            from .request import ignored_note

            # info, not warning: on a secure node every CUDA-based image's own
            # ENV NVIDIA_VISIBLE_DEVICES=all reaches this gate in each pod without a GPU,
            # so the line is routine there, yet it is the only trace of a device plugin
            # on its envvar strategy giving pods nothing; info is the default log-level,
            # so it is written unless an administrator asked for warnings only.
            log("info", ignored_note(request))
        return None, None, None
    p = plan.make(request, cfg, rootfs)
    (hook,) = p.edits.hooks
    p.edits.hooks = []
    hook_argv = list(hook.args[1:])
    edits = oci.spec_edits(p.edits)
    summary = (
        f"GPUs {[g.index for g in p.selected]} "
        f"({', '.join(g.uuid for g in p.selected) or 'none'}), "
        + (f"MIG devices {', '.join(m.mig.uuid for m in p.migs)}, " if p.migs else "")
        + f"capabilities {','.join(sorted(request.capabilities))}, "
        f"{len(p.edits.devices)} devices, {len(p.edits.mounts)} mounts"
    )
    if p.discovery.from_cache and prepared.key(spec, cfg, rootfs, inputs) == key:
        # from the inventory cache the key names (a fresh discovery, or a refresh since
        # the key was taken, is kept by the next create instead)
        prepared.store(key, prepared.entry(edits, hook_argv, summary, p.mig_watch))
    return (
        edits,
        hook_argv,
        f"{summary}, discovery {'cached' if p.discovery.from_cache else 'fresh'}",
    )


def mounts_over_rootfs_files(spec, hook_argv):
    """Whether one of the spec's own mounts (the operator's) lands on a file the rootfs
    step writes: a ``--link`` path or one of /etc/ld.so.*. runc makes such a mount's
    target in the root, and replacing it by rename while runc runs would detach the mount
    in the container's namespace; such a container gets its rootfs files before runc
    starts, as the whole create used to."""
    links = {
        hook_argv[i + 1].partition("::")[2]
        for i in range(len(hook_argv) - 1)
        if hook_argv[i] == "--link"
    }
    for m in spec.get("mounts") or []:
        dest = os.path.normpath("/" + str(m.get("destination") or "").lstrip("/"))
        if dest in links or dest.startswith("/etc/ld.so"):
            return True
    return False
