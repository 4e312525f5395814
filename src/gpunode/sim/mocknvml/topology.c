#include "common.h"

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
int peer_is_gpu(const struct pci_addr *p)
{
    return gpu_at(p) != NULL;
}

static nvmlReturn_t far_end(const gpu_t *g, unsigned int link, const struct pci_addr **out)
{
    if (!g->nvlinks)
        return NVML_ERROR_NOT_SUPPORTED;
    if (link >= NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (link >= g->nvlinks) /* a link NVML knows of that this GPU does not have */
        return NVML_ERROR_NOT_SUPPORTED;
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
    if (link >= NVLINK_MAX_LINKS || capability < 0 || capability >= NVLINK_CAP_COUNT)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (link >= g->nvlinks)
        return NVML_ERROR_NOT_SUPPORTED;
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

/* nvidia-smi's P2P link kinds (export table slot 23; see internal.c) */
#define P2P_LINK_PIX 0u
#define P2P_LINK_NV_BASE 4u /* SYS; 4 + n: n NVLinks */

/* Links of a to b that are up: to b itself or to an NVSwitch b also reaches. */
static unsigned int nvlinks_between(const gpu_t *a, const gpu_t *b)
{
    struct pci_addr at = {b->domain, b->bus, b->device, b->function};
    unsigned int n = 0;
    for (unsigned int i = 0; i < a->npeers && i < a->nvlinks && i < NVLINK_MAX_LINKS; i++) {
        if ((a->nvlink_down >> i) & 1ULL)
            continue;
        const struct pci_addr *p = &a->peers[i];
        if (!memcmp(p, &at, sizeof(at)) || (!gpu_at(p) && peer_listed(b, p)))
            n++;
    }
    return n;
}

static const gpu_t *visible_at(const char *bus_id)
{
    struct pci_addr p;
    char id[32];
    copy_str(id, sizeof(id), bus_id);
    if (parse_bus_id(id, &p.domain, &p.bus, &p.device, &p.function) != 0)
        return NULL;
    const gpu_t *g = gpu_at(&p);
    return g && g->visible ? g : NULL;
}

nvmlReturn_t p2p_link_kind(const char *bus_a, const char *bus_b, unsigned int *out)
{
    const gpu_t *a = visible_at(bus_a), *b = visible_at(bus_b);
    if (!a || !b)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (a->lost || b->lost)
        return NVML_ERROR_GPU_IS_LOST;
    /* a link down on either side is down for the pair: the fewer of the two counts */
    unsigned int ab = a == b ? 0 : nvlinks_between(a, b), ba = a == b ? 0 : nvlinks_between(b, a);
    unsigned int links = ab < ba ? ab : ba;
    if (links) {
        *out = P2P_LINK_NV_BASE + links;
        return NVML_SUCCESS;
    }
    /* NVML's levels are 10 apart from SINGLE (PIX) to SYSTEM (SYS) */
    int level = topology_level(a, b);
    *out = level <= TOPOLOGY_SINGLE ? P2P_LINK_PIX : (unsigned int)(level - TOPOLOGY_SINGLE) / 10;
    return NVML_SUCCESS;
}
