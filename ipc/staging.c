/* staging.c - the staging buffer shared by a node's ranks: portions of
 * fixed-size blocks, borrowing with an owner's priority (rules and
 * protocol in staging.h).
 *
 * Who writes what:
 *   the creator   the header and every record, once (magic stored last,
 *                 release); nothing after but `closed`;
 *   an owner      its portion's `want` flag and `cursor` (where its next
 *                 borrowing search starts);
 *   any thread    `avail`, the bitmap words, `lent`/`borrowed` and the
 *                 counters of the portions it takes from or puts into,
 *                 always with atomic operations; `seq`/`waiters` when it
 *                 puts or waits.
 * A block's bytes belong to whoever got it until the matching put. */
#include "ipc/staging.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "ipc/futex.h"

#define PAGE 4096u
#define WORDS_ALIGN 8u /* bitmap words per cache line: each portion's bitmap on lines of its own */

struct staging_hdr {
    _Atomic uint64_t magic; /* STAGING_MAGIC; stored last (release) */
    uint32_t version;
    uint32_t ranks;
    uint32_t threads;
    uint32_t blocks_per;
    uint64_t block_bytes;
    uint32_t keep;
    uint32_t words; /* bitmap words per portion (a multiple of WORDS_ALIGN) */
    uint64_t portions_off, bits_off, blocks_off, total;
    _Alignas(64) _Atomic uint32_t closed;
};

struct staging_portion {
    _Atomic uint32_t avail;    /* free blocks not reserved by a get in progress */
    _Atomic uint32_t want;     /* the owner found none free: lend nothing */
    _Atomic uint32_t seq;      /* futex word: bumped by every put into this portion */
    _Atomic uint32_t waiters;  /* sleepers on seq */
    _Atomic uint32_t lent;     /* blocks of this portion held by others */
    _Atomic uint32_t borrowed; /* blocks of others held by this portion's owner */
    _Atomic uint32_t cursor;   /* owner only: the next borrowing search starts here */
    uint32_t reserved0;
    _Atomic uint64_t borrows, lends;
    unsigned char pad[16];
};
_Static_assert(sizeof(struct staging_portion) == 64, "one cache line per portion");

struct layout {
    uint64_t portions, words, portions_off, bits_off, blocks_off, total;
};

static int plan(const struct staging_params *p, struct layout *l, char *err, size_t errlen)
{
    uint64_t v, blocks;
    if (!p || p->ranks == 0 || p->threads == 0 || p->blocks == 0 || p->block_bytes == 0 ||
        p->block_bytes % STAGING_BLOCK_ALIGN || p->keep > p->blocks)
        return sl_errf(err, errlen, -EINVAL,
                       "staging buffer: bad parameters (need ranks, threads and blocks >= 1, blocks a multiple of "
                       "%u bytes, keep <= blocks per portion)",
                       STAGING_BLOCK_ALIGN);
    l->portions = (uint64_t)p->ranks * p->threads;
    if (l->portions > STAGING_PORTIONS_MAX || sl_mul_ovf(l->portions, p->blocks, &blocks) ||
        blocks > STAGING_BLOCKS_MAX)
        return sl_errf(err, errlen, -EINVAL,
                       "staging buffer: %u ranks x %u threads x %u blocks is more than %u portions or %u blocks",
                       p->ranks, p->threads, p->blocks, STAGING_PORTIONS_MAX, STAGING_BLOCKS_MAX);
    l->words = sl_round_up((p->blocks + 63) / 64, WORDS_ALIGN);
    l->portions_off = sl_round_up(sizeof(struct staging_hdr), 64);
    l->bits_off = l->portions_off + l->portions * sizeof(struct staging_portion);
    l->blocks_off = sl_round_up(l->bits_off + l->portions * l->words * sizeof(uint64_t), PAGE);
    if (sl_mul_ovf(blocks, p->block_bytes, &v) || sl_add_ovf(l->blocks_off, v, &l->total) || l->total > SIZE_MAX)
        return sl_errf(err, errlen, -ENOMEM,
                       "staging buffer: %" PRIu64 " blocks of %" PRIu64
                       " bytes overflow the address space; lower pipeline.staging_mb",
                       blocks, p->block_bytes);
    return 0;
}

size_t staging_mem_size(const struct staging_params *p)
{
    struct layout l = {0};
    return plan(p, &l, NULL, 0) ? 0 : (size_t)l.total;
}

/* Points s into base laid out as l for p (checked). */
static void point(struct staging *s, unsigned char *base, const struct layout *l, const struct staging_params *p)
{
    s->hdr = (struct staging_hdr *)base;
    s->portion = (struct staging_portion *)(base + l->portions_off);
    s->bits = (_Atomic uint64_t *)(base + l->bits_off);
    s->blocks = base + l->blocks_off;
    s->block_bytes = p->block_bytes;
    s->ranks = p->ranks;
    s->threads = p->threads;
    s->portions = (uint32_t)l->portions;
    s->blocks_per = p->blocks;
    s->words = (uint32_t)l->words;
    s->keep = p->keep;
}

int staging_mem_format(void *mem, size_t len, const struct staging_params *p, char *err, size_t errlen)
{
    struct layout l = {0};
    int rc = plan(p, &l, err, errlen);
    if (rc)
        return rc;
    if (!mem || len < l.total || (uintptr_t)mem % PAGE)
        return sl_errf(err, errlen, -EINVAL, "staging buffer: needs %" PRIu64 " bytes of page-aligned memory, got %zu",
                       l.total, len);
    unsigned char *base = mem;
    struct staging_hdr *h = mem;
    memset(base, 0, (size_t)l.blocks_off); /* the blocks' bytes are the readers' */
    h->version = STAGING_VERSION;
    h->ranks = p->ranks;
    h->threads = p->threads;
    h->blocks_per = p->blocks;
    h->block_bytes = p->block_bytes;
    h->keep = p->keep ? p->keep : 1;
    h->words = (uint32_t)l.words;
    h->portions_off = l.portions_off;
    h->bits_off = l.bits_off;
    h->blocks_off = l.blocks_off;
    h->total = l.total;
    struct staging tmp;
    point(&tmp, base, &l, p);
    for (uint32_t q = 0; q < tmp.portions; q++) {
        atomic_init(&tmp.portion[q].avail, p->blocks);
        _Atomic uint64_t *w = tmp.bits + (size_t)q * l.words;
        for (uint32_t i = 0; i < p->blocks; i += 64) { /* a set bit per block; padding bits stay clear */
            uint32_t n = SL_MIN(64u, p->blocks - i);
            atomic_init(&w[i / 64], n == 64 ? UINT64_MAX : (1ull << n) - 1);
        }
    }
    atomic_store_explicit(&h->magic, STAGING_MAGIC, memory_order_release);
    return 0;
}

int staging_init(struct staging *s, void *mem, size_t len, char *err, size_t errlen)
{
    struct shm_seg keep = s->seg;
    memset(s, 0, sizeof *s);
    s->seg = keep;
    struct staging_hdr *h = mem;
    if (!mem || len < sizeof *h || atomic_load_explicit(&h->magic, memory_order_acquire) != STAGING_MAGIC ||
        h->version != STAGING_VERSION)
        return sl_errf(err, errlen, -EINVAL,
                       "staging buffer: memory is not a version %u staging buffer; recreate the run", STAGING_VERSION);
    const volatile struct staging_hdr *vh = h;
    struct staging_params p = {.ranks = vh->ranks,
                               .threads = vh->threads,
                               .blocks = vh->blocks_per,
                               .block_bytes = vh->block_bytes,
                               .keep = vh->keep};
    struct layout l = {0};
    if (p.keep == 0 || plan(&p, &l, NULL, 0) || vh->words != l.words || vh->portions_off != l.portions_off ||
        vh->bits_off != l.bits_off || vh->blocks_off != l.blocks_off || vh->total != l.total || l.total > len)
        return sl_errf(err, errlen, -EINVAL,
                       "staging buffer: header sizes do not match its %zu bytes; the segment is "
                       "damaged",
                       len);
    point(s, mem, &l, &p);
    return 0;
}

int staging_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen)
{
    return shm_name(out, len, run_id, STAGING_OBJECT, err, errlen);
}

int staging_create(struct staging *s, const char *run_id, const struct staging_params *p, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    size_t need = staging_mem_size(p);
    if (need == 0) {
        struct layout l = {0};
        return plan(p, &l, err, errlen); /* says what is wrong */
    }
    int rc = shm_seg_create(&s->seg, run_id, STAGING_OBJECT, SHM_KIND_STAGING, need, err, errlen);
    if (rc)
        return rc;
    rc = staging_mem_format(s->seg.data, s->seg.data_size, p, err, errlen);
    if (rc == 0)
        rc = staging_init(s, s->seg.data, s->seg.data_size, err, errlen);
    if (rc) {
        char name[SHM_NAME_MAX];
        memcpy(name, s->seg.name, sizeof name);
        staging_free(s);
        shm_seg_unlink(name);
    }
    return rc;
}

int staging_attach(struct staging *s, const char *run_id, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    char name[SHM_NAME_MAX];
    int rc = staging_segname(name, sizeof name, run_id, err, errlen);
    if (rc == 0)
        rc = shm_seg_attach(&s->seg, name, SHM_KIND_STAGING, 0, err, errlen);
    if (rc == 0)
        rc = staging_init(s, s->seg.data, s->seg.data_size, err, errlen);
    if (rc)
        staging_free(s);
    return rc;
}

void staging_free(struct staging *s)
{
    if (!s)
        return;
    shm_seg_detach(&s->seg);
    memset(s, 0, sizeof *s);
}

/* ---- blocks ------------------------------------------------------------------ */

static bool closed(const struct staging *s)
{
    return atomic_load_explicit(&s->hdr->closed, memory_order_acquire) != 0;
}

/* Bumps q's sequence and wakes its sleepers (after a put or a close). */
static void portion_wake(struct staging *s, uint32_t q)
{
    struct staging_portion *x = &s->portion[q];
    atomic_fetch_add_explicit(&x->seq, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&x->waiters, memory_order_seq_cst))
        futex_wake(&x->seq, INT_MAX);
}

void staging_close(struct staging *s)
{
    atomic_store_explicit(&s->hdr->closed, 1, memory_order_seq_cst);
    for (uint32_t q = 0; q < s->portions; q++)
        portion_wake(s, q);
}

uint32_t staging_portion_of(const struct staging *s, int rank, int thread)
{
    if (rank < 0 || thread < 0 || (uint32_t)rank >= s->ranks || (uint32_t)thread >= s->threads)
        return STAGING_NONE;
    return (uint32_t)rank * s->threads + (uint32_t)thread;
}

/* Reserves one free block of portion q while more than `leave` are free. */
static bool reserve(struct staging_portion *x, uint32_t leave)
{
    uint32_t a = atomic_load_explicit(&x->avail, memory_order_relaxed);
    while (a > leave)
        if (atomic_compare_exchange_weak_explicit(&x->avail, &a, a - 1, memory_order_acquire, memory_order_relaxed))
            return true;
    return false;
}

/* Clears one set bit of q's bitmap, after a reservation: there is one to
 * find, though a racing reserver may take the one this scan sees first. */
static uint32_t claim(struct staging *s, uint32_t q)
{
    _Atomic uint64_t *w = s->bits + (size_t)q * s->words;
    for (;;)
        for (uint32_t i = 0; i < s->words; i++) {
            uint64_t v = atomic_load_explicit(&w[i], memory_order_relaxed);
            while (v) {
                uint64_t bit = v & -v;
                if (atomic_compare_exchange_weak_explicit(&w[i], &v, v & ~bit, memory_order_acquire,
                                                          memory_order_relaxed))
                    return q * s->blocks_per + i * 64 + (uint32_t)__builtin_ctzll(bit);
            }
        }
}

/* The k-th portion (k >= 1) a borrower p looks at: its rank's other
 * threads, then every thread of rank + 1, rank + 2, ... */
static uint32_t lender(const struct staging *s, uint32_t p, uint32_t k)
{
    uint32_t T = s->threads, r = p / T, t = p % T;
    if (k < T)
        return r * T + (t + k) % T;
    k -= T;
    return ((r + 1 + k / T) % s->ranks) * T + k % T;
}

int staging_get(struct staging *s, uint32_t portion, unsigned flags, uint32_t *block)
{
    if (portion >= s->portions)
        return -EINVAL;
    if (closed(s))
        return -EPIPE;
    struct staging_portion *own = &s->portion[portion];
    if (reserve(own, 0)) {
        *block = claim(s, portion);
        return 0;
    }
    /* the owner is short: nothing of its portion is lent until it is idle */
    if (!atomic_load_explicit(&own->want, memory_order_relaxed))
        atomic_store_explicit(&own->want, 1, memory_order_seq_cst);
    if (!(flags & STAGING_BORROW) || s->portions == 1)
        return -EAGAIN;
    uint32_t n = s->portions - 1, start = atomic_load_explicit(&own->cursor, memory_order_relaxed) % n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t k = 1 + (start + i) % n, q = lender(s, portion, k);
        struct staging_portion *x = &s->portion[q];
        if (atomic_load_explicit(&x->want, memory_order_seq_cst) || !reserve(x, s->keep))
            continue;
        *block = claim(s, q);
        atomic_fetch_add_explicit(&x->lent, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&x->lends, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&own->borrowed, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&own->borrows, 1, memory_order_relaxed);
        /* the next search starts at the lender that had room (k - 1 is its place) */
        atomic_store_explicit(&own->cursor, k - 1, memory_order_relaxed);
        return 0;
    }
    return -EAGAIN;
}

int staging_put(struct staging *s, uint32_t portion, uint32_t block)
{
    uint32_t q = staging_home(s, block);
    if (q == STAGING_NONE || portion >= s->portions)
        return -EINVAL;
    uint32_t i = block - q * s->blocks_per;
    uint64_t bit = 1ull << (i % 64);
    uint64_t old = atomic_fetch_or_explicit(&s->bits[(size_t)q * s->words + i / 64], bit, memory_order_release);
    if (old & bit)
        return -EINVAL; /* free already: a double put */
    if (q != portion) {
        atomic_fetch_sub_explicit(&s->portion[q].lent, 1, memory_order_relaxed);
        atomic_fetch_sub_explicit(&s->portion[portion].borrowed, 1, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&s->portion[q].avail, 1, memory_order_release);
    portion_wake(s, q);
    return 0;
}

void staging_idle(struct staging *s, uint32_t portion)
{
    if (portion < s->portions && atomic_load_explicit(&s->portion[portion].want, memory_order_relaxed))
        atomic_store_explicit(&s->portion[portion].want, 0, memory_order_seq_cst);
}

uint32_t staging_seq(struct staging *s, uint32_t portion)
{
    return portion < s->portions ? atomic_load_explicit(&s->portion[portion].seq, memory_order_seq_cst) : 0;
}

int staging_wait(struct staging *s, uint32_t portion, uint32_t seen, int timeout_ms)
{
    if (portion >= s->portions)
        return -EINVAL;
    struct staging_portion *x = &s->portion[portion];
    struct timespec deadline;
    if (timeout_ms >= 0)
        futex_deadline(&deadline, timeout_ms);
    for (;;) {
        if (closed(s))
            return -EPIPE;
        if (atomic_load_explicit(&x->seq, memory_order_seq_cst) != seen)
            return 0;
        atomic_fetch_add_explicit(&x->waiters, 1, memory_order_seq_cst);
        int rc = 0;
        if (atomic_load_explicit(&x->seq, memory_order_seq_cst) == seen && !closed(s))
            rc = futex_wait_until(&x->seq, seen, timeout_ms >= 0 ? &deadline : NULL);
        atomic_fetch_sub_explicit(&x->waiters, 1, memory_order_relaxed);
        if (rc == -ETIMEDOUT && atomic_load_explicit(&x->seq, memory_order_seq_cst) == seen)
            return -ETIMEDOUT;
    }
}

void *staging_block(const struct staging *s, uint32_t block)
{
    if (staging_home(s, block) == STAGING_NONE)
        return NULL;
    return s->blocks + (size_t)block * s->block_bytes;
}

uint32_t staging_home(const struct staging *s, uint32_t block)
{
    if (!s->hdr || block >= s->portions * s->blocks_per)
        return STAGING_NONE;
    return block / s->blocks_per;
}

int staging_portion_span(const struct staging *s, uint32_t portion, void **base, size_t *len)
{
    if (portion >= s->portions)
        return -EINVAL;
    *len = (size_t)s->blocks_per * s->block_bytes;
    *base = s->blocks + (size_t)portion * *len;
    return 0;
}

void *staging_data(const struct staging *s, size_t *len)
{
    *len = (size_t)s->portions * s->blocks_per * s->block_bytes;
    return s->blocks;
}

int staging_stats(const struct staging *s, uint32_t portion, struct staging_stats *out)
{
    if (portion >= s->portions)
        return -EINVAL;
    struct staging_portion *x = &s->portion[portion];
    const _Atomic uint64_t *w = s->bits + (size_t)portion * s->words;
    uint32_t free_bits = 0;
    for (uint32_t i = 0; i < s->words; i++)
        free_bits += (uint32_t)__builtin_popcountll(atomic_load_explicit(&w[i], memory_order_relaxed));
    *out = (struct staging_stats){
        .free = free_bits,
        .lent = atomic_load_explicit(&x->lent, memory_order_relaxed),
        .borrowed = atomic_load_explicit(&x->borrowed, memory_order_relaxed),
        .want = atomic_load_explicit(&x->want, memory_order_relaxed) != 0,
        .borrows = atomic_load_explicit(&x->borrows, memory_order_relaxed),
        .lends = atomic_load_explicit(&x->lends, memory_order_relaxed),
    };
    return 0;
}
