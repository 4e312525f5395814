"""The in-container probe: what a container sees of the GPUs, printed as one JSON line.

Runs inside the validation image with the node's python3 (``python3 -I -S``), so it uses
the standard library only, and NVML's public C API through the library the runtime injected
(ctypes on ``libnvidia-ml.so.1``: nvmlInit_v2, nvmlDeviceGetCount_v2,
nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID; per GPU its MIG devices, the way
gpunode.nvidia.nvml.mig_devices walks them: nvmlDeviceGetMigMode,
nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetMigDeviceHandleByIndex, NOT_FOUND an empty
slot). CUDA: cuInit and cuDeviceGetCount on ``libcuda.so.1`` when the runtime injected one.
It also lists the GPU device nodes (``/dev/nvidia<N>``), the MIG capability nodes
(``/dev/nvidia-caps/nvidia-cap<N>``) and ``/proc/driver/nvidia/gpus``.
"""

import ctypes
import json
import os

NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_FUNCTION_NOT_FOUND = 13


def _nvml():
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError as exc:
        return {"error": f"cannot load libnvidia-ml.so.1: {exc}"}
    lib.nvmlErrorString.restype = ctypes.c_char_p

    def err(rc):
        return f"{lib.nvmlErrorString(rc).decode(errors='replace')} ({rc})"

    rc = lib.nvmlInit_v2()
    if rc:
        return {"error": f"nvmlInit_v2: {err(rc)}"}
    try:
        count = ctypes.c_uint()
        rc = lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        if rc:
            return {"error": f"nvmlDeviceGetCount_v2: {err(rc)}"}
        gpus = []
        for i in range(count.value):
            handle = ctypes.c_void_p()
            rc = lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(handle))
            if rc:
                gpus.append({"index": i, "error": err(rc)})
                continue
            buf = ctypes.create_string_buffer(96)
            rc = lib.nvmlDeviceGetUUID(handle, buf, 96)
            gpu = {"index": i, "uuid": buf.value.decode()} if not rc else {"index": i, "error": err(rc)}
            if not rc:
                gpu.update(_mig(lib, handle, err))
            gpus.append(gpu)
        return {"count": count.value, "gpus": gpus}
    finally:
        lib.nvmlShutdown()


def _mig(lib, handle, err):
    """{"mig": [the MIG devices' UUIDs, in NVML's order]} when MIG mode is on; {} for a GPU
    without MIG (or an NVML without the calls); {"mig_error": ...} when the walk failed."""
    current, pending = ctypes.c_uint(), ctypes.c_uint()
    try:
        rc = lib.nvmlDeviceGetMigMode(handle, ctypes.byref(current), ctypes.byref(pending))
    except AttributeError:
        return {}
    if rc in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_FUNCTION_NOT_FOUND):
        return {}
    if rc:
        return {"mig_error": f"nvmlDeviceGetMigMode: {err(rc)}"}
    if not current.value:
        return {}
    slots = ctypes.c_uint()
    rc = lib.nvmlDeviceGetMaxMigDeviceCount(handle, ctypes.byref(slots))
    if rc:
        return {"mig_error": f"nvmlDeviceGetMaxMigDeviceCount: {err(rc)}"}
    out = []
    for slot in range(slots.value):
        mig = ctypes.c_void_p()
        rc = lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot, ctypes.byref(mig))
        if rc == NVML_ERROR_NOT_FOUND:
            continue
        if rc:
            return {"mig_error": f"nvmlDeviceGetMigDeviceHandleByIndex({slot}): {err(rc)}"}
        buf = ctypes.create_string_buffer(96)
        rc = lib.nvmlDeviceGetUUID(mig, buf, 96)
        if rc:
            return {"mig_error": f"nvmlDeviceGetUUID of MIG slot {slot}: {err(rc)}"}
        out.append(buf.value.decode())
    return {"mig": out}


def _cuda():
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        return {"absent": True, "error": f"cannot load libcuda.so.1: {exc}"}
    rc = lib.cuInit(0)
    if rc:
        name = ctypes.c_char_p()
        lib.cuGetErrorName(rc, ctypes.byref(name))
        text = name.value.decode() if name.value else "unknown"
        return {"init": rc, "error": f"cuInit: {text} ({rc})"}
    count = ctypes.c_int()
    rc = lib.cuDeviceGetCount(ctypes.byref(count))
    if rc:
        return {"init": 0, "error": f"cuDeviceGetCount: {rc}"}
    return {"init": 0, "count": count.value}


def _devices():
    names = os.listdir("/dev")
    return sorted(int(n[6:]) for n in names if n.startswith("nvidia") and n[6:].isdigit())


def _caps():
    try:
        names = os.listdir("/dev/nvidia-caps")
    except OSError:
        return []
    return sorted(int(n[10:]) for n in names if n.startswith("nvidia-cap") and n[10:].isdigit())


def _procfs():
    try:
        return sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return None


def main():
    print(json.dumps({"nvml": _nvml(), "cuda": _cuda(), "dev": _devices(), "caps": _caps(),
                      "proc": _procfs()}))  # fmt: skip


if __name__ == "__main__":
    main()
