/*
 * Simulated MetaX MXSML (libmxsml.so): the extension API subset (mxSmlEx*) plus the base
 * API's mxSmlInit and mxSmlGetDeviceUnavailableReason; see fake_state.h for the state
 * file. health=N becomes the unavailable code, reason= its text.
 *
 * Load, from both APIs (all four fail with fail=util:CODE or fail=mem:CODE):
 *   mxSmlExDeviceGetUtilization   gpu = util=, memory = util / 2 (percent)
 *   mxSmlExDeviceGetMemoryInfo    free, total, used from mem_total= and mem_used= (bytes)
 *   mxSmlGetDeviceIpUsage         util= for MXSML_Usage_Xcore (4) only, else 1 (failure)
 *   mxSmlGetMemoryInfo            vramTotal, vramUse from mem_total=, mem_used= in KB
 *                                 (bytes / 1024, rounded down); the other domains fixed
 *
 * Drop a function with -DOMIT_<symbol>, e.g. -DOMIT_mxSmlGetDeviceUnavailableReason.
 */
#include "fake_state.h"

typedef unsigned int ex_ret_t;
typedef unsigned int base_ret_t;
typedef int *ex_device_t;

typedef struct {
    char busIdLegacy[16];
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubSystemId;
    char busId[32];
} ex_pci_info_t;

typedef struct {
    unsigned int computeInstanceId;
    unsigned int gpuInstanceId;
    unsigned int pid;
    unsigned long long usedGpuMemory;
} ex_process_info_t;

typedef struct {
    int unavailableCode;
    char unavailableReason[64];
} unavailable_reason_t;

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} ex_utilization_t;

typedef struct {
    unsigned long long free;
    unsigned long long total;
    unsigned long long used;
} ex_memory_t;

typedef struct {
    long visVramTotal;
    long visVramUse;
    long vramTotal;
    long vramUse;
    long xttTotal;
    long xttUse;
} memory_info_t;

#define MXSML_USAGE_XCORE 4

static int handles[FAKE_MAX_DEVICES];

FAKE_UNUSED static ex_ret_t lookup(ex_device_t h, const char *what, struct fake_device **out)
{
    if (fake_load() != 0)
        return 999;
    if (h < handles || h >= handles + FAKE_MAX_DEVICES)
        return 2;
    struct fake_device *d = fake_device(h - handles);
    if (!d)
        return 2;
    int code = fake_fail(d, what);
    if (code)
        return (ex_ret_t)code;
    *out = d;
    return 0;
}

#ifndef OMIT_mxSmlExInit
ex_ret_t mxSmlExInit(void)
{
    if (fake_load() != 0)
        return 999;
    return (ex_ret_t)fake.init_code;
}
#endif

#ifndef OMIT_mxSmlInit
base_ret_t mxSmlInit(void)
{
    if (fake_load() != 0)
        return 1;
    return (base_ret_t)fake.init_code;
}
#endif

#ifndef OMIT_mxSmlExShutdown
ex_ret_t mxSmlExShutdown(void)
{
    return 0;
}
#endif

#ifndef OMIT_mxSmlExErrorString
const char *mxSmlExErrorString(ex_ret_t r)
{
    switch (r) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 9: return "Driver Not Loaded";
    case 15: return "GPU is lost";
    default: return "Unknown Error";
    }
}
#endif

#ifndef OMIT_mxSmlExDeviceGetCount
ex_ret_t mxSmlExDeviceGetCount(unsigned int *count)
{
    if (fake_load() != 0)
        return 999;
    if (fake.count_code)
        return (ex_ret_t)fake.count_code;
    *count = (unsigned)fake.ndev;
    return 0;
}
#endif

#ifndef OMIT_mxSmlExGetDeviceHandleByIndex
ex_ret_t mxSmlExGetDeviceHandleByIndex(unsigned int index, ex_device_t *handle)
{
    if (fake_load() != 0)
        return 999;
    struct fake_device *d = fake_device(index);
    if (!d)
        return 2;
    int code = fake_fail(d, "handle");
    if (code)
        return (ex_ret_t)code;
    *handle = &handles[index];
    return 0;
}
#endif

#ifndef OMIT_mxSmlExDeviceGetUUID
ex_ret_t mxSmlExDeviceGetUUID(ex_device_t h, char *uuid, unsigned int length)
{
    struct fake_device *d;
    ex_ret_t r = lookup(h, "uuid", &d);
    if (r)
        return r;
    if (strlen(d->uuid) + 1 > length)
        return 7;
    strcpy(uuid, d->uuid);
    return 0;
}
#endif

#ifndef OMIT_mxSmlExDeviceGetPciInfo
ex_ret_t mxSmlExDeviceGetPciInfo(ex_device_t h, ex_pci_info_t *pci)
{
    struct fake_device *d;
    ex_ret_t r = lookup(h, "pci", &d);
    if (r)
        return r;
    memset(pci, 0, sizeof *pci);
    pci->domain = d->domain;
    pci->bus = d->bus;
    pci->device = d->dev;
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04x:%02x:%02x.%x", d->domain, d->bus,
             d->dev, d->fn);
    snprintf(pci->busId, sizeof pci->busId, "%08x:%02x:%02x.%x", d->domain, d->bus, d->dev, d->fn);
    return 0;
}
#endif

#ifndef OMIT_mxSmlExDeviceGetComputeRunningProcesses
ex_ret_t mxSmlExDeviceGetComputeRunningProcesses(ex_device_t h, unsigned int *count,
                                                 ex_process_info_t *infos)
{
    struct fake_device *d;
    ex_ret_t r = lookup(h, "procs", &d);
    if (r)
        return r;
    fake_sleep();
    if (*count < (unsigned)d->nprocs) {
        *count = (unsigned)d->nprocs;
        return 7;
    }
    for (int i = 0; i < d->nprocs; i++) {
        infos[i].pid = d->procs[i];
        infos[i].usedGpuMemory = 1ULL << 30;
        infos[i].gpuInstanceId = infos[i].computeInstanceId = 0;
    }
    *count = (unsigned)d->nprocs;
    return 0;
}
#endif

#ifndef OMIT_mxSmlGetDeviceUnavailableReason
base_ret_t mxSmlGetDeviceUnavailableReason(unsigned int device_id, unavailable_reason_t *info)
{
    if (fake_load() != 0)
        return 1;
    struct fake_device *d = fake_device(device_id);
    if (!d)
        return 6;
    int code = fake_fail(d, "health");
    if (code)
        return (base_ret_t)code;
    memset(info, 0, sizeof *info);
    info->unavailableCode = d->health;
    snprintf(info->unavailableReason, sizeof info->unavailableReason, "%s", d->reason);
    return 0;
}
#endif

#ifndef OMIT_mxSmlExDeviceGetUtilization
ex_ret_t mxSmlExDeviceGetUtilization(ex_device_t h, ex_utilization_t *utilization)
{
    struct fake_device *d;
    ex_ret_t r = lookup(h, "util", &d);
    if (r)
        return r;
    utilization->gpu = d->util;
    utilization->memory = d->util / 2;
    return 0;
}
#endif

#ifndef OMIT_mxSmlExDeviceGetMemoryInfo
ex_ret_t mxSmlExDeviceGetMemoryInfo(ex_device_t h, ex_memory_t *memory)
{
    struct fake_device *d;
    ex_ret_t r = lookup(h, "mem", &d);
    if (r)
        return r;
    memory->free = d->mem_total - d->mem_used;
    memory->total = d->mem_total;
    memory->used = d->mem_used;
    return 0;
}
#endif

/* The base API's device, or NULL with the code to return. */
FAKE_UNUSED static struct fake_device *base_device(unsigned int device_id, const char *what,
                                                   base_ret_t *code)
{
    if (fake_load() != 0) {
        *code = 1;
        return NULL;
    }
    struct fake_device *d = fake_device(device_id);
    if (!d) {
        *code = 6;
        return NULL;
    }
    *code = (base_ret_t)fake_fail(d, what);
    return *code ? NULL : d;
}

#ifndef OMIT_mxSmlGetDeviceIpUsage
base_ret_t mxSmlGetDeviceIpUsage(unsigned int device_id, int ip, int *usage)
{
    base_ret_t code;
    struct fake_device *d = base_device(device_id, "util", &code);
    if (!d)
        return code;
    if (ip != MXSML_USAGE_XCORE)
        return 1;
    *usage = (int)d->util;
    return 0;
}
#endif

#ifndef OMIT_mxSmlGetMemoryInfo
base_ret_t mxSmlGetMemoryInfo(unsigned int device_id, memory_info_t *memory)
{
    base_ret_t code;
    struct fake_device *d = base_device(device_id, "mem", &code);
    if (!d)
        return code;
    memory->visVramTotal = 256 * 1024;
    memory->visVramUse = 1024;
    memory->vramTotal = (long)(d->mem_total / 1024);
    memory->vramUse = (long)(d->mem_used / 1024);
    memory->xttTotal = 64L * 1024 * 1024;
    memory->xttUse = 3;
    return 0;
}
#endif

#ifndef OMIT_mxSmlGetErrorString
const char *mxSmlGetErrorString(base_ret_t r)
{
    switch (r) {
    case 0: return "MXSML_Success";
    case 1: return "MXSML_Failure";
    case 2: return "MXSML_NoDevice";
    case 6: return "MXSML_InvalidDeviceId";
    default: return "MXSML_Unknown";
    }
}
#endif
