/* allreduce.c - CPU all-reduce (float32 sum) across processes through one
 * shared-memory segment (API and guarantees in allreduce.h).
 *
 * Protocol
 * --------
 * Memory (one segment, or memory its formatter owns, page aligned):
 *
 *     control block  struct allreduce_shared: a read-only line written
 *                    once by allreduce_mem_format, then one line each for
 *                    the barrier's arrival counter (bit 63: closed), the
 *                    futex word and the sleeper count
 *     rank lines     R x struct allreduce_rank { n of the current call,
 *                    owner pid }, one line each
 *     input regions  R x `stride` floats (page aligned); region r is
 *                    written only by rank r
 *     result region  max_floats floats
 *
 * One call, on rank r, R > 1 (n floats; chunk c = n/R rounded up to 16
 * floats, so rank r owns elements [r*c, min(n, (r+1)*c)) of the result):
 *   1. copy buf into input region r, except chunk r, which only rank r
 *      reads and reads straight from buf; store n (or BAD if this rank's
 *      call is invalid) into rank line r;
 *   2. barrier A;
 *   3. read every rank's n: if any differs from ours (or is BAD), the call
 *      fails with -EINVAL on every rank, since all read the same values;
 *      otherwise sum chunk r of the R contributions (input regions, and
 *      buf for its own) in rank order 0..R-1 into chunk r of the result
 *      region;
 *   4. barrier B;
 *   5. copy the result region's first n floats into buf.
 * buf is only read until step 5 and only written in step 5, so a call
 * that fails leaves it as it was. Per rank and call this moves about
 * n(1 - 1/R) floats in, n to sum, n/R out to the result and n back.
 * Ownership in time: input region r (but for chunk r, unused) and n_r
 * belong to rank r from the end of barrier B of the previous call to
 * barrier A, then are read by all until barrier B. Result chunk r is written by rank r between A and B and
 * read by all from B until the next call's A: a fast rank cannot write it
 * again before every rank has finished copying it out, because the next
 * call's A needs every rank to arrive, which each does only after its copy.
 * So two barriers per call suffice, and every call - including one failing
 * with -EINVAL - passes exactly two, so barriers never fall out of step.
 *
 * Barrier. `arrivals` counts arrivals in bits 0..62, which only grow
 * (2^63 arrivals never wrap in practice); bit 63 (CLOSED) is set by
 * close. A rank arrives with a CAS count -> count + 1 (seq_cst, so a
 * release of everything it wrote before) that fails with -EPIPE once
 * CLOSED is set; its ticket t is the count it replaced, and its barrier is
 * complete when the count reaches target = (t / R + 1) * R, i.e. the
 * barrier's generation t / R has all R arrivals. No rank can arrive at
 * generation g + 1 before generation g is complete, so tickets of two
 * barriers never mix, and a fast rank racing into the next barrier only
 * pushes the count past an older target, which its waiters read as
 * "complete". Nothing is ever reset. A waiter that loads a count >= target
 * (acquire) synchronises with every arrival before it (the CASes form a
 * release sequence), so it sees each rank's input region and n, or each
 * rank's result chunk, completely written.
 *
 * Waiting. A waiter polls arrivals `spin` times with a CPU pause, then
 * sleeps: it increments `sleepers` (seq_cst), and in a loop reads
 * `wake_word`, re-checks arrivals, and calls FUTEX_WAIT(wake_word, value
 * read) (shared futex, across processes). The rank whose arrival completes
 * a barrier loads `sleepers` (seq_cst) after its CAS and, if non-zero,
 * bumps wake_word and wakes everyone. In the seq_cst order either the
 * waiter's re-check sees the completing arrival, or the waker sees the
 * sleeper and bumps the word after the waiter read it (so FUTEX_WAIT
 * returns at once or is woken): no lost wake-up. Without sleepers the
 * barrier makes no system call.
 *
 * Close. allreduce_close sets CLOSED with a fetch_or (seq_cst), bumps
 * wake_word and wakes every sleeper unconditionally. Since no arrival
 * succeeds after it, the count is frozen: a barrier completed before the
 * close (count >= target) is seen complete by every waiter, which returns
 * normally; one that did not complete never will, and every waiter and
 * every later arrival returns -EPIPE. So the surviving ranks agree on
 * which calls succeeded: a call returns 0 on every surviving rank or on
 * none. A call that fails leaves buf untouched.
 *
 * Who writes what: the formatter writes the read-only line, the counters
 * (zero) and the magic (release) last; rank r writes its rank line, input
 * region r, result chunk r (per call), arrivals, and sleepers / wake_word
 * when it sleeps or wakes; attach and free write a rank line's owner;
 * close writes arrivals' CLOSED bit and wake_word. The segment belongs to
 * its creator.
 *
 * Dead ranks. A rank that dies stops every barrier after its last arrival:
 * the others wait (or time out) until the supervisor calls close. A rank
 * killed while asleep leaves `sleepers` raised: later barriers then make a
 * useless FUTEX_WAKE each (slower, still correct). Its rank stays claimed:
 * the run is torn down, not repaired.
 *
 * Summing. Each rank adds its chunk in blocks of AR_BLOCK floats: the block
 * of the result is set to c_0 + c_1 (c_k: rank k's contribution) and then
 * has c_2, ..., c_{R-1} added in turn while it stays in L1, in loops over
 * restrict pointers that the compiler vectorises; every element still sees
 * the additions in rank order, so the block size does not change the
 * result. */
#include "ipc/allreduce.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "ipc/futex.h"

#if defined(__FAST_MATH__)
#error "allreduce.c must not be built with -ffast-math: its sums must be bit-reproducible"
#endif
#if FLT_EVAL_METHOD != 0
#error "allreduce.c needs float arithmetic evaluated in float (FLT_EVAL_METHOD 0) for bit-reproducible sums"
#endif

#define AR_LINE 128u        /* two cache lines: adjacent-line prefetch */
#define AR_PAGE 4096u       /* input and result regions start on pages */
#define AR_CHUNK_ALIGN 16u  /* floats: one 64-byte line, so no two ranks write a line */
#define AR_BLOCK 2048u      /* floats summed per block (8 KiB, stays in L1) */
#define AR_BAD_N UINT64_MAX /* a rank's n when its own call is invalid */
#define AR_CLOSED (UINT64_C(1) << 63)

struct allreduce_shared {
    /* written once by allreduce_mem_format; read-only afterwards */
    _Atomic uint64_t magic; /* ALLREDUCE_MAGIC, stored last (release) */
    uint32_t version;
    uint32_t ranks;
    uint64_t max_floats;
    uint64_t stride;      /* floats between input regions */
    uint64_t meta_offset; /* bytes from the control block to the rank lines */
    uint64_t in_offset;   /* ... to input region 0 */
    uint64_t out_offset;  /* ... to the result region */
    uint64_t mem_size;    /* bytes of the whole layout */

    alignas(AR_LINE) _Atomic uint64_t arrivals;  /* barrier tickets handed out; bit 63 = closed */
    alignas(AR_LINE) _Atomic uint32_t wake_word; /* futex: sleeping waiters */
    alignas(AR_LINE) _Atomic uint32_t sleepers;
};

struct allreduce_rank {
    alignas(AR_LINE) _Atomic uint64_t n; /* this call's n, or AR_BAD_N */
    _Atomic int32_t owner;               /* pid that holds the rank; 0 = free */
};

_Static_assert(sizeof(struct allreduce_shared) % AR_LINE == 0, "control block is whole lines");
_Static_assert(sizeof(struct allreduce_rank) == AR_LINE, "one line per rank");
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2 && ATOMIC_INT_LOCK_FREE == 2, "atomics must be lock-free");
_Static_assert(AR_BLOCK % AR_CHUNK_ALIGN == 0, "blocks are whole chunk units");

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#endif
}

/* ---- layout ------------------------------------------------------------------------ */

struct layout {
    uint64_t meta_offset, in_offset, out_offset, stride, mem_size;
};

static int check_params(uint32_t ranks, size_t max_floats, char *err, size_t errlen)
{
    if (ranks < 1 || ranks > ALLREDUCE_RANKS_MAX)
        return sl_errf(err, errlen, -EINVAL, "all-reduce: %" PRIu32 " ranks is outside 1..%u", ranks,
                       ALLREDUCE_RANKS_MAX);
    if (max_floats < 1 || (uint64_t)max_floats > ALLREDUCE_FLOATS_MAX)
        return sl_errf(err, errlen, -EINVAL,
                       "all-reduce: %zu floats per call is outside 1..%" PRIu64 "; size it from the model's "
                       "parameter count",
                       max_floats, (uint64_t)ALLREDUCE_FLOATS_MAX);
    return 0;
}

/* Computes the layout; false if it overflows. Parameters already checked. */
static bool layout_of(uint32_t ranks, size_t max_floats, struct layout *l)
{
    uint64_t region = sl_round_up((uint64_t)max_floats * sizeof(float), AR_PAGE); /* <= 2^38 */
    l->meta_offset = sizeof(struct allreduce_shared);
    l->in_offset = sl_round_up(l->meta_offset + (uint64_t)ranks * sizeof(struct allreduce_rank), AR_PAGE);
    l->stride = region / sizeof(float);
    uint64_t inputs, end;
    if (sl_mul_ovf(region, ranks, &inputs) || sl_add_ovf(l->in_offset, inputs, &l->out_offset) ||
        sl_add_ovf(l->out_offset, region, &end) || end > SIZE_MAX)
        return false;
    l->mem_size = end;
    return true;
}

size_t allreduce_mem_size(uint32_t ranks, size_t max_floats)
{
    struct layout l;
    if (check_params(ranks, max_floats, NULL, 0) != 0 || !layout_of(ranks, max_floats, &l))
        return 0;
    return (size_t)l.mem_size;
}

int allreduce_mem_format(void *mem, size_t len, uint32_t ranks, size_t max_floats, char *err, size_t errlen)
{
    int rc = check_params(ranks, max_floats, err, errlen);
    if (rc)
        return rc;
    struct layout l;
    if (!layout_of(ranks, max_floats, &l))
        return sl_errf(err, errlen, -EINVAL, "all-reduce: %" PRIu32 " ranks x %zu floats does not fit in memory", ranks,
                       max_floats);
    if (!mem || ((uintptr_t)mem % AR_PAGE) != 0)
        return sl_errf(err, errlen, -EINVAL, "all-reduce: memory at %p is not page aligned", mem);
    if (len < l.mem_size)
        return sl_errf(err, errlen, -EINVAL,
                       "all-reduce: %zu bytes given, %" PRIu64 " needed for %" PRIu32 " ranks x %zu floats", len,
                       l.mem_size, ranks, max_floats);
    struct allreduce_shared *sh = mem;
    memset(sh, 0, l.in_offset); /* control block and rank lines; regions need no init */
    sh->version = ALLREDUCE_VERSION;
    sh->ranks = ranks;
    sh->max_floats = max_floats;
    sh->stride = l.stride;
    sh->meta_offset = l.meta_offset;
    sh->in_offset = l.in_offset;
    sh->out_offset = l.out_offset;
    sh->mem_size = l.mem_size;
    atomic_init(&sh->arrivals, 0);
    atomic_init(&sh->wake_word, 0);
    atomic_init(&sh->sleepers, 0);
    struct allreduce_rank *meta = (struct allreduce_rank *)((unsigned char *)mem + l.meta_offset);
    for (uint32_t r = 0; r < ranks; r++) {
        atomic_init(&meta[r].n, 0);
        atomic_init(&meta[r].owner, 0);
    }
    atomic_store_explicit(&sh->magic, ALLREDUCE_MAGIC, memory_order_release);
    return 0;
}

static uint32_t default_spin(uint32_t ranks)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return cpus > 0 && (long)ranks <= cpus ? ALLREDUCE_SPIN_DEFAULT : 0;
}

/* Binds a (all but a->seg) to a formatted all-reduce after checking it,
 * and claims the rank. */
static int bind(struct allreduce *a, void *mem, size_t len, int32_t rank, const char *what, char *err, size_t errlen)
{
    if (!mem || ((uintptr_t)mem % AR_PAGE) != 0 || len < sizeof(struct allreduce_shared))
        return sl_errf(err, errlen, -EINVAL, "%s: %zu bytes at %p cannot hold an all-reduce (need %zu, page aligned)",
                       what, len, mem, sizeof(struct allreduce_shared));
    struct allreduce_shared *sh = mem;
    uint64_t magic = atomic_load_explicit(&sh->magic, memory_order_acquire);
    if (magic != ALLREDUCE_MAGIC)
        return sl_errf(err, errlen, -EINVAL,
                       "%s does not hold a formatted all-reduce (magic %#" PRIx64 "); it was damaged or is "
                       "another object, restart the run",
                       what, magic);
    if (sh->version != ALLREDUCE_VERSION)
        return sl_errf(err, errlen, -EINVAL,
                       "%s holds an all-reduce of format version %" PRIu32 ", this build reads %u; run the "
                       "trainers from the same build as the launcher",
                       what, sh->version, ALLREDUCE_VERSION);
    char why[200];
    struct layout l;
    if (sh->max_floats > SIZE_MAX || check_params(sh->ranks, (size_t)sh->max_floats, why, sizeof why) != 0)
        return sl_errf(err, errlen, -EINVAL, "%s: damaged all-reduce header (%s); restart the run", what, why);
    if (!layout_of(sh->ranks, (size_t)sh->max_floats, &l) || sh->meta_offset != l.meta_offset ||
        sh->in_offset != l.in_offset || sh->out_offset != l.out_offset || sh->stride != l.stride ||
        sh->mem_size != l.mem_size || sh->mem_size > len)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: all-reduce header says %" PRIu64 " bytes for %" PRIu32 " ranks x %" PRIu64
                       " floats but %zu are mapped, or its offsets are wrong; it was damaged, restart the run",
                       what, sh->mem_size, sh->ranks, sh->max_floats, len);
    if (rank != ALLREDUCE_NO_RANK && (rank < 0 || (uint32_t)rank >= sh->ranks))
        return sl_errf(err, errlen, -EINVAL, "%s: rank %" PRId32 " is outside 0..%" PRIu32 "; check pipeline.ranks",
                       what, rank, sh->ranks - 1);
    unsigned char *base = mem;
    struct allreduce_rank *meta = (struct allreduce_rank *)(base + sh->meta_offset);
    if (rank != ALLREDUCE_NO_RANK) {
        int32_t expect = 0, me = (int32_t)getpid();
        if (!atomic_compare_exchange_strong_explicit(&meta[rank].owner, &expect, me, memory_order_acq_rel,
                                                     memory_order_acquire))
            return sl_errf(err, errlen, -EBUSY,
                           "%s: rank %" PRId32 " is already attached by pid %" PRId32 "; each trainer needs its "
                           "own rank",
                           what, rank, expect);
    }
    a->sh = sh;
    a->meta = meta;
    a->in = (float *)(base + sh->in_offset);
    a->out = (float *)(base + sh->out_offset);
    a->stride = (size_t)sh->stride;
    a->max_floats = (size_t)sh->max_floats;
    a->ranks = sh->ranks;
    a->rank = rank;
    a->spin = default_spin(sh->ranks);
    return 0;
}

int allreduce_init(struct allreduce *a, void *mem, size_t len, int32_t rank, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    return bind(a, mem, len, rank, "all-reduce memory", err, errlen);
}

int allreduce_create(struct allreduce *a, const char *run_id, const char *object, uint32_t ranks, size_t max_floats,
                     char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    int rc = check_params(ranks, max_floats, err, errlen);
    if (rc)
        return rc;
    size_t need = allreduce_mem_size(ranks, max_floats);
    if (need == 0)
        return sl_errf(err, errlen, -EINVAL, "all-reduce: %" PRIu32 " ranks x %zu floats does not fit in memory", ranks,
                       max_floats);
    rc = shm_seg_create(&a->seg, run_id, object, SHM_KIND_ALLREDUCE, need, err, errlen);
    if (rc)
        return rc;
    rc = allreduce_mem_format(a->seg.data, a->seg.data_size, ranks, max_floats, err, errlen);
    if (rc == 0)
        rc = bind(a, a->seg.data, a->seg.data_size, ALLREDUCE_NO_RANK, a->seg.name, err, errlen);
    if (rc) {
        char name[SHM_NAME_MAX];
        memcpy(name, a->seg.name, sizeof name);
        allreduce_free(a);
        shm_seg_unlink(name);
    }
    return rc;
}

int allreduce_attach(struct allreduce *a, const char *name, uint32_t rank, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    if (rank >= ALLREDUCE_RANKS_MAX)
        return sl_errf(err, errlen, -EINVAL, "%s: rank %" PRIu32 " is outside 0..%u", name ? name : "(null)", rank,
                       ALLREDUCE_RANKS_MAX - 1);
    int rc = shm_seg_attach(&a->seg, name, SHM_KIND_ALLREDUCE, 0, err, errlen);
    if (rc == 0)
        rc = bind(a, a->seg.data, a->seg.data_size, (int32_t)rank, a->seg.name, err, errlen);
    if (rc)
        allreduce_free(a);
    return rc;
}

void allreduce_free(struct allreduce *a)
{
    if (!a)
        return;
    /* the rank is given up only between calls: one that has arrived at a
     * barrier (a call left by -ETIMEDOUT) stays counted, and a rank that
     * took it over would be counted twice, so it stays owned (the
     * collective is to be closed, as after a death) */
    if (a->meta && a->rank >= 0 && !a->pend.phase) {
        int32_t me = (int32_t)getpid();
        atomic_compare_exchange_strong_explicit(&a->meta[a->rank].owner, &me, 0, memory_order_acq_rel,
                                                memory_order_relaxed);
    }
    shm_seg_detach(&a->seg);
    memset(a, 0, sizeof *a);
}

/* ---- barrier ----------------------------------------------------------------------- */

/* Arrives at the current barrier and sets *target to the count at which
 * it completes: 0, or -EPIPE if the collective is closed (then nothing
 * changed). The arrival that completes a barrier wakes the sleepers. */
static int barrier_arrive(struct allreduce_shared *sh, uint32_t ranks, uint64_t *target)
{
    uint64_t t = atomic_load_explicit(&sh->arrivals, memory_order_relaxed);
    do {
        if (t & AR_CLOSED)
            return -EPIPE;
    } while (
        !atomic_compare_exchange_weak_explicit(&sh->arrivals, &t, t + 1, memory_order_seq_cst, memory_order_relaxed));
    *target = (t / ranks + 1) * ranks;
    if (t + 1 == *target && atomic_load_explicit(&sh->sleepers, memory_order_seq_cst) != 0) {
        atomic_fetch_add_explicit(&sh->wake_word, 1, memory_order_seq_cst);
        futex_wake(&sh->wake_word, INT_MAX);
    }
    return 0;
}

/* 0 when the barrier of `target` completed, -EPIPE when it never will
 * (closed before it completed), -EAGAIN when it may yet. */
static inline int barrier_state(uint64_t arrivals, uint64_t target)
{
    if ((arrivals & ~AR_CLOSED) >= target)
        return 0;
    return arrivals & AR_CLOSED ? -EPIPE : -EAGAIN;
}

/* Waits until the count reaches target: 0; -EPIPE (closed first);
 * -ETIMEDOUT when timeout_ms >= 0 ran out (0: after the spin, without
 * sleeping; > 0: the deadline is taken at the first sleep of the call and
 * kept in *deadline / *has_deadline for its second barrier); -EINTR. */
static int barrier_wait(const struct allreduce *a, uint64_t target, int timeout_ms, struct timespec *deadline,
                        bool *has_deadline)
{
    struct allreduce_shared *sh = a->sh;
    int rc;
    for (uint32_t i = 0; i < a->spin; i++) {
        rc = barrier_state(atomic_load_explicit(&sh->arrivals, memory_order_acquire), target);
        if (rc != -EAGAIN)
            return rc;
        cpu_relax();
    }
    if (timeout_ms == 0) { /* never sleeps: one last look */
        rc = barrier_state(atomic_load_explicit(&sh->arrivals, memory_order_acquire), target);
        return rc == -EAGAIN ? -ETIMEDOUT : rc;
    }
    if (timeout_ms > 0 && !*has_deadline) {
        futex_deadline(deadline, timeout_ms);
        *has_deadline = true;
    }
    atomic_fetch_add_explicit(&sh->sleepers, 1, memory_order_seq_cst);
    bool timed_out = false;
    for (;;) {
        uint32_t seen = atomic_load_explicit(&sh->wake_word, memory_order_seq_cst);
        rc = barrier_state(atomic_load_explicit(&sh->arrivals, memory_order_seq_cst), target);
        if (rc != -EAGAIN)
            break;
        if (timed_out) {
            rc = -ETIMEDOUT;
            break;
        }
        rc = futex_wait_until(&sh->wake_word, seen, timeout_ms > 0 ? deadline : NULL);
        if (rc == -ETIMEDOUT)
            timed_out = true; /* one last check before reporting it */
        else if (rc)
            break; /* -EINTR */
    }
    atomic_fetch_sub_explicit(&sh->sleepers, 1, memory_order_seq_cst);
    return rc;
}

/* ---- summing ----------------------------------------------------------------------- */

/* The kernels are inlined with the length as a constant for full blocks
 * and 64-float steps (so that -O2's cheap vectoriser, which wants a known
 * trip count, makes SIMD loops of them) and as a variable for the last few
 * floats. */
static inline void add2(float *restrict o, const float *restrict x, const float *restrict y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        o[i] = x[i] + y[i];
}

static inline void add_into(float *restrict o, const float *restrict x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        o[i] += x[i];
}

/* Rank k's contribution: its input region, or for this rank its own buf. */
static inline const float *contrib(const struct allreduce *a, const float *buf, uint32_t k)
{
    return k == (uint32_t)a->rank ? buf : a->in + (size_t)k * a->stride;
}

static inline void sum_span(const struct allreduce *a, const float *buf, size_t b, size_t len)
{
    float *o = a->out + b;
    add2(o, contrib(a, buf, 0) + b, contrib(a, buf, 1) + b, len);
    for (uint32_t k = 2; k < a->ranks; k++)
        add_into(o, contrib(a, buf, k) + b, len);
}

/* Sums elements [lo, hi) of every rank's contribution, in rank order, into
 * the result region. R >= 2. */
static void sum_chunk(const struct allreduce *a, const float *buf, size_t lo, size_t hi)
{
    size_t b = lo;
    for (; hi - b >= AR_BLOCK; b += AR_BLOCK)
        sum_span(a, buf, b, AR_BLOCK);
    for (; hi - b >= 64; b += 64)
        sum_span(a, buf, b, 64);
    if (b < hi)
        sum_span(a, buf, b, hi - b);
}

/* This rank's chunk of an n-float call: [*lo, *hi). */
static void chunk_of(const struct allreduce *a, size_t n, size_t *lo, size_t *hi)
{
    size_t chunk = (size_t)sl_round_up((n + a->ranks - 1) / a->ranks, AR_CHUNK_ALIGN);
    *lo = SL_MIN(n, (size_t)a->rank * chunk);
    *hi = SL_MIN(n, *lo + chunk);
}

/* ---- the call ---------------------------------------------------------------------- */

/* Ends a wait of phase `phase`: keeps the call pending on -ETIMEDOUT and
 * -EINTR, forgets it otherwise. */
static int wait_phase(struct allreduce *a, int phase, uint64_t target, int timeout_ms, struct timespec *deadline,
                      bool *has_deadline)
{
    int rc = barrier_wait(a, target, timeout_ms, deadline, has_deadline);
    if (rc == -ETIMEDOUT || rc == -EINTR) {
        a->pend.phase = phase;
        a->pend.target = target;
    } else {
        a->pend.phase = 0;
    }
    return rc;
}

int allreduce_sum(struct allreduce *a, float *buf, size_t n, int timeout_ms)
{
    if (!a || !a->sh || a->rank < 0)
        return -EINVAL;
    struct allreduce_shared *sh = a->sh;
    struct timespec deadline;
    bool has_deadline = false;
    uint64_t target;
    int rc;
    bool bad = n > a->max_floats || (n > 0 && !buf);

    if (a->pend.phase) {
        if (buf != a->pend.buf || n != a->pend.n)
            return -EINVAL; /* the pending call must be finished first */
        target = a->pend.target;
        if (a->pend.phase == 2)
            goto phase2;
        goto phase1;
    }
    if (atomic_load_explicit(&sh->arrivals, memory_order_acquire) & AR_CLOSED)
        return -EPIPE;
    if (a->ranks == 1)
        return bad ? -EINVAL : 0;

    a->pend.buf = buf;
    a->pend.n = n;
    a->pend.rc = 0;
    if (!bad && n > 0) {
        float *mine = a->in + (size_t)a->rank * a->stride;
        size_t lo, hi;
        chunk_of(a, n, &lo, &hi);
        memcpy(mine, buf, lo * sizeof(float));
        memcpy(mine + hi, buf + hi, (n - hi) * sizeof(float));
    }
    atomic_store_explicit(&a->meta[a->rank].n, bad ? AR_BAD_N : (uint64_t)n, memory_order_relaxed);
    rc = barrier_arrive(sh, a->ranks, &target);
    if (rc)
        return rc;

phase1:
    rc = wait_phase(a, 1, target, timeout_ms, &deadline, &has_deadline);
    if (rc)
        return rc;
    /* Every rank reads the same n's, so all fail or none does (a bad call
     * published AR_BAD_N, which no valid n equals). */
    for (uint32_t k = 0; k < a->ranks; k++)
        if (bad || atomic_load_explicit(&a->meta[k].n, memory_order_relaxed) != (uint64_t)n)
            a->pend.rc = -EINVAL;
    if (a->pend.rc == 0) {
        size_t lo, hi;
        chunk_of(a, n, &lo, &hi);
        if (lo < hi)
            sum_chunk(a, buf, lo, hi);
    }
    rc = barrier_arrive(sh, a->ranks, &target);
    if (rc)
        return rc;

phase2:
    rc = wait_phase(a, 2, target, timeout_ms, &deadline, &has_deadline);
    if (rc)
        return rc;
    if (a->pend.rc == 0 && n > 0)
        memcpy(buf, a->out, n * sizeof(float));
    return a->pend.rc;
}

void allreduce_close(struct allreduce *a)
{
    if (!a || !a->sh)
        return;
    struct allreduce_shared *sh = a->sh;
    atomic_fetch_or_explicit(&sh->arrivals, AR_CLOSED, memory_order_seq_cst);
    atomic_fetch_add_explicit(&sh->wake_word, 1, memory_order_seq_cst);
    futex_wake(&sh->wake_word, INT_MAX);
}

bool allreduce_is_closed(const struct allreduce *a)
{
    return (atomic_load_explicit(&a->sh->arrivals, memory_order_acquire) & AR_CLOSED) != 0;
}
