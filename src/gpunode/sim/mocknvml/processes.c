#include "common.h"

/* ------------------------------------------------------------------ */
/* processes: none run on a simulated GPU                               */

static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    GET_ANY(device, g, m);
    (void)g;
    (void)m;
    REQUIRE(infoCount);
    *infoCount = 0;
    return NVML_SUCCESS;
}

#define NO_PROCESSES(fn)                                                      \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *infoCount, void *infos) \
    {                                                                         \
        (void)infos;                                                          \
        return no_processes(device, infoCount);                               \
    }

NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3)
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v2)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses)
