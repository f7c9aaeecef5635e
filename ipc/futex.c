/* futex.c - shared futex wait/wake and deadlines (futex.h). */
#include "ipc/futex.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

int futex_wait_until(_Atomic uint32_t *word, uint32_t val, const struct timespec *deadline)
{
    /* FUTEX_WAIT_BITSET takes an absolute deadline on CLOCK_MONOTONIC, so a
     * caller that loops after spurious wake-ups never stretches its timeout. */
    long rc = syscall(SYS_futex, (uint32_t *)word, FUTEX_WAIT_BITSET, val, deadline, NULL, FUTEX_BITSET_MATCH_ANY);
    if (rc == 0 || errno == EAGAIN)
        return 0;
    return -errno; /* ETIMEDOUT, EINTR; anything else is a bug worth surfacing */
}

void futex_wake(_Atomic uint32_t *word, int n)
{
    syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, n, NULL, NULL, 0);
}

void futex_deadline(struct timespec *out, int ms)
{
    clock_gettime(CLOCK_MONOTONIC, out);
    out->tv_sec += ms / 1000;
    out->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (out->tv_nsec >= 1000000000L) {
        out->tv_sec++;
        out->tv_nsec -= 1000000000L;
    }
}
