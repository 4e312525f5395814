#include "common.h"

/* ------------------------------------------------------------------ */
/* system queries                                                       */

nvmlReturn_t copy_out(char *buf, unsigned int length, const char *src)
{
    if (!buf)
        return NVML_ERROR_INVALID_ARGUMENT;
    size_t n = strlen(src);
    if ((size_t)length < n + 1)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(buf, src, n + 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    CHECK_INIT();
    return copy_out(version, length, g_driver_version);
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    CHECK_INIT();
    return copy_out(version, length, g_nvml_version);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    CHECK_INIT();
    if (!cudaDriverVersion)
        return NVML_ERROR_INVALID_ARGUMENT;
    *cudaDriverVersion = g_cuda_version;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ------------------------------------------------------------------ */
/* system: no S-class units, no excluded GPUs, no HIC                   */

static nvmlReturn_t zero_count(unsigned int *count)
{
    CHECK_INIT();
    REQUIRE(count);
    *count = 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlUnitGetCount(unsigned int *unitCount) { return zero_count(unitCount); }

EXPORT nvmlReturn_t nvmlGetExcludedDeviceCount(unsigned int *deviceCount)
{
    return zero_count(deviceCount);
}

EXPORT nvmlReturn_t nvmlSystemGetHicVersion(unsigned int *hwbcCount, void *hwbcEntries)
{
    (void)hwbcEntries;
    return zero_count(hwbcCount);
}

EXPORT nvmlReturn_t nvmlUnitGetHandleByIndex(unsigned int index, void *unit)
{
    (void)index;
    (void)unit;
    CHECK_INIT();
    return NVML_ERROR_INVALID_ARGUMENT; /* index >= nvmlUnitGetCount() */
}

EXPORT nvmlReturn_t nvmlGetExcludedDeviceInfoByIndex(unsigned int index, void *info)
{
    (void)index;
    (void)info;
    CHECK_INIT();
    return NVML_ERROR_INVALID_ARGUMENT;
}
