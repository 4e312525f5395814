#include "common.h"

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
int is_visible_mig(nvmlDevice_t device)
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
nvmlReturn_t lookup(nvmlDevice_t device, const gpu_t **out)
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
nvmlReturn_t lookup_any(nvmlDevice_t device, const gpu_t **gpu, const mig_t **mig)
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


/* ------------------------------------------------------------------ */
/* device identity                                                      */

/* A MIG device's index is its index within its parent, the one
 * nvmlDeviceGetMigDeviceHandleByIndex takes (nvml.h); NVIDIA's runtime (jit-cdi)
 * asks for it. */
ANY_GETTER(nvmlDeviceGetIndex, unsigned int, m ? m->index : g->index)


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

void fill_pci(const gpu_t *g, nvmlPciInfo_t *pci, int full)
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
