"""What a container sees of the GPUs: device nodes, NVML, /proc/driver/nvidia.

Runs inside test containers (workload image, pynvml on PYTHONPATH); prints JSON.
"""

import json
import os

out = {"dev": sorted(n for n in os.listdir("/dev") if n.startswith("nvidia"))}
try:
    out["dev_caps"] = sorted(os.listdir("/dev/nvidia-caps"))
except OSError:
    out["dev_caps"] = []
caps_root = "/proc/driver/nvidia/capabilities"
out["proc_caps"] = sorted(
    os.path.relpath(os.path.join(d, f), caps_root) for d, _, fs in os.walk(caps_root) for f in fs
)
try:
    out["proc_gpus"] = sorted(os.listdir("/proc/driver/nvidia/gpus"))
except OSError as exc:
    out["proc_gpus"] = f"error: {exc.strerror}"
try:
    with open("/proc/driver/nvidia/params") as fh:
        out["modify_device_files"] = [ln for ln in fh if ln.startswith("ModifyDeviceFiles")]
except OSError:
    out["modify_device_files"] = None
try:
    import pynvml as N

    N.nvmlInit()
    handles = [N.nvmlDeviceGetHandleByIndex(i) for i in range(N.nvmlDeviceGetCount())]
    out["nvml"] = [N.nvmlDeviceGetUUID(h) for h in handles]
    # MIG as device plugins walk it: mode, then the MIG devices that exist
    out["mig"] = [
        [*N.nvmlDeviceGetMigMode(h), N.nvmlDeviceGetMaxMigDeviceCount(h)] for h in handles
    ]
    # the MIG devices NVML shows per GPU, in its order (UUIDs)
    out["mig_devices"] = []
    for h in handles:
        found = []
        for i in range(N.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                found.append(N.nvmlDeviceGetUUID(N.nvmlDeviceGetMigDeviceHandleByIndex(h, i)))
            except N.NVMLError:
                continue
        out["mig_devices"].append(found)
    out["driver"] = N.nvmlSystemGetDriverVersion()
    N.nvmlShutdown()
except Exception as exc:
    out["nvml"] = f"error: {type(exc).__name__}"
out["libcuda_link"] = os.path.islink("/usr/lib/x86_64-linux-gnu/libcuda.so")
out["env_ld_preload"] = os.environ.get("LD_PRELOAD")
print(json.dumps(out))
