/* bench_common.c - see bench_common.h. */
#include "bench_common.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

char bench_run[SHM_RUN_ID_MAX];
static const char *bench_prog = "bench";

void bench_cleanup(void)
{
    if (bench_run[0])
        shm_run_unlink(bench_run);
}

static void on_signal(int sig)
{
    bench_cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}

void bench_begin(const char *prog)
{
    bench_prog = prog;
    shm_run_id_new(bench_run, sizeof bench_run);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
}

_Noreturn void bench_die(const char *what, int rc)
{
    fprintf(stderr, "%s: %s: %s\n", bench_prog, what, strerror(rc < 0 ? -rc : rc));
    bench_cleanup();
    exit(1);
}
