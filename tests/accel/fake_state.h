/*
 * Shared state for xlurm's simulated vendor libraries (tests/accel/fake_*.c).
 *
 * Every exported function re-reads the state file, so a test can change devices,
 * processes, health and errors between two polls. The file's path is compiled in
 * with -DFAKE_STATE_PATH="\"/path\"" (the Rust tests do this, so parallel tests never
 * share a process-wide environment variable), or else taken from the environment
 * variable XLURM_FAKE_GPU_STATE (the VM test does this).
 *
 * Format: one directive per line, '#' starts a comment, fields are separated by blanks.
 *
 *   init <code>            every init function returns <code> (default 0)
 *   count <code>           the device count/list function returns <code> (default 0)
 *   sleep_ms <n>           process queries sleep <n> ms first (to test poll timeouts)
 *   tool_sleep_ms <n>      the fake hy-smi sleeps <n> ms first (to test its timeout)
 *   device key=value ...   one device; devices are numbered 0, 1, ... in file order
 *
 * Device keys (all optional):
 *   uuid=STR        the UUID the library reports (default GPU-FAKE-<index>)
 *   bdf=D:B:D.F     PCI address, e.g. 0000:3b:00.0 (default 0000:<index+1>:00.0)
 *   minor=N         NVML minor number / Ascend physical id (default: index)
 *   numa=N          NUMA node from the library; -1: the library does not know (default -1)
 *   health=N        vendor health code; 0 is healthy (default 0)
 *   reason=STR      unavailable reason (MXSML), no blanks
 *   node=PATH       the device node MTML's mtmlDeviceGetGpuPath reports
 *                   (default /dev/mtgpu.<index>)
 *   card=N chip=N   DCMI v1 card and chip (default card=index chip=0)
 *   procs=P,P,...   compute processes using the device
 *   gprocs=P,...    graphics processes (NVML)
 *   util=N          busy percent of the last sample period (default 0)
 *   mem_used=B      device memory in use, bytes (default 0)
 *   mem_total=B     device memory in all, bytes (default 16 GiB)
 *   fail=WHAT:CODE,...   make one query fail with CODE; WHAT is one of
 *                   handle uuid pci minor numa procs gprocs health gpus path
 *                   util mem
 *
 * If the state file cannot be read, init functions fail (code 999) so that a
 * misconfigured test is loud rather than silently empty.
 */
#ifndef XLURM_FAKE_STATE_H
#define XLURM_FAKE_STATE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define FAKE_MAX_DEVICES 16
#define FAKE_MAX_PROCS 64
#define FAKE_MAX_FAILS 8
#define FAKE_UNUSED __attribute__((unused))

struct fake_fail {
    char what[16];
    int code;
};

struct fake_device {
    char uuid[96];
    unsigned domain, bus, dev, fn;
    char bdf[32];
    int minor;
    int numa;
    int health;
    char reason[64];
    char node[64];
    int card, chip;
    unsigned procs[FAKE_MAX_PROCS];
    int nprocs;
    unsigned gprocs[FAKE_MAX_PROCS];
    int ngprocs;
    unsigned util;
    unsigned long long mem_used, mem_total;
    struct fake_fail fails[FAKE_MAX_FAILS];
    int nfails;
};

struct fake_state {
    int ok; /* 1 when the file was read */
    int init_code;
    int count_code;
    int sleep_ms;
    int tool_sleep_ms;
    int ndev;
    struct fake_device dev[FAKE_MAX_DEVICES];
};

static struct fake_state fake;

static const char *fake_state_path(void)
{
#ifdef FAKE_STATE_PATH
    return FAKE_STATE_PATH;
#else
    return getenv("XLURM_FAKE_GPU_STATE");
#endif
}

static int fake_parse_pids(const char *v, unsigned *out)
{
    int n = 0;
    while (*v && n < FAKE_MAX_PROCS) {
        char *end;
        unsigned long p = strtoul(v, &end, 10);
        if (end == v)
            break;
        out[n++] = (unsigned)p;
        v = end;
        if (*v == ',')
            v++;
    }
    return n;
}

static void fake_parse_fails(const char *v, struct fake_device *d)
{
    while (*v && d->nfails < FAKE_MAX_FAILS) {
        const char *colon = strchr(v, ':');
        if (!colon)
            return;
        struct fake_fail *f = &d->fails[d->nfails++];
        size_t len = (size_t)(colon - v);
        if (len >= sizeof f->what)
            len = sizeof f->what - 1;
        memcpy(f->what, v, len);
        f->what[len] = 0;
        char *end;
        f->code = (int)strtol(colon + 1, &end, 10);
        v = end;
        if (*v == ',')
            v++;
    }
}

static void fake_set_bdf(struct fake_device *d, const char *v)
{
    if (sscanf(v, "%x:%x:%x.%x", &d->domain, &d->bus, &d->dev, &d->fn) != 4) {
        d->domain = 0xffff;
        d->bus = d->dev = d->fn = 0;
    }
    snprintf(d->bdf, sizeof d->bdf, "%04x:%02x:%02x.%x", d->domain, d->bus, d->dev, d->fn);
}

static void fake_parse_device(char *rest, struct fake_device *d, int index)
{
    char bdf[32];
    memset(d, 0, sizeof *d);
    snprintf(d->uuid, sizeof d->uuid, "GPU-FAKE-%d", index);
    snprintf(bdf, sizeof bdf, "0000:%02x:00.0", index + 1);
    fake_set_bdf(d, bdf);
    d->minor = index;
    d->numa = -1;
    d->card = index;
    snprintf(d->node, sizeof d->node, "/dev/mtgpu.%d", index);
    d->mem_total = 16ULL << 30;
    /* strtok_r, not strtok: strtok's position is one global of the C library, and
     * tests running in parallel threads parse their own libraries' states at once. */
    char *save = NULL;
    for (char *tok = strtok_r(rest, " \t\r\n", &save); tok;
         tok = strtok_r(NULL, " \t\r\n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq)
            continue;
        *eq = 0;
        const char *k = tok, *v = eq + 1;
        if (!strcmp(k, "uuid"))
            snprintf(d->uuid, sizeof d->uuid, "%s", v);
        else if (!strcmp(k, "bdf"))
            fake_set_bdf(d, v);
        else if (!strcmp(k, "minor"))
            d->minor = atoi(v);
        else if (!strcmp(k, "numa"))
            d->numa = atoi(v);
        else if (!strcmp(k, "health"))
            d->health = atoi(v);
        else if (!strcmp(k, "reason"))
            snprintf(d->reason, sizeof d->reason, "%s", v);
        else if (!strcmp(k, "node"))
            snprintf(d->node, sizeof d->node, "%s", v);
        else if (!strcmp(k, "card"))
            d->card = atoi(v);
        else if (!strcmp(k, "chip"))
            d->chip = atoi(v);
        else if (!strcmp(k, "procs"))
            d->nprocs = fake_parse_pids(v, d->procs);
        else if (!strcmp(k, "gprocs"))
            d->ngprocs = fake_parse_pids(v, d->gprocs);
        else if (!strcmp(k, "util"))
            d->util = (unsigned)strtoul(v, NULL, 10);
        else if (!strcmp(k, "mem_used"))
            d->mem_used = strtoull(v, NULL, 10);
        else if (!strcmp(k, "mem_total"))
            d->mem_total = strtoull(v, NULL, 10);
        else if (!strcmp(k, "fail"))
            fake_parse_fails(v, d);
    }
}

/* Re-reads the state file. Returns 0, or 999 when it cannot be read. */
FAKE_UNUSED static int fake_load(void)
{
    const char *path = fake_state_path();
    memset(&fake, 0, sizeof fake);
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return 999;
    char line[1024];
    while (fgets(line, sizeof line, f)) {
        char *hash = strchr(line, '#');
        if (hash)
            *hash = 0;
        char word[32];
        int used = 0;
        if (sscanf(line, "%31s%n", word, &used) != 1)
            continue;
        char *rest = line + used;
        if (!strcmp(word, "init"))
            fake.init_code = atoi(rest);
        else if (!strcmp(word, "count"))
            fake.count_code = atoi(rest);
        else if (!strcmp(word, "sleep_ms"))
            fake.sleep_ms = atoi(rest);
        else if (!strcmp(word, "tool_sleep_ms"))
            fake.tool_sleep_ms = atoi(rest);
        else if (!strcmp(word, "device") && fake.ndev < FAKE_MAX_DEVICES) {
            fake_parse_device(rest, &fake.dev[fake.ndev], fake.ndev);
            fake.ndev++;
        }
    }
    fclose(f);
    fake.ok = 1;
    return 0;
}

/* The code a device's query WHAT should fail with, or 0. */
FAKE_UNUSED static int fake_fail(const struct fake_device *d, const char *what)
{
    for (int i = 0; i < d->nfails; i++)
        if (!strcmp(d->fails[i].what, what))
            return d->fails[i].code;
    return 0;
}

FAKE_UNUSED static struct fake_device *fake_device(long index)
{
    if (index < 0 || index >= fake.ndev)
        return NULL;
    return &fake.dev[index];
}

FAKE_UNUSED static void fake_sleep(void)
{
    if (fake.sleep_ms > 0) {
        struct timespec ts = {fake.sleep_ms / 1000, (long)(fake.sleep_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
}

/* Parses an UUID of up to five '-'-separated hex words (the Ascend die id). */
FAKE_UNUSED static void fake_die_words(const char *uuid, unsigned out[5])
{
    memset(out, 0, 5 * sizeof out[0]);
    for (int i = 0; i < 5 && *uuid; i++) {
        char *end;
        out[i] = (unsigned)strtoul(uuid, &end, 16);
        if (end == uuid)
            break;
        uuid = end;
        if (*uuid == '-')
            uuid++;
    }
}

#endif
