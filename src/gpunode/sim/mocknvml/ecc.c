#include "common.h"

/* ------------------------------------------------------------------ */
/* ECC, retired pages, row remapping                                    */

static nvmlReturn_t ecc_total(const gpu_t *g, int errorType, int counterType,
                              unsigned long long *out)
{
    if (errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1 || !out)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!g->ecc_enabled)
        return NVML_ERROR_NOT_SUPPORTED;
    if (errorType == 0)
        *out = counterType == 0 ? g->ecc_cor_vol : g->ecc_cor_agg;
    else
        *out = counterType == 0 ? g->ecc_unc_vol : g->ecc_unc_agg;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, int errorType,
                                                int counterType, unsigned long long *eccCounts)
{
    GET_GPU(device, g);
    return ecc_total(g, errorType, counterType, eccCounts);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, int errorType,
                                                    int counterType, int locationType,
                                                    unsigned long long *count)
{
    GET_GPU(device, g);
    if (locationType < 0 || locationType >= MEMORY_LOCATION_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned long long total = 0;
    nvmlReturn_t rc = ecc_total(g, errorType, counterType, &total);
    if (rc != NVML_SUCCESS)
        return rc;
    *count = locationType == MEMORY_LOCATION_DRAM ? total : 0;
    return NVML_SUCCESS;
}

static nvmlReturn_t retired_pages(nvmlDevice_t device, int cause, unsigned int *pageCount,
                                  unsigned long long *addresses, unsigned long long *timestamps)
{
    GET_GPU(device, g);
    if (cause < 0 || cause > 1 || !pageCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = cause == 0 ? g->retired_sbe : g->retired_dbe;
    if (*pageCount < n) {
        *pageCount = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && !addresses)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < n; i++) {
        addresses[i] = 0x1000ULL * (i + 1) + (unsigned long long)cause * 0x100000ULL;
        if (timestamps)
            timestamps[i] = 1700000000ULL + i;
    }
    *pageCount = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, int cause,
                                              unsigned int *pageCount,
                                              unsigned long long *addresses)
{
    return retired_pages(device, cause, pageCount, addresses, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, int cause,
                                                 unsigned int *pageCount,
                                                 unsigned long long *addresses,
                                                 unsigned long long *timestamps)
{
    return retired_pages(device, cause, pageCount, addresses, timestamps);
}

GPU_GETTER(nvmlDeviceGetRetiredPagesPendingStatus, int, g->retired_pending ? 1 : 0)

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                              unsigned int *uncRows, unsigned int *isPending,
                                              unsigned int *failureOccurred)
{
    GET_GPU(device, g);
    REQUIRE(corrRows && uncRows && isPending && failureOccurred);
    *corrRows = g->remap_corrected;
    *uncRows = g->remap_uncorrected;
    *isPending = g->remap_pending;
    *failureOccurred = g->remap_failure;
    return NVML_SUCCESS;
}
