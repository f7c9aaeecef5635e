/* test_partbuf.c - the partition buffer (stages/partbuf.h) over a layout
 * gnnprep partition wrote: state after state of comet and beta plans,
 * with the next state prefetched (spare frames) or loaded at the switch
 * (none), every row of every partition of the current state equals the
 * dataset's row of that node; the partitions read equal the plan's first
 * loads plus its swaps (and, into a second epoch, the carry-over loads
 * plus its swaps); bytes are whole partitions in requests of the asked
 * size; io_uring and pread alike; a truncated file fails the switch with
 * -EIO naming it; the segment is gone after free. */
#include <dirent.h>
#include <errno.h>

#include "t_util.h"
#include "core/dataset.h"
#include "core/partition.h"
#include "core/partorder.h"
#include "core/util.h"
#include "ipc/shm.h"
#include "stages/partbuf.h"

#define P 8

static char err[1024], log_[8192], dir[4096], ds[4200], lay[4300];
static struct dataset_meta m;
static struct parts_meta pm;
static unsigned char *feat; /* the dataset's features.bin */
static uint32_t *pos_node;

static int setup(void **state)
{
    (void)state;
    char prep[4096];
    t_scratch(dir, sizeof dir, "partbuf");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(log_, sizeof log_, "%s synth %s --nodes 6000 --avg-degree 6 --feat-dim 150 --classes 4 --seed 4", prep, ds) ||
        t_run(log_, sizeof log_, "%s partition %s --parts %d --quiet", prep, ds, P))
        fail_msg("%s", log_);
    snprintf(lay, sizeof lay, "%s/parts.%d", ds, P);
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    assert_int_equal(parts_meta_read(lay, &m, &pm, err, sizeof err), 0);
    char path[4500];
    snprintf(path, sizeof path, "%s/features.bin", ds);
    size_t len;
    assert_int_equal(sl_read_file(path, 64u << 20, (char **)&feat, &len, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/pos_node.bin", lay);
    assert_int_equal(sl_read_file(path, 64u << 20, (char **)&pos_node, &len, err, sizeof err), 0);
    assert_int_equal(len, 6000 * 4);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(feat);
    free(pos_node);
    t_rmrf(dir);
    return 0;
}

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

/* Every row of every partition of state s, against the dataset. */
static void check_rows(const struct partbuf *pb, const struct po_plan *pl, uint32_t s)
{
    for (uint32_t j = 0; j < pl->slots; j++) {
        uint32_t q = po_slot(pl, s, j);
        if (q == PO_EMPTY)
            continue;
        for (uint64_t x = (uint64_t)q * pm.part_nodes; x < SL_MIN(m.nodes, (uint64_t)(q + 1) * pm.part_nodes); x++) {
            const unsigned char *r = partbuf_row(pb, x);
            if (!r)
                fail_msg("state %u: position %llu (partition %u) is not in memory", s, (unsigned long long)x, q);
            if (memcmp(r, feat + (size_t)pos_node[x] * pm.row_stride, pm.row_stride))
                fail_msg("state %u: position %llu holds another row than node %u's", s, (unsigned long long)x,
                         pos_node[x]);
        }
    }
}

static void run_epochs(enum po_order order, enum po_cover cover, uint32_t c, bool prefetch, bool uring)
{
    char run[SHM_RUN_ID_MAX];
    assert_int_equal(shm_run_id_new(run, sizeof run), 0);
    if (uring)
        unsetenv("SLUICE_NO_IO_URING");
    else
        setenv("SLUICE_NO_IO_URING", "1", 1);
    struct po_params pp = {.parts = P, .slots = c, .order = order, .cover = cover, .seed = 11};
    struct po_plan a, b;
    assert_int_equal(po_plan_build(&a, &pp, err, sizeof err), 0);
    pp.seed = 12;
    assert_int_equal(po_plan_build(&b, &pp, err, sizeof err), 0);
    struct partbuf pb;
    struct partbuf_params bp = {.run_id = run, .slots = c, .spare = prefetch ? a.group : 0, .depth = 3,
                                .read_bytes = 64u << 10};
    if (partbuf_init(&pb, lay, &pm, &bp, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(shm_files(run), 1);
    const struct po_plan *plans[2] = {&a, &b};
    for (int e = 0; e < 2; e++) {
        const struct po_plan *pl = plans[e];
        for (uint32_t s = 0; s < pl->states; s++) {
            if (partbuf_switch(&pb, pl, s, err, sizeof err) != 0)
                fail_msg("%s", err);
            if (prefetch && s + 1 < pl->states)
                assert_int_equal(partbuf_prefetch(&pb, pl, s + 1, err, sizeof err), 0);
            check_rows(&pb, pl, s);
        }
    }
    struct partbuf_stats st;
    partbuf_stats(&pb, &st);
    uint64_t want = a.first_loads + a.swaps + po_epoch_carry_loads(&a, &b) + b.swaps;
    if (st.loads != want)
        fail_msg("order=%s cover=%s c=%u prefetch=%d: %llu partitions read, the plans say %llu", po_order_name(order),
                 po_cover_name(cover), c, prefetch, (unsigned long long)st.loads, (unsigned long long)want);
    assert_int_equal(st.bytes, st.loads * pm.part_bytes);
    uint64_t per = (pm.part_bytes + (64u << 10) - 1) / (64u << 10);
    assert_true(st.reads >= st.loads * per);
    partbuf_free(&pb);
    assert_int_equal(shm_files(run), 0);
    po_plan_free(&a);
    po_plan_free(&b);
}

static void test_states(void **state)
{
    (void)state;
    for (int uring = 1; uring >= 0; uring--)
        for (unsigned o = 0; o < PO_ORDERS; o++)
            for (unsigned cv = 0; cv < 2; cv++)
                for (int pf = 0; pf < 2; pf++)
                    run_epochs(o, cv, 4, pf, uring);
    run_epochs(PO_ORDER_BETA, PO_COVER_PAIRS, 2, true, true);
    run_epochs(PO_ORDER_COMET, PO_COVER_NODES, P, true, true); /* everything fits: one state */
    unsetenv("SLUICE_NO_IO_URING");
}

static void test_bad(void **state)
{
    (void)state;
    struct partbuf pb;
    struct partbuf_params bp = {.slots = P + 1};
    assert_int_equal(partbuf_init(&pb, lay, &pm, &bp, err, sizeof err), -EINVAL);
    bp.slots = 2;
    bp.read_bytes = 1000;
    assert_int_equal(partbuf_init(&pb, lay, &pm, &bp, err, sizeof err), -EINVAL);
    /* a plan of another shape */
    bp.read_bytes = 0;
    assert_int_equal(partbuf_init(&pb, lay, &pm, &bp, err, sizeof err), 0);
    struct po_params pp = {.parts = P, .slots = 3, .order = PO_ORDER_BETA};
    struct po_plan pl;
    assert_int_equal(po_plan_build(&pl, &pp, err, sizeof err), 0);
    assert_int_equal(partbuf_switch(&pb, &pl, 0, err, sizeof err), -EINVAL);
    partbuf_free(&pb);
    po_plan_free(&pl);
    /* the file cut short under the buffer: the switch fails, naming it */
    char copy[4500], path[4600];
    snprintf(copy, sizeof copy, "%s/cut", dir);
    assert_int_equal(t_run(log_, sizeof log_, "cp -r %s %s", lay, copy), 0);
    snprintf(path, sizeof path, "%s/features.bin", copy);
    pp.slots = 2;
    assert_int_equal(po_plan_build(&pl, &pp, err, sizeof err), 0);
    assert_int_equal(partbuf_init(&pb, copy, &pm, &bp, err, sizeof err), 0);
    assert_int_equal(truncate(path, (off_t)(pm.part_bytes * (P - 1) + 700)), 0); /* off a block boundary too */
    int rc = 0;
    for (uint32_t s = 0; s < pl.states && rc == 0; s++)
        rc = partbuf_switch(&pb, &pl, s, err, sizeof err);
    assert_int_equal(rc, -EIO);
    assert_non_null(strstr(err, "features.bin"));
    assert_non_null(strstr(err, "ends early"));
    /* and every later call fails the same way */
    assert_int_equal(partbuf_switch(&pb, &pl, 0, err, sizeof err), -EIO);
    partbuf_free(&pb);
    /* a file already cut is refused when the buffer opens it */
    assert_int_equal(partbuf_init(&pb, copy, &pm, &bp, err, sizeof err), -EIO);
    assert_non_null(strstr(err, "expected"));
    assert_non_null(strstr(err, "gnnprep partition"));
    po_plan_free(&pl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_states),
        cmocka_unit_test(test_bad),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
