/*
 * Simulated Huawei DCMI (libdcmi.so) exporting the v2 (dcmiv2_*) and v1 (dcmi_*) subsets
 * xlurm uses; see fake_state.h for the state file.
 *
 *   -DNO_DCMIV2   build without any dcmiv2_* symbol (an older driver: v1 fallback)
 *   -DNO_DCMIV1   build without any dcmi_* symbol
 *   -DOMIT_<sym>  drop one symbol, e.g. -DOMIT_dcmiv2_get_device_health
 *
 * Logical ids are the devices' positions in the state file; the physical id (the N of
 * /dev/davinciN) is minor=; v1 cards and chips are card= and chip=; the UUID is the VDIE
 * die id, written in the state file as up to five '-'-separated hex words.
 *
 * Load (both APIs, each function droppable with -DOMIT_<sym>):
 *   dcmiv2_get_device_utilization_rate / dcmi_get_device_utilization_rate report util=
 *     for input_type 2 (AI Core) only (any other type: -8001), failing with fail=util:CODE;
 *   dcmiv2_get_device_hbm_info / dcmi_get_device_hbm_info report mem_total= and mem_used=
 *     in MB (bytes / 2^20, rounded down), as the driver does, failing with fail=mem:CODE.
 */
#include "fake_state.h"

struct dcmi_proc_mem_info {
    int proc_id;
    unsigned long proc_mem_usage;
};

struct dcmi_pcie_info_all {
    unsigned int venderid;
    unsigned int subvenderid;
    unsigned int deviceid;
    unsigned int subdeviceid;
    int domain;
    unsigned int bdf_busid;
    unsigned int bdf_deviceid;
    unsigned int bdf_funcid;
    unsigned char reserve[32];
};

struct dcmi_die_id {
    unsigned int soc_die[5];
};

struct dcmi_hbm_info {
    unsigned long long memory_size; /* MB */
    unsigned int freq;
    unsigned long long memory_usage; /* MB */
    int temp;
    unsigned int bandwith_util_rate;
};

#define DCMI_UTILIZATION_RATE_AICORE 2

#define DCMI_ERR_INVALID_DEVICE_ID (-8007)

FAKE_UNUSED static struct fake_device *logical(int id, const char *what, int *code)
{
    if (fake_load() != 0) {
        *code = -8005;
        return NULL;
    }
    struct fake_device *d = fake_device(id);
    if (!d) {
        *code = DCMI_ERR_INVALID_DEVICE_ID;
        return NULL;
    }
    *code = fake_fail(d, what);
    return *code ? NULL : d;
}

FAKE_UNUSED static int index_of_card_chip(int card, int chip)
{
    for (int i = 0; i < fake.ndev; i++)
        if (fake.dev[i].card == card && fake.dev[i].chip == chip)
            return i;
    return -1;
}

FAKE_UNUSED static struct fake_device *card_chip(int card, int chip, const char *what, int *code)
{
    if (fake_load() != 0) {
        *code = -8005;
        return NULL;
    }
    return logical(index_of_card_chip(card, chip), what, code);
}

FAKE_UNUSED static int fill_procs(struct fake_device *d, struct dcmi_proc_mem_info *p, int *num)
{
    fake_sleep();
    for (int i = 0; i < d->nprocs; i++) {
        p[i].proc_id = (int)d->procs[i];
        p[i].proc_mem_usage = 1UL << 30;
    }
    *num = d->nprocs;
    return 0;
}

FAKE_UNUSED static int fill_pcie(struct fake_device *d, struct dcmi_pcie_info_all *p)
{
    memset(p, 0, sizeof *p);
    p->venderid = 0x19e5;
    p->deviceid = 0xd801;
    p->domain = (int)d->domain;
    p->bdf_busid = d->bus;
    p->bdf_deviceid = d->dev;
    p->bdf_funcid = d->fn;
    return 0;
}

FAKE_UNUSED static int fill_die(struct fake_device *d, struct dcmi_die_id *die)
{
    fake_die_words(d->uuid, die->soc_die);
    return 0;
}

FAKE_UNUSED static int fill_util(struct fake_device *d, int input_type, unsigned int *rate)
{
    if (input_type != DCMI_UTILIZATION_RATE_AICORE)
        return -8001;
    *rate = d->util;
    return 0;
}

FAKE_UNUSED static int fill_hbm(struct fake_device *d, struct dcmi_hbm_info *hbm)
{
    memset(hbm, 0, sizeof *hbm);
    hbm->memory_size = d->mem_total >> 20;
    hbm->freq = 1600;
    hbm->memory_usage = d->mem_used >> 20;
    hbm->temp = 45;
    hbm->bandwith_util_rate = 7;
    return 0;
}

/* ---- DCMI v2: every call takes the logical id ---- */
#ifndef NO_DCMIV2

#ifndef OMIT_dcmiv2_init
int dcmiv2_init(void)
{
    if (fake_load() != 0)
        return -8005;
    return fake.init_code;
}
#endif

#ifndef OMIT_dcmiv2_get_device_list
int dcmiv2_get_device_list(int *device_list, int *device_num, int list_len)
{
    if (fake_load() != 0)
        return -8005;
    if (fake.count_code)
        return fake.count_code;
    int n = fake.ndev < list_len ? fake.ndev : list_len;
    for (int i = 0; i < n; i++)
        device_list[i] = i;
    *device_num = n;
    return 0;
}
#endif

#ifndef OMIT_dcmiv2_get_device_health
int dcmiv2_get_device_health(int dev_id, unsigned int *health)
{
    int code;
    struct fake_device *d = logical(dev_id, "health", &code);
    if (!d)
        return code;
    *health = (unsigned)d->health;
    return 0;
}
#endif

#ifndef OMIT_dcmiv2_get_device_proc_mem_info
int dcmiv2_get_device_proc_mem_info(int dev_id, struct dcmi_proc_mem_info *proc_info,
                                    int *proc_num)
{
    int code;
    struct fake_device *d = logical(dev_id, "procs", &code);
    if (!d)
        return code;
    return fill_procs(d, proc_info, proc_num);
}
#endif

#ifndef OMIT_dcmiv2_get_device_pcie_info
int dcmiv2_get_device_pcie_info(int dev_id, struct dcmi_pcie_info_all *pcie_info)
{
    int code;
    struct fake_device *d = logical(dev_id, "pci", &code);
    if (!d)
        return code;
    return fill_pcie(d, pcie_info);
}
#endif

#ifndef OMIT_dcmiv2_get_device_die_id
int dcmiv2_get_device_die_id(int dev_id, int input_type, struct dcmi_die_id *die_id)
{
    (void)input_type;
    int code;
    struct fake_device *d = logical(dev_id, "uuid", &code);
    if (!d)
        return code;
    return fill_die(d, die_id);
}
#endif

#ifndef OMIT_dcmiv2_get_chip_phy_id_by_dev_id
int dcmiv2_get_chip_phy_id_by_dev_id(unsigned int dev_id, unsigned int *phyid)
{
    int code;
    struct fake_device *d = logical((int)dev_id, "minor", &code);
    if (!d)
        return code;
    *phyid = (unsigned)d->minor;
    return 0;
}
#endif

#ifndef OMIT_dcmiv2_get_device_utilization_rate
int dcmiv2_get_device_utilization_rate(int dev_id, int input_type, unsigned int *utilization_rate)
{
    int code;
    struct fake_device *d = logical(dev_id, "util", &code);
    if (!d)
        return code;
    return fill_util(d, input_type, utilization_rate);
}
#endif

#ifndef OMIT_dcmiv2_get_device_hbm_info
int dcmiv2_get_device_hbm_info(int dev_id, struct dcmi_hbm_info *hbm_info)
{
    int code;
    struct fake_device *d = logical(dev_id, "mem", &code);
    if (!d)
        return code;
    return fill_hbm(d, hbm_info);
}
#endif

#endif /* NO_DCMIV2 */

/* ---- DCMI v1: cards and chips ---- */
#ifndef NO_DCMIV1

#ifndef OMIT_dcmi_init
int dcmi_init(void)
{
    if (fake_load() != 0)
        return -8005;
    return fake.init_code;
}
#endif

#ifndef OMIT_dcmi_get_card_num_list
int dcmi_get_card_num_list(int *card_num, int *card_list, int list_len)
{
    if (fake_load() != 0)
        return -8005;
    if (fake.count_code)
        return fake.count_code;
    int n = 0;
    for (int i = 0; i < fake.ndev; i++) {
        int seen = 0;
        for (int j = 0; j < n; j++)
            seen |= card_list[j] == fake.dev[i].card;
        if (!seen && n < list_len)
            card_list[n++] = fake.dev[i].card;
    }
    *card_num = n;
    return 0;
}
#endif

#ifndef OMIT_dcmi_get_device_num_in_card
int dcmi_get_device_num_in_card(int card_id, int *device_num)
{
    if (fake_load() != 0)
        return -8005;
    int n = 0;
    for (int i = 0; i < fake.ndev; i++)
        n += fake.dev[i].card == card_id;
    if (!n)
        return DCMI_ERR_INVALID_DEVICE_ID;
    *device_num = n;
    return 0;
}
#endif

#ifndef OMIT_dcmi_get_device_logic_id
int dcmi_get_device_logic_id(int *device_logic_id, int card_id, int device_id)
{
    if (fake_load() != 0)
        return -8005;
    int i = index_of_card_chip(card_id, device_id);
    if (i < 0)
        return DCMI_ERR_INVALID_DEVICE_ID;
    *device_logic_id = i;
    return 0;
}
#endif

#ifndef OMIT_dcmi_get_device_health
int dcmi_get_device_health(int card_id, int device_id, unsigned int *health)
{
    int code;
    struct fake_device *d = card_chip(card_id, device_id, "health", &code);
    if (!d)
        return code;
    *health = (unsigned)d->health;
    return 0;
}
#endif

#ifndef OMIT_dcmi_get_device_resource_info
int dcmi_get_device_resource_info(int card_id, int device_id,
                                  struct dcmi_proc_mem_info *proc_info, int *proc_num)
{
    int code;
    struct fake_device *d = card_chip(card_id, device_id, "procs", &code);
    if (!d)
        return code;
    return fill_procs(d, proc_info, proc_num);
}
#endif

#ifndef OMIT_dcmi_get_device_pcie_info_v2
int dcmi_get_device_pcie_info_v2(int card_id, int device_id, struct dcmi_pcie_info_all *pcie_info)
{
    int code;
    struct fake_device *d = card_chip(card_id, device_id, "pci", &code);
    if (!d)
        return code;
    return fill_pcie(d, pcie_info);
}
#endif

#ifndef OMIT_dcmi_get_device_die_v2
int dcmi_get_device_die_v2(int card_id, int device_id, int input_type, struct dcmi_die_id *die_id)
{
    (void)input_type;
    int code;
    struct fake_device *d = card_chip(card_id, device_id, "uuid", &code);
    if (!d)
        return code;
    return fill_die(d, die_id);
}
#endif

#ifndef OMIT_dcmi_get_device_phyid_from_logicid
int dcmi_get_device_phyid_from_logicid(unsigned int logicid, unsigned int *phyid)
{
    int code;
    struct fake_device *d = logical((int)logicid, "minor", &code);
    if (!d)
        return code;
    *phyid = (unsigned)d->minor;
    return 0;
}
#endif

#ifndef OMIT_dcmi_get_device_utilization_rate
int dcmi_get_device_utilization_rate(int card_id, int device_id, int input_type,
                                     unsigned int *utilization_rate)
{
    int code;
    struct fake_device *d = card_chip(card_id, device_id, "util", &code);
    if (!d)
        return code;
    return fill_util(d, input_type, utilization_rate);
}
#endif

#ifndef OMIT_dcmi_get_device_hbm_info
int dcmi_get_device_hbm_info(int card_id, int device_id, struct dcmi_hbm_info *hbm_info)
{
    int code;
    struct fake_device *d = card_chip(card_id, device_id, "mem", &code);
    if (!d)
        return code;
    return fill_hbm(d, hbm_info);
}
#endif

#endif /* NO_DCMIV1 */
