#include "common.h"

/* ------------------------------------------------------------------ */
/* modes                                                                */

GPU_GETTER(nvmlDeviceGetPersistenceMode, int, g->persistence ? 1 : 0)

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int *current, int *pending)
{
    GET_GPU(device, g);
    REQUIRE(current && pending);
    *current = g->ecc_enabled ? 1 : 0;
    *pending = g->ecc_enabled ? 1 : 0;
    return NVML_SUCCESS;
}

GPU_GETTER(nvmlDeviceGetCurrentEccMode, int, g->ecc_enabled ? 1 : 0)

GPU_GETTER(nvmlDeviceGetPendingEccMode, int, g->ecc_enabled ? 1 : 0)

GPU_GETTER(nvmlDeviceGetDefaultEccMode, int, g->ecc_enabled ? 1 : 0)

GPU_GETTER(nvmlDeviceGetComputeMode, int, g->compute_mode)

GPU_GETTER(nvmlDeviceGetDisplayMode, int, 0 /* no display on a data-center GPU */)

EXPORT nvmlReturn_t nvmlDeviceGetDisplayActive(nvmlDevice_t device, int *isActive)
{
    return nvmlDeviceGetDisplayMode(device, isActive);
}

GPU_GETTER(nvmlDeviceGetVirtualizationMode, int, 0 /* NONE: bare metal */)

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major_, int *minor_)
{
    GET_ANY(device, g, m);
    (void)m;
    REQUIRE(major_ && minor_);
    *major_ = g->cc_major;
    *minor_ = g->cc_minor;
    return NVML_SUCCESS;
}
