/*
 * gpunode mock NVML (common.h: what the files of the library share): a tiny stand-in for libnvidia-ml.so.1 that the unmodified
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
 *   migspace<TAB>compute_slices=7<TAB>memory_slots=8
 *   cip<TAB>index=0<TAB>slices=1<TAB>step=1
 *
 * "gip" lines are the GPU instance profiles of a MIG-capable GPU, "mig" lines
 * the MIG devices (one GPU instance with one compute instance each) of a GPU
 * whose profile enables MIG; "migspace" and "cip" the rest of the MIG geometry
 * (a GPU's slices and memory slots, the compute instance profiles). All MIG
 * geometry comes from gpunode.sim.miggeometry's one table (mig-geometry.json).  gpunode.sim.profiles.mock_payload() writes them.
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
 * The library is the .c files of this directory, one per NVML object or
 * concern (as go-nvml's mock is laid out), compiled together into one
 * libnvidia-ml.so by gpunode.sim.mocknvml.build_library:
 *   profile.c    the embedded profile: parsing, the node's GPUs
 *   init.c       device-node visibility, nvmlInit/nvmlShutdown, error strings
 *   system.c     system queries; no S-class units, excluded GPUs or HIC
 *   device.c     device enumeration and identity
 *   memory.c     memory
 *   migstate.c   MIG as driver state: the node's state file, this process's view
 *   footprint.c  the driver's footprint of the MIG state (capability files, cap nodes)
 *   mig.c        the MIG API: mode, GPU and compute instances, MIG devices
 *   setup.c      sim apply's setup of the MIG state and footprint (it calls it)
 *   modes.c      ECC mode, display, compute capability
 *   processes.c  processes (none run on a simulated GPU)
 *   events.c     events: the Xid errors the simulator raises
 *   ecc.c        ECC, retired pages, row remapping
 *   power.c      thermals and power
 *   links.c      PCIe link, clock event reasons, NVLink, fabric, InfoROM
 *   topology.c   PCI topology and NVLink far ends
 *   internal.c   nvidia-smi's export table (nvmlInternalGetExportTable)
 *
 * They implement what device plugins and NVIDIA's container toolkit walk.
 * Every other entry point that nvidia-ml-py knows is exported by a weak stub
 * generated at build time (gpunode.sim.mocknvml.stubs_source) that answers
 * NVML_ERROR_UNINITIALIZED before nvmlInit and NVML_ERROR_NOT_SUPPORTED after;
 * a definition here overrides the stub of the same name.
 *
 * Only nvml* functions (EXPORT), gpunode_profile_blob and sim apply's
 * gpunode_sim_mig_setup (setup.c) are exported;
 * everything else is static or, when the files share it, hidden (the pragma
 * below; tests/unit/sim/test_mocknvml.py compares the exported names with
 * nvml_names()).  No heap allocations.
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

/* What the files share stays inside the library; EXPORT overrides this. */
#pragma GCC visibility push(hidden)

#define EXPORT __attribute__((visibility("default")))

/* The profile blob (profile.c). */
extern EXPORT char gpunode_profile_blob[262144];

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
#define MAX_CIPS 16   /* compute instance profiles */
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
    unsigned long long memory_total, memory_reserved, memory_used, bar1_total;
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
    unsigned int nvlinks, fabric, fabric_status, inforom_corrupt;
    unsigned int nvlink_version, nvlink_speed; /* NVML's link version, MB/s a link */
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

/* The library's state (init.c: g_lock, g_refcount; profile.c: the rest). */
extern pthread_mutex_t g_lock;
extern unsigned int g_refcount;
extern int g_have_profile;
extern char g_driver_version[STR_LEN];
extern char g_nvml_version[STR_LEN];
extern int g_cuda_version;
extern struct nvmlDevice_st g_gpus[MAX_GPUS];
extern unsigned int g_ngpus;
extern struct nvmlDevice_st *g_order[MAX_GPUS]; /* visible GPUs, by bus id */
extern unsigned int g_nvisible;
extern init_mig_t g_init_migs[MAX_MIGS];
extern unsigned int g_ninit_migs;
extern struct nvmlDevice_st g_migs[MAX_MIGS];
extern struct nvmlComputeInstance_st g_cis[MAX_MIGS];
extern struct nvmlGpuInstance_st g_gis[MAX_GIS];
extern gip_t g_gips[MAX_GIPS];
extern unsigned int g_ngips;
/* The rest of the MIG geometry (gpunode.sim.miggeometry, the payload's "migspace"
 * and "cip" lines): the compute slices and memory slots of a MIG-capable GPU, and
 * the compute instance profiles: the profile id is its index; a profile fits a
 * GPU instance of at least g_cip_slices[id] slices, at starts that are multiples
 * of g_cip_step[id]. */
extern unsigned int g_mig_slices, g_memory_slots;
extern unsigned int g_cip_slices[MAX_CIPS], g_cip_step[MAX_CIPS], g_ncips;

/* ---- shared by the files of the library ---- */

/* init.c */
#define CHECK_INIT()                       \
    do {                                   \
        if (!initialized())                \
            return NVML_ERROR_UNINITIALIZED; \
    } while (0)

/* device.c: a handle's GPU (GET_GPU) or GPU and MIG device (GET_ANY) */
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
/* MIG state (migstate.c). Its files, record formats and cap minors (SIM_DIR,
 * STATE_FILE, STATE_*_FORMAT, GI_MINOR, ...) are gpunode.sim.migstate's: the
 * build generates migstate.h from them (migstate.c_header). */
#include "migstate.h"
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

extern state_t g_st;
extern pthread_mutex_t g_mig_lock;

/* Where the node's MIG files are: a node's (migstate.h's roots) unless sim apply's
 * setup (setup.c) names a test root. */
#define PATH_LEN 256
typedef struct {
    char sim_dir[PATH_LEN], state[PATH_LEN], lock[PATH_LEN], mode_dir[PATH_LEN],
        mode[PATH_LEN], caps_proc[PATH_LEN], caps_dev[PATH_LEN], mig_minors[PATH_LEN];
} sim_paths_t;
extern sim_paths_t g_paths;

#define NVLINK_MAX_LINKS 36 /* NVML_NVLINK_MAX_LINKS */

/* profile.c */
void copy_str(char *dst, size_t cap, const char *src);
unsigned long long parse_ull(const char *s);
int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus,
                        unsigned int *dev, unsigned int *fn);
void for_each_field(char *rest, void (*set)(void *, const char *, const char *), void *obj);
void parse_profile(void);
void parse_payload(const char *text, size_t size);
/* init.c */
int initialized(void);
/* system.c */
nvmlReturn_t copy_out(char *buf, unsigned int length, const char *src);
/* device.c */
int is_visible_mig(nvmlDevice_t device);
nvmlReturn_t lookup(nvmlDevice_t device, const gpu_t **out);
nvmlReturn_t lookup_any(nvmlDevice_t device, const gpu_t **gpu, const mig_t **mig);

/* topology.c: the P2P link between two GPUs as nvidia-smi's export table gives it
 * (internal.c, slot 23) */
nvmlReturn_t p2p_link_kind(const char *bus_a, const char *bus_b, unsigned int *out);
/* topology.c: whether an NVLink's far end is a GPU of this node (else an NVSwitch) */
int peer_is_gpu(const struct pci_addr *p);
void fill_pci(const gpu_t *g, nvmlPciInfo_t *pci, int full);
/* migstate.c */
unsigned int mig_ci_slices(const mig_t *m);
const gip_t *gip_by(const gpu_t *g, int by_id, unsigned int key);
int gip_start_pos(const gip_t *p, unsigned int start);
st_gpu_t *st_gpu(state_t *st, const char *uuid);
int st_gi_at(const state_t *st, const char *parent, unsigned int id);
int st_ci_at(const state_t *st, const char *parent, unsigned int gi, unsigned int id);
void mig_refresh(void);
void mig_reset(void);
void mig_reload(void);
int mig_save(void);
void gi_usage(const char *parent, unsigned int *slots, unsigned int *slices,
                     unsigned int profile_id, unsigned int *same_profile);
int gi_fits(const gip_t *p, unsigned int start, unsigned int slots, unsigned int slices,
                   unsigned int same);
void ci_usage(const char *parent, unsigned int gi, unsigned int profile,
                     unsigned int *slices, unsigned int *same);
int ci_placement_valid(const gip_t *p, unsigned int profile, unsigned int start);
int ci_fits(const gip_t *p, unsigned int profile, unsigned int start, unsigned int taken,
                   unsigned int same);
int write_atomically(const char *path, const char *text, mode_t mode);
void note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern void (*g_note)(const char *what);
void sim_paths_at(const char *proc_driver, const char *dev, const char *mode_dir);
int node_lock(void);
int mig_setup_state(const char *key);
void mig_uuid(char *out, size_t cap, const char *parent, unsigned int gi, unsigned int ci,
                     unsigned int counter);

/* footprint.c (it reads migstate.c's state; mig.c calls it after a change, setup.c at
 * setup with the static part first) */
void footprint_static(void);
void footprint_sync(void);

#pragma GCC visibility pop
