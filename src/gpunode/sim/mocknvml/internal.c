#include "common.h"

/* ------------------------------------------------------------------ */
/* nvidia-smi's export table                                            */
/*
 * NVIDIA's nvidia-smi does not only call the public NVML API: it first asks the
 * library for an internal table of entry points (nvmlInternalGetExportTable with the
 * GUID 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4) and, without one, stops with "Mismatch in
 * versions between nvidia-smi and NVML". Some views then call numbered slots of that
 * table. What each slot takes and returns below was found by giving every slot its own
 * entry and watching which slot each view of Debian's nvidia-smi 535.261.03 and
 * 550.163.01 calls with what (the same slots in both; NVIDIA's own mock, k8s-test-infra
 * pkg/gpu/mocknvml, documents slots 81, 213-215 and 230 of 580 alike):
 *
 *   23       the P2P link between two GPUs for `topo -m`: (const char *busIdA,
 *            const char *busIdB, unsigned int *out); out[0] is the kind: 0 PIX, 1 PXB,
 *            2 PHB, 3 NODE, 4 SYS, 4 + n "NV<n>" (n NVLinks). An error here aborts the
 *            view ("Failed to run topology matrix").
 *   26       a logging hook called for every line written (format, "stdout", ...):
 *            nothing to do.
 *   81       a GPU's PCI bus id by NVML index: (unsigned int index, char *busId,
 *            unsigned int length), length 0x22; the short form, 0000:3B:00.0 (NVML's
 *            busIdLegacy), as these messages show it on hardware. A GPU that fell off the
 *            bus has one too (the driver knows where it was): nvidia-smi names it so in
 *            "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost", and
 *            the GPU of "WARNING: infoROM is corrupted at gpu 0000:3B:00.0". (NVIDIA's mock
 *            serves a device handle here, which nvidia-smi 535/550 print as the bus id.)
 *   213-215  a device's process lists: (nvmlDevice_t, unsigned int *count, entries):
 *            no process runs on a simulated GPU, so the count is 0 (leaving it as the
 *            caller's capacity makes nvidia-smi print its uninitialised buffer as
 *            processes).
 *   230      the host side's maximum PCIe generation ("Host Max" of -q):
 *            (nvmlDevice_t, unsigned int *gen).
 *
 * Every other slot answers NVML_ERROR_NOT_SUPPORTED without touching its arguments:
 * nvidia-smi then prints N/A, its documented answer for what a GPU does not report
 * (answering success would leave it reading what it never had written). Which views
 * hold to that is tests/unit/sim/test_nvidia_smi.py's business.
 */

#define EXPORT_TABLE_SLOTS 256
#define SLOT_P2P_LINK 23
#define SLOT_LOG 26
#define SLOT_BUS_ID_BY_INDEX 81
#define SLOT_PROCESSES_FIRST 213
#define SLOT_PROCESSES_LAST 215
#define SLOT_HOST_MAX_PCIE_GEN 230

static const unsigned char TABLE_GUID[16] = {
    0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
    0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4,
};

static nvmlReturn_t slot_call(unsigned int slot, void *a0, void *a1, void *a2)
{
    const gpu_t *g = NULL;
    const mig_t *m = NULL;
    nvmlReturn_t rc;
    switch (slot) {
    case SLOT_LOG:
        return NVML_SUCCESS;
    case SLOT_BUS_ID_BY_INDEX: {
        CHECK_INIT();
        REQUIRE(a1 && (uintptr_t)a0 < g_nvisible && (uintptr_t)a2 <= UINT32_MAX);
        const gpu_t *at = &g_order[(uintptr_t)a0]->gpu;
        char bus_id[32];
        snprintf(bus_id, sizeof(bus_id), "%04X:%02X:%02X.%X", at->domain & 0xffffu,
                 at->bus & 0xffu, at->device & 0xffu, at->function & 0xfu);
        return copy_out((char *)a1, (unsigned int)(uintptr_t)a2, bus_id);
    }
    case SLOT_P2P_LINK:
        CHECK_INIT();
        REQUIRE(a0 && a1 && a2);
        return p2p_link_kind((const char *)a0, (const char *)a1, (unsigned int *)a2);
    case SLOT_HOST_MAX_PCIE_GEN:
        rc = lookup((nvmlDevice_t)a0, &g);
        if (rc != NVML_SUCCESS)
            return rc;
        REQUIRE(a1);
        if (!g->pcie_gen_max)
            return NVML_ERROR_NOT_SUPPORTED;
        *(unsigned int *)a1 = g->pcie_gen_max;
        return NVML_SUCCESS;
    default:
        if (slot >= SLOT_PROCESSES_FIRST && slot <= SLOT_PROCESSES_LAST) {
            rc = lookup_any((nvmlDevice_t)a0, &g, &m);
            if (rc != NVML_SUCCESS)
                return rc;
            REQUIRE(a1);
            *(unsigned int *)a1 = 0;
            return NVML_SUCCESS;
        }
        CHECK_INIT();
        return NVML_ERROR_NOT_SUPPORTED;
    }
}

/* One entry per slot, so that a call says which slot it was. */
#define SLOT(n) \
    __attribute__((unused)) static nvmlReturn_t slot_##n(void *a0, void *a1, void *a2) { return slot_call(n, a0, a1, a2); }
#define SLOTS16(h) \
    SLOT(h##0) SLOT(h##1) SLOT(h##2) SLOT(h##3) SLOT(h##4) SLOT(h##5) SLOT(h##6) SLOT(h##7) \
    SLOT(h##8) SLOT(h##9) SLOT(h##a) SLOT(h##b) SLOT(h##c) SLOT(h##d) SLOT(h##e) SLOT(h##f)
#define ENTRY(n) [n] = (void *)slot_##n,
#define ENTRIES16(h) \
    ENTRY(h##0) ENTRY(h##1) ENTRY(h##2) ENTRY(h##3) ENTRY(h##4) ENTRY(h##5) ENTRY(h##6) \
    ENTRY(h##7) ENTRY(h##8) ENTRY(h##9) ENTRY(h##a) ENTRY(h##b) ENTRY(h##c) ENTRY(h##d) \
    ENTRY(h##e) ENTRY(h##f)
#define ALL(M) \
    M(0x0) M(0x1) M(0x2) M(0x3) M(0x4) M(0x5) M(0x6) M(0x7) \
    M(0x8) M(0x9) M(0xa) M(0xb) M(0xc) M(0xd) M(0xe) M(0xf)

ALL(SLOTS16)

/* Entry 0 is the table's size in bytes (nvidia-smi checks it before using a slot), entry
 * n slot n (at byte offset 8n); slot 0 is that size, so its function is never listed. */
static void *const g_export_table[EXPORT_TABLE_SLOTS] = {
    ALL(ENTRIES16)[0] = (void *)(uintptr_t)sizeof(g_export_table)};

EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void **table, const unsigned char *guid)
{
    REQUIRE(table && guid);
    if (memcmp(guid, TABLE_GUID, sizeof(TABLE_GUID)) != 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *table = g_export_table;
    return NVML_SUCCESS;
}
