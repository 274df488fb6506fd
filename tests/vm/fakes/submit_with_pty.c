/* submit_with_pty: an attacker's tool for VM scenario 14. Submits `/bin/true` to xlurmd on
 * the system bus, as the calling user, with descriptor FD (already open, e.g. someone
 * else's terminal handed down by the test) as the job's terminal (spec key pty_fd, type h):
 * what `xrun --pty` does with a pty of its own. busctl cannot pass a descriptor.
 *
 *   submit_with_pty FD     prints "submitted ID" (exit 0) or "error NAME: MESSAGE" (exit 1)
 *
 * libsystemd's sd-bus, loaded with dlopen (the host has no headers, the guest the
 * library): the few calls are declared here. */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct sd_bus sd_bus;
typedef struct sd_bus_message sd_bus_message;
typedef struct {
    const char *name;
    const char *message;
    int need_free;
} sd_bus_error;

static void *sym(void *lib, const char *name) {
    void *f = dlsym(lib, name);
    if (!f) {
        fprintf(stderr, "submit_with_pty: %s: %s\n", name, dlerror());
        exit(2);
    }
    return f;
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: submit_with_pty FD\n");
        return 2;
    }
    int fd = atoi(argv[1]);
    void *lib = dlopen("libsystemd.so.0", RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "submit_with_pty: %s\n", dlerror());
        return 2;
    }
    int (*open_system)(sd_bus **) = sym(lib, "sd_bus_open_system");
    int (*new_call)(sd_bus *, sd_bus_message **, const char *, const char *, const char *,
                    const char *) = sym(lib, "sd_bus_message_new_method_call");
    int (*open_c)(sd_bus_message *, char, const char *) = sym(lib, "sd_bus_message_open_container");
    int (*close_c)(sd_bus_message *) = sym(lib, "sd_bus_message_close_container");
    int (*append)(sd_bus_message *, const char *, ...) = sym(lib, "sd_bus_message_append");
    int (*call)(sd_bus *, sd_bus_message *, uint64_t, sd_bus_error *, sd_bus_message **) =
        sym(lib, "sd_bus_call");
    int (*read)(sd_bus_message *, const char *, ...) = sym(lib, "sd_bus_message_read");

    sd_bus *bus = NULL;
    sd_bus_message *m = NULL, *reply = NULL;
    sd_bus_error error = {0};
    int r = open_system(&bus);
    if (r < 0) {
        fprintf(stderr, "submit_with_pty: cannot connect to the system bus (%d)\n", r);
        return 2;
    }
    r = new_call(bus, &m, "org.xlurm.Scheduler1", "/org/xlurm/Scheduler1",
                 "org.xlurm.Scheduler1", "Submit");
    if (r >= 0) r = open_c(m, 'a', "{sv}");
    if (r >= 0) r = append(m, "{sv}", "argv", "as", 1, "/bin/true");
    if (r >= 0) r = append(m, "{sv}", "cwd", "s", "/");
    if (r >= 0) r = append(m, "{sv}", "pty_fd", "h", fd);
    if (r >= 0) r = close_c(m);
    if (r < 0) {
        fprintf(stderr, "submit_with_pty: building the call failed (%d)\n", r);
        return 2;
    }
    r = call(bus, m, 0, &error, &reply);
    if (r < 0) {
        printf("error %s: %s\n", error.name ? error.name : "?", error.message ? error.message : "?");
        return 1;
    }
    uint64_t id = 0;
    read(reply, "t", &id);
    printf("submitted %llu\n", (unsigned long long)id);
    return 0;
}
