/* test_schedule_partitions.c - the partition-ordered schedule
 * (stages/schedule_partitions.h) over a layout gnnprep partition wrote:
 * for comet and beta, one and three ranks, every training target exactly
 * once per epoch across the ranks, every batch's targets in partitions
 * its state holds and never in two states, batches within batch_size and
 * states in order, steps the most training batches of any rank and
 * epoch, evaluation passes as the default schedule's, two cursors that
 * agree in any order, and refusals of a bad argument and of a layout
 * beside another dataset. */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>

#include "core/dataset.h"
#include "core/partition.h"
#include "core/util.h"
#include "stages/sampler.h"
#include "stages/schedule.h"
#include "stages/schedule_partitions.h"

static char err[1024], log_[8192], dir[4096], ds[4200], lay[4300];
static struct dataset_meta m;
static uint32_t *node_pos;
static uint64_t *train;
static uint64_t ntrain;

#define P 12

static int setup(void **state)
{
    (void)state;
    char prep[4096];
    t_scratch(dir, sizeof dir, "sched-parts");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    t_bin(prep, sizeof prep, "gnnprep");
    /* 3000 training nodes of 6000: k = 6 partitions of 500 */
    if (t_run(log_, sizeof log_,
              "%s synth %s --nodes 6000 --avg-degree 4 --feat-dim 8 --classes 3 --seed 2 --train-frac 0.5 "
              "--val-frac 0.1 --test-frac 0.1",
              prep, ds) ||
        t_run(log_, sizeof log_, "%s partition %s --parts %d --quiet", prep, ds, P))
        fail_msg("%s", log_);
    snprintf(lay, sizeof lay, "%s/parts.%d", ds, P);
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    char path[4500];
    size_t len;
    snprintf(path, sizeof path, "%s/node_pos.bin", lay);
    assert_int_equal(sl_read_file(path, 1u << 20, (char **)&node_pos, &len, err, sizeof err), 0);
    assert_int_equal(sampler_split_load(ds, &m, DATASET_TRAIN, &train, &ntrain, err, sizeof err), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(node_pos);
    free(train);
    t_rmrf(dir);
    return 0;
}

static void open_one(struct schedule *s, const char *arg, uint32_t rank, uint32_t ranks, uint32_t epochs)
{
    struct schedule_params p = {.rank = rank, .ranks = ranks, .batch_size = 64, .epochs = epochs, .eval_every = 2,
                                .seed = 9, .arg = arg};
    schedule_split_sizes(&m, p.split_n);
    if (schedule_open(s, schedule_find(SCHEDULE_PARTITIONS), &p, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(schedule_load(s, ds, &m, err, sizeof err), 0);
}

static void check_run(const char *order, const char *cover, const char *fill, uint32_t slots, uint32_t ranks)
{
    char arg[4500];
    snprintf(arg, sizeof arg, "%u:%s:%s:%s:auto:%s", slots, order, cover, fill, lay);
    enum { E = 3 };
    unsigned char *seen = calloc(m.nodes, 1);
    uint64_t max_steps = 0;
    for (uint32_t e = 0; e < E; e++) {
        memset(seen, 0, m.nodes);
        for (uint32_t r = 0; r < ranks; r++) {
            struct schedule s;
            open_one(&s, arg, r, ranks, E);
            struct po_plan pl;
            assert_int_equal(schedule_partitions_plan(&s, e, &pl, err, sizeof err), 0);
            if (!strcmp(fill, "first") && pl.single) /* the first c partitions, every epoch */
                for (uint32_t j = 0; j < pl.slots; j++)
                    assert_int_equal(po_slot(&pl, 0, j), j);
            struct schedule_cursor c;
            schedule_cursor_init(&c, &s, 0);
            uint64_t start = schedule_epoch_start(&s, e), nb = schedule_pass_batches(&s, e, BATCH_TRAIN);
            max_steps = SL_MAX(max_steps, nb);
            assert_true(nb <= schedule_steps(&s));
            uint32_t last_state = 0;
            for (uint64_t g = start; g < start + nb; g++) {
                struct schedule_batch b;
                assert_int_equal(schedule_batch(&c, g, &b, err, sizeof err), 0);
                assert_int_equal(b.pos.split, BATCH_TRAIN);
                assert_true(b.pos.targets >= 1 && b.pos.targets <= 64);
                uint32_t st = schedule_partitions_state(&s, &b.pos);
                assert_true(st < pl.states);
                assert_true(st >= last_state); /* states in order */
                last_state = st;
                for (uint32_t t = 0; t < b.pos.targets; t++) {
                    uint64_t v = b.targets[t];
                    uint32_t q = node_pos[v] / (uint32_t)((m.nodes + P - 1) / P);
                    bool held = false;
                    for (uint32_t j = 0; j < pl.slots; j++)
                        held |= po_slot(&pl, st, j) == q;
                    if (!held)
                        fail_msg("%s: epoch %u batch %llu: target %llu (partition %u) is not in state %u", arg, e,
                                 (unsigned long long)g, (unsigned long long)v, q, st);
                    if (seen[v]++)
                        fail_msg("%s: target %llu twice in epoch %u", arg, (unsigned long long)v, e);
                }
            }
            /* evaluation batches: no state */
            if (schedule_pass_batches(&s, e, BATCH_VAL)) {
                struct schedule_batch b;
                assert_int_equal(schedule_batch(&c, start + nb, &b, err, sizeof err), 0);
                assert_int_equal(b.pos.split, BATCH_VAL);
                assert_int_equal(schedule_partitions_state(&s, &b.pos), PO_EMPTY);
            }
            schedule_cursor_free(&c);
            po_plan_free(&pl);
            schedule_free(&s);
        }
        for (uint64_t i = 0; i < ntrain; i++)
            if (!seen[train[i]])
                fail_msg("%s ranks=%u: training node %llu in no batch of epoch %u", arg, ranks,
                         (unsigned long long)train[i], e);
    }
    /* steps: the most of any rank and epoch */
    struct schedule s;
    open_one(&s, arg, 0, ranks, E);
    assert_int_equal(schedule_steps(&s), max_steps);
    schedule_free(&s);
    free(seen);
}

static void test_every_target_once(void **state)
{
    (void)state;
    const char *orders[] = {"comet", "beta"}, *covers[] = {"nodes", "pairs"};
    for (int o = 0; o < 2; o++)
        for (int c = 0; c < 2; c++)
            for (uint32_t ranks = 1; ranks <= 3; ranks += 2) {
                check_run(orders[o], covers[c], "auto", 4, ranks);
                check_run(orders[o], covers[c], "auto", 8, ranks); /* comet nodes: k = 6 < 8, one state */
                check_run(orders[o], covers[c], "first", 8, ranks); /* ... partitions 0..7 every epoch */
                check_run(orders[o], covers[c], "random", 4, ranks);
            }
}

/* Two cursors, one forwards and one backwards, see the same batches. */
static void test_cursors_agree(void **state)
{
    (void)state;
    char arg[4500];
    snprintf(arg, sizeof arg, "4:comet:nodes:auto:auto:%s", lay);
    struct schedule s;
    open_one(&s, arg, 0, 1, 2);
    struct schedule_cursor a, b;
    schedule_cursor_init(&a, &s, 0);
    schedule_cursor_init(&b, &s, 0);
    uint64_t n = schedule_len(&s);
    uint64_t *fa = calloc(n, sizeof *fa);
    for (uint64_t g = 0; g < n; g++) {
        struct schedule_batch x;
        assert_int_equal(schedule_batch(&a, g, &x, err, sizeof err), 0);
        uint64_t h = x.seed ^ x.pos.targets;
        for (uint32_t t = 0; t < x.pos.targets; t++)
            h = sl_mix64(h ^ x.targets[t]);
        fa[g] = h;
    }
    for (uint64_t g = n; g-- > 0;) {
        struct schedule_batch x;
        assert_int_equal(schedule_batch(&b, g, &x, err, sizeof err), 0);
        uint64_t h = x.seed ^ x.pos.targets;
        for (uint32_t t = 0; t < x.pos.targets; t++)
            h = sl_mix64(h ^ x.targets[t]);
        assert_int_equal(h, fa[g]);
    }
    free(fa);
    schedule_cursor_free(&a);
    schedule_cursor_free(&b);
    schedule_free(&s);
}

/* Evaluation inside the buffer (a layout made with --eval-first): every
 * validation and test batch in the epoch's state 0, each of their targets
 * in a partition that state holds, every evaluation node once per pass
 * across the ranks; "graph" and layouts or buffers that cannot hold them
 * keep PO_EMPTY, and "buffer" is refused there. */
static void test_eval_in_buffer(void **state)
{
    (void)state;
    char prep[4096], lay10[4300], arg[4600];
    t_bin(prep, sizeof prep, "gnnprep");
    /* 10 partitions of 600: the 3000 training nodes in 5, with the 1200 evaluation nodes in 7 */
    if (t_run(log_, sizeof log_, "%s partition %s --parts 10 --eval-first --order neighbours --quiet", prep, ds) ||
        t_run(log_, sizeof log_, "%s partition %s --parts 11 --eval-first --quiet", prep, ds))
        fail_msg("%s", log_);
    snprintf(lay10, sizeof lay10, "%s/parts.10", ds);
    char path[4500];
    size_t len;
    uint32_t *pos10;
    snprintf(path, sizeof path, "%s/node_pos.bin", lay10);
    assert_int_equal(sl_read_file(path, 1u << 20, (char **)&pos10, &len, err, sizeof err), 0);
    unsigned char *seen = calloc(m.nodes, 1);
    const char *fills[] = {"random", "first"};
    for (int f = 0; f < 2; f++)
        for (uint32_t ranks = 1; ranks <= 2; ranks++) {
            snprintf(arg, sizeof arg, "8:comet:nodes:%s:buffer:%s", fills[f], lay10);
            for (int split = BATCH_VAL; split <= BATCH_TEST; split++) {
                uint64_t checked = 0;
                memset(seen, 0, m.nodes);
                for (uint32_t r = 0; r < ranks; r++) {
                    struct schedule s;
                    open_one(&s, arg, r, ranks, 2);
                    assert_true(schedule_partitions_eval_in_buffer(&s));
                    uint32_t e = 1; /* eval_every = 2: the last epoch has both passes */
                    struct po_plan pl;
                    assert_int_equal(schedule_partitions_plan(&s, e, &pl, err, sizeof err), 0);
                    assert_true(pl.single);
                    for (uint32_t j = 0; j < 7; j++) /* the evaluation partitions are fixed in the state */
                        assert_int_equal(po_slot(&pl, 0, j), j);
                    struct schedule_cursor c;
                    schedule_cursor_init(&c, &s, 0);
                    uint64_t g = schedule_epoch_start(&s, e);
                    for (int k = 0; k < split; k++)
                        g += schedule_pass_batches(&s, e, (uint32_t)k);
                    uint64_t nb = schedule_pass_batches(&s, e, (uint32_t)split);
                    assert_true(nb > 0);
                    for (uint64_t b = g; b < g + nb; b++) {
                        struct schedule_batch x;
                        assert_int_equal(schedule_batch(&c, b, &x, err, sizeof err), 0);
                        assert_int_equal(x.pos.split, split);
                        assert_int_equal(schedule_partitions_state(&s, &x.pos), 0);
                        for (uint32_t t = 0; t < x.pos.targets; t++) {
                            uint64_t v = x.targets[t];
                            uint32_t q = pos10[v] / 600;
                            bool held = false;
                            for (uint32_t j = 0; j < pl.slots; j++)
                                held |= po_slot(&pl, 0, j) == q;
                            if (!held || q >= 7)
                                fail_msg("%s: evaluation target %llu in partition %u, not in the state", arg,
                                         (unsigned long long)v, q);
                            if (seen[v]++)
                                fail_msg("%s: evaluation target %llu twice in a pass", arg, (unsigned long long)v);
                            checked++;
                        }
                    }
                    schedule_cursor_free(&c);
                    po_plan_free(&pl);
                    schedule_free(&s);
                }
                assert_int_equal(checked, split == BATCH_VAL ? m.f[DATASET_VAL].rows : m.f[DATASET_TEST].rows);
            }
        }
    free(seen);
    free(pos10);
    /* auto: buffer here; graph where the buffer cannot hold the evaluation partitions, the layout spreads them
     * or is not ordered by neighbours (parts.11: random) */
    struct schedule s;
    snprintf(arg, sizeof arg, "8:comet:nodes:auto:auto:%s", lay10);
    open_one(&s, arg, 0, 1, 2);
    assert_true(schedule_partitions_eval_in_buffer(&s));
    schedule_free(&s);
    char lay11[4300];
    snprintf(lay11, sizeof lay11, "%s/parts.11", ds);
    const char *graph[] = {"6:comet:nodes:auto:auto:", "8:beta:nodes:auto:auto:", "8:comet:nodes:auto:graph:",
                           "8:comet:nodes:auto:auto:"};
    for (size_t i = 0; i < SL_ARRAY_LEN(graph); i++) {
        snprintf(arg, sizeof arg, "%s%s", graph[i], i < 3 ? lay10 : lay11);
        open_one(&s, arg, 0, 1, 2);
        assert_false(schedule_partitions_eval_in_buffer(&s));
        struct schedule_pos pos;
        schedule_at(&s, schedule_epoch_start(&s, 1) + schedule_pass_batches(&s, 1, BATCH_TRAIN), &pos);
        assert_int_equal(pos.split, BATCH_VAL);
        assert_int_equal(schedule_partitions_state(&s, &pos), PO_EMPTY);
        schedule_free(&s);
    }
    snprintf(arg, sizeof arg, "8:comet:nodes:auto:buffer:%s", lay11); /* asked for: granted on any order */
    open_one(&s, arg, 0, 1, 2);
    assert_true(schedule_partitions_eval_in_buffer(&s));
    schedule_free(&s);
    struct schedule_params p = {.rank = 0, .ranks = 1, .batch_size = 64, .epochs = 1, .eval_every = 1, .seed = 1};
    schedule_split_sizes(&m, p.split_n);
    p.arg = arg;
    snprintf(arg, sizeof arg, "6:comet:nodes:auto:buffer:%s", lay10);
    assert_int_equal(schedule_open(&s, schedule_find(SCHEDULE_PARTITIONS), &p, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "partition_eval"));
    snprintf(arg, sizeof arg, "8:comet:nodes:auto:buffer:%s", lay);
    assert_int_equal(schedule_open(&s, schedule_find(SCHEDULE_PARTITIONS), &p, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "--eval-first"));
}

static void test_refused(void **state)
{
    (void)state;
    struct schedule s;
    struct schedule_params p = {.rank = 0, .ranks = 1, .batch_size = 64, .epochs = 1, .eval_every = 1, .seed = 1};
    schedule_split_sizes(&m, p.split_n);
    const struct schedule_ops *ops = schedule_find(SCHEDULE_PARTITIONS);
    assert_non_null(ops);
    const char *bad[] = {NULL, "4:comet:nodes:auto:auto:", "x:comet:nodes:auto:auto:/tmp", "4:hilbert:nodes:auto:auto:/tmp", "4:comet:edges:auto:auto:/tmp", "4:comet:nodes:/tmp", "4:comet:nodes:some:auto:/tmp", "4:comet:nodes:auto:/tmp", "4:comet:nodes:auto:some:/tmp"};
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        p.arg = bad[i];
        assert_int_equal(schedule_open(&s, ops, &p, err, sizeof err), -EINVAL);
    }
    char arg[4500];
    snprintf(arg, sizeof arg, "40:comet:nodes:auto:auto:%s", lay); /* more slots than partitions */
    p.arg = arg;
    assert_int_equal(schedule_open(&s, ops, &p, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "buffer_partitions"));
    /* the layout beside another dataset (moved into one remade with another seed) */
    char other[4300], prep[4096], moved[4500];
    snprintf(other, sizeof other, "%s/other", dir);
    t_bin(prep, sizeof prep, "gnnprep");
    assert_int_equal(t_run(log_, sizeof log_,
                           "%s synth %s --nodes 6000 --avg-degree 4 --feat-dim 8 --classes 3 --seed 3 --train-frac 0.5 "
                           "--val-frac 0.1 --test-frac 0.1 && cp -r %s %s/",
                           prep, other, lay, other),
                     0);
    snprintf(moved, sizeof moved, "4:comet:nodes:auto:auto:%s/parts.%d", other, P);
    p.arg = moved;
    assert_int_equal(schedule_open(&s, ops, &p, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "made from another dataset"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_target_once),
        cmocka_unit_test(test_cursors_agree),
        cmocka_unit_test(test_eval_in_buffer),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
