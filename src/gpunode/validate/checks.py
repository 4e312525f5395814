"""Every check of `gpunode validate` run on this node, in the order the result lists them:
the GPUs (gpus), the versions (versions), the engine (engine), the containers (container),
the node's driver surroundings and drift (node).
The command line (options, output, exit codes) is gpunode.cli.validate."""

from __future__ import annotations

import socket
import time

from .. import __version__
from ..nvidia.inventory import attach_xid_events
from ..nvidia.xidevents import XidWatch
from .expect import Expectations
from .model import Result


def validate(expect: Expectations, node: str | None = None) -> Result:
    """Run every check (no output). The checks' modules load here, not for --help."""
    from . import container, engine, fabric, gpus, mig, versions
    from . import node as node_checks

    started = time.gmtime()
    t0 = time.monotonic()
    host = socket.gethostname()
    result = Result(node=node or host, hostname=host,
                    started=time.strftime("%Y-%m-%dT%H:%M:%SZ", started),
                    gpunode_version=__version__)  # fmt: skip
    # NVML's Xid events are watched from before the inventory until the containers are done:
    # an Xid the smoke tests provoke is judged with the GPU's other Xid errors
    with XidWatch() as watch:
        inv, no_driver, seconds = gpus.collect()
        result.versions, checks = versions.evaluate(inv, expect)
        later = checks
        info, checks = engine.evaluate(expect)
        later += checks
        cri_client = (info or {}).get("cri") if expect.engine == "cri" else None
        runner = None
        if cri_client is not None:
            from . import cri

            runner = cri.runner(cri_client, expect.runtime_name)
        try:
            done = container.evaluate(inv, expect, engine_up=info is not None, runner=runner)
            later += done
            if expect.engine == "cri":
                from . import cri

                later += cri.unallocated_after(cri_client, expect.runtime_name, runner, done)
        finally:
            if cri_client is not None:
                cri_client.close()
        if inv is not None and watch.unavailable is None:
            attach_xid_events(inv, watch.drain(), "NVML events while validating")
    fabric_node = fabric.collect() if inv is not None else None
    result.gpus, checks = gpus.evaluate(inv, no_driver, expect, seconds, fabric_node)
    result.checks += checks + mig.evaluate(inv, expect.mig_layout) + later
    # after the containers: what the runtime cached and generated for them is compared
    result.checks += node_checks.evaluate(inv)
    result.duration_s = time.monotonic() - t0
    return result
