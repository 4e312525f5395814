#include "common.h"

/* ------------------------------------------------------------------ */
/* memory                                                               */

static void memory_of(const gpu_t *g, const mig_t *m, unsigned long long *total,
                      unsigned long long *reserved, unsigned long long *used)
{
    if (m) {
        *total = m->gip->memory_mib * 1024ULL * 1024ULL;
        *reserved = 0;
        *used = 0;
        return;
    }
    *total = g->memory_total;
    *reserved = g->memory_reserved;
    *used = g->memory_used;
}

static unsigned long long mem_free(unsigned long long total, unsigned long long reserved,
                                   unsigned long long used)
{
    unsigned long long taken = used + reserved;
    return taken >= total ? 0 : total - taken;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    unsigned long long total, reserved, used;
    GET_ANY(device, g, m);
    REQUIRE(memory);
    memory_of(g, m, &total, &reserved, &used);
    memory->total = total;
    memory->used = used;
    memory->free = mem_free(total, reserved, used);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    unsigned long long total, reserved, used;
    GET_ANY(device, g, m);
    REQUIRE(memory);
    if (memory->version != MEMORY_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory_of(g, m, &total, &reserved, &used);
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = mem_free(total, reserved, used);
    return NVML_SUCCESS;
}

typedef struct {
    unsigned long long bar1Total, bar1Free, bar1Used;
} nvmlBAR1Memory_t;

/* BAR1: the profile's aperture, none of it mapped (no process runs). A MIG device has its
 * GPU instance's share, by memory slots, less one MiB: what NVIDIA's MIG guide shows (a
 * 3g.40gb of an A100 80GB: 65535 MiB of 131072). */
EXPORT nvmlReturn_t nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_t device, nvmlBAR1Memory_t *bar1Memory)
{
    const unsigned long long mib = 1024ULL * 1024ULL;
    GET_ANY(device, g, m);
    REQUIRE(bar1Memory);
    unsigned long long total = g->bar1_total;
    if (!total)
        return NVML_ERROR_NOT_SUPPORTED;
    if (m) {
        if (!g_memory_slots || m->gip->placement_size > g_memory_slots)
            return NVML_ERROR_NOT_SUPPORTED;
        total = total / mib * m->gip->placement_size / g_memory_slots;
        total = (total ? total - 1 : 0) * mib;
    }
    bar1Memory->bar1Total = total;
    bar1Memory->bar1Used = 0;
    bar1Memory->bar1Free = total;
    return NVML_SUCCESS;
}
