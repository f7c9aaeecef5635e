/* test_sampler_filter.c - the sampler restricted to the nodes of the
 * partitions in the buffer (sampler_set_filter; issue 22): on a layout
 * gnnprep partition wrote, with some partitions in, every node of every
 * batch is in, every edge is a graph edge between nodes that are in, each
 * destination gets min(fanout, in-buffer in-degree) sources, degrees are
 * in-buffer in-degrees; with every partition in, batches are byte for
 * byte the unfiltered ones (mmap and memory topologies; the CACHE one
 * without degrees); a target outside the buffer is refused; the filter
 * turns off. */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>

#include "core/dataset.h"
#include "core/partition.h"
#include "core/util.h"
#include "stages/sampler.h"

#define P 5

static char err[1024], log_[8192], dir[4096], ds[4200], lay[4300];
static struct dataset_meta m;
static struct parts_meta pm;
static uint32_t *node_pos;
static uint64_t *indptr;
static uint32_t *indices;

static int setup(void **state)
{
    (void)state;
    char prep[4096], path[4500];
    t_scratch(dir, sizeof dir, "sampler-filter");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(log_, sizeof log_, "%s synth %s --nodes 5000 --avg-degree 8 --feat-dim 4 --classes 3 --seed 6", prep, ds) ||
        t_run(log_, sizeof log_, "%s partition %s --parts %d --quiet", prep, ds, P))
        fail_msg("%s", log_);
    snprintf(lay, sizeof lay, "%s/parts.%d", ds, P);
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    assert_int_equal(parts_meta_read(lay, &m, &pm, err, sizeof err), 0);
    size_t len;
    snprintf(path, sizeof path, "%s/node_pos.bin", lay);
    assert_int_equal(sl_read_file(path, 1u << 20, (char **)&node_pos, &len, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/indptr.bin", ds);
    assert_int_equal(sl_read_file(path, 1u << 20, (char **)&indptr, &len, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/indices.bin", ds);
    assert_int_equal(sl_read_file(path, 1u << 22, (char **)&indices, &len, err, sizeof err), 0);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(node_pos);
    free(indptr);
    free(indices);
    t_rmrf(dir);
    return 0;
}

static bool in(const uint8_t *part_in, uint64_t v)
{
    return part_in[node_pos[v] / pm.part_nodes];
}

static uint64_t in_degree(const uint8_t *part_in, uint64_t v)
{
    uint64_t n = 0;
    for (uint64_t e = indptr[v]; e < indptr[v + 1]; e++)
        n += in(part_in, indices[e]);
    return n;
}

static bool is_edge(uint64_t u, uint64_t v)
{
    for (uint64_t e = indptr[v]; e < indptr[v + 1]; e++)
        if (indices[e] == u)
            return true;
    return false;
}

static void check_filtered(enum sampler_topo_mode mode, bool degrees)
{
    struct sampler_topo topo;
    struct sampler_topo_opts o = {.mode = mode, .cache_bytes = 5000 * 8 + 4096};
    if (sampler_topo_open_mode(&topo, ds, &m, &o, err, sizeof err))
        fail_msg("%s", err);
    struct batch_shape sh = {.batch_size = 32, .layers = 2, .fanouts = {5, 3}, .degrees = degrees};
    struct sampler s, plain;
    assert_int_equal(sampler_init(&s, &topo, &sh, err, sizeof err), 0);
    assert_int_equal(sampler_init(&plain, &topo, &sh, err, sizeof err), 0);
    size_t size = (size_t)sl_round_up(s.plan.max_bytes, 64);
    void *slot = aligned_alloc(64, size), *slot2 = aligned_alloc(64, size);
    uint8_t part_in[P] = {1, 0, 1, 1, 0};
    struct sampler_filter f = {.node_pos = node_pos, .pos_u64 = false, .part_nodes = pm.part_nodes, .parts = P,
                               .part_in = part_in};
    assert_int_equal(sampler_set_filter(&s, &f, err, sizeof err), 0);
    /* targets: nodes that are in, 32 a batch */
    uint64_t targets[32];
    uint64_t v = 0, nb = 0, dropped = 0;
    for (int b = 0; b < 20; b++) {
        uint32_t nt = 0;
        for (; nt < 32 && v < m.nodes; v++)
            if (in(part_in, v))
                targets[nt++] = v;
        struct batch_id id = {.batch = (uint64_t)b};
        if (sampler_sample(&s, slot, size, targets, nt, &id, 1000 + (uint64_t)b, NULL, err, sizeof err))
            fail_msg("%s", err);
        struct batch_view bv;
        assert_int_equal(batch_view(slot, size, 0, &bv, err, sizeof err), 0);
        for (uint32_t i = 0; i < batch_nodes(&bv); i++)
            if (!in(part_in, bv.nodes[i]))
                fail_msg("batch %d: node %" PRIu64 " is not in the buffer", b, bv.nodes[i]);
        for (uint32_t k = 0; k < 2; k++)
            for (uint32_t d = 0; d < batch_block_dst(&bv, k); d++) {
                uint64_t g = bv.nodes[d], want = SL_MIN((uint64_t)sh.fanouts[k], in_degree(part_in, g));
                uint32_t got = bv.indptr[k][d + 1] - bv.indptr[k][d];
                if (got != want)
                    fail_msg("batch %d block %u: node %" PRIu64 " has %u sources, expected %" PRIu64, b, k, g, got, want);
                for (uint32_t e = bv.indptr[k][d]; e < bv.indptr[k][d + 1]; e++)
                    assert_true(is_edge(bv.nodes[bv.src[k][e]], g));
                dropped += SL_MIN((uint64_t)sh.fanouts[k], indptr[g + 1] - indptr[g]) - want;
            }
        if (degrees)
            for (uint32_t i = 0; i < batch_nodes(&bv); i++)
                assert_int_equal(bv.deg[i], in_degree(part_in, bv.nodes[i]));
        nb++;
    }
    assert_true(dropped > 0); /* the filter did cut edges that sampling would have taken */
    /* a target outside the buffer */
    uint64_t out = 0;
    while (in(part_in, out))
        out++;
    struct batch_id id0 = {0};
    assert_int_equal(sampler_sample(&s, slot, size, &out, 1, &id0, 1, NULL, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not in a partition of the buffer"));
    /* every partition in: byte for byte the unfiltered batch */
    memset(part_in, 1, sizeof part_in);
    for (int b = 0; b < 5; b++) {
        for (uint32_t i = 0; i < 32; i++)
            targets[i] = (uint64_t)b * 997 + i * 31;
        struct batch_id id = {.batch = (uint64_t)b};
        memset(slot, 0, size);
        memset(slot2, 0, size);
        assert_int_equal(sampler_sample(&s, slot, size, targets, 32, &id, 7 + (uint64_t)b, NULL, err, sizeof err), 0);
        assert_int_equal(sampler_sample(&plain, slot2, size, targets, 32, &id, 7 + (uint64_t)b, NULL, err, sizeof err), 0);
        assert_memory_equal(slot, slot2, size);
    }
    /* off again: a target of a partition that was out is fine */
    part_in[1] = 0;
    assert_int_equal(sampler_set_filter(&s, NULL, err, sizeof err), 0);
    assert_int_equal(sampler_sample(&s, slot, size, &out, 1, &id0, 1, NULL, err, sizeof err), 0);
    free(slot);
    free(slot2);
    sampler_free(&s);
    sampler_free(&plain);
    sampler_topo_free(&topo);
}

static void test_filter(void **state)
{
    (void)state;
    check_filtered(SAMPLER_TOPO_MMAP, true);
    check_filtered(SAMPLER_TOPO_MEMORY, false);
    check_filtered(SAMPLER_TOPO_CACHE, false);
}

static void test_refused(void **state)
{
    (void)state;
    struct sampler_topo topo;
    struct sampler_topo_opts o = {.mode = SAMPLER_TOPO_CACHE, .cache_bytes = 5000 * 8 + 4096};
    assert_int_equal(sampler_topo_open_mode(&topo, ds, &m, &o, err, sizeof err), 0);
    struct batch_shape sh = {.batch_size = 8, .layers = 1, .fanouts = {4}, .degrees = true};
    struct sampler s;
    assert_int_equal(sampler_init(&s, &topo, &sh, err, sizeof err), 0);
    uint8_t part_in[P] = {1};
    struct sampler_filter f = {.node_pos = node_pos, .part_nodes = pm.part_nodes, .parts = P, .part_in = part_in};
    assert_int_equal(sampler_set_filter(&s, &f, err, sizeof err), -EINVAL); /* degrees need every list */
    f.part_nodes = 0;
    sh.degrees = false;
    assert_int_equal(sampler_set_filter(&s, &f, err, sizeof err), -EINVAL);
    sampler_free(&s);
    sampler_topo_free(&topo);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
