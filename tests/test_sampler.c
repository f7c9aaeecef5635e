/* test_sampler.c - stages/sampler: sampled batches are valid sub-graphs of
 * the dataset (every edge exists, per destination min(f, deg) distinct
 * sources, nodes deduplicated, targets first, batch_view accepts),
 * deterministic for a seed, unbiased (each in-neighbour taken with
 * probability f/d, checked with a chi-square bound that biased samplers
 * fail), and epoch shares cover the training split exactly once across
 * ranks; plus gnn-sampler's command line. */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>

#include "core/dataset.h"
#include "core/util.h"
#include "stages/sampler.h"
#include "stages/schedule.h"

#define N 3000
#define HUB_STAR 0 /* in-degree STAR_DEG, neighbours 100, 200, ... */
#define STAR_DEG 20
#define HUB_BIG 1 /* in-degree 40 */
#define BIG_DEG 40

static char err[1024];
static char dir[4096], ds[4200];
static uint64_t indptr[N + 1];
static uint32_t *indices;
static int32_t labels[N];
static uint64_t train[N];
static uint64_t n_train;

static uint64_t rng_state = 12345;
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 31)) * 0xD6E8FEB86659FD93ull;
    return z ^ (z >> 29);
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static void put(struct dataset_dir *d, struct dataset_meta *m, int idx, const char *name, enum dtype t,
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

/* A graph of N nodes: node 0 has 20 in-neighbours, node 1 has 40, the rest
 * 0..30 distinct random ones; train = every third node. */
static void make_dataset(void)
{
    indices = malloc((size_t)N * 41 * sizeof *indices);
    assert_non_null(indices);
    uint64_t e = 0;
    for (uint32_t v = 0; v < N; v++) {
        indptr[v] = e;
        uint32_t deg = v == HUB_STAR ? STAR_DEG : v == HUB_BIG ? BIG_DEG : (uint32_t)(rnd() % 31);
        uint32_t base = (uint32_t)(rnd() % N), step = 1 + (uint32_t)(rnd() % 7);
        for (uint32_t i = 0; i < deg; i++)
            indices[e + i] = v == HUB_STAR ? 100 * (i + 1) : (base + i * step) % N;
        qsort(indices + e, deg, sizeof *indices, cmp_u32);
        e += deg;
        labels[v] = (int32_t)(v % 5);
    }
    indptr[N] = e;
    n_train = 0;
    uint32_t val[N], test[N], nv = 0, nt = 0;
    for (uint32_t v = 0; v < N; v++) {
        if (v % 3 == 0)
            train[n_train++] = v;
        else if (v % 3 == 1)
            val[nv++] = v;
        else
            test[nt++] = v;
    }
    uint32_t tr32[N];
    for (uint64_t i = 0; i < n_train; i++)
        tr32[i] = (uint32_t)train[i];
    t_scratch(dir, sizeof dir, "sampler");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    struct dataset_dir d;
    assert_int_equal(dataset_dir_begin(&d, ds, err, sizeof err), 0);
    struct dataset_meta m = {.nodes = N, .edges = e, .feat_dim = 1, .classes = 5, .feat_align = DATASET_FEAT_ALIGN};
    put(&d, &m, DATASET_INDPTR, "indptr.bin", DTYPE_U64, indptr, N + 1);
    put(&d, &m, DATASET_INDICES, "indices.bin", DTYPE_U32, indices, e);
    put(&d, &m, DATASET_LABELS, "labels.bin", DTYPE_I32, labels, N);
    put(&d, &m, DATASET_TRAIN, "train.bin", DTYPE_U32, tr32, n_train);
    put(&d, &m, DATASET_VAL, "val.bin", DTYPE_U32, val, nv);
    put(&d, &m, DATASET_TEST, "test.bin", DTYPE_U32, test, nt);
    struct feat_writer fw;
    char p[4096];
    dataset_dir_path(&d, "features.bin", p, sizeof p);
    assert_int_equal(feat_writer_open(&fw, p, DTYPE_F32, 1, err, sizeof err), 0);
    for (uint32_t v = 0; v < N; v++) {
        float x = (float)v;
        assert_int_equal(feat_writer_put(&fw, &x, err, sizeof err), 0);
    }
    assert_int_equal(feat_writer_close(&fw, &m.f[DATASET_FEATURES], err, sizeof err), 0);
    assert_int_equal(dataset_dir_commit(&d, &m, err, sizeof err), 0);
}

static struct sampler_topo topo;

static int setup(void **state)
{
    (void)state;
    make_dataset();
    struct dataset_meta m;
    if (dataset_meta_read(ds, &m, true, err, sizeof err) || sampler_topo_open(&topo, ds, &m, err, sizeof err)) {
        fprintf(stderr, "setup: %s\n", err);
        return -1;
    }
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    sampler_topo_free(&topo);
    free(indices);
    t_rmrf(dir);
    return 0;
}

static bool is_in_neighbour(uint64_t dst, uint64_t src)
{
    uint64_t lo = indptr[dst], hi = indptr[dst + 1];
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (indices[mid] == src)
            return true;
        if (indices[mid] < src)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* A slot of the worst-case size for s's shape, zeroed. */
static void *new_slot(const struct sampler *s, size_t *size)
{
    *size = (size_t)sl_round_up(s->plan.max_bytes, 64);
    void *p = aligned_alloc(64, *size);
    assert_non_null(p);
    memset(p, 0, *size);
    return p;
}

static void shape_of(struct batch_shape *sh, uint64_t batch_size, uint32_t layers, const int64_t *fan)
{
    memset(sh, 0, sizeof *sh);
    sh->batch_size = batch_size;
    sh->layers = layers;
    for (uint32_t k = 0; k < layers; k++)
        sh->fanouts[k] = fan[k];
}

/* Checks a sampled batch against the graph; returns its edge count. */
static uint64_t check_batch(void *slot, size_t size, const uint64_t *targets, uint32_t nt, const struct batch_shape *sh,
                            const char *what)
{
    struct batch_view v;
    if (batch_view(slot, size, 0, &v, err, sizeof err))
        fail_msg("%s: batch_view refused the batch: %s", what, err);
    assert_int_equal(batch_targets(&v), nt);
    assert_int_equal(batch_layers(&v), sh->layers);
    for (uint32_t i = 0; i < nt; i++) {
        assert_int_equal(v.nodes[i], targets[i]);
        assert_int_equal(v.labels[i], labels[targets[i]]);
    }
    uint32_t nn = batch_nodes(&v);
    uint64_t *sorted = malloc(nn * sizeof *sorted);
    assert_non_null(sorted);
    memcpy(sorted, v.nodes, nn * sizeof *sorted);
    qsort(sorted, nn, sizeof *sorted, cmp_u64);
    for (uint32_t i = 1; i < nn; i++)
        if (sorted[i] == sorted[i - 1])
            fail_msg("%s: node %" PRIu64 " appears twice", what, sorted[i]);
    free(sorted);
    uint64_t total = 0;
    for (uint32_t k = 0; k < sh->layers; k++) {
        int64_t f = sh->fanouts[k];
        bool *seen_src = calloc(batch_block_src(&v, k), 1);
        assert_non_null(seen_src);
        for (uint32_t d = 0; d < batch_block_dst(&v, k); d++) {
            uint64_t g = v.nodes[d], deg = indptr[g + 1] - indptr[g];
            uint64_t want = f < 0 || deg <= (uint64_t)f ? deg : (uint64_t)f;
            uint32_t b = v.indptr[k][d], e = v.indptr[k][d + 1];
            if (e - b != want)
                fail_msg("%s: block %u dst %u (node %" PRIu64 ", deg %" PRIu64 ") has %u sources, want %" PRIu64, what,
                         k, d, g, deg, e - b, want);
            for (uint32_t i = b; i < e; i++) {
                uint32_t s = v.src[k][i];
                seen_src[s] = true;
                if (!is_in_neighbour(g, v.nodes[s]))
                    fail_msg("%s: block %u: %" PRIu64 " -> %" PRIu64 " is not an edge", what, k, v.nodes[s], g);
                for (uint32_t j = b; j < i; j++)
                    if (v.src[k][j] == s)
                        fail_msg("%s: block %u dst %u: source %u drawn twice", what, k, d, s);
            }
        }
        /* every node new in hop k+1 is a source of block k */
        for (uint32_t s = batch_block_dst(&v, k); s < batch_block_src(&v, k); s++)
            if (!seen_src[s])
                fail_msg("%s: block %u: node %u was added but is no source", what, k, s);
        free(seen_src);
        total += batch_block_edges(&v, k);
    }
    return total;
}

static void test_structure(void **state)
{
    (void)state;
    static const struct {
        uint32_t layers;
        int64_t fan[3];
        uint64_t batch;
    } cases[] = {
        {1, {5}, 64}, {2, {5, 3}, 100}, {2, {-1, 2}, 37}, {3, {10, 10, 10}, 128}, {2, {0, 4}, 16}, {3, {25, -1, 1}, 9},
    };
    uint64_t share[N], n_share;
    assert_int_equal(schedule_shuffle_share(train, n_train, 3, 0, 0, 1, share, &n_share, err, sizeof err), 0);
    for (size_t c = 0; c < SL_ARRAY_LEN(cases); c++) {
        struct batch_shape sh;
        shape_of(&sh, cases[c].batch, cases[c].layers, cases[c].fan);
        struct sampler s;
        if (sampler_init(&s, &topo, &sh, err, sizeof err))
            fail_msg("case %zu: %s", c, err);
        size_t size;
        void *slot = new_slot(&s, &size);
        uint64_t nb = schedule_batch_count(n_share, sh.batch_size);
        for (uint64_t b = 0; b < nb && b < 6; b++) {
            uint64_t first = b * sh.batch_size;
            uint32_t nt = (uint32_t)SL_MIN(sh.batch_size, n_share - first);
            struct batch_id id = {.batch = b, .epoch = 0, .rank = 0};
            uint64_t edges;
            char what[64];
            snprintf(what, sizeof what, "case %zu batch %" PRIu64, c, b);
            if (sampler_sample(&s, slot, size, share + first, nt, &id, sampler_batch_seed(3, 0, 0, b), &edges, err,
                               sizeof err))
                fail_msg("%s: %s", what, err);
            assert_int_equal(check_batch(slot, size, share + first, nt, &sh, what), edges);
        }
        free(slot);
        sampler_free(&s);
    }
}

/* Fanout -1 on the 40-neighbour node takes exactly its neighbour list. */
static void test_fanout_all(void **state)
{
    (void)state;
    struct batch_shape sh;
    int64_t fan[1] = {-1};
    shape_of(&sh, 4, 1, fan);
    struct sampler s;
    assert_int_equal(sampler_init(&s, &topo, &sh, err, sizeof err), 0);
    size_t size;
    void *slot = new_slot(&s, &size);
    uint64_t t[1] = {HUB_BIG};
    struct batch_id id = {0};
    assert_int_equal(sampler_sample(&s, slot, size, t, 1, &id, 99, NULL, err, sizeof err), 0);
    struct batch_view v;
    assert_int_equal(batch_view(slot, size, 0, &v, err, sizeof err), 0);
    assert_int_equal(batch_block_edges(&v, 0), BIG_DEG);
    uint64_t got[BIG_DEG];
    for (uint32_t i = 0; i < BIG_DEG; i++)
        got[i] = v.nodes[v.src[0][i]];
    qsort(got, BIG_DEG, sizeof *got, cmp_u64);
    for (uint32_t i = 0; i < BIG_DEG; i++)
        assert_int_equal(got[i], indices[indptr[HUB_BIG] + i]);
    free(slot);
    sampler_free(&s);
}

/* A shape with degrees (GCN's graph norm): every node of the batch carries
 * its in-degree in the graph; without, the batch has none. */
static void test_degrees(void **state)
{
    (void)state;
    for (int with = 0; with < 2; with++) {
        struct batch_shape sh;
        int64_t fan[2] = {3, 2};
        shape_of(&sh, 4, 2, fan);
        sh.degrees = with;
        struct sampler s;
        assert_int_equal(sampler_init(&s, &topo, &sh, err, sizeof err), 0);
        size_t size;
        void *slot = new_slot(&s, &size);
        uint64_t t[2] = {HUB_BIG, HUB_BIG + 1};
        struct batch_id id = {0};
        if (sampler_sample(&s, slot, size, t, 2, &id, 7, NULL, err, sizeof err) != 0)
            fail_msg("%s", err);
        struct batch_view v;
        assert_int_equal(batch_view(slot, size, 0, &v, err, sizeof err), 0);
        if (!with) {
            assert_null(v.deg);
        } else {
            assert_non_null(v.deg);
            assert_int_equal(v.deg[0], BIG_DEG);
            for (uint32_t i = 0; i < batch_nodes(&v); i++)
                assert_int_equal(v.deg[i], indptr[v.nodes[i] + 1] - indptr[v.nodes[i]]);
        }
        free(slot);
        sampler_free(&s);
    }
}

static void test_determinism(void **state)
{
    (void)state;
    struct batch_shape sh;
    int64_t fan[3] = {10, 5, 3};
    shape_of(&sh, 50, 3, fan);
    struct sampler a, b;
    assert_int_equal(sampler_init(&a, &topo, &sh, err, sizeof err), 0);
    assert_int_equal(sampler_init(&b, &topo, &sh, err, sizeof err), 0);
    size_t size;
    void *s1 = new_slot(&a, &size), *s2 = new_slot(&a, &size), *s3 = new_slot(&a, &size);
    struct batch_id id = {.batch = 7, .epoch = 2, .rank = 1};
    uint64_t seed = sampler_batch_seed(42, 2, 1, 7);
    /* a samples another batch first: its reused state must not matter */
    assert_int_equal(sampler_sample(&a, s3, size, train + 100, 50, &id, 5, NULL, err, sizeof err), 0);
    memset(s3, 0, size);
    assert_int_equal(sampler_sample(&a, s1, size, train, 50, &id, seed, NULL, err, sizeof err), 0);
    assert_int_equal(sampler_sample(&b, s2, size, train, 50, &id, seed, NULL, err, sizeof err), 0);
    assert_memory_equal(s1, s2, size);
    assert_int_equal(
        sampler_sample(&b, s3, size, train, 50, &id, sampler_batch_seed(43, 2, 1, 7), NULL, err, sizeof err), 0);
    assert_memory_not_equal(s1, s3, size);
    /* the batch seed depends on each of its four inputs */
    uint64_t s0 = sampler_batch_seed(1, 2, 3, 4);
    assert_true(s0 != sampler_batch_seed(0, 2, 3, 4) && s0 != sampler_batch_seed(1, 3, 3, 4) &&
                s0 != sampler_batch_seed(1, 2, 4, 4) && s0 != sampler_batch_seed(1, 2, 3, 5) &&
                s0 == sampler_batch_seed(1, 2, 3, 4));
    free(s1);
    free(s2);
    free(s3);
    sampler_free(&a);
    sampler_free(&b);
}

/* The batch stream: every batch number maps to one (epoch, split, k), the
 * passes come in the documented order, and the sizes add up. */
static int stream_open(struct schedule *s, const uint64_t n[BATCH_SPLITS], uint32_t rank, uint32_t ranks,
                       uint64_t batch_size, uint32_t epochs, uint32_t eval_every)
{
    struct schedule_params p = {.rank = rank, .ranks = ranks, .batch_size = batch_size, .epochs = epochs,
                                .eval_every = eval_every, .seed = 7};
    memcpy(p.split_n, n, sizeof p.split_n);
    return schedule_open(s, NULL, &p, err, sizeof err);
}

static void test_stream(void **state)
{
    (void)state;
    struct schedule s;
    const uint64_t n[BATCH_SPLITS] = {1001, 250, 99};
    assert_int_equal(stream_open(&s, n, 0, 3, 0, 5, 2), -EINVAL);
    assert_int_equal(stream_open(&s, n, 3, 3, 10, 5, 2), -EINVAL);
    for (uint32_t rank = 0; rank < 3; rank++) {
        /* 5 epochs, validation after epochs 1, 3 and 4 (the last) */
        assert_int_equal(stream_open(&s, n, rank, 3, 10, 5, 2), 0);
        uint64_t share_t = schedule_share_size(1001, rank, 3), share_v = schedule_share_size(250, rank, 3);
        uint64_t share_x = schedule_share_size(99, rank, 3);
        assert_int_equal(schedule_pass_targets(&s, 0, BATCH_TRAIN), share_t);
        uint64_t nbt = (share_t + 9) / 10, nbv = (share_v + 9) / 10, nbx = (share_x + 9) / 10;
        assert_int_equal(schedule_len(&s), 5 * nbt + 3 * nbv + nbx);
        assert_false(schedule_pass_batches(&s, 0, BATCH_VAL) > 0);
        assert_true(schedule_pass_batches(&s, 1, BATCH_VAL) > 0);
        assert_true(schedule_pass_batches(&s, 4, BATCH_VAL) > 0);
        uint64_t targets[5][BATCH_SPLITS] = {{0}};
        struct schedule_pos prev = {0}, p;
        for (uint64_t g = 0; g < schedule_len(&s); g++) {
            schedule_at(&s, g, &p);
            assert_true(p.epoch < 5 && p.split < BATCH_SPLITS);
            assert_int_equal(p.first, p.k * 10);
            assert_true(p.targets >= 1 && p.targets <= 10);
            targets[p.epoch][p.split] += p.targets;
            if (g > 0) /* never backwards: epochs, then splits in order within an epoch */
                assert_true(p.epoch > prev.epoch || (p.epoch == prev.epoch && p.split >= prev.split));
            if (g > 0 && p.epoch == prev.epoch && p.split == prev.split)
                assert_int_equal(p.k, prev.k + 1);
            prev = p;
        }
        for (uint32_t e = 0; e < 5; e++) {
            assert_int_equal(targets[e][BATCH_TRAIN], share_t);
            assert_int_equal(targets[e][BATCH_VAL], e == 1 || e == 3 || e == 4 ? share_v : 0);
            assert_int_equal(targets[e][BATCH_TEST], e == 4 ? share_x : 0);
        }
        /* evaluation batches get seeds of their own */
        struct schedule_pos a = {.epoch = 1, .split = BATCH_TRAIN, .k = 2}, b = a;
        b.split = BATCH_VAL;
        assert_true(schedule_seed(&s, &a) != schedule_seed(&s, &b));
        assert_int_equal(schedule_seed(&s, &a), sampler_batch_seed(7, 1, rank, 2));
        schedule_free(&s);
    }
    /* no validation split: nothing to evaluate, no empty passes */
    const uint64_t only[BATCH_SPLITS] = {40, 0, 0};
    assert_int_equal(stream_open(&s, only, 0, 1, 10, 3, 1), 0);
    assert_int_equal(schedule_len(&s), 12);
    assert_false(schedule_pass_batches(&s, 2, BATCH_VAL) > 0);
    schedule_free(&s);
}

static void test_epoch_share(void **state)
{
    (void)state;
    uint64_t ids[1001], out[1001];
    for (uint64_t i = 0; i < 1001; i++)
        ids[i] = 5 * i + 2;
    for (uint32_t ranks = 1; ranks <= 3; ranks++) {
        uint64_t first_of_epoch[2] = {0};
        for (uint32_t epoch = 0; epoch < 2; epoch++) {
            uint32_t count[1001 * 5 + 3] = {0};
            uint64_t smin = UINT64_MAX, smax = 0;
            for (uint32_t r = 0; r < ranks; r++) {
                uint64_t n;
                assert_int_equal(schedule_shuffle_share(ids, 1001, 9, epoch, r, ranks, out, &n, err, sizeof err), 0);
                smin = SL_MIN(smin, n);
                smax = SL_MAX(smax, n);
                for (uint64_t i = 0; i < n; i++)
                    count[out[i]]++;
                if (r == 0)
                    first_of_epoch[epoch] = out[0] << 32 | out[1];
                /* batches of 64 cover the share */
                uint64_t nb = schedule_batch_count(n, 64);
                assert_true(nb * 64 >= n && (nb - 1) * 64 < n);
            }
            assert_true(smax - smin <= 1);
            for (uint64_t i = 0; i < 1001; i++)
                if (count[ids[i]] != 1)
                    fail_msg("ranks %u epoch %u: id %" PRIu64 " taken %u times", ranks, epoch, ids[i], count[ids[i]]);
        }
        assert_true(first_of_epoch[0] != first_of_epoch[1]); /* a fresh order each epoch */
    }
    /* the shuffle is not the identity */
    uint64_t n;
    assert_int_equal(schedule_shuffle_share(ids, 1001, 9, 0, 0, 1, out, &n, err, sizeof err), 0);
    int moved = 0;
    for (uint64_t i = 0; i < n; i++)
        moved += out[i] != ids[i];
    assert_true(moved > 900);
    assert_int_equal(schedule_shuffle_share(ids, 1001, 9, 0, 3, 3, out, &n, err, sizeof err), -EINVAL);
}

/* Chi-square of inclusion counts c[0 .. d) over T trials each including
 * every cell with probability p: sum (c - Tp)^2 / (T p (1 - p)). Its
 * expectation is d whether or not the cells are correlated. */
static double chi2(const uint64_t *c, uint32_t d, uint64_t trials, double p)
{
    double x = 0, mu = (double)trials * p, var = mu * (1 - p);
    for (uint32_t i = 0; i < d; i++)
        x += ((double)c[i] - mu) * ((double)c[i] - mu) / var;
    return x;
}

/* Far beyond any plausible value for a correct sampler (mean d, standard
 * deviation at most ~sqrt(2d) times a small factor). */
static double chi2_bound(uint32_t d)
{
    return d + 10.0 * sqrt(2.0 * d);
}

static void biased_counts(uint64_t *c, uint32_t d, uint32_t f, uint64_t trials, int kind)
{
    uint64_t st = 77;
    memset(c, 0, d * sizeof *c);
    for (uint64_t t = 0; t < trials; t++) {
        if (kind == 0) { /* always the first f */
            for (uint32_t i = 0; i < f; i++)
                c[i]++;
            continue;
        }
        /* Floyd with an 8-bit random source reduced modulo the range */
        uint32_t picks[64];
        for (uint32_t j = d - f, n = 0; j < d; j++, n++) {
            uint32_t x = (uint32_t)(sampler_rand_below(&st, 256) % (j + 1));
            for (uint32_t i = 0; i < n; i++)
                if (picks[i] == x) {
                    x = j;
                    break;
                }
            picks[n] = x;
        }
        for (uint32_t i = 0; i < f; i++)
            c[picks[i]]++;
    }
}

static void test_unbiased(void **state)
{
    (void)state;
    const uint64_t trials = 400000;
    /* node, degree, fanout: small fanouts use Floyd with a linear scan,
     * those above 24 its hash set; 19 of 20 and 38 of 40 are f close to d */
    static const struct {
        uint64_t node;
        uint32_t d, f;
    } cases[] = {
        {HUB_STAR, STAR_DEG, 1}, {HUB_STAR, STAR_DEG, 5}, {HUB_STAR, STAR_DEG, 19},
        {HUB_BIG, BIG_DEG, 30},  {HUB_BIG, BIG_DEG, 38},
    };
    for (size_t ci = 0; ci < SL_ARRAY_LEN(cases); ci++) {
        uint32_t f = cases[ci].f, d = cases[ci].d;
        const uint32_t *nb = indices + indptr[cases[ci].node];
        struct batch_shape sh;
        int64_t fan[1] = {f};
        shape_of(&sh, 1, 1, fan);
        struct sampler s;
        assert_int_equal(sampler_init(&s, &topo, &sh, err, sizeof err), 0);
        size_t size;
        void *slot = new_slot(&s, &size);
        uint64_t c[BIG_DEG] = {0};
        uint64_t t0[1] = {cases[ci].node};
        for (uint64_t t = 0; t < trials; t++) {
            struct batch_id id = {.batch = t};
            if (sampler_sample(&s, slot, size, t0, 1, &id, sampler_batch_seed(2026, 0, 0, t), NULL, err, sizeof err))
                fail_msg("trial %" PRIu64 ": %s", t, err);
            const struct batch_hdr *h = slot;
            const uint32_t *src = (const uint32_t *)((const char *)slot + h->src_off[0]);
            const uint64_t *nodes = (const uint64_t *)((const char *)slot + h->nodes_off);
            assert_int_equal(h->e[0], f);
            for (uint32_t i = 0; i < f; i++) {
                uint32_t j = 0;
                while (j < d && nb[j] != nodes[src[i]]) /* position in the neighbour list */
                    j++;
                assert_true(j < d);
                c[j]++;
            }
        }
        double p = (double)f / d, x = chi2(c, d, trials, p);
        print_message("fanout %u of %u: chi2 %.1f (bound %.1f)\n", f, d, x, chi2_bound(d));
        if (x > chi2_bound(d))
            fail_msg("fanout %u of %u: chi-square %.1f above %.1f: the sampler is biased", f, d, x, chi2_bound(d));
        /* the bound has power: biased samplers fail it with these trials */
        for (int kind = 0; kind < 2; kind++) {
            biased_counts(c, d, f, trials, kind);
            double xb = chi2(c, d, trials, p);
            print_message("  biased sampler %d: chi2 %.1f\n", kind, xb);
            if (xb <= chi2_bound(d))
                fail_msg("fanout %u of %u: the %s sampler passes the bound (chi2 %.1f)", f, d,
                         kind ? "modulo-biased" : "first-f", xb);
        }
        free(slot);
        sampler_free(&s);
    }
    /* Lemire's bounded integers: uniform over a small range */
    uint64_t st = 5, c3[3] = {0};
    for (int i = 0; i < 300000; i++)
        c3[sampler_rand_below(&st, 3)]++;
    double x = 0;
    for (int i = 0; i < 3; i++)
        x += ((double)c3[i] - 100000) * ((double)c3[i] - 100000) / 100000;
    assert_true(x < 30); /* chi-square, 2 degrees of freedom */
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(sampler_rand_below(&st, 1), 0);
        assert_true(sampler_rand_below(&st, (1ull << 63) + 1) <= (1ull << 63));
    }
}

static void test_errors(void **state)
{
    (void)state;
    struct batch_shape sh;
    int64_t fan[2] = {5, 5};
    shape_of(&sh, 8, 2, fan);
    struct sampler s;
    assert_int_equal(sampler_init(&s, &topo, &sh, err, sizeof err), 0);
    size_t size;
    void *slot = new_slot(&s, &size);
    struct batch_id id = {0};
    uint64_t dup[3] = {3, 6, 3};
    assert_int_equal(sampler_sample(&s, slot, size, dup, 3, &id, 1, NULL, err, sizeof err), -EINVAL);
    uint64_t bad[1] = {N};
    assert_int_equal(sampler_sample(&s, slot, size, bad, 1, &id, 1, NULL, err, sizeof err), -ERANGE);
    uint64_t ok[2] = {3, 6};
    assert_int_equal(sampler_sample(&s, slot, 512, ok, 2, &id, 1, NULL, err, sizeof err), -ENOSPC);
    assert_int_equal(sampler_sample(&s, slot, size, ok, 9, &id, 1, NULL, err, sizeof err), -EINVAL); /* > batch */
    assert_int_equal(sampler_sample(&s, slot, size, ok, 2, &id, 1, NULL, err, sizeof err), 0);
    free(slot);
    sampler_free(&s);
    int64_t badfan[1] = {-2};
    shape_of(&sh, 8, 1, badfan);
    assert_int_equal(sampler_init(&s, &topo, &sh, err, sizeof err), -EINVAL);
    sampler_free(&s);
    /* a split of the dataset */
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    uint64_t *ids, n;
    assert_int_equal(sampler_split_load(ds, &m, DATASET_TRAIN, &ids, &n, err, sizeof err), 0);
    assert_int_equal(n, n_train);
    assert_memory_equal(ids, train, n * sizeof *ids);
    free(ids);
    assert_int_equal(sampler_split_load(ds, &m, DATASET_LABELS, &ids, &n, err, sizeof err), -EINVAL);
}

/* Overwrites 8 (or 4) bytes at off in file name of a copy of the dataset. */
static void poke(const char *copy, const char *name, off_t off, const void *val, size_t len)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/%s", copy, name);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    assert_int_equal(fseeko(f, off, SEEK_SET), 0);
    assert_int_equal(fwrite(val, 1, len, f), len);
    assert_int_equal(fclose(f), 0);
}

/* Damaged files are refused, never followed out of bounds. */
static void test_damaged(void **state)
{
    (void)state;
    char copy[4300];
    snprintf(copy, sizeof copy, "%s/damaged", dir);
    struct dataset_meta m;
    struct sampler_topo t;
    /* indptr decreasing at node 5 */
    assert_int_equal(t_run(NULL, 0, "rm -rf '%s' && cp -r '%s' '%s'", copy, ds, copy), 0);
    uint64_t big = indptr[N] - 1;
    poke(copy, "indptr.bin", 5 * 8, &big, 8);
    assert_int_equal(dataset_meta_read(copy, &m, true, err, sizeof err), 0);
    assert_int_equal(sampler_topo_open(&t, copy, &m, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "decreases at node"));
    sampler_topo_free(&t);
    /* an in-neighbour id past the graph: the batch fails with -ERANGE */
    assert_int_equal(t_run(NULL, 0, "rm -rf '%s' && cp -r '%s' '%s'", copy, ds, copy), 0);
    uint32_t bad = N + 7;
    poke(copy, "indices.bin", 4 * indptr[HUB_STAR], &bad, 4);
    assert_int_equal(dataset_meta_read(copy, &m, true, err, sizeof err), 0);
    assert_int_equal(sampler_topo_open(&t, copy, &m, err, sizeof err), 0);
    struct batch_shape sh;
    int64_t fan[1] = {-1};
    shape_of(&sh, 2, 1, fan);
    struct sampler s;
    assert_int_equal(sampler_init(&s, &t, &sh, err, sizeof err), 0);
    size_t size;
    void *slot = new_slot(&s, &size);
    uint64_t tg[1] = {HUB_STAR};
    struct batch_id id = {0};
    assert_int_equal(sampler_sample(&s, slot, size, tg, 1, &id, 1, NULL, err, sizeof err), -ERANGE);
    free(slot);
    sampler_free(&s);
    sampler_topo_free(&t);
    t_rmrf(copy);
}

static void test_cli(void **state)
{
    (void)state;
    char bin[4096], out[8192];
    t_bin(bin, sizeof bin, "gnn-sampler");
    int rc =
        t_run(out, sizeof out, "'%s' --bench '%s' --fanouts 5,5 --batch-size 64 --threads 2 --seconds 0.2", bin, ds);
    if (rc != 0)
        fail_msg("gnn-sampler --bench failed (%d): %s", rc, out);
    assert_non_null(strstr(out, "batches_per_s="));
    assert_non_null(strstr(out, "sampled_edges_per_s="));
    assert_non_null(strstr(out, "threads=2\n"));
    assert_non_null(strstr(out, "fanouts=5,5\n"));
    const char *p = strstr(out, "\nbatches=");
    assert_non_null(p);
    assert_true(strtoull(p + 9, NULL, 10) > 0);
    assert_int_equal(t_run(out, sizeof out, "'%s'", bin), 2);
    assert_non_null(strstr(out, "usage: gnn-sampler"));
    assert_int_equal(t_run(out, sizeof out, "'%s' --bench '%s' --fanouts 5,x", bin, ds), 2);
    assert_int_equal(t_run(out, sizeof out, "'%s' --help", bin), 0);
    assert_int_equal(t_run(out, sizeof out, "'%s' --bench '%s/missing' --seconds 0.1", bin, dir), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_structure),   cmocka_unit_test(test_fanout_all), cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_epoch_share), cmocka_unit_test(test_unbiased),   cmocka_unit_test(test_errors),
        cmocka_unit_test(test_damaged),     cmocka_unit_test(test_cli),        cmocka_unit_test(test_stream),
        cmocka_unit_test(test_degrees),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
