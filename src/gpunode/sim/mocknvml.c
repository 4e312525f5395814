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
 *   gip<TAB>parent=GPU-...<TAB>index=2<TAB>id=9<TAB>name=3g.40gb<TAB>...
 *   mig<TAB>parent=GPU-...<TAB>uuid=MIG-...<TAB>gi=1<TAB>profile_index=2<TAB>...
 *
 * "gip" lines are the GPU instance profiles of a MIG-capable GPU, "mig" lines
 * the MIG devices (one GPU instance with one compute instance each) of a GPU
 * whose profile enables MIG.  gpunode.sim.profiles.mock_payload() writes them.
 *
 * Like a real NVML inside a container, which GPUs are visible is decided by
 * the device nodes: /dev/nvidiactl (195:255) must exist, and GPU <minor> is
 * visible iff /dev/nvidia<minor> is the character device 195:<minor>.  MIG
 * devices are visible with their parent.
 *
 * This file implements what device plugins and NVIDIA's container toolkit
 * walk.  Every other entry point that nvidia-ml-py knows is exported by a weak
 * stub generated at build time (gpunode.sim.mocknvml.stubs_source) that
 * answers NVML_ERROR_UNINITIALIZED before nvmlInit and NVML_ERROR_NOT_SUPPORTED
 * after; a definition here overrides the stub of the same name.
 *
 * Only nvml* functions and gpunode_profile_blob are exported; everything else
 * is static or hidden.  No heap allocations.
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
#include <time.h>

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
#define MAX_MIGS 128 /* MIG devices over all GPUs */
#define MAX_GIPS 256 /* GPU instance profiles over all GPUs */
#define MAX_EVENT_SETS 64
#define MIG_SLICES 7  /* compute slices of a MIG-capable GPU */
#define STR_LEN 128
#define NVIDIA_MAJOR 195
#define NVIDIACTL_MINOR 255
#define MEMORY_V2_VERSION 0x02000028u
#define TEMPERATURE_V1_VERSION 0x0100000Cu
#define PCI_INFO_EXT_V1_VERSION 0x01000040u
#define UUID_V1_VERSION 0x01000034u
#define GI_PROFILE_INFO_V2_VERSION 0x02000098u
#define CI_PROFILE_INFO_V2_VERSION 0x02000088u
#define MEMORY_LOCATION_DRAM 2 /* == NVML_MEMORY_LOCATION_DEVICE_MEMORY */
#define MEMORY_LOCATION_COUNT 8
#define BUS_TYPE_PCIE 2
#define UUID_TYPE_ASCII 1
#define UUID_TYPE_BINARY 2
#define DEVICE_NAME_V2_BUFFER_SIZE 96
/* nvmlEventType*: what a data-center GPU supports */
#define EVENT_SINGLE_BIT_ECC 0x1ULL
#define EVENT_DOUBLE_BIT_ECC 0x2ULL
#define EVENT_PSTATE 0x4ULL
#define EVENT_XID_CRITICAL 0x8ULL
#define EVENT_CLOCK 0x10ULL
#define EVENT_MIG_CONFIG_CHANGE 0x100ULL

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
    unsigned int version;
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    unsigned int baseClass;
    unsigned int subClass;
    char busId[32];
} nvmlPciInfoExt_v1_t;

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

typedef struct {
    unsigned int version;
    unsigned int type;
    union {
        char str[41];
        unsigned char bytes[16];
    } value;
} nvmlUUID_t;

typedef struct {
    unsigned int multiprocessorCount;
    unsigned int sharedCopyEngineCount;
    unsigned int sharedDecoderCount;
    unsigned int sharedEncoderCount;
    unsigned int sharedJpegCount;
    unsigned int sharedOfaCount;
    unsigned int gpuInstanceSliceCount;
    unsigned int computeInstanceSliceCount;
    unsigned long long memorySizeMB;
} nvmlDeviceAttributes_t;

typedef struct {
    unsigned int start;
    unsigned int size;
} nvmlPlacement_t; /* nvmlGpuInstancePlacement_t == nvmlComputeInstancePlacement_t */

/* v2 is v1's fields behind a version word, then a name: one field list for both. */
#define GI_PROFILE_INFO_FIELDS \
    unsigned int id; \
    unsigned int isP2pSupported; \
    unsigned int sliceCount; \
    unsigned int instanceCount; \
    unsigned int multiprocessorCount; \
    unsigned int copyEngineCount; \
    unsigned int decoderCount; \
    unsigned int encoderCount; \
    unsigned int jpegCount; \
    unsigned int ofaCount; \
    unsigned long long memorySizeMB;
typedef struct { GI_PROFILE_INFO_FIELDS } nvmlGpuInstanceProfileInfo_t;
typedef struct {
    unsigned int version;
    GI_PROFILE_INFO_FIELDS
    char name[DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlGpuInstanceProfileInfo_v2_t;

#define CI_PROFILE_INFO_FIELDS \
    unsigned int id; \
    unsigned int sliceCount; \
    unsigned int instanceCount; \
    unsigned int multiprocessorCount; \
    unsigned int sharedCopyEngineCount; \
    unsigned int sharedDecoderCount; \
    unsigned int sharedEncoderCount; \
    unsigned int sharedJpegCount; \
    unsigned int sharedOfaCount;
typedef struct { CI_PROFILE_INFO_FIELDS } nvmlComputeInstanceProfileInfo_t;
typedef struct {
    unsigned int version;
    CI_PROFILE_INFO_FIELDS
    char name[DEVICE_NAME_V2_BUFFER_SIZE];
} nvmlComputeInstanceProfileInfo_v2_t;

typedef struct nvmlGpuInstance_st *nvmlGpuInstance_t;
typedef struct nvmlComputeInstance_st *nvmlComputeInstance_t;
typedef struct nvmlEventSet_st *nvmlEventSet_t;

typedef struct {
    nvmlDevice_t device;
    unsigned int id;
    unsigned int profileId;
    nvmlPlacement_t placement;
} nvmlGpuInstanceInfo_t;

typedef struct {
    nvmlDevice_t device;
    nvmlGpuInstance_t gpuInstance;
    unsigned int id;
    unsigned int profileId;
    nvmlPlacement_t placement;
} nvmlComputeInstanceInfo_t;

typedef struct {
    nvmlDevice_t device;
    unsigned long long eventType;
    unsigned long long eventData;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} nvmlEventData_t;

_Static_assert(sizeof(nvmlPciInfo_t) == 68, "nvmlPciInfo_t layout");
_Static_assert(sizeof(nvmlPciInfoExt_v1_t) == (PCI_INFO_EXT_V1_VERSION & 0xffffff),
               "nvmlPciInfoExt_v1_t layout");
_Static_assert(sizeof(nvmlMemory_v2_t) == 40, "nvmlMemory_v2_t layout");
_Static_assert(sizeof(nvmlTemperature_v1_t) == 12, "nvmlTemperature_v1_t layout");
_Static_assert(sizeof(nvmlUUID_t) == (UUID_V1_VERSION & 0xffffff), "nvmlUUID_t layout");
_Static_assert(sizeof(nvmlDeviceAttributes_t) == 40, "nvmlDeviceAttributes_t layout");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_t) == 48, "GI profile info layout");
_Static_assert(sizeof(nvmlGpuInstanceProfileInfo_v2_t) == (GI_PROFILE_INFO_V2_VERSION & 0xffffff),
               "GI profile info v2 layout");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_t) == 36, "CI profile info layout");
_Static_assert(sizeof(nvmlComputeInstanceProfileInfo_v2_t) ==
                   (CI_PROFILE_INFO_V2_VERSION & 0xffffff),
               "CI profile info v2 layout");
_Static_assert(sizeof(nvmlGpuInstanceInfo_t) == 24, "nvmlGpuInstanceInfo_t layout");
_Static_assert(sizeof(nvmlComputeInstanceInfo_t) == 32, "nvmlComputeInstanceInfo_t layout");
_Static_assert(sizeof(nvmlEventData_t) == 32, "nvmlEventData_t layout");

/* One GPU instance profile of a MIG-capable GPU ("gip" line). */
typedef struct {
    char parent[STR_LEN];
    unsigned int index; /* NVML_GPU_INSTANCE_PROFILE_* */
    unsigned int id;    /* the profile id nvidia-smi shows */
    char name[32];      /* "3g.40gb" */
    unsigned int slices, instances, placement_size;
    unsigned long long memory_mib;
    unsigned int sm, ce, dec, enc, jpeg, ofa;
} gip_t;

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
    unsigned int mig, mig_capable;
    int compute_mode;
    unsigned int temperature, power_usage, power_limit, irq;
    int lost;
    unsigned long long ecc_unc_vol, ecc_unc_agg, ecc_cor_vol, ecc_cor_agg;
    unsigned int retired_sbe, retired_dbe;
    int retired_pending;
    unsigned int remap_corrected, remap_uncorrected, remap_pending, remap_failure;
    char serial[STR_LEN];
    char vbios[STR_LEN];
    /* links and state (gpunode.nvidia.health): PCIe, clock event reasons, NVLink, fabric */
    unsigned int pcie_gen, pcie_gen_max, pcie_width, pcie_width_max, pcie_replays;
    unsigned long long clocks_reasons, nvlink_down; /* nvlink_down: a bit per link down */
    unsigned int nvlinks, fabric_state, fabric_status, inforom_corrupt;
    /* runtime state */
    int visible;
    unsigned int index;
} gpu_t;

/* A MIG device: one GPU instance holding one compute instance ("mig" line). */
typedef struct {
    char parent_uuid[STR_LEN];
    char uuid[STR_LEN];
    unsigned int gi_id, ci_id;
    unsigned int profile_index; /* of its GPU instance profile */
    unsigned int placement_start;
    /* resolved at init */
    struct nvmlDevice_st *parent;
    const gip_t *gip;
    unsigned int index; /* under its parent */
} mig_t;

struct nvmlDevice_st {
    int is_mig;
    gpu_t gpu; /* GPUs */
    mig_t mig; /* MIG devices */
};

struct nvmlGpuInstance_st {
    struct nvmlDevice_st *mig;
};

struct nvmlComputeInstance_st {
    struct nvmlDevice_st *mig;
};

struct nvmlEventSet_st {
    int in_use;
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
static struct nvmlDevice_st g_migs[MAX_MIGS];
static struct nvmlGpuInstance_st g_gis[MAX_MIGS];
static struct nvmlComputeInstance_st g_cis[MAX_MIGS];
static unsigned int g_nmigs;
static gip_t g_gips[MAX_GIPS];
static unsigned int g_ngips;
static struct nvmlEventSet_st g_event_sets[MAX_EVENT_SETS];

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
    UINT_FIELD("mig_capable", mig_capable)
    UINT_FIELD("irq", irq)
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
    UINT_FIELD("pcie_gen", pcie_gen)
    UINT_FIELD("pcie_gen_max", pcie_gen_max)
    UINT_FIELD("pcie_width", pcie_width)
    UINT_FIELD("pcie_width_max", pcie_width_max)
    UINT_FIELD("pcie_replays", pcie_replays)
    ULL_FIELD("clocks_reasons", clocks_reasons)
    UINT_FIELD("nvlinks", nvlinks)
    ULL_FIELD("nvlink_down", nvlink_down)
    UINT_FIELD("fabric_state", fabric_state)
    UINT_FIELD("fabric_status", fabric_status)
    UINT_FIELD("inforom_corrupt", inforom_corrupt)
#undef UINT_FIELD
#undef INT_FIELD
#undef ULL_FIELD
#undef STR_FIELD
}

static void set_gip_field(gip_t *p, const char *key, const char *val)
{
#define UINT_FIELD(k, f) else if (strcmp(key, k) == 0) p->f = (unsigned int)parse_ull(val);
    if (strcmp(key, "parent") == 0)
        copy_str(p->parent, sizeof(p->parent), val);
    else if (strcmp(key, "name") == 0)
        copy_str(p->name, sizeof(p->name), val);
    else if (strcmp(key, "memory_mib") == 0)
        p->memory_mib = parse_ull(val);
    UINT_FIELD("index", index)
    UINT_FIELD("id", id)
    UINT_FIELD("slices", slices)
    UINT_FIELD("instances", instances)
    UINT_FIELD("placement_size", placement_size)
    UINT_FIELD("sm", sm)
    UINT_FIELD("ce", ce)
    UINT_FIELD("dec", dec)
    UINT_FIELD("enc", enc)
    UINT_FIELD("jpeg", jpeg)
    UINT_FIELD("ofa", ofa)
#undef UINT_FIELD
}

static void set_mig_field(mig_t *m, const char *key, const char *val)
{
#define UINT_FIELD(k, f) else if (strcmp(key, k) == 0) m->f = (unsigned int)parse_ull(val);
    if (strcmp(key, "parent") == 0)
        copy_str(m->parent_uuid, sizeof(m->parent_uuid), val);
    else if (strcmp(key, "uuid") == 0)
        copy_str(m->uuid, sizeof(m->uuid), val);
    UINT_FIELD("gi", gi_id)
    UINT_FIELD("ci", ci_id)
    UINT_FIELD("profile_index", profile_index)
    UINT_FIELD("placement_start", placement_start)
#undef UINT_FIELD
}

/* Split "k=v<TAB>k=v..." (mutable) and hand each pair to set(). */
static void for_each_field(char *rest, void (*set)(void *, const char *, const char *), void *obj)
{
    char *field = rest;
    while (field) {
        char *next = strchr(field, '\t');
        if (next)
            *next++ = '\0';
        char *eq = strchr(field, '=');
        if (eq) {
            *eq = '\0';
            set(obj, field, eq + 1);
        }
        field = next;
    }
}

static void gpu_setter(void *o, const char *k, const char *v) { set_gpu_field(o, k, v); }
static void gip_setter(void *o, const char *k, const char *v) { set_gip_field(o, k, v); }
static void mig_setter(void *o, const char *k, const char *v) { set_mig_field(o, k, v); }

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
        struct nvmlDevice_st *d = &g_gpus[g_ngpus];
        memset(d, 0, sizeof(*d));
        for_each_field(rest, gpu_setter, &d->gpu);
        if (d->gpu.uuid[0] == '\0' || d->gpu.bus_id[0] == '\0')
            return; /* required keys missing: ignore the line */
        g_ngpus++;
    } else if (strcmp(line, "gip") == 0) {
        if (g_ngips >= MAX_GIPS)
            return;
        gip_t *p = &g_gips[g_ngips];
        memset(p, 0, sizeof(*p));
        for_each_field(rest, gip_setter, p);
        if (p->parent[0] == '\0' || p->slices == 0)
            return;
        g_ngips++;
    } else if (strcmp(line, "mig") == 0) {
        if (g_nmigs >= MAX_MIGS)
            return;
        struct nvmlDevice_st *d = &g_migs[g_nmigs];
        memset(d, 0, sizeof(*d));
        d->is_mig = 1;
        for_each_field(rest, mig_setter, &d->mig);
        if (d->mig.parent_uuid[0] == '\0' || d->mig.uuid[0] == '\0')
            return;
        g_nmigs++;
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
    g_ngips = 0;
    g_nmigs = 0;

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

static const gip_t *find_gip(const char *parent_uuid, unsigned int index)
{
    for (unsigned int i = 0; i < g_ngips; i++)
        if (g_gips[i].index == index && strcmp(g_gips[i].parent, parent_uuid) == 0)
            return &g_gips[i];
    return NULL;
}

static int cmp_mig(const void *a, const void *b)
{
    const struct nvmlDevice_st *x = a, *y = b;
    int by_parent = strcmp(x->mig.parent_uuid, y->mig.parent_uuid);
    if (by_parent)
        return by_parent;
    return (x->mig.gi_id > y->mig.gi_id) - (x->mig.gi_id < y->mig.gi_id);
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

    /* MIG devices: ordered by GPU instance id under each parent */
    qsort(g_migs, g_nmigs, sizeof(g_migs[0]), cmp_mig);
    const struct nvmlDevice_st *last_parent = NULL;
    unsigned int next_index = 0;
    for (unsigned int i = 0; i < g_nmigs; i++) {
        mig_t *m = &g_migs[i].mig;
        m->parent = NULL;
        m->gip = find_gip(m->parent_uuid, m->profile_index);
        for (unsigned int j = 0; j < g_ngpus && m->gip; j++)
            if (strcmp(g_gpus[j].gpu.uuid, m->parent_uuid) == 0 && g_gpus[j].gpu.mig &&
                g_gpus[j].gpu.mig_capable)
                m->parent = &g_gpus[j];
        if (m->parent) {
            next_index = m->parent == last_parent ? next_index + 1 : 0;
            last_parent = m->parent;
            m->index = next_index;
        }
        g_gis[i].mig = &g_migs[i];
        g_cis[i].mig = &g_migs[i];
    }
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

/* "GPU-3f2c1a90-0000-..." -> 16 bytes; -1 if not that form */
static int uuid_bytes(const char *uuid, unsigned char out[16])
{
    const char *p = strchr(uuid, '-');
    unsigned int n = 0;
    if (!p)
        return -1;
    for (p++; *p && n < 32; p++) {
        if (*p == '-')
            continue;
        int v;
        if (*p >= '0' && *p <= '9')
            v = *p - '0';
        else if (*p >= 'a' && *p <= 'f')
            v = *p - 'a' + 10;
        else if (*p >= 'A' && *p <= 'F')
            v = *p - 'A' + 10;
        else
            return -1;
        if (n % 2 == 0)
            out[n / 2] = (unsigned char)(v << 4);
        else
            out[n / 2] |= (unsigned char)v;
        n++;
    }
    return n == 32 && *p == '\0' ? 0 : -1;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUIDV(const nvmlUUID_t *uuid, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (!uuid || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (uuid->version != UUID_V1_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (uuid->type == UUID_TYPE_ASCII) {
        char text[sizeof(uuid->value.str) + 1];
        memcpy(text, uuid->value.str, sizeof(uuid->value.str));
        text[sizeof(uuid->value.str)] = '\0';
        return nvmlDeviceGetHandleByUUID(text, device);
    }
    if (uuid->type != UUID_TYPE_BINARY)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_nvisible; i++) {
        unsigned char b[16];
        if (uuid_bytes(g_order[i]->gpu.uuid, b) == 0 && memcmp(b, uuid->value.bytes, 16) == 0)
            return hand_out(g_order[i], device);
    }
    return NVML_ERROR_NOT_FOUND;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    CHECK_INIT();
    if (!serial || !device)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; i < g_nvisible; i++)
        if (g_order[i]->gpu.serial[0] && strcmp(g_order[i]->gpu.serial, serial) == 0)
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

static int is_visible_gpu(nvmlDevice_t device)
{
    for (unsigned int i = 0; i < g_nvisible; i++)
        if (g_order[i] == device)
            return 1;
    return 0;
}

static int is_visible_mig(nvmlDevice_t device)
{
    for (unsigned int i = 0; i < g_nmigs; i++)
        if (&g_migs[i] == device)
            return device->mig.parent && device->mig.gip && device->mig.parent->gpu.visible;
    return 0;
}

/* Validate init + handle of a full GPU; on success *out points at its record.
 * A MIG device handle answers NOT_SUPPORTED, as for queries a real driver
 * does not implement on MIG devices. */
static nvmlReturn_t lookup(nvmlDevice_t device, const gpu_t **out)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_visible_gpu(device)) {
        if (device->gpu.lost)
            return NVML_ERROR_GPU_IS_LOST;
        *out = &device->gpu;
        return NVML_SUCCESS;
    }
    if (is_visible_mig(device))
        return device->mig.parent->gpu.lost ? NVML_ERROR_GPU_IS_LOST : NVML_ERROR_NOT_SUPPORTED;
    return NVML_ERROR_INVALID_ARGUMENT;
}

/* Validate init + handle of a GPU or a MIG device. *gpu is the GPU itself or
 * the MIG device's parent; *mig is NULL for a GPU. */
static nvmlReturn_t lookup_any(nvmlDevice_t device, const gpu_t **gpu, const mig_t **mig)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    if (!device)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (is_visible_gpu(device)) {
        *gpu = &device->gpu;
        *mig = NULL;
    } else if (is_visible_mig(device)) {
        *gpu = &device->mig.parent->gpu;
        *mig = &device->mig;
    } else {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    return (*gpu)->lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

#define GET_GPU(device, g)                       \
    const gpu_t *g = NULL;                       \
    do {                                         \
        nvmlReturn_t rc_ = lookup((device), &g); \
        if (rc_ != NVML_SUCCESS)                 \
            return rc_;                          \
    } while (0)

#define GET_ANY(device, g, m)                            \
    const gpu_t *g = NULL;                               \
    const mig_t *m = NULL;                               \
    do {                                                 \
        nvmlReturn_t rc_ = lookup_any((device), &g, &m); \
        if (rc_ != NVML_SUCCESS)                         \
            return rc_;                                  \
    } while (0)

#define REQUIRE(p)                                  \
    do {                                            \
        if (!(p))                                   \
            return NVML_ERROR_INVALID_ARGUMENT;     \
    } while (0)

/* A query that writes one value computed from the GPU's record g (GPU_GETTER: full
 * GPUs only; ANY_GETTER: MIG devices too, answering for their parent). */
#define GPU_GETTER(fn, type, expr)                             \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, type *out)     \
    {                                                          \
        GET_GPU(device, g);                                    \
        (void)g;                                               \
        REQUIRE(out);                                          \
        *out = (expr);                                         \
        return NVML_SUCCESS;                                   \
    }

#define ANY_GETTER(fn, type, expr)                             \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, type *out)     \
    {                                                          \
        GET_ANY(device, g, m);                                 \
        (void)g;                                               \
        (void)m;                                               \
        REQUIRE(out);                                          \
        *out = (expr);                                         \
        return NVML_SUCCESS;                                   \
    }

/* A query of MIG devices only (m); a full GPU answers NOT_SUPPORTED. */
#define MIG_GETTER(fn, type, expr)                             \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, type *out)     \
    {                                                          \
        GET_ANY(device, g, m);                                 \
        (void)g;                                               \
        REQUIRE(out);                                          \
        if (!m)                                                \
            return NVML_ERROR_NOT_SUPPORTED;                   \
        *out = (expr);                                         \
        return NVML_SUCCESS;                                   \
    }

/* ------------------------------------------------------------------ */
/* device identity                                                      */

GPU_GETTER(nvmlDeviceGetIndex, unsigned int, g->index)

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    char mig_name[STR_LEN + 48];
    GET_ANY(device, g, m);
    if (!m)
        return copy_out(name, length, g->name);
    /* as a real driver names MIG devices: "NVIDIA A100-SXM4-80GB MIG 3g.40gb" */
    snprintf(mig_name, sizeof(mig_name), "%s MIG %s", g->name, m->gip->name);
    return copy_out(name, length, mig_name);
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    GET_ANY(device, g, m);
    return copy_out(uuid, length, m ? m->uuid : g->uuid);
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

ANY_GETTER(nvmlDeviceGetBrand, int, g->brand)

ANY_GETTER(nvmlDeviceGetArchitecture, unsigned int, g->architecture)

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

EXPORT nvmlReturn_t nvmlDeviceGetPciInfoExt(nvmlDevice_t device, nvmlPciInfoExt_v1_t *pci)
{
    GET_GPU(device, g);
    REQUIRE(pci);
    if (pci->version != PCI_INFO_EXT_V1_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    pci->domain = g->domain;
    pci->bus = g->bus;
    pci->device = g->device;
    pci->pciDeviceId = g->pci_device_id;
    pci->pciSubSystemId = g->pci_subsystem_id;
    pci->baseClass = 0x03; /* display controller */
    pci->subClass = 0x02;  /* 3D controller, as data-center GPUs report */
    copy_str(pci->busId, sizeof(pci->busId), g->bus_id);
    return NVML_SUCCESS;
}

GPU_GETTER(nvmlDeviceGetMinorNumber, unsigned int, g->minor)

GPU_GETTER(nvmlDeviceGetIrqNum, unsigned int, g->irq)

GPU_GETTER(nvmlDeviceGetBusType, int, BUS_TYPE_PCIE)

GPU_GETTER(nvmlDeviceGetMultiGpuBoard, unsigned int, 0)

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

/* ------------------------------------------------------------------ */
/* MIG                                                                  */

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode,
                                         unsigned int *pendingMode)
{
    GET_GPU(device, g);
    REQUIRE(currentMode && pendingMode);
    if (!g->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    *currentMode = g->mig ? 1 : 0;
    *pendingMode = g->mig ? 1 : 0;
    return NVML_SUCCESS;
}

ANY_GETTER(nvmlDeviceIsMigDeviceHandle, unsigned int, m ? 1 : 0)

/* "Returns zero if MIG is not supported or enabled." */
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    GET_GPU(device, g);
    REQUIRE(count);
    *count = g->mig_capable && g->mig ? MIG_SLICES : 0;
    return NVML_SUCCESS;
}

static struct nvmlDevice_st *mig_at(const gpu_t *g, unsigned int index)
{
    for (unsigned int i = 0; i < g_nmigs; i++) {
        const mig_t *m = &g_migs[i].mig;
        if (m->parent && &m->parent->gpu == g && m->gip && m->index == index)
            return &g_migs[i];
    }
    return NULL;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice)
{
    GET_GPU(device, g);
    REQUIRE(migDevice);
    if (!g->mig_capable || !g->mig)
        return NVML_ERROR_NOT_FOUND;
    REQUIRE(index < MIG_SLICES);
    struct nvmlDevice_st *d = mig_at(g, index);
    if (!d)
        return NVML_ERROR_NOT_FOUND;
    *migDevice = d;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice,
                                                                 nvmlDevice_t *device)
{
    GET_ANY(migDevice, g, m);
    (void)g;
    REQUIRE(device);
    if (!m)
        return NVML_ERROR_INVALID_ARGUMENT; /* not a MIG device handle */
    *device = m->parent;
    return NVML_SUCCESS;
}

MIG_GETTER(nvmlDeviceGetGpuInstanceId, unsigned int, m->gi_id)

MIG_GETTER(nvmlDeviceGetComputeInstanceId, unsigned int, m->ci_id)

/* "This API currently only supports MIG device handles." */
EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device,
                                               nvmlDeviceAttributes_t *attributes)
{
    GET_ANY(device, g, m);
    (void)g;
    REQUIRE(attributes);
    if (!m)
        return NVML_ERROR_NOT_SUPPORTED;
    const gip_t *p = m->gip;
    attributes->multiprocessorCount = p->sm;
    attributes->sharedCopyEngineCount = p->ce;
    attributes->sharedDecoderCount = p->dec;
    attributes->sharedEncoderCount = p->enc;
    attributes->sharedJpegCount = p->jpeg;
    attributes->sharedOfaCount = p->ofa;
    attributes->gpuInstanceSliceCount = p->slices;
    attributes->computeInstanceSliceCount = p->slices;
    attributes->memorySizeMB = p->memory_mib;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return nvmlDeviceGetAttributes_v2(device, attributes);
}

static const gip_t *gip_by(const gpu_t *g, int by_id, unsigned int key)
{
    for (unsigned int i = 0; i < g_ngips; i++) {
        const gip_t *p = &g_gips[i];
        if (strcmp(p->parent, g->uuid) == 0 && (by_id ? p->id : p->index) == key)
            return p;
    }
    return NULL;
}

static void fill_gip(const gip_t *p, nvmlGpuInstanceProfileInfo_t *info)
{
    info->id = p->id;
    info->isP2pSupported = 0;
    info->sliceCount = p->slices;
    info->instanceCount = p->instances;
    info->multiprocessorCount = p->sm;
    info->copyEngineCount = p->ce;
    info->decoderCount = p->dec;
    info->encoderCount = p->enc;
    info->jpegCount = p->jpeg;
    info->ofaCount = p->ofa;
    info->memorySizeMB = p->memory_mib;
}

static nvmlReturn_t gip_info_v2(nvmlDevice_t device, int by_id, unsigned int key,
                                nvmlGpuInstanceProfileInfo_v2_t *info)
{
    nvmlGpuInstanceProfileInfo_t v1;
    GET_GPU(device, g);
    REQUIRE(info);
    if (info->version != GI_PROFILE_INFO_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    const gip_t *p = g->mig_capable ? gip_by(g, by_id, key) : NULL;
    if (!p)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_gip(p, &v1);
    memcpy(&info->id, &v1, offsetof(nvmlGpuInstanceProfileInfo_t, memorySizeMB));
    info->memorySizeMB = v1.memorySizeMB;
    snprintf(info->name, sizeof(info->name), "MIG %s", p->name);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfo(nvmlDevice_t device, unsigned int profile,
                                                        nvmlGpuInstanceProfileInfo_t *info)
{
    GET_GPU(device, g);
    REQUIRE(info);
    const gip_t *p = g->mig_capable ? gip_by(g, 0, profile) : NULL;
    if (!p)
        return NVML_ERROR_NOT_SUPPORTED;
    fill_gip(p, info);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoV(nvmlDevice_t device, unsigned int profile,
                                                         nvmlGpuInstanceProfileInfo_v2_t *info)
{
    return gip_info_v2(device, 0, profile, info);
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceProfileInfoByIdV(nvmlDevice_t device,
                                                             unsigned int profileId,
                                                             nvmlGpuInstanceProfileInfo_v2_t *info)
{
    return gip_info_v2(device, 1, profileId, info);
}

/* The GPU instances of a GPU: one per MIG device. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                              nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
    GET_GPU(device, g);
    REQUIRE(count);
    if (!g->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!gip_by(g, 1, profileId))
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (unsigned int i = 0; i < g_nmigs; i++) {
        const mig_t *m = &g_migs[i].mig;
        if (m->parent && &m->parent->gpu == g && m->gip && m->gip->id == profileId) {
            if (gpuInstances)
                gpuInstances[n] = &g_gis[i];
            n++;
        }
    }
    if (n > 0 && !gpuInstances)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceById(nvmlDevice_t device, unsigned int id,
                                                 nvmlGpuInstance_t *gpuInstance)
{
    GET_GPU(device, g);
    REQUIRE(gpuInstance);
    if (!g->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!g->mig)
        return NVML_ERROR_INVALID_STATE;
    for (unsigned int i = 0; i < g_nmigs; i++) {
        const mig_t *m = &g_migs[i].mig;
        if (m->parent && &m->parent->gpu == g && m->gip && m->gi_id == id) {
            *gpuInstance = &g_gis[i];
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

/* Validate a GPU or compute instance handle; on success *m is its MIG device. */
static nvmlReturn_t lookup_instance(const void *handle, int compute, const mig_t **m)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    for (unsigned int i = 0; i < g_nmigs; i++) {
        const void *h = compute ? (const void *)&g_cis[i] : (const void *)&g_gis[i];
        if (h == handle && handle && is_visible_mig(&g_migs[i])) {
            *m = &g_migs[i].mig;
            return (*m)->parent->gpu.lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
        }
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

#define GET_INSTANCE(handle, compute, m)                         \
    const mig_t *m = NULL;                                       \
    do {                                                         \
        nvmlReturn_t rc_ = lookup_instance((handle), (compute), &m); \
        if (rc_ != NVML_SUCCESS)                                 \
            return rc_;                                          \
    } while (0)

static unsigned int mig_slot(const mig_t *m)
{
    return (unsigned int)(((const char *)m - (const char *)&g_migs[0].mig) / sizeof(g_migs[0]));
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    GET_INSTANCE(gpuInstance, 0, m);
    REQUIRE(info);
    info->device = m->parent;
    info->id = m->gi_id;
    info->profileId = m->gip->id;
    info->placement.start = m->placement_start;
    info->placement.size = m->gip->placement_size;
    return NVML_SUCCESS;
}

/* Compute instance profiles of a GPU instance: one per slice count that fits;
 * the profile index is also its id (0: 1 slice, 1: 2, 2: 3, 3: 4, 4: 7). */
static const unsigned int CI_SLICES[] = {1, 2, 3, 4, 7};

static nvmlReturn_t ci_profile(const mig_t *m, unsigned int profile,
                               nvmlComputeInstanceProfileInfo_t *info)
{
    if (profile >= sizeof(CI_SLICES) / sizeof(CI_SLICES[0]) || CI_SLICES[profile] > m->gip->slices)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned int k = CI_SLICES[profile], n = m->gip->slices;
    info->id = profile;
    info->sliceCount = k;
    info->instanceCount = n / k;
    info->multiprocessorCount = m->gip->sm * k / n;
    info->sharedCopyEngineCount = m->gip->ce;
    info->sharedDecoderCount = m->gip->dec;
    info->sharedEncoderCount = m->gip->enc;
    info->sharedJpegCount = m->gip->jpeg;
    info->sharedOfaCount = m->gip->ofa;
    return NVML_SUCCESS;
}

static unsigned int ci_profile_of(const mig_t *m)
{
    for (unsigned int i = 0; i < sizeof(CI_SLICES) / sizeof(CI_SLICES[0]); i++)
        if (CI_SLICES[i] == m->gip->slices)
            return i;
    return 0;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t *info)
{
    GET_INSTANCE(gpuInstance, 0, m);
    REQUIRE(info);
    if (engProfile != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    return ci_profile(m, profile, info);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t *info)
{
    nvmlComputeInstanceProfileInfo_t v1;
    GET_INSTANCE(gpuInstance, 0, m);
    REQUIRE(info);
    if (info->version != CI_PROFILE_INFO_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (engProfile != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t rc = ci_profile(m, profile, &v1);
    if (rc != NVML_SUCCESS)
        return rc;
    memcpy(&info->id, &v1, sizeof(v1));
    if (v1.sliceCount == m->gip->slices)
        snprintf(info->name, sizeof(info->name), "MIG %s", m->gip->name);
    else
        snprintf(info->name, sizeof(info->name), "MIG %uc.%s", v1.sliceCount, m->gip->name);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance,
                                                       unsigned int profileId,
                                                       nvmlComputeInstance_t *computeInstances,
                                                       unsigned int *count)
{
    GET_INSTANCE(gpuInstance, 0, m);
    REQUIRE(count);
    nvmlComputeInstanceProfileInfo_t probe;
    if (ci_profile(m, profileId, &probe) != NVML_SUCCESS)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = profileId == ci_profile_of(m) ? 1 : 0;
    if (n && !computeInstances)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (n)
        computeInstances[0] = &g_cis[mig_slot(m)];
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int id,
                                                          nvmlComputeInstance_t *computeInstance)
{
    GET_INSTANCE(gpuInstance, 0, m);
    REQUIRE(computeInstance);
    if (id != m->ci_id)
        return NVML_ERROR_NOT_FOUND;
    *computeInstance = &g_cis[mig_slot(m)];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                  nvmlComputeInstanceInfo_t *info)
{
    GET_INSTANCE(computeInstance, 1, m);
    REQUIRE(info);
    info->device = m->parent;
    info->gpuInstance = &g_gis[mig_slot(m)];
    info->id = m->ci_id;
    info->profileId = ci_profile_of(m);
    info->placement.start = 0;
    info->placement.size = m->gip->slices;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                               nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

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

/* ------------------------------------------------------------------ */
/* events: a set can be created and registered; no event ever fires    */

static int valid_event_set(nvmlEventSet_t set)
{
    for (unsigned int i = 0; i < MAX_EVENT_SETS; i++)
        if (set == &g_event_sets[i])
            return g_event_sets[i].in_use;
    return 0;
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    CHECK_INIT();
    REQUIRE(set);
    nvmlReturn_t rc = NVML_ERROR_MEMORY;
    pthread_mutex_lock(&g_lock);
    for (unsigned int i = 0; i < MAX_EVENT_SETS; i++) {
        if (!g_event_sets[i].in_use) {
            g_event_sets[i].in_use = 1;
            *set = &g_event_sets[i];
            rc = NVML_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&g_lock);
    return rc;
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    CHECK_INIT();
    pthread_mutex_lock(&g_lock);
    int ok = valid_event_set(set);
    if (ok)
        set->in_use = 0;
    pthread_mutex_unlock(&g_lock);
    return ok ? NVML_SUCCESS : NVML_ERROR_INVALID_ARGUMENT;
}

static unsigned long long supported_events(const gpu_t *g)
{
    unsigned long long mask = EVENT_PSTATE | EVENT_XID_CRITICAL | EVENT_CLOCK;
    if (g->ecc_enabled)
        mask |= EVENT_SINGLE_BIT_ECC | EVENT_DOUBLE_BIT_ECC;
    if (g->mig_capable)
        mask |= EVENT_MIG_CONFIG_CHANGE;
    return mask;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device,
                                                     unsigned long long *eventTypes)
{
    GET_GPU(device, g);
    REQUIRE(eventTypes);
    *eventTypes = supported_events(g);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                             nvmlEventSet_t set)
{
    GET_GPU(device, g);
    REQUIRE(valid_event_set(set));
    if (eventTypes & ~supported_events(g))
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                        unsigned int timeoutms)
{
    CHECK_INIT();
    REQUIRE(valid_event_set(set) && data);
    struct timespec ts = {(time_t)(timeoutms / 1000), (long)(timeoutms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
    return NVML_ERROR_TIMEOUT;
}

EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data,
                                     unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
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
/* PCIe link, clock event reasons, NVLink, fabric, InfoROM              */
/* (gpunode.nvidia.health's checks; a profile without these fields: a  */
/* GPU with no PCIe data, no NVLink, no fabric, a valid InfoROM)        */

#define NVLINK_MAX_LINKS 36 /* NVML_NVLINK_MAX_LINKS */
#define FABRIC_INFO_V2_VERSION 0x02000024u
#define FABRIC_INFO_V3_VERSION 0x03000028u
#define FABRIC_HEALTH_SUMMARY_HEALTHY 1

typedef struct {
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
} nvmlGpuFabricInfo_t;

typedef struct {
    unsigned int version;
    unsigned char clusterUuid[16];
    nvmlReturn_t status;
    unsigned int cliqueId;
    unsigned int state;
    unsigned int healthMask;
    unsigned char healthSummary; /* v3 */
} nvmlGpuFabricInfoV_t;

_Static_assert(sizeof(nvmlGpuFabricInfo_t) == 28, "nvmlGpuFabricInfo_t layout");
_Static_assert(offsetof(nvmlGpuFabricInfoV_t, healthSummary) ==
                   (FABRIC_INFO_V2_VERSION & 0xffffff),
               "nvmlGpuFabricInfo_v2_t layout");
_Static_assert(sizeof(nvmlGpuFabricInfoV_t) == (FABRIC_INFO_V3_VERSION & 0xffffff),
               "nvmlGpuFabricInfo_v3_t layout");

/* A PCIe value the profile does not give: NOT_SUPPORTED, as on a GPU NVML cannot read. */
#define PCIE_GETTER(fn, f)                                      \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out) \
    {                                                           \
        GET_GPU(device, g);                                     \
        REQUIRE(out);                                           \
        if (!g->f)                                              \
            return NVML_ERROR_NOT_SUPPORTED;                    \
        *out = g->f;                                            \
        return NVML_SUCCESS;                                    \
    }

PCIE_GETTER(nvmlDeviceGetCurrPcieLinkGeneration, pcie_gen)
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkGeneration, pcie_gen_max)
PCIE_GETTER(nvmlDeviceGetGpuMaxPcieLinkGeneration, pcie_gen_max)
PCIE_GETTER(nvmlDeviceGetCurrPcieLinkWidth, pcie_width)
PCIE_GETTER(nvmlDeviceGetMaxPcieLinkWidth, pcie_width_max)

GPU_GETTER(nvmlDeviceGetPcieReplayCounter, unsigned int, g->pcie_replays)

GPU_GETTER(nvmlDeviceGetCurrentClocksEventReasons, unsigned long long, g->clocks_reasons)
GPU_GETTER(nvmlDeviceGetCurrentClocksThrottleReasons, unsigned long long, g->clocks_reasons)
GPU_GETTER(nvmlDeviceGetSupportedClocksEventReasons, unsigned long long, 0x1ffULL)
GPU_GETTER(nvmlDeviceGetSupportedClocksThrottleReasons, unsigned long long, 0x1ffULL)

/* A GPU without NVLink: NOT_SUPPORTED; a link it does not have: INVALID_ARGUMENT. */
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                             unsigned int *isActive)
{
    GET_GPU(device, g);
    REQUIRE(isActive);
    if (!g->nvlinks)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g->nvlinks || link >= NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    *isActive = (g->nvlink_down >> link) & 1ULL ? 0 : 1; /* NVML_FEATURE_DISABLED/ENABLED */
    return NVML_SUCCESS;
}

/* The fabric probe of a GPU on an NVSwitch baseboard (fabric_state != 0):
 * state NVML_GPU_FABRIC_STATE_*, status the probe's nvmlReturn_t once completed. */
static nvmlReturn_t fabric_of(nvmlDevice_t device, nvmlReturn_t *status, unsigned int *state,
                              unsigned int *clique)
{
    GET_GPU(device, g);
    if (!g->fabric_state)
        return NVML_ERROR_NOT_SUPPORTED;
    *state = g->fabric_state;
    *status = (nvmlReturn_t)g->fabric_status;
    *clique = 1;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *info)
{
    CHECK_INIT();
    REQUIRE(info);
    nvmlReturn_t rc = fabric_of(device, &info->status, &info->state, &info->cliqueId);
    if (rc == NVML_SUCCESS)
        memset(info->clusterUuid, 0x11, sizeof(info->clusterUuid));
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *info)
{
    CHECK_INIT();
    REQUIRE(info);
    if (info->version != FABRIC_INFO_V2_VERSION && info->version != FABRIC_INFO_V3_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    nvmlReturn_t rc = fabric_of(device, &info->status, &info->state, &info->cliqueId);
    if (rc != NVML_SUCCESS)
        return rc;
    memset(info->clusterUuid, 0x11, sizeof(info->clusterUuid));
    info->healthMask = 0;
    if (info->version == FABRIC_INFO_V3_VERSION)
        info->healthSummary = FABRIC_HEALTH_SUMMARY_HEALTHY;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device)
{
    GET_GPU(device, g);
    return g->inforom_corrupt ? NVML_ERROR_CORRUPTED_INFOROM : NVML_SUCCESS;
}
