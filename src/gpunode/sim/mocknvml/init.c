#include "common.h"

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
unsigned int g_refcount;

/* ------------------------------------------------------------------ */
/* device-node visibility                                               */

static int is_nvidia_chrdev(const char *path, unsigned int want_minor)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 0;
    if (!S_ISCHR(st.st_mode))
        return 0;
    return major(st.st_rdev) == NVIDIA_MAJOR && minor(st.st_rdev) == want_minor;
}

static int cmp_bus(const void *a, const void *b)
{
    const struct nvmlDevice_st *const *x = a;
    const struct nvmlDevice_st *const *y = b;
    return strcmp((*x)->gpu.bus_id, (*y)->gpu.bus_id);
}

static void compute_visibility(void)
{
    char path[64];
    g_nvisible = 0;
    for (unsigned int i = 0; i < g_ngpus; i++) {
        gpu_t *g = &g_gpus[i].gpu;
        snprintf(path, sizeof(path), "/dev/nvidia%u", g->minor);
        g->visible = is_nvidia_chrdev(path, g->minor);
        if (g->visible)
            g_order[g_nvisible++] = &g_gpus[i];
    }
    qsort(g_order, g_nvisible, sizeof(g_order[0]), cmp_bus);
    for (unsigned int i = 0; i < g_nvisible; i++)
        g_order[i]->gpu.index = i;

    mig_reset();
}

/* ------------------------------------------------------------------ */
/* init / shutdown                                                      */

static nvmlReturn_t do_init(void)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0) {
        parse_profile();
        if (!g_have_profile) {
            rc = NVML_ERROR_DRIVER_NOT_LOADED;
        } else if (!is_nvidia_chrdev("/dev/nvidiactl", NVIDIACTL_MINOR)) {
            rc = NVML_ERROR_DRIVER_NOT_LOADED;
        } else {
            compute_visibility();
        }
    }
    if (rc == NVML_SUCCESS)
        g_refcount++;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlInit(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInit_v2(void) { return do_init(); }
EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags;
    return do_init();
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&g_lock);
    if (g_refcount == 0)
        rc = NVML_ERROR_UNINITIALIZED;
    else
        g_refcount--;
    pthread_mutex_unlock(&g_lock);
    return rc;
}

int initialized(void)
{
    pthread_mutex_lock(&g_lock);
    int r = g_refcount > 0;
    pthread_mutex_unlock(&g_lock);
    return r;
}


/* The answer of every generated stub (see the header comment). Hidden: the
 * library exports nvml* names only. */
__attribute__((visibility("hidden"))) nvmlReturn_t gpunode_mock_unsupported(void)
{
    CHECK_INIT();
    return NVML_ERROR_NOT_SUPPORTED;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
    case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request.";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED: return "The requested vgpu operation is not available on target device, becasue ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient resources available";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}
