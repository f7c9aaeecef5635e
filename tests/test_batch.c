/* test_batch.c - sampled batches in arena slots (ipc/batch.h): the
 * worst-case arithmetic on hand-computed shapes (with the N, D and E caps
 * and the refusals), a batch at exactly its bounds filling exactly
 * batch_max_bytes, the writer's checks, a randomized property test (real
 * neighbour sampling on random CSC graphs always fits the slot size the
 * plan gives, and batch_view returns exactly what was sampled), and
 * batch_view rejecting damaged headers and blocks (hand-made damage, then
 * random header bytes under ASan). */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>
#include <time.h>

#include "core/util.h"
#include "ipc/batch.h"
#include "t_batch.h"

static uint64_t g_seed;
static volatile uint64_t g_sink;

/* A shape; fan holds min(layers, 3) fanouts (the rest are 0). */
static struct batch_shape shape(uint64_t batch_size, uint32_t layers, const int64_t *fan, uint64_t n, uint64_t e,
                                uint64_t d)
{
    struct batch_shape s = {.batch_size = batch_size, .layers = layers, .nodes = n, .edges = e, .max_in_degree = d};
    for (uint32_t k = 0; k < layers && k < 3; k++)
        s.fanouts[k] = fan[k];
    return s;
}

/* ---- sizing ------------------------------------------------------------------------------ */

static void test_max_bytes_by_hand(void **state)
{
    const struct {
        uint64_t b;
        uint32_t layers;
        int64_t fan[3];
        uint64_t n, e, d;
        uint64_t want_n[4], want_e[3];
        size_t bytes;
    } cases[] = {
        /* B=2, [2,2]: n = 2, 2+2*2 = 6, 6+6*2 = 18; bytes = header 280 + labels 8 +
         * nodes 144 + indptr0 16 + src0 16 + indptr1 32 + src1 48 + alias 72 */
        {2, 2, {2, 2}, 1000000, BATCH_UNKNOWN, BATCH_UNKNOWN, {2, 6, 18}, {4, 12}, 616},
        /* N = 10 caps hop 2 (nodes 80, alias 40) */
        {2, 2, {2, 2}, 10, BATCH_UNKNOWN, BATCH_UNKNOWN, {2, 6, 10}, {4, 12}, 520},
        /* E = 5 caps block 1's edges: n2 = 6 + 5; src1 24, nodes 88, alias 48 */
        {2, 2, {2, 2}, 1000000, 5, BATCH_UNKNOWN, {2, 6, 11}, {4, 5}, 280 + 8 + 88 + 16 + 16 + 32 + 24 + 48},
        /* D = 3: fanout -1 means 3 */
        {2, 2, {2, -1}, 1000000, BATCH_UNKNOWN, 3, {2, 6, 24}, {4, 18}, 280 + 8 + 192 + 16 + 16 + 32 + 72 + 96},
        /* a known D also caps finite fanouts */
        {2, 2, {5, 5}, 1000000, BATCH_UNKNOWN, 1, {2, 4, 8}, {2, 4}, 280 + 8 + 64 + 16 + 8 + 24 + 16 + 32},
        /* batch size above N: every node is a target */
        {100, 1, {3}, 3, BATCH_UNKNOWN, BATCH_UNKNOWN, {3, 3}, {9}, 280 + 16 + 24 + 16 + 40 + 16},
        /* fanout 0: targets only */
        {4, 1, {0}, 50, BATCH_UNKNOWN, BATCH_UNKNOWN, {4, 4}, {0}, 280 + 16 + 32 + 24 + 0 + 16},
        /* GNNDrive's papers100M setup: [10,10,10], batch 1000 */
        {1000,
         3,
         {10, 10, 10},
         111059956,
         1615685872,
         BATCH_UNKNOWN,
         {1000, 11000, 121000, 1331000},
         {10000, 110000, 1210000},
         280 + 4000 + 10648000 + 4008 + 40000 + 44008 + 440000 + 484008 + 4840000 + 5324000},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        struct batch_shape s = shape(cases[i].b, cases[i].layers, cases[i].fan, cases[i].n, cases[i].e, cases[i].d);
        struct batch_plan p;
        char err[512] = "";
        if (batch_plan(&s, &p, err, sizeof err) != 0)
            fail_msg("case %zu: %s", i, err);
        for (uint32_t k = 0; k <= cases[i].layers; k++)
            if (p.n_max[k] != cases[i].want_n[k] || (k < cases[i].layers && p.e_max[k] != cases[i].want_e[k]))
                fail_msg("case %zu hop %u: n %" PRIu64 " e %" PRIu64 ", expected %" PRIu64 " %" PRIu64, i, k,
                         p.n_max[k], k < cases[i].layers ? p.e_max[k] : 0, cases[i].want_n[k],
                         k < cases[i].layers ? cases[i].want_e[k] : 0);
        if (p.max_bytes != cases[i].bytes || batch_max_bytes(&s, NULL, 0) != cases[i].bytes)
            fail_msg("case %zu: %" PRIu64 " bytes, expected %zu", i, p.max_bytes, cases[i].bytes);
    }
    /* the slot count: queues full, every thread busy, trainer and releaser */
    assert_int_equal(batch_arena_slots(8, 4, 2, 2), 18);
    assert_int_equal(batch_arena_slots(1, 1, 1, 1), 6);
    assert_int_equal(batch_arena_slots(UINT64_MAX, 1, 0, 0), UINT32_MAX);
}

static void test_max_bytes_refused(void **state)
{
    const struct {
        uint64_t b;
        uint32_t layers;
        int64_t fan[3];
        uint64_t n, e, d;
        int rc;
        const char *msg;
    } cases[] = {
        {10, 2, {-1, 5}, 100, 1000, BATCH_UNKNOWN, -EINVAL, "needs the graph's max in-degree"},
        {10, 2, {-2, 5}, 100, 1000, 4, -EINVAL, "neither -1"},
        {10, 0, {0}, 100, 1000, 4, -EINVAL, "layers is outside"},
        {10, 9, {0}, 100, 1000, 4, -EINVAL, "layers is outside"},
        {10, 1, {3}, 0, 0, 0, -EINVAL, "cannot make a batch"},
        {0, 1, {3}, 10, 0, 0, -EINVAL, "cannot make a batch"},
        /* all neighbours of a heavy-tailed graph, edges unknown: TiBs per batch */
        {1000, 3, {-1, -1, -1}, 111059956, BATCH_UNKNOWN, 18584, -EOVERFLOW, "TiB per batch"},
        {1000, 3, {-1, -1, -1}, 111059956, BATCH_UNKNOWN, 18584, -EOVERFLOW, "give finite or smaller fanouts"},
        /* finite but absurd fanouts on a huge graph */
        {10000000, 1, {1000000}, 1ull << 40, BATCH_UNKNOWN, BATCH_UNKNOWN, -EOVERFLOW, "block 0 alone"},
        /* a degree so large that n * D overflows 64 bits */
        {2, 2, {-1, -1}, UINT64_MAX - 1, BATCH_UNKNOWN, UINT64_MAX - 1, -EOVERFLOW, "more than "},
        /* more targets than 32-bit local ids */
        {1ull << 33, 1, {1}, 1ull << 40, BATCH_UNKNOWN, BATCH_UNKNOWN, -EOVERFLOW, "targets; at most"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        struct batch_shape s = shape(cases[i].b, cases[i].layers, cases[i].fan, cases[i].n, cases[i].e, cases[i].d);
        struct batch_plan p;
        char err[512] = "";
        int rc = batch_plan(&s, &p, err, sizeof err);
        if (rc != cases[i].rc || !strstr(err, cases[i].msg))
            fail_msg("case %zu: rc %d '%s', expected %d with '%s'", i, rc, err, cases[i].rc, cases[i].msg);
        err[0] = '\0';
        assert_int_equal(batch_max_bytes(&s, err, sizeof err), 0);
        assert_non_null(strstr(err, cases[i].msg));
    }
    /* with the edge count known, the same fanouts fit: E bounds every block */
    struct batch_shape s = shape(1000, 3, (int64_t[]){-1, -1, -1}, 111059956, 1615685872, 18584);
    size_t b = batch_max_bytes(&s, NULL, 0);
    assert_true(b > (size_t)2 * 4 * 1615685872ull && b < (size_t)3 * 4 * 1615685872ull);
}

/* A batch written at exactly its bounds (every source new) fills exactly
 * the worst case. */
static void test_worst_case_is_exact(void **state)
{
    struct batch_shape s = shape(2, 2, (int64_t[]){2, 2}, 1000000, BATCH_UNKNOWN, BATCH_UNKNOWN);
    size_t max = batch_max_bytes(&s, NULL, 0);
    assert_int_equal(max, 616);
    uint64_t *slot = malloc(max);
    struct batch_writer w;
    char err[512];
    struct batch_id id = {.batch = 9, .epoch = 1, .rank = 0};
    assert_int_equal(batch_init(&w, slot, max, &s, 2, &id, err, sizeof err), 0);
    uint64_t next = 100;
    assert_int_equal(batch_add_target(&w, next++, 1), 0);
    assert_int_equal(batch_add_target(&w, next++, 0), 0);
    for (int k = 0; k < 2; k++) {
        assert_int_equal(batch_begin_block(&w), 0);
        uint32_t ndst = w.nn;
        for (uint32_t d = 0; d < ndst; d++) {
            for (int j = 0; j < 2; j++)
                assert_int_equal(batch_add_edge(&w, (uint32_t)batch_add_node(&w, next++)), 0);
            assert_int_equal(batch_end_dst(&w), 0);
        }
        assert_int_equal(batch_end_block(&w), 0);
    }
    assert_int_equal(batch_finish(&w, err, sizeof err), 0);
    struct batch_view v;
    assert_int_equal(batch_view(slot, max, 0, &v, err, sizeof err), 0);
    assert_int_equal(v.h.bytes, max);
    assert_int_equal(batch_nodes(&v), 18);
    assert_int_equal(batch_block_edges(&v, 1), 12);
    assert_int_equal(batch_block_for_layer(&v, 0), 1); /* the first layer runs over the big block */
    assert_int_equal(v.nodes[17], 117);
    assert_int_equal(v.src[1][11], 17);
    assert_int_equal(v.labels[0], 1);
    assert_int_equal(v.alias[17], BATCH_NO_ALIAS);
    assert_int_equal(*v.flags, BATCH_SEALED);
    v.alias[3] = 42;
    batch_set_aliased(&v);
    assert_int_equal(batch_view(slot, max, 0, &v, err, sizeof err), 0);
    assert_true(v.h.flags & BATCH_ALIASED);
    assert_int_equal(v.alias[3], 42);
    /* one byte less is refused up front, not half-way */
    assert_int_equal(batch_init(&w, slot, max - 1, &s, 2, &id, err, sizeof err), -ENOSPC);
    assert_non_null(strstr(err, "cannot hold a batch of 2 targets"));
    assert_null(v.deg); /* no degrees asked for */
    free(slot);

    /* with degrees (GCN's graph norm): one u32 per node more, placed after
     * the last block; finishing without them, or asking for them early or
     * twice, is refused */
    s.degrees = true;
    size_t dmax = batch_max_bytes(&s, NULL, 0);
    assert_int_equal(dmax, max + 72);
    slot = malloc(dmax);
    for (int mode = 0; mode < 4; mode++) {
        next = 100;
        assert_int_equal(batch_init(&w, slot, dmax, &s, 2, &id, err, sizeof err), 0);
        assert_int_equal(batch_add_target(&w, next++, 1), 0);
        assert_int_equal(batch_add_target(&w, next++, 0), 0);
        if (mode == 1) { /* early */
            assert_null(batch_degrees(&w));
            assert_int_equal(batch_finish(&w, err, sizeof err), -EPROTO);
            assert_non_null(strstr(err, "degrees after 0 of 2 blocks"));
            continue;
        }
        for (int k = 0; k < 2; k++) {
            assert_int_equal(batch_begin_block(&w), 0);
            uint32_t ndst = w.nn;
            for (uint32_t d = 0; d < ndst; d++) {
                for (int j = 0; j < 2; j++)
                    assert_int_equal(batch_add_edge(&w, (uint32_t)batch_add_node(&w, next++)), 0);
                assert_int_equal(batch_end_dst(&w), 0);
            }
            assert_int_equal(batch_end_block(&w), 0);
        }
        if (mode == 0) { /* none */
            assert_int_equal(batch_finish(&w, err, sizeof err), -EPROTO);
            assert_non_null(strstr(err, "without the degrees"));
            continue;
        }
        uint32_t *deg = batch_degrees(&w);
        assert_non_null(deg);
        for (uint32_t i = 0; i < w.nn; i++)
            deg[i] = 1000 + i;
        if (mode == 3) { /* twice */
            assert_null(batch_degrees(&w));
            assert_int_equal(batch_finish(&w, err, sizeof err), -EPROTO);
            assert_non_null(strstr(err, "twice"));
            continue;
        }
        assert_int_equal(batch_finish(&w, err, sizeof err), 0);
        assert_int_equal(batch_view(slot, dmax, 0, &v, err, sizeof err), 0);
        assert_int_equal(v.h.bytes, dmax);
        assert_non_null(v.deg);
        assert_int_equal(v.deg[0], 1000);
        assert_int_equal(v.deg[17], 1017);
        assert_int_equal(v.alias[17], BATCH_NO_ALIAS);
    }
    /* a shape without degrees refuses them */
    s.degrees = false;
    assert_int_equal(batch_init(&w, slot, dmax, &s, 1, &id, err, sizeof err), 0);
    assert_null(batch_degrees(&w));
    free(slot);
}

/* ---- the writer's checks ------------------------------------------------------------------ */

static void test_writer_checks(void **state)
{
    struct batch_shape s = shape(4, 2, (int64_t[]){2, 1}, 50, BATCH_UNKNOWN, BATCH_UNKNOWN);
    size_t max = batch_max_bytes(&s, NULL, 0);
    uint64_t *slot = malloc(max + 8);
    struct batch_id id = {.batch = 1};
    struct batch_writer w;
    char err[512];
    assert_int_equal(batch_init(&w, (char *)slot + 4, max, &s, 2, &id, err, sizeof err), -EINVAL);
    assert_int_equal(batch_init(&w, slot, max, &s, 0, &id, err, sizeof err), -EINVAL);
    assert_int_equal(batch_init(&w, slot, max, &s, 5, &id, err, sizeof err), -EINVAL);

    /* each misuse fails with its code, and the error sticks */
    enum {
        OVER_TARGETS,
        EARLY_BLOCK,
        BAD_TARGET,
        OVER_FANOUT,
        SRC_UNSEEN,
        NODE_OUTSIDE,
        RESERVED_SRC,
        RESERVED_NODE,
        OPEN_DST,
        EARLY_FINISH,
        NODE_BEFORE,
        CASES
    };
    const int want[CASES] = {-E2BIG,  -EPROTO, -ERANGE, -E2BIG,  -ERANGE, -ERANGE,
                             -ERANGE, -ERANGE, -EPROTO, -EPROTO, -EPROTO};
    for (int c = 0; c < CASES; c++) {
        assert_int_equal(batch_init(&w, slot, max, &s, 2, &id, err, sizeof err), 0);
        int rc = 0;
        if (c == NODE_BEFORE)
            rc = (int)batch_add_node(&w, 3);
        rc = rc ? rc : batch_add_target(&w, c == BAD_TARGET ? 50 : 7, 0);
        if (c == EARLY_BLOCK)
            rc = rc ? rc : batch_begin_block(&w);
        rc = rc ? rc : batch_add_target(&w, 8, 0);
        if (c == OVER_TARGETS)
            rc = rc ? rc : batch_add_target(&w, 9, 0);
        rc = rc ? rc : batch_begin_block(&w);
        int64_t a = rc ? rc : batch_add_node(&w, c == NODE_OUTSIDE ? 1000 : 11);
        rc = a < 0 ? (int)a : 0;
        rc = rc ? rc : batch_add_edge(&w, c == SRC_UNSEEN ? 3 : 2);
        rc = rc ? rc : batch_add_edge(&w, 0);
        if (c == OVER_FANOUT)
            rc = rc ? rc : batch_add_edge(&w, 1);
        if (c == RESERVED_SRC) {
            uint32_t *p = batch_reserve_edges(&w, 0);
            assert_non_null(p);
        }
        rc = rc ? rc : batch_end_dst(&w);
        if (c == RESERVED_SRC) {
            uint32_t *p = batch_reserve_edges(&w, 1);
            assert_non_null(p);
            *p = 99; /* caught when the block closes */
        }
        if (c == RESERVED_NODE) {
            uint32_t first;
            uint64_t *p = batch_reserve_nodes(&w, 1, &first);
            assert_non_null(p);
            assert_int_equal(first, 3);
            *p = 50; /* N = 50: not a node */
        }
        if (c != OPEN_DST)
            rc = rc ? rc : batch_end_dst(&w);
        rc = rc ? rc : batch_end_block(&w);
        if (c != EARLY_FINISH) {
            rc = rc ? rc : batch_begin_block(&w);
            for (int d = 0; d < (c == RESERVED_NODE ? 4 : 3); d++)
                rc = rc ? rc : batch_end_dst(&w);
            rc = rc ? rc : batch_end_block(&w);
        }
        int fin = batch_finish(&w, err, sizeof err);
        rc = rc ? rc : fin;
        if (rc != want[c] || fin != want[c] || batch_add_target(&w, 1, 1) != want[c])
            fail_msg("misuse %d: rc %d, finish %d ('%s'), expected %d", c, rc, fin, err, want[c]);
        struct batch_view v;
        assert_int_equal(batch_view(slot, max, 0, &v, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "unfinished"));
    }
    /* the node bound of a hop: [2, 1] with 2 targets allows 6 nodes after hop 1 */
    assert_int_equal(batch_init(&w, slot, max, &s, 2, &id, err, sizeof err), 0);
    batch_add_target(&w, 1, 0);
    batch_add_target(&w, 2, 0);
    batch_begin_block(&w);
    uint32_t first;
    assert_non_null(batch_reserve_nodes(&w, 4, &first));
    assert_null(batch_reserve_nodes(&w, 1, &first));
    assert_int_equal(w.rc, -E2BIG);
    free(slot);
}

/* ---- property: real sampling always fits and reads back ------------------------------------ */

/* Checks a batch against the graph it was sampled from: distinct nodes,
 * targets first, every edge a real in-edge, min(fanout, degree) sources per
 * destination, every new node of hop k+1 a source in block k. */
static void check_against_graph(const struct batch_view *v, const struct t_csc *g, const struct batch_shape *s,
                                const char *what)
{
    uint32_t n = batch_nodes(v);
    uint64_t *seen = calloc((g->n + 63) / 64, 8);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t x = v->nodes[i];
        if (x >= g->n || (seen[x / 64] >> (x % 64) & 1))
            fail_msg("%s: node %u = %" PRIu64 " is out of range or repeated", what, i, x);
        seen[x / 64] |= 1ull << (x % 64);
    }
    for (uint32_t t = 0; t < batch_targets(v); t++)
        if (v->labels[t] != g->labels[v->nodes[t]])
            fail_msg("%s: label of target %u", what, t);
    for (uint32_t k = 0; k < batch_layers(v); k++) {
        uint8_t *hit = calloc(batch_block_src(v, k) + 1, 1);
        for (uint32_t d = 0; d < batch_block_dst(v, k); d++) {
            uint64_t x = v->nodes[d], deg = g->indptr[x + 1] - g->indptr[x];
            uint64_t want = s->fanouts[k] < 0 ? deg : SL_MIN(deg, (uint64_t)s->fanouts[k]);
            uint32_t lo = v->indptr[k][d], hi = v->indptr[k][d + 1];
            if (hi - lo != want)
                fail_msg("%s: block %u dst %u has %u sources, expected %" PRIu64, what, k, d, hi - lo, want);
            for (uint32_t j = lo; j < hi; j++) {
                uint64_t u = v->nodes[v->src[k][j]];
                bool found = false;
                for (uint64_t q = g->indptr[x]; q < g->indptr[x + 1] && !found; q++)
                    found = g->indices[q] == u;
                if (!found)
                    fail_msg("%s: block %u: %" PRIu64 " -> %" PRIu64 " is no edge of the graph", what, k, u, x);
                hit[v->src[k][j]] = 1;
            }
        }
        for (uint32_t i = batch_block_dst(v, k); i < batch_block_src(v, k); i++)
            if (!hit[i])
                fail_msg("%s: node %u is new in hop %u but no source of block %u", what, i, k + 1, k);
        free(hit);
    }
    for (uint32_t i = 0; i < n; i++)
        if (v->alias[i] != BATCH_NO_ALIAS)
            fail_msg("%s: alias %u written by the sampler", what, i);
    free(seen);
}

static void test_sampled_batches_fit(void **state)
{
    uint64_t st = g_seed;
    double worst = 0;
    for (int iter = 0; iter < 400; iter++) {
        struct t_csc g;
        uint64_t n = 1 + t_mix(&st) % (iter % 10 == 0 ? 20 : 3000);
        assert_int_equal(t_csc_random(&g, n, (uint32_t)(t_mix(&st) % 9), t_mix(&st) % 3 == 0, t_mix(&st)), 0);
        struct batch_shape s = {
            .batch_size = 1 + t_mix(&st) % 64, .layers = 1 + (uint32_t)(t_mix(&st) % 4), .nodes = n};
        bool minus = false;
        for (uint32_t k = 0; k < s.layers; k++) {
            s.fanouts[k] = (int64_t)(t_mix(&st) % 8) - 1;
            minus |= s.fanouts[k] < 0;
        }
        /* D and E are given when needed, or at random (they only tighten) */
        s.max_in_degree = minus || t_mix(&st) % 2 ? t_csc_max_in_degree(&g) : BATCH_UNKNOWN;
        s.edges = t_mix(&st) % 2 ? g.e : BATCH_UNKNOWN;
        char err[512], what[256];
        size_t max = batch_max_bytes(&s, err, sizeof err);
        if (!max)
            fail_msg("iteration %d: %s", iter, err);
        uint32_t targets = 1 + (uint32_t)(t_mix(&st) % SL_MIN(s.batch_size, n));
        uint64_t bseed = t_mix(&st);
        snprintf(what, sizeof what, "seed %#" PRIx64 " iteration %d (n %" PRIu64 ", %u layers, B %u)", g_seed, iter, n,
                 s.layers, targets);
        /* exactly the worst-case size, so that any overrun would show (ASan) */
        void *slot = malloc(max), *again = malloc(max);
        struct batch_id id = {.batch = (uint64_t)iter, .epoch = 3, .rank = 1};
        unsigned opts = (unsigned)iter % 4;
        if (t_sample_batch(&g, &s, targets, bseed, &id, opts, slot, max, err, sizeof err) != 0)
            fail_msg("%s: %s", what, err);
        struct batch_view v, u;
        if (batch_view(slot, max, 0, &v, err, sizeof err) != 0)
            fail_msg("%s: %s", what, err);
        assert_true(v.h.bytes <= max);
        worst = SL_MAX(worst, (double)v.h.bytes / (double)max);
        check_against_graph(&v, &g, &s, what);
        /* the same seed through the other writer calls gives the same batch */
        assert_int_equal(t_sample_batch(&g, &s, targets, bseed, &id, opts ^ 3, again, max, err, sizeof err), 0);
        assert_int_equal(batch_view(again, max, 0, &u, err, sizeof err), 0);
        if (t_batch_compare(&v, &u, err, sizeof err) != 0)
            fail_msg("%s: %s", what, err);
        assert_int_equal(v.h.batch, (uint64_t)iter);
        free(slot);
        free(again);
        t_csc_free(&g);
    }
    print_message("largest batch used %.0f%% of its worst case\n", worst * 100);
}

/* ---- damage ----------------------------------------------------------------------------- */

static void test_view_rejects_damage(void **state)
{
    struct t_csc g;
    assert_int_equal(t_csc_random(&g, 200, 4, false, 7), 0);
    struct batch_shape s = shape(8, 2, (int64_t[]){3, 3}, g.n, g.e, BATCH_UNKNOWN);
    size_t max = batch_max_bytes(&s, NULL, 0);
    uint64_t *good = malloc(max), *bad = malloc(max);
    char err[512];
    struct batch_id id = {.batch = 5};
    assert_int_equal(t_sample_batch(&g, &s, 8, 1, &id, 0, good, max, err, sizeof err), 0);
    struct batch_view v;
    assert_int_equal(batch_view(good, max, 0, &v, err, sizeof err), 0);
    assert_true(v.h.e[1] > 0 && v.h.n[2] > v.h.n[1]);
    const struct batch_hdr h0 = v.h;
    enum {
        MAGIC,
        VERSION,
        UNSEALED,
        LAYERS0,
        LAYERS9,
        TARGETS,
        SHRINK,
        GROW,
        BYTES,
        NODES_PAST,
        NODES_ALIGN,
        SRC_WRAP,
        EDGES_HUGE,
        NODES_HUGE,
        OVERLAP,
        SRC_ID,
        INDPTR_DOWN,
        INDPTR_START,
        CASES
    };
    const char *want[CASES] = {"does not hold a batch",
                               "version",
                               "unfinished",
                               "layers is outside",
                               "layers is outside",
                               "targets but n[0]",
                               "counts must grow",
                               "counts must grow",
                               "bytes in use",
                               "nodes at offset",
                               "nodes at offset",
                               "src of block 1 at offset",
                               "src of block 1 at offset",
                               "nodes at offset",
                               "overlap",
                               "source",
                               "indptr decreases",
                               "indptr runs"};
    for (int c = 0; c < CASES; c++) {
        memcpy(bad, good, max);
        struct batch_hdr *h = (struct batch_hdr *)bad;
        uint32_t *ip1 = (uint32_t *)((char *)bad + h0.indptr_off[1]);
        uint32_t *src1 = (uint32_t *)((char *)bad + h0.src_off[1]);
        switch (c) {
        case MAGIC:
            h->magic ^= 1;
            break;
        case VERSION:
            h->version = BATCH_VERSION + 1;
            break;
        case UNSEALED:
            h->flags = BATCH_ALIASED;
            break;
        case LAYERS0:
            h->layers = 0;
            break;
        case LAYERS9:
            h->layers = 9;
            break;
        case TARGETS:
            h->targets = 7;
            break;
        case SHRINK:
            h->n[2] = h->n[1] - 1;
            break;
        case GROW:
            h->n[2] = h->n[1] + h->e[1] + 1;
            break;
        case BYTES:
            h->bytes = max + 8;
            break;
        case NODES_PAST:
            h->nodes_off = max;
            break;
        case NODES_ALIGN:
            h->nodes_off += 4;
            break;
        case SRC_WRAP:
            h->src_off[1] = UINT64_MAX - 7;
            break;
        case EDGES_HUGE:
            h->e[1] = UINT32_MAX;
            break;
        case NODES_HUGE:
            h->n[2] = UINT32_MAX;
            h->e[1] = UINT32_MAX;
            h->src_off[1] = 8;
            break;
        case OVERLAP:
            h->alias_off = h->nodes_off;
            break;
        case SRC_ID:
            src1[h0.e[1] - 1] = h0.n[2];
            break;
        case INDPTR_DOWN:
            ip1[1] = ip1[2] + 1;
            break;
        case INDPTR_START:
            ip1[0] = 1;
            break;
        }
        err[0] = '\0';
        int rc = batch_view(bad, max, 0, &v, err, sizeof err);
        if (rc != -EINVAL || !strstr(err, want[c]))
            fail_msg("damage %d: rc %d '%s', expected '%s'", c, rc, err, want[c]);
        if (c >= SRC_ID) /* damage inside a block passes a header-only check */
            assert_int_equal(batch_view(bad, max, BATCH_VIEW_HEADER_ONLY, &v, err, sizeof err), 0);
    }
    assert_int_equal(batch_view(good, sizeof(struct batch_hdr) - 1, 0, &v, err, sizeof err), -EINVAL);
    assert_int_equal(batch_view(good, h0.bytes - 8, 0, &v, err, sizeof err), -EINVAL); /* slot shorter than bytes */
    assert_non_null(strstr(err, "bytes in use"));

    /* random damage to the header: rejected, or accepted with every array
     * inside the slot (bad is exactly max bytes: ASan sees any overrun) */
    uint64_t st = g_seed;
    int accepted = 0;
    for (int i = 0; i < 20000; i++) {
        memcpy(bad, good, max);
        unsigned char *p = (unsigned char *)bad;
        for (int j = 1 + (int)(t_mix(&st) % 3); j > 0; j--) {
            size_t at = t_mix(&st) % sizeof(struct batch_hdr);
            p[at] = t_mix(&st) % 2 ? (unsigned char)t_mix(&st) : p[at] ^ (unsigned char)(1u << (t_mix(&st) % 8));
        }
        if (batch_view(bad, max, 0, &v, NULL, 0) != 0)
            continue;
        accepted++;
        const char *lo = (const char *)bad + sizeof(struct batch_hdr), *hi = (const char *)bad + max;
        uint32_t nn = batch_nodes(&v);
        assert_true((const char *)v.nodes >= lo && (const char *)(v.nodes + nn) <= hi);
        assert_true((const char *)v.alias >= lo && (const char *)(v.alias + nn) <= hi);
        for (uint32_t k = 0; k < v.h.layers; k++) {
            assert_true((const char *)v.src[k] >= lo && (const char *)(v.src[k] + v.h.e[k]) <= hi);
            assert_true((const char *)(v.indptr[k] + batch_block_dst(&v, k) + 1) <= hi);
            for (uint32_t e = 0; e < v.h.e[k]; e++) /* ids usable as indices: ASan checks the reads */
                g_sink += v.nodes[v.src[k][e]];
        }
    }
    print_message("%d of 20000 damaged headers were still consistent (harmless fields)\n", accepted);
    free(good);
    free(bad);
    t_csc_free(&g);
}

int main(void)
{
    const char *seed = getenv("SLUICE_TEST_SEED");
    g_seed = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL);
    fprintf(stderr, "test_batch: seed %#" PRIx64 " (SLUICE_TEST_SEED to repeat)\n", g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_max_bytes_by_hand),   cmocka_unit_test(test_max_bytes_refused),
        cmocka_unit_test(test_worst_case_is_exact), cmocka_unit_test(test_writer_checks),
        cmocka_unit_test(test_sampled_batches_fit), cmocka_unit_test(test_view_rejects_damage),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
