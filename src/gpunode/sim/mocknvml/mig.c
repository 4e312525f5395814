#include "common.h"

/* ------------------------------------------------------------------ */
/* MIG                                                                  */

/* ---- a change: root only, under flock, written atomically ---- */
/*
 * The transaction of every MIG change below: the state (migstate.c) read under
 * the node's lock, changed in g_st, saved, and the driver's footprint
 * (footprint.c) rewritten from it.
 */

static int g_lock_fd = -1;

/* Take the node's MIG lock and the state as it is now; on success the caller
 * holds g_mig_lock and must call change_end. */
static nvmlReturn_t change_begin(void)
{
    if (geteuid() != 0)
        return NVML_ERROR_NO_PERMISSION;
    int fd = node_lock();
    if (fd < 0)
        return NVML_ERROR_NO_PERMISSION;
    pthread_mutex_lock(&g_mig_lock);
    g_lock_fd = fd;
    mig_reload();
    return NVML_SUCCESS;
}

/* Write the changed state and its footprint (commit) or drop it; release the locks. */
static nvmlReturn_t change_end(nvmlReturn_t rc)
{
    if (rc == NVML_SUCCESS) {
        if (mig_save() != 0)
            rc = NVML_ERROR_NO_PERMISSION;
        else
            footprint_sync();
    }
    mig_reload();
    pthread_mutex_unlock(&g_mig_lock);
    close(g_lock_fd);
    g_lock_fd = -1;
    return rc;
}

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
    *count = g->mig_capable && g->mig ? g_mig_slices : 0;
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
    REQUIRE(index < g_mig_slices);
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
    unsigned int k = g_cip_slices[m->ci_profile];
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
    if (p && (placement->size != p->placement_size || placement->start > g_memory_slots))
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
    if (profile >= g_ncips || g_cip_slices[profile] > p->slices)
        return NVML_ERROR_NOT_SUPPORTED;
    unsigned int k = g_cip_slices[profile], n = p->slices;
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
            placements[n].size = g_cip_slices[profileId];
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
            taken |= ((1u << g_cip_slices[profileId]) - 1) << s;
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
    if (profileId < g_ncips && placement->size != g_cip_slices[profileId])
        return NVML_ERROR_INVALID_ARGUMENT;
    if (placement->start > g_memory_slots)
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
    info->placement.size = g_cip_slices[m->ci_profile];
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
