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
 * They are the initial MIG state; the live state is the node's (see "MIG
 * state" below), changed through NVML as on hardware.
 *
 * Like a real NVML inside a container, which GPUs are visible is decided by
 * the device nodes: /dev/nvidiactl (195:255) must exist, and GPU <minor> is
 * visible iff /dev/nvidia<minor> is the character device 195:<minor>.  A MIG
 * device is visible iff its parent is and either its GI and CI cap nodes, or
 * the config or monitor cap node, are character devices 511:<minor> whose
 * open is not refused (EPERM/EACCES: a device cgroup denial); ENXIO and
 * ENODEV mean allowed (no real driver behind the major).
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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

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
#define MAX_MIGS 512 /* MIG device (= compute instance) handle slots over all GPUs */
#define MAX_GIS 256  /* GPU instance handle slots over all GPUs */
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
_Static_assert(sizeof(nvmlPlacement_t) == 8, "nvmlGpuInstancePlacement_t layout");
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
    unsigned int starts[8], nstarts; /* its placements (memory slot starts) */
    unsigned int first_gi;           /* GPU instance id at its first placement */
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
    unsigned int mig, mig_capable; /* mig: current (= pending) MIG mode, live */
    unsigned int mig_initial;      /* the profile's MIG mode */
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
    /* PCI and NVLink layout (see "PCI topology and NVLink far ends" below) */
    unsigned int numa_node;
    char pci_path[STR_LEN]; /* "<NUMA node>/<host bridge>/<switch>/..." */
    struct pci_addr { unsigned int domain, bus, device, function; } peers[36];
    unsigned int npeers;             /* far ends of links 0..npeers-1; 0: not known */
    unsigned int nvswitch_device_id; /* what an NVSwitch far end reports */
    /* runtime state */
    int visible;
    unsigned int index;
} gpu_t;

/* An initial MIG device from the profile ("mig" line): one GPU instance with
 * one compute instance spanning it. Used as the MIG state when the node has
 * none yet (see "MIG state" below). */
typedef struct {
    char parent_uuid[STR_LEN];
    char uuid[STR_LEN];
    unsigned int gi_id, ci_id;
    unsigned int profile_index; /* of its GPU instance profile */
    unsigned int placement_start;
} init_mig_t;

/* A GPU instance handle slot. Slots never move, so a handle stays valid while
 * its instance exists; a destroyed instance's slot answers INVALID_ARGUMENT. */
struct nvmlGpuInstance_st {
    int live, visible;
    struct nvmlDevice_st *parent;
    const gip_t *gip;
    unsigned int id, start;
};

/* A MIG device = one compute instance (its handle is g_cis[i] for g_migs[i]). */
typedef struct {
    int live, visible;
    char uuid[STR_LEN];
    unsigned int gi_id, ci_id;
    unsigned int ci_profile, ci_start;
    struct nvmlDevice_st *parent;
    struct nvmlGpuInstance_st *gi;
    const gip_t *gip; /* of its GPU instance */
    unsigned int index; /* position among the parent's visible MIG devices */
} mig_t;

struct nvmlDevice_st {
    int is_mig;
    gpu_t gpu; /* GPUs */
    mig_t mig; /* MIG devices */
};

struct nvmlComputeInstance_st {
    struct nvmlDevice_st *mig;
};

struct nvmlEventSet_st {
    int in_use;
    unsigned long long mask[MAX_GPUS]; /* event types registered, per GPU (g_gpus index) */
    long cursor;                       /* bytes of the node's event log already seen */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static void mig_reset(void);
static void mig_refresh(void);
static int is_visible_mig(nvmlDevice_t device);
static unsigned int g_refcount;
static int g_have_profile;
static char g_driver_version[STR_LEN];
static char g_nvml_version[STR_LEN];
static int g_cuda_version;
static struct nvmlDevice_st g_gpus[MAX_GPUS];
static unsigned int g_ngpus;
static struct nvmlDevice_st *g_order[MAX_GPUS]; /* visible GPUs, by bus id */
static unsigned int g_nvisible;
static init_mig_t g_init_migs[MAX_MIGS];
static unsigned int g_ninit_migs;
static struct nvmlDevice_st g_migs[MAX_MIGS];
static struct nvmlComputeInstance_st g_cis[MAX_MIGS];
static struct nvmlGpuInstance_st g_gis[MAX_GIS];
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

/* "00000000:0F:00.0,00000000:C7:00.0,...": the far end of each NVLink, in link order. */
static void parse_peers(gpu_t *g, const char *val)
{
    char one[32];
    g->npeers = 0;
    while (*val && g->npeers < sizeof(g->peers) / sizeof(g->peers[0])) {
        size_t n = strcspn(val, ",");
        if (n > 0 && n < sizeof(one)) {
            struct pci_addr *a = &g->peers[g->npeers];
            memcpy(one, val, n);
            one[n] = '\0';
            if (parse_bus_id(one, &a->domain, &a->bus, &a->device, &a->function) == 0)
                g->npeers++;
        }
        val += n;
        if (*val == ',')
            val++;
    }
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
    UINT_FIELD("numa_node", numa_node)
    STR_FIELD("pci_path", pci_path)
    UINT_FIELD("nvswitch_device_id", nvswitch_device_id)
    else if (strcmp(key, "nvlink_peers") == 0) parse_peers(g, val);
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
    else if (strcmp(key, "starts") == 0) {
        /* "0:2:4" */
        p->nstarts = 0;
        for (const char *c = val; *c && p->nstarts < 8;) {
            char *end;
            unsigned long v = strtoul(c, &end, 10);
            if (end == c)
                break;
            p->starts[p->nstarts++] = (unsigned int)v;
            c = *end == ':' ? end + 1 : end;
        }
    }
    UINT_FIELD("index", index)
    UINT_FIELD("id", id)
    UINT_FIELD("slices", slices)
    UINT_FIELD("instances", instances)
    UINT_FIELD("placement_size", placement_size)
    UINT_FIELD("first_gi", first_gi)
    UINT_FIELD("sm", sm)
    UINT_FIELD("ce", ce)
    UINT_FIELD("dec", dec)
    UINT_FIELD("enc", enc)
    UINT_FIELD("jpeg", jpeg)
    UINT_FIELD("ofa", ofa)
#undef UINT_FIELD
}

static void set_mig_field(init_mig_t *m, const char *key, const char *val)
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
        d->gpu.mig_initial = d->gpu.mig;
        if (d->gpu.pci_path[0] == '\0') /* a payload without a layout: NUMA 0, bridge 0 */
            copy_str(d->gpu.pci_path, sizeof(d->gpu.pci_path), "0/0");
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
        if (g_ninit_migs >= MAX_MIGS)
            return;
        init_mig_t *m = &g_init_migs[g_ninit_migs];
        memset(m, 0, sizeof(*m));
        for_each_field(rest, mig_setter, m);
        if (m->parent_uuid[0] == '\0' || m->uuid[0] == '\0')
            return;
        g_ninit_migs++;
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
    g_ninit_migs = 0;

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
    if (strncmp(uuid, "MIG-", 4) == 0) {
        mig_refresh();
        for (unsigned int i = 0; i < MAX_MIGS; i++) {
            if (g_migs[i].mig.live && strcmp(g_migs[i].mig.uuid, uuid) == 0 &&
                is_visible_mig(&g_migs[i])) {
                if (g_migs[i].mig.parent->gpu.lost)
                    return NVML_ERROR_GPU_IS_LOST;
                *device = &g_migs[i];
                return NVML_SUCCESS;
            }
        }
    }
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

/* A live MIG device this process may see (MIG state re-read when it changed). */
static int is_visible_mig(nvmlDevice_t device)
{
    uintptr_t at = (uintptr_t)device, first = (uintptr_t)&g_migs[0];
    if (at < first || at >= (uintptr_t)&g_migs[MAX_MIGS] || (at - first) % sizeof(g_migs[0]))
        return 0;
    mig_refresh();
    return device->mig.live && device->mig.visible;
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

/* A MIG device's index is its index within its parent, the one
 * nvmlDeviceGetMigDeviceHandleByIndex takes (nvml.h); NVIDIA's runtime (jit-cdi)
 * asks for it. */
ANY_GETTER(nvmlDeviceGetIndex, unsigned int, m ? m->index : g->index)

static unsigned int mig_ci_slices(const mig_t *m); /* see "MIG" below */

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    char mig_name[STR_LEN + 48];
    GET_ANY(device, g, m);
    if (!m)
        return copy_out(name, length, g->name);
    /* as a real driver names MIG devices: "NVIDIA A100-SXM4-80GB MIG 3g.40gb", one whose
     * compute instance is narrower than its GPU instance "... MIG 1c.3g.40gb" */
    unsigned int k = mig_ci_slices(m);
    if (k == m->gip->slices)
        snprintf(mig_name, sizeof(mig_name), "%s MIG %s", g->name, m->gip->name);
    else
        snprintf(mig_name, sizeof(mig_name), "%s MIG %uc.%s", g->name, k, m->gip->name);
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
/* MIG state                                                            */
/*
 * MIG is driver state, as on hardware: MIG mode and the GPU and compute
 * instances live on the node, not in a process. The simulator keeps them in
 * STATE_FILE on the node's simulated /proc/driver tmpfs (gpunode.sim.apply
 * mounts it; procdriver shows it in every container), so every process and
 * container of the node sees the same state and it is gone when the node
 * restarts, like kernel state. The file's name and format are simulator-
 * private: it sits in a dot-directory no product code reads (product code
 * asks NVML, and reads the driver's capabilities files below). Changes are
 * serialized across processes by flock(LOCK_FILE) and written as a temporary
 * file renamed over STATE_FILE. Without the file (a container without the
 * node's /proc/driver, a test root) the state is the profile's (the "mig"
 * lines). MIG mode survives a reboot on real GPUs: each change of it is also
 * written to MODE_FILE on the node's disk (best effort), which
 * gpunode.sim.apply reads when it sets up a fresh state for the same profile.
 *
 * Format (TAB-separated; "key" names the profile the state was set up for):
 *   gpunode-sim-mig-state v1
 *   key<TAB><profile digest>
 *   gpu<TAB>uuid=GPU-...<TAB>mode=1<TAB>counter=3
 *   gi<TAB>parent=GPU-...<TAB>id=2<TAB>profile=9<TAB>start=4
 *   ci<TAB>parent=GPU-...<TAB>gi=2<TAB>id=0<TAB>profile=2<TAB>start=0<TAB>uuid=MIG-...
 *
 * GPU instance ids are the real driver's: fixed by the placement (the
 * profile's first id plus the placement's position, e.g. 1g.10gb at slot 0..6
 * = GI 7..13, 3g.40gb at 0 / 4 = GI 1 / 2). Compute instance ids: the lowest
 * free one in the GPU instance. A new MIG device's UUID is derived from the
 * parent's UUID, the GI and CI ids and the GPU's creation counter.
 *
 * The driver's footprint, rewritten on every change: the capability files
 * /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access and
 * the /dev/nvidia-caps/nvidia-cap<minor> nodes of existing instances (made as
 * nvidia-modprobe would; skipped where mknod is not allowed). Cap minors are
 * the simulator's choice, fitting NVIDIA's sample mig-minors lines:
 * GI = 3 + 135 * gpu minor + 9 * gi, CI = GI + 1 + ci (product code reads
 * them from the access files, never computes them).
 */
#define SIM_DIR "/proc/driver/.gpunode-sim" /* simulator-private */
#define STATE_FILE SIM_DIR "/mig-state"
#define LOCK_FILE SIM_DIR "/mig.lock"
#define STATE_MAGIC "gpunode-sim-mig-state v1"
#define MODE_DIR "/var/lib/gpunode-sim"
#define MODE_FILE MODE_DIR "/mig-mode"
#define CAPS_PROC "/proc/driver/nvidia/capabilities"
#define CAPS_DEV "/dev/nvidia-caps"
#define CAPS_MAJOR 511 /* gpunode.sim.procfs.CAPS_MAJOR */
#define CAP_CONFIG_MINOR 1
#define CAP_MONITOR_MINOR 2
#define CAPS_PER_GPU 135
#define CAPS_PER_GI 9
#define MAX_CIS_PER_GI 8
#define MEMORY_SLOTS 8
#define STATE_BUF (256 * 1024)

typedef struct {
    char uuid[STR_LEN];
    unsigned int mode, counter;
} st_gpu_t;

typedef struct {
    char parent[STR_LEN];
    unsigned int id, profile, start; /* profile: the GI profile id */
} st_gi_t;

typedef struct {
    char parent[STR_LEN];
    unsigned int gi, id, profile, start; /* profile: the CI profile id */
    char uuid[STR_LEN];
} st_ci_t;

typedef struct {
    char key[STR_LEN];
    st_gpu_t gpus[MAX_GPUS];
    unsigned int ngpus;
    st_gi_t gis[MAX_GIS];
    unsigned int ngis;
    st_ci_t cis[MAX_MIGS];
    unsigned int ncis;
} state_t;

static state_t g_st;
static struct {
    int valid, exists;
    dev_t dev;
    ino_t ino;
    struct timespec mtim;
    off_t size;
} g_seen;
static pthread_mutex_t g_mig_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_gi_cursor, g_mig_cursor;
static char g_buf[STATE_BUF];

/* Compute instance profiles: the profile id is its index (0: 1 slice, 1: 2,
 * 2: 3, 3: 4, 4: 7); a profile fits a GPU instance of at least that many
 * slices, at starts that are multiples of CI_STEP. */
static const unsigned int CI_SLICES[] = {1, 2, 3, 4, 7};
static const unsigned int CI_STEP[] = {1, 2, 4, 4, 8};
#define CI_PROFILES (sizeof(CI_SLICES) / sizeof(CI_SLICES[0]))

static unsigned int mig_ci_slices(const mig_t *m)
{
    return CI_SLICES[m->ci_profile];
}

static unsigned int gi_minor(unsigned int gpu_minor, unsigned int gi)
{
    return 3 + CAPS_PER_GPU * gpu_minor + CAPS_PER_GI * gi;
}

static unsigned int ci_minor(unsigned int gpu_minor, unsigned int gi, unsigned int ci)
{
    return gi_minor(gpu_minor, gi) + 1 + ci;
}

static struct nvmlDevice_st *gpu_dev(const char *uuid)
{
    for (unsigned int i = 0; i < g_ngpus; i++)
        if (strcmp(g_gpus[i].gpu.uuid, uuid) == 0)
            return &g_gpus[i];
    return NULL;
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

static int gip_start_pos(const gip_t *p, unsigned int start)
{
    for (unsigned int i = 0; i < p->nstarts; i++)
        if (p->starts[i] == start)
            return (int)i;
    return -1;
}

static unsigned int ci_full_profile(const gip_t *p)
{
    for (unsigned int i = 0; i < CI_PROFILES; i++)
        if (CI_SLICES[i] == p->slices)
            return i;
    return 0;
}

static st_gpu_t *st_gpu(state_t *st, const char *uuid)
{
    for (unsigned int i = 0; i < st->ngpus; i++)
        if (strcmp(st->gpus[i].uuid, uuid) == 0)
            return &st->gpus[i];
    return NULL;
}

static int st_gi_at(const state_t *st, const char *parent, unsigned int id)
{
    for (unsigned int i = 0; i < st->ngis; i++)
        if (st->gis[i].id == id && strcmp(st->gis[i].parent, parent) == 0)
            return (int)i;
    return -1;
}

static int st_ci_at(const state_t *st, const char *parent, unsigned int gi, unsigned int id)
{
    for (unsigned int i = 0; i < st->ncis; i++)
        if (st->cis[i].gi == gi && st->cis[i].id == id && strcmp(st->cis[i].parent, parent) == 0)
            return (int)i;
    return -1;
}

/* The state a node without a state file has: the profile's. */
static void state_initial(state_t *st)
{
    memset(st, 0, sizeof(*st));
    for (unsigned int i = 0; i < g_ngpus && st->ngpus < MAX_GPUS; i++) {
        const gpu_t *g = &g_gpus[i].gpu;
        if (!g->mig_capable)
            continue;
        st_gpu_t *sg = &st->gpus[st->ngpus++];
        copy_str(sg->uuid, sizeof(sg->uuid), g->uuid);
        sg->mode = g->mig_initial ? 1 : 0;
    }
    for (unsigned int i = 0; i < g_ninit_migs; i++) {
        const init_mig_t *m = &g_init_migs[i];
        struct nvmlDevice_st *d = gpu_dev(m->parent_uuid);
        const gip_t *p = d && d->gpu.mig_capable && d->gpu.mig_initial
                             ? gip_by(&d->gpu, 0, m->profile_index)
                             : NULL;
        if (!p || st->ngis >= MAX_GIS || st->ncis >= MAX_MIGS)
            continue;
        if (st_gi_at(st, m->parent_uuid, m->gi_id) < 0) {
            st_gi_t *gi = &st->gis[st->ngis++];
            copy_str(gi->parent, sizeof(gi->parent), m->parent_uuid);
            gi->id = m->gi_id;
            gi->profile = p->id;
            gi->start = m->placement_start;
        }
        st_ci_t *ci = &st->cis[st->ncis++];
        copy_str(ci->parent, sizeof(ci->parent), m->parent_uuid);
        ci->gi = m->gi_id;
        ci->id = m->ci_id;
        ci->profile = ci_full_profile(p);
        ci->start = 0;
        copy_str(ci->uuid, sizeof(ci->uuid), m->uuid);
    }
}

static void st_gpu_setter(void *o, const char *k, const char *v)
{
    st_gpu_t *g = o;
    if (strcmp(k, "uuid") == 0)
        copy_str(g->uuid, sizeof(g->uuid), v);
    else if (strcmp(k, "mode") == 0)
        g->mode = (unsigned int)parse_ull(v);
    else if (strcmp(k, "counter") == 0)
        g->counter = (unsigned int)parse_ull(v);
}

static void st_gi_setter(void *o, const char *k, const char *v)
{
    st_gi_t *g = o;
    if (strcmp(k, "parent") == 0)
        copy_str(g->parent, sizeof(g->parent), v);
    else if (strcmp(k, "id") == 0)
        g->id = (unsigned int)parse_ull(v);
    else if (strcmp(k, "profile") == 0)
        g->profile = (unsigned int)parse_ull(v);
    else if (strcmp(k, "start") == 0)
        g->start = (unsigned int)parse_ull(v);
}

static void st_ci_setter(void *o, const char *k, const char *v)
{
    st_ci_t *c = o;
    if (strcmp(k, "parent") == 0)
        copy_str(c->parent, sizeof(c->parent), v);
    else if (strcmp(k, "uuid") == 0)
        copy_str(c->uuid, sizeof(c->uuid), v);
    else if (strcmp(k, "gi") == 0)
        c->gi = (unsigned int)parse_ull(v);
    else if (strcmp(k, "id") == 0)
        c->id = (unsigned int)parse_ull(v);
    else if (strcmp(k, "profile") == 0)
        c->profile = (unsigned int)parse_ull(v);
    else if (strcmp(k, "start") == 0)
        c->start = (unsigned int)parse_ull(v);
}

/* Read STATE_FILE into *st: 1 when read, 0 when absent or not ours. */
static int state_read(state_t *st)
{
    int fd = open(STATE_FILE, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, g_buf + len, sizeof(g_buf) - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
        if (len == sizeof(g_buf) - 1)
            break;
    }
    close(fd);
    g_buf[len] = '\0';
    size_t magic = strlen(STATE_MAGIC);
    if (strncmp(g_buf, STATE_MAGIC, magic) != 0 || g_buf[magic] != '\n')
        return 0;
    memset(st, 0, sizeof(*st));
    char *line = g_buf + magic + 1;
    while (line && *line) {
        char *next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        char *tab = strchr(line, '\t');
        if (tab) {
            *tab = '\0';
            char *rest = tab + 1;
            if (strcmp(line, "key") == 0) {
                copy_str(st->key, sizeof(st->key), rest);
            } else if (strcmp(line, "gpu") == 0 && st->ngpus < MAX_GPUS) {
                for_each_field(rest, st_gpu_setter, &st->gpus[st->ngpus]);
                if (st->gpus[st->ngpus].uuid[0])
                    st->ngpus++;
            } else if (strcmp(line, "gi") == 0 && st->ngis < MAX_GIS) {
                for_each_field(rest, st_gi_setter, &st->gis[st->ngis]);
                if (st->gis[st->ngis].parent[0])
                    st->ngis++;
            } else if (strcmp(line, "ci") == 0 && st->ncis < MAX_MIGS) {
                for_each_field(rest, st_ci_setter, &st->cis[st->ncis]);
                if (st->cis[st->ncis].parent[0] && st->cis[st->ncis].uuid[0])
                    st->ncis++;
            }
        }
        line = next;
    }
    return 1;
}

/* Write *text* to *path* as a temporary file renamed over it; 0 or -1. */
static int write_atomically(const char *path, const char *text, mode_t mode)
{
    char tmp[256];
    const char *slash = strrchr(path, '/');
    if (!slash)
        return -1;
    snprintf(tmp, sizeof(tmp), "%.*s/.%s.XXXXXX", (int)(slash - path), path, slash + 1);
    int fd = mkstemp(tmp);
    if (fd < 0)
        return -1;
    size_t len = strlen(text), done = 0;
    int ok = 1;
    while (done < len) {
        ssize_t n = write(fd, text + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ok = 0;
            break;
        }
        done += (size_t)n;
    }
    ok = ok && fchmod(fd, mode) == 0;
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return 0;
    unlink(tmp);
    return -1;
}

static size_t append(size_t at, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static size_t append(size_t at, const char *fmt, ...)
{
    if (at >= sizeof(g_buf))
        return at;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(g_buf + at, sizeof(g_buf) - at, fmt, ap);
    va_end(ap);
    return n < 0 ? at : at + (size_t)n;
}

static int state_write(const state_t *st)
{
    size_t at = append(0, "%s\nkey\t%s\n", STATE_MAGIC, st->key);
    for (unsigned int i = 0; i < st->ngpus; i++)
        at = append(at, "gpu\tuuid=%s\tmode=%u\tcounter=%u\n", st->gpus[i].uuid,
                    st->gpus[i].mode, st->gpus[i].counter);
    for (unsigned int i = 0; i < st->ngis; i++)
        at = append(at, "gi\tparent=%s\tid=%u\tprofile=%u\tstart=%u\n", st->gis[i].parent,
                    st->gis[i].id, st->gis[i].profile, st->gis[i].start);
    for (unsigned int i = 0; i < st->ncis; i++)
        at = append(at, "ci\tparent=%s\tgi=%u\tid=%u\tprofile=%u\tstart=%u\tuuid=%s\n",
                    st->cis[i].parent, st->cis[i].gi, st->cis[i].id, st->cis[i].profile,
                    st->cis[i].start, st->cis[i].uuid);
    if (at >= sizeof(g_buf) - 1)
        return -1;
    return write_atomically(STATE_FILE, g_buf, 0644);
}

/* MIG mode survives a reboot: keep it on the node's disk too (best effort). */
static void persist_modes(const state_t *st)
{
    struct stat sb;
    if (stat(MODE_DIR, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return;
    size_t at = append(0, "key\t%s\n", st->key);
    for (unsigned int i = 0; i < st->ngpus; i++)
        at = append(at, "%s\t%u\n", st->gpus[i].uuid, st->gpus[i].mode);
    if (at < sizeof(g_buf) - 1)
        (void)write_atomically(MODE_FILE, g_buf, 0644);
}

/* ---- the driver's footprint ---- */

static void remove_tree(const char *path)
{
    DIR *dir = opendir(path);
    if (dir) {
        struct dirent *e;
        char sub[512];
        while ((e = readdir(dir)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
            remove_tree(sub);
        }
        closedir(dir);
        rmdir(path);
    } else {
        unlink(path);
    }
}

static void write_access(const char *dir, unsigned int minor)
{
    char path[256], text[128], have[128];
    snprintf(path, sizeof(path), "%s/access", dir);
    snprintf(text, sizeof(text), "DeviceFileMinor: %u\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
             minor);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, have, sizeof(have) - 1);
        close(fd);
        if (n >= 0 && (have[n] = '\0', strcmp(have, text) == 0))
            return;
    }
    (void)write_atomically(path, text, 0444);
}

static void make_dir(const char *path)
{
    (void)mkdir(path, 0555);
}

/* Remove every giN (or ciN) entry of dir that keep() rejects. */
static void prune(const char *dir, const char *prefix, int (*keep)(unsigned int, const void *),
                  const void *arg)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char path[512];
    size_t plen = strlen(prefix);
    while ((e = readdir(d)) != NULL) {
        unsigned int id;
        char tail;
        if (strncmp(e->d_name, prefix, plen) != 0)
            continue;
        if (sscanf(e->d_name + plen, "%u%c", &id, &tail) == 1 && keep(id, arg))
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        remove_tree(path);
    }
    closedir(d);
}

typedef struct {
    const char *parent;
    unsigned int gi;
} prune_arg_t;

static int keep_gi(unsigned int id, const void *arg)
{
    return st_gi_at(&g_st, ((const prune_arg_t *)arg)->parent, id) >= 0;
}

static int keep_ci(unsigned int id, const void *arg)
{
    const prune_arg_t *a = arg;
    return st_ci_at(&g_st, a->parent, a->gi, id) >= 0;
}

static void ensure_cap_node(unsigned int minor, int want)
{
    char path[64];
    struct stat sb;
    snprintf(path, sizeof(path), CAPS_DEV "/nvidia-cap%u", minor);
    int have = lstat(path, &sb) == 0;
    int right = have && S_ISCHR(sb.st_mode) && sb.st_rdev == makedev(CAPS_MAJOR, minor);
    if (have && (!want || !right))
        unlink(path);
    if (want && !right) {
        /* as nvidia-modprobe makes them; a container may not mknod: skip */
        if (mknod(path, S_IFCHR | 0444, makedev(CAPS_MAJOR, minor)) == 0)
            chmod(path, 0444);
    }
}

static void footprint_sync(void)
{
    char dir[256], sub[320];
    mkdir(CAPS_PROC, 0555);
    mkdir(CAPS_DEV, 0755);
    for (unsigned int i = 0; i < g_ngpus; i++) {
        const gpu_t *g = &g_gpus[i].gpu;
        if (!g->mig_capable)
            continue;
        snprintf(dir, sizeof(dir), CAPS_PROC "/gpu%u", g->minor);
        make_dir(dir);
        snprintf(dir, sizeof(dir), CAPS_PROC "/gpu%u/mig", g->minor);
        make_dir(dir);
        prune_arg_t arg = {g->uuid, 0};
        prune(dir, "gi", keep_gi, &arg);
        for (unsigned int k = 0; k < g_st.ngis; k++) {
            const st_gi_t *gi = &g_st.gis[k];
            if (strcmp(gi->parent, g->uuid) != 0)
                continue;
            snprintf(sub, sizeof(sub), "%s/gi%u", dir, gi->id);
            make_dir(sub);
            arg.gi = gi->id;
            prune(sub, "ci", keep_ci, &arg);
            write_access(sub, gi_minor(g->minor, gi->id));
            for (unsigned int c = 0; c < g_st.ncis; c++) {
                const st_ci_t *ci = &g_st.cis[c];
                if (ci->gi != gi->id || strcmp(ci->parent, g->uuid) != 0)
                    continue;
                char cdir[400];
                snprintf(cdir, sizeof(cdir), "%s/ci%u", sub, ci->id);
                make_dir(cdir);
                write_access(cdir, ci_minor(g->minor, gi->id, ci->id));
            }
        }
        unsigned int first = gi_minor(g->minor, 0);
        for (unsigned int m = first; m < first + CAPS_PER_GPU; m++) {
            unsigned int gi = (m - first) / CAPS_PER_GI, slot = (m - first) % CAPS_PER_GI;
            int want = slot == 0 ? st_gi_at(&g_st, g->uuid, gi) >= 0
                                 : st_ci_at(&g_st, g->uuid, gi, slot - 1) >= 0;
            ensure_cap_node(m, want);
        }
    }
}

/* ---- this process's view: handle slots and visibility ---- */

/* A cap node NVML may use: the char device CAPS_MAJOR:minor whose open is not
 * refused by the device cgroup (EPERM/EACCES). ENXIO/ENODEV: allowed (no real
 * driver behind the major). */
static int cap_ok(unsigned int minor)
{
    char path[64];
    struct stat sb;
    snprintf(path, sizeof(path), CAPS_DEV "/nvidia-cap%u", minor);
    if (stat(path, &sb) != 0 || !S_ISCHR(sb.st_mode) || major(sb.st_rdev) != CAPS_MAJOR ||
        minor(sb.st_rdev) != minor)
        return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return errno != EPERM && errno != EACCES;
}

static void reconcile(void)
{
    static unsigned char matched_gi[MAX_GIS], matched_ci[MAX_MIGS];
    memset(matched_gi, 0, sizeof(matched_gi));
    memset(matched_ci, 0, sizeof(matched_ci));
    for (unsigned int i = 0; i < g_ngpus; i++) {
        gpu_t *g = &g_gpus[i].gpu;
        st_gpu_t *sg = st_gpu(&g_st, g->uuid);
        g->mig = g->mig_capable && sg ? sg->mode != 0 : 0;
    }
    /* GPU instances: keep the slots of those still there, give new ones free slots */
    for (unsigned int s = 0; s < MAX_GIS; s++) {
        struct nvmlGpuInstance_st *h = &g_gis[s];
        if (!h->live)
            continue;
        int k = st_gi_at(&g_st, h->parent->gpu.uuid, h->id);
        if (k >= 0 && !matched_gi[k] && g_st.gis[k].profile == h->gip->id &&
            g_st.gis[k].start == h->start)
            matched_gi[k] = 1;
        else
            h->live = 0;
    }
    for (unsigned int k = 0; k < g_st.ngis; k++) {
        const st_gi_t *sgi = &g_st.gis[k];
        struct nvmlDevice_st *d = gpu_dev(sgi->parent);
        const gip_t *p = d ? gip_by(&d->gpu, 1, sgi->profile) : NULL;
        if (matched_gi[k] || !p || !d->gpu.mig)
            continue;
        for (unsigned int n = 0; n < MAX_GIS; n++) {
            struct nvmlGpuInstance_st *h = &g_gis[(g_gi_cursor + n) % MAX_GIS];
            if (h->live)
                continue;
            g_gi_cursor = (g_gi_cursor + n + 1) % MAX_GIS;
            memset(h, 0, sizeof(*h));
            h->live = 1;
            h->parent = d;
            h->gip = p;
            h->id = sgi->id;
            h->start = sgi->start;
            break;
        }
    }
    /* compute instances = MIG devices */
    for (unsigned int s = 0; s < MAX_MIGS; s++) {
        mig_t *m = &g_migs[s].mig;
        if (!m->live)
            continue;
        int k = st_ci_at(&g_st, m->parent->gpu.uuid, m->gi_id, m->ci_id);
        if (k >= 0 && !matched_ci[k] && strcmp(g_st.cis[k].uuid, m->uuid) == 0 &&
            g_st.cis[k].profile == m->ci_profile && g_st.cis[k].start == m->ci_start)
            matched_ci[k] = 1;
        else
            m->live = 0;
    }
    for (unsigned int k = 0; k < g_st.ncis; k++) {
        const st_ci_t *sci = &g_st.cis[k];
        struct nvmlDevice_st *d = gpu_dev(sci->parent);
        if (matched_ci[k] || !d || !d->gpu.mig)
            continue;
        for (unsigned int n = 0; n < MAX_MIGS; n++) {
            unsigned int s = (g_mig_cursor + n) % MAX_MIGS;
            mig_t *m = &g_migs[s].mig;
            if (m->live)
                continue;
            g_mig_cursor = (s + 1) % MAX_MIGS;
            memset(&g_migs[s], 0, sizeof(g_migs[s]));
            g_migs[s].is_mig = 1;
            m->live = 1;
            m->parent = d;
            copy_str(m->uuid, sizeof(m->uuid), sci->uuid);
            m->gi_id = sci->gi;
            m->ci_id = sci->id;
            m->ci_profile = sci->profile;
            m->ci_start = sci->start;
            g_cis[s].mig = &g_migs[s];
            break;
        }
    }
    /* links and visibility (section 3 of the MIG contract) */
    int any_cap = cap_ok(CAP_CONFIG_MINOR) || cap_ok(CAP_MONITOR_MINOR);
    for (unsigned int s = 0; s < MAX_GIS; s++) {
        struct nvmlGpuInstance_st *h = &g_gis[s];
        if (h->live)
            h->visible = h->parent->gpu.visible &&
                         (any_cap || cap_ok(gi_minor(h->parent->gpu.minor, h->id)));
    }
    for (unsigned int s = 0; s < MAX_MIGS; s++) {
        mig_t *m = &g_migs[s].mig;
        if (!m->live)
            continue;
        m->gi = NULL;
        for (unsigned int t = 0; t < MAX_GIS; t++)
            if (g_gis[t].live && g_gis[t].parent == m->parent && g_gis[t].id == m->gi_id)
                m->gi = &g_gis[t];
        if (!m->gi || m->ci_profile >= CI_PROFILES) {
            m->live = 0;
            continue;
        }
        m->gip = m->gi->gip;
        unsigned int minor = m->parent->gpu.minor;
        m->visible = m->parent->gpu.visible &&
                     (any_cap || (cap_ok(gi_minor(minor, m->gi_id)) &&
                                  cap_ok(ci_minor(minor, m->gi_id, m->ci_id))));
    }
    /* a MIG device's index: its position among its parent's, by GI id then CI id */
    for (unsigned int s = 0; s < MAX_MIGS; s++) {
        mig_t *m = &g_migs[s].mig;
        if (!m->live || !m->visible)
            continue;
        m->index = 0;
        for (unsigned int t = 0; t < MAX_MIGS; t++) {
            const mig_t *o = &g_migs[t].mig;
            if (o->live && o->visible && o->parent == m->parent &&
                (o->gi_id < m->gi_id || (o->gi_id == m->gi_id && o->ci_id < m->ci_id)))
                m->index++;
        }
    }
}

/* Re-read the state when the file changed (under g_mig_lock). */
static void mig_load(void)
{
    struct stat sb;
    int exists = stat(STATE_FILE, &sb) == 0;
    if (g_seen.valid && exists == g_seen.exists &&
        (!exists || (sb.st_dev == g_seen.dev && sb.st_ino == g_seen.ino &&
                     sb.st_size == g_seen.size && sb.st_mtim.tv_sec == g_seen.mtim.tv_sec &&
                     sb.st_mtim.tv_nsec == g_seen.mtim.tv_nsec)))
        return;
    if (!exists || !state_read(&g_st))
        state_initial(&g_st);
    g_seen.valid = 1;
    g_seen.exists = exists;
    if (exists) {
        g_seen.dev = sb.st_dev;
        g_seen.ino = sb.st_ino;
        g_seen.size = sb.st_size;
        g_seen.mtim = sb.st_mtim;
    }
    reconcile();
}

static void mig_refresh(void)
{
    pthread_mutex_lock(&g_mig_lock);
    mig_load();
    pthread_mutex_unlock(&g_mig_lock);
}

/* At (re)initialization: forget every handle, read the state afresh. */
static void mig_reset(void)
{
    pthread_mutex_lock(&g_mig_lock);
    memset(g_gis, 0, sizeof(g_gis));
    memset(g_migs, 0, sizeof(g_migs));
    memset(g_cis, 0, sizeof(g_cis));
    memset(&g_seen, 0, sizeof(g_seen));
    pthread_mutex_unlock(&g_mig_lock);
}

/* ---- changes: root only, under flock, written atomically ---- */

static int g_lock_fd = -1;

/* Take the node's MIG lock and the state as it is now; on success the caller
 * holds g_mig_lock and must call change_end. */
static nvmlReturn_t change_begin(void)
{
    if (geteuid() != 0)
        return NVML_ERROR_NO_PERMISSION;
    if (mkdir(SIM_DIR, 0755) != 0 && errno != EEXIST)
        return NVML_ERROR_NO_PERMISSION;
    int fd = open(LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
        return NVML_ERROR_NO_PERMISSION;
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            close(fd);
            return NVML_ERROR_UNKNOWN;
        }
    }
    pthread_mutex_lock(&g_mig_lock);
    g_lock_fd = fd;
    g_seen.valid = 0;
    mig_load();
    return NVML_SUCCESS;
}

/* Write the changed state (commit) or drop it; release the locks. */
static nvmlReturn_t change_end(nvmlReturn_t rc)
{
    if (rc == NVML_SUCCESS) {
        if (state_write(&g_st) != 0) {
            rc = NVML_ERROR_NO_PERMISSION;
        } else {
            footprint_sync();
            persist_modes(&g_st);
        }
    }
    g_seen.valid = 0;
    mig_load();
    pthread_mutex_unlock(&g_mig_lock);
    close(g_lock_fd);
    g_lock_fd = -1;
    return rc;
}

/* Slots taken by the GPU instances of parent (memory) and their compute slices. */
static void gi_usage(const char *parent, unsigned int *slots, unsigned int *slices,
                     unsigned int profile_id, unsigned int *same_profile)
{
    *slots = 0;
    *slices = 0;
    *same_profile = 0;
    struct nvmlDevice_st *d = gpu_dev(parent);
    for (unsigned int i = 0; d && i < g_st.ngis; i++) {
        const st_gi_t *gi = &g_st.gis[i];
        const gip_t *p = strcmp(gi->parent, parent) == 0 ? gip_by(&d->gpu, 1, gi->profile) : NULL;
        if (!p)
            continue;
        *slots |= ((1u << p->placement_size) - 1) << gi->start;
        *slices += p->slices;
        *same_profile += p->id == profile_id;
    }
}

static int gi_fits(const gip_t *p, unsigned int start, unsigned int slots, unsigned int slices,
                   unsigned int same)
{
    unsigned int want = ((1u << p->placement_size) - 1) << start;
    return !(slots & want) && slices + p->slices <= MIG_SLICES && same < p->instances &&
           start + p->placement_size <= MEMORY_SLOTS;
}

/* The CI slices of a GPU instance taken by its compute instances. */
static void ci_usage(const char *parent, unsigned int gi, unsigned int profile,
                     unsigned int *slices, unsigned int *same)
{
    *slices = 0;
    *same = 0;
    for (unsigned int i = 0; i < g_st.ncis; i++) {
        const st_ci_t *c = &g_st.cis[i];
        if (c->gi != gi || strcmp(c->parent, parent) != 0 || c->profile >= CI_PROFILES)
            continue;
        *slices |= ((1u << CI_SLICES[c->profile]) - 1) << c->start;
        *same += c->profile == profile;
    }
}

static int ci_placement_valid(const gip_t *p, unsigned int profile, unsigned int start)
{
    return profile < CI_PROFILES && CI_SLICES[profile] <= p->slices &&
           start % CI_STEP[profile] == 0 && start + CI_SLICES[profile] <= p->slices;
}

static int ci_fits(const gip_t *p, unsigned int profile, unsigned int start, unsigned int taken,
                   unsigned int same)
{
    unsigned int want = ((1u << CI_SLICES[profile]) - 1) << start;
    return ci_placement_valid(p, profile, start) && !(taken & want) &&
           same < p->slices / CI_SLICES[profile];
}

/* 64-bit FNV-1a over text, from seed. */
static unsigned long long fnv1a(unsigned long long seed, const char *text)
{
    unsigned long long h = seed;
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        h ^= *c;
        h *= 0x100000001b3ULL;
    }
    return h;
}

static void mig_uuid(char *out, size_t cap, const char *parent, unsigned int gi, unsigned int ci,
                     unsigned int counter)
{
    char text[STR_LEN + 64];
    snprintf(text, sizeof(text), "%s/%u/%u/%u", parent, gi, ci, counter);
    unsigned long long a = fnv1a(0xcbf29ce484222325ULL, text);
    unsigned long long b = fnv1a(0x84222325cbf29ce4ULL, text);
    snprintf(out, cap, "MIG-%08llx-%04llx-%04llx-%04llx-%012llx", a >> 32, (a >> 16) & 0xffff,
             a & 0xffff, b >> 48, b & 0xffffffffffffULL);
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
    mig_refresh();
    *currentMode = g->mig ? 1 : 0;
    *pendingMode = g->mig ? 1 : 0;
    return NVML_SUCCESS;
}

/* The new mode takes effect at once (current = pending), as after the GPU
 * reset nvidia-smi does; activationStatus is NVML_SUCCESS. */
EXPORT nvmlReturn_t nvmlDeviceSetMigMode(nvmlDevice_t device, unsigned int mode,
                                         nvmlReturn_t *activationStatus)
{
    GET_GPU(device, g);
    REQUIRE(activationStatus && mode <= 1);
    if (!g->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t rc = change_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    st_gpu_t *sg = st_gpu(&g_st, g->uuid);
    if (!sg && g_st.ngpus < MAX_GPUS) {
        sg = &g_st.gpus[g_st.ngpus++];
        memset(sg, 0, sizeof(*sg));
        copy_str(sg->uuid, sizeof(sg->uuid), g->uuid);
    }
    if (!sg)
        rc = NVML_ERROR_UNKNOWN;
    for (unsigned int i = 0; rc == NVML_SUCCESS && mode == 0 && i < g_st.ngis; i++)
        if (strcmp(g_st.gis[i].parent, g->uuid) == 0)
            rc = NVML_ERROR_IN_USE; /* destroy the GPU instances first */
    if (rc == NVML_SUCCESS)
        sg->mode = mode;
    rc = change_end(rc);
    if (rc == NVML_SUCCESS)
        *activationStatus = NVML_SUCCESS;
    return rc;
}

ANY_GETTER(nvmlDeviceIsMigDeviceHandle, unsigned int, m ? 1 : 0)

/* "Returns zero if MIG is not supported or enabled." */
EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    GET_GPU(device, g);
    REQUIRE(count);
    mig_refresh();
    *count = g->mig_capable && g->mig ? MIG_SLICES : 0;
    return NVML_SUCCESS;
}

static struct nvmlDevice_st *mig_at(const gpu_t *g, unsigned int index)
{
    for (unsigned int i = 0; i < MAX_MIGS; i++) {
        const mig_t *m = &g_migs[i].mig;
        if (m->live && m->visible && &m->parent->gpu == g && m->index == index)
            return &g_migs[i];
    }
    return NULL;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice)
{
    GET_GPU(device, g);
    REQUIRE(migDevice);
    mig_refresh();
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
    unsigned int k = CI_SLICES[m->ci_profile];
    attributes->multiprocessorCount = p->sm * k / p->slices;
    attributes->sharedCopyEngineCount = p->ce;
    attributes->sharedDecoderCount = p->dec;
    attributes->sharedEncoderCount = p->enc;
    attributes->sharedJpegCount = p->jpeg;
    attributes->sharedOfaCount = p->ofa;
    attributes->gpuInstanceSliceCount = p->slices;
    attributes->computeInstanceSliceCount = k;
    attributes->memorySizeMB = p->memory_mib;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes)
{
    return nvmlDeviceGetAttributes_v2(device, attributes);
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

/* Every placement of the profile, taken or not ("regardless of whether MIG is
 * enabled or not"). count is set; placements, when given, must hold them all. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstancePossiblePlacements_v2(nvmlDevice_t device,
                                                                  unsigned int profileId,
                                                                  nvmlPlacement_t *placements,
                                                                  unsigned int *count)
{
    GET_GPU(device, g);
    REQUIRE(count);
    if (!g->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    const gip_t *p = gip_by(g, 1, profileId);
    if (!p)
        return NVML_ERROR_INVALID_ARGUMENT;
    for (unsigned int i = 0; placements && i < p->nstarts; i++) {
        placements[i].start = p->starts[i];
        placements[i].size = p->placement_size;
    }
    *count = p->nstarts;
    return NVML_SUCCESS;
}

/* How many more instances of the profile fit, placed one after another at
 * their first free placement. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceRemainingCapacity(nvmlDevice_t device,
                                                              unsigned int profileId,
                                                              unsigned int *count)
{
    GET_GPU(device, g);
    REQUIRE(count);
    if (!g->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    const gip_t *p = gip_by(g, 1, profileId);
    if (!p)
        return NVML_ERROR_INVALID_ARGUMENT;
    mig_refresh();
    if (!g->mig)
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_mig_lock);
    unsigned int slots, slices, same, n = 0;
    gi_usage(g->uuid, &slots, &slices, p->id, &same);
    for (unsigned int i = 0; i < p->nstarts; i++) {
        if (gi_fits(p, p->starts[i], slots, slices, same)) {
            slots |= ((1u << p->placement_size) - 1) << p->starts[i];
            slices += p->slices;
            same++;
            n++;
        }
    }
    pthread_mutex_unlock(&g_mig_lock);
    *count = n;
    return NVML_SUCCESS;
}

static struct nvmlGpuInstance_st *gi_handle(const gpu_t *g, unsigned int id)
{
    for (unsigned int s = 0; s < MAX_GIS; s++)
        if (g_gis[s].live && &g_gis[s].parent->gpu == g && g_gis[s].id == id)
            return &g_gis[s];
    return NULL;
}

/* start < 0: the first free placement. */
static nvmlReturn_t create_gi(nvmlDevice_t device, unsigned int profileId, int start,
                              nvmlGpuInstance_t *gpuInstance)
{
    GET_GPU(device, g);
    REQUIRE(gpuInstance);
    if (!g->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    const gip_t *p = gip_by(g, 1, profileId);
    if (!p)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (start >= 0 && gip_start_pos(p, (unsigned int)start) < 0)
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = change_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    unsigned int slots, slices, same, id = 0;
    gi_usage(g->uuid, &slots, &slices, p->id, &same);
    int at = -1;
    if (!g->mig)
        rc = NVML_ERROR_NOT_SUPPORTED; /* MIG mode is disabled */
    else if (start >= 0)
        at = gi_fits(p, (unsigned int)start, slots, slices, same) ? start : -1;
    else
        for (unsigned int i = 0; i < p->nstarts && at < 0; i++)
            if (gi_fits(p, p->starts[i], slots, slices, same))
                at = (int)p->starts[i];
    if (rc == NVML_SUCCESS) {
        if (at >= 0)
            id = p->first_gi + (unsigned int)gip_start_pos(p, (unsigned int)at);
        if (at < 0 || g_st.ngis >= MAX_GIS || st_gi_at(&g_st, g->uuid, id) >= 0)
            rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    }
    if (rc == NVML_SUCCESS) {
        st_gi_t *gi = &g_st.gis[g_st.ngis++];
        memset(gi, 0, sizeof(*gi));
        copy_str(gi->parent, sizeof(gi->parent), g->uuid);
        gi->id = id;
        gi->profile = p->id;
        gi->start = (unsigned int)at;
    }
    rc = change_end(rc);
    if (rc == NVML_SUCCESS) {
        *gpuInstance = gi_handle(g, id);
        if (!*gpuInstance)
            rc = NVML_ERROR_UNKNOWN;
    }
    return rc;
}

EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstance(nvmlDevice_t device, unsigned int profileId,
                                                nvmlGpuInstance_t *gpuInstance)
{
    return create_gi(device, profileId, -1, gpuInstance);
}

EXPORT nvmlReturn_t nvmlDeviceCreateGpuInstanceWithPlacement(nvmlDevice_t device,
                                                             unsigned int profileId,
                                                             const nvmlPlacement_t *placement,
                                                             nvmlGpuInstance_t *gpuInstance)
{
    CHECK_INIT();
    REQUIRE(placement);
    const gpu_t *g = NULL;
    nvmlReturn_t rc = lookup(device, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    const gip_t *p = g->mig_capable ? gip_by(g, 1, profileId) : NULL;
    if (p && (placement->size != p->placement_size || placement->start > MEMORY_SLOTS))
        return NVML_ERROR_INVALID_ARGUMENT;
    return create_gi(device, profileId, (int)placement->start, gpuInstance);
}

/* The GPU instances of a GPU with that profile. */
EXPORT nvmlReturn_t nvmlDeviceGetGpuInstances(nvmlDevice_t device, unsigned int profileId,
                                              nvmlGpuInstance_t *gpuInstances, unsigned int *count)
{
    GET_GPU(device, g);
    REQUIRE(count);
    if (!g->mig_capable)
        return NVML_ERROR_NOT_SUPPORTED;
    if (!gip_by(g, 1, profileId))
        return NVML_ERROR_INVALID_ARGUMENT;
    mig_refresh();
    unsigned int n = 0;
    for (unsigned int s = 0; s < MAX_GIS; s++) {
        struct nvmlGpuInstance_st *h = &g_gis[s];
        if (h->live && h->visible && &h->parent->gpu == g && h->gip->id == profileId) {
            if (gpuInstances)
                gpuInstances[n] = h;
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
    mig_refresh();
    if (!g->mig)
        return NVML_ERROR_INVALID_STATE;
    struct nvmlGpuInstance_st *h = gi_handle(g, id);
    if (!h || !h->visible)
        return NVML_ERROR_NOT_FOUND;
    *gpuInstance = h;
    return NVML_SUCCESS;
}

/* Validate a GPU instance handle (live and visible here). */
static nvmlReturn_t lookup_gi(nvmlGpuInstance_t handle, struct nvmlGpuInstance_st **out)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t at = (uintptr_t)handle, first = (uintptr_t)&g_gis[0];
    if (at < first || at >= (uintptr_t)&g_gis[MAX_GIS] || (at - first) % sizeof(g_gis[0]))
        return NVML_ERROR_INVALID_ARGUMENT;
    mig_refresh();
    if (!handle->live || !handle->visible)
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = handle;
    return handle->parent->gpu.lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

/* Validate a compute instance handle; *m is its MIG device. */
static nvmlReturn_t lookup_ci(nvmlComputeInstance_t handle, const mig_t **m)
{
    if (!initialized())
        return NVML_ERROR_UNINITIALIZED;
    uintptr_t at = (uintptr_t)handle, first = (uintptr_t)&g_cis[0];
    if (at < first || at >= (uintptr_t)&g_cis[MAX_MIGS] || (at - first) % sizeof(g_cis[0]))
        return NVML_ERROR_INVALID_ARGUMENT;
    if (!handle->mig || !is_visible_mig(handle->mig))
        return NVML_ERROR_INVALID_ARGUMENT;
    *m = &handle->mig->mig;
    return (*m)->parent->gpu.lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS;
}

#define GET_GI(handle, h)                                  \
    struct nvmlGpuInstance_st *h = NULL;                   \
    do {                                                   \
        nvmlReturn_t rc_ = lookup_gi((handle), &h);        \
        if (rc_ != NVML_SUCCESS)                           \
            return rc_;                                    \
    } while (0)

#define GET_CI(handle, m)                                  \
    const mig_t *m = NULL;                                 \
    do {                                                   \
        nvmlReturn_t rc_ = lookup_ci((handle), &m);        \
        if (rc_ != NVML_SUCCESS)                           \
            return rc_;                                    \
    } while (0)

EXPORT nvmlReturn_t nvmlGpuInstanceGetInfo(nvmlGpuInstance_t gpuInstance, nvmlGpuInstanceInfo_t *info)
{
    GET_GI(gpuInstance, h);
    REQUIRE(info);
    info->device = h->parent;
    info->id = h->id;
    info->profileId = h->gip->id;
    info->placement.start = h->start;
    info->placement.size = h->gip->placement_size;
    return NVML_SUCCESS;
}

/* IN_USE while it holds compute instances, as the driver answers. */
EXPORT nvmlReturn_t nvmlGpuInstanceDestroy(nvmlGpuInstance_t gpuInstance)
{
    GET_GI(gpuInstance, h);
    struct nvmlDevice_st *parent = h->parent;
    unsigned int id = h->id;
    nvmlReturn_t rc = change_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    int k = st_gi_at(&g_st, parent->gpu.uuid, id);
    if (k < 0)
        rc = NVML_ERROR_INVALID_ARGUMENT; /* destroyed meanwhile */
    for (unsigned int i = 0; rc == NVML_SUCCESS && i < g_st.ncis; i++)
        if (g_st.cis[i].gi == id && strcmp(g_st.cis[i].parent, parent->gpu.uuid) == 0)
            rc = NVML_ERROR_IN_USE;
    if (rc == NVML_SUCCESS)
        g_st.gis[k] = g_st.gis[--g_st.ngis];
    return change_end(rc);
}

static nvmlReturn_t ci_profile(const gip_t *p, unsigned int profile,
                               nvmlComputeInstanceProfileInfo_t *info)
{
    if (profile >= CI_PROFILES || CI_SLICES[profile] > p->slices)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned int k = CI_SLICES[profile], n = p->slices;
    info->id = profile;
    info->sliceCount = k;
    info->instanceCount = n / k;
    info->multiprocessorCount = p->sm * k / n;
    info->sharedCopyEngineCount = p->ce;
    info->sharedDecoderCount = p->dec;
    info->sharedEncoderCount = p->enc;
    info->sharedJpegCount = p->jpeg;
    info->sharedOfaCount = p->ofa;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfo(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_t *info)
{
    GET_GI(gpuInstance, h);
    REQUIRE(info);
    if (engProfile != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    return ci_profile(h->gip, profile, info);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceProfileInfoV(
    nvmlGpuInstance_t gpuInstance, unsigned int profile, unsigned int engProfile,
    nvmlComputeInstanceProfileInfo_v2_t *info)
{
    nvmlComputeInstanceProfileInfo_t v1;
    GET_GI(gpuInstance, h);
    REQUIRE(info);
    if (info->version != CI_PROFILE_INFO_V2_VERSION)
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (engProfile != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    nvmlReturn_t rc = ci_profile(h->gip, profile, &v1);
    if (rc != NVML_SUCCESS)
        return rc;
    memcpy(&info->id, &v1, sizeof(v1));
    if (v1.sliceCount == h->gip->slices)
        snprintf(info->name, sizeof(info->name), "MIG %s", h->gip->name);
    else
        snprintf(info->name, sizeof(info->name), "MIG %uc.%s", v1.sliceCount, h->gip->name);
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, nvmlPlacement_t *placements,
    unsigned int *count)
{
    GET_GI(gpuInstance, h);
    REQUIRE(count);
    nvmlComputeInstanceProfileInfo_t probe;
    if (ci_profile(h->gip, profileId, &probe) != NVML_SUCCESS)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (unsigned int s = 0; s < h->gip->slices; s++) {
        if (!ci_placement_valid(h->gip, profileId, s))
            continue;
        if (placements) {
            placements[n].start = s;
            placements[n].size = CI_SLICES[profileId];
        }
        n++;
    }
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, unsigned int *count)
{
    GET_GI(gpuInstance, h);
    REQUIRE(count);
    nvmlComputeInstanceProfileInfo_t probe;
    if (ci_profile(h->gip, profileId, &probe) != NVML_SUCCESS)
        return NVML_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g_mig_lock);
    unsigned int taken, same, n = 0;
    ci_usage(h->parent->gpu.uuid, h->id, profileId, &taken, &same);
    for (unsigned int s = 0; s < h->gip->slices; s++) {
        if (ci_fits(h->gip, profileId, s, taken, same)) {
            taken |= ((1u << CI_SLICES[profileId]) - 1) << s;
            same++;
            n++;
        }
    }
    pthread_mutex_unlock(&g_mig_lock);
    *count = n;
    return NVML_SUCCESS;
}

static nvmlComputeInstance_t ci_handle(const struct nvmlDevice_st *parent, unsigned int gi,
                                       unsigned int id)
{
    for (unsigned int s = 0; s < MAX_MIGS; s++) {
        const mig_t *m = &g_migs[s].mig;
        if (m->live && m->parent == parent && m->gi_id == gi && m->ci_id == id)
            return &g_cis[s];
    }
    return NULL;
}

/* start < 0: the first free placement. */
static nvmlReturn_t create_ci(nvmlGpuInstance_t gpuInstance, unsigned int profileId, int start,
                              nvmlComputeInstance_t *computeInstance)
{
    GET_GI(gpuInstance, h);
    REQUIRE(computeInstance);
    nvmlComputeInstanceProfileInfo_t probe;
    if (ci_profile(h->gip, profileId, &probe) != NVML_SUCCESS)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (start >= 0 && !ci_placement_valid(h->gip, profileId, (unsigned int)start))
        return NVML_ERROR_INVALID_ARGUMENT;
    struct nvmlDevice_st *parent = h->parent;
    const gip_t *p = h->gip;
    unsigned int gi = h->id, id = 0;
    nvmlReturn_t rc = change_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    if (st_gi_at(&g_st, parent->gpu.uuid, gi) < 0)
        rc = NVML_ERROR_INVALID_ARGUMENT; /* destroyed meanwhile */
    unsigned int taken, same;
    ci_usage(parent->gpu.uuid, gi, profileId, &taken, &same);
    int at = -1;
    if (start >= 0)
        at = ci_fits(p, profileId, (unsigned int)start, taken, same) ? start : -1;
    else
        for (unsigned int s = 0; s < p->slices && at < 0; s++)
            if (ci_fits(p, profileId, s, taken, same))
                at = (int)s;
    while (id < MAX_CIS_PER_GI && st_ci_at(&g_st, parent->gpu.uuid, gi, id) >= 0)
        id++;
    if (rc == NVML_SUCCESS && (at < 0 || id >= MAX_CIS_PER_GI || g_st.ncis >= MAX_MIGS))
        rc = NVML_ERROR_INSUFFICIENT_RESOURCES;
    st_gpu_t *sg = st_gpu(&g_st, parent->gpu.uuid);
    if (rc == NVML_SUCCESS && !sg)
        rc = NVML_ERROR_UNKNOWN;
    if (rc == NVML_SUCCESS) {
        st_ci_t *ci = &g_st.cis[g_st.ncis++];
        memset(ci, 0, sizeof(*ci));
        copy_str(ci->parent, sizeof(ci->parent), parent->gpu.uuid);
        ci->gi = gi;
        ci->id = id;
        ci->profile = profileId;
        ci->start = (unsigned int)at;
        mig_uuid(ci->uuid, sizeof(ci->uuid), parent->gpu.uuid, gi, id, sg->counter++);
    }
    rc = change_end(rc);
    if (rc == NVML_SUCCESS) {
        *computeInstance = ci_handle(parent, gi, id);
        if (!*computeInstance)
            rc = NVML_ERROR_UNKNOWN;
    }
    return rc;
}

EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstance(nvmlGpuInstance_t gpuInstance,
                                                         unsigned int profileId,
                                                         nvmlComputeInstance_t *computeInstance)
{
    return create_ci(gpuInstance, profileId, -1, computeInstance);
}

EXPORT nvmlReturn_t nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    nvmlGpuInstance_t gpuInstance, unsigned int profileId, const nvmlPlacement_t *placement,
    nvmlComputeInstance_t *computeInstance)
{
    CHECK_INIT();
    REQUIRE(placement);
    if (profileId < CI_PROFILES && placement->size != CI_SLICES[profileId])
        return NVML_ERROR_INVALID_ARGUMENT;
    if (placement->start > MEMORY_SLOTS)
        return NVML_ERROR_INVALID_ARGUMENT;
    return create_ci(gpuInstance, profileId, (int)placement->start, computeInstance);
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstances(nvmlGpuInstance_t gpuInstance,
                                                       unsigned int profileId,
                                                       nvmlComputeInstance_t *computeInstances,
                                                       unsigned int *count)
{
    GET_GI(gpuInstance, h);
    REQUIRE(count);
    nvmlComputeInstanceProfileInfo_t probe;
    if (ci_profile(h->gip, profileId, &probe) != NVML_SUCCESS)
        return NVML_ERROR_INVALID_ARGUMENT;
    unsigned int n = 0;
    for (unsigned int s = 0; s < MAX_MIGS; s++) {
        const mig_t *m = &g_migs[s].mig;
        if (m->live && m->visible && m->gi == h && m->ci_profile == profileId) {
            if (computeInstances)
                computeInstances[n] = &g_cis[s];
            n++;
        }
    }
    if (n > 0 && !computeInstances)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = n;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlGpuInstanceGetComputeInstanceById(nvmlGpuInstance_t gpuInstance,
                                                          unsigned int id,
                                                          nvmlComputeInstance_t *computeInstance)
{
    GET_GI(gpuInstance, h);
    REQUIRE(computeInstance);
    nvmlComputeInstance_t c = ci_handle(h->parent, h->id, id);
    if (!c || !c->mig->mig.visible)
        return NVML_ERROR_NOT_FOUND;
    *computeInstance = c;
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo_v2(nvmlComputeInstance_t computeInstance,
                                                  nvmlComputeInstanceInfo_t *info)
{
    GET_CI(computeInstance, m);
    REQUIRE(info);
    info->device = m->parent;
    info->gpuInstance = m->gi;
    info->id = m->ci_id;
    info->profileId = m->ci_profile;
    info->placement.start = m->ci_start;
    info->placement.size = CI_SLICES[m->ci_profile];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlComputeInstanceGetInfo(nvmlComputeInstance_t computeInstance,
                                               nvmlComputeInstanceInfo_t *info)
{
    return nvmlComputeInstanceGetInfo_v2(computeInstance, info);
}

EXPORT nvmlReturn_t nvmlComputeInstanceDestroy(nvmlComputeInstance_t computeInstance)
{
    GET_CI(computeInstance, m);
    struct nvmlDevice_st *parent = m->parent;
    unsigned int gi = m->gi_id, id = m->ci_id;
    nvmlReturn_t rc = change_begin();
    if (rc != NVML_SUCCESS)
        return rc;
    int k = st_ci_at(&g_st, parent->gpu.uuid, gi, id);
    if (k < 0)
        rc = NVML_ERROR_INVALID_ARGUMENT; /* destroyed meanwhile */
    else
        g_st.cis[k] = g_st.cis[--g_st.ncis];
    return change_end(rc);
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
/* events: Xid critical errors the simulator raises on the node       */

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
            memset(&g_event_sets[i], 0, sizeof(g_event_sets[i]));
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

/* Events are driver state like MIG: the simulator appends "xid<TAB>bus=<NVML bus id><TAB>
 * code=<n>" lines to the node's event log when it raises an Xid (`gpunode sim xid`, as the
 * driver reports one); a set delivers the lines written after it was registered, for the
 * GPUs and types registered on it, one per wait. */
#define EVENT_LOG SIM_DIR "/events"

static long event_log_size(void)
{
    struct stat st;
    return stat(EVENT_LOG, &st) == 0 ? (long)st.st_size : 0;
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes,
                                             nvmlEventSet_t set)
{
    GET_GPU(device, g);
    REQUIRE(valid_event_set(set));
    if (eventTypes & ~supported_events(g))
        return NVML_ERROR_NOT_SUPPORTED;
    pthread_mutex_lock(&g_lock);
    unsigned int idx = (unsigned int)((const struct nvmlDevice_st *)device - g_gpus);
    if (idx < MAX_GPUS) {
        int first = 1;
        for (unsigned int i = 0; i < MAX_GPUS; i++)
            first = first && set->mask[i] == 0;
        if (first)
            set->cursor = event_log_size(); /* only what happens from now on */
        set->mask[idx] |= eventTypes;
    }
    pthread_mutex_unlock(&g_lock);
    return NVML_SUCCESS;
}

/* The next event for `set` in the log after its cursor (advanced past what was read). */
static int next_event(nvmlEventSet_t set, nvmlEventData_t *data)
{
    FILE *f = fopen(EVENT_LOG, "re");
    if (!f)
        return 0;
    if (event_log_size() < set->cursor)
        set->cursor = 0; /* a new log (the node restarted) */
    int found = 0;
    char line[256];
    if (fseek(f, set->cursor, SEEK_SET) == 0) {
        while (!found && fgets(line, sizeof(line), f)) {
            size_t n = strlen(line);
            if (n == 0 || line[n - 1] != '\n')
                break; /* a line still being written: read it next time */
            set->cursor += (long)n;
            char bus[64];
            unsigned long long code;
            if (sscanf(line, "xid\tbus=%63[^\t]\tcode=%llu", bus, &code) != 2)
                continue;
            for (unsigned int i = 0; i < g_ngpus; i++) {
                gpu_t *g = &g_gpus[i].gpu;
                if (!g->visible || !(set->mask[i] & EVENT_XID_CRITICAL) ||
                    strcasecmp(g->bus_id, bus) != 0)
                    continue;
                memset(data, 0, sizeof(*data));
                data->device = &g_gpus[i];
                data->eventType = EVENT_XID_CRITICAL;
                data->eventData = code;
                data->gpuInstanceId = 0xFFFFFFFFu;
                data->computeInstanceId = 0xFFFFFFFFu;
                found = 1;
                break;
            }
        }
    }
    fclose(f);
    return found;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data,
                                        unsigned int timeoutms)
{
    CHECK_INIT();
    REQUIRE(valid_event_set(set) && data);
    unsigned int waited = 0;
    for (;;) {
        pthread_mutex_lock(&g_lock);
        int found = next_event(set, data);
        pthread_mutex_unlock(&g_lock);
        if (found)
            return NVML_SUCCESS;
        if (waited >= timeoutms)
            return NVML_ERROR_TIMEOUT;
        unsigned int step = timeoutms - waited < 10 ? timeoutms - waited : 10;
        struct timespec ts = {0, (long)step * 1000000L};
        while (nanosleep(&ts, &ts) != 0)
            ;
        waited += step;
    }
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

/* ------------------------------------------------------------------ */
/* PCI topology and NVLink far ends                                     */
/*
 * What NVIDIA's device plugin asks before it prefers an allocation of full
 * GPUs (go-gpuallocator, internal/links): for every ordered pair of GPUs
 * nvmlDeviceGetTopologyCommonAncestor, then for each link of the first GPU
 * nvmlDeviceGetNvLinkState and, on an active link,
 * nvmlDeviceGetNvLinkRemotePciInfo_v2, whose bus id it compares with the
 * second GPU's nvmlDeviceGetPciInfo_v3. nvidia-smi topo adds P2P status and
 * link capabilities. All answered from the profile's layout
 * (gpunode.sim.profiles, "PCI and NVLink layout"): pci_path is the GPU's
 * place in the PCI tree, "<NUMA node>/<host bridge>/<switch>/<switch>...",
 * the driver's walk of the tree reduced to comparing two such paths; peers
 * are the far end of each NVLink (a GPU of the profile, visible or not, as
 * the hardware is cabled, or an NVSwitch).
 */
#define TOPOLOGY_INTERNAL 0
#define TOPOLOGY_SINGLE 10
#define TOPOLOGY_MULTIPLE 20
#define TOPOLOGY_HOSTBRIDGE 30
#define TOPOLOGY_NODE 40
#define TOPOLOGY_SYSTEM 50
#define PATH_DEPTH 16
#define P2P_CAPS_INDEX_NVLINK 2
#define P2P_CAPS_INDEX_ATOMICS 3
#define P2P_CAPS_INDEX_COUNT 5 /* READ, WRITE, NVLINK, ATOMICS, PCI (= PROP) */
#define P2P_STATUS_OK 0
#define P2P_STATUS_CHIPSET_NOT_SUPPORTED 1
#define P2P_STATUS_NOT_SUPPORTED 5
#define NVLINK_CAP_P2P_SUPPORTED 0
#define NVLINK_CAP_P2P_ATOMICS 2
#define NVLINK_CAP_VALID 5
#define NVLINK_CAP_COUNT 6
#define NVLINK_DEVICE_TYPE_GPU 0
#define NVLINK_DEVICE_TYPE_SWITCH 2

/* Split a pci_path at '/': the start and length of each part; returns the count. */
static int path_parts(const char *path, const char *part[], size_t len[])
{
    int n = 0;
    while (n < PATH_DEPTH) {
        size_t k = strcspn(path, "/");
        part[n] = path;
        len[n++] = k;
        if (path[k] != '/')
            break;
        path += k + 1;
    }
    return n;
}

static int same_part(const char *a, size_t la, const char *b, size_t lb)
{
    return la == lb && memcmp(a, b, la) == 0;
}

/* nvmlGpuTopologyLevel_t between two GPUs, from their places in the PCI tree. */
static int topology_level(const gpu_t *a, const gpu_t *b)
{
    const char *pa[PATH_DEPTH], *pb[PATH_DEPTH];
    size_t la[PATH_DEPTH], lb[PATH_DEPTH];
    if (a == b)
        return TOPOLOGY_INTERNAL;
    int na = path_parts(a->pci_path, pa, la), nb = path_parts(b->pci_path, pb, lb);
    if (na < 2 || nb < 2 || !same_part(pa[0], la[0], pb[0], lb[0]))
        return TOPOLOGY_SYSTEM; /* other NUMA nodes: across the CPUs' interconnect */
    if (!same_part(pa[1], la[1], pb[1], lb[1]))
        return TOPOLOGY_NODE; /* one NUMA node, other host bridges */
    int c = 2;
    while (c < na && c < nb && same_part(pa[c], la[c], pb[c], lb[c]))
        c++;
    if (c == 2)
        return TOPOLOGY_HOSTBRIDGE; /* no switch in common: through the host bridge */
    /* the lowest common switch plus those below it on either side */
    return 1 + (na - c) + (nb - c) == 1 ? TOPOLOGY_SINGLE : TOPOLOGY_MULTIPLE;
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1,
                                                       nvmlDevice_t device2, int *pathInfo)
{
    GET_GPU(device1, a);
    GET_GPU(device2, b);
    REQUIRE(pathInfo);
    *pathInfo = topology_level(a, b);
    return NVML_SUCCESS;
}

/* The GPU of the profile at a far end, or NULL (an NVSwitch). */
static const gpu_t *gpu_at(const struct pci_addr *p)
{
    for (unsigned int i = 0; i < g_ngpus; i++) {
        const gpu_t *g = &g_gpus[i].gpu;
        if (g->domain == p->domain && g->bus == p->bus && g->device == p->device &&
            g->function == p->function)
            return g;
    }
    return NULL;
}

/* The far end of `link`: NOT_SUPPORTED without NVLink or when the profile does not say,
 * INVALID_ARGUMENT for a link the GPU does not have. */
static nvmlReturn_t far_end(const gpu_t *g, unsigned int link, const struct pci_addr **out)
{
    if (!g->nvlinks)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g->nvlinks || link >= NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (link >= g->npeers)
        return NVML_ERROR_NOT_SUPPORTED;
    *out = &g->peers[link];
    return NVML_SUCCESS;
}

/* "pciSubSystemId is not filled in this function" (nvml.h): left 0. */
static nvmlReturn_t remote_pci(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    const struct pci_addr *p = NULL;
    GET_GPU(device, g);
    REQUIRE(pci);
    nvmlReturn_t rc = far_end(g, link, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    gpu_t end;
    const gpu_t *peer = gpu_at(p);
    if (peer) {
        end = *peer;
    } else { /* an NVSwitch */
        memset(&end, 0, sizeof(end));
        end.domain = p->domain;
        end.bus = p->bus;
        end.device = p->device;
        end.function = p->function;
        end.pci_device_id = g->nvswitch_device_id;
        snprintf(end.bus_id, sizeof(end.bus_id), "%08X:%02X:%02X.%X", p->domain, p->bus & 0xffu,
                 p->device & 0xffu, p->function & 0xfu);
    }
    end.pci_subsystem_id = 0;
    fill_pci(&end, pci, 1);
    return NVML_SUCCESS;
}

/* The unversioned (v1) function stays a stub: go-nvml and nvidia-ml-py call _v2. */
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                        nvmlPciInfo_t *pci)
{
    return remote_pci(device, link, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                        int *pNvLinkDeviceType)
{
    const struct pci_addr *p = NULL;
    GET_GPU(device, g);
    REQUIRE(pNvLinkDeviceType);
    nvmlReturn_t rc = far_end(g, link, &p);
    if (rc != NVML_SUCCESS)
        return rc;
    *pNvLinkDeviceType = gpu_at(p) ? NVLINK_DEVICE_TYPE_GPU : NVLINK_DEVICE_TYPE_SWITCH;
    return NVML_SUCCESS;
}

/* P2P over NVLink and its atomics on every link of an x86 node; no system memory
 * access or SLI over NVLink (those are POWER9 / GeForce features). */
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                                  int capability, unsigned int *capResult)
{
    GET_GPU(device, g);
    REQUIRE(capResult);
    if (!g->nvlinks)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= g->nvlinks || link >= NVLINK_MAX_LINKS || capability < 0 ||
        capability >= NVLINK_CAP_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    *capResult = capability == NVLINK_CAP_P2P_SUPPORTED ||
                 capability == NVLINK_CAP_P2P_ATOMICS || capability == NVLINK_CAP_VALID;
    return NVML_SUCCESS;
}

static int peer_listed(const gpu_t *g, const struct pci_addr *p)
{
    for (unsigned int i = 0; i < g->npeers; i++)
        if (!memcmp(&g->peers[i], p, sizeof(*p)))
            return 1;
    return 0;
}

/* Two GPUs reach each other over NVLink: a direct link, or one NVSwitch both link to. */
static int nvlinked(const gpu_t *a, const gpu_t *b)
{
    struct pci_addr at = {b->domain, b->bus, b->device, b->function};
    if (peer_listed(a, &at))
        return 1;
    for (unsigned int i = 0; i < a->npeers; i++)
        if (!gpu_at(&a->peers[i]) && peer_listed(b, &a->peers[i]))
            return 1;
    return 0;
}

/* Over NVLink every capability is OK; over PCIe reads and writes are, except across
 * CPU sockets (the chipset does not route them), and atomics are not; NVLink P2P only
 * with NVLink. The simulator's rule, as nvidia-smi topo -p2p shows such nodes. */
EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                           int p2pIndex, int *p2pStatus)
{
    GET_GPU(device1, a);
    GET_GPU(device2, b);
    REQUIRE(p2pStatus && p2pIndex >= 0 && p2pIndex < P2P_CAPS_INDEX_COUNT);
    if (a == b || nvlinked(a, b))
        *p2pStatus = P2P_STATUS_OK;
    else if (p2pIndex == P2P_CAPS_INDEX_NVLINK || p2pIndex == P2P_CAPS_INDEX_ATOMICS)
        *p2pStatus = P2P_STATUS_NOT_SUPPORTED;
    else if (topology_level(a, b) == TOPOLOGY_SYSTEM)
        *p2pStatus = P2P_STATUS_CHIPSET_NOT_SUPPORTED;
    else
        *p2pStatus = P2P_STATUS_OK;
    return NVML_SUCCESS;
}
