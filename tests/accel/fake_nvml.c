/*
 * Simulated NVML (libnvidia-ml.so.1) exporting the subset xlurm uses; see fake_state.h
 * for the state file. Built with -DFAKE_HGML (see fake_hgml.c) it exports the same
 * functions under the T-Head HGML names instead.
 *
 * A device with health=N (N != 0) answers every per-device query with N, the way a real
 * driver answers NVML_ERROR_GPU_IS_LOST (15).
 *
 * Drop a function with -DOMIT_<name without prefix>, e.g. -DOMIT_DeviceGetUUID.
 */
#include "fake_state.h"

#ifdef FAKE_HGML
#define API(name) hgml##name
#define PCI_FN hgmlDeviceGetPciInfo_v2
#else
#define API(name) nvml##name
#define PCI_FN nvmlDeviceGetPciInfo_v3
#endif

typedef int ret_t;
typedef int *device_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} pci_info_t;

typedef struct {
    unsigned int pid;
    unsigned long long usedGpuMemory;
    unsigned int gpuInstanceId;
    unsigned int computeInstanceId;
} process_info_t;

static int handles[FAKE_MAX_DEVICES];

FAKE_UNUSED static struct fake_device *from_handle(device_t h)
{
    if (h < handles || h >= handles + FAKE_MAX_DEVICES)
        return NULL;
    return fake_device(h - handles);
}

/* Loads the state and resolves a handle; returns 0 or the code the query must fail with. */
FAKE_UNUSED static ret_t lookup(device_t h, const char *what, struct fake_device **out)
{
    if (fake_load() != 0)
        return 999;
    struct fake_device *d = from_handle(h);
    if (!d)
        return 2;
    if (d->health)
        return d->health;
    int code = fake_fail(d, what);
    if (code)
        return code;
    *out = d;
    return 0;
}

#ifndef OMIT_Init_v2
ret_t API(Init_v2)(void)
{
    if (fake_load() != 0)
        return 999;
    return fake.init_code;
}
#endif

#ifndef OMIT_Shutdown
ret_t API(Shutdown)(void)
{
    return 0;
}
#endif

#ifndef OMIT_ErrorString
const char *API(ErrorString)(ret_t r)
{
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    case 999: return "Unknown Error";
    default: return "Unknown Error";
    }
}
#endif

#ifndef OMIT_DeviceGetCount_v2
ret_t API(DeviceGetCount_v2)(unsigned int *count)
{
    if (fake_load() != 0)
        return 999;
    if (fake.count_code)
        return fake.count_code;
    *count = (unsigned)fake.ndev;
    return 0;
}
#endif

#ifndef OMIT_DeviceGetHandleByIndex_v2
ret_t API(DeviceGetHandleByIndex_v2)(unsigned int index, device_t *handle)
{
    if (fake_load() != 0)
        return 999;
    struct fake_device *d = fake_device(index);
    if (!d)
        return 2;
    int code = fake_fail(d, "handle");
    if (code)
        return code;
    *handle = &handles[index];
    return 0;
}
#endif

#ifndef OMIT_DeviceGetUUID
ret_t API(DeviceGetUUID)(device_t h, char *uuid, unsigned int length)
{
    struct fake_device *d;
    ret_t r = lookup(h, "uuid", &d);
    if (r)
        return r;
    if (strlen(d->uuid) + 1 > length)
        return 7;
    strcpy(uuid, d->uuid);
    return 0;
}
#endif

#ifndef OMIT_DeviceGetMinorNumber
ret_t API(DeviceGetMinorNumber)(device_t h, unsigned int *minor)
{
    struct fake_device *d;
    ret_t r = lookup(h, "minor", &d);
    if (r)
        return r;
    *minor = (unsigned)d->minor;
    return 0;
}
#endif

#ifndef OMIT_DeviceGetPciInfo
ret_t PCI_FN(device_t h, pci_info_t *pci)
{
    struct fake_device *d;
    ret_t r = lookup(h, "pci", &d);
    if (r)
        return r;
    memset(pci, 0, sizeof *pci);
    pci->domain = d->domain;
    pci->bus = d->bus;
    pci->device = d->dev;
    pci->pciDeviceId = 0x20b010de;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", d->domain, d->bus,
             d->dev, d->fn);
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", d->domain, d->bus, d->dev, d->fn);
    return 0;
}
#endif

#ifndef OMIT_DeviceGetNumaNodeId
ret_t API(DeviceGetNumaNodeId)(device_t h, unsigned int *node)
{
    struct fake_device *d;
    ret_t r = lookup(h, "numa", &d);
    if (r)
        return r;
    if (d->numa < 0)
        return 3;
    *node = (unsigned)d->numa;
    return 0;
}
#endif

typedef struct {
    unsigned int gpu, memory;
} utilization_t;
typedef struct {
    unsigned long long total, free, used;
} memory_t;

#ifndef OMIT_DeviceGetUtilizationRates
ret_t API(DeviceGetUtilizationRates)(device_t h, utilization_t *u)
{
    struct fake_device *d;
    ret_t r = lookup(h, "util", &d);
    if (r)
        return r;
    u->gpu = d->util;
    u->memory = d->util / 2;
    return 0;
}
#endif

#ifndef OMIT_DeviceGetMemoryInfo
ret_t API(DeviceGetMemoryInfo)(device_t h, memory_t *m)
{
    struct fake_device *d;
    ret_t r = lookup(h, "mem", &d);
    if (r)
        return r;
    m->total = d->mem_total;
    m->used = d->mem_used;
    m->free = d->mem_total - d->mem_used;
    return 0;
}
#endif

FAKE_UNUSED static ret_t processes(device_t h, const char *what, unsigned int *count, process_info_t *infos)
{
    struct fake_device *d;
    ret_t r = lookup(h, what, &d);
    if (r)
        return r;
    fake_sleep();
    int graphics = !strcmp(what, "gprocs");
    int n = graphics ? d->ngprocs : d->nprocs;
    const unsigned *pids = graphics ? d->gprocs : d->procs;
    if (*count < (unsigned)n) {
        *count = (unsigned)n;
        return 7;
    }
    for (int i = 0; i < n; i++) {
        infos[i].pid = pids[i];
        infos[i].usedGpuMemory = 1ULL << 30;
        infos[i].gpuInstanceId = 0xFFFFFFFF;
        infos[i].computeInstanceId = 0xFFFFFFFF;
    }
    *count = (unsigned)n;
    return 0;
}

#ifndef OMIT_DeviceGetComputeRunningProcesses_v3
ret_t API(DeviceGetComputeRunningProcesses_v3)(device_t h, unsigned int *count,
                                               process_info_t *infos)
{
    return processes(h, "procs", count, infos);
}
#endif

#if defined(FAKE_HGML) && !defined(OMIT_DeviceGetComputeRunningProcesses_v2)
ret_t API(DeviceGetComputeRunningProcesses_v2)(device_t h, unsigned int *count,
                                               process_info_t *infos)
{
    return processes(h, "procs", count, infos);
}
#endif

#if !defined(FAKE_HGML) && !defined(OMIT_DeviceGetGraphicsRunningProcesses_v3)
ret_t API(DeviceGetGraphicsRunningProcesses_v3)(device_t h, unsigned int *count,
                                                process_info_t *infos)
{
    return processes(h, "gprocs", count, infos);
}
#endif
