/* allreduce.h - sum of float32 arrays across R processes (ranks) through
 * one shared-memory segment: the CPU all-reduce of data-parallel training
 * (DESIGN.md sections 2 and 6; `gnnlaunch --cpu` with pipeline.ranks = R).
 * Every trainer calls allreduce_sum() on its gradients once a step; when
 * the call returns, every rank's buffer holds the same elementwise sum.
 *
 * Determinism. Each element of the result is
 *
 *     ((buf_0[i] + buf_1[i]) + buf_2[i]) + ... + buf_{R-1}[i]
 *
 * in float32 with round-to-nearest, added in rank order 0..R-1 whatever
 * rank computes that element, so the result is bit-identical on every rank
 * and from run to run for the same inputs (and equal to a plain sequential
 * loop over the ranks). It does depend on R. Builds with -ffast-math or
 * excess-precision float evaluation are refused at compile time.
 *
 * Lifetime. The launcher creates the segment (allreduce_create) for R
 * ranks and the largest array any call will pass (max_floats); each rank
 * attaches by name with its rank number (allreduce_attach), which claims
 * that rank: a second process attaching the same rank gets -EBUSY. The
 * launcher's handle has no rank; it serves to close. The segment holds
 * (R + 1) x max_floats floats (R inputs, one result) plus a page or two of
 * control. allreduce_free() unmaps but never unlinks; the launcher removes
 * the segment. Tests and in-process users may lay one out in memory they
 * own instead (allreduce_mem_format + allreduce_init).
 *
 * Calls. Every rank makes the same sequence of allreduce_sum calls with
 * the same n in each call (n may change from call to call). A call whose n
 * differs between ranks, exceeds max_floats on some rank, or passes a NULL
 * buffer with n > 0, fails with -EINVAL on every rank (the collective stays
 * usable). n = 0 is a plain barrier. With R = 1 a call returns at once
 * (the sum of one buffer is that buffer).
 * The protocol (barriers, memory ordering, who owns which region) is at the
 * top of allreduce.c.
 *
 * Timeouts (timeout_ms): ALLREDUCE_FOREVER (-1) waits until every rank has
 * contributed or the collective is closed; > 0 waits at most that long for
 * the other ranks and then returns -ETIMEDOUT; 0 only polls (`spin` times)
 * and never sleeps. A signal handler installed without SA_RESTART makes a
 * sleeping call return -EINTR. After -ETIMEDOUT
 * or -EINTR the call is still in progress: this rank's contribution is in,
 * and the next allreduce_sum on this handle must pass the same buf and n,
 * with buf's contents untouched, which resumes the wait (other arguments
 * get -EINVAL); or the supervisor closes the collective. buf is written
 * only by a call that returns 0.
 *
 * Failure. A rank that dies leaves the others waiting for it (with
 * timeouts, they return -ETIMEDOUT meanwhile); the supervisor notices the
 * death and calls allreduce_close(), after which every waiting and every
 * later call on every rank returns -EPIPE, except that a call every rank
 * had finished contributing to before the close still returns 0. The
 * ranks agree: each call returns 0 on all of them or on none. One struct
 * allreduce is used by one thread at a time; ranks may be threads with a
 * handle each. */
#ifndef SLUICE_IPC_ALLREDUCE_H
#define SLUICE_IPC_ALLREDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/shm.h"

#define ALLREDUCE_MAGIC 0x3152444c41434c53ull /* "SLCALDR1" little endian */
#define ALLREDUCE_VERSION 1u
#define ALLREDUCE_RANKS_MAX 1024u
#define ALLREDUCE_FLOATS_MAX (UINT64_C(1) << 36) /* 256 GiB per region: a sanity bound */
#define ALLREDUCE_FOREVER (-1)
#define ALLREDUCE_NO_RANK (-1)     /* allreduce_init: a handle that only closes */
#define ALLREDUCE_SPIN_DEFAULT 64u /* barrier polls before sleeping (see spin): ~1.6 us at 25 ns a pause */

struct allreduce_shared; /* control block in shared memory; private to allreduce.c */
struct allreduce_rank;   /* per-rank line in shared memory; private to allreduce.c */

/* A call cut short by -ETIMEDOUT or -EINTR, resumed by the next call. */
struct allreduce_pending {
    int phase;        /* 0: none; 1 or 2: waiting at the first or second barrier */
    uint64_t target;  /* the barrier's completion count */
    const float *buf; /* the call's arguments, which a resuming call must repeat */
    size_t n;
    int rc; /* what the call returns once its second barrier passes */
};

/* One process's (or thread's) handle. Fields are read-only for callers,
 * except spin. */
struct allreduce {
    struct allreduce_shared *sh;
    struct allreduce_rank *meta; /* (ranks) one line per rank */
    float *in;                   /* (ranks, stride) each rank's input region */
    float *out;                  /* (max_floats) the result region */
    size_t stride;               /* floats from one input region to the next */
    size_t max_floats;
    uint32_t ranks;
    int32_t rank; /* 0..ranks-1, or ALLREDUCE_NO_RANK */
    /* Polls of a barrier before sleeping on its futex: ALLREDUCE_SPIN_DEFAULT
     * when the machine has at least `ranks` online CPUs, else 0 (a spinning
     * rank would only delay the ranks it waits for). Kept short because
     * trainers share the CPUs with the other stages: a rank that spins
     * while the rank it waits for needs that CPU wastes the whole spin
     * (bench/results/allreduce-2026-11-22.md). A caller may change it. */
    uint32_t spin;
    struct allreduce_pending pend;
    struct shm_seg seg; /* the mapping, when created or attached by name */
};

/* Bytes of memory an all-reduce of `ranks` ranks and max_floats floats per
 * call needs; 0 if the parameters are invalid (ranks outside
 * 1..ALLREDUCE_RANKS_MAX, max_floats outside 1..ALLREDUCE_FLOATS_MAX). */
size_t allreduce_mem_size(uint32_t ranks, size_t max_floats);

/* Lays out a new, open all-reduce in len bytes of page-aligned memory not
 * yet in use. 0, or -EINVAL with a message. */
int allreduce_mem_format(void *mem, size_t len, uint32_t ranks, size_t max_floats, char *err, size_t errlen);

/* Binds a handle to an all-reduce formatted in mem (by any process) as
 * `rank` (0..ranks-1, claimed as by attach) or ALLREDUCE_NO_RANK. 0,
 * -EINVAL (damaged layout, rank out of range), -EBUSY (rank taken).
 * allreduce_free() is still to be called but unmaps nothing. */
int allreduce_init(struct allreduce *a, void *mem, size_t len, int32_t rank, char *err, size_t errlen);

/* Creates the segment /sluice.<run_id>.<object> (kind SHM_KIND_ALLREDUCE)
 * holding an all-reduce for `ranks` ranks of up to max_floats floats and
 * binds a to it without a rank. Errors as shm_seg_create and
 * allreduce_mem_format; on failure nothing is left in /dev/shm. */
int allreduce_create(struct allreduce *a, const char *run_id, const char *object, uint32_t ranks, size_t max_floats,
                     char *err, size_t errlen);

/* Attaches to an all-reduce segment by full name as `rank`. Errors as
 * shm_seg_attach and allreduce_init. */
int allreduce_attach(struct allreduce *a, const char *name, uint32_t rank, char *err, size_t errlen);

/* Releases the handle: gives its rank up - unless a call is pending (one
 * left by -ETIMEDOUT has arrived at a barrier, and a new owner's arrival
 * would be counted twice: the rank stays taken, as a dead one's, until
 * the collective is closed) - and unmaps a segment it created or attached
 * (never unlinks). Accepts NULL and zeroed or half-built handles. */
void allreduce_free(struct allreduce *a);

/* Replaces buf[0..n) with the sum over all ranks (see Determinism),
 * blocking until every rank has contributed and the sum is back in buf.
 * 0; -EINVAL (n or buf invalid on some rank, or a handle without a rank,
 * or a resumed call with other arguments); -EPIPE (closed: buf unchanged);
 * -ETIMEDOUT, -EINTR (still in progress, see Timeouts). */
int allreduce_sum(struct allreduce *a, float *buf, size_t n, int timeout_ms);

/* Aborts the collective for good: every rank waiting in allreduce_sum
 * returns -EPIPE promptly, and so does every later call (a call to which
 * every rank had already contributed its chunk's sum still completes, on
 * every rank). Idempotent; never blocks; safe from a supervisor's handle
 * without a rank; accepts NULL and unbound handles. */
void allreduce_close(struct allreduce *a);

bool allreduce_is_closed(const struct allreduce *a);

#endif
