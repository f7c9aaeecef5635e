/* test_import.c - `gnnprep import` end to end and the edge list readers
 * under it: every edge format (SNAP text plain and gzip, bin32, bin64, npy
 * 2xE int32 and Ex2 int64) crossed with every combination of --undirected,
 * --dedupe and --drop-self-loops, compared value by value with a reference
 * built here; split files as text and .npy; labels int and float; a tiny
 * --mem-limit equals a large one byte for byte; bad input and bad flags
 * exit 2 naming the file and leave nothing behind. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <unistd.h>

#include "t_util.h"
#include "t_imp.h"
#include "core/dataset.h"
#include "core/util.h"
#include "prep/lines.h"
#include "prep/edgelist.h"

static char gnnprep[4096];
static char outbuf[1 << 16];
static char err[2048];

#define N 40
#define E 300
#define F 7

static uint64_t esrc[E], edst[E];
static float feat[N * F];
static int64_t labels[N];
static const uint64_t train_ids[] = {5, 0, 17, 3, 22, 39, 11};
static const int32_t val_ids[] = {8, 14, 30};
static const int64_t test_ids[] = {2, 38, 12, 20};

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void gen(void)
{
    uint64_t s = 42;
    for (int i = 0; i < E; i++) {
        esrc[i] = rng(&s) % N;
        edst[i] = i % 11 == 0 ? esrc[i] : rng(&s) % N;
        if (i % 9 == 4)
            esrc[i] = esrc[i - 1], edst[i] = edst[i - 1];
    }
    for (int i = 0; i < N * F; i++)
        feat[i] = (float)((int)(rng(&s) % 1000) - 500) / 7.0f;
    for (int v = 0; v < N; v++)
        labels[v] = v % 6 == 1 ? -1 : (int64_t)(rng(&s) % 4);
}

static void path_of(char *p, size_t len, const char *dir, const char *name)
{
    snprintf(p, len, "%s/%s", dir, name);
}

/* Every input file, good and bad, in dir. */
static void write_inputs(const char *dir)
{
    char p[4200];
    gen();
    /* SNAP text: comments, blank lines, tabs and spaces, CRLF, a third
     * column, no newline at the end */
    size_t cap = 64 * E + 256, n = 0;
    char *txt = malloc(cap);
    n += (size_t)snprintf(txt + n, cap - n, "# Directed graph\n# FromNodeId\tToNodeId\n\n");
    for (int i = 0; i < E; i++) {
        const char *sep = i % 3 == 0 ? "\t" : i % 3 == 1 ? " " : " \t ";
        const char *end = i % 7 == 0 ? "\r\n" : i % 10 == 0 ? " 1.5\n" : "\n";
        if (i == 100)
            n += (size_t)snprintf(txt + n, cap - n, "   \n  # mid comment\n");
        if (i == E - 1)
            end = "";
        n += (size_t)snprintf(txt + n, cap - n, "%s%llu%s%llu%s", i % 5 == 0 ? "  " : "", (unsigned long long)esrc[i],
                              sep, (unsigned long long)edst[i], end);
    }
    path_of(p, sizeof p, dir, "edges.txt");
    t_write(p, txt, n);
    path_of(p, sizeof p, dir, "edges.txt.gz");
    t_gz_write(p, txt);
    free(txt);
    { /* the gzip file with more edges appended as plain text */
        size_t gl;
        unsigned char *g = t_slurp(p, &gl), *ga = malloc(gl + 8);
        assert_non_null(ga);
        memcpy(ga, g, gl);
        memcpy(ga + gl, "1 2\n3 4\n", 8);
        path_of(p, sizeof p, dir, "appended.txt.gz");
        t_write(p, ga, gl + 8);
        free(g);
        free(ga);
    }
    uint32_t b32[2 * E];
    uint64_t b64[2 * E];
    int32_t r32[2 * E];
    int64_t e2[2 * E];
    for (int i = 0; i < E; i++) {
        b32[2 * i] = (uint32_t)esrc[i];
        b32[2 * i + 1] = (uint32_t)edst[i];
        b64[2 * i] = esrc[i];
        b64[2 * i + 1] = edst[i];
        r32[i] = (int32_t)esrc[i];
        r32[E + i] = (int32_t)edst[i];
        e2[2 * i] = (int64_t)esrc[i];
        e2[2 * i + 1] = (int64_t)edst[i];
    }
    path_of(p, sizeof p, dir, "edges.bin32");
    t_write(p, b32, sizeof b32);
    path_of(p, sizeof p, dir, "edges.u64");
    t_write(p, b64, sizeof b64);
    path_of(p, sizeof p, dir, "edges2e.npy");
    t_npy_write(p, "<i4", "(2, 300)", r32, sizeof r32);
    path_of(p, sizeof p, dir, "edgese2.npy");
    t_npy_write(p, "<i8", "(300, 2)", e2, sizeof e2);
    path_of(p, sizeof p, dir, "edges_npy.dat"); /* npy found by its magic */
    t_npy_write(p, "<i8", "(300, 2)", e2, sizeof e2);

    path_of(p, sizeof p, dir, "feat.npy");
    t_npy_write(p, "<f4", "(40, 7)", feat, sizeof feat);
    path_of(p, sizeof p, dir, "labels.npy");
    t_npy_write(p, "<i8", "(40,)", labels, sizeof labels);
    float lf[N];
    for (int v = 0; v < N; v++)
        lf[v] = labels[v] < 0 ? NAN : (float)labels[v];
    path_of(p, sizeof p, dir, "labels_f.npy");
    t_npy_write(p, "<f4", "(40, 1)", lf, sizeof lf);
    path_of(p, sizeof p, dir, "train.txt");
    const char *train = "# train ids\n5\n0\n\n17\r\n3\n 22 \n39\n11";
    t_write(p, train, strlen(train));
    path_of(p, sizeof p, dir, "val.npy");
    t_npy_write(p, "<i4", "(3,)", val_ids, sizeof val_ids);
    path_of(p, sizeof p, dir, "test.npy");
    t_npy_write(p, "<i8", "(4, 1)", test_ids, sizeof test_ids);

    /* bad ones */
    static const struct { const char *name, *text; } bad_text[] = {
        {"neg.txt", "0 1\n2 3\n1 -2\n"},
        {"word.txt", "0 1\na b\n"},
        {"huge.txt", "0 1\n99999999999999999999 1\n"},
        {"onecol.txt", "0 1\n5\n"},
        {"comma.txt", "0,1\n"},
        {"range.txt", "# c\n0 1\n\n1 40\n"},
        {"train_range.txt", "1\n40\n"},
        {"train_dup.txt", "4\n9\n4\n"},
        {"train_overlap.txt", "6\n30\n"},
        {"train_empty.txt", "# nothing\n"},
        {"train_two.txt", "4 5\n"},
        {"train_unlabelled.txt", "4\n9\n7\n"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(bad_text); i++) {
        path_of(p, sizeof p, dir, bad_text[i].name);
        t_write(p, bad_text[i].text, strlen(bad_text[i].text));
    }
    struct t_member zm = {"edge_index.npy", b32, 64};
    path_of(p, sizeof p, dir, "edges.npz");
    t_zip_write(p, &zm, 1, 0);
    path_of(p, sizeof p, dir, "odd.bin32");
    t_write(p, b32, 13);
    uint64_t far[4] = {0, 1, 3, 1ull << 40};
    path_of(p, sizeof p, dir, "far.bin64");
    t_write(p, far, sizeof far);
    path_of(p, sizeof p, dir, "ambiguous.bin");
    t_write(p, b32, 16);
    double fe[6] = {0, 1, 2, 3, 4, 5};
    path_of(p, sizeof p, dir, "float_edges.npy");
    t_npy_write(p, "<f8", "(2, 3)", fe, sizeof fe);
    path_of(p, sizeof p, dir, "three.npy");
    t_npy_write(p, "<i8", "(3, 3)", e2, 9 * 8);
    path_of(p, sizeof p, dir, "short.npy");
    size_t len;
    unsigned char *b = t_npy_make(1, "<i8", "(2, 300)", e2, sizeof e2, &len);
    t_write(p, b, len - 9);
    free(b);
    path_of(p, sizeof p, dir, "fortran.npy");
    b = t_npy_make(1, "<i8", "(2, 300)", e2, sizeof e2, &len);
    memcpy(strstr((char *)b + 10, "False"), "True ", 5);
    t_write(p, b, len);
    free(b);
    path_of(p, sizeof p, dir, "feat_short.npy");
    b = t_npy_make(1, "<f4", "(40, 7)", feat, sizeof feat, &len);
    t_write(p, b, len - 1);
    free(b);
    path_of(p, sizeof p, dir, "feat_obj.npy");
    t_npy_write(p, "|O", "(3,)", "abc", 3);
    path_of(p, sizeof p, dir, "feat_1d.npy");
    t_npy_write(p, "<f4", "(40,)", feat, 40 * 4);
    path_of(p, sizeof p, dir, "feat_empty.npy");
    t_npy_write(p, "<f4", "(0, 7)", NULL, 0);
    float fnan[N * F];
    memcpy(fnan, feat, sizeof fnan);
    fnan[2 * F + 1] = NAN;
    path_of(p, sizeof p, dir, "feat_nan.npy");
    t_npy_write(p, "<f4", "(40, 7)", fnan, sizeof fnan);
    double fbig[N * F];
    for (int i = 0; i < N * F; i++)
        fbig[i] = i == 9 ? 1e6 : 1.0;
    path_of(p, sizeof p, dir, "feat_big.npy");
    t_npy_write(p, "<f8", "(40, 7)", fbig, sizeof fbig);
    path_of(p, sizeof p, dir, "labels_short.npy");
    t_npy_write(p, "<i8", "(39,)", labels, 39 * 8);
    float lfrac[N];
    memcpy(lfrac, lf, sizeof lf);
    lfrac[6] = 2.5f;
    path_of(p, sizeof p, dir, "labels_frac.npy");
    t_npy_write(p, "<f4", "(40,)", lfrac, sizeof lfrac);
    int32_t lneg[N] = {0};
    lneg[3] = -5;
    path_of(p, sizeof p, dir, "labels_neg.npy");
    t_npy_write(p, "<i4", "(40,)", lneg, sizeof lneg);
    int64_t sneg[2] = {3, -1};
    path_of(p, sizeof p, dir, "split_neg.npy");
    t_npy_write(p, "<i8", "(2,)", sneg, sizeof sneg);
    float sfl[2] = {3, 4};
    path_of(p, sizeof p, dir, "split_float.npy");
    t_npy_write(p, "<f4", "(2,)", sfl, sizeof sfl);
    /* PyG's boolean masks: the train split as one, and bad ones */
    unsigned char mask[N] = {0};
    for (size_t i = 0; i < SL_ARRAY_LEN(train_ids); i++)
        mask[train_ids[i]] = 1;
    path_of(p, sizeof p, dir, "train_mask.npy");
    t_npy_write(p, "|b1", "(40,)", mask, sizeof mask);
    path_of(p, sizeof p, dir, "mask_short.npy");
    t_npy_write(p, "|b1", "(39,)", mask, 39);
    mask[9] = 2;
    path_of(p, sizeof p, dir, "mask_two.npy");
    t_npy_write(p, "|b1", "(40,)", mask, sizeof mask);
    mask[9] = 0;
    mask[(uint64_t)val_ids[0]] = 1; /* overlaps the validation split */
    path_of(p, sizeof p, dir, "mask_overlap.npy");
    t_npy_write(p, "|b1", "(40,)", mask, sizeof mask);
    path_of(p, sizeof p, dir, "mask_2d.npy");
    t_npy_write(p, "|b1", "(40, 1)", mask, sizeof mask);
}

static void setup_bin(void)
{
    t_bin(gnnprep, sizeof gnnprep, "gnnprep");
    if (!t_exists(gnnprep))
        fail_msg("%s not built", gnnprep);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Features, labels and splits of an import of the good inputs. */
static void verify_rest(const char *out, const struct dataset_meta *m)
{
    char p[4200];
    size_t len;
    assert_int_equal(m->nodes, N);
    assert_int_equal(m->feat_dim, F);
    assert_int_equal(m->classes, 4);
    path_of(p, sizeof p, out, "features.bin");
    unsigned char *b = t_slurp(p, &len);
    assert_int_equal(m->f[DATASET_FEATURES].row_stride, 32);
    assert_int_equal(len, 4096);
    for (int v = 0; v < N; v++) {
        assert_int_equal(memcmp(b + 32 * v, feat + F * v, 4 * F), 0);
        for (int k = 4 * F; k < 32; k++)
            assert_int_equal(b[32 * v + k], 0);
    }
    for (size_t k = 32 * N; k < len; k++)
        assert_int_equal(b[k], 0);
    free(b);
    path_of(p, sizeof p, out, "labels.bin");
    b = t_slurp(p, &len);
    assert_int_equal(len, 4 * N);
    for (int v = 0; v < N; v++) {
        int32_t got;
        memcpy(&got, b + 4 * v, 4);
        assert_int_equal(got, labels[v]);
    }
    free(b);
    uint64_t ids[8];
    memcpy(ids, train_ids, sizeof train_ids);
    qsort(ids, 7, 8, cmp_u64);
    t_check_split(out, m, DATASET_TRAIN, ids, 7);
    for (int i = 0; i < 3; i++)
        ids[i] = (uint64_t)val_ids[i];
    qsort(ids, 3, 8, cmp_u64);
    t_check_split(out, m, DATASET_VAL, ids, 3);
    for (int i = 0; i < 4; i++)
        ids[i] = (uint64_t)test_ids[i];
    qsort(ids, 4, 8, cmp_u64);
    t_check_split(out, m, DATASET_TEST, ids, 4);
}

static int run_import(const char *dir, const char *out, const char *edges, const char *extra)
{
    return t_run(outbuf, sizeof outbuf,
                 "'%s' import '%s' --edges '%s/%s' --features '%s/feat.npy' --labels '%s/labels.npy' "
                 "--train '%s/train.txt' --val '%s/val.npy' --test '%s/test.npy' %s",
                 gnnprep, out, dir, edges, dir, dir, dir, dir, dir, extra);
}

static void test_formats(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], out[4200];
    t_scratch(dir, sizeof dir, "import-fmt");
    write_inputs(dir);
    static const struct { const char *file, *extra; } fmts[] = {
        {"edges.txt", ""},
        {"edges.txt.gz", "--edge-format snap"},
        {"edges.bin32", ""},
        {"edges.u64", "--edge-format=bin64"},
        {"edges2e.npy", ""},
        {"edgese2.npy", ""},
        {"edges_npy.dat", ""},
    };
    static const char *const flag_names[3] = {"--undirected", "--dedupe", "--drop-self-loops"};
    static const int flag_bits[3] = {T_UNDIRECTED, T_DEDUPE, T_NO_LOOPS};
    for (size_t f = 0; f < SL_ARRAY_LEN(fmts); f++) {
        for (int combo = 0; combo < 8; combo++) {
            char extra[256];
            int cflags = 0;
            snprintf(extra, sizeof extra, "%s --quiet", fmts[f].extra);
            for (int k = 0; k < 3; k++)
                if (combo & (1 << k)) {
                    strcat(extra, " ");
                    strcat(extra, flag_names[k]);
                    cflags |= flag_bits[k];
                }
            snprintf(out, sizeof out, "%s/out-%zu-%d", dir, f, combo);
            int rc = run_import(dir, out, fmts[f].file, extra);
            if (rc != 0)
                fail_msg("%s %s: exit %d\n%s", fmts[f].file, extra, rc, outbuf);
            struct dataset_meta m;
            t_load_meta(out, &m);
            uint64_t *ip, *ix;
            size_t ne;
            t_ref_csc(N, esrc, edst, E, cflags, &ip, &ix, &ne);
            t_check_topology(out, &m, ip, ix, ne);
            free(ip);
            free(ix);
            verify_rest(out, &m);
            assert_non_null(strstr(m.source, "gnnprep import"));
            if (combo == 7 && t_run(outbuf, sizeof outbuf, "'%s' check '%s'", gnnprep, out) != 0)
                fail_msg("gnnprep check rejects the import:\n%s", outbuf);
            t_rmrf(out);
        }
    }
    /* the train split as a boolean mask gives the same dataset */
    snprintf(out, sizeof out, "%s/out-mask", dir);
    assert_int_equal(t_run(outbuf, sizeof outbuf,
                           "'%s' import '%s' --edges '%s/edges.txt' --features '%s/feat.npy' --labels '%s/labels.npy' "
                           "--train '%s/train_mask.npy' --val '%s/val.npy' --test '%s/test.npy' --quiet",
                           gnnprep, out, dir, dir, dir, dir, dir, dir), 0);
    {
        struct dataset_meta mm;
        t_load_meta(out, &mm);
        verify_rest(out, &mm);
    }
    t_rmrf(out);
    /* float labels with NaN give the same labels.bin */
    snprintf(out, sizeof out, "%s/out-float-labels", dir);
    assert_int_equal(t_run(outbuf, sizeof outbuf,
                           "'%s' import '%s' --edges '%s/edges.txt' --features '%s/feat.npy' --labels "
                           "'%s/labels_f.npy' --train '%s/train.txt' --val '%s/val.npy' --test '%s/test.npy' "
                           "--nodes 40 --dtype f16",
                           gnnprep, out, dir, dir, dir, dir, dir, dir), 0);
    struct dataset_meta m;
    t_load_meta(out, &m);
    assert_int_equal(m.f[DATASET_FEATURES].dtype, DTYPE_F16);
    assert_int_equal(m.f[DATASET_FEATURES].row_stride, 16);
    char p[4300];
    size_t len;
    path_of(p, sizeof p, out, "labels.bin");
    unsigned char *b = t_slurp(p, &len);
    for (int v = 0; v < N; v++) {
        int32_t got;
        memcpy(&got, b + 4 * v, 4);
        assert_int_equal(got, labels[v]);
    }
    free(b);
    path_of(p, sizeof p, out, "features.bin");
    b = t_slurp(p, &len);
    for (int v = 0; v < N; v++)
        for (int c = 0; c < F; c++) {
            uint16_t h;
            memcpy(&h, b + 16 * v + 2 * c, 2);
            assert_int_equal(h, half_from_f32(feat[F * v + c]));
        }
    free(b);
    t_rmrf(dir);
}

/* Out-of-core equals in-memory, for a binary edge list. */
static void test_mem_limit(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], o1[4200], o2[4200], p[4300];
    t_scratch(dir, sizeof dir, "import-mem");
    write_inputs(dir);
    enum { BIG = 250000 };
    uint64_t *pairs = malloc(2 * BIG * sizeof *pairs), *s = malloc(BIG * 8), *d = malloc(BIG * 8);
    uint64_t st = 7;
    for (int i = 0; i < BIG; i++) {
        s[i] = pairs[2 * i] = rng(&st) % N;
        d[i] = pairs[2 * i + 1] = (rng(&st) % N) * (rng(&st) % N) / N;
    }
    path_of(p, sizeof p, dir, "big.bin64");
    t_write(p, pairs, 2 * BIG * 8);
    snprintf(o1, sizeof o1, "%s/small", dir);
    snprintf(o2, sizeof o2, "%s/large", dir);
    assert_int_equal(run_import(dir, o1, "big.bin64", "--mem-limit 1M --dedupe"), 0);
    unsigned long long runs = 0;
    const char *r = strstr(outbuf, " stored, ");
    assert_non_null(r);
    assert_int_equal(sscanf(r, " stored, %llu sorted runs", &runs), 1);
    if (runs < 2)
        fail_msg("--mem-limit 1M spilled %llu runs\n%s", runs, outbuf);
    assert_int_equal(run_import(dir, o2, "big.bin64", "--mem-limit 4G --dedupe"), 0);
    assert_non_null(strstr(outbuf, " 0 sorted runs"));
    for (int k = 0; k < 2; k++) {
        char p1[4300], p2[4300];
        path_of(p1, sizeof p1, o1, k ? "indices.bin" : "indptr.bin");
        path_of(p2, sizeof p2, o2, k ? "indices.bin" : "indptr.bin");
        size_t l1, l2;
        unsigned char *b1 = t_slurp(p1, &l1), *b2 = t_slurp(p2, &l2);
        assert_int_equal(l1, l2);
        assert_int_equal(memcmp(b1, b2, l1), 0);
        free(b1);
        free(b2);
    }
    struct dataset_meta m;
    t_load_meta(o1, &m);
    uint64_t *ip, *ix;
    size_t ne;
    t_ref_csc(N, s, d, BIG, T_DEDUPE, &ip, &ix, &ne);
    t_check_topology(o1, &m, ip, ix, ne);
    free(ip);
    free(ix);
    free(pairs);
    free(s);
    free(d);
    t_rmrf(dir);
}

/* Ctrl-C during an import (held at its edges by the test hook
 * SLUICE_FAULT_PREP_WAIT_SIGNAL, so it is surely under way): exit 130,
 * "interrupted by SIGINT", and no output or staging directory left. */
static void test_interrupted(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], out[4200];
    t_scratch(dir, sizeof dir, "import-int");
    write_inputs(dir);
    snprintf(out, sizeof out, "%s/out", dir);
    int rc = t_run(outbuf, sizeof outbuf,
                   "cd '%s' && { SLUICE_FAULT_PREP_WAIT_SIGNAL=1 '%s' import '%s' --edges edges.txt --features "
                   "feat.npy --labels labels.npy --train train.txt --val val.npy --test test.npy & g=$!; sleep 1; "
                   "kill -INT $g; wait $g; }",
                   dir, gnnprep, out);
    if (rc != 130 || !strstr(outbuf, "interrupted by SIGINT"))
        fail_msg("exit %d:\n%s", rc, outbuf);
    t_assert_no_output(out);
    t_rmrf(dir);
}

/* A stray label far above the others: the dataset gets that many
 * classes (as documented), with a warning naming the label and how few
 * classes are used. */
static void test_stray_label(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], out[4200], p[4300];
    t_scratch(dir, sizeof dir, "import-stray");
    write_inputs(dir);
    int64_t lab[N];
    for (int v = 0; v < N; v++)
        lab[v] = v % 3;
    lab[5] = 100000;
    path_of(p, sizeof p, dir, "labels.npy");
    t_npy_write(p, "<i8", "(40,)", lab, sizeof lab);
    snprintf(out, sizeof out, "%s/out", dir);
    assert_int_equal(run_import(dir, out, "edges.txt", ""), 0);
    if (!strstr(outbuf, "warning: ") || !strstr(outbuf, "the largest label is 100000") ||
        !strstr(outbuf, "only 4 of them are used"))
        fail_msg("no warning about the stray label:\n%s", outbuf);
    t_rmrf(dir);
}

/* Each case swaps one input for a bad one (or adds flags). */
static const struct bcase {
    const char *opt;   /* "--edges", ... or NULL */
    const char *file;  /* in the scratch dir */
    const char *extra;
    const char *want[3];
} bcases[] = {
    {"--edges", "neg.txt", "", {"neg.txt:3", "column 2 of \"1 -2\" is negative"}},
    {"--edges", "word.txt", "", {"word.txt:2", "\"a b\" is not a non-negative integer"}},
    {"--edges", "huge.txt", "", {"huge.txt:2", "too large"}},
    {"--edges", "onecol.txt", "", {"onecol.txt:2", "only one column"}},
    {"--edges", "comma.txt", "", {"comma.txt:1", "expected two"}},
    {"--edges", "range.txt", "", {"range.txt:4", "node id 40 is out of range", "40 nodes"}},
    {"--edges", "odd.bin32", "", {"odd.bin32", "13 bytes is not a whole number of u32 pairs"}},
    {"--edges", "far.bin64", "", {"far.bin64", "edge 1: node id 1099511627776 is out of range"}},
    {"--edges", "ambiguous.bin", "", {"ambiguous.bin", "--edge-format bin32"}},
    {"--edges", "comma.txt", "--edge-format bin64", {"comma.txt", "4 bytes is not a whole number of u64 pairs"}},
    {"--edges", "float_edges.npy", "", {"float_edges.npy", "dtype float64"}},
    {"--edges", "three.npy", "", {"three.npy", "shape (3, 3)"}},
    {"--edges", "short.npy", "", {"short.npy", "truncated: expected 4928 bytes, found 4919"}},
    {"--edges", "fortran.npy", "", {"fortran.npy", "fortran_order is True"}},
    {"--edges", "missing.txt", "", {"missing.txt", "No such file"}},
    {"--edges", "appended.txt.gz", "", {"appended.txt.gz", "not gzip data follow", "gzip -d"}},
    {"--edges", "edges.npz", "", {"edges.npz", "a zip archive"}},
    {"--features", "feat_short.npy", "", {"feat_short.npy", "truncated"}},
    {"--features", "feat_obj.npy", "", {"feat_obj.npy", "object array"}},
    {"--features", "feat_1d.npy", "", {"feat_1d.npy", "2-D"}},
    {"--features", "feat_empty.npy", "", {"feat_empty.npy", "zero nodes"}},
    {"--features", "feat_nan.npy", "", {"feat_nan.npy", "row 2, column 1: NaN"}},
    {"--features", "feat_big.npy", "--dtype f16", {"feat_big.npy", "row 1, column 2", "float16"}},
    {"--features", "nothere.npy", "", {"nothere.npy", "No such file"}},
    {"--labels", "labels_short.npy", "", {"labels_short.npy", "39 labels for 40 nodes"}},
    {"--labels", "labels_frac.npy", "", {"labels_frac.npy", "node 6: label 2.5"}},
    {"--labels", "labels_neg.npy", "", {"labels_neg.npy", "node 3: label -5"}},
    {"--labels", "edges.txt", "", {"edges.txt", "not a .npy file"}},
    {"--train", "train_range.txt", "", {"train_range.txt:2", "node id 40 is out of range"}},
    {"--train", "train_dup.txt", "", {"train_dup.txt:3", "appears twice", "train_dup.txt:1"}},
    {"--train", "train_overlap.txt", "", {"val.npy: element 2", "train_overlap.txt:2", "disjoint"}},
    {"--train", "train_empty.txt", "", {"train_empty.txt", "must not be empty"}},
    {"--train", "train_two.txt", "", {"train_two.txt:1", "one node id per line"}},
    {"--train", "train_unlabelled.txt", "", {"train_unlabelled.txt:3", "node 7 of the train split has no label",
                                             "labels.npy"}},
    {"--test", "split_neg.npy", "", {"split_neg.npy: element 1", "-1"}},
    {"--val", "split_float.npy", "", {"split_float.npy", "must be node ids (integers"}},
    {"--train", "mask_short.npy", "", {"mask_short.npy", "a boolean mask of 39 elements", "one per node (40)"}},
    {"--train", "mask_two.npy", "", {"mask_two.npy", "element 9 of the mask is 2"}},
    {"--train", "mask_overlap.npy", "", {"(true in the mask)", "disjoint"}},
    {"--train", "mask_2d.npy", "", {"mask_2d.npy", "a boolean mask must be 1-D"}},
    {"--val", "nofile.txt", "", {"nofile.txt", "No such file"}},
    {NULL, NULL, "--nodes 41", {"feat.npy", "--nodes says 41"}},
    {NULL, NULL, "--nodes abc", {"--nodes abc"}},
    {NULL, NULL, "--nodes 0", {"--nodes 0", "positive"}},
    {NULL, NULL, "--edge-format csv", {"--edge-format csv"}},
    {NULL, NULL, "--mem-limit 12x", {"--mem-limit 12x"}},
    {NULL, NULL, "--dtype bf16", {"--dtype bf16"}},
    {NULL, NULL, "--frobnicate", {"unknown option --frobnicate"}},
    {NULL, NULL, "second-out", {"unexpected argument 'second-out'"}},
    {NULL, NULL, "--test", {"--test needs a value"}},
};

static void test_bad_input(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], out[4200];
    t_scratch(dir, sizeof dir, "import-bad");
    write_inputs(dir);
    static const char *const opts[6] = {"--edges", "--features", "--labels", "--train", "--val", "--test"};
    static const char *const good[6] = {"edges.txt", "feat.npy", "labels.npy", "train.txt", "val.npy", "test.npy"};
    for (size_t i = 0; i < SL_ARRAY_LEN(bcases); i++) {
        const struct bcase *c = &bcases[i];
        char args[8192];
        size_t n = 0;
        for (int k = 0; k < 6; k++) {
            const char *file = c->opt && !strcmp(c->opt, opts[k]) ? c->file : good[k];
            n += (size_t)snprintf(args + n, sizeof args - n, " %s '%s/%s'", opts[k], dir, file);
        }
        snprintf(out, sizeof out, "%s/out%zu", dir, i);
        int rc = t_run(outbuf, sizeof outbuf, "'%s' import '%s' %s %s", gnnprep, out, args, c->extra);
        if (rc != 2)
            fail_msg("case %zu (%s %s %s): exit %d, expected 2\n%s", i, c->opt ? c->opt : "", c->file ? c->file : "",
                     c->extra, rc, outbuf);
        for (int k = 0; k < 3 && c->want[k]; k++)
            if (!strstr(outbuf, c->want[k]))
                fail_msg("case %zu (%s %s %s): the message lacks \"%s\":\n%s", i, c->opt ? c->opt : "",
                         c->file ? c->file : "", c->extra, c->want[k], outbuf);
        t_assert_no_output(out);
    }
    /* missing required options, and --help */
    snprintf(out, sizeof out, "%s/outx", dir);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import '%s' --edges '%s/edges.txt'", gnnprep, out, dir), 2);
    assert_non_null(strstr(outbuf, "missing --features"));
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import --edges x", gnnprep), 2);
    assert_non_null(strstr(outbuf, "missing OUT"));
    t_assert_no_output(out);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import --help", gnnprep), 0);
    assert_non_null(strstr(outbuf, "--edge-format"));
    t_rmrf(dir);
}

/* Reads every line of path; returns lines_next's last code (0 at a clean
 * end) and the lines joined by '\n' in text (at most cap bytes). */
static int read_lines(const char *path, char *text, size_t cap, uint64_t *nlines)
{
    struct lines l;
    int rc = lines_open(&l, path, err, sizeof err);
    if (rc < 0)
        return rc;
    size_t used = 0;
    *nlines = 0;
    char *line;
    size_t len;
    while ((rc = lines_next(&l, &line, &len, err, sizeof err)) == 1) {
        if (text && used + len + 1 < cap) {
            memcpy(text + used, line, len);
            used += len;
            text[used++] = '\n';
        }
        ++*nlines;
    }
    if (text)
        text[used < cap ? used : cap - 1] = '\0';
    lines_close(&l);
    return rc;
}

/* The text reader on gzip: members in a row are one text, zero padding
 * after the last is accepted (as gzip -d does), anything else after it is
 * refused with its offset rather than dropped, and a cut or damaged stream
 * is refused. Also large inputs that need many refills. */
static void test_lines_gzip(void **state)
{
    (void)state;
    char dir[4096], p[4200], q[4200], text[256];
    t_scratch(dir, sizeof dir, "lines-gzip");
    uint64_t n;
    size_t la, lb;
    path_of(p, sizeof p, dir, "a.gz");
    t_gz_write(p, "1 2\n3 4\n");
    unsigned char *a = t_slurp(p, &la);
    path_of(p, sizeof p, dir, "b.gz");
    t_gz_write(p, "5 6\r\n7 8");
    unsigned char *b = t_slurp(p, &lb);
    unsigned char *buf = calloc(1, la + lb + 4096);
    assert_non_null(buf);

    /* plain text, one gzip member, two members */
    path_of(p, sizeof p, dir, "plain.txt");
    t_write(p, "1 2\n3 4", 7);
    assert_int_equal(read_lines(p, text, sizeof text, &n), 0);
    assert_string_equal(text, "1 2\n3 4\n");
    path_of(p, sizeof p, dir, "a.gz");
    assert_int_equal(read_lines(p, text, sizeof text, &n), 0);
    assert_string_equal(text, "1 2\n3 4\n");
    memcpy(buf, a, la);
    memcpy(buf + la, b, lb);
    path_of(p, sizeof p, dir, "ab.gz");
    t_write(p, buf, la + lb);
    assert_int_equal(read_lines(p, text, sizeof text, &n), 0);
    assert_string_equal(text, "1 2\n3 4\n5 6\n7 8\n");
    assert_int_equal(n, 4);

    /* zero padding after the last member: fine */
    memset(buf + la, 0, 1000);
    path_of(p, sizeof p, dir, "padded.gz");
    t_write(p, buf, la + 1000);
    assert_int_equal(read_lines(p, text, sizeof text, &n), 0);
    assert_string_equal(text, "1 2\n3 4\n");

    /* text appended to a .gz file: refused, naming where */
    memcpy(buf + la, "9 10\n", 5);
    path_of(p, sizeof p, dir, "appended.gz");
    t_write(p, buf, la + 5);
    assert_int_equal(read_lines(p, NULL, 0, &n), -EBADMSG);
    char want[64];
    snprintf(want, sizeof want, "at byte %zu of the file", la);
    assert_non_null(strstr(err, "appended.gz"));
    assert_non_null(strstr(err, "not gzip data"));
    assert_non_null(strstr(err, want));
    /* one stray byte, and a member after the padding */
    path_of(p, sizeof p, dir, "onebyte.gz");
    t_write(p, buf, la + 1);
    assert_int_equal(read_lines(p, NULL, 0, &n), -EBADMSG);
    memset(buf + la, 0, 16);
    memcpy(buf + la + 16, b, lb);
    path_of(p, sizeof p, dir, "padthenmember.gz");
    t_write(p, buf, la + 16 + lb);
    assert_int_equal(read_lines(p, NULL, 0, &n), -EBADMSG);
    snprintf(want, sizeof want, "at byte %zu", la + 16);
    assert_non_null(strstr(err, want));

    /* cut short (the trailer and some data gone), damaged (CRC) */
    path_of(p, sizeof p, dir, "cut.gz");
    t_write(p, a, la - 10);
    assert_int_equal(read_lines(p, NULL, 0, &n), -EBADMSG);
    assert_non_null(strstr(err, "cut short"));
    memcpy(buf, a, la);
    buf[la - 6] ^= 0x40; /* inside the CRC-32 */
    path_of(p, sizeof p, dir, "crc.gz");
    t_write(p, buf, la);
    assert_int_equal(read_lines(p, NULL, 0, &n), -EBADMSG);
    assert_non_null(strstr(err, "damaged gzip data"));

    /* empty file, empty member */
    path_of(p, sizeof p, dir, "empty.txt");
    t_write(p, "", 0);
    assert_int_equal(read_lines(p, NULL, 0, &n), 0);
    assert_int_equal(n, 0);
    path_of(p, sizeof p, dir, "empty.gz");
    t_gz_write(p, "");
    assert_int_equal(read_lines(p, NULL, 0, &n), 0);
    assert_int_equal(n, 0);

    /* large: two members of 200k lines each, read through many refills;
     * the same text plain */
    enum { L = 200000 };
    size_t cap = (size_t)L * 24;
    char *big = malloc(cap);
    assert_non_null(big);
    size_t bl = 0;
    uint64_t s = 7;
    for (int i = 0; i < L; i++)
        bl += (size_t)snprintf(big + bl, cap - bl, "%llu %d\n", (unsigned long long)rng(&s), i);
    path_of(p, sizeof p, dir, "big1.gz");
    t_gz_write(p, big);
    size_t l1;
    unsigned char *g1 = t_slurp(p, &l1);
    unsigned char *g2 = malloc(2 * l1);
    assert_non_null(g2);
    memcpy(g2, g1, l1);
    memcpy(g2 + l1, g1, l1);
    path_of(q, sizeof q, dir, "big2.gz");
    t_write(q, g2, 2 * l1);
    assert_int_equal(read_lines(q, NULL, 0, &n), 0);
    assert_int_equal(n, 2 * L);
    path_of(q, sizeof q, dir, "big.txt");
    t_write(q, big, bl);
    assert_int_equal(read_lines(q, NULL, 0, &n), 0);
    assert_int_equal(n, L);
    free(g1);
    free(g2);
    free(big);
    free(buf);
    free(a);
    free(b);
    t_rmrf(dir);

    /* a zeroed reader (never opened, as edges_close and the OGB reader
     * close them) owns no descriptor: fd 0 stays open */
    int saved = dup(0), pfd[2];
    assert_int_equal(pipe(pfd), 0);
    assert_int_equal(dup2(pfd[0], 0), 0);
    struct lines z;
    memset(&z, 0, sizeof z);
    lines_close(&z);
    lines_close(&z);
    assert_true(fcntl(0, F_GETFD) >= 0);
    if (saved >= 0) {
        dup2(saved, 0);
        close(saved);
    } else {
        close(0);
    }
    close(pfd[0]);
    close(pfd[1]);
}

/* The readers themselves: batch boundaries, counts, formats detected. */
static void test_edge_reader(void **state)
{
    (void)state;
    char dir[4096], p[4200];
    t_scratch(dir, sizeof dir, "edge-reader");
    write_inputs(dir);
    static const struct {
        const char *file;
        enum edge_fmt want;
        int64_t total;
    } cases[] = {
        {"edges.txt", EDGE_FMT_SNAP, -1},   {"edges.txt.gz", EDGE_FMT_SNAP, -1}, {"edges.bin32", EDGE_FMT_BIN32, E},
        {"edges.u64", EDGE_FMT_BIN64, E},   {"edges2e.npy", EDGE_FMT_NPY, E},    {"edgese2.npy", EDGE_FMT_NPY, E},
        {"edges_npy.dat", EDGE_FMT_NPY, E},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        path_of(p, sizeof p, dir, cases[i].file);
        struct edges *e;
        if (edges_open(&e, p, EDGE_FMT_AUTO, N, err, sizeof err))
            fail_msg("%s: %s", cases[i].file, err);
        assert_int_equal(edges_format(e), cases[i].want);
        assert_int_equal(edges_total(e), cases[i].total);
        uint64_t s[7], d[7];
        size_t got = 0, k;
        do {
            assert_int_equal(edges_read(e, s, d, 7, &k, err, sizeof err), 0);
            for (size_t j = 0; j < k; j++) {
                assert_int_equal(s[j], esrc[got + j]);
                assert_int_equal(d[j], edst[got + j]);
            }
            got += k;
        } while (k);
        assert_int_equal(got, E);
        assert_int_equal(edges_read(e, s, d, 7, &k, err, sizeof err), 0);
        assert_int_equal(k, 0);
        edges_close(e);
    }
    edges_close(NULL);
    enum edge_fmt f;
    assert_int_equal(edge_fmt_parse("bin32", &f), 0);
    assert_int_equal(f, EDGE_FMT_BIN32);
    assert_int_equal(edge_fmt_parse("auto", &f), -EINVAL);
    assert_string_equal(edge_fmt_name(EDGE_FMT_NPY), "npy");
    /* a 2 MiB line is refused, not read into unbounded memory */
    char *line = malloc(2u << 20);
    memset(line, '1', 2u << 20);
    path_of(p, sizeof p, dir, "longline.txt");
    t_write(p, line, 2u << 20);
    free(line);
    struct edges *e;
    assert_int_equal(edges_open(&e, p, EDGE_FMT_SNAP, N, err, sizeof err), 0);
    uint64_t s[4], d[4];
    size_t k;
    assert_int_equal(edges_read(e, s, d, 4, &k, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "longline.txt:1: line longer than"));
    edges_close(e);
    /* a line of exactly LINES_MAX bytes (a comment) is read */
    line = malloc(LINES_MAX + 8);
    line[0] = '#';
    memset(line + 1, 'x', LINES_MAX - 1);
    memcpy(line + LINES_MAX, "\n0 1\n", 5);
    path_of(p, sizeof p, dir, "maxline.txt");
    t_write(p, line, LINES_MAX + 5);
    free(line);
    assert_int_equal(edges_open(&e, p, EDGE_FMT_SNAP, N, err, sizeof err), 0);
    if (edges_read(e, s, d, 4, &k, err, sizeof err) != 0 || k != 1 || s[0] != 0 || d[0] != 1)
        fail_msg("a line of LINES_MAX bytes: '%s'", err);
    edges_close(e);
    /* binary data fed as text */
    path_of(p, sizeof p, dir, "edges.bin32");
    assert_int_equal(edges_open(&e, p, EDGE_FMT_SNAP, N, err, sizeof err), 0);
    assert_true(edges_read(e, s, d, 4, &k, err, sizeof err) < 0);
    assert_non_null(strstr(err, "edges.bin32:1"));
    edges_close(e);
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_edge_reader), cmocka_unit_test(test_lines_gzip),
        cmocka_unit_test(test_formats), cmocka_unit_test(test_mem_limit),
        cmocka_unit_test(test_bad_input),   cmocka_unit_test(test_interrupted), cmocka_unit_test(test_stray_label),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
