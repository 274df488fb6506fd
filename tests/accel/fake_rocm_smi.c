/*
 * Simulated Hygon ROCm SMI (librocm_smi64.so) exporting the subset xlurm uses; see
 * fake_state.h for the state file. The unique id is uuid= read as a number
 * (e.g. uuid=0x1234abcd); processes are procs= of each device. Health comes from the
 * separate fake hy-smi (fake_hy_smi.c).
 *
 * A "procs" failure on any device fails the machine-wide process listing; a "gpus"
 * failure fails rsmi_compute_process_gpus_get for the processes of that device.
 *
 * Load: rsmi_dev_busy_percent_get reports util= (percent, failing with fail=util:CODE);
 * rsmi_dev_memory_total_get and rsmi_dev_memory_usage_get report mem_total= and
 * mem_used= (bytes) for RSMI_MEM_TYPE_VRAM (0) only, any other type being
 * RSMI_STATUS_INVALID_ARGS, both failing with fail=mem:CODE.
 *
 * Drop a function with -DOMIT_<symbol>, e.g. -DOMIT_rsmi_dev_unique_id_get.
 */
#include <stdint.h>
#include "fake_state.h"

typedef int rsmi_status_t;

typedef struct {
    uint32_t process_id;
    uint32_t pasid;
    uint64_t vram_usage;
    uint64_t sdma_usage;
    uint32_t cu_occupancy;
} rsmi_process_info_t;

#define RSMI_STATUS_INVALID_ARGS 1
#define RSMI_STATUS_NOT_SUPPORTED 2
#define RSMI_STATUS_INSUFFICIENT_SIZE 11
#define RSMI_STATUS_NOT_FOUND 10
#define RSMI_STATUS_INIT_ERROR 8

FAKE_UNUSED static struct fake_device *device_for(uint32_t i, const char *what, rsmi_status_t *code)
{
    if (fake_load() != 0) {
        *code = RSMI_STATUS_INIT_ERROR;
        return NULL;
    }
    struct fake_device *d = fake_device(i);
    if (!d) {
        *code = RSMI_STATUS_INVALID_ARGS;
        return NULL;
    }
    *code = fake_fail(d, what);
    return *code ? NULL : d;
}

#ifndef OMIT_rsmi_init
rsmi_status_t rsmi_init(uint64_t flags)
{
    (void)flags;
    if (fake_load() != 0)
        return RSMI_STATUS_INIT_ERROR;
    return fake.init_code;
}
#endif

#ifndef OMIT_rsmi_shut_down
rsmi_status_t rsmi_shut_down(void)
{
    return 0;
}
#endif

#ifndef OMIT_rsmi_num_monitor_devices
rsmi_status_t rsmi_num_monitor_devices(uint32_t *num)
{
    if (fake_load() != 0)
        return RSMI_STATUS_INIT_ERROR;
    if (fake.count_code)
        return fake.count_code;
    *num = (uint32_t)fake.ndev;
    return 0;
}
#endif

#ifndef OMIT_rsmi_dev_unique_id_get
rsmi_status_t rsmi_dev_unique_id_get(uint32_t dv_ind, uint64_t *id)
{
    rsmi_status_t code;
    struct fake_device *d = device_for(dv_ind, "uuid", &code);
    if (!d)
        return code;
    *id = strtoull(d->uuid, NULL, 0);
    return 0;
}
#endif

#ifndef OMIT_rsmi_dev_pci_id_get
rsmi_status_t rsmi_dev_pci_id_get(uint32_t dv_ind, uint64_t *bdfid)
{
    rsmi_status_t code;
    struct fake_device *d = device_for(dv_ind, "pci", &code);
    if (!d)
        return code;
    *bdfid = ((uint64_t)d->domain << 32) | ((uint64_t)(d->bus & 0xff) << 8) |
             ((uint64_t)(d->dev & 0x1f) << 3) | (uint64_t)(d->fn & 0x7);
    return 0;
}
#endif

#ifndef OMIT_rsmi_topo_get_numa_node_number
rsmi_status_t rsmi_topo_get_numa_node_number(uint32_t dv_ind, uint32_t *numa_node)
{
    rsmi_status_t code;
    struct fake_device *d = device_for(dv_ind, "numa", &code);
    if (!d)
        return code;
    if (d->numa < 0)
        return RSMI_STATUS_NOT_SUPPORTED;
    *numa_node = (uint32_t)d->numa;
    return 0;
}
#endif

typedef enum {
    RSMI_MEM_TYPE_VRAM = 0,
    RSMI_MEM_TYPE_VIS_VRAM,
    RSMI_MEM_TYPE_GTT,
} rsmi_memory_type_t;

#ifndef OMIT_rsmi_dev_busy_percent_get
rsmi_status_t rsmi_dev_busy_percent_get(uint32_t dv_ind, uint32_t *busy_percent)
{
    rsmi_status_t code;
    struct fake_device *d = device_for(dv_ind, "util", &code);
    if (!d)
        return code;
    *busy_percent = d->util;
    return 0;
}
#endif

FAKE_UNUSED static rsmi_status_t vram(uint32_t dv_ind, rsmi_memory_type_t mem_type, int used,
                                      uint64_t *out)
{
    rsmi_status_t code;
    struct fake_device *d = device_for(dv_ind, "mem", &code);
    if (!d)
        return code;
    if (mem_type != RSMI_MEM_TYPE_VRAM)
        return RSMI_STATUS_INVALID_ARGS;
    *out = used ? d->mem_used : d->mem_total;
    return 0;
}

#ifndef OMIT_rsmi_dev_memory_total_get
rsmi_status_t rsmi_dev_memory_total_get(uint32_t dv_ind, rsmi_memory_type_t mem_type,
                                        uint64_t *total)
{
    return vram(dv_ind, mem_type, 0, total);
}
#endif

#ifndef OMIT_rsmi_dev_memory_usage_get
rsmi_status_t rsmi_dev_memory_usage_get(uint32_t dv_ind, rsmi_memory_type_t mem_type,
                                        uint64_t *used)
{
    return vram(dv_ind, mem_type, 1, used);
}
#endif

/* Every pid using any device, once. */
FAKE_UNUSED static int all_pids(uint32_t *out, int max)
{
    int n = 0;
    for (int i = 0; i < fake.ndev; i++)
        for (int j = 0; j < fake.dev[i].nprocs; j++) {
            int seen = 0;
            for (int k = 0; k < n; k++)
                seen |= out[k] == fake.dev[i].procs[j];
            if (!seen && n < max)
                out[n++] = fake.dev[i].procs[j];
        }
    return n;
}

#ifndef OMIT_rsmi_compute_process_info_get
rsmi_status_t rsmi_compute_process_info_get(rsmi_process_info_t *procs, uint32_t *num_items)
{
    if (fake_load() != 0)
        return RSMI_STATUS_INIT_ERROR;
    for (int i = 0; i < fake.ndev; i++) {
        int code = fake_fail(&fake.dev[i], "procs");
        if (code)
            return code;
    }
    fake_sleep();
    uint32_t pids[FAKE_MAX_DEVICES * FAKE_MAX_PROCS];
    int n = all_pids(pids, (int)(sizeof pids / sizeof pids[0]));
    if (!procs) {
        *num_items = (uint32_t)n;
        return 0;
    }
    uint32_t written = 0;
    for (int i = 0; i < n && written < *num_items; i++, written++) {
        memset(&procs[written], 0, sizeof procs[written]);
        procs[written].process_id = pids[i];
        procs[written].pasid = 0x8000 + (uint32_t)i;
    }
    rsmi_status_t r = written < (uint32_t)n ? RSMI_STATUS_INSUFFICIENT_SIZE : 0;
    *num_items = written;
    return r;
}
#endif

#ifndef OMIT_rsmi_compute_process_gpus_get
rsmi_status_t rsmi_compute_process_gpus_get(uint32_t pid, uint32_t *dv_indices,
                                            uint32_t *num_devices)
{
    if (fake_load() != 0)
        return RSMI_STATUS_INIT_ERROR;
    uint32_t found[FAKE_MAX_DEVICES];
    uint32_t n = 0;
    for (int i = 0; i < fake.ndev; i++)
        for (int j = 0; j < fake.dev[i].nprocs; j++)
            if (fake.dev[i].procs[j] == pid) {
                int code = fake_fail(&fake.dev[i], "gpus");
                if (code)
                    return code;
                found[n++] = (uint32_t)i;
                break;
            }
    if (!n)
        return RSMI_STATUS_NOT_FOUND;
    if (!dv_indices) {
        *num_devices = n;
        return 0;
    }
    if (*num_devices < n) {
        *num_devices = n;
        return RSMI_STATUS_INSUFFICIENT_SIZE;
    }
    memcpy(dv_indices, found, n * sizeof found[0]);
    *num_devices = n;
    return 0;
}
#endif

#ifndef OMIT_rsmi_status_string
rsmi_status_t rsmi_status_string(rsmi_status_t status, const char **status_string)
{
    switch (status) {
    case 0: *status_string = "RSMI_STATUS_SUCCESS: The function has been executed successfully."; break;
    case 1: *status_string = "RSMI_STATUS_INVALID_ARGS: Invalid arguments"; break;
    case 2: *status_string = "RSMI_STATUS_NOT_SUPPORTED: Feature not supported"; break;
    case 8: *status_string = "RSMI_STATUS_INIT_ERROR: An error occurred during initialization"; break;
    case 10: *status_string = "RSMI_STATUS_NOT_FOUND: An item was searched for but not found"; break;
    case 11: *status_string = "RSMI_STATUS_INSUFFICIENT_SIZE: Not enough resources"; break;
    default: *status_string = "RSMI_STATUS_UNKNOWN_ERROR: An unknown error occurred"; break;
    }
    return 0;
}
#endif
