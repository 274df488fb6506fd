/*
 * Simulated Moore Threads MTML (libmtml.so) exporting the subset xlurm uses; see
 * fake_state.h for the state file. MTML has no process query in its public API, so
 * xlurm finds the processes using a Moore Threads device from /proc (the tests give it
 * a fake /proc tree); procs= is ignored here. mtmlDeviceGetGpuPath reports node=
 * (failing with fail=path:CODE).
 *
 * Drop a function with -DOMIT_<symbol>, e.g. -DOMIT_mtmlDeviceGetUUID.
 */
#include "fake_state.h"

typedef int MtmlReturn;
typedef struct MtmlLibrary MtmlLibrary;
typedef int MtmlDevice;

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
    default: return "MTML_ERROR_UNKNOWN";
    }
}
#endif
