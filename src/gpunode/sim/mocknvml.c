/*
 * gpunode mock NVML: a tiny stand-in for libnvidia-ml.so.1 that the unmodified
 * nvidia-ml-py (pynvml) package can load.  It simulates the GPUs of one node.
 *
 * The node's description (the "profile") is embedded in the exported
 * gpunode_profile_blob by gpunode.sim.mocknvml.embed_profile(): a magic first
 * line followed by NUL-terminated text lines of TAB-separated fields:
 *
 *   driver_version<TAB>535.261.03
 *   nvml_version<TAB>12.535.261.03
 *   cuda_driver_version<TAB>12020
 *   gpu<TAB>minor=0<TAB>uuid=GPU-...<TAB>bus_id=00000000:07:00.0<TAB>...
 *
 * Like a real NVML inside a container, which GPUs are visible is decided by
 * the device nodes: /dev/nvidiactl (195:255) must exist, and GPU <minor> is
 * visible iff /dev/nvidia<minor> is the character device 195:<minor>.
 *
 * Only nvml* functions and gpunode_profile_blob are exported; everything else
 * is static.  No heap allocations.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>

#define EXPORT __attribute__((visibility("default")))

/* The one and only copy of the magic header; Python requires it to occur
 * exactly once in the built library. */
__attribute__((used, visibility("default"))) char gpunode_profile_blob[262144] =
    "GPUNODE-NVML-PROFILE-V1\n";

typedef int nvmlReturn_t;
typedef struct nvmlDevice_st *nvmlDevice_t;

enum {
    NVML_SUCCESS = 0,
    NVML_ERROR_UNINITIALIZED = 1,
    NVML_ERROR_INVALID_ARGUMENT = 2,
    NVML_ERROR_NOT_SUPPORTED = 3,
    NVML_ERROR_NO_PERMISSION = 4,
    NVML_ERROR_ALREADY_INITIALIZED = 5,
    NVML_ERROR_NOT_FOUND = 6,
    NVML_ERROR_INSUFFICIENT_SIZE = 7,
    NVML_ERROR_INSUFFICIENT_POWER = 8,
    NVML_ERROR_DRIVER_NOT_LOADED = 9,
    NVML_ERROR_TIMEOUT = 10,
    NVML_ERROR_IRQ_ISSUE = 11,
    NVML_ERROR_LIBRARY_NOT_FOUND = 12,
    NVML_ERROR_FUNCTION_NOT_FOUND = 13,
    NVML_ERROR_CORRUPTED_INFOROM = 14,
    NVML_ERROR_GPU_IS_LOST = 15,
    NVML_ERROR_RESET_REQUIRED = 16,
    NVML_ERROR_OPERATING_SYSTEM = 17,
    NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
    NVML_ERROR_IN_USE = 19,
    NVML_ERROR_MEMORY = 20,
    NVML_ERROR_NO_DATA = 21,
    NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
    NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
    NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
    NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
    NVML_ERROR_DEPRECATED = 26,
    NVML_ERROR_NOT_READY = 27,
    NVML_ERROR_GPU_NOT_FOUND = 28,
    NVML_ERROR_INVALID_STATE = 29,
    NVML_ERROR_UNKNOWN = 999,
};

#define MAX_GPUS 64
#define STR_LEN 128
#define NVIDIA_MAJOR 195
#define NVIDIACTL_MINOR 255
#define MEMORY_V2_VERSION 0x02000028u
#define TEMPERATURE_V1_VERSION 0x0100000Cu
#define MEMORY_LOCATION_DRAM 2 /* == NVML_MEMORY_LOCATION_DEVICE_MEMORY */
#define MEMORY_LOCATION_COUNT 8

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} nvmlPciInfo_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

typedef struct {
    unsigned int version;
    unsigned long long total;
    unsigned long long reserved;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int version;
    int sensorType;
    int temperature;
} nvmlTemperature_v1_t;

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(sizeof(nvmlTemperature_v1_t) == 12, "nvmlTemperature_v1_t layout");

typedef struct {
    unsigned int minor;
    char uuid[STR_LEN];
    char name[STR_LEN];
    char bus_id[32]; /* normalized "%08X:%02X:%02X.%X" */
    unsigned int domain, bus, device, function;
    unsigned int pci_device_id, pci_subsystem_id;
    unsigned long long memory_total, memory_reserved, memory_used;
    int cc_major, cc_minor;
    unsigned int architecture;
    int brand;
    int persistence, ecc_enabled;
    unsigned int mig;
    int compute_mode;
    unsigned int temperature, power_usage, power_limit;
    int lost;
    unsigned long long ecc_unc_vol, ecc_unc_agg, ecc_cor_vol, ecc_cor_agg;
    unsigned int retired_sbe, retired_dbe;
    int retired_pending;
    unsigned int remap_corrected, remap_uncorrected, remap_pending, remap_failure;
    char serial[STR_LEN];
    char vbios[STR_LEN];
    /* runtime state */
    int visible;
    unsigned int index;
} gpu_t;

struct nvmlDevice_st {
    gpu_t gpu;
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_refcount;
static int g_have_profile;
static char g_driver_version[STR_LEN];
static char g_nvml_version[STR_LEN];
static int g_cuda_version;
static struct nvmlDevice_st g_gpus[MAX_GPUS];
static unsigned int g_ngpus;
static struct nvmlDevice_st *g_order[MAX_GPUS]; /* visible GPUs, by bus id */
static unsigned int g_nvisible;

/* ------------------------------------------------------------------ */
/* profile parsing                                                      */

static void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static unsigned long long parse_ull(const char *s)
{
    return strtoull(s, NULL, 0);
}

static int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus,
                        unsigned int *dev, unsigned int *fn)
{
    unsigned int d = 0, b = 0, v = 0, f = 0;
    char tail;
    int n = sscanf(s, "%x:%x:%x.%x%c", &d, &b, &v, &f, &tail);
    if (n != 4) {
        /* allow "bus:device.function" without a domain */
        n = sscanf(s, "%x:%x.%x%c", &b, &v, &f, &tail);
        if (n != 3)
            return -1;
        d = 0;
    }
    *dom = d;
    *bus = b;
    *dev = v;
    *fn = f;
    return 0;
}

static void set_gpu_field(gpu_t *g, const char *key, const char *val)
{
#define UINT_FIELD(k, f) else if (strcmp(key, k) == 0) g->f = (unsigned int)parse_ull(val);
#define INT_FIELD(k, f) else if (strcmp(key, k) == 0) g->f = (int)strtol(val, NULL, 0);
#define ULL_FIELD(k, f) else if (strcmp(key, k) == 0) g->f = parse_ull(val);
#define STR_FIELD(k, f) else if (strcmp(key, k) == 0) copy_str(g->f, sizeof(g->f), val);
    if (strcmp(key, "bus_id") == 0) {
        if (parse_bus_id(val, &g->domain, &g->bus, &g->device, &g->function) == 0)
            snprintf(g->bus_id, sizeof(g->bus_id), "%08X:%02X:%02X.%X",
                     g->domain & 0xffffffffu, g->bus & 0xffu, g->device & 0xffu,
                     g->function & 0xfu);
    }
    UINT_FIELD("minor", minor)
    STR_FIELD("uuid", uuid)
    STR_FIELD("name", name)
    UINT_FIELD("pci_device_id", pci_device_id)
    UINT_FIELD("pci_subsystem_id", pci_subsystem_id)
    ULL_FIELD("memory_total", memory_total)
    ULL_FIELD("memory_reserved", memory_reserved)
    ULL_FIELD("memory_used", memory_used)
    INT_FIELD("cc_major", cc_major)
    INT_FIELD("cc_minor", cc_minor)
    UINT_FIELD("architecture", architecture)
    INT_FIELD("brand", brand)
    INT_FIELD("persistence", persistence)
    INT_FIELD("ecc_enabled", ecc_enabled)
    UINT_FIELD("mig", mig)
    INT_FIELD("compute_mode", compute_mode)
    UINT_FIELD("temperature", temperature)
    UINT_FIELD("power_usage", power_usage)
    UINT_FIELD("power_limit", power_limit)
    INT_FIELD("lost", lost)
    ULL_FIELD("ecc_uncorrected_volatile", ecc_unc_vol)
    ULL_FIELD("ecc_uncorrected_aggregate", ecc_unc_agg)
    ULL_FIELD("ecc_corrected_volatile", ecc_cor_vol)
    ULL_FIELD("ecc_corrected_aggregate", ecc_cor_agg)
    UINT_FIELD("retired_sbe", retired_sbe)
    UINT_FIELD("retired_dbe", retired_dbe)
    INT_FIELD("retired_pending", retired_pending)
    UINT_FIELD("remap_corrected", remap_corrected)
    UINT_FIELD("remap_uncorrected", remap_uncorrected)
    UINT_FIELD("remap_pending", remap_pending)
    UINT_FIELD("remap_failure", remap_failure)
    STR_FIELD("serial", serial)
    STR_FIELD("vbios", vbios)
#undef UINT_FIELD
#undef INT_FIELD
#undef ULL_FIELD
#undef STR_FIELD
}

/* Parse one line (NUL-terminated, mutable copy). */
static void parse_line(char *line)
{
    char *tab = strchr(line, '\t');
    if (!tab)
        return;
    *tab = '\0';
    char *rest = tab + 1;

    if (strcmp(line, "driver_version") == 0) {
        copy_str(g_driver_version, sizeof(g_driver_version), rest);
        g_have_profile = 1;
    } else if (strcmp(line, "nvml_version") == 0) {
        copy_str(g_nvml_version, sizeof(g_nvml_version), rest);
    } else if (strcmp(line, "cuda_driver_version") == 0) {
        g_cuda_version = (int)strtol(rest, NULL, 0);
    } else if (strcmp(line, "gpu") == 0) {
        if (g_ngpus >= MAX_GPUS)
            return;
        gpu_t *g = &g_gpus[g_ngpus].gpu;
        memset(g, 0, sizeof(*g));
        char *field = rest;
        while (field) {
            char *next = strchr(field, '\t');
            if (next)
                *next++ = '\0';
            char *eq = strchr(field, '=');
            if (eq) {
                *eq = '\0';
                set_gpu_field(g, field, eq + 1);
            }
            field = next;
        }
        if (g->uuid[0] == '\0' || g->bus_id[0] == '\0')
            return; /* required keys missing: ignore the line */
        g_ngpus++;
    }
}

static void parse_profile(void)
{
    static char line[8192];
    size_t size = sizeof(gpunode_profile_blob);
    size_t pos = 0;

    g_have_profile = 0;
    g_driver_version[0] = '\0';
    g_nvml_version[0] = '\0';
    g_cuda_version = 0;
    g_ngpus = 0;

    /* Skip the magic header line (without keeping a second copy of it). */
    const char *nl = memchr(gpunode_profile_blob, '\n', 64);
    if (!nl)
        return;
    pos = (size_t)(nl - gpunode_profile_blob) + 1;

    while (pos < size && gpunode_profile_blob[pos] != '\0') {
        size_t start = pos;
        while (pos < size && gpunode_profile_blob[pos] != '\0' &&
               gpunode_profile_blob[pos] != '\n')
            pos++;
        size_t len = pos - start;
        if (len > 0 && gpunode_profile_blob[start + len - 1] == '\r')
            len--;
        if (len < sizeof(line)) {
            memcpy(line, gpunode_profile_blob + start, len);
            line[len] = '\0';
            parse_line(line);
        }
        if (pos < size && gpunode_profile_blob[pos] == '\n')
            pos++;
    }
}

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

static int initialized(void)
{
    pthread_mutex_lock(&g_lock);
    int r = g_refcount > 0;
    pthread_mutex_unlock(&g_lock);
    return r;
}

#define CHECK_INIT()                       \
    do {                                   \
        if (!initialized())                \
            return NVML_ERROR_UNINITIALIZED; \
    } while (0)

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

/* ------------------------------------------------------------------ */
/* system queries                                                       */

static nvmlReturn_t copy_out(char *buf, unsigned int length, const char *src)
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
/* device enumeration                                                   */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    CHECK_INIT();
    if (!deviceCount)
        return NVML_ERROR_INVALID_ARGUMENT;
    *deviceCount = g_nvisible;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

static nvmlReturn_t hand_out(struct nvmlDevice_st *d, nvmlDevice_t *device)
{
    if (d->gpu.lost)
        return NVML_ERROR_GPU_IS_LOST;
    *device = d;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (!device || index >= g_nvisible)
        return NVML_ERROR_INVALID_ARGUMENT;
    return hand_out(g_order[index], device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_nvisible; i++)
        if (strcmp(g_order[i]->gpu.uuid, uuid) == 0)
            return hand_out(g_order[i], device);
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    unsigned int dom, bus, dev, fn;
    CHECK_INIT();
    if (!pciBusId || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (parse_bus_id(pciBusId, &dom, &bus, &dev, &fn) != 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_nvisible; i++) {
        const gpu_t *g = &g_order[i]->gpu;
        if (g->domain == dom && g->bus == bus && g->device == dev && g->function == fn)
            return hand_out(g_order[i], device);
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* Validate init + handle; on success *out points at the GPU record. */
static nvmlReturn_t lookup(nvmlDevice_t device, const gpu_t **out)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_nvisible; i++) {
        if (g_order[i] == device) {
            if (device->gpu.lost)
                return NVML_ERROR_GPU_IS_LOST;
            *out = &device->gpu;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

#define GET_GPU(device, g)                       \
    const gpu_t *g = NULL;                       \
    do {                                         \
        nvmlReturn_t rc_ = lookup((device), &g); \
        if (rc_ != NVML_SUCCESS)                 \
            return rc_;                          \
    } while (0)

#define REQUIRE(p)                                  \
    do {                                            \
        if (!(p))                                   \
            return NVML_ERROR_INVALID_ARGUMENT;     \
    } while (0)

/* ------------------------------------------------------------------ */
/* device identity                                                      */

EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
    GET_GPU(device, g);
    REQUIRE(index);
    *index = g->index;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    GET_GPU(device, g);
    return copy_out(name, length, g->name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    GET_GPU(device, g);
    return copy_out(uuid, length, g->uuid);
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    GET_GPU(device, g);
    return copy_out(serial, length, g->serial);
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    GET_GPU(device, g);
    return copy_out(version, length, g->vbios);
}

EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, int *type)
{
    GET_GPU(device, g);
    REQUIRE(type);
    *type = g->brand;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, unsigned int *arch)
{
    GET_GPU(device, g);
    REQUIRE(arch);
    *arch = g->architecture;
    return NVML_SUCCESS;
}

static void fill_pci(const gpu_t *g, nvmlPciInfo_t *pci, int full)
{
    nvmlPciInfo_t tmp;
    memset(&tmp, 0, sizeof(tmp));
    snprintf(tmp.busIdLegacy, sizeof(tmp.busIdLegacy), "%04X:%02X:%02X.%X",
             g->domain & 0xffffu, g->bus & 0xffu, g->device & 0xffu, g->function & 0xfu);
    tmp.domain = g->domain;
    tmp.bus = g->bus;
    tmp.device = g->device;
    tmp.pciDeviceId = g->pci_device_id;
    tmp.pciSubSystemId = g->pci_subsystem_id;
    copy_str(tmp.busId, sizeof(tmp.busId), g->bus_id);
    /* the v1 struct ends after pciSubSystemId (plus reserved words): only
     * write the common prefix there */
    memcpy(pci, &tmp, full ? sizeof(tmp) : offsetof(nvmlPciInfo_t, busId));
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    GET_GPU(device, g);
    REQUIRE(pci);
    fill_pci(g, pci, 1);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    GET_GPU(device, g);
    REQUIRE(pci);
    fill_pci(g, pci, 0);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
    GET_GPU(device, g);
    REQUIRE(minorNumber);
    *minorNumber = g->minor;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* memory                                                               */

static unsigned long long mem_free(const gpu_t *g)
{
    unsigned long long taken = g->memory_used + g->memory_reserved;
    return taken >= g->memory_total ? 0 : g->memory_total - taken;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    GET_GPU(device, g);
    REQUIRE(memory);
    memory->total = g->memory_total;
    memory->used = g->memory_used;
    memory->free = mem_free(g);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    GET_GPU(device, g);
    REQUIRE(memory);
    if (memory->version != MEMORY_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    memory->total = g->memory_total;
    memory->reserved = g->memory_reserved;
    memory->used = g->memory_used;
    memory->free = mem_free(g);
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* modes                                                                */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                         unsigned int *pendingMode)
{
    GET_GPU(device, g);
    REQUIRE(currentMode && pendingMode);
    *currentMode = g->mig;
    *pendingMode = g->mig;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, int *mode)
{
    GET_GPU(device, g);
    REQUIRE(mode);
    *mode = g->persistence ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, int *current, int *pending)
{
    GET_GPU(device, g);
    REQUIRE(current && pending);
    *current = g->ecc_enabled ? 1 : 0;
    *pending = g->ecc_enabled ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentEccMode(nvmlDevice_t device, int *current)
{
    GET_GPU(device, g);
    REQUIRE(current);
    *current = g->ecc_enabled ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPendingEccMode(nvmlDevice_t device, int *pending)
{
    GET_GPU(device, g);
    REQUIRE(pending);
    *pending = g->ecc_enabled ? 1 : 0;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, int *mode)
{
    GET_GPU(device, g);
    REQUIRE(mode);
    *mode = g->compute_mode;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major_, int *minor_)
{
    GET_GPU(device, g);
    REQUIRE(major_ && minor_);
    *major_ = g->cc_major;
    *minor_ = g->cc_minor;
    return NVML_SUCCESS;
}

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

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, int *isPending)
{
    GET_GPU(device, g);
    REQUIRE(isPending);
    *isPending = g->retired_pending ? 1 : 0;
    return NVML_SUCCESS;
}

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

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
    GET_GPU(device, g);
    REQUIRE(power);
    *power = g->power_usage;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
    GET_GPU(device, g);
    REQUIRE(limit);
    *limit = g->power_limit;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimit(nvmlDevice_t device, unsigned int *limit)
{
    GET_GPU(device, g);
    REQUIRE(limit);
    *limit = g->power_limit;
    return NVML_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* exported but unsupported                                             */

/* Arguments (if any) are ignored; with the C calling convention a caller
 * passing arguments to a function declared with none is harmless. */
#define NOT_SUPPORTED_STUB(fn)            \
    EXPORT nvmlReturn_t fn(void)          \
    {                                     \
        CHECK_INIT();                     \
        return NVML_ERROR_NOT_SUPPORTED;  \
    }

NOT_SUPPORTED_STUB(nvmlDeviceGetClockInfo)
NOT_SUPPORTED_STUB(nvmlDeviceGetMaxClockInfo)
NOT_SUPPORTED_STUB(nvmlDeviceGetUtilizationRates)
NOT_SUPPORTED_STUB(nvmlDeviceGetFanSpeed)
NOT_SUPPORTED_STUB(nvmlDeviceGetComputeRunningProcesses_v3)
NOT_SUPPORTED_STUB(nvmlDeviceGetGraphicsRunningProcesses_v3)
NOT_SUPPORTED_STUB(nvmlDeviceGetTotalEnergyConsumption)
NOT_SUPPORTED_STUB(nvmlDeviceGetPciInfoExt)
NOT_SUPPORTED_STUB(nvmlDeviceGetBoardPartNumber)
NOT_SUPPORTED_STUB(nvmlDeviceGetInforomVersion)
NOT_SUPPORTED_STUB(nvmlDeviceGetPerformanceState)
NOT_SUPPORTED_STUB(nvmlDeviceGetPcieThroughput)
NOT_SUPPORTED_STUB(nvmlDeviceGetCurrPcieLinkWidth)
NOT_SUPPORTED_STUB(nvmlDeviceGetMaxPcieLinkWidth)
NOT_SUPPORTED_STUB(nvmlDeviceGetNvLinkState)
NOT_SUPPORTED_STUB(nvmlEventSetCreate)
NOT_SUPPORTED_STUB(nvmlDeviceGetSupportedEventTypes)
