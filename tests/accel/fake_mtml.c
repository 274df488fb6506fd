/*
 * Simulated Moore Threads MTML (libmtml.so) exporting the subset xlurm uses; see
 * fake_state.h for the state file. MTML has no process query in its public API, so
 * xlurm finds the processes using a Moore Threads device from /proc (the tests give it
 * a fake /proc tree); procs= is ignored here. mtmlDeviceGetGpuPath reports node=
 * (failing with fail=path:CODE).
 *
 * Load: mtmlDeviceInitGpu / mtmlDeviceFreeGpu and mtmlGpuGetUtilization (util=, percent,
 * failing with fail=util:CODE); mtmlDeviceInitMemory / mtmlDeviceFreeMemory and
 * mtmlMemoryGetTotal / mtmlMemoryGetUsed (mem_total= and mem_used=, bytes, both failing
 * with fail=mem:CODE); fail=gpu:CODE and fail=memory:CODE make the two init functions
 * fail instead. A GPU or memory object is one per device and must be freed before
 * it is initialised again (else MTML_ERROR_RESOURCE_IS_BUSY, 12: a leak shows up at the
 * next poll); the getters refuse an object that is not initialised, or of the other kind.
 *
 * Drop a function with -DOMIT_<symbol>, e.g. -DOMIT_mtmlDeviceGetUUID.
 */
#include "fake_state.h"

typedef int MtmlReturn;
typedef struct MtmlLibrary MtmlLibrary;
typedef int MtmlDevice;
typedef int MtmlGpu;
typedef int MtmlMemory;

typedef struct {
    char sbdf[32];
    unsigned int segment;
    unsigned int bus;
    unsigned int device;
    unsigned int pciDeviceId;
    unsigned int pciSubsystemId;
    unsigned int busWidth;
    float pciMaxSpeed;
    float pciCurSpeed;
    unsigned int pciMaxWidth;
    unsigned int pciCurWidth;
    unsigned int pciMaxGen;
    unsigned int pciCurGen;
    int rsvd[6];
} MtmlPciInfo;

static int library_token;
static MtmlDevice handles[FAKE_MAX_DEVICES];
/* Nonzero while initialised and not yet freed. */
FAKE_UNUSED static MtmlGpu gpus[FAKE_MAX_DEVICES];
FAKE_UNUSED static MtmlMemory memories[FAKE_MAX_DEVICES];

FAKE_UNUSED static MtmlReturn lookup(const MtmlDevice *h, const char *what, struct fake_device **out)
{
    if (fake_load() != 0)
        return 999;
    if (h < handles || h >= handles + FAKE_MAX_DEVICES)
        return 3;
    struct fake_device *d = fake_device(h - handles);
    if (!d)
        return 7;
    int code = fake_fail(d, what);
    if (code)
        return code;
    *out = d;
    return 0;
}

#ifndef OMIT_mtmlLibraryInit
MtmlReturn mtmlLibraryInit(MtmlLibrary **lib)
{
    if (fake_load() != 0)
        return 999;
    if (fake.init_code)
        return fake.init_code;
    *lib = (MtmlLibrary *)&library_token;
    return 0;
}
#endif

#ifndef OMIT_mtmlLibraryShutDown
MtmlReturn mtmlLibraryShutDown(MtmlLibrary *lib)
{
    return lib == (MtmlLibrary *)&library_token ? 0 : 3;
}
#endif

#ifndef OMIT_mtmlLibraryCountDevice
MtmlReturn mtmlLibraryCountDevice(const MtmlLibrary *lib, unsigned int *count)
{
    if (fake_load() != 0)
        return 999;
    if (lib != (const MtmlLibrary *)&library_token)
        return 3;
    if (fake.count_code)
        return fake.count_code;
    *count = (unsigned)fake.ndev;
    return 0;
}
#endif

#ifndef OMIT_mtmlLibraryInitDeviceByIndex
MtmlReturn mtmlLibraryInitDeviceByIndex(const MtmlLibrary *lib, unsigned int index,
                                        MtmlDevice **dev)
{
    if (fake_load() != 0)
        return 999;
    if (lib != (const MtmlLibrary *)&library_token)
        return 3;
    struct fake_device *d = fake_device(index);
    if (!d)
        return 7;
    int code = fake_fail(d, "handle");
    if (code)
        return code;
    *dev = &handles[index];
    return 0;
}
#endif

#ifndef OMIT_mtmlLibraryFreeDevice
MtmlReturn mtmlLibraryFreeDevice(MtmlDevice *dev)
{
    (void)dev;
    return 0;
}
#endif

#ifndef OMIT_mtmlDeviceGetUUID
MtmlReturn mtmlDeviceGetUUID(const MtmlDevice *dev, char *uuid, unsigned int length)
{
    struct fake_device *d;
    MtmlReturn r = lookup(dev, "uuid", &d);
    if (r)
        return r;
    if (strlen(d->uuid) + 1 > length)
        return 6;
    strcpy(uuid, d->uuid);
    return 0;
}
#endif

#ifndef OMIT_mtmlDeviceGetPciInfo
MtmlReturn mtmlDeviceGetPciInfo(const MtmlDevice *dev, MtmlPciInfo *pci)
{
    struct fake_device *d;
    MtmlReturn r = lookup(dev, "pci", &d);
    if (r)
        return r;
    memset(pci, 0, sizeof *pci);
    snprintf(pci->sbdf, sizeof pci->sbdf, "%08x:%02x:%02x.%x", d->domain, d->bus, d->dev, d->fn);
    pci->segment = d->domain;
    pci->bus = d->bus;
    pci->device = d->dev;
    return 0;
}
#endif

#ifndef OMIT_mtmlDeviceGetGpuPath
MtmlReturn mtmlDeviceGetGpuPath(const MtmlDevice *dev, char *path, unsigned int length)
{
    struct fake_device *d;
    MtmlReturn r = lookup(dev, "path", &d);
    if (r)
        return r;
    if (strlen(d->node) + 1 > length)
        return 6;
    strcpy(path, d->node);
    return 0;
}
#endif

/* The device index of a live sub-object in `objects`, or -1. */
FAKE_UNUSED static long live(const int *obj, const int *objects)
{
    if (obj < objects || obj >= objects + FAKE_MAX_DEVICES || !*obj)
        return -1;
    return obj - objects;
}

#ifndef OMIT_mtmlDeviceInitGpu
MtmlReturn mtmlDeviceInitGpu(const MtmlDevice *dev, MtmlGpu **gpu)
{
    struct fake_device *d;
    MtmlReturn r = lookup(dev, "gpu", &d);
    if (r)
        return r;
    long i = dev - handles;
    if (gpus[i])
        return 12;
    gpus[i] = 1;
    *gpu = &gpus[i];
    return 0;
}
#endif

#ifndef OMIT_mtmlDeviceFreeGpu
MtmlReturn mtmlDeviceFreeGpu(MtmlGpu *gpu)
{
    long i = live(gpu, gpus);
    if (i < 0)
        return 3;
    gpus[i] = 0;
    return 0;
}
#endif

#ifndef OMIT_mtmlGpuGetUtilization
MtmlReturn mtmlGpuGetUtilization(const MtmlGpu *gpu, unsigned int *utilization)
{
    long i = live(gpu, gpus);
    if (i < 0)
        return 3;
    struct fake_device *d;
    MtmlReturn r = lookup(&handles[i], "util", &d);
    if (r)
        return r;
    *utilization = d->util;
    return 0;
}
#endif

#ifndef OMIT_mtmlDeviceInitMemory
MtmlReturn mtmlDeviceInitMemory(const MtmlDevice *dev, MtmlMemory **mem)
{
    struct fake_device *d;
    MtmlReturn r = lookup(dev, "memory", &d);
    if (r)
        return r;
    long i = dev - handles;
    if (memories[i])
        return 12;
    memories[i] = 1;
    *mem = &memories[i];
    return 0;
}
#endif

#ifndef OMIT_mtmlDeviceFreeMemory
MtmlReturn mtmlDeviceFreeMemory(MtmlMemory *mem)
{
    long i = live(mem, memories);
    if (i < 0)
        return 3;
    memories[i] = 0;
    return 0;
}
#endif

FAKE_UNUSED static MtmlReturn memory_value(const MtmlMemory *mem, int used,
                                           unsigned long long *out)
{
    long i = live(mem, memories);
    if (i < 0)
        return 3;
    struct fake_device *d;
    MtmlReturn r = lookup(&handles[i], "mem", &d);
    if (r)
        return r;
    *out = used ? d->mem_used : d->mem_total;
    return 0;
}

#ifndef OMIT_mtmlMemoryGetTotal
MtmlReturn mtmlMemoryGetTotal(const MtmlMemory *mem, unsigned long long *total)
{
    return memory_value(mem, 0, total);
}
#endif

#ifndef OMIT_mtmlMemoryGetUsed
MtmlReturn mtmlMemoryGetUsed(const MtmlMemory *mem, unsigned long long *used)
{
    return memory_value(mem, 1, used);
}
#endif

#ifndef OMIT_mtmlErrorString
const char *mtmlErrorString(MtmlReturn result)
{
    switch (result) {
    case 0: return "MTML_SUCCESS";
    case 1: return "MTML_ERROR_DRIVER_NOT_LOADED";
    case 2: return "MTML_ERROR_DRIVER_FAILURE";
    case 3: return "MTML_ERROR_INVALID_ARGUMENT";
    case 4: return "MTML_ERROR_NOT_SUPPORTED";
    case 7: return "MTML_ERROR_NOT_FOUND";
    case 12: return "MTML_ERROR_RESOURCE_IS_BUSY";
    default: return "MTML_ERROR_UNKNOWN";
    }
}
#endif
