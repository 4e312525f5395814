#include "common.h"

/* ------------------------------------------------------------------ */
/* PCIe link, clock event reasons, NVLink, fabric, InfoROM              */
/* (gpunode.nvidia.health's checks; a profile without these fields: a  */
/* GPU with no PCIe data, no NVLink, no fabric, a valid InfoROM)        */

#define FABRIC_INFO_V2_VERSION 0x02000024u
#define FABRIC_INFO_V3_VERSION 0x03000028u
#define FABRIC_HEALTH_SUMMARY_HEALTHY 1
/* nvmlGpuFabricState_t */
#define FABRIC_STATE_NOT_STARTED 1u
#define FABRIC_STATE_COMPLETED 3u

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

/* A GPU without NVLink, or a link this GPU does not have: NOT_SUPPORTED (as NVML answers
 * for the links of NVML_NVLINK_MAX_LINKS a board lacks); beyond that: INVALID_ARGUMENT. */
EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                             unsigned int *isActive)
{
    GET_GPU(device, g);
    REQUIRE(isActive);
    if (!g->nvlinks)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (link >= g->nvlinks) /* a link NVML knows of that this GPU does not have */
        return NVML_ERROR_NOT_SUPPORTED;
    *isActive = (g->nvlink_down >> link) & 1ULL ? 0 : 1; /* NVML_FEATURE_DISABLED/ENABLED */
    return NVML_SUCCESS;
}

/* The node's fabric state (gpunode.sim.fabric: the one state, which the fabric manager
 * stand-in writes and a driver load removes): nvmlGpuFabricState_t, NOT_STARTED without
 * the file or with one that does not parse. Read on every query, as every process of the
 * node and its containers must see FM's progress at once. */
static unsigned int node_fabric_state(void)
{
    char path[PATH_LEN + 16], buf[32];
    unsigned int state;
    snprintf(path, sizeof(path), "%s/" FABRIC_NAME, g_paths.sim_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return FABRIC_STATE_NOT_STARTED;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return FABRIC_STATE_NOT_STARTED;
    buf[n] = '\0';
    if (sscanf(buf, FABRIC_FORMAT, &state) != 1 || state < FABRIC_STATE_NOT_STARTED ||
        state > FABRIC_STATE_COMPLETED)
        return FABRIC_STATE_NOT_STARTED;
    return state;
}

/* The fabric probe of a GPU on an NVSwitch baseboard (Hopper or later: g->fabric):
 * the node's state; the status once COMPLETED is the GPU's own (the profile's
 * fabric_status: the fabric_manager_failed fault), meaningful only then (0 before).
 * Any other GPU (A100 on its NVSwitch board included) answers NOT_SUPPORTED, as A100
 * does. */
static nvmlReturn_t fabric_of(nvmlDevice_t device, nvmlReturn_t *status, unsigned int *state,
                              unsigned int *clique)
{
    GET_GPU(device, g);
    if (!g->fabric)
        return NVML_ERROR_NOT_SUPPORTED;
    *state = node_fabric_state();
    *status = *state == FABRIC_STATE_COMPLETED ? (nvmlReturn_t)g->fabric_status : NVML_SUCCESS;
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
