/* futex.h - the two futex calls the ipc/ objects sleep and wake with, and
 * the deadline arithmetic their timeouts share.
 *
 * Every futex word here lives in shared memory and is waited on and woken
 * from different processes, so the calls use the shared (not
 * FUTEX_PRIVATE_FLAG) futex operations. How a caller avoids lost wake-ups
 * (announce, re-check, then wait on the value read before the re-check) is
 * each object's own protocol; see ring.c and allreduce.c. */
#ifndef SLUICE_IPC_FUTEX_H
#define SLUICE_IPC_FUTEX_H

#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

/* Sleeps while *word == val, until woken or the absolute CLOCK_MONOTONIC
 * deadline passes (NULL: no deadline). 0 (woken, or the word no longer held
 * val), -ETIMEDOUT, -EINTR (a signal handler ran). May return 0 spuriously:
 * callers re-check their condition. */
int futex_wait_until(_Atomic uint32_t *word, uint32_t val, const struct timespec *deadline);

/* Wakes up to n sleepers on word (INT_MAX: all). Never blocks. */
void futex_wake(_Atomic uint32_t *word, int n);

/* *out = now (CLOCK_MONOTONIC) + ms milliseconds; ms >= 0. */
void futex_deadline(struct timespec *out, int ms);

#endif
