"""A pynvml stand-in with MIG state that changes, for gpunode.mig's unit tests: the calls
gpunode.nvidia.nvml and gpunode.mig make, with NVML's errors (pynvml's own classes) for
bad placements, no room, GIs still holding CIs and callers that are not root.

It is not a second MIG simulator: the geometry and its arithmetic (placements, GI ids, the
memory slots an instance takes, the compute instance profiles a GI offers) are the
simulator's one table, gpunode.sim.miggeometry; what is left here is NVML's calls and
refusals on Python objects as state, so a test can reach in (pending resets, races, profiles listed only
with MIG on, another geometry). It stays beside the real mock for that reason
(docs/architecture.md); tests/unit/mig/test_apply_mocknvml.py
(test_the_unit_tests_fake_nvml_reads_as_the_mock_does) holds the two equal for gpunode mig.
A100 80GB by default. Handles of GPU and compute instances are Python objects in
``ctypes.py_object`` arrays.
"""

from __future__ import annotations

import ctypes
import types

import pynvml

from gpunode.sim.miggeometry import CI_SHAPES, MIG_SHAPES, ci_spanning

GIB = 1024**3
MIB = 1024**2


def err(code):
    return pynvml.NVMLError(code)


class Gpu:
    def __init__(self, index, name="NVIDIA A100-SXM4-80GB", *, mig_capable=True, mig=False,
                 pci_device_id=0x20B210DE, shapes=MIG_SHAPES, memory=80 * GIB):
        self.index = index
        self.name = name
        self.uuid = f"GPU-00000000-0000-4000-8000-00000000000{index}"
        self.mig_capable = mig_capable
        self.current = self.pending = int(mig)
        self.pci_device_id = pci_device_id
        self.shapes = shapes
        self.memory = memory
        self.gis: dict[int, Gi] = {}

    def profile_name(self, shape):
        return shape.name(self.memory // MIB)


class Gi:
    def __init__(self, gpu, shape, start):
        self.gpu, self.shape, self.start = gpu, shape, start
        self.id = shape.gi_id(start)
        self.cis: dict[int, Ci] = {}
        self.alive = True


class Ci:
    def __init__(self, gi, ci_id, slices):
        self.gi, self.id, self.slices = gi, ci_id, slices
        self.alive = True


class MigDevice:
    """A MIG device handle: a GPU instance's compute instance."""

    def __init__(self, ci):
        gpu, profile = ci.gi.gpu, ci.gi.gpu.profile_name(ci.gi.shape)
        self.ci, self.name = ci, f"{gpu.name} MIG {profile}"
        self.uuid = f"MIG-{gpu.index}-{ci.gi.id}-{ci.id}"
        self.memory = ci.gi.shape.memory_mib(gpu.memory // MIB) * MIB


class FakeNvml(types.SimpleNamespace):
    NVMLError = pynvml.NVMLError
    NVMLError_NotFound = pynvml.NVMLError_NotFound
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVML_GPU_INSTANCE_PROFILE_COUNT = pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT = pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_DEVICE_MIG_DISABLE = 0
    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t
    c_nvmlGpuInstance_t = ctypes.py_object
    c_nvmlComputeInstance_t = ctypes.py_object

    def __init__(self, gpus, *, root=True, profiles_need_mig=False):
        super().__init__(gpus=list(gpus), root=root, profiles_need_mig=profiles_need_mig,
                         writes=[])

    # ---------------------------------------------------------------- device
    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i):
        return self.gpus[i]

    def nvmlDeviceGetUUID(self, h):
        return h.uuid

    def nvmlDeviceGetName(self, h):
        return h.name

    def nvmlDeviceGetMinorNumber(self, h):
        return h.index

    def nvmlDeviceGetBrand(self, h):
        return pynvml.NVML_BRAND_NVIDIA

    def nvmlDeviceGetCudaComputeCapability(self, h):
        return 8, 0

    def nvmlDeviceGetPciInfo(self, h):
        return types.SimpleNamespace(pciDeviceId=h.pci_device_id, busId=b"00000000:07:00.0")

    def nvmlDeviceGetMemoryInfo(self, h):
        return types.SimpleNamespace(total=h.memory)

    def nvmlDeviceGetMaxMigDeviceCount(self, h):
        return 7 if h.mig_capable else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h, slot):
        cis = [ci for gi in sorted(h.gis.values(), key=lambda g: g.id)
               for ci in sorted(gi.cis.values(), key=lambda c: c.id)]
        if slot >= len(cis):
            raise err(pynvml.NVML_ERROR_NOT_FOUND)
        return MigDevice(cis[slot])

    def nvmlDeviceGetGpuInstanceId(self, mig):
        return mig.ci.gi.id

    def nvmlDeviceGetComputeInstanceId(self, mig):
        return mig.ci.id

    def nvmlDeviceGetMigMode(self, h):
        if not h.mig_capable:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [h.current, h.pending]

    def nvmlDeviceSetMigMode(self, h, mode):
        if not h.mig_capable:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if not self.root:
            raise err(pynvml.NVML_ERROR_NO_PERMISSION)
        if h.gis and not mode:
            raise err(pynvml.NVML_ERROR_IN_USE)
        self.writes.append(("mode", h.index, mode))
        h.current = h.pending = mode
        return 0

    # ---------------------------------------------------------------- GPU instances
    def _shape(self, h, profile_id):
        for shape in h.shapes:
            if shape.id == profile_id:
                return shape
        raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetGpuInstanceProfileInfo(self, h, index, version=2):
        if not h.mig_capable or (self.profiles_need_mig and not h.current):
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        for shape in h.shapes:
            if shape.index == index:
                return types.SimpleNamespace(
                    id=shape.id, sliceCount=shape.slices, instanceCount=shape.instances,
                    memorySizeMB=shape.memory_mib(h.memory // MIB),
                    name=f"MIG {h.profile_name(shape)}".encode(),
                )
        raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, h, profile_id, array, count_ref):
        shape = self._shape(h, profile_id)
        for i, start in enumerate(shape.starts):
            array[i].start, array[i].size = start, shape.size
        count_ref._obj.value = len(shape.starts)

    def nvmlDeviceGetGpuInstances(self, h, profile_id, array, count_ref):
        gis = [gi for gi in sorted(h.gis.values(), key=lambda g: g.id)
               if gi.shape.id == profile_id]
        for i, gi in enumerate(gis):
            array[i] = gi
        count_ref._obj.value = len(gis)

    def nvmlGpuInstanceGetInfo(self, gi):
        placement = types.SimpleNamespace(start=gi.start, size=gi.shape.size)
        return types.SimpleNamespace(id=gi.id, profileId=gi.shape.id, placement=placement)

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, h, profile_id, placement_ref):
        if not self.root:
            raise err(pynvml.NVML_ERROR_NO_PERMISSION)
        if not h.current:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        shape = self._shape(h, profile_id)
        placement = placement_ref._obj
        if placement.start not in shape.starts or placement.size != shape.size:
            raise err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if any(shape.slots(placement.start) & gi.shape.slots(gi.start) for gi in h.gis.values()):
            raise err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        gi = Gi(h, shape, placement.start)
        h.gis[gi.id] = gi
        self.writes.append(("create", h.index, h.profile_name(shape), placement.start))
        return gi

    def nvmlGpuInstanceDestroy(self, gi):
        if not self.root:
            raise err(pynvml.NVML_ERROR_NO_PERMISSION)
        if gi.cis:
            raise err(pynvml.NVML_ERROR_IN_USE)
        del gi.gpu.gis[gi.id]
        gi.alive = False
        self.writes.append(("destroy", gi.gpu.index, gi.id))

    # ---------------------------------------------------------------- compute instances
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi, index, eng, version=2):
        count = CI_SHAPES[index].count_in(gi.shape.slices) if index < len(CI_SHAPES) else 0
        if not count:
            raise err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return types.SimpleNamespace(id=index, sliceCount=CI_SHAPES[index].slices,
                                     instanceCount=count)

    def nvmlGpuInstanceGetComputeInstances(self, gi, profile_id, array, count_ref):
        cis = [ci for ci in sorted(gi.cis.values(), key=lambda c: c.id)
               if ci_spanning(ci.slices).index == profile_id]
        for i, ci in enumerate(cis):
            array[i] = ci
        count_ref._obj.value = len(cis)

    def nvmlComputeInstanceGetInfo(self, ci):
        return types.SimpleNamespace(id=ci.id)

    def nvmlGpuInstanceCreateComputeInstance(self, gi, profile_id):
        if not self.root:
            raise err(pynvml.NVML_ERROR_NO_PERMISSION)
        slices = CI_SHAPES[profile_id].slices
        used = sum(ci.slices for ci in gi.cis.values())
        if used + slices > gi.shape.slices:
            raise err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
        ci = Ci(gi, next(i for i in range(8) if i not in gi.cis), slices)
        gi.cis[ci.id] = ci
        return ci

    def nvmlComputeInstanceDestroy(self, ci):
        if not self.root:
            raise err(pynvml.NVML_ERROR_NO_PERMISSION)
        del ci.gi.cis[ci.id]
        ci.alive = False

    # ---------------------------------------------------------------- helpers for tests
    def make(self, gpu_index, profile, start, ci_slices=None):
        """Set up an instance directly (as the node had it before the test)."""
        h = self.gpus[gpu_index]
        shape = next(s for s in h.shapes if h.profile_name(s) == profile)
        gi = Gi(h, shape, start)
        h.gis[gi.id] = gi
        for slices in ci_slices if ci_slices is not None else [shape.slices]:
            ci = Ci(gi, len(gi.cis), slices)
            gi.cis[ci.id] = ci
        return gi


def layout_of(gpu):
    """{profile: count} of the fake GPU's instances, each with its CIs' slices."""
    out: dict[str, int] = {}
    for gi in gpu.gis.values():
        name = gpu.profile_name(gi.shape)
        out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items()))
