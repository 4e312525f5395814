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

/* ------------------------------------------------------------------ */
/* performance state, utilisation, field values                         */

/* An idle data-center GPU holds P0 with persistence on; nothing runs on a simulated one. */
GPU_GETTER(nvmlDeviceGetPerformanceState, int, 0 /* NVML_PSTATE_0 */)

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

GPU_GETTER(nvmlDeviceGetUtilizationRates, nvmlUtilization_t, ((nvmlUtilization_t){0, 0}))

#define FI_DEV_NVLINK_LINK_COUNT 91
#define FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT 147
#define FI_DEV_NVLINK_GET_SPEED 164
#define FI_DEV_NVLINK_GET_STATE 165
#define FI_DEV_NVLINK_GET_VERSION 166
#define FI_DEV_POWER_AVERAGE 185
#define FI_DEV_POWER_INSTANT 186
#define FI_DEV_POWER_DEFAULT_LIMIT 189
#define FI_DEV_POWER_CURRENT_LIMIT 190
#define FI_DEV_POWER_REQUESTED_LIMIT 192
#define SCOPE_GPU 0 /* power fields: the GPU (1 would be the module); link fields: the link */
#define VALUE_TYPE_UNSIGNED_INT 1
/* More fields than any caller asks for at once (nvidia-smi's largest: a field per NVLink):
 * a count beyond is a caller's mistake, refused before a value is written. */
#define FIELD_VALUES_MAX 4096

typedef struct {
    unsigned int fieldId;
    unsigned int scopeId;
    long long timestamp;
    long long latencyUsec;
    int valueType;
    nvmlReturn_t nvmlReturn;
    unsigned long long value; /* nvmlValue_t: a union of 8 bytes */
} nvmlFieldValue_t;
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "nvmlFieldValue_t layout");

static int link_up(const gpu_t *g, unsigned int link)
{
    return link < g->nvlinks && link < 64 && !((g->nvlink_down >> link) & 1ULL);
}

/* One field of a GPU: 1 and *out set, or 0 (NOT_SUPPORTED). */
static int field_value(const gpu_t *g, unsigned int field, unsigned int scope, unsigned int *out)
{
    unsigned int n = 0;
    switch (field) {
    case FI_DEV_NVLINK_LINK_COUNT:
        *out = g->nvlinks;
        return g->nvlinks > 0;
    case FI_DEV_NVSWITCH_CONNECTED_LINK_COUNT:
        for (unsigned int l = 0; l < g->nvlinks && l < g->npeers; l++)
            n += link_up(g, l) && g->nvswitch_device_id && !peer_is_gpu(&g->peers[l]);
        *out = n;
        return n > 0;
    case FI_DEV_NVLINK_GET_STATE:
        *out = (unsigned int)link_up(g, scope);
        return scope < g->nvlinks;
    case FI_DEV_NVLINK_GET_SPEED:
        *out = g->nvlink_speed;
        return g->nvlink_speed && link_up(g, scope);
    case FI_DEV_NVLINK_GET_VERSION:
        *out = g->nvlink_version;
        return g->nvlink_version && scope < g->nvlinks;
    case FI_DEV_POWER_AVERAGE:
    case FI_DEV_POWER_INSTANT:
        *out = g->power_usage; /* milliwatts */
        return scope == SCOPE_GPU;
    case FI_DEV_POWER_DEFAULT_LIMIT:
    case FI_DEV_POWER_CURRENT_LIMIT:
    case FI_DEV_POWER_REQUESTED_LIMIT:
        *out = g->power_limit;
        return scope == SCOPE_GPU;
    default:
        return 0;
    }
}

/* The NVLink and power fields a profile gives; every other field answers NOT_SUPPORTED in
 * its own nvmlReturn, which callers (nvidia-smi's power readings and `nvlink -s` among
 * them) read per value, not from the call's return. */
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                             nvmlFieldValue_t *values)
{
    GET_GPU(device, g);
    REQUIRE(values && valuesCount >= 0 && valuesCount <= FIELD_VALUES_MAX);
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        unsigned int value = 0;
        int ok = field_value(g, v->fieldId, v->scopeId, &value);
        v->timestamp = 0;
        v->latencyUsec = 0;
        v->valueType = VALUE_TYPE_UNSIGNED_INT;
        v->value = ok ? value : 0;
        v->nvmlReturn = ok ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
    }
    return NVML_SUCCESS;
}
