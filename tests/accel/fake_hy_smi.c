/*
 * Simulated `hy-smi --healthcheck` for Hygon HCUs; see fake_state.h for the state file.
 * Prints one line per device, "HCU[<index>] : Health Status : Healthy" (or "Unhealthy"
 * for health=N, N != 0), and exits 0. "init <code>" makes it print an error and exit 1,
 * "tool_sleep_ms" makes it sleep first (to test the tool's timeout).
 */
#include "fake_state.h"

int main(int argc, char **argv)
{
    if (argc != 2 || strcmp(argv[1], "--healthcheck") != 0) {
        fprintf(stderr, "fake hy-smi: only --healthcheck is simulated\n");
        return 2;
    }
    if (fake_load() != 0) {
        fprintf(stderr, "fake hy-smi: cannot read the state file\n");
        return 1;
    }
    fake.sleep_ms = fake.tool_sleep_ms;
    fake_sleep();
    if (fake.init_code) {
        fprintf(stderr, "librocm_smi64.so.2: cannot open shared object file (code %d)\n",
                fake.init_code);
        return 1;
    }
    printf("============================ System Management Interface ============================\n");
    for (int i = 0; i < fake.ndev; i++)
        printf("HCU[%d]\t\t: Health Status : %s\n", i, fake.dev[i].health ? "Unhealthy" : "Healthy");
    printf("=====================================================================================\n");
    return 0;
}
