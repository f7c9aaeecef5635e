/* test_featbuf_policy.c - the feature buffer's policy seam
 * (stages/featbuf_policy.h) and its hooks: the exact LRU victim order, a
 * policy table registered here (its region where the layout says, its
 * victims used, hints reaching it), pins through heavy eviction and over
 * the pin budget, and dirty rows written back exactly once (on eviction,
 * by flush, never for clean rows, retried after a failed write-back), and
 * learnable rows round-tripping through write-back under threads. */
#include "tests/t_util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "stages/featbuf.h"
#include "stages/featbuf_policy.h"

#define ROW_BYTES 32u
#define ROW_WORDS (ROW_BYTES / 4u)

static uint32_t row_word(uint64_t node, uint32_t i)
{
    return (uint32_t)(node * 2246822519u) ^ (i * 3266489917u + 1u);
}

struct buf {
    struct featbuf fb;
    void *mem;
    size_t len;
};

static void mk(struct buf *b, struct featbuf_params p)
{
    p.row_bytes = ROW_BYTES;
    b->len = featbuf_mem_size(&p);
    assert_true(b->len > 0);
    b->mem = mmap(NULL, b->len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(b->mem != MAP_FAILED);
    char err[256];
    assert_int_equal(featbuf_mem_format(b->mem, b->len, &p, err, sizeof err), 0);
    assert_int_equal(featbuf_init(&b->fb, b->mem, b->len, err, sizeof err), 0);
}

static void unmk(struct buf *b)
{
    featbuf_free(&b->fb);
    munmap(b->mem, b->len);
}

static void checked(struct featbuf *fb)
{
    char err[256] = "";
    if (featbuf_check(fb, err, sizeof err))
        fail_msg("featbuf_check: %s", err);
}

/* Acquires node, which must be a miss, and loads f(node) into its slot. */
static uint32_t load(struct featbuf *fb, uint64_t node)
{
    uint32_t s;
    int action;
    assert_int_equal(featbuf_acquire(fb, node, &s, &action), 0);
    assert_int_equal(action, FEATBUF_LOAD);
    uint32_t *r = featbuf_row(fb, s);
    for (uint32_t i = 0; i < ROW_WORDS; i++)
        r[i] = row_word(node, i);
    assert_int_equal(featbuf_loaded(fb, s), 0);
    return s;
}

static uint32_t hit(struct featbuf *fb, uint64_t node)
{
    uint32_t s;
    int action;
    assert_int_equal(featbuf_acquire(fb, node, &s, &action), 0);
    assert_int_equal(action, FEATBUF_HIT);
    return s;
}

/* ---- LRU --------------------------------------------------------------- */

/* The exact reuse order of the LRU standby list: slots in index order at
 * first, then oldest release first, a hit moving a row to the newest end,
 * an emptied slot (failed load) reused before any row, and hints changing
 * nothing. */
static void test_lru_order(void **state)
{
    (void)state;
    struct buf b;
    mk(&b, (struct featbuf_params){.n_nodes = 100, .nslots = 6});
    struct featbuf *fb = &b.fb;
    assert_string_equal(fb->policy->name, "lru");
    for (uint64_t v = 0; v < 6; v++)
        assert_int_equal(load(fb, v), (uint32_t)v);
    const uint32_t rel[6] = {3, 0, 5, 1, 4, 2}; /* node v sits in slot v */
    for (int i = 0; i < 6; i++)
        assert_int_equal(featbuf_release(fb, rel[i]), 0);
    /* standby: 3 0 5 1 4 2; a hit on node 5 moves it last: 3 0 1 4 2 5 */
    assert_int_equal(featbuf_release(fb, hit(fb, 5)), 0);
    const uint64_t hinted[3] = {2, 4, 99};
    assert_int_equal(featbuf_hint(fb, 1, hinted, 3), 0); /* LRU ignores it */
    uint32_t s20, s21;
    int action;
    assert_int_equal(featbuf_acquire(fb, 20, &s20, &action), 0);
    assert_int_equal(action, FEATBUF_LOAD);
    assert_int_equal(s20, 3);
    s21 = load(fb, 21);
    assert_int_equal(s21, 0);
    assert_int_equal(featbuf_release(fb, s21), 0); /* 1 4 2 5 0 */
    assert_int_equal(featbuf_load_failed(fb, s20), 0);
    assert_int_equal(featbuf_release(fb, s20), 0); /* empty: first, 3 1 4 2 5 0 */
    checked(fb);
    const uint32_t expect[6] = {3, 1, 4, 2, 5, 0};
    const uint64_t evicted[6] = {FEATBUF_NONE, 1, 4, 2, 5, 21};
    for (int i = 0; i < 6; i++) {
        assert_int_equal(load(fb, 30 + (uint64_t)i), expect[i]);
        if (evicted[i] != FEATBUF_NONE)
            assert_int_equal(featbuf_lookup(fb, evicted[i]), FEATBUF_ABSENT);
    }
    uint32_t t;
    assert_int_equal(featbuf_acquire(fb, 40, &t, &action), -EAGAIN);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(fb, &st), 0);
    assert_int_equal(st.evictions, 7); /* 3 (by 20), 0 (by 21), then 1 4 2 5 21 */
    assert_int_equal(st.standby, 0);
    assert_int_equal(st.writebacks, 0);
    uint64_t bad = 100;
    assert_int_equal(featbuf_hint(fb, 2, &bad, 1), -EINVAL);
    checked(fb);
    unmk(&b);
}

/* ---- a policy registered here ----------------------------------------- */

#define LOW_MAGIC 0x574f4cull /* "LOW" */

/* Lowest slot index first; keeps a log of hints. */
struct low_region {
    uint64_t magic;
    uint64_t hints, last_batch, nodes, node_sum;
    uint8_t on[]; /* (nslots) */
};

static uint64_t low_size(const struct featbuf_params *p)
{
    return sizeof(struct low_region) + p->nslots;
}

static void low_init(struct featbuf *fb)
{
    struct low_region *r = featbuf_policy_region(fb);
    *r = (struct low_region){.magic = LOW_MAGIC};
    memset(r->on, 1, fb->nslots);
}

static void low_put(struct featbuf *fb, uint32_t s, bool row)
{
    (void)row;
    ((struct low_region *)featbuf_policy_region(fb))->on[s] = 1;
}

static void low_take(struct featbuf *fb, uint32_t s)
{
    ((struct low_region *)featbuf_policy_region(fb))->on[s] = 0;
}

static uint32_t low_victim(struct featbuf *fb)
{
    struct low_region *r = featbuf_policy_region(fb);
    for (uint32_t s = 0; s < fb->nslots; s++)
        if (r->on[s]) {
            r->on[s] = 0;
            return s;
        }
    return FEATBUF_NO_SLOT;
}

static void low_hint(struct featbuf *fb, uint64_t batch, const uint64_t *nodes, uint32_t n)
{
    struct low_region *r = featbuf_policy_region(fb);
    r->hints++;
    r->last_batch = batch;
    r->nodes += n;
    for (uint32_t i = 0; i < n; i++)
        r->node_sum += nodes[i];
}

static int low_check(struct featbuf *fb, char *err, size_t errlen)
{
    struct low_region *r = featbuf_policy_region(fb);
    for (uint32_t s = 0; s < fb->nslots; s++)
        if ((r->on[s] != 0) != featbuf_slot_on_standby(fb, s)) {
            snprintf(err, errlen, "low: slot %u", s);
            return -EUCLEAN;
        }
    return r->magic == LOW_MAGIC ? 0 : -EUCLEAN;
}

static const struct featbuf_policy_ops low_ops = {
    .name = "low",
    .region_size = low_size,
    .init = low_init,
    .put = low_put,
    .take = low_take,
    .victim = low_victim,
    .hint = low_hint,
    .check = low_check,
};

#define LOW_ID FEATBUF_POLICY_USER

static void test_registered_policy(void **state)
{
    (void)state;
    assert_int_equal(featbuf_policy_register(FEATBUF_POLICY_LRU, &low_ops), -EINVAL);
    assert_int_equal(featbuf_policy_register(FEATBUF_POLICY_IDS, &low_ops), -EINVAL);
    struct featbuf_policy_ops half = low_ops;
    half.victim = NULL;
    assert_int_equal(featbuf_policy_register(LOW_ID + 1, &half), -EINVAL);
    struct featbuf_params p = {.n_nodes = 50, .nslots = 4, .row_bytes = ROW_BYTES, .policy = LOW_ID};
    assert_int_equal(featbuf_mem_size(&p), 0); /* not registered yet */
    assert_int_equal(featbuf_policy_register(LOW_ID, &low_ops), 0);
    assert_int_equal(featbuf_policy_register(LOW_ID, &low_ops), 0);                  /* again: no-op */
    assert_int_equal(featbuf_policy_register(LOW_ID, &featbuf_policy_lru), -EEXIST); /* taken */
    assert_ptr_equal(featbuf_policy_find(LOW_ID), &low_ops);
    assert_ptr_equal(featbuf_policy_find(FEATBUF_POLICY_LRU), &featbuf_policy_lru);
    assert_null(featbuf_policy_find(LOW_ID + 2));

    struct buf b;
    mk(&b, p);
    struct featbuf *fb = &b.fb;
    assert_ptr_equal(fb->policy, &low_ops);
    /* the region: 64-byte aligned, after the slot records, before the map,
     * inside the memory, formatted by the policy's init */
    unsigned char *base = b.mem, *reg = featbuf_policy_region(fb);
    assert_non_null(reg);
    assert_int_equal((uintptr_t)reg % 64, 0);
    assert_true(reg > (unsigned char *)fb->slots);
    assert_true(reg + low_size(&p) <= (unsigned char *)fb->map);
    assert_true(reg > base && reg + low_size(&p) <= base + b.len);
    struct low_region *r = (struct low_region *)reg;
    assert_int_equal(r->magic, LOW_MAGIC);
    /* a second binding finds it at the same offset */
    struct featbuf again;
    assert_int_equal(featbuf_init(&again, b.mem, b.len, NULL, 0), 0);
    assert_ptr_equal(featbuf_policy_region(&again), reg);
    featbuf_free(&again);
    /* its victims are used: lowest index first, not the oldest */
    uint32_t s[4];
    for (uint64_t v = 0; v < 4; v++)
        s[v] = load(fb, v);
    const uint32_t rel[4] = {2, 0, 3, 1};
    for (int i = 0; i < 4; i++)
        assert_int_equal(featbuf_release(fb, s[rel[i]]), 0);
    checked(fb);
    assert_int_equal(load(fb, 10), 0); /* LRU would take slot 2 */
    assert_int_equal(load(fb, 11), 1);
    assert_int_equal(featbuf_lookup(fb, 2), 2);
    /* hints reach it with their batch number and nodes */
    const uint64_t nodes[3] = {7, 8, 49};
    assert_int_equal(featbuf_hint(fb, 41, nodes, 3), 0);
    assert_int_equal(r->hints, 1);
    assert_int_equal(r->last_batch, 41);
    assert_int_equal(r->nodes, 3);
    assert_int_equal(r->node_sum, 64);
    const uint64_t bad[2] = {1, 50};
    assert_int_equal(featbuf_hint(fb, 42, bad, 2), -EINVAL); /* nothing told */
    assert_int_equal(r->hints, 1);
    assert_int_equal(featbuf_hint(fb, 43, NULL, 0), 0);
    assert_int_equal(r->hints, 2);
    assert_int_equal(r->last_batch, 43);
    checked(fb);
    /* a region the check disowns is reported */
    r->on[3] = 0;
    char err[128] = "";
    assert_int_equal(featbuf_check(fb, err, sizeof err), -EUCLEAN);
    assert_non_null(strstr(err, "low: slot 3"));
    r->on[3] = 1;
    checked(fb);
    unmk(&b);
}

/* ---- pins -------------------------------------------------------------- */

static void test_pin(void **state)
{
    (void)state;
    /* pins need a budget below the slot count */
    struct featbuf_params p = {.n_nodes = 1000, .nslots = 8, .row_bytes = ROW_BYTES, .pin_slots = 8};
    assert_int_equal(featbuf_mem_size(&p), 0);
    struct buf b0;
    mk(&b0, (struct featbuf_params){.n_nodes = 10, .nslots = 2});
    assert_int_equal(featbuf_pin(&b0.fb, 3), -ENOSPC); /* pin_slots 0: no pins */
    unmk(&b0);

    struct buf b;
    mk(&b, (struct featbuf_params){.n_nodes = 1000, .nslots = 8, .pin_slots = 2});
    struct featbuf *fb = &b.fb;
    struct featbuf_stats st;
    /* node 6 resident and on standby: pinning takes it off */
    uint32_t s6 = load(fb, 6);
    assert_int_equal(featbuf_release(fb, s6), 0);
    assert_int_equal(featbuf_stats(fb, &st), 0);
    assert_int_equal(st.standby, 8);
    assert_int_equal(featbuf_pin(fb, 6), 0);
    assert_int_equal(featbuf_stats(fb, &st), 0);
    assert_int_equal(st.standby, 7);
    /* node 5 not resident: pinned now, loaded by its first acquirer */
    assert_int_equal(featbuf_pin(fb, 5), 0);
    assert_int_equal(featbuf_pin(fb, 5), 0);       /* already pinned */
    assert_int_equal(featbuf_pin(fb, 7), -ENOSPC); /* over the budget */
    assert_int_equal(featbuf_pin(fb, 1000), -EINVAL);
    assert_int_equal(featbuf_lookup(fb, 5), FEATBUF_ABSENT);
    uint32_t s5 = load(fb, 5);
    assert_int_equal(featbuf_release(fb, s5), 0);
    assert_int_equal(featbuf_stats(fb, &st), 0);
    assert_int_equal(st.pinned, 2);
    assert_int_equal(st.standby, 6);
    checked(fb);
    /* heavy eviction: every other row goes, the pinned ones stay */
    for (uint64_t v = 100; v < 1000; v++)
        assert_int_equal(featbuf_release(fb, load(fb, v)), 0);
    checked(fb);
    assert_int_equal(featbuf_lookup(fb, 5), s5);
    assert_int_equal(featbuf_lookup(fb, 6), s6);
    uint32_t t = hit(fb, 5);
    assert_int_equal(t, s5);
    const uint32_t *row = featbuf_row(fb, t);
    for (uint32_t i = 0; i < ROW_WORDS; i++)
        assert_int_equal(row[i], row_word(5, i));
    assert_int_equal(featbuf_release(fb, t), 0);
    /* pinned slots count as held: 6 references fill the rest */
    uint32_t held[6], u;
    int action;
    for (int i = 0; i < 6; i++)
        held[i] = load(fb, 10 + (uint64_t)i);
    assert_int_equal(featbuf_acquire(fb, 20, &u, &action), -EAGAIN);
    /* unpinning puts node 6 on standby: the next miss takes its slot */
    assert_int_equal(featbuf_unpin(fb, 6), 0);
    assert_int_equal(featbuf_unpin(fb, 6), -ENOENT);
    assert_int_equal(load(fb, 20), s6);
    assert_int_equal(featbuf_lookup(fb, 6), FEATBUF_ABSENT);
    assert_int_equal(featbuf_pin(fb, 7), 0); /* room again */
    assert_int_equal(featbuf_pin(fb, 8), -ENOSPC);
    assert_int_equal(featbuf_release_many(fb, held, 6), 0);
    assert_int_equal(featbuf_release(fb, s6), 0);
    assert_int_equal(featbuf_stats(fb, &st), 0);
    assert_int_equal(st.pinned, 2);
    checked(fb);
    unmk(&b);
}

/* ---- dirty rows -------------------------------------------------------- */

#define WB_MAX 16
struct wb_log {
    int n;
    int fail; /* write-backs still to refuse with -EIO */
    uint64_t node[WB_MAX];
    uint32_t slot[WB_MAX];
    uint32_t bytes[WB_MAX][ROW_WORDS];
};

static int wb_record(void *ctx, uint64_t node, uint32_t slot, const void *row, size_t row_bytes)
{
    struct wb_log *l = ctx;
    if (l->fail > 0) {
        l->fail--;
        return -EIO;
    }
    if (l->n == WB_MAX || row_bytes != ROW_BYTES || !row)
        return -EINVAL;
    l->node[l->n] = node;
    l->slot[l->n] = slot;
    memcpy(l->bytes[l->n], row, ROW_BYTES);
    l->n++;
    return 0;
}

/* Changes node's row in place (as training would) to g(node) and marks it. */
static void update(struct featbuf *fb, uint32_t s, uint64_t node)
{
    uint32_t *r = featbuf_row(fb, s);
    for (uint32_t i = 0; i < ROW_WORDS; i++)
        r[i] = row_word(node + 5000, i);
    assert_int_equal(featbuf_mark_dirty(fb, s), 0);
}

static void assert_written(const struct wb_log *l, int i, uint64_t node, uint32_t slot)
{
    assert_int_equal(l->node[i], node);
    assert_int_equal(l->slot[i], slot);
    for (uint32_t w = 0; w < ROW_WORDS; w++)
        assert_int_equal(l->bytes[i][w], row_word(node + 5000, w));
}

static void test_dirty(void **state)
{
    (void)state;
    struct buf b;
    mk(&b, (struct featbuf_params){.n_nodes = 100, .nslots = 4});
    struct featbuf *fb = &b.fb;
    struct wb_log log = {0};
    uint32_t s[4];
    for (uint64_t v = 0; v < 4; v++)
        s[v] = load(fb, v);
    assert_int_equal(featbuf_mark_dirty(fb, s[1]), -EINVAL); /* no write-back registered */
    assert_int_equal(featbuf_flush(fb), -EINVAL);
    featbuf_set_writeback(fb, wb_record, &log);
    update(fb, s[1], 1);
    update(fb, s[3], 3);
    assert_int_equal(featbuf_mark_dirty(fb, s[3]), 0); /* twice: still one write-back */
    assert_int_equal(featbuf_mark_dirty(fb, 4), -EINVAL);
    for (int v = 0; v < 4; v++)
        assert_int_equal(featbuf_release(fb, s[v]), 0);
    assert_int_equal(featbuf_mark_dirty(fb, s[0]), -EINVAL); /* unreferenced */
    checked(fb);
    /* evicting clean node 0 writes nothing; dirty node 1 once, before reuse */
    uint32_t a = load(fb, 10);
    assert_int_equal(a, s[0]);
    assert_int_equal(log.n, 0);
    uint32_t c = load(fb, 11);
    assert_int_equal(c, s[1]);
    assert_int_equal(log.n, 1);
    assert_written(&log, 0, 1, s[1]);
    uint32_t d = load(fb, 12); /* node 2: clean */
    assert_int_equal(log.n, 1);
    /* flush writes the unreferenced dirty row (node 3), then nothing */
    update(fb, a, 10); /* referenced: flush leaves it */
    assert_int_equal(featbuf_flush(fb), 1);
    assert_int_equal(log.n, 2);
    assert_written(&log, 1, 3, s[3]);
    assert_int_equal(featbuf_flush(fb), 0);
    assert_int_equal(featbuf_release(fb, a), 0);
    assert_int_equal(featbuf_flush(fb), 1);
    assert_int_equal(log.n, 3);
    assert_written(&log, 2, 10, a);
    /* node 3 and node 10 are clean now: evicting them writes nothing */
    uint32_t e = load(fb, 13), f = load(fb, 14);
    assert_int_equal(e, s[3]);
    assert_int_equal(f, a);
    assert_int_equal(log.n, 3);
    /* a failed write-back: the acquire fails with its error, nothing taken,
     * the row stays resident and dirty; the retry writes it once */
    update(fb, c, 11);
    assert_int_equal(featbuf_release(fb, c), 0);
    log.fail = 1;
    uint32_t t;
    int action;
    assert_int_equal(featbuf_acquire(fb, 15, &t, &action), -EIO);
    assert_int_equal(featbuf_lookup(fb, 11), c);
    assert_int_equal(featbuf_lookup(fb, 15), FEATBUF_ABSENT);
    checked(fb);
    assert_int_equal(log.n, 3);
    assert_int_equal(load(fb, 15), c);
    assert_int_equal(log.n, 4);
    assert_written(&log, 3, 11, c);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(fb, &st), 0);
    assert_int_equal(st.writebacks, 4);
    const uint32_t all[4] = {c, d, e, f};
    assert_int_equal(featbuf_release_many(fb, all, 4), 0);
    assert_int_equal(featbuf_flush(fb), 0);
    /* a process with no write-back cannot evict a dirty row */
    uint32_t g = hit(fb, 15);
    update(fb, g, 15);
    assert_int_equal(featbuf_release(fb, g), 0);
    featbuf_set_writeback(fb, NULL, NULL);
    int refused = 0;
    for (uint64_t v = 20; v < 24; v++) {
        int rc = featbuf_acquire(fb, v, &t, &action);
        if (rc == -EINVAL) {
            refused++;
            continue;
        }
        assert_int_equal(rc, 0);
        assert_int_equal(featbuf_loaded(fb, t), 0);
        assert_int_equal(featbuf_release(fb, t), 0);
    }
    assert_true(refused >= 1);
    assert_int_equal(featbuf_lookup(fb, 15), g);
    assert_int_equal(log.n, 4);
    checked(fb);
    unmk(&b);
}

/* ---- learnable rows under threads ------------------------------------- */

/* Each row's first word is a counter kept in a backing store: a loader
 * reads it from the store, the owning thread (node % RT_THREADS) bumps it
 * in place and marks it dirty, and eviction or flush writes it back. No
 * update may be lost: at the end the store holds every node's update count.
 * Two nodes stay pinned throughout. S = threads x batch + pins. */
#define RT_THREADS 4
#define RT_BATCH 4
#define RT_NODES 96
#define RT_ROUNDS 3000

struct rt {
    struct featbuf fb;
    _Atomic uint64_t store[RT_NODES];
    _Atomic uint64_t writebacks;
    uint64_t updates[RT_THREADS][RT_NODES];
    _Atomic int failures;
};

struct rt_arg {
    struct rt *rt;
    int id;
};

static int rt_write_back(void *ctx, uint64_t node, uint32_t slot, const void *row, size_t row_bytes)
{
    (void)slot;
    (void)row_bytes;
    struct rt *rt = ctx;
    atomic_store(&rt->store[node], *(const uint64_t *)row);
    atomic_fetch_add(&rt->writebacks, 1);
    return 0;
}

static void *rt_main(void *arg)
{
    struct rt_arg *a = arg;
    struct rt *rt = a->rt;
    unsigned seed = 77u + (unsigned)a->id;
    uint64_t nodes[RT_BATCH];
    uint32_t slots[RT_BATCH];
    uint8_t action[RT_BATCH];
    for (int round = 0; round < RT_ROUNDS; round++) {
        for (int i = 0; i < RT_BATCH; i++) { /* distinct nodes */
            uint64_t v;
            int dup;
            do {
                v = (uint64_t)(rand_r(&seed) % RT_NODES);
                dup = 0;
                for (int j = 0; j < i; j++)
                    dup |= nodes[j] == v;
            } while (dup);
            nodes[i] = v;
        }
        if (featbuf_acquire_many(&rt->fb, nodes, RT_BATCH, slots, action) != 0)
            goto fail;
        for (int i = 0; i < RT_BATCH; i++)
            if (action[i] == FEATBUF_LOAD) {
                uint64_t *row = featbuf_row(&rt->fb, slots[i]);
                row[0] = atomic_load(&rt->store[nodes[i]]);
                if (featbuf_loaded(&rt->fb, slots[i]) != 0)
                    goto fail;
            }
        for (int i = 0; i < RT_BATCH; i++) {
            if (action[i] == FEATBUF_WAIT && featbuf_wait_valid(&rt->fb, slots[i], 10000) != 0)
                goto fail;
            if ((int)(nodes[i] % RT_THREADS) == a->id && rand_r(&seed) % 2) {
                uint64_t *row = featbuf_row(&rt->fb, slots[i]);
                row[0]++;
                rt->updates[a->id][nodes[i]]++;
                if (featbuf_mark_dirty(&rt->fb, slots[i]) != 0)
                    goto fail;
            }
        }
        if (featbuf_release_many(&rt->fb, slots, RT_BATCH) != 0)
            goto fail;
    }
    return NULL;
fail:
    atomic_fetch_add(&rt->failures, 1);
    return NULL;
}

static void test_learnable_threads(void **state)
{
    (void)state;
    struct buf b;
    mk(&b, (struct featbuf_params){.n_nodes = RT_NODES, .nslots = RT_THREADS * RT_BATCH + 2, .pin_slots = 2});
    struct rt *rt = calloc(1, sizeof *rt);
    assert_non_null(rt);
    rt->fb = b.fb;
    featbuf_set_writeback(&rt->fb, rt_write_back, rt);
    assert_int_equal(featbuf_pin(&rt->fb, 0), 0);
    assert_int_equal(featbuf_pin(&rt->fb, 1), 0);
    pthread_t th[RT_THREADS];
    struct rt_arg args[RT_THREADS];
    for (int t = 0; t < RT_THREADS; t++) {
        args[t] = (struct rt_arg){rt, t};
        assert_int_equal(pthread_create(&th[t], NULL, rt_main, &args[t]), 0);
    }
    for (int t = 0; t < RT_THREADS; t++)
        pthread_join(th[t], NULL);
    assert_int_equal(atomic_load(&rt->failures), 0);
    checked(&rt->fb);
    uint32_t s0 = featbuf_lookup(&rt->fb, 0), s1 = featbuf_lookup(&rt->fb, 1);
    assert_true(s0 != FEATBUF_ABSENT && s1 != FEATBUF_ABSENT);
    struct featbuf_stats st;
    assert_int_equal(featbuf_stats(&rt->fb, &st), 0);
    assert_true(st.evictions > 0);
    int flushed = featbuf_flush(&rt->fb);
    assert_true(flushed >= 0);
    assert_int_equal(featbuf_flush(&rt->fb), 0);
    uint64_t marked = 0;
    for (uint64_t v = 0; v < RT_NODES; v++) {
        uint64_t want = 0;
        for (int t = 0; t < RT_THREADS; t++)
            want += rt->updates[t][v];
        marked += want;
        if (atomic_load(&rt->store[v]) != want)
            fail_msg("node %llu: store holds %llu after %llu updates", (unsigned long long)v,
                     (unsigned long long)atomic_load(&rt->store[v]), (unsigned long long)want);
    }
    assert_true(atomic_load(&rt->writebacks) <= marked);
    assert_int_equal(featbuf_stats(&rt->fb, &st), 0);
    assert_int_equal(st.writebacks, atomic_load(&rt->writebacks));
    printf("# %llu updates, %llu write-backs (%d by flush), %llu evictions\n", (unsigned long long)marked,
           (unsigned long long)st.writebacks, flushed, (unsigned long long)st.evictions);
    free(rt);
    munmap(b.mem, b.len);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lru_order), cmocka_unit_test(test_registered_policy), cmocka_unit_test(test_pin),
        cmocka_unit_test(test_dirty),     cmocka_unit_test(test_learnable_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
