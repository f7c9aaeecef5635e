/* test_topology.c - the sampler's three ways to reach indices.bin
 * (pipeline.topology; stages/sampler.h): batches sampled with the same
 * seed are byte for byte the same whether the lists are mapped, read into
 * memory or partly in the neighbour cache and partly read with direct I/O
 * (a cache small enough that both kinds of list occur, lists longer than
 * one read block, all in-neighbours and sampled fanouts, buffered and
 * direct reads); the cache's choice follows Ginex's rule on a hand-made
 * graph; bad budgets and values are refused with messages that say what
 * to do. */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>

#include "core/config.h"
#include "core/dataset.h"
#include "core/util.h"
#include "stages/sampler.h"
#include "stages/sampler_fetch.h"
#include "stages/schedule.h"

#define N 5000
#define HUB 7 /* in-degree HUB_DEG: its list spans several 4 KiB blocks */
#define HUB_DEG 4000

static char err[1024];
static char dir[4096], ds[4200];
static uint64_t indptr[N + 1];
static uint32_t *indices;
static uint64_t n_edges;
static uint32_t train[N];
static uint32_t n_train;

static uint64_t rng_state = 99;
static uint64_t rnd(void)
{
    return sl_splitmix64(&rng_state);
}

static void write_file(struct dataset_dir *d, struct dataset_meta *m, int idx, const char *name, enum dtype t,
                       const void *data, uint64_t n)
{
    char p[4096];
    struct file_writer w;
    uint64_t bytes, h;
    assert_int_equal(dataset_dir_path(d, name, p, sizeof p), 0);
    assert_int_equal(file_writer_open(&w, p, err, sizeof err), 0);
    assert_int_equal(file_writer_write(&w, data, n * dtype_size(t), err, sizeof err), 0);
    assert_int_equal(file_writer_close(&w, &bytes, &h, err, sizeof err), 0);
    dataset_file_set(&m->f[idx], name, t, n, 1, bytes, h);
}

/* Writes a dataset with the CSC (indptr, ind, edges) over n nodes into
 * out; train, val, test = the nodes 0, 1, 2 mod 4. */
static void write_dataset(const char *out, uint64_t n, const uint64_t *ip, const uint32_t *ind, uint64_t edges)
{
    struct dataset_dir d;
    assert_int_equal(dataset_dir_begin(&d, out, err, sizeof err), 0);
    struct dataset_meta m = {.nodes = n, .edges = edges, .feat_dim = 1, .classes = 3, .feat_align = DATASET_FEAT_ALIGN};
    int32_t *lab = malloc(n * sizeof *lab);
    assert_non_null(lab);
    uint32_t *val = malloc(n * sizeof *val), *test = malloc(n * sizeof *test), nv = 0, nt = 0;
    assert_true(val && test);
    n_train = 0;
    for (uint64_t v = 0; v < n; v++) {
        lab[v] = (int32_t)(v % 3);
        if (v % 4 == 0)
            train[n_train++] = (uint32_t)v;
        else if (v % 4 == 1)
            val[nv++] = (uint32_t)v;
        else if (v % 4 == 2)
            test[nt++] = (uint32_t)v;
    }
    write_file(&d, &m, DATASET_INDPTR, "indptr.bin", DTYPE_U64, ip, n + 1);
    write_file(&d, &m, DATASET_INDICES, "indices.bin", DTYPE_U32, ind, edges);
    write_file(&d, &m, DATASET_LABELS, "labels.bin", DTYPE_I32, lab, n);
    write_file(&d, &m, DATASET_TRAIN, "train.bin", DTYPE_U32, train, n_train);
    write_file(&d, &m, DATASET_VAL, "val.bin", DTYPE_U32, val, nv);
    write_file(&d, &m, DATASET_TEST, "test.bin", DTYPE_U32, test, nt);
    free(val);
    free(test);
    struct feat_writer fw;
    char p[4096];
    dataset_dir_path(&d, "features.bin", p, sizeof p);
    assert_int_equal(feat_writer_open(&fw, p, DTYPE_F32, 1, err, sizeof err), 0);
    for (uint64_t v = 0; v < n; v++) {
        float x = (float)v;
        assert_int_equal(feat_writer_put(&fw, &x, err, sizeof err), 0);
    }
    assert_int_equal(feat_writer_close(&fw, &m.f[DATASET_FEATURES], err, sizeof err), 0);
    assert_int_equal(dataset_dir_commit(&d, &m, err, sizeof err), 0);
    free(lab);
}

/* N nodes, in-degrees 0..60 skewed towards small ones, node HUB with
 * HUB_DEG; sources drawn with a skew so that out-degrees differ widely. */
static int setup(void **state)
{
    (void)state;
    indices = malloc((size_t)N * 64 * sizeof *indices + HUB_DEG * sizeof *indices);
    if (!indices)
        return -1;
    uint64_t e = 0;
    for (uint32_t v = 0; v < N; v++) {
        indptr[v] = e;
        uint64_t r = rnd();
        uint32_t deg = v == HUB ? HUB_DEG : (uint32_t)((r % 61) * ((r >> 8) % 61) / 60);
        for (uint32_t i = 0; i < deg; i++) {
            uint64_t x = rnd() % N;
            indices[e + i] = (uint32_t)(x * x % N * (rnd() % 2) + x * (1 - rnd() % 2)) % N;
        }
        e += deg;
    }
    indptr[N] = e;
    n_edges = e;
    t_scratch(dir, sizeof dir, "topology");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    write_dataset(ds, N, indptr, indices, e);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    free(indices);
    t_rmrf(dir);
    return 0;
}

/* Pieces of the sequential loads at open: small, so that the file takes
 * many more than are in flight at once. */
#define LOAD_CHUNK 8192
/* Each sampling thread's read buffer: small, so that a hop takes many
 * rounds of reads (the least it can be is twice HUB's span) */
#define FETCH_BUF (2 * (HUB_DEG * 4 + 8192))

static uint32_t g_round_reads; /* reads per round (0: the default) */

static void open_mode(struct sampler_topo *t, const char *path, enum sampler_topo_mode mode, uint64_t cache_bytes,
                      bool buffered)
{
    struct dataset_meta m;
    if (dataset_meta_read(path, &m, true, err, sizeof err))
        fail_msg("%s: %s", path, err);
    struct sampler_topo_opts o = {
        .mode = mode, .cache_bytes = cache_bytes, .buffered = buffered, .load_chunk = LOAD_CHUNK, .fetch_buf = FETCH_BUF,
        .round_reads = g_round_reads};
    int rc = sampler_topo_open_mode(t, path, &m, &o, err, sizeof err);
    if (rc)
        fail_msg("open %s: %s", sampler_topo_mode_name(mode), err);
}

/* ---- the same batches in every mode ------------------------------------------------------- */

static void test_identical(void **state)
{
    (void)state;
    uint64_t index = sampler_cache_index_bytes(N);
    uint64_t budget = index + n_edges * 4 / 3; /* a third of the ids */
    struct sampler_topo tm, tmem, tc, tcb;
    open_mode(&tm, ds, SAMPLER_TOPO_MMAP, 0, false);
    open_mode(&tmem, ds, SAMPLER_TOPO_MEMORY, 0, false);
    open_mode(&tc, ds, SAMPLER_TOPO_CACHE, budget, false);
    g_round_reads = 3; /* rounds of three reads: many rounds per hop */
    open_mode(&tcb, ds, SAMPLER_TOPO_CACHE, budget, true);
    g_round_reads = 0;
    assert_int_equal(tc.round_reads, SAMPLER_FETCH_ROUND_READS);
    assert_int_equal(tcb.round_reads, 3);
    /* labels: mapped with mmap, in memory otherwise (never a page fault on
     * the extractor's disk), the same values either way */
    assert_true(tm.labels_len > 0 && tm.labels_mem == NULL);
    assert_true(tmem.labels_len == 0 && tmem.labels_mem != NULL && tmem.labels == tmem.labels_mem);
    assert_true(tc.labels_len == 0 && tc.labels_mem != NULL);
    assert_memory_equal(tm.labels, tmem.labels, N * sizeof *tm.labels);
    assert_memory_equal(tm.labels, tc.labels, N * sizeof *tm.labels);
    assert_true(tmem.direct); /* the test's scratch is on a filesystem with O_DIRECT */
    assert_true(tc.direct);
    assert_false(tcb.direct);
    assert_true(tc.read_align >= 512 && tc.read_align <= SAMPLER_IO_ALIGN && !(tc.read_align & (tc.read_align - 1)));
    assert_int_equal(tcb.read_align, 512);
    assert_int_equal(tmem.load_bytes, n_edges * 4);
    assert_true(n_edges * 4 > 8 * LOAD_CHUNK);
    assert_memory_equal(tmem.indices, indices, n_edges * 4); /* every piece in its place */
    assert_int_equal(tc.load_bytes, 2 * n_edges * 4);
    assert_true(tc.cache_edges * 4 <= budget - index);
    assert_true(tc.cache_nodes > 0 && tc.cache_edges < n_edges);
    assert_false(sampler_topo_cached(&tc, HUB)); /* the longest list, ratio below most */
    /* cached lists hold the file's ids */
    uint64_t cached_lists = 0;
    for (uint64_t v = 0; v < N; v++) {
        uint64_t d = indptr[v + 1] - indptr[v];
        if (!d || !sampler_topo_cached(&tc, v))
            continue;
        cached_lists++;
        assert_memory_equal((const uint32_t *)tc.cache + tc.cache_off[v], indices + indptr[v], d * 4);
    }
    assert_int_equal(cached_lists, tc.cache_nodes);

    const int64_t fans[][3] = {{5, 3, 0}, {-1, 4, 0}, {25, 10, 2}, {-1, -1, 0}};
    const uint32_t layers[] = {2, 2, 3, 2};
    const struct sampler_topo *tops[] = {&tm, &tmem, &tc, &tcb};
    uint64_t hit_cached = 0, hit_read = 0;
    for (unsigned fc = 0; fc < 4; fc++) {
        struct batch_shape sh = {.batch_size = 64, .layers = layers[fc]};
        for (uint32_t k = 0; k < sh.layers; k++)
            sh.fanouts[k] = fans[fc][k];
        struct sampler s[4];
        void *slot[4];
        size_t size = 0;
        for (int i = 0; i < 4; i++) {
            assert_int_equal(sampler_init(&s[i], tops[i], &sh, err, sizeof err), 0);
            size = (size_t)sl_round_up(s[i].plan.max_bytes, 64);
            slot[i] = aligned_alloc(64, size);
            assert_non_null(slot[i]);
        }
        for (uint32_t b = 0; b < 12; b++) {
            uint64_t targets[64];
            uint32_t nt = 1 + (uint32_t)(rnd() % 64);
            for (uint32_t i = 0; i < nt; i++)
                targets[i] = train[(b * 64 + i) % n_train];
            if (b == 0)
                targets[0] = HUB; /* the long list, read across blocks */
            for (uint32_t i = 0; i < nt; i++) {
                if (sampler_topo_cached(&tc, targets[i]))
                    hit_cached++;
                else
                    hit_read++;
            }
            struct batch_id id = {.batch = b};
            uint64_t seed = 1000 + b + 31 * fc, edges[4];
            for (int i = 0; i < 4; i++) {
                memset(slot[i], 0xA5, size); /* the same fill: alignment padding is never written */
                if (sampler_sample(&s[i], slot[i], size, targets, nt, &id, seed, &edges[i], err, sizeof err))
                    fail_msg("fanouts %u batch %u mode %d: %s", fc, b, i, err);
            }
            uint64_t bytes = ((const struct batch_hdr *)slot[0])->bytes;
            for (int i = 1; i < 4; i++) {
                assert_int_equal(edges[i], edges[0]);
                assert_int_equal(((const struct batch_hdr *)slot[i])->bytes, bytes);
                if (memcmp(slot[0], slot[i], bytes) != 0)
                    fail_msg("fanouts %u batch %u: mode %d's batch differs from mmap's", fc, b, i);
            }
        }
        assert_int_equal(s[0].lists_read, 0);
        assert_int_equal(s[1].lists_read, 0);
        assert_true(s[2].lists_read > 0);
        assert_int_equal(s[3].lists_read, s[2].lists_read);
        for (int i = 0; i < 4; i++) {
            sampler_free(&s[i]);
            free(slot[i]);
        }
    }
    assert_true(hit_cached > 0 && hit_read > 0); /* both kinds among the targets alone */
    sampler_topo_free(&tm);
    sampler_topo_free(&tmem);
    sampler_topo_free(&tc);
    sampler_topo_free(&tcb);
}

/* ---- cross-batch prefetch ------------------------------------------------------------------ */

/* Samples batch g of the schedule with s into slot and checks it against
 * the mapped topology's sample of the same batch (ref into rslot). */
static void sample_check(struct sampler *s, struct sampler *ref, void *slot, void *rslot, size_t size,
                         struct schedule_cursor *cur, uint64_t g, const char *what)
{
    struct schedule_batch sb;
    assert_int_equal(schedule_batch(cur, g, &sb, err, sizeof err), 0);
    struct batch_id id = {.batch = g, .epoch = sb.pos.epoch, .split = sb.pos.split};
    uint64_t e0, e1;
    memset(slot, 0xA5, size);
    memset(rslot, 0xA5, size);
    if (sampler_sample(ref, rslot, size, sb.targets, sb.pos.targets, &id, sb.seed, &e0, err, sizeof err) ||
        sampler_sample(s, slot, size, sb.targets, sb.pos.targets, &id, sb.seed, &e1, err, sizeof err))
        fail_msg("%s: batch %" PRIu64 ": %s", what, g, err);
    uint64_t bytes = ((const struct batch_hdr *)rslot)->bytes;
    assert_int_equal(e1, e0);
    assert_int_equal(((const struct batch_hdr *)slot)->bytes, bytes);
    if (memcmp(slot, rslot, bytes) != 0)
        fail_msg("%s: batch %" PRIu64 " (epoch %" PRIu32 ", split %" PRIu32 ") differs from mmap's", what, g,
                 sb.pos.epoch, sb.pos.split);
}

/* Prefetches batch g's targets (through its own cursor, as the stage does). */
static void prefetch(struct sampler *s, struct schedule_cursor *cur, uint64_t g)
{
    struct schedule_batch sb;
    assert_int_equal(schedule_batch(cur, g, &sb, err, sizeof err), 0);
    if (sampler_prefetch(s, sb.targets, sb.pos.targets, err, sizeof err))
        fail_msg("prefetch of batch %" PRIu64 ": %s", g, err);
}

/* The lists of the next batch's targets read while a batch is sampled
 * (sampler_prefetch) give the same batches as the mapped topology over a
 * real schedule (two epochs; training, validation and test passes; a
 * short last batch of each pass), read no list twice, and survive
 * misuse: samples of other batches in between (the lookahead policy's
 * announcements), prefetches never used, the same targets in another
 * order, two prefetches ahead. */
static void test_prefetch(void **state)
{
    (void)state;
    uint64_t budget = sampler_cache_index_bytes(N) + n_edges * 4 / 3;
    struct sampler_topo tm, tc;
    open_mode(&tm, ds, SAMPLER_TOPO_MMAP, 0, false);
    open_mode(&tc, ds, SAMPLER_TOPO_CACHE, budget, false);
    /* the splits of write_dataset: nodes 0, 1, 2 mod 4 */
    uint64_t *ids[BATCH_SPLITS];
    uint64_t cnt[BATCH_SPLITS] = {0};
    for (int k = 0; k < BATCH_SPLITS; k++) {
        ids[k] = malloc(N * sizeof *ids[k]);
        assert_non_null(ids[k]);
    }
    for (uint64_t v = 0; v < N; v++)
        if (v % 4 < BATCH_SPLITS)
            ids[v % 4][cnt[v % 4]++] = v;
    struct schedule sched;
    struct schedule_params sp = {.split_n = {cnt[0], cnt[1], cnt[2]}, .ranks = 1, .batch_size = 200, .epochs = 2,
                                 .eval_every = 1, .seed = 5};
    assert_int_equal(schedule_open(&sched, NULL, &sp, err, sizeof err), 0);
    assert_int_equal(schedule_set_ids(&sched, (const uint64_t *const *)ids, err, sizeof err), 0);
    uint64_t len = schedule_len(&sched);
    assert_true(len > 12);
    assert_true(cnt[0] % 200 != 0); /* a short last batch in every training pass */

    struct batch_shape sh = {.batch_size = 200, .layers = 2, .fanouts = {6, 4}};
    struct sampler ref, s, plain;
    assert_int_equal(sampler_init(&ref, &tm, &sh, err, sizeof err), 0);
    assert_int_equal(sampler_init(&s, &tc, &sh, err, sizeof err), 0);
    assert_int_equal(sampler_init(&plain, &tc, &sh, err, sizeof err), 0);
    assert_null(ref.pre); /* mapped: nothing to prefetch */
    assert_non_null(s.pre);
    size_t size = (size_t)sl_round_up(ref.plan.max_bytes, 64);
    void *slot = aligned_alloc(64, size), *rslot = aligned_alloc(64, size);
    assert_true(slot && rslot);
    struct schedule_cursor cur, ncur;
    schedule_cursor_init(&cur, &sched, 0);
    schedule_cursor_init(&ncur, &sched, 0);
    uint64_t targets[200];

    /* 1. the stage's pattern: batch g + 1 prefetched before batch g is
     *    sampled, over every boundary of epoch and split, and the last */
    for (uint64_t g = 0; g < len; g++) {
        if (g + 1 < len)
            prefetch(&s, &ncur, g + 1);
        sample_check(&s, &ref, slot, rslot, size, &cur, g, "stage order");
        sample_check(&plain, &ref, slot, rslot, size, &cur, g, "no prefetch");
    }
    assert_true(s.lists_prefetched > 0);
    assert_int_equal(s.pre_count, 0);
    /* every list read once: as many as without the prefetch */
    assert_int_equal(s.lists_read, plain.lists_read);
    assert_int_equal(s.bytes_read, plain.bytes_read);
    assert_int_equal(sampler_prefetch(&ref, targets, 1, err, sizeof err), 0); /* a no-op when mapped */

    /* 2. two ahead, with samples of other batches in between (taken from
     *    neither prefetch), then the batches in order */
    uint64_t pf = s.lists_prefetched;
    prefetch(&s, &ncur, 3);
    prefetch(&s, &ncur, 4);
    sample_check(&s, &ref, slot, rslot, size, &cur, 9, "in between");
    assert_int_equal(s.pre_count, 2);
    sample_check(&s, &ref, slot, rslot, size, &cur, 3, "two ahead");
    assert_int_equal(s.pre_count, 1);
    sample_check(&s, &ref, slot, rslot, size, &cur, 4, "two ahead");
    assert_int_equal(s.pre_count, 0);
    assert_true(s.lists_prefetched > pf);

    /* 3. the newer of two taken: the older is dropped; a third prefetch
     *    drops the oldest; the same ids in another order are not a match */
    prefetch(&s, &ncur, 5);
    prefetch(&s, &ncur, 6);
    sample_check(&s, &ref, slot, rslot, size, &cur, 6, "newer");
    assert_int_equal(s.pre_count, 0);
    prefetch(&s, &ncur, 7);
    prefetch(&s, &ncur, 8);
    prefetch(&s, &ncur, 10);
    assert_int_equal(s.pre_count, 2);
    sample_check(&s, &ref, slot, rslot, size, &cur, 7, "dropped");
    assert_int_equal(s.pre_count, 2);
    struct schedule_batch sb;
    assert_int_equal(schedule_batch(&ncur, 8, &sb, err, sizeof err), 0);
    uint32_t nt = sb.pos.targets;
    for (uint32_t i = 0; i < nt; i++)
        targets[i] = sb.targets[nt - 1 - i];
    struct batch_id id = {.batch = 8};
    uint64_t e0, e1;
    memset(slot, 0xA5, size);
    memset(rslot, 0xA5, size);
    pf = s.lists_prefetched;
    assert_int_equal(sampler_sample(&s, slot, size, targets, nt, &id, 77, &e1, err, sizeof err), 0);
    assert_int_equal(sampler_sample(&ref, rslot, size, targets, nt, &id, 77, &e0, err, sizeof err), 0);
    assert_int_equal(s.lists_prefetched, pf); /* reversed: not batch 8's prefetch */
    assert_int_equal(s.pre_count, 2);
    assert_memory_equal(slot, rslot, ((const struct batch_hdr *)rslot)->bytes);
    sample_check(&s, &ref, slot, rslot, size, &cur, 10, "after a mismatch");
    assert_int_equal(s.pre_count, 0);

    /* 4. bad prefetches are refused, nothing outstanding changes */
    targets[0] = N;
    assert_int_equal(sampler_prefetch(&s, targets, 1, err, sizeof err), -ERANGE);
    assert_non_null(strstr(err, "not below"));
    assert_int_equal(sampler_prefetch(&s, targets, 0, err, sizeof err), -EINVAL);
    assert_int_equal(sampler_prefetch(&s, targets, 201, err, sizeof err), -EINVAL);
    assert_int_equal(s.pre_count, 0);
    /* one left outstanding is waited for by sampler_free */
    prefetch(&s, &ncur, 11);

    schedule_cursor_free(&cur);
    schedule_cursor_free(&ncur);
    free(slot);
    free(rslot);
    sampler_free(&ref);
    sampler_free(&s);
    sampler_free(&plain);
    schedule_free(&sched);
    for (int k = 0; k < BATCH_SPLITS; k++)
        free(ids[k]);
    sampler_topo_free(&tm);
    sampler_topo_free(&tc);
}

/* ---- Ginex's rule on a hand-made graph ---------------------------------------------------- */

static void test_choice(void **state)
{
    (void)state;
    /* 7 nodes; in-degree (from indptr) and out-degree (given):
     *   v   in  out  out/in
     *   0   2   8    4
     *   1   4   8    2
     *   2   0   5    -   (nothing to cache, always "cached")
     *   3   1   3    3
     *   4   2   8    4   (ties with 0: the smaller id first)
     *   5   3   0    0
     *   6   1   1    1 */
    const uint64_t ip[8] = {0, 2, 6, 6, 7, 9, 12, 13};
    const uint32_t out[7] = {8, 8, 5, 3, 8, 0, 1};
    uint64_t off[7], cn, ce;
    /* 5 ids of room: 0 (2), 4 (2), 3 (1) = 5; 1 would not fit and ends it */
    assert_int_equal(sampler_cache_choose(ip, out, 7, 5 * 4, 4, off, &cn, &ce), 0);
    assert_int_equal(cn, 3);
    assert_int_equal(ce, 5);
    assert_int_equal(off[0], 0); /* node order: 0, 3, 4 */
    assert_int_equal(off[3], 2);
    assert_int_equal(off[4], 3);
    assert_int_equal(off[2], 0);
    assert_true(off[1] == SAMPLER_UNCACHED && off[5] == SAMPLER_UNCACHED && off[6] == SAMPLER_UNCACHED);
    /* 4 ids: 0, 4 (4 ids), then 3 (1) does not fit: a prefix, never a skip to 6 */
    assert_int_equal(sampler_cache_choose(ip, out, 7, 4 * 4, 4, off, &cn, &ce), 0);
    assert_int_equal(cn, 2);
    assert_true(off[3] == SAMPLER_UNCACHED && off[6] == SAMPLER_UNCACHED);
    assert_int_equal(off[4], 2);
    /* 3 ids: 0 only (4 would need 2 more) */
    assert_int_equal(sampler_cache_choose(ip, out, 7, 3 * 4, 4, off, &cn, &ce), 0);
    assert_int_equal(cn, 1);
    assert_int_equal(off[0], 0);
    assert_true(off[4] == SAMPLER_UNCACHED);
    /* u64 ids: room for 5 ids is 40 bytes */
    assert_int_equal(sampler_cache_choose(ip, out, 7, 5 * 8, 8, off, &cn, &ce), 0);
    assert_int_equal(cn, 3);
    /* the same graph on disk: out-degrees counted from indices.bin, and the
     * cache filled with the lists */
    const uint32_t ind[13] = {0, 1, /* 0 <- */ 0, 1, 2, 3, /* 1 <- */ 2, /* 3 <- */ 4, 1, /* 4 <- */ 5, 6, 2, 4,
                              /* 6 <- */};
    /* out-degrees from these ids: 0:2 1:3 2:3 3:1 4:2 5:1 6:1; ratios
     * 0: 1, 1: 0.75, 3: 1, 4: 1, 5: 0.33, 6: 1 -> order 0, 3, 4, 6, 1, 5 */
    char small[4300];
    snprintf(small, sizeof small, "%s/hand", dir);
    write_dataset(small, 7, ip, ind, 13);
    struct sampler_topo t;
    open_mode(&t, small, SAMPLER_TOPO_CACHE, sampler_cache_index_bytes(7) + 6 * 4, false);
    assert_int_equal(t.cache_nodes, 4); /* 0 (2), 3 (1), 4 (2), 6 (1) = 6 ids */
    assert_int_equal(t.cache_edges, 6);
    assert_true(sampler_topo_cached(&t, 0) && sampler_topo_cached(&t, 3) && sampler_topo_cached(&t, 4) &&
                sampler_topo_cached(&t, 6) && sampler_topo_cached(&t, 2));
    assert_false(sampler_topo_cached(&t, 1) || sampler_topo_cached(&t, 5));
    for (uint64_t v = 0; v < 7; v++)
        if (ip[v + 1] > ip[v] && sampler_topo_cached(&t, v))
            assert_memory_equal((const uint32_t *)t.cache + t.cache_off[v], ind + ip[v], (ip[v + 1] - ip[v]) * 4);
    sampler_topo_free(&t);
    t_rmrf(small);
}

/* ---- refusals ------------------------------------------------------------------------------ */

static void test_errors(void **state)
{
    (void)state;
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    struct sampler_topo t;
    uint64_t index = sampler_cache_index_bytes(N);
    /* a budget that does not pass the index */
    struct sampler_topo_opts o = {.mode = SAMPLER_TOPO_CACHE, .cache_bytes = index};
    assert_int_equal(sampler_topo_open_mode(&t, ds, &m, &o, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "pipeline.neighbour_cache_mb"));
    assert_non_null(strstr(err, "index"));
    assert_non_null(strstr(err, "raise it"));
    /* a budget that holds the whole file */
    o.cache_bytes = index + n_edges * 4;
    assert_int_equal(sampler_topo_open_mode(&t, ds, &m, &o, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "pipeline.topology = \"memory\""));
    /* a failed open leaves nothing to free, and freeing is harmless */
    sampler_topo_free(&t);
    /* a bad value in the configuration */
    struct config c;
    const char *bad[] = {"dataset.path=\"x\"", "pipeline.topology=\"mapped\""};
    assert_int_equal(config_load(&c, NULL, bad, 2, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "pipeline.topology"));
    assert_non_null(strstr(err, "mmap")); /* the choices, or the nearest */
    const char *badmb[] = {"dataset.path=\"x\"", "pipeline.neighbour_cache_mb=0"};
    assert_int_equal(config_load(&c, NULL, badmb, 2, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "pipeline.neighbour_cache_mb"));
    const char *good[] = {"dataset.path=\"x\"", "pipeline.topology=\"cache\"", "pipeline.neighbour_cache_mb=64"};
    assert_int_equal(config_load(&c, NULL, good, 3, err, sizeof err), 0);
    assert_int_equal(c.pipeline.topology, TOPOLOGY_CACHE);
    assert_int_equal(c.pipeline.neighbour_cache_mb, 64);
    assert_int_equal(config_load(&c, NULL, good, 1, err, sizeof err), 0);
    assert_int_equal(c.pipeline.topology, TOPOLOGY_AUTO); /* the default */
    assert_int_equal(c.pipeline.neighbour_cache_mb, 0);   /* auto */
    /* a list whose end lies past the file's end (the file shrank under indptr) */
    char cut[4300], path[4400];
    snprintf(cut, sizeof cut, "%s/cut", dir);
    write_dataset(cut, N, indptr, indices, n_edges);
    assert_int_equal(dataset_meta_read(cut, &m, true, err, sizeof err), 0);
    o.cache_bytes = index + 4096;
    assert_int_equal(sampler_topo_open_mode(&t, cut, &m, &o, err, sizeof err), 0);
    snprintf(path, sizeof path, "%s/indices.bin", cut);
    assert_int_equal(truncate(path, (off_t)(indptr[HUB] * 4)), 0);
    struct batch_shape sh = {.batch_size = 4, .layers = 1, .fanouts = {3}};
    struct sampler s;
    assert_int_equal(sampler_init(&s, &t, &sh, err, sizeof err), 0);
    void *slot = aligned_alloc(64, (size_t)sl_round_up(s.plan.max_bytes, 64));
    assert_non_null(slot);
    uint64_t tg[1] = {HUB};
    struct batch_id id = {0};
    assert_int_equal(
        sampler_sample(&s, slot, (size_t)sl_round_up(s.plan.max_bytes, 64), tg, 1, &id, 1, NULL, err, sizeof err),
        -EIO);
    assert_non_null(strstr(err, "run gnnprep check"));
    free(slot);
    sampler_free(&s);
    sampler_topo_free(&t);
}

/* ---- gnn-sampler --bench ---------------------------------------------------------------- */

static void test_cli(void **state)
{
    (void)state;
    char bin[4096], out[8192];
    t_bin(bin, sizeof bin, "gnn-sampler");
    int rc = t_run(out, sizeof out, "'%s' --bench '%s' --fanouts 5,5 --batch-size 64 --seconds 0.2 --topology memory",
                   bin, ds);
    if (rc != 0)
        fail_msg("gnn-sampler --bench --topology memory failed (%d): %s", rc, out);
    assert_non_null(strstr(out, "topology=memory\n"));
    assert_non_null(strstr(out, "of indices.bin in ")); /* the load, its time and rate, on stderr */
    assert_non_null(strstr(out, " MiB/s, "));
    assert_non_null(strstr(out, "lists_read=0\n"));
    assert_int_equal(t_run(out, sizeof out, "'%s' --bench '%s' --topology cache", bin, ds), 2);
    assert_non_null(strstr(out, "--cache-mb"));
    assert_int_equal(t_run(out, sizeof out, "'%s' --bench '%s' --topology mapped", bin, ds), 2);
    assert_non_null(strstr(out, "--topology wants mmap, memory or cache"));
    /* a budget of 1 MiB holds the whole 0.3 MiB file: refused, pointing at memory */
    assert_int_equal(t_run(out, sizeof out, "'%s' --bench '%s' --topology cache --cache-mb 1 --seconds 0.1", bin, ds),
                     1);
    assert_non_null(strstr(out, "pipeline.topology = \"memory\""));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identical),
        cmocka_unit_test(test_prefetch),
        cmocka_unit_test(test_choice),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
