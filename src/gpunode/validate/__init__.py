"""`gpunode validate`: prove one node works — GPUs healthy, versions as pinned, the engine
configured, and containers seeing exactly the GPUs they request.

Modules:
  model      Check, Result, statuses, the summary and exit code (schema gpunode.validate/v1)
  expect     what the node should be (flags and an inventory vars file)
  gpus       node.gpu_count, node.xid, node.fabric_manager and the per-GPU health checks,
             from gpunode's inventory
  fabric     an NVSwitch node's switches, fabric manager unit and package (node.fabric_manager)
  versions   driver loaded / installed / pinned, CUDA installed and compatible
  engine     daemon.json, the runtime's registration, the engine answering
  mig        the MIG layout (mig.mode, mig.layout) against a mig-parted config
  container  the probe image (built on the node) and the isolation and CUDA smoke tests,
             and mig.isolation per MIG device
  probe      what runs inside the containers (stdlib only: ctypes on the injected NVML)
  output     JSON, the human table, the Prometheus textfile
  command    the CLI subcommand

It uses gpunode.nvidia (the inventory) and gpunode.engines (daemon.json read as configure reads it) and
is loaded only by `gpunode validate`, never on the container start path.
"""
