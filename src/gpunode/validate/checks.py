"""Every check of `gpunode validate` run on this node, in the order the result lists them:
the GPUs (gpus), the versions (versions), the engine (engine), the containers (container),
the node's driver surroundings and drift (node).
The command line (options, output, exit codes) is gpunode.cli.validate."""

from __future__ import annotations

import socket
import time

from .. import __version__
from .expect import Expectations
from .model import Result


def validate(expect: Expectations, node: str | None = None) -> Result:
    """Run every check (no output). The checks' modules load here, not for --help."""
    from . import container, engine, gpus, versions
    from . import node as node_checks

    started = time.gmtime()
    t0 = time.monotonic()
    host = socket.gethostname()
    result = Result(node=node or host, hostname=host,
                    started=time.strftime("%Y-%m-%dT%H:%M:%SZ", started),
                    gpunode_version=__version__)  # fmt: skip
    inv, no_driver, seconds = gpus.collect()
    result.gpus, checks = gpus.evaluate(inv, no_driver, expect, seconds)
    result.checks += checks
    result.versions, checks = versions.evaluate(inv, expect)
    result.checks += checks
    info, checks = engine.evaluate(expect)
    result.checks += checks
    cri_client = (info or {}).get("cri") if expect.engine == "cri" else None
    runner = None
    if cri_client is not None:
        from . import cri

        runner = cri.runner(cri_client, expect.runtime_name)
    try:
        result.checks += container.evaluate(inv, expect, engine_up=info is not None, runner=runner)
    finally:
        if cri_client is not None:
            cri_client.close()
    # after the containers: what the runtime cached and generated for them is compared
    result.checks += node_checks.evaluate(inv)
    result.duration_s = time.monotonic() - t0
    return result
