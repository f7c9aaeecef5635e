/* test_partition_mode.c - the partition mode's pieces together, in one
 * process, as the stages will run them (issue 22): the "partitions"
 * schedule hands out each epoch's training batches state by state; at each
 * new state the partition buffer switches to it (the next one prefetched)
 * and the sampler's filter follows it; every batch is sampled among the
 * in-buffer nodes and every row of the batch is gathered from the buffer
 * (no disk read) and equals the dataset's row. Per epoch the partitions
 * read equal the plan's first loads plus swaps (plus the carry-over from
 * the epoch before), every training target trains once, and nothing is
 * left in /dev/shm. */
#include "t_util.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>

#include "core/dataset.h"
#include "core/partition.h"
#include "core/partorder.h"
#include "core/util.h"
#include "ipc/shm.h"
#include "stages/partbuf.h"
#include "stages/sampler.h"
#include "stages/schedule.h"
#include "stages/schedule_partitions.h"

#define P 10

static char err[1024], log_[8192], dir[4096], ds[4200], lay[4300];

static unsigned shm_files(const char *run)
{
    DIR *d = opendir(SHM_DIR);
    assert_non_null(d);
    char pre[128];
    char ns[SHM_PREFIX_MAX];
    shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
    snprintf(pre, sizeof pre, "%s%s.", ns, run);
    unsigned n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += strncmp(e->d_name, pre, strlen(pre)) == 0;
    closedir(d);
    return n;
}

static void run_mode(const char *order, const char *cover, uint32_t slots)
{
    struct dataset_meta m;
    struct parts_meta pm;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    assert_int_equal(parts_meta_read(lay, &m, &pm, err, sizeof err), 0);
    char path[4500], arg[4500];
    size_t len;
    uint32_t *node_pos;
    unsigned char *feat;
    snprintf(path, sizeof path, "%s/node_pos.bin", lay);
    assert_int_equal(sl_read_file(path, 1u << 20, (char **)&node_pos, &len, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/features.bin", ds);
    assert_int_equal(sl_read_file(path, 16u << 20, (char **)&feat, &len, err, sizeof err), 0);
    /* the schedule */
    enum { E = 3 };
    snprintf(arg, sizeof arg, "%u:%s:%s:auto:auto:%s", slots, order, cover, lay);
    struct schedule sc;
    struct schedule_params sp = {.rank = 0, .ranks = 1, .batch_size = 50, .epochs = E, .eval_every = 10, .seed = 4,
                                 .arg = arg};
    schedule_split_sizes(&m, sp.split_n);
    if (schedule_open(&sc, schedule_find(SCHEDULE_PARTITIONS), &sp, err, sizeof err) ||
        schedule_load(&sc, ds, &m, err, sizeof err))
        fail_msg("%s", err);
    /* the sampler with its filter */
    struct sampler_topo topo;
    assert_int_equal(sampler_topo_open(&topo, ds, &m, err, sizeof err), 0);
    struct batch_shape sh = {.batch_size = 50, .layers = 2, .fanouts = {4, 4}};
    struct sampler smp;
    assert_int_equal(sampler_init(&smp, &topo, &sh, err, sizeof err), 0);
    uint8_t part_in[P] = {0};
    struct sampler_filter f = {.node_pos = node_pos, .part_nodes = pm.part_nodes, .parts = P, .part_in = part_in};
    assert_int_equal(sampler_set_filter(&smp, &f, err, sizeof err), 0);
    size_t size = (size_t)sl_round_up(smp.plan.max_bytes, 64);
    void *slot = aligned_alloc(64, size);
    /* the buffer */
    char run[SHM_RUN_ID_MAX];
    assert_int_equal(shm_run_id_new(run, sizeof run), 0);
    struct po_plan pl[E];
    uint32_t spare = 0;
    for (uint32_t e = 0; e < E; e++) {
        assert_int_equal(schedule_partitions_plan(&sc, e, &pl[e], err, sizeof err), 0);
        spare = SL_MAX(spare, pl[e].single ? 0 : pl[e].group);
    }
    struct partbuf pb;
    struct partbuf_params bp = {.run_id = run, .slots = slots, .spare = spare, .read_bytes = 64u << 10};
    assert_int_equal(partbuf_init(&pb, lay, &pm, &bp, err, sizeof err), 0);
    unsigned char *trained = calloc(m.nodes, 1);
    struct schedule_cursor cur;
    schedule_cursor_init(&cur, &sc, 0);
    uint64_t loads_before = 0;
    for (uint32_t e = 0; e < E; e++) {
        memset(trained, 0, m.nodes);
        uint32_t state = PO_EMPTY;
        uint64_t start = schedule_epoch_start(&sc, e), nb = schedule_pass_batches(&sc, e, BATCH_TRAIN);
        for (uint64_t g = start; g < start + nb; g++) {
            struct schedule_batch b;
            assert_int_equal(schedule_batch(&cur, g, &b, err, sizeof err), 0);
            uint32_t st = schedule_partitions_state(&sc, &b.pos);
            if (st != state) { /* a new buffer state: switch, prefetch the next, follow it in the filter */
                /* through every state of the plan, those that train nothing (no targets) included, so
                 * that the buffer reads what the plan counts */
                for (uint32_t s = state == PO_EMPTY ? 0 : state + 1; s <= st; s++) {
                    if (partbuf_switch(&pb, &pl[e], s, err, sizeof err))
                        fail_msg("%s", err);
                    if (s + 1 < pl[e].states)
                        assert_int_equal(partbuf_prefetch(&pb, &pl[e], s + 1, err, sizeof err), 0);
                }
                memset(part_in, 0, sizeof part_in);
                for (uint32_t j = 0; j < pl[e].slots; j++)
                    if (po_slot(&pl[e], st, j) != PO_EMPTY)
                        part_in[po_slot(&pl[e], st, j)] = 1;
                state = st;
            }
            struct batch_id id = {.batch = g, .epoch = e};
            if (sampler_sample(&smp, slot, size, b.targets, b.pos.targets, &id, b.seed, NULL, err, sizeof err))
                fail_msg("%s: %s", arg, err);
            struct batch_view v;
            assert_int_equal(batch_view(slot, size, 0, &v, err, sizeof err), 0);
            for (uint32_t i = 0; i < batch_nodes(&v); i++) { /* the gather: rows out of the buffer only */
                const unsigned char *row = partbuf_row(&pb, node_pos[v.nodes[i]]);
                if (!row)
                    fail_msg("%s: epoch %u batch %" PRIu64 ": node %" PRIu64 " is not in the buffer", arg, e, g,
                             v.nodes[i]);
                assert_memory_equal(row, feat + v.nodes[i] * pm.row_stride, pm.row_stride);
            }
            for (uint32_t i = 0; i < b.pos.targets; i++)
                assert_int_equal(trained[b.targets[i]]++, 0);
        }
        for (uint32_t s = state == PO_EMPTY ? 0 : state + 1; s < pl[e].states; s++) /* the states after the last batch */
            assert_int_equal(partbuf_switch(&pb, &pl[e], s, err, sizeof err), 0);
        uint64_t ntrained = 0;
        for (uint64_t v = 0; v < m.nodes; v++)
            ntrained += trained[v];
        assert_int_equal(ntrained, m.f[DATASET_TRAIN].rows);
        struct partbuf_stats st;
        partbuf_stats(&pb, &st);
        uint64_t want = e == 0 ? pl[0].first_loads + pl[0].swaps : po_epoch_carry_loads(&pl[e - 1], &pl[e]) + pl[e].swaps;
        if (st.loads - loads_before != want)
            fail_msg("%s: epoch %u read %" PRIu64 " partitions, the plan says %" PRIu64, arg, e, st.loads - loads_before,
                     want);
        loads_before = st.loads;
    }
    schedule_cursor_free(&cur);
    partbuf_free(&pb);
    assert_int_equal(shm_files(run), 0);
    for (uint32_t e = 0; e < E; e++)
        po_plan_free(&pl[e]);
    free(trained);
    free(slot);
    sampler_free(&smp);
    sampler_topo_free(&topo);
    schedule_free(&sc);
    free(node_pos);
    free(feat);
}

static void test_mode(void **state)
{
    (void)state;
    char prep[4096];
    t_scratch(dir, sizeof dir, "partition-mode");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    t_bin(prep, sizeof prep, "gnnprep");
    /* 1500 training nodes of 5000: k = 3 partitions of 500 */
    if (t_run(log_, sizeof log_,
              "%s synth %s --nodes 5000 --avg-degree 6 --feat-dim 16 --classes 3 --seed 8 --train-frac 0.3 "
              "--val-frac 0.1 --test-frac 0.1",
              prep, ds) ||
        t_run(log_, sizeof log_, "%s partition %s --parts %d --quiet", prep, ds, P))
        fail_msg("%s", log_);
    snprintf(lay, sizeof lay, "%s/parts.%d", ds, P);
    run_mode("comet", "nodes", 5); /* k = 3 < c: MariusGNN's one state */
    run_mode("comet", "nodes", 3); /* k >= c: the logical sweep */
    run_mode("comet", "pairs", 4);
    run_mode("beta", "nodes", 3);
    run_mode("beta", "pairs", 4);
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mode),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
