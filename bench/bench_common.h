/* bench_common.h - what every bench driver shares: the run id whose
 * shared-memory segments are unlinked on exit, on failure and on SIGINT or
 * SIGTERM (so a benchmark never leaves anything in /dev/shm), a fail-fast
 * exit, and a monotonic nanosecond clock. */
#ifndef SLUICE_BENCH_COMMON_H
#define SLUICE_BENCH_COMMON_H

#include <stdint.h>

#include "ipc/shm.h"

extern char bench_run[SHM_RUN_ID_MAX]; /* empty in forked children: the parent cleans up */

/* Creates bench_run and installs the cleanup on SIGINT/SIGTERM; prog names
 * the driver in messages. */
void bench_begin(const char *prog);
/* Unlinks every segment of bench_run (idempotent). */
void bench_cleanup(void);
/* Prints "PROG: what: strerror", cleans up, exits 1. */
_Noreturn void bench_die(const char *what, int rc);

#endif
