#include "common.h"

/* ------------------------------------------------------------------ */
/* thermals and power                                                   */

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensorType, unsigned int *temp)
{
    GET_GPU(device, g);
    REQUIRE(temp && sensorType == 0);
    *temp = g->temperature;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temp)
{
    GET_GPU(device, g);
    REQUIRE(temp);
    if (temp->version != TEMPERATURE_V1_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    REQUIRE(temp->sensorType == 0);
    temp->temperature = (int)g->temperature;
    return NVML_SUCCESS;
}

GPU_GETTER(nvmlDeviceGetPowerUsage, unsigned int, g->power_usage)

GPU_GETTER(nvmlDeviceGetEnforcedPowerLimit, unsigned int, g->power_limit)

GPU_GETTER(nvmlDeviceGetPowerManagementLimit, unsigned int, g->power_limit)

/* ------------------------------------------------------------------ */
/* power                                                                */

GPU_GETTER(nvmlDeviceGetPowerManagementMode, int, 1 /* enabled */)

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementDefaultLimit(nvmlDevice_t device,
                                                             unsigned int *defaultLimit)
{
    return nvmlDeviceGetPowerManagementLimit(device, defaultLimit);
}
