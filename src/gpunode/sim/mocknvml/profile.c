#include "common.h"

/* The one and only copy of the magic header; Python requires it to occur
 * exactly once in the built library. */
__attribute__((used, visibility("default"))) char gpunode_profile_blob[262144] =
    "GPUNODE-NVML-PROFILE-V1\n";

int g_have_profile;
char g_driver_version[STR_LEN];
char g_nvml_version[STR_LEN];
int g_cuda_version;
struct nvmlDevice_st g_gpus[MAX_GPUS];
unsigned int g_ngpus;
struct nvmlDevice_st *g_order[MAX_GPUS]; /* visible GPUs, by bus id */
unsigned int g_nvisible;
init_mig_t g_init_migs[MAX_MIGS];
unsigned int g_ninit_migs;
struct nvmlDevice_st g_migs[MAX_MIGS];
struct nvmlComputeInstance_st g_cis[MAX_MIGS];
struct nvmlGpuInstance_st g_gis[MAX_GIS];
gip_t g_gips[MAX_GIPS];
unsigned int g_ngips;
unsigned int g_mig_slices, g_memory_slots;
unsigned int g_cip_slices[MAX_CIPS], g_cip_step[MAX_CIPS], g_ncips;

/* ------------------------------------------------------------------ */
/* profile parsing                                                      */

/* Reads at most cap - 1 bytes of src: also a caller's string that has no NUL within them
 * (nvidia-smi's bus ids through the export table, internal.c). */
void copy_str(char *dst, size_t cap, const char *src)
{
    size_t n = strnlen(src, cap - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

unsigned long long parse_ull(const char *s)
{
    return strtoull(s, NULL, 0);
}

int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus,
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
    ULL_FIELD("bar1_total", bar1_total)
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
    UINT_FIELD("nvlink_version", nvlink_version)
    UINT_FIELD("nvlink_speed", nvlink_speed)
    ULL_FIELD("nvlink_down", nvlink_down)
    UINT_FIELD("fabric", fabric)
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
void for_each_field(char *rest, void (*set)(void *, const char *, const char *), void *obj)
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

typedef struct {
    unsigned int index, slices, step;
} cip_t;

static void cip_setter(void *o, const char *k, const char *v)
{
    cip_t *c = o;
    if (strcmp(k, "index") == 0)
        c->index = (unsigned int)parse_ull(v);
    else if (strcmp(k, "slices") == 0)
        c->slices = (unsigned int)parse_ull(v);
    else if (strcmp(k, "step") == 0)
        c->step = (unsigned int)parse_ull(v);
}

static void migspace_setter(void *o, const char *k, const char *v)
{
    (void)o;
    if (strcmp(k, "compute_slices") == 0)
        g_mig_slices = (unsigned int)parse_ull(v);
    else if (strcmp(k, "memory_slots") == 0)
        g_memory_slots = (unsigned int)parse_ull(v);
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
    } else if (strcmp(line, "migspace") == 0) {
        for_each_field(rest, migspace_setter, NULL);
    } else if (strcmp(line, "cip") == 0) {
        cip_t c = {MAX_CIPS, 0, 0};
        for_each_field(rest, cip_setter, &c);
        if (c.index != g_ncips || c.index >= MAX_CIPS || c.slices == 0 || c.step == 0)
            return; /* profile ids are 0, 1, ... in order (gpunode.sim.miggeometry) */
        g_cip_slices[g_ncips] = c.slices;
        g_cip_step[g_ncips++] = c.step;
    }
}

/* Parse a payload's lines (after the magic line) into the profile's globals. */
void parse_payload(const char *text, size_t size)
{
    static char line[8192];
    size_t pos = 0;

    g_have_profile = 0;
    g_driver_version[0] = '\0';
    g_nvml_version[0] = '\0';
    g_cuda_version = 0;
    g_ngpus = 0;
    g_ngips = 0;
    g_ninit_migs = 0;
    g_mig_slices = 0;
    g_memory_slots = 0;
    g_ncips = 0;

    while (pos < size && text[pos] != '\0') {
        size_t start = pos;
        while (pos < size && text[pos] != '\0' && text[pos] != '\n')
            pos++;
        size_t len = pos - start;
        if (len > 0 && text[start + len - 1] == '\r')
            len--;
        if (len < sizeof(line)) {
            memcpy(line, text + start, len);
            line[len] = '\0';
            parse_line(line);
        }
        if (pos < size && text[pos] == '\n')
            pos++;
    }
}

/* The embedded profile: the blob after its magic header line. */
void parse_profile(void)
{
    /* Skip the magic header line (without keeping a second copy of it). */
    const char *nl = memchr(gpunode_profile_blob, '\n', 64);
    if (!nl) {
        parse_payload("", 0);
        return;
    }
    size_t pos = (size_t)(nl - gpunode_profile_blob) + 1;
    parse_payload(gpunode_profile_blob + pos, sizeof(gpunode_profile_blob) - pos);
}
