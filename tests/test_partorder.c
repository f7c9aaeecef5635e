/* test_partorder.c - the partition buffer's ordering (core/partorder.h):
 * for every ordering and coverage over a sweep of (p, c, l, k, seed), the
 * states never exceed c and never hold a partition twice, cover what they
 * must, and swap exactly as many partitions as the plan and
 * po_expected_swaps say (recounted here from the slot table); every target
 * is assigned exactly once to a state holding its partition; seeds make
 * it all deterministic; BETA matches Marius's closed form; the auto-tuning
 * follows MariusGNN §6. */
#include <errno.h>

#include "t_util.h"
#include "core/partorder.h"
#include "core/util.h"

static char err[1024];

/* Swaps recounted from the table: slots whose partition changed to
 * another one since the state before. */
static uint64_t recount_swaps(const struct po_plan *pl)
{
    uint64_t n = 0;
    for (uint32_t s = 1; s < pl->states; s++)
        for (uint32_t j = 0; j < pl->slots; j++)
            n += po_slot(pl, s, j) != PO_EMPTY && po_slot(pl, s, j) != po_slot(pl, s - 1, j);
    return n;
}

static const char *desc(const struct po_params *pp)
{
    static char s[160];
    snprintf(s, sizeof s, "p=%u c=%u l=%u k=%u f=%u order=%s cover=%s seed=%llu", pp->parts, pp->slots, pp->logical,
             pp->train_parts, pp->fixed_parts, po_order_name(pp->order), po_cover_name(pp->cover), (unsigned long long)pp->seed);
    return s;
}

static void pfail(const struct po_params *pp, const char *what)
{
    fail_msg("%s: %s", desc(pp), what);
}

/* Checks one plan's states; returns false when the parameters are refused. */
static bool check_plan(const struct po_params *pp, struct po_plan *pl)
{
    int rc = po_plan_build(pl, pp, err, sizeof err);
    if (rc == -EINVAL)
        return false;
    if (rc != 0)
        pfail(pp, err);
    uint32_t p = pp->parts, c = pp->slots;
    unsigned char *seen = calloc(p, 1), *pair = calloc((size_t)p * p, 1);
    uint32_t *in = malloc(c * sizeof *in);
    assert_non_null(seen);
    assert_non_null(pair);
    for (uint32_t s = 0; s < pl->states; s++) {
        uint32_t n = 0;
        for (uint32_t j = 0; j < c; j++) {
            uint32_t q = po_slot(pl, s, j);
            if (q == PO_EMPTY)
                continue;
            if (q >= p)
                pfail(pp, "partition out of range");
            for (uint32_t i = 0; i < n; i++)
                if (in[i] == q)
                    pfail(pp, "a partition twice in one state");
            in[n++] = q;
            seen[q] = 1;
        }
        if (n > c || n == 0)
            pfail(pp, "state size outside 1..c");
        for (uint32_t a = 0; a < n; a++)
            for (uint32_t b = 0; b < n; b++)
                pair[(size_t)in[a] * p + in[b]] = 1;
    }
    if (pl->single) {
        for (uint32_t q = 0; q < pp->train_parts; q++)
            if (po_slot(pl, 0, q) != q)
                pfail(pp, "the k < c state does not start with the training partitions");
        if (pl->states != 1 || pl->swaps != 0)
            pfail(pp, "the k < c rule makes one state and no swaps");
    } else {
        for (uint32_t q = 0; q < p; q++)
            if (!seen[q])
                pfail(pp, "a partition is in no state");
        if (pp->cover == PO_COVER_PAIRS)
            for (uint32_t a = 0; a < p; a++)
                for (uint32_t b = 0; b < p; b++)
                    if (!pair[(size_t)a * p + b])
                        pfail(pp, "a pair of partitions never meets");
    }
    uint64_t swaps = recount_swaps(pl);
    if (swaps != pl->swaps)
        pfail(pp, "the plan's swap count differs from its table");
    if (swaps != po_expected_swaps(pp))
        pfail(pp, "po_expected_swaps differs from the plan");
    uint64_t sum = 0;
    for (uint32_t s = 0; s < pl->states; s++)
        sum += po_state_loads(pl, s);
    if (sum != swaps + pl->first_loads)
        pfail(pp, "po_state_loads does not add up");
    if (!pl->single) {
        uint64_t lb = pp->cover == PO_COVER_PAIRS ? po_lower_bound_pairs(p, c) : po_lower_bound_nodes(p, c);
        if (swaps < lb)
            pfail(pp, "fewer swaps than the lower bound");
    }
    free(seen);
    free(pair);
    free(in);
    return true;
}

/* n targets with ids spread out, each in a partition below k. */
static void make_targets(uint64_t n, uint32_t k, uint64_t seed, uint64_t *id, uint32_t *part)
{
    uint64_t s = seed;
    for (uint64_t i = 0; i < n; i++) {
        id[i] = i * 7 + 3;
        part[i] = (uint32_t)(sl_splitmix64(&s) % k);
    }
}

static void check_assign(const struct po_params *pp, struct po_plan *pl, uint64_t n)
{
    uint32_t k = pp->train_parts ? pp->train_parts : pp->parts;
    uint64_t *id = malloc(n * sizeof *id);
    uint32_t *part = malloc(n * sizeof *part);
    make_targets(n, k, pp->seed + 1, id, part);
    assert_int_equal(po_plan_assign(pl, pp->order, pp->seed, id, part, n, err, sizeof err), 0);
    if (pl->ntargets != n || pl->target_off[pl->states] != n)
        pfail(pp, "not every target assigned");
    /* exactly once: ids are i*7+3, so mark by index */
    unsigned char *got = calloc(n, 1);
    for (uint32_t s = 0; s < pl->states; s++)
        for (uint64_t t = pl->target_off[s]; t < pl->target_off[s + 1]; t++) {
            uint64_t i = (pl->targets[t] - 3) / 7;
            if (i >= n || got[i])
                pfail(pp, "a target twice or unknown");
            got[i] = 1;
            bool held = false;
            for (uint32_t j = 0; j < pl->slots; j++)
                held |= po_slot(pl, s, j) == part[i];
            if (!held)
                pfail(pp, "a target assigned to a state without its partition");
            if (pp->order == PO_ORDER_BETA) { /* greedy: the first state holding it */
                for (uint32_t e = 0; e < s; e++)
                    for (uint32_t j = 0; j < pl->slots; j++)
                        if (po_slot(pl, e, j) == part[i])
                            pfail(pp, "beta did not assign a target to the first state holding it");
            }
        }
    for (uint64_t i = 0; i < n; i++)
        if (!got[i])
            pfail(pp, "a target in no state");
    free(got);
    free(id);
    free(part);
}

static void test_sweep(void **state)
{
    (void)state;
    unsigned plans = 0, refused = 0;
    for (uint32_t p = 1; p <= 24; p++)
        for (uint32_t c = 1; c <= p; c++)
            for (unsigned o = 0; o < PO_ORDERS; o++)
                for (unsigned cv = 0; cv < 2; cv++)
                    for (uint32_t l = 0; l <= p; l += (p > 8 ? 5 : 1))
                        for (uint32_t k = 0; k <= p; k += (p > 6 ? 3 : 1)) {
                            struct po_params pp = {.parts = p, .slots = c, .logical = l, .train_parts = k,
                                                   .order = o, .cover = cv, .seed = p * 1000u + c * 10u + l};
                            struct po_plan pl;
                            if (!check_plan(&pp, &pl)) {
                                refused++;
                                continue;
                            }
                            check_assign(&pp, &pl, 500);
                            po_plan_free(&pl);
                            plans++;
                        }
    print_message("%u plans checked, %u parameter sets refused\n", plans, refused);
    assert_true(plans > 5000);
}

static void test_beta_closed_form(void **state)
{
    (void)state;
    for (uint32_t p = 2; p <= 64; p++)
        for (uint32_t c = 2; c <= p; c++) {
            struct po_params pp = {.parts = p, .slots = c, .order = PO_ORDER_BETA, .cover = PO_COVER_PAIRS};
            struct po_plan pl;
            assert_int_equal(po_plan_build(&pl, &pp, err, sizeof err), 0);
            if (pl.swaps != po_beta_swaps(p, c))
                fail_msg("p=%u c=%u: beta made %llu swaps, eq. 3 says %llu", p, c, (unsigned long long)pl.swaps,
                         (unsigned long long)po_beta_swaps(p, c));
            po_plan_free(&pl);
        }
    /* the paper's example: p=6, c=3, 7 swaps; lower bound ceil((15-3)/2) = 6 */
    assert_int_equal(po_beta_swaps(6, 3), 7);
    assert_int_equal(po_lower_bound_pairs(6, 3), 6);
}

/* With groups of equal size g, COMET over l logical partitions swaps g
 * times what BETA (pairs) or a sweep (nodes) does over l. */
static void test_comet_groups(void **state)
{
    (void)state;
    struct {
        uint32_t p, c;
    } cases[] = {{16, 4}, {32, 8}, {64, 8}, {60, 6}, {48, 12}};
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        uint32_t p = cases[i].p, c = cases[i].c, l = po_auto_logical(p, c);
        assert_int_equal(l, 2 * p / c); /* MariusGNN: l = 2p/c when it divides */
        uint32_t g = p / l;
        for (unsigned cv = 0; cv < 2; cv++) {
            struct po_params pp = {.parts = p, .slots = c, .order = PO_ORDER_COMET, .cover = cv, .seed = 9};
            struct po_plan pl;
            assert_int_equal(po_plan_build(&pl, &pp, err, sizeof err), 0);
            assert_int_equal(pl.logical, l);
            assert_int_equal(pl.logical_slots, 2);
            uint64_t want = cv == PO_COVER_PAIRS ? g * po_beta_swaps(l, 2) : (uint64_t)g * (l - 2);
            assert_int_equal(pl.swaps, want);
            po_plan_free(&pl);
        }
    }
}

static void test_lower_bound_values(void **state)
{
    (void)state;
    /* (p(p-1)/2 - c(c-1)/2) / (c-1), rounded up */
    assert_int_equal(po_lower_bound_pairs(16, 4), 38);
    assert_int_equal(po_lower_bound_pairs(10, 3), 21); /* (45 - 3) / 2 */
    assert_int_equal(po_lower_bound_pairs(7, 3), 9);   /* (21 - 3) / 2 */
    assert_int_equal(po_lower_bound_pairs(8, 3), 13);  /* (28 - 3) / 2 = 12.5 */
    assert_int_equal(po_lower_bound_pairs(5, 5), 0);
    assert_int_equal(po_lower_bound_nodes(10, 3), 7);
}

static void test_deterministic(void **state)
{
    (void)state;
    enum { N = 20000 };
    uint64_t *id = malloc(N * sizeof *id);
    uint32_t *part = malloc(N * sizeof *part);
    make_targets(N, 40, 5, id, part);
    for (unsigned cv = 0; cv < 2; cv++) {
        struct po_params pp = {.parts = 40, .slots = 8, .order = PO_ORDER_COMET, .cover = cv, .seed = 77};
        struct po_plan a, b, d;
        assert_int_equal(po_plan_build(&a, &pp, err, sizeof err), 0);
        assert_int_equal(po_plan_build(&b, &pp, err, sizeof err), 0);
        assert_int_equal(po_plan_assign(&a, pp.order, 77, id, part, N, err, sizeof err), 0);
        /* the same targets in reverse order land in the same states */
        uint64_t *rid = malloc(N * sizeof *rid);
        uint32_t *rpart = malloc(N * sizeof *rpart);
        for (uint64_t i = 0; i < N; i++) {
            rid[i] = id[N - 1 - i];
            rpart[i] = part[N - 1 - i];
        }
        assert_int_equal(po_plan_assign(&b, pp.order, 77, rid, rpart, N, err, sizeof err), 0);
        assert_int_equal(a.states, b.states);
        assert_memory_equal(a.slot, b.slot, (size_t)a.states * a.slots * sizeof *a.slot);
        assert_memory_equal(a.target_off, b.target_off, ((size_t)a.states + 1) * sizeof *a.target_off);
        for (uint32_t s = 0; s < a.states; s++) { /* same sets; order within a state follows the input */
            uint64_t lo = a.target_off[s], n = a.target_off[s + 1] - lo;
            for (uint64_t t = 0; t < n; t++)
                assert_int_equal(a.targets[lo + t], b.targets[lo + n - 1 - t]);
        }
        /* another seed: another grouping and another assignment */
        pp.seed = 78;
        assert_int_equal(po_plan_build(&d, &pp, err, sizeof err), 0);
        assert_int_equal(d.states, a.states);
        assert_true(memcmp(a.slot, d.slot, (size_t)a.states * a.slots * sizeof *a.slot) != 0);
        /* deferred assignment balances: every state trains something, and
         * no state more than twice its share */
        for (uint32_t s = 0; s < a.states; s++) {
            uint64_t n = a.target_off[s + 1] - a.target_off[s];
            assert_true(n > 0);
            if (cv == PO_COVER_PAIRS)
                assert_true(n < 2 * N / a.states);
        }
        free(rid);
        free(rpart);
        po_plan_free(&a);
        po_plan_free(&b);
        po_plan_free(&d);
    }
    free(id);
    free(part);
}

/* BETA's greedy assignment: after S_0 each state trains only the
 * partition it just loaded (the correlation COMET avoids). */
static void test_beta_correlated(void **state)
{
    (void)state;
    enum { N = 5000 };
    uint64_t id[N];
    uint32_t part[N];
    make_targets(N, 12, 3, id, part);
    struct po_params pp = {.parts = 12, .slots = 4, .order = PO_ORDER_BETA, .cover = PO_COVER_NODES};
    struct po_plan pl;
    assert_int_equal(po_plan_build(&pl, &pp, err, sizeof err), 0);
    assert_int_equal(pl.states, 1 + 12 - 4);
    assert_int_equal(pl.swaps, 8);
    assert_int_equal(po_plan_assign(&pl, pp.order, 0, id, part, N, err, sizeof err), 0);
    for (uint32_t s = 1; s < pl.states; s++)
        for (uint64_t t = pl.target_off[s]; t < pl.target_off[s + 1]; t++)
            assert_int_equal(part[(pl.targets[t] - 3) / 7], po_slot(&pl, s, 3));
    po_plan_free(&pl);
}

/* MariusGNN's k < c rule: one state, the training partitions and c - k
 * random others; across epochs only those others change. */
static void test_single(void **state)
{
    (void)state;
    struct po_params pp = {.parts = 50, .slots = 10, .train_parts = 3, .order = PO_ORDER_COMET, .seed = 1};
    struct po_plan a, b;
    assert_int_equal(po_plan_build(&a, &pp, err, sizeof err), 0);
    pp.seed = 2;
    assert_int_equal(po_plan_build(&b, &pp, err, sizeof err), 0);
    assert_true(a.single && a.states == 1 && a.swaps == 0 && a.first_loads == 10);
    uint64_t carry = po_epoch_carry_loads(&a, &b);
    assert_true(carry <= 7);
    assert_true(carry > 0); /* seeds 1 and 2 draw different others (deterministic) */
    assert_int_equal(po_epoch_carry_loads(&a, &a), 0);
    /* a target outside the training partitions is refused, naming it */
    uint64_t id[2] = {5, 6};
    uint32_t part[2] = {1, 49};
    bool held49 = false;
    for (uint32_t j = 0; j < 10; j++)
        held49 |= po_slot(&a, 0, j) == 49;
    if (!held49) {
        assert_int_equal(po_plan_assign(&a, PO_ORDER_COMET, 1, id, part, 2, err, sizeof err), -EINVAL);
        assert_non_null(strstr(err, "target 6"));
    }
    part[1] = 70;
    assert_int_equal(po_plan_assign(&a, PO_ORDER_COMET, 1, id, part, 2, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "outside"));
    po_plan_free(&a);
    po_plan_free(&b);
}

/* The rule with fixed_parts f (pipeline.partition_fill): partitions
 * 0..min(max(k, f), c) - 1 hold the first slots, the rest are drawn as
 * before; every state within c, every target once; with f >= c the state
 * is 0..c-1 whatever the seed, so nothing is read after the first epoch. */
static void test_single_fixed(void **state)
{
    (void)state;
    unsigned plans = 0;
    for (uint32_t p = 2; p <= 40; p++)
        for (uint32_t c = 2; c <= p; c++)
            for (uint32_t k = 1; k < c; k++) {
                const uint32_t fs[] = {0, 1, k, k + 1, c - 1, c, c + 5};
                for (unsigned i = 0; i < sizeof fs / sizeof *fs; i++) {
                    struct po_params pp = {.parts = p, .slots = c, .train_parts = k, .fixed_parts = fs[i],
                                           .order = PO_ORDER_COMET, .seed = p * 977u + c * 31u + k};
                    struct po_plan pl, other;
                    if (!check_plan(&pp, &pl))
                        pfail(&pp, "refused");
                    if (!pl.single || pl.states != 1 || pl.swaps != 0)
                        pfail(&pp, "not one state");
                    uint32_t fixed = SL_MIN(SL_MAX(k, fs[i]), c);
                    for (uint32_t j = 0; j < fixed; j++)
                        if (po_slot(&pl, 0, j) != j)
                            pfail(&pp, "a fixed partition not in its slot");
                    check_assign(&pp, &pl, 300);
                    pp.seed++;
                    assert_int_equal(po_plan_build(&other, &pp, err, sizeof err), 0);
                    if (fixed == c && po_epoch_carry_loads(&pl, &other) != 0)
                        pfail(&pp, "the first c partitions changed with the seed");
                    po_plan_free(&other);
                    po_plan_free(&pl);
                    plans++;
                }
            }
    print_message("%u plans with fixed partitions checked\n", plans);
}

static void test_refused(void **state)
{
    (void)state;
    struct po_plan pl;
    struct po_params bad[] = {
        {.parts = 0, .slots = 1},
        {.parts = 4, .slots = 5},
        {.parts = 4, .slots = 0},
        {.parts = 4, .slots = 1, .cover = PO_COVER_PAIRS},
        {.parts = 8, .slots = 4, .logical = 2, .order = PO_ORDER_COMET}, /* groups of 4 leave c_l = 1 < 2 for pairs? nodes ok */
        {.parts = 8, .slots = 4, .logical = 9},
        {.parts = 8, .slots = 4, .train_parts = 9},
    };
    bad[4].cover = PO_COVER_PAIRS;
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        err[0] = 0;
        assert_int_equal(po_plan_build(&pl, &bad[i], err, sizeof err), -EINVAL);
        assert_true(strlen(err) > 10);
        po_plan_free(&pl);
    }
    enum po_order o;
    assert_int_equal(po_order_parse("comet", &o), 0);
    assert_int_equal(o, PO_ORDER_COMET);
    assert_int_equal(po_order_parse("beta", &o), 0);
    assert_int_equal(o, PO_ORDER_BETA);
    assert_int_equal(po_order_parse("hilbert", &o), -EINVAL);
}

static void test_tune(void **state)
{
    (void)state;
    /* 4M nodes of 512-byte rows (2 GiB), 64M edges of 4 bytes (256 MiB),
     * D = 1 MiB: NO/D = 2048, sqrt(EO/D) = 16, so p = 16 partitions of
     * 128 MiB and buckets of 1 MiB. A 1 GiB budget less 64 MiB: c*128 MiB +
     * c^2 MiB <= 960 MiB -> c = 7. */
    struct po_tune_in in = {.nodes = 4u << 20, .edges = 64u << 20, .row_bytes = 512, .edge_bytes = 4, .edge_copies = 1,
                            .train_nodes = 100000, .mem_bytes = 1ull << 30, .reserve_bytes = 64u << 20,
                            .min_read = 1u << 20, .cover = PO_COVER_NODES};
    struct po_tune t;
    assert_int_equal(po_tune(&in, &t, err, sizeof err), 0);
    assert_int_equal(t.parts, 16);
    assert_int_equal(t.part_bytes, 128u << 20);
    assert_int_equal(t.bucket_bytes, 1u << 20);
    assert_int_equal(t.slots, 7);
    assert_int_equal(t.buffer_bytes, 7ull * (128u << 20) + 49ull * (1u << 20));
    assert_int_equal(t.train_parts, 1); /* 100k training nodes in partitions of 256k */
    assert_int_equal(t.logical, po_auto_logical(16, 7));
    assert_int_equal(t.logical, 6); /* groups of ceil(16/6) = 3, c_l = 2 */
    assert_int_equal(t.logical_slots, 2);
    assert_false(t.in_memory);
    /* MariusGNN keeps two sorted copies of the edges: less room */
    in.edge_copies = 2;
    assert_int_equal(po_tune(&in, &t, err, sizeof err), 0);
    assert_int_equal(t.slots, 6); /* 6*128 + 72 = 840; 7*128 + 98 = 994 > 960 */
    /* everything fits */
    in.mem_bytes = 8ull << 30;
    assert_int_equal(po_tune(&in, &t, err, sizeof err), 0);
    assert_true(t.in_memory);
    assert_int_equal(t.slots, t.parts);
    /* not even one partition fits */
    in.mem_bytes = 100u << 20;
    assert_int_equal(po_tune(&in, &t, err, sizeof err), -ENOSPC);
    assert_non_null(strstr(err, "raise the memory budget"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sweep),          cmocka_unit_test(test_beta_closed_form),
        cmocka_unit_test(test_comet_groups),   cmocka_unit_test(test_lower_bound_values),
        cmocka_unit_test(test_deterministic),  cmocka_unit_test(test_beta_correlated),
        cmocka_unit_test(test_single),         cmocka_unit_test(test_single_fixed),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_tune),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
