/* test_schedule.c - stages/schedule: the default schedule ("shuffle")
 * hands out exactly the batches the pre-schedule code did (checksums
 * pinned from that code for several seeds, ranks and world sizes), every
 * target exactly once per pass across ranks, epoch boundaries and the
 * order of the passes as documented, the same batches whichever cursor
 * asks in whichever order (what a lookahead relies on), errors at the
 * ends; and a second table plugged in drives a cursor's iteration. */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>

#include "core/util.h"
#include "stages/sampler.h"
#include "stages/schedule.h"

static char err[1024];

/* The runs the checksums were pinned for. */
static const struct tcase {
    uint64_t n[BATCH_SPLITS];
    uint32_t ranks;
    uint64_t batch_size;
    uint32_t epochs, eval_every;
    uint64_t seed;
} cases[] = {
    {{1001, 250, 99}, 1, 64, 3, 1, 42},
    {{1001, 250, 99}, 3, 10, 5, 2, 7},
    {{500, 0, 37}, 2, 33, 4, 3, 2026},
    {{77, 13, 0}, 4, 8, 2, 1, 0},
};

/* Per case and rank: the run's length, the first batch of the last epoch
 * and a checksum of every batch (see fold_batch), as computed by the
 * batch stream of stages/sampler.c before the schedule existed (commit
 * 7e1cfbf: sampler_stream_at, sampler_epoch_share, sampler_pos_seed). */
static const struct pin {
    size_t c;
    uint32_t rank;
    uint64_t len, last_start, hash;
} pins[] = {
    {0, 0, 62, 40, 0xcfafd6e447720934ull},   {1, 0, 201, 154, 0xd119255456029222ull},
    {1, 1, 201, 154, 0x7643f7eac494c59dull}, {1, 2, 201, 154, 0xa83aecfec938b986ull},
    {2, 0, 33, 24, 0xcf71b42af7f472daull},   {2, 1, 33, 24, 0xee8650c1875041f0ull},
    {3, 0, 8, 4, 0x786b99d5bbc455adull},     {3, 1, 8, 4, 0x94d87c6cd8f18a81ull},
    {3, 2, 8, 4, 0xcc7245badbc30731ull},     {3, 3, 8, 4, 0x52acb4475596bd17ull},
};

static uint64_t fold(uint64_t h, uint64_t x)
{
    h ^= x;
    h *= 0x100000001B3ull;
    return h ^ (h >> 29);
}

static uint64_t fold_batch(uint64_t h, const struct schedule_batch *b)
{
    h = fold(h, b->pos.g);
    h = fold(h, b->pos.epoch);
    h = fold(h, b->pos.split);
    h = fold(h, b->pos.k);
    h = fold(h, b->pos.targets);
    h = fold(h, b->seed);
    for (uint32_t t = 0; t < b->pos.targets; t++)
        h = fold(h, b->targets[t]);
    return h;
}

/* The ids of a case: split k holds 3j + k + 1000k, so splits are disjoint. */
struct tids {
    uint64_t *v[BATCH_SPLITS];
};

static void ids_make(struct tids *t, const struct tcase *c)
{
    for (int k = 0; k < BATCH_SPLITS; k++) {
        t->v[k] = malloc((c->n[k] + 1) * sizeof(uint64_t));
        assert_non_null(t->v[k]);
        for (uint64_t j = 0; j < c->n[k]; j++)
            t->v[k][j] = 3 * j + (uint64_t)k + 1000 * (uint64_t)k;
    }
}

static void ids_free(struct tids *t)
{
    for (int k = 0; k < BATCH_SPLITS; k++)
        free(t->v[k]);
}

static void open_case(struct schedule *s, const struct schedule_ops *ops, const struct tcase *c, uint32_t rank,
                      const struct tids *ids)
{
    struct schedule_params p = {.rank = rank,
                                .ranks = c->ranks,
                                .batch_size = c->batch_size,
                                .epochs = c->epochs,
                                .eval_every = c->eval_every,
                                .seed = c->seed};
    memcpy(p.split_n, c->n, sizeof p.split_n);
    if (schedule_open(s, ops, &p, err, sizeof err))
        fail_msg("open: %s", err);
    if (ids && schedule_set_ids(s, (const uint64_t *const *)ids->v, err, sizeof err))
        fail_msg("set_ids: %s", err);
}

static void test_pinned(void **state)
{
    (void)state;
    for (size_t i = 0; i < SL_ARRAY_LEN(pins); i++) {
        const struct pin *pn = &pins[i];
        const struct tcase *c = &cases[pn->c];
        struct tids ids;
        ids_make(&ids, c);
        struct schedule s;
        open_case(&s, schedule_find(SCHEDULE_DEFAULT), c, pn->rank, &ids);
        struct schedule_cursor cur;
        schedule_cursor_init(&cur, &s, 0);
        struct schedule_batch b;
        uint64_t h = 0xcbf29ce484222325ull, n = 0;
        int rc;
        while ((rc = schedule_next(&cur, &b, err, sizeof err)) == 0) {
            h = fold_batch(h, &b);
            n++;
        }
        assert_int_equal(rc, -ENODATA);
        if (n != pn->len || schedule_len(&s) != pn->len || schedule_epoch_start(&s, c->epochs - 1) != pn->last_start ||
            h != pn->hash)
            fail_msg("case %zu rank %u: %" PRIu64 " batches, last epoch at %" PRIu64 ", hash 0x%016" PRIx64
                     "; pinned %" PRIu64 ", %" PRIu64 ", 0x%016" PRIx64,
                     pn->c, pn->rank, n, schedule_epoch_start(&s, c->epochs - 1), h, pn->len, pn->last_start, pn->hash);
        schedule_cursor_free(&cur);
        schedule_free(&s);
        ids_free(&ids);
    }
}

/* Every pass delivers every id of its split exactly once over all ranks;
 * epochs start where the table says; passes come train, val, test. */
static void test_coverage(void **state)
{
    (void)state;
    for (size_t ci = 0; ci < SL_ARRAY_LEN(cases); ci++) {
        const struct tcase *c = &cases[ci];
        struct tids ids;
        ids_make(&ids, c);
        /* times[e][k][id]: deliveries of id in epoch e's pass over split k */
        size_t span = 3 * 1001 + 2000 + 3;
        uint32_t *times = calloc((size_t)c->epochs * BATCH_SPLITS * span, sizeof *times);
        assert_non_null(times);
        uint64_t steps = 0, most = 0;
        for (uint32_t r = 0; r < c->ranks; r++) {
            struct schedule s;
            open_case(&s, NULL, c, r, &ids);
            struct schedule_cursor cur;
            schedule_cursor_init(&cur, &s, 0);
            struct schedule_batch b;
            struct schedule_pos prev = {0};
            uint64_t seen[64][BATCH_SPLITS] = {{0}}, seen_t[64][BATCH_SPLITS] = {{0}};
            for (uint64_t g = 0; g < schedule_len(&s); g++) {
                assert_int_equal(schedule_next(&cur, &b, err, sizeof err), 0);
                const struct schedule_pos *p = &b.pos;
                assert_int_equal(p->g, g);
                assert_true(p->epoch < c->epochs && p->split < BATCH_SPLITS);
                assert_true(p->targets >= 1 && p->targets <= c->batch_size);
                assert_int_equal(p->first, p->k * c->batch_size);
                if (g == schedule_epoch_start(&s, p->epoch))
                    assert_true(g == 0 || p->epoch == prev.epoch + 1);
                else
                    assert_true(g > 0 && p->epoch == prev.epoch &&
                                (p->split > prev.split || (p->split == prev.split && p->k == prev.k + 1)));
                assert_true(g >= schedule_epoch_start(&s, p->epoch) && g < schedule_epoch_start(&s, p->epoch + 1));
                if (p->split != BATCH_TRAIN)
                    assert_int_equal(b.seed,
                                     sampler_batch_seed(c->seed, p->epoch, r, ((uint64_t)p->split << 56) | p->k));
                else
                    assert_int_equal(b.seed, sampler_batch_seed(c->seed, p->epoch, r, p->k));
                for (uint32_t t = 0; t < p->targets; t++)
                    times[((size_t)p->epoch * BATCH_SPLITS + p->split) * span + b.targets[t]]++;
                seen[p->epoch][p->split]++;
                seen_t[p->epoch][p->split] += p->targets;
                prev = *p;
            }
            assert_int_equal(schedule_next(&cur, &b, err, sizeof err), -ENODATA);
            for (uint32_t e = 0; e < c->epochs; e++) {
                bool eval = c->n[BATCH_VAL] && ((e + 1) % c->eval_every == 0 || e + 1 == c->epochs);
                for (uint32_t k = 0; k < BATCH_SPLITS; k++) {
                    assert_int_equal(seen[e][k], schedule_pass_batches(&s, e, k));
                    assert_int_equal(seen_t[e][k], schedule_pass_targets(&s, e, k));
                }
                assert_int_equal(seen_t[e][BATCH_TRAIN], schedule_share_size(c->n[BATCH_TRAIN], r, c->ranks));
                assert_true((seen[e][BATCH_VAL] > 0) == eval);
                assert_true((seen[e][BATCH_TEST] > 0) == (e + 1 == c->epochs && c->n[BATCH_TEST] > 0));
            }
            steps = schedule_steps(&s);
            most = SL_MAX(most, seen[0][BATCH_TRAIN]);
            schedule_cursor_free(&cur);
            schedule_free(&s);
        }
        assert_int_equal(steps, most); /* the largest rank's training batches */
        for (uint32_t e = 0; e < c->epochs; e++)
            for (uint32_t k = 0; k < BATCH_SPLITS; k++) {
                bool pass = k == BATCH_TRAIN ||
                            (k == BATCH_VAL && ((e + 1) % c->eval_every == 0 || e + 1 == c->epochs)) ||
                            (k == BATCH_TEST && e + 1 == c->epochs);
                for (uint64_t j = 0; j < c->n[k]; j++) {
                    uint32_t got = times[((size_t)e * BATCH_SPLITS + k) * span + ids.v[k][j]];
                    if (got != (pass ? 1u : 0u))
                        fail_msg("case %zu epoch %u split %u: id %" PRIu64 " delivered %u times", ci, e, k, ids.v[k][j],
                                 got);
                }
            }
        free(times);
        ids_free(&ids);
    }
}

/* Any cursor, any order: a lookahead cursor peeking ahead and one reading
 * backwards agree with a forward pass batch for batch. */
static void test_random_access(void **state)
{
    (void)state;
    const struct tcase *c = &cases[1];
    struct tids ids;
    ids_make(&ids, c);
    struct schedule s;
    open_case(&s, NULL, c, 2, &ids);
    uint64_t len = schedule_len(&s);
    uint64_t *fwd = calloc(len, sizeof *fwd);
    assert_non_null(fwd);
    struct schedule_cursor a, peek, back;
    schedule_cursor_init(&a, &s, 0);
    schedule_cursor_init(&peek, &s, 0);
    schedule_cursor_init(&back, &s, 0);
    struct schedule_batch b;
    for (uint64_t g = 0; g < len; g++) {
        assert_int_equal(schedule_batch(&a, g, &b, err, sizeof err), 0);
        fwd[g] = fold_batch(0, &b);
    }
    for (uint64_t g = 0; g < len; g++) { /* a window of 7 ahead, crossing epochs */
        for (uint64_t k = g; k < len && k < g + 7; k++) {
            assert_int_equal(schedule_batch(&peek, k, &b, err, sizeof err), 0);
            assert_true(fold_batch(0, &b) == fwd[k]);
        }
        assert_int_equal(schedule_batch(&back, len - 1 - g, &b, err, sizeof err), 0);
        assert_true(fold_batch(0, &b) == fwd[len - 1 - g]);
    }
    /* position and seed need no targets: a schedule without ids agrees */
    struct schedule bare;
    open_case(&bare, NULL, c, 2, NULL);
    for (uint64_t g = 0; g < len; g++) {
        struct schedule_pos p;
        schedule_at(&bare, g, &p);
        assert_int_equal(schedule_batch(&a, g, &b, err, sizeof err), 0);
        assert_true(p.epoch == b.pos.epoch && p.split == b.pos.split && p.k == b.pos.k && p.targets == b.pos.targets);
        assert_true(schedule_seed(&bare, &p) == b.seed);
    }
    /* the ends */
    assert_int_equal(schedule_batch(&a, len, &b, err, sizeof err), -ERANGE);
    struct schedule_cursor nb;
    schedule_cursor_init(&nb, &bare, 0);
    assert_int_equal(schedule_batch(&nb, 0, &b, err, sizeof err), -EINVAL); /* no targets loaded */
    schedule_cursor_free(&nb);
    schedule_cursor_init(&nb, &s, len - 1);
    assert_int_equal(schedule_next(&nb, &b, err, sizeof err), 0);
    assert_int_equal(b.pos.g, len - 1);
    assert_int_equal(schedule_next(&nb, &b, err, sizeof err), -ENODATA);
    schedule_cursor_free(&nb);
    schedule_free(&bare);
    schedule_cursor_free(&a);
    schedule_cursor_free(&peek);
    schedule_cursor_free(&back);
    schedule_free(&s);
    free(fwd);
    ids_free(&ids);
}

static void test_params(void **state)
{
    (void)state;
    struct schedule s;
    struct schedule_params p = {.split_n = {10}, .rank = 0, .ranks = 1, .batch_size = 4, .epochs = 2, .eval_every = 1};
    struct schedule_params bad[] = {p, p, p, p, p};
    bad[0].epochs = 0;
    bad[1].batch_size = 0;
    bad[2].rank = 1;
    bad[3].ranks = 0;
    bad[4].eval_every = 0;
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        assert_int_equal(schedule_open(&s, NULL, &bad[i], err, sizeof err), -EINVAL);
        schedule_free(&s); /* a failed open leaves a freeable schedule */
    }
    assert_int_equal(schedule_open(&s, NULL, &p, err, sizeof err), 0);
    assert_int_equal(schedule_len(&s), 6);
    assert_int_equal(schedule_epoch_start(&s, 1), 3);
    assert_int_equal(schedule_epoch_start(&s, 2), 6);
    assert_int_equal(schedule_pass_batches(&s, 0, BATCH_VAL), 0);
    assert_int_equal(schedule_pass_batches(&s, 5, BATCH_TRAIN), 0); /* past the last epoch */
    assert_int_equal(schedule_pass_targets(&s, 1, BATCH_TRAIN), 10);
    schedule_free(&s);
    assert_ptr_equal(schedule_find("shuffle"), &schedule_shuffle_ops);
    assert_ptr_equal(schedule_find(SCHEDULE_DEFAULT), &schedule_shuffle_ops);
    assert_null(schedule_find("no-such-schedule"));
    assert_null(schedule_find(NULL));
    /* set_ids wants every non-empty split */
    assert_int_equal(schedule_open(&s, NULL,
                                   &(struct schedule_params){
                                       .split_n = {10, 5}, .ranks = 1, .batch_size = 4, .epochs = 1, .eval_every = 1},
                                   err, sizeof err),
                     0);
    uint64_t ten[10] = {0};
    assert_int_equal(schedule_set_ids(&s, (const uint64_t *const[BATCH_SPLITS]){ten}, err, sizeof err), -EINVAL);
    schedule_free(&s);
}

/* ---- a second table ------------------------------------------------------------------------ */

/* "reverse": one training pass per epoch, no evaluation; epoch e takes
 * the whole training split (every rank the same) rotated by e, back to
 * front, in batches of batch_size; seed = g * 1000 + rank. */
static int rev_opened, rev_prepared, rev_orders, rev_freed;

static int rev_open(struct schedule *s, char *e, size_t el)
{
    (void)e;
    (void)el;
    uint64_t nb = schedule_batch_count(s->p.split_n[BATCH_TRAIN], s->p.batch_size);
    for (uint32_t ep = 0; ep < s->p.epochs; ep++) {
        s->epoch[ep].start = ep * nb;
        s->epoch[ep].batches[BATCH_TRAIN] = nb;
        s->epoch[ep].targets[BATCH_TRAIN] = s->p.split_n[BATCH_TRAIN];
    }
    s->len = nb * s->p.epochs;
    s->steps = nb;
    rev_opened++;
    return 0;
}

static int rev_prepare(struct schedule *s, char *e, size_t el)
{
    (void)s;
    (void)e;
    (void)el;
    rev_prepared++;
    return 0;
}

static void rev_at(const struct schedule *s, uint64_t g, struct schedule_pos *p)
{
    uint64_t nb = s->epoch[0].batches[BATCH_TRAIN];
    p->g = g;
    p->epoch = (uint32_t)(g / nb);
    p->split = BATCH_TRAIN;
    p->k = g % nb;
    p->first = p->k * s->p.batch_size;
    p->targets = (uint32_t)SL_MIN(s->p.batch_size, s->p.split_n[BATCH_TRAIN] - p->first);
}

static uint64_t rev_seed(const struct schedule *s, const struct schedule_pos *p)
{
    return p->g * 1000 + s->p.rank;
}

static int rev_order(const struct schedule *s, uint32_t epoch, uint32_t split, uint64_t *scratch, const uint64_t **out,
                     char *e, size_t el)
{
    (void)e;
    (void)el;
    uint64_t n = s->p.split_n[split];
    for (uint64_t i = 0; i < n; i++)
        scratch[i] = s->ids[split][(n - 1 - i + epoch) % n];
    *out = scratch;
    rev_orders++;
    return 0;
}

static void rev_free(struct schedule *s)
{
    (void)s;
    rev_freed++;
}

static const struct schedule_ops rev_ops = {
    .name = "reverse",
    .open = rev_open,
    .prepare = rev_prepare,
    .at = rev_at,
    .seed = rev_seed,
    .order = rev_order,
    .free = rev_free,
};

static void test_plugged(void **state)
{
    (void)state;
    uint64_t ids[23];
    for (uint64_t i = 0; i < 23; i++)
        ids[i] = 100 + i;
    struct schedule s;
    struct schedule_params p = {
        .split_n = {23, 7, 5}, .rank = 1, .ranks = 2, .batch_size = 5, .epochs = 3, .eval_every = 1, .seed = 99};
    assert_int_equal(schedule_open(&s, &rev_ops, &p, err, sizeof err), 0);
    uint64_t val[7] = {0}, test[5] = {0};
    assert_int_equal(schedule_set_ids(&s, (const uint64_t *const[BATCH_SPLITS]){ids, val, test}, err, sizeof err), 0);
    assert_int_equal(rev_opened, 1);
    assert_int_equal(rev_prepared, 1);
    assert_int_equal(schedule_len(&s), 15);
    assert_int_equal(schedule_steps(&s), 5);
    assert_int_equal(schedule_epoch_start(&s, 2), 10);
    assert_int_equal(schedule_pass_batches(&s, 2, BATCH_VAL), 0);
    struct schedule_cursor cur;
    schedule_cursor_init(&cur, &s, 0);
    struct schedule_batch b;
    uint64_t g = 0;
    int rc;
    while ((rc = schedule_next(&cur, &b, err, sizeof err)) == 0) {
        assert_int_equal(b.pos.g, g);
        assert_int_equal(b.pos.split, BATCH_TRAIN);
        assert_int_equal(b.pos.epoch, g / 5);
        assert_int_equal(b.seed, g * 1000 + 1);
        assert_int_equal(b.pos.targets, g % 5 == 4 ? 3 : 5);
        for (uint32_t t = 0; t < b.pos.targets; t++) {
            uint64_t i = b.pos.first + t;
            assert_int_equal(b.targets[t], 100 + (23 - 1 - i + b.pos.epoch) % 23);
        }
        g++;
    }
    assert_int_equal(rc, -ENODATA);
    assert_int_equal(g, 15);
    assert_int_equal(rev_orders, 3); /* one order per epoch, cached by the cursor */
    schedule_cursor_free(&cur);
    schedule_free(&s);
    assert_int_equal(rev_freed, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pinned), cmocka_unit_test(test_coverage), cmocka_unit_test(test_random_access),
        cmocka_unit_test(test_params), cmocka_unit_test(test_plugged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
