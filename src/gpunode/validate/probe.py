"""The in-container probe: what a container sees of the GPUs, printed as one JSON line.

Runs inside the validation image with the node's python3 (``python3 -I -S``), so it uses
the standard library only, and NVML's public C API through the library the runtime injected
(ctypes on ``libnvidia-ml.so.1``: nvmlInit_v2, nvmlDeviceGetCount_v2,
nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetUUID). CUDA: cuInit and cuDeviceGetCount on
``libcuda.so.1`` when the runtime injected one. It also lists the GPU device nodes
(``/dev/nvidia<N>``) and ``/proc/driver/nvidia/gpus``.
"""

import ctypes
import json
import os


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
            gpus.append({"index": i, "uuid": buf.value.decode()} if not rc
                        else {"index": i, "error": err(rc)})  # fmt: skip
        return {"count": count.value, "gpus": gpus}
    finally:
        lib.nvmlShutdown()


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


def _procfs():
    try:
        return sorted(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return None


def main():
    print(json.dumps({"nvml": _nvml(), "cuda": _cuda(), "dev": _devices(), "proc": _procfs()}))


if __name__ == "__main__":
    main()
