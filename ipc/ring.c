/* ring.c - bounded MPMC ring queue in shared memory (API in ring.h).
 *
 * Protocol
 * --------
 * Memory (one segment, or memory the creator owns, 128-byte aligned):
 *
 *     control block  struct ring_shared: a read-only line written once by
 *                    ring_mem_format, then one line each for `enq`, `deq`,
 *                    the consumers' futex word + sleeper count and the
 *                    producers' futex word + sleeper count
 *     slots          capacity x { _Atomic uint64_t seq; entry bytes }
 *
 * Positions are 64-bit counters that never wrap in practice (2^63 entries);
 * position p uses slot p & mask. Each slot's `seq` says whose turn it is:
 *
 *     seq == p            free for the producer of position p
 *     seq == p + 1        holds the entry of position p, for its consumer
 *     seq == p + capacity consumed (or dropped): free for position p + capacity
 *
 * Producers (any thread of any process):
 *   1. read enq; if its CLOSED bit (63) is set, fail with -EPIPE;
 *   2. if slot(enq).seq == enq, claim the position with a CAS enq -> enq+1
 *      (seq_cst); seq < enq means the ring is full (the slot still holds the
 *      entry of the previous lap), so sleep (below);
 *   3. write the entry into the slot (plain stores: the slot is ours);
 *   4. publish with a CAS seq: p -> p+1 (seq_cst, so release). If the CAS
 *      fails, a consumer dropped the slot after a close (below): -EPIPE.
 *   5. if consumers sleep (cons_waiters != 0, seq_cst load), bump data_word
 *      and FUTEX_WAKE one of them.
 * Consumers:
 *   1. read deq; if slot(deq).seq == deq + 1 (acquire), claim with a CAS
 *      deq -> deq+1 (seq_cst), copy the entry out, and release the slot by
 *      storing seq = p + capacity (seq_cst, so release: the copy is done
 *      before any producer may reuse it); if producers sleep, bump
 *      space_word and wake one;
 *   2. otherwise the ring is empty at deq, or the producer of deq claimed
 *      it and has not published yet. If enq is not CLOSED, sleep (below).
 *      If it is CLOSED, enq's value is final: deq == enq means every entry
 *      was popped (-EPIPE, end of stream); deq < enq means the producer of
 *      deq claimed the slot and has not published - it is slow or dead.
 *      The consumer claims deq anyway and tries a CAS seq: p -> p+capacity
 *      ("dropped"). Exactly one of that CAS and the producer's publishing
 *      CAS wins: if the producer won, the consumer takes the entry as
 *      usual; if the consumer won, the producer gets -EPIPE. So a push
 *      returns 0 exactly when its entry is delivered.
 * Close: fetch_or CLOSED into enq (no claim can succeed afterwards), bump
 *   both futex words and wake every sleeper on both.
 *
 * Sleeping without lost wake-ups. A caller that found the ring full/empty
 *   increments the sleeper count of its side (seq_cst) and issues a seq_cst
 *   fence, reads the futex word, checks the ring again, and only then calls
 *   FUTEX_WAIT(word, value read) - shared, not FUTEX_PRIVATE, since sleepers
 *   and wakers live in different processes. A waker changes the ring with a
 *   seq_cst RMW/store before it loads the sleeper count (seq_cst), so either
 *   the waker sees the sleeper and bumps the word (then FUTEX_WAIT returns
 *   at once or is woken), or the sleeper's re-check sees the change. Each
 *   wake wakes one sleeper; after a successful claim a caller whose side
 *   has sleepers and finds the next position ready as well wakes one more
 *   (chained wake-ups), so entries published out of order or in bursts
 *   never sit in the ring while a consumer sleeps. Close wakes all.
 *   Wake-ups are only issued when the sleeper count is non-zero, so the
 *   uncontended path makes no system call.
 *
 * Who writes what: the formatter writes the read-only line and the initial
 *   slot sequence numbers, then stores the magic (release) last; producers
 *   write enq, their claimed slot's entry and seq, data_word; consumers
 *   write deq, their claimed slot's seq, space_word; sleepers write their
 *   side's count; ring_close and ring_producer_done write enq's CLOSED bit
 *   and the remaining-producer count. Entries are owned by the ring from
 *   push_start to pop_finish; memory belongs to the segment's creator.
 *
 * Dead peers. A process killed while sleeping leaves its sleeper count
 *   raised: peers then make a useless FUTEX_WAKE per operation (slower,
 *   still correct). A producer killed between claiming and publishing
 *   leaves an unpublished slot: consumers stop at that position (entries
 *   published behind it stay queued, the ring fills, producers sleep) until
 *   the supervisor notices the death and calls ring_close(); then pushes
 *   fail with -EPIPE, consumers drop the dead slot, drain the rest and get
 *   -EPIPE. A consumer killed between claiming and releasing loses that
 *   entry and holds the slot: producers stop at its next lap until the
 *   close. Blocking calls with a timeout return -ETIMEDOUT meanwhile, so no
 *   stage needs the supervisor to be prompt to stay responsive. */
#include "ipc/ring.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/util.h"
#include "ipc/futex.h"

#define RING_LINE 128 /* two cache lines: adjacent-line prefetch */
#define RING_CLOSED (UINT64_C(1) << 63)

struct ring_shared {
    /* written once by ring_mem_format; read-only afterwards */
    _Atomic uint64_t magic; /* RING_MAGIC, stored last (release) */
    uint32_t version;
    uint32_t entry_size;
    uint32_t stride;
    uint32_t capacity;
    uint64_t slots_offset;      /* from the start of the control block */
    uint64_t mem_size;          /* bytes of control block + slots */
    _Atomic uint32_t producers; /* producers that have not called ring_producer_done */
    uint32_t producers_declared;

    alignas(RING_LINE) _Atomic uint64_t enq;       /* next position to push; bit 63 = closed */
    alignas(RING_LINE) _Atomic uint64_t deq;       /* next position to pop */
    alignas(RING_LINE) _Atomic uint32_t data_word; /* futex: consumers sleep on it */
    _Atomic uint32_t cons_waiters;
    alignas(RING_LINE) _Atomic uint32_t space_word; /* futex: producers sleep on it */
    _Atomic uint32_t prod_waiters;
};

struct ring_slot {
    _Atomic uint64_t seq;
    unsigned char entry[];
};

_Static_assert(sizeof(struct ring_shared) % RING_LINE == 0, "control block is whole lines");
_Static_assert(sizeof(_Atomic uint64_t) == 8 && ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "32-bit atomics must be lock-free");

static inline struct ring_slot *slot_at(const struct ring *r, uint64_t pos)
{
    return (struct ring_slot *)(r->slots + (size_t)(pos & r->mask) * r->stride);
}

/* ---- futexes --------------------------------------------------------------------- */

static void wake_one(_Atomic uint32_t *word)
{
    atomic_fetch_add_explicit(word, 1, memory_order_seq_cst);
    futex_wake(word, 1);
}

/* One blocking call's sleeping state (see "Sleeping without lost wake-ups"). */
struct waiter {
    _Atomic uint32_t *word;
    _Atomic uint32_t *count;
    int timeout_ms;
    bool announced, timed_out;
    uint32_t seen;
    struct timespec deadline;
};

/* Reads the futex word before each check of the ring, once announced. */
static inline void waiter_snapshot(struct waiter *w)
{
    if (w->announced)
        w->seen = atomic_load_explicit(w->word, memory_order_seq_cst);
}

/* Called when the ring was full/empty: announces the sleeper (and returns
 * so the caller checks again), then sleeps. 0: check again; -EAGAIN (never
 * wait), -ETIMEDOUT, -EINTR: give up. */
static int waiter_block(struct waiter *w)
{
    if (w->timeout_ms == 0)
        return -EAGAIN;
    if (!w->announced) {
        atomic_fetch_add_explicit(w->count, 1, memory_order_seq_cst);
        atomic_thread_fence(memory_order_seq_cst);
        w->announced = true;
        if (w->timeout_ms > 0)
            futex_deadline(&w->deadline, w->timeout_ms);
        return 0;
    }
    if (w->timed_out)
        return -ETIMEDOUT;
    int rc = futex_wait_until(w->word, w->seen, w->timeout_ms > 0 ? &w->deadline : NULL);
    if (rc == -ETIMEDOUT) {
        w->timed_out = true; /* one last check before reporting it */
        return 0;
    }
    return rc; /* 0 (woken, or the word moved), -EINTR */
}

static inline void waiter_done(struct waiter *w)
{
    if (w->announced)
        atomic_fetch_sub_explicit(w->count, 1, memory_order_seq_cst);
}

/* ---- layout ------------------------------------------------------------------------ */

static int check_params(const struct ring_params *p, char *err, size_t errlen)
{
    if (!p)
        return sl_errf(err, errlen, -EINVAL, "ring: no parameters given");
    if (p->entry_size == 0 || p->entry_size > RING_ENTRY_MAX)
        return sl_errf(err, errlen, -EINVAL,
                       "ring: entry size %" PRIu32 " is outside 1..%u bytes; queues carry "
                       "small descriptors, put bulk data in the batch arena",
                       p->entry_size, RING_ENTRY_MAX);
    if (p->capacity < 2 || p->capacity > RING_CAPACITY_MAX || (p->capacity & (p->capacity - 1)) != 0)
        return sl_errf(err, errlen, -EINVAL, "ring: capacity %" PRIu32 " must be a power of two in 2..%u", p->capacity,
                       RING_CAPACITY_MAX);
    return 0;
}

static uint32_t slot_stride(uint32_t entry_size)
{
    return (uint32_t)sl_round_up(sizeof(struct ring_slot) + entry_size, alignof(struct ring_slot));
}

static uint64_t slots_offset(void)
{
    return sl_round_up(sizeof(struct ring_shared), RING_LINE);
}

size_t ring_mem_size(const struct ring_params *p)
{
    if (check_params(p, NULL, 0) != 0)
        return 0;
    return (size_t)(slots_offset() + (uint64_t)slot_stride(p->entry_size) * p->capacity);
}

int ring_mem_format(void *mem, size_t len, const struct ring_params *p, char *err, size_t errlen)
{
    int rc = check_params(p, err, errlen);
    if (rc)
        return rc;
    size_t need = ring_mem_size(p);
    if (!mem || ((uintptr_t)mem % RING_LINE) != 0)
        return sl_errf(err, errlen, -EINVAL, "ring: memory at %p is not %d-byte aligned", mem, RING_LINE);
    if (len < need)
        return sl_errf(err, errlen, -EINVAL,
                       "ring: %zu bytes given, %zu needed for %" PRIu32 " entries of %" PRIu32 " bytes", len, need,
                       p->capacity, p->entry_size);
    struct ring_shared *sh = mem;
    memset(sh, 0, sizeof *sh);
    sh->version = RING_VERSION;
    sh->entry_size = p->entry_size;
    sh->stride = slot_stride(p->entry_size);
    sh->capacity = p->capacity;
    sh->slots_offset = slots_offset();
    sh->mem_size = need;
    sh->producers_declared = p->producers;
    atomic_init(&sh->producers, p->producers);
    atomic_init(&sh->enq, 0);
    atomic_init(&sh->deq, 0);
    unsigned char *slots = (unsigned char *)mem + sh->slots_offset;
    for (uint32_t i = 0; i < p->capacity; i++) {
        struct ring_slot *s = (struct ring_slot *)(slots + (size_t)i * sh->stride);
        atomic_store_explicit(&s->seq, i, memory_order_relaxed);
    }
    atomic_store_explicit(&sh->magic, RING_MAGIC, memory_order_release);
    return 0;
}

/* Binds r (all but r->seg) to a formatted ring after checking it. */
static int bind(struct ring *r, void *mem, size_t len, const char *what, char *err, size_t errlen)
{
    if (!mem || ((uintptr_t)mem % RING_LINE) != 0 || len < sizeof(struct ring_shared))
        return sl_errf(err, errlen, -EINVAL, "%s: %zu bytes at %p cannot hold a ring (need %zu, %d-byte aligned)", what,
                       len, mem, sizeof(struct ring_shared), RING_LINE);
    struct ring_shared *sh = mem;
    uint64_t magic = atomic_load_explicit(&sh->magic, memory_order_acquire);
    if (magic != RING_MAGIC)
        return sl_errf(err, errlen, -EINVAL,
                       "%s does not hold a formatted ring (magic %#" PRIx64 "); it was "
                       "damaged or is another object, restart the run",
                       what, magic);
    if (sh->version != RING_VERSION)
        return sl_errf(err, errlen, -EINVAL,
                       "%s holds a ring of format version %" PRIu32 ", this build reads %u; "
                       "run stages from the same build as the launcher",
                       what, sh->version, RING_VERSION);
    struct ring_params p = {.entry_size = sh->entry_size, .capacity = sh->capacity};
    char why[160];
    if (check_params(&p, why, sizeof why) != 0)
        return sl_errf(err, errlen, -EINVAL, "%s: damaged ring header (%s); restart the run", what, why);
    if (sh->stride != slot_stride(p.entry_size) || sh->slots_offset != slots_offset() ||
        sh->mem_size != ring_mem_size(&p) || sh->mem_size > len)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: ring header says %" PRIu64 " bytes (stride %" PRIu32
                       ") but %zu are mapped; it was damaged, restart the run",
                       what, sh->mem_size, sh->stride, len);
    r->sh = sh;
    r->slots = (unsigned char *)mem + sh->slots_offset;
    r->mask = (uint64_t)p.capacity - 1;
    r->entry_size = p.entry_size;
    r->stride = sh->stride;
    r->capacity = p.capacity;
    return 0;
}

int ring_init(struct ring *r, void *mem, size_t len, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    return bind(r, mem, len, "ring memory", err, errlen);
}

int ring_create(struct ring *r, const char *run_id, const char *object, const struct ring_params *p, char *err,
                size_t errlen)
{
    memset(r, 0, sizeof *r);
    int rc = check_params(p, err, errlen);
    if (rc)
        return rc;
    rc = shm_seg_create(&r->seg, run_id, object, SHM_KIND_RING, ring_mem_size(p), err, errlen);
    if (rc)
        return rc;
    rc = ring_mem_format(r->seg.data, r->seg.data_size, p, err, errlen);
    if (rc == 0)
        rc = bind(r, r->seg.data, r->seg.data_size, r->seg.name, err, errlen);
    if (rc) {
        char name[SHM_NAME_MAX];
        memcpy(name, r->seg.name, sizeof name);
        ring_free(r);
        shm_seg_unlink(name);
    }
    return rc;
}

int ring_attach(struct ring *r, const char *name, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    int rc = shm_seg_attach(&r->seg, name, SHM_KIND_RING, 0, err, errlen);
    if (rc == 0)
        rc = bind(r, r->seg.data, r->seg.data_size, r->seg.name, err, errlen);
    if (rc)
        ring_free(r);
    return rc;
}

void ring_free(struct ring *r)
{
    if (!r)
        return;
    shm_seg_detach(&r->seg);
    memset(r, 0, sizeof *r);
}

/* ---- claiming ---------------------------------------------------------------------- */

/* Claims the next push position: 0, -EPIPE (closed), -EAGAIN (full). */
static int try_claim_push(struct ring *r, struct ring_ticket *t)
{
    struct ring_shared *sh = r->sh;
    uint64_t e = atomic_load_explicit(&sh->enq, memory_order_relaxed);
    for (;;) {
        if (e & RING_CLOSED)
            return -EPIPE;
        struct ring_slot *s = slot_at(r, e);
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - e);
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&sh->enq, &e, e + 1, memory_order_seq_cst,
                                                      memory_order_relaxed)) {
                t->pos = e;
                t->entry = s->entry;
                return 0;
            }
        } else if (dif < 0) {
            return -EAGAIN; /* the slot still holds the previous lap's entry */
        } else {
            e = atomic_load_explicit(&sh->enq, memory_order_relaxed); /* overtaken */
        }
    }
}

/* Claims the next pop position: 0, -EPIPE (closed and drained), -EAGAIN
 * (empty, or its entry not yet published). Drops unpublished slots of a
 * closed ring (see the protocol). */
static int try_claim_pop(struct ring *r, struct ring_ticket *t)
{
    struct ring_shared *sh = r->sh;
    uint64_t d = atomic_load_explicit(&sh->deq, memory_order_relaxed);
    for (;;) {
        struct ring_slot *s = slot_at(r, d);
        uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
        int64_t dif = (int64_t)(seq - (d + 1));
        if (dif == 0) {
            if (atomic_compare_exchange_weak_explicit(&sh->deq, &d, d + 1, memory_order_seq_cst,
                                                      memory_order_relaxed)) {
                t->pos = d;
                t->entry = s->entry;
                return 0;
            }
            continue;
        }
        if (dif > 0) {
            d = atomic_load_explicit(&sh->deq, memory_order_relaxed); /* overtaken */
            continue;
        }
        uint64_t e = atomic_load_explicit(&sh->enq, memory_order_seq_cst);
        if (!(e & RING_CLOSED))
            return -EAGAIN;
        uint64_t end = e & ~RING_CLOSED; /* final: no claim succeeds after close */
        if (d >= end)
            return -EPIPE;
        if (seq != d) {
            d = atomic_load_explicit(&sh->deq, memory_order_relaxed); /* stale view */
            continue;
        }
        /* Closed, and the producer of d claimed it but has not published. */
        if (!atomic_compare_exchange_weak_explicit(&sh->deq, &d, d + 1, memory_order_seq_cst, memory_order_relaxed))
            continue;
        uint64_t expect = d;
        if (atomic_compare_exchange_strong_explicit(&s->seq, &expect, d + r->mask + 1, memory_order_seq_cst,
                                                    memory_order_acquire)) {
            d = atomic_load_explicit(&sh->deq, memory_order_relaxed); /* dropped; go on */
            continue;
        }
        /* The producer published after all (expect == d + 1): take it. */
        t->pos = d;
        t->entry = s->entry;
        return 0;
    }
}

/* After a successful claim: if this side has sleepers and the next position
 * is ready for them too, wake one (chained wake-ups). */
static void chain_producers(struct ring *r)
{
    struct ring_shared *sh = r->sh;
    if (atomic_load_explicit(&sh->prod_waiters, memory_order_seq_cst) == 0)
        return;
    uint64_t e = atomic_load_explicit(&sh->enq, memory_order_relaxed);
    if (!(e & RING_CLOSED) && atomic_load_explicit(&slot_at(r, e)->seq, memory_order_relaxed) == e)
        wake_one(&sh->space_word);
}

static void chain_consumers(struct ring *r)
{
    struct ring_shared *sh = r->sh;
    if (atomic_load_explicit(&sh->cons_waiters, memory_order_seq_cst) == 0)
        return;
    uint64_t d = atomic_load_explicit(&sh->deq, memory_order_relaxed);
    if (atomic_load_explicit(&slot_at(r, d)->seq, memory_order_relaxed) == d + 1)
        wake_one(&sh->data_word);
}

/* ---- public operations ------------------------------------------------------------- */

int ring_push_start(struct ring *r, struct ring_ticket *t, int timeout_ms)
{
    struct waiter w = {.word = &r->sh->space_word, .count = &r->sh->prod_waiters, .timeout_ms = timeout_ms};
    int rc;
    for (;;) {
        waiter_snapshot(&w);
        rc = try_claim_push(r, t);
        if (rc != -EAGAIN)
            break;
        rc = waiter_block(&w);
        if (rc)
            break;
    }
    waiter_done(&w);
    if (rc == 0)
        chain_producers(r);
    return rc;
}

int ring_push_finish(struct ring *r, const struct ring_ticket *t)
{
    struct ring_shared *sh = r->sh;
    struct ring_slot *s = slot_at(r, t->pos);
    uint64_t expect = t->pos;
    if (!atomic_compare_exchange_strong_explicit(&s->seq, &expect, t->pos + 1, memory_order_seq_cst,
                                                 memory_order_relaxed))
        return -EPIPE; /* dropped by a consumer after ring_close */
    if (atomic_load_explicit(&sh->cons_waiters, memory_order_seq_cst) != 0)
        wake_one(&sh->data_word);
    return 0;
}

int ring_pop_start(struct ring *r, struct ring_ticket *t, int timeout_ms)
{
    struct waiter w = {.word = &r->sh->data_word, .count = &r->sh->cons_waiters, .timeout_ms = timeout_ms};
    int rc;
    for (;;) {
        waiter_snapshot(&w);
        rc = try_claim_pop(r, t);
        if (rc != -EAGAIN)
            break;
        rc = waiter_block(&w);
        if (rc)
            break;
    }
    waiter_done(&w);
    if (rc == 0)
        chain_consumers(r);
    return rc;
}

void ring_pop_finish(struct ring *r, const struct ring_ticket *t)
{
    struct ring_shared *sh = r->sh;
    atomic_store_explicit(&slot_at(r, t->pos)->seq, t->pos + r->mask + 1, memory_order_seq_cst);
    if (atomic_load_explicit(&sh->prod_waiters, memory_order_seq_cst) != 0)
        wake_one(&sh->space_word);
}

int ring_push(struct ring *r, const void *entry, int timeout_ms)
{
    struct ring_ticket t;
    int rc = ring_push_start(r, &t, timeout_ms);
    if (rc)
        return rc;
    memcpy(t.entry, entry, r->entry_size);
    return ring_push_finish(r, &t);
}

int ring_pop(struct ring *r, void *entry, int timeout_ms)
{
    struct ring_ticket t;
    int rc = ring_pop_start(r, &t, timeout_ms);
    if (rc)
        return rc;
    memcpy(entry, t.entry, r->entry_size);
    ring_pop_finish(r, &t);
    return 0;
}

void ring_close(struct ring *r)
{
    struct ring_shared *sh = r->sh;
    atomic_fetch_or_explicit(&sh->enq, RING_CLOSED, memory_order_seq_cst);
    atomic_fetch_add_explicit(&sh->data_word, 1, memory_order_seq_cst);
    atomic_fetch_add_explicit(&sh->space_word, 1, memory_order_seq_cst);
    futex_wake(&sh->data_word, INT_MAX);
    futex_wake(&sh->space_word, INT_MAX);
}

int ring_producer_done(struct ring *r)
{
    struct ring_shared *sh = r->sh;
    uint32_t n = atomic_load_explicit(&sh->producers, memory_order_relaxed);
    do {
        if (n == 0)
            return -EINVAL;
    } while (
        !atomic_compare_exchange_weak_explicit(&sh->producers, &n, n - 1, memory_order_acq_rel, memory_order_relaxed));
    if (n == 1)
        ring_close(r);
    return 0;
}

bool ring_is_closed(const struct ring *r)
{
    return (atomic_load_explicit(&r->sh->enq, memory_order_acquire) & RING_CLOSED) != 0;
}

uint64_t ring_count(const struct ring *r)
{
    uint64_t d = atomic_load_explicit(&r->sh->deq, memory_order_acquire);
    uint64_t e = atomic_load_explicit(&r->sh->enq, memory_order_acquire) & ~RING_CLOSED;
    return e > d ? e - d : 0;
}
