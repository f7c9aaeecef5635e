/* test_partition.c - `gnnprep partition` and core/partition.h: the layout
 * of a synthetic dataset read back against the dataset itself (positions
 * a permutation with the training nodes first, every feature row in its
 * block, padding zero, every edge in its bucket once, buckets sorted and
 * columns aligned), the same bytes in memory and out of core (many
 * windows), --order degree, and refusals: a layout beside another
 * dataset, a truncated or changed layout file, a dataset whose contents
 * changed (nothing half-written left behind), bad flags. */
#include <dirent.h>
#include <errno.h>

#include "t_util.h"
#include "core/dataset.h"
#include "core/partition.h"
#include "core/partorder.h"
#include "core/util.h"

static char err[1024], log_[16384];

static void *slurp_path(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("%s: cannot open", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    if (len)
        *len = (size_t)n;
    return b;
}

static void *slurp(const char *dir, const char *name, size_t *len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return slurp_path(path, len);
}

static void synth(const char *out, unsigned dim, unsigned seed)
{
    char prep[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(log_, sizeof log_, "%s synth %s --nodes 6000 --avg-degree 8 --feat-dim %u --classes 4 --seed %u", prep, out,
              dim, seed) != 0)
        fail_msg("gnnprep synth failed: %s", log_);
}

static int partition(const char *ds, const char *args)
{
    char prep[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    return t_run(log_, sizeof log_, "%s partition %s %s --quiet", prep, ds, args);
}

static uint64_t id_at(const void *v, size_t idsz, uint64_t i)
{
    return idsz == 4 ? ((const uint32_t *)v)[i] : ((const uint64_t *)v)[i];
}

/* Reads the layout dir of dataset ds back and checks it against ds. */
static void check_layout_eval(const char *ds, const char *dir, uint32_t p, enum parts_order order, bool eval_first);
static void check_layout(const char *ds, const char *dir, uint32_t p, enum parts_order order)
{
    check_layout_eval(ds, dir, p, order, false);
}

/* ... with --eval-first: the validation and test nodes right after the
 * training nodes, eval_parts the partitions holding all three. */
static void check_layout_eval(const char *ds, const char *dir, uint32_t p, enum parts_order order, bool eval_first)
{
    struct dataset_meta m;
    struct parts_meta pm;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    if (parts_meta_read(dir, &m, &pm, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_int_equal(parts_verify(dir, &pm, err, sizeof err), 0);
    uint64_t n = m.nodes, s = pm.part_nodes, stride = pm.row_stride;
    assert_int_equal(pm.parts, p);
    assert_int_equal(s, (n + p - 1) / p);
    size_t idsz = dtype_size(dtype_for_ids(n)), len;
    void *npos = slurp(dir, "node_pos.bin", NULL), *pnode = slurp(dir, "pos_node.bin", NULL);
    void *train = slurp(ds, m.f[DATASET_TRAIN].file, NULL);
    uint64_t ntrain = m.f[DATASET_TRAIN].rows;
    /* a permutation and its inverse; training nodes at the first positions */
    for (uint64_t v = 0; v < n; v++) {
        uint64_t x = id_at(npos, idsz, v);
        assert_true(x < n);
        assert_int_equal(id_at(pnode, idsz, x), v);
    }
    for (uint64_t i = 0; i < ntrain; i++)
        assert_true(id_at(npos, idsz, id_at(train, idsz, i)) < ntrain);
    assert_int_equal(pm.train_parts, (ntrain + s - 1) / s);
    /* the head: training nodes, then (--eval-first) validation and test nodes */
    uint64_t head = ntrain;
    unsigned char *in_head = calloc(n, 1);
    for (uint64_t i = 0; i < ntrain; i++)
        in_head[id_at(train, idsz, i)] = 1;
    if (eval_first)
        for (int f = DATASET_VAL; f <= DATASET_TEST; f++) {
            void *ids = slurp(ds, m.f[f].file, NULL);
            for (uint64_t i = 0; i < m.f[f].rows; i++) {
                uint64_t x = id_at(npos, idsz, id_at(ids, idsz, i));
                if (x < ntrain || x >= ntrain + m.f[DATASET_VAL].rows + m.f[DATASET_TEST].rows)
                    fail_msg("%s: evaluation node %llu at position %llu, not right after the training nodes", dir,
                             (unsigned long long)id_at(ids, idsz, i), (unsigned long long)x);
                in_head[id_at(ids, idsz, i)] = 1;
            }
            head += m.f[f].rows;
            free(ids);
        }
    assert_int_equal(pm.eval_parts, eval_first ? (head + s - 1) / s : 0);
    uint64_t *indptr = slurp(ds, m.f[DATASET_INDPTR].file, NULL);
    assert_int_equal(pm.order, order);
    if (order == PARTS_ORDER_DEGREE) /* in-degree never rises within the training, evaluation and other nodes */
        for (uint64_t x = 1; x < n; x++) {
            if (x == ntrain || x == head)
                continue;
            uint64_t a = id_at(pnode, idsz, x - 1), b = id_at(pnode, idsz, x);
            assert_true(indptr[a + 1] - indptr[a] >= indptr[b + 1] - indptr[b]);
        }
    if (order == PARTS_ORDER_NEIGHBOURS) {
        /* past the head, (edges sent to head nodes, edges sent) never rises */
        void *ind = slurp(ds, m.f[DATASET_INDICES].file, NULL);
        uint64_t *to_train = calloc(n, sizeof *to_train), *out = calloc(n, sizeof *out);
        for (uint64_t v = 0; v < n; v++)
            for (uint64_t t = indptr[v]; t < indptr[v + 1]; t++) {
                uint64_t u = id_at(ind, idsz, t);
                to_train[u] += in_head[v];
                out[u]++;
            }
        uint64_t sent = 0;
        for (uint64_t x = head + 1; x < n; x++) {
            uint64_t a = id_at(pnode, idsz, x - 1), b = id_at(pnode, idsz, x);
            if (to_train[a] < to_train[b] || (to_train[a] == to_train[b] && out[a] < out[b]))
                fail_msg("%s: position %llu (node %llu: %llu edges to training nodes, %llu in all) before node %llu "
                         "(%llu, %llu)", dir, (unsigned long long)x - 1, (unsigned long long)a,
                         (unsigned long long)to_train[a], (unsigned long long)out[a], (unsigned long long)b,
                         (unsigned long long)to_train[b], (unsigned long long)out[b]);
            sent += to_train[a] > 0;
        }
        assert_true(sent > 0); /* the graph has such edges: the check above compared something */
        free(ind);
        free(to_train);
        free(out);
    }
    /* features: row of v at block pos/S, row pos%S; padding zero */
    unsigned char *fin = slurp(ds, m.f[DATASET_FEATURES].file, NULL);
    unsigned char *fout = slurp(dir, "features.bin", &len);
    assert_int_equal(len, (uint64_t)p * pm.part_bytes);
    assert_int_equal(pm.part_bytes % PARTS_ALIGN, 0);
    unsigned char *used = calloc(len, 1);
    for (uint64_t v = 0; v < n; v++) {
        uint64_t x = id_at(npos, idsz, v), at = (x / s) * pm.part_bytes + (x % s) * stride;
        if (memcmp(fout + at, fin + v * stride, stride))
            fail_msg("%s: the row of node %llu differs", dir, (unsigned long long)v);
        memset(used + at, 1, stride);
    }
    for (size_t i = 0; i < len; i++)
        if (!used[i] && fout[i])
            fail_msg("%s: features.bin byte %zu is padding but not zero", dir, i);
    /* buckets: every edge once, in bucket (part(u), part(v)), sorted */
    uint64_t *idx = slurp(dir, "buckets_index.bin", &len);
    assert_int_equal(len, (uint64_t)p * p * 16);
    uint32_t *rec = slurp(dir, "buckets.bin", &len);
    unsigned char *bytes = (unsigned char *)rec;
    void *indices = slurp(ds, m.f[DATASET_INDICES].file, NULL);
    uint64_t total = 0;
    uint64_t *seen = calloc(n + 1, sizeof *seen); /* per destination node: edges found */
    for (uint32_t j = 0; j < p; j++) {
        assert_int_equal(idx[2 * ((uint64_t)j * p)] % PARTS_ALIGN, 0); /* columns aligned */
        for (uint32_t i = 0; i < p; i++) {
            uint64_t off = idx[2 * ((uint64_t)j * p + i)], cnt = idx[2 * ((uint64_t)j * p + i) + 1];
            assert_true(off + cnt * 8 <= len);
            const uint32_t *r = (const uint32_t *)(bytes + off);
            for (uint64_t e = 0; e < cnt; e++) {
                uint32_t dl = r[2 * e], sl = r[2 * e + 1];
                if (e > 0)
                    assert_true(dl > r[2 * e - 2] || (dl == r[2 * e - 2] && sl >= r[2 * e - 1]));
                uint64_t v = id_at(pnode, idsz, (uint64_t)j * s + dl), u = id_at(pnode, idsz, (uint64_t)i * s + sl);
                /* u must be in the in-list of v (and, below, v has as many edges as its list) */
                uint64_t want = 0;
                for (uint64_t t = indptr[v]; t < indptr[v + 1]; t++)
                    want += id_at(indices, idsz, t) == u;
                assert_true(want > 0);
                seen[v]++;
                total++;
            }
        }
    }
    assert_int_equal(total, m.edges);
    for (uint64_t v = 0; v < n; v++)
        assert_int_equal(seen[v], indptr[v + 1] - indptr[v]);
    free(seen);
    free(in_head);
    free(npos);
    free(pnode);
    free(train);
    free(indptr);
    free(fin);
    free(fout);
    free(used);
    free(idx);
    free(rec);
    free(indices);
}

static bool same_file(const char *a, const char *b)
{
    size_t la, lb;
    void *x = slurp_path(a, &la), *y = slurp_path(b, &lb);
    bool same = la == lb && !memcmp(x, y, la);
    free(x);
    free(y);
    return same;
}

static void test_round_trip(void **state)
{
    (void)state;
    char dir[4096], ds[4200], lay[4300], args[256];
    t_scratch(dir, sizeof dir, "partition-rt");
    unsigned dims[] = {20, 150}; /* strides 128 and 1024 */
    for (size_t d = 0; d < 2; d++) {
        snprintf(ds, sizeof ds, "%s/ds%zu", dir, d);
        synth(ds, dims[d], 5 + (unsigned)d);
        uint32_t ps[] = {1, 5, 13};
        for (size_t k = 0; k < 3; k++) {
            uint32_t p = ps[k];
            snprintf(args, sizeof args, "--parts %u --mem-limit 4G", p);
            if (partition(ds, args) != 0)
                fail_msg("gnnprep partition %s: %s", args, log_);
            snprintf(lay, sizeof lay, "%s/parts.%u", ds, p);
            check_layout(ds, lay, p, PARTS_ORDER_RANDOM);
            /* out of core: windows of ~200 KiB over features and edges, the same bytes */
            char big[4400];
            snprintf(big, sizeof big, "%s/big.%u", dir, p);
            assert_int_equal(rename(lay, big), 0);
            uint64_t lim = (64u << 20) + 24ull * 6000 + 24ull * p * p + 8ull * (p + 1) + (200u << 10);
            snprintf(args, sizeof args, "--parts %u --mem-limit %llu", p, (unsigned long long)lim);
            if (partition(ds, args) != 0)
                fail_msg("gnnprep partition %s: %s", args, log_);
            char fa[4500], fb[4500];
            const char *files[] = {"features.bin", "buckets.bin", "buckets_index.bin", "node_pos.bin", "pos_node.bin"};
            for (size_t f = 0; f < SL_ARRAY_LEN(files); f++) {
                snprintf(fa, sizeof fa, "%s/%s", lay, files[f]);
                snprintf(fb, sizeof fb, "%s/%s", big, files[f]);
                if (!same_file(fa, fb))
                    fail_msg("p=%u: %s differs between in-memory and out-of-core runs", p, files[f]);
            }
            t_rmrf(big);
        }
        /* degree order, and a layout of another P beside the first */
        if (partition(ds, "--parts 4 --order degree") != 0)
            fail_msg("gnnprep partition --order degree: %s", log_);
        snprintf(lay, sizeof lay, "%s/parts.4", ds);
        check_layout(ds, lay, 4, PARTS_ORDER_DEGREE);
        /* neighbours order: the training nodes' in-neighbours right after them */
        if (partition(ds, "--parts 6 --order neighbours") != 0)
            fail_msg("gnnprep partition --order neighbours: %s", log_);
        snprintf(lay, sizeof lay, "%s/parts.6", ds);
        check_layout(ds, lay, 6, PARTS_ORDER_NEIGHBOURS);
        /* the evaluation nodes after the training ones, in each order */
        const char *orders[] = {"random", "degree", "neighbours"};
        for (int o = 0; o < 3; o++) {
            snprintf(args, sizeof args, "--parts %d --order %s --eval-first", 7 + o, orders[o]);
            if (partition(ds, args) != 0)
                fail_msg("gnnprep partition %s: %s", args, log_);
            snprintf(lay, sizeof lay, "%s/parts.%d", ds, 7 + o);
            check_layout_eval(ds, lay, 7 + (uint32_t)o, (enum parts_order)o, true);
        }
    }
    t_rmrf(dir);
}

static void test_out_of_core_passes(void **state)
{
    (void)state;
    char dir[4096], ds[4200], prep[4096];
    t_scratch(dir, sizeof dir, "partition-ooc");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    synth(ds, 150, 9);
    t_bin(prep, sizeof prep, "gnnprep");
    uint64_t lim = (64u << 20) + 24ull * 6000 + 24ull * 36 + 8ull * 7 + (200u << 10);
    assert_int_equal(t_run(log_, sizeof log_, "%s partition %s --parts 6 --mem-limit %llu", prep, ds,
                           (unsigned long long)lim), 0);
    /* 6000 rows of 1024 bytes in windows of ~200 KiB: many passes */
    assert_non_null(strstr(log_, "features: pass 2 of"));
    assert_non_null(strstr(log_, "edges: window 2:")); /* 48k edges of 16 bytes in windows of ~200 KiB */
    char lay[4300];
    snprintf(lay, sizeof lay, "%s/parts.6", ds);
    check_layout(ds, lay, 6, PARTS_ORDER_RANDOM);
    t_rmrf(lay);
    /* too little memory: one message, nothing left */
    assert_int_equal(t_run(log_, sizeof log_, "%s partition %s --parts 6 --mem-limit 32M", prep, ds), 2);
    assert_non_null(strstr(log_, "needs at least"));
    assert_false(t_exists(lay));
    t_rmrf(dir);
}

static bool staging_left(const char *ds)
{
    DIR *d = opendir(ds);
    assert_non_null(d);
    struct dirent *e;
    bool found = false;
    while ((e = readdir(d)))
        found |= strstr(e->d_name, ".partial-") != NULL;
    closedir(d);
    return found;
}

static void test_refused(void **state)
{
    (void)state;
    char dir[4096], a[4200], b[4200], lay[4300], path[4400];
    t_scratch(dir, sizeof dir, "partition-bad");
    snprintf(a, sizeof a, "%s/a", dir);
    snprintf(b, sizeof b, "%s/b", dir);
    synth(a, 20, 1);
    synth(b, 20, 2); /* same shape, other contents */
    assert_int_equal(partition(a, "--parts 4"), 0);
    snprintf(lay, sizeof lay, "%s/parts.4", a);
    struct dataset_meta ma, mb;
    struct parts_meta pm;
    assert_int_equal(dataset_meta_read(a, &ma, true, err, sizeof err), 0);
    assert_int_equal(dataset_meta_read(b, &mb, true, err, sizeof err), 0);
    assert_int_equal(parts_meta_read(lay, &ma, &pm, err, sizeof err), 0);
    /* beside another dataset: refused, saying what to do */
    assert_int_equal(parts_meta_read(lay, &mb, &pm, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "made from another dataset"));
    assert_non_null(strstr(err, "gnnprep partition"));
    /* no layout */
    snprintf(path, sizeof path, "%s/parts.9", a);
    assert_int_equal(parts_meta_read(path, &ma, &pm, err, sizeof err), -ENOENT);
    /* a byte of the layout changed: sizes still agree, the hash does not */
    snprintf(path, sizeof path, "%s/features.bin", lay);
    FILE *f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 100, SEEK_SET);
    int c = fgetc(f);
    fseek(f, 100, SEEK_SET);
    fputc(c ^ 0x5a, f);
    fclose(f);
    assert_int_equal(parts_meta_read(lay, &ma, &pm, err, sizeof err), 0);
    assert_int_equal(parts_verify(lay, &pm, err, sizeof err), -EBADMSG);
    assert_non_null(strstr(err, "features.bin"));
    /* truncated */
    assert_int_equal(truncate(path, 4096), 0);
    assert_int_equal(parts_meta_read(lay, &ma, &pm, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "truncated"));
    /* the same P again: refused, the old layout kept */
    assert_int_equal(partition(a, "--parts 4"), 2);
    assert_non_null(strstr(log_, "already exists"));
    /* the dataset's features changed under dataset.toml: refused by the
     * checksum, no layout and no staging directory left */
    snprintf(path, sizeof path, "%s/%s", b, mb.f[DATASET_FEATURES].file);
    f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 8, SEEK_SET);
    fputc(0x3f, f);
    fputc(0x3f, f);
    fclose(f);
    assert_int_equal(partition(b, "--parts 3"), 2);
    assert_non_null(strstr(log_, "checksum"));
    snprintf(path, sizeof path, "%s/parts.3", b);
    assert_false(t_exists(path));
    assert_false(staging_left(b));
    /* flags */
    assert_int_equal(partition(a, ""), 2);
    assert_non_null(strstr(log_, "--parts is required"));
    assert_int_equal(partition(a, "--parts 6001"), 2);
    assert_int_equal(partition(a, "--parts 3 --order hilbert"), 2);
    assert_non_null(strstr(log_, "random, degree or neighbours"));
    assert_int_equal(partition(dir, "--parts 3"), 2); /* not a dataset */
    t_rmrf(dir);
}

/* gnnprep partition-plan: the auto-tuning and the swaps, as the library
 * computes them for the same inputs. */
static void test_plan(void **state)
{
    (void)state;
    char dir[4096], ds[4200], prep[4096];
    t_scratch(dir, sizeof dir, "partition-plan");
    snprintf(ds, sizeof ds, "%s/ds", dir);
    synth(ds, 150, 4);
    t_bin(prep, sizeof prep, "gnnprep");
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    assert_int_equal(t_run(log_, sizeof log_, "%s partition-plan %s --budget 3M --read-size 4K --reserve 0", prep, ds), 0);
    struct po_tune_in in = {.nodes = m.nodes, .edges = m.edges, .row_bytes = m.f[DATASET_FEATURES].row_stride,
                            .edge_bytes = 8, .edge_copies = 1, .train_nodes = m.f[DATASET_TRAIN].rows,
                            .mem_bytes = 3u << 20, .min_read = 4096};
    struct po_tune t;
    assert_int_equal(po_tune(&in, &t, err, sizeof err), 0);
    char want[256];
    snprintf(want, sizeof want, "parts=%u (auto) part_bytes=%llu", t.parts, (unsigned long long)t.part_bytes);
    if (!strstr(log_, want))
        fail_msg("no \"%s\" in:\n%s", want, log_);
    snprintf(want, sizeof want, "slots=%u (auto)", t.slots);
    assert_non_null(strstr(log_, want));
    assert_true(t.parts > 2 && t.slots > 1 && t.slots < t.parts); /* a case that partitions */
    for (unsigned o = 0; o < PO_ORDERS; o++)
        for (unsigned cv = 0; cv < 2; cv++) {
            struct po_params pp = {.parts = t.parts, .slots = t.slots, .train_parts = t.train_parts, .order = o,
                                   .cover = cv, .seed = 1};
            snprintf(want, sizeof want, "order=%s cover=%s single=", po_order_name(o), po_cover_name(cv));
            const char *line = strstr(log_, want);
            assert_non_null(line);
            snprintf(want, sizeof want, " swaps=%llu ", (unsigned long long)po_expected_swaps(&pp));
            const char *eol = strchr(line, '\n'), *hit = strstr(line, want);
            assert_true(hit && hit < eol);
        }
    /* a budget below one partition: refused, saying so */
    assert_int_equal(t_run(log_, sizeof log_, "%s partition-plan %s --budget 100K --read-size 4K --reserve 0", prep, ds), 2);
    assert_non_null(strstr(log_, "raise the memory budget"));
    assert_int_equal(t_run(log_, sizeof log_, "%s partition-plan %s", prep, ds), 2);
    assert_non_null(strstr(log_, "--budget is required"));
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_out_of_core_passes),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_plan),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
