#include "common.h"

static struct nvmlEventSet_st g_event_sets[MAX_EVENT_SETS];

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
 * GPUs and types registered on it, one per wait. The log's path is EVENT_LOG of migstate.h
 * (gpunode.sim.migstate, which sim/xidraise writes by too). */

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
