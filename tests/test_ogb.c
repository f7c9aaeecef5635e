/* test_ogb.c - `gnnprep import-ogb` end to end: the tests write fixtures in
 * OGB's exact raw layout (raw/data.npz with libarchive's zip writer, stored
 * and deflated, zip64; raw/node-label.npz with NaNs; split/NAME/{train,valid,test}.csv.gz
 * with zlib), run the built gnnprep and compare every value of the dataset
 * with what was written: CSC against a reference built here, features with
 * their stride padding, labels, sorted splits. Also: a tiny --mem-limit
 * gives byte-identical topology to a large one; every kind of bad input
 * exits 2 naming the file and leaves nothing behind; and a fixture written
 * by real numpy (tests/fixtures/ogb_tiny, see make_ogb_tiny.py) imports to
 * known values. The fixtures come from t_ogb.h; test_ogb_csv.c covers OGB's
 * CSV layout. */
#include <errno.h>
#include <math.h>

#include "t_util.h"
#include "t_imp.h"
#include "t_ogb.h"
#include "core/dataset.h"
#include "core/util.h"

static char gnnprep[4096];
static char outbuf[1 << 16];

static void setup_bin(void)
{
    t_ogb_gnnprep(gnnprep, sizeof gnnprep);
}

/* ---- round trips ---- */
static const struct variant {
    const char *what;
    int zip;
    uint64_t n, e, f;
    const char *feat_t, *label_t;
    bool label_1d;
    const char *flags;
    int cflags;
    enum dtype fdt;
} variants[] = {
    {"stored f32 dim 3", 0, 50, 300, 3, "<f4", "<f8", false, "", 0, DTYPE_F32},
    {"deflate zip64 f16 dim 100 undirected", T_ZIP_DEFLATE | T_ZIP_ZIP64, 64, 500, 100, "<f2", "<f4", true,
     "--undirected --dedupe --drop-self-loops", T_UNDIRECTED | T_DEDUPE | T_NO_LOOPS, DTYPE_F16},
    {"stored zip64 f64 -> f16 dim 129", T_ZIP_ZIP64, 33, 200, 129, "<f8", "<f8", false, "--dtype f16 --dedupe",
     T_DEDUPE, DTYPE_F16},
    {"deflate f32 dim 768 drop loops", T_ZIP_DEFLATE, 20, 120, 768, "<f4", "<f8", true, "--drop-self-loops", T_NO_LOOPS,
     DTYPE_F32},
    {"deflate f16 -> f32 dim 1", T_ZIP_DEFLATE, 40, 90, 1, "<f2", "<f8", false, "--dtype=f32 --undirected",
     T_UNDIRECTED, DTYPE_F32},
};

static void test_roundtrip(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200];
    t_scratch(dir, sizeof dir, "ogb-rt");
    for (size_t i = 0; i < SL_ARRAY_LEN(variants); i++) {
        const struct variant *v = &variants[i];
        struct t_fix x;
        t_fix_gen(&x, v->n, v->e, v->f, 1000 + i);
        struct t_wopt o = {.zip = v->zip, .feat_t = v->feat_t, .label_t = v->label_t, .label_1d = v->label_1d};
        snprintf(raw, sizeof raw, "%s/ogbn_v%zu", dir, i);
        snprintf(out, sizeof out, "%s/out%zu", dir, i);
        t_ogb_write(raw, &x, &o);
        int rc = t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' %s", gnnprep, raw, out, v->flags);
        if (rc != 0)
            fail_msg("variant '%s': exit %d\n%s", v->what, rc, outbuf);
        print_message("variant '%s': ok\n", v->what);
        t_ogb_verify(out, &x, &o, v->cflags, v->fdt);
        t_fix_free(&x);
    }
    t_rmrf(dir);
}

/* --split picks one of several; OUT's parent must exist; --help works. */
static void test_split_choice(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200];
    t_scratch(dir, sizeof dir, "ogb-split");
    struct t_fix x;
    t_fix_gen(&x, 30, 80, 4, 7);
    struct t_wopt o = {.split = "sales_ranking"};
    snprintf(raw, sizeof raw, "%s/ogbn_products", dir);
    t_ogb_write(raw, &x, &o);
    snprintf(out, sizeof out, "%s/out", dir);
    /* the only split is found by itself; products gets the --undirected hint */
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out), 0);
    assert_non_null(strstr(outbuf, "--undirected"));
    t_ogb_verify(out, &x, &o, 0, DTYPE_F32);
    t_rmrf(out);
    /* a second split directory: ambiguous without --split */
    struct t_fix y = x;
    uint64_t *sw = y.split[0];
    y.split[0] = y.split[2];
    y.split[2] = sw;
    size_t nw = y.ns[0];
    y.ns[0] = y.ns[2];
    y.ns[2] = nw;
    struct t_wopt o2 = {.split = "other"};
    t_ogb_write(raw, &y, &o2);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out), 2);
    assert_non_null(strstr(outbuf, "several splits"));
    t_assert_no_output(out);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' --split other --quiet", gnnprep, raw, out), 0);
    /* --quiet keeps only the correctness note of products' one-way edges */
    assert_non_null(strstr(outbuf, "pass --undirected"));
    int lines = 0;
    for (const char *c = outbuf; *c; c++)
        lines += *c == '\n';
    assert_int_equal(lines, 1);
    t_ogb_verify(out, &y, &o2, 0, DTYPE_F32);
    t_rmrf(out);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' --split=sales_ranking", gnnprep, raw, out), 0);
    t_ogb_verify(out, &x, &o, 0, DTYPE_F32);
    t_rmrf(out);
    /* given the raw/ folder itself, the parent is imported, with a note */
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s/raw/' '%s' --split=sales_ranking", gnnprep, raw,
                           out), 0);
    assert_non_null(strstr(outbuf, "is the dataset's raw/ folder; importing its parent"));
    t_ogb_verify(out, &x, &o, 0, DTYPE_F32);
    t_rmrf(out);
    /* ogbn-mag's and ogbn-proteins' layouts are named and refused */
    char p2[4400];
    snprintf(p2, sizeof p2, "%s/mag/raw/relations/paper___cites___paper", dir);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "mkdir -p '%s' '%s/mag/split/time'", p2, dir), 0);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s/mag' '%s'", gnnprep, dir, out), 2);
    assert_non_null(strstr(outbuf, "looks like ogbn-mag, a heterogeneous graph"));
    t_assert_no_output(out);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "mkdir -p '%s/proteins/raw' && touch '%s/proteins/raw/edge.csv.gz' "
                           "'%s/proteins/raw/node_species.csv.gz'", dir, dir, dir), 0);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s/proteins' '%s'", gnnprep, dir, out), 2);
    assert_non_null(strstr(outbuf, "looks like ogbn-proteins"));
    t_assert_no_output(out);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb --help", gnnprep), 0);
    assert_non_null(strstr(outbuf, "--mem-limit"));
    t_fix_free(&x);
    t_rmrf(dir);
}

/* Out-of-core equals in-memory: a 1 MiB sort buffer spills runs, a 1 GiB
 * one does not, and both write the same bytes (which match the reference). */
static void test_mem_limit(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], o1[4200], o2[4200], p1[4300], p2[4300];
    t_scratch(dir, sizeof dir, "ogb-mem");
    struct t_fix x;
    t_fix_gen(&x, 5000, 200000, 2, 99);
    struct t_wopt o = {.zip = T_ZIP_DEFLATE | T_ZIP_ZIP64};
    snprintf(raw, sizeof raw, "%s/raw", dir);
    t_ogb_write(raw, &x, &o);
    snprintf(o1, sizeof o1, "%s/small", dir);
    snprintf(o2, sizeof o2, "%s/large", dir);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' --mem-limit 1M --undirected", gnnprep,
                           raw, o1), 0);
    unsigned long long runs = 0;
    const char *r = strstr(outbuf, " stored, ");
    assert_non_null(r);
    assert_int_equal(sscanf(r, " stored, %llu sorted runs", &runs), 1);
    if (runs < 2)
        fail_msg("--mem-limit 1M spilled %llu runs; the test needs an out-of-core sort\n%s", runs, outbuf);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' --mem-limit=1G --undirected", gnnprep,
                           raw, o2), 0);
    assert_non_null(strstr(outbuf, " 0 sorted runs"));
    for (int k = 0; k < 2; k++) {
        const char *f = k ? "indices.bin" : "indptr.bin";
        snprintf(p1, sizeof p1, "%s/%s", o1, f);
        snprintf(p2, sizeof p2, "%s/%s", o2, f);
        size_t l1, l2;
        unsigned char *b1 = t_slurp(p1, &l1), *b2 = t_slurp(p2, &l2);
        assert_int_equal(l1, l2);
        assert_int_equal(memcmp(b1, b2, l1), 0);
        free(b1);
        free(b2);
    }
    t_ogb_verify(o1, &x, &o, T_UNDIRECTED, DTYPE_F32);
    t_fix_free(&x);
    t_rmrf(dir);
}

/* ---- bad input: exit 2, a message naming the file, nothing left ---- */
enum mutation {
    M_FEAT_TRUNC, M_FEAT_OBJECT, M_EDGE_FLOAT, M_EDGE_SHAPE, M_BAD_ZIP, M_NO_FEAT, M_NO_LABELS, M_EDGE_RANGE,
    M_EDGE_NEG, M_LABEL_FRAC, M_LABEL_NEG, M_LABEL_LEN, M_NUMNODES, M_SPLIT_RANGE, M_SPLIT_DUP, M_SPLIT_OVERLAP,
    M_SPLIT_TEXT, M_SPLIT_NEG, M_NO_SPLIT, M_ZERO_NODES, M_CRC, M_GZ_TRUNC, M_LABELS_NONE, M_NO_RAW,
    M_SPLIT_UNLABELLED,
};

static const struct bad {
    enum mutation m;
    const char *want[3]; /* substrings of the output */
} bads[] = {
    {M_FEAT_TRUNC, {"data.npz: node_feat.npy", "truncated: expected"}},
    {M_FEAT_OBJECT, {"data.npz: node_feat.npy", "object"}},
    {M_EDGE_FLOAT, {"data.npz: edge_index.npy", "float32"}},
    {M_EDGE_SHAPE, {"data.npz: edge_index.npy", "shape (3, 40)"}},
    {M_BAD_ZIP, {"raw/data.npz", "not a valid zip archive"}},
    {M_NO_FEAT, {"raw/data.npz", "has no member node_feat.npy", "edge_index.npy"}},
    {M_NO_LABELS, {"raw/node-label.npz", "No such file"}},
    {M_EDGE_RANGE, {"edge_index.npy", "edge 7: node id 20 is out of range", "20 nodes"}},
    {M_EDGE_NEG, {"edge_index.npy", "edge 3: negative node id -1"}},
    {M_LABEL_FRAC, {"node-label.npz: node_label.npy", "node 4: label 1.5"}},
    {M_LABEL_NEG, {"node-label.npz: node_label.npy", "node 2: label -2"}},
    {M_LABEL_LEN, {"node_label.npy", "19 labels for 20 nodes"}},
    {M_NUMNODES, {"num_nodes_list.npy", "21 nodes"}},
    {M_SPLIT_RANGE, {"train.csv.gz:2", "node id 20 is out of range"}},
    {M_SPLIT_DUP, {"valid.csv.gz:3", "appears twice", "valid.csv.gz:1"}},
    {M_SPLIT_OVERLAP, {"test.csv.gz:2", "train.csv.gz:1", "disjoint"}},
    {M_SPLIT_TEXT, {"valid.csv.gz:2", "\"abc\" is not a non-negative integer"}},
    {M_SPLIT_NEG, {"test.csv.gz:1", "negative"}},
    {M_NO_SPLIT, {"split", "No such file"}},
    {M_ZERO_NODES, {"node_feat.npy", "zero nodes"}},
    {M_CRC, {"data.npz: node_feat.npy", "damaged"}},
    {M_GZ_TRUNC, {"train.csv.gz", "damaged gzip"}},
    {M_LABELS_NONE, {"node_label.npy", "no node has a label"}},
    {M_NO_RAW, {"raw/data.npz", "No such file"}},
    {M_SPLIT_UNLABELLED, {"test.csv.gz:2", "node 13 of the test split has no label", "node-label.npz"}},
};

static void apply(enum mutation m, const char *raw, struct t_fix *x, struct t_wopt *o)
{
    char cmd[8400];
    switch (m) {
    case M_FEAT_TRUNC: o->feat_cut = 4; break;
    case M_FEAT_OBJECT: o->feat_t = "|O"; break;
    case M_EDGE_FLOAT: o->edge_t = "<f4"; break;
    case M_EDGE_SHAPE: o->edge_rows = 3; break;
    case M_NO_FEAT: o->no_feat = true; break;
    case M_EDGE_RANGE: x->dst[7] = x->n; break;
    case M_EDGE_NEG: x->src[3] = UINT64_MAX; break; /* written as int64 -1 */
    case M_LABEL_FRAC: x->label[4] = 1.5; break;
    case M_LABEL_NEG: x->label[2] = -2; break;
    case M_NUMNODES: o->numnodes_delta = 1; break;
    case M_SPLIT_RANGE: o->split_text[0] = "0\n20\n1\n"; break;
    case M_SPLIT_DUP: o->split_text[1] = "5\n6\n5\n"; break;
    case M_SPLIT_OVERLAP: o->split_text[0] = "8\n7\n"; o->split_text[2] = "9\n8\n"; break;
    case M_SPLIT_TEXT: o->split_text[1] = "5\nabc\n"; break;
    case M_SPLIT_NEG: o->split_text[2] = "-3\n"; break;
    case M_SPLIT_UNLABELLED: x->ns[2] = 0; o->split_text[2] = "\n13\n"; break; /* 13 % 5 == 3: NaN */
    case M_ZERO_NODES: x->n = 0; break;
    case M_LABELS_NONE:
        for (uint64_t v = 0; v < x->n; v++)
            x->label[v] = NAN;
        break;
    default: break;
    }
    if (m == M_SPLIT_OVERLAP) {
        x->ns[1] = 0; /* valid empty */
    }
    t_ogb_write(raw, x, o);
    switch (m) {
    case M_BAD_ZIP:
        snprintf(cmd, sizeof cmd, "echo 'PK this is no zip' > '%s/raw/data.npz'", raw);
        assert_int_equal(system(cmd), 0);
        break;
    case M_NO_LABELS:
        snprintf(cmd, sizeof cmd, "rm '%s/raw/node-label.npz'", raw);
        assert_int_equal(system(cmd), 0);
        break;
    case M_LABEL_LEN: {
        /* a label array one shorter than the node count */
        struct t_fix y = *x;
        y.n = x->n - 1;
        size_t ll;
        char shape[64];
        snprintf(shape, sizeof shape, "(%llu, 1)", (unsigned long long)y.n);
        unsigned char *ml = t_npy_of("<f8", shape, x->label, y.n, &ll);
        struct t_member lm1 = {"node_label.npy", ml, ll};
        snprintf(cmd, sizeof cmd, "%s/raw/node-label.npz", raw);
        t_zip_write(cmd, &lm1, 1, T_ZIP_DEFLATE);
        free(ml);
        break;
    }
    case M_NO_SPLIT:
        snprintf(cmd, sizeof cmd, "rm -r '%s/split'", raw);
        assert_int_equal(system(cmd), 0);
        break;
    case M_NO_RAW:
        snprintf(cmd, sizeof cmd, "rm -r '%s/raw'", raw);
        assert_int_equal(system(cmd), 0);
        break;
    case M_CRC: {
        /* flip one byte inside node_feat's stored data: only the CRC sees it */
        snprintf(cmd, sizeof cmd, "%s/raw/data.npz", raw);
        size_t len;
        unsigned char *z = t_slurp(cmd, &len);
        unsigned char *at = NULL;
        for (size_t i = 0; i + 6 < len; i++)
            if (!memcmp(z + i, "\x93NUMPY", 6) && !memcmp(z + i + 10, "{'descr': '<f4'", 15))
                at = z + i;
        assert_non_null(at);
        at[128 + 10] ^= 0x01;
        t_write(cmd, z, len);
        free(z);
        break;
    }
    case M_GZ_TRUNC: {
        snprintf(cmd, sizeof cmd, "%s/split/time/train.csv.gz", raw);
        size_t len;
        unsigned char *z = t_slurp(cmd, &len);
        t_write(cmd, z, len - 6);
        free(z);
        break;
    }
    default: break;
    }
}

static void test_bad_input(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200];
    t_scratch(dir, sizeof dir, "ogb-bad");
    for (size_t i = 0; i < SL_ARRAY_LEN(bads); i++) {
        struct t_fix x;
        t_fix_gen(&x, 20, 40, 3, 5);
        struct t_wopt o = {0};
        snprintf(raw, sizeof raw, "%s/raw%zu", dir, i);
        snprintf(out, sizeof out, "%s/out%zu", dir, i);
        apply(bads[i].m, raw, &x, &o);
        int rc = t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out);
        if (rc != 2)
            fail_msg("case %zu: exit %d, expected 2\n%s", i, rc, outbuf);
        for (int k = 0; k < 3 && bads[i].want[k]; k++)
            if (!strstr(outbuf, bads[i].want[k]))
                fail_msg("case %zu: the message lacks \"%s\":\n%s", i, bads[i].want[k], outbuf);
        t_assert_no_output(out);
        x.n = 20;
        t_fix_free(&x);
    }
    t_rmrf(dir);
}

static void test_bad_flags(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200], marker[4300];
    t_scratch(dir, sizeof dir, "ogb-flags");
    struct t_fix x;
    t_fix_gen(&x, 20, 40, 3, 5);
    struct t_wopt o = {0};
    snprintf(raw, sizeof raw, "%s/raw", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    t_ogb_write(raw, &x, &o);
    static const struct { const char *args, *want; } cases[] = {
        {"--dtype f64", "--dtype f64"},
        {"--mem-limit abc", "--mem-limit abc"},
        {"--mem-limit 1000", "at least 1M"},
        {"--mem-limit", "needs a value"},
        {"--bogus", "unknown option --bogus"},
        {"--split nope", "no split named 'nope'"},
        {"--split ../x", "--split takes"},
        {"extra", "unexpected argument"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        int rc = t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' %s", gnnprep, raw, out, cases[i].args);
        if (rc != 2 || !strstr(outbuf, cases[i].want))
            fail_msg("'%s': exit %d, output:\n%s", cases[i].args, rc, outbuf);
        t_assert_no_output(out);
    }
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s'", gnnprep, raw), 2);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s/nonexistent' '%s'", gnnprep, dir, out), 2);
    assert_non_null(strstr(outbuf, "nonexistent"));
    t_assert_no_output(out);
    /* OUT's parent missing */
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s/no/such/out'", gnnprep, raw, dir), 2);
    /* OUT exists: refused, and left untouched */
    snprintf(marker, sizeof marker, "%s/keep", out);
    assert_int_equal(system("true"), 0);
    char cmd[8800];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && touch '%s'", out, marker);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out), 2);
    assert_non_null(strstr(outbuf, "already exists"));
    assert_true(t_exists(marker));
    t_fix_free(&x);
    t_rmrf(dir);
}

/* A fixture written by numpy itself (np.savez_compressed, np.savez,
 * gzip text) imports to the values make_ogb_tiny.py put in it. */
static void test_real_numpy(void **state)
{
    (void)state;
    setup_bin();
    const char *srcdir = getenv("SLUICE_SRC");
    char raw[4096], dir[4096], out[4200];
    snprintf(raw, sizeof raw, "%s/tests/fixtures/ogb_tiny", srcdir ? srcdir : ".");
    if (!t_exists(raw))
        fail_msg("%s is missing", raw);
    t_scratch(dir, sizeof dir, "ogb-numpy");
    snprintf(out, sizeof out, "%s/out", dir);
    int rc = t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out);
    if (rc)
        fail_msg("exit %d\n%s", rc, outbuf);
    /* the values make_ogb_tiny.py writes */
    struct t_fix x;
    memset(&x, 0, sizeof x);
    x.n = 10;
    x.f = 5;
    x.e = 14;
    uint64_t src[14] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 0, 3, 9};
    uint64_t dst[14] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 5, 9, 3, 2};
    float feat[50];
    for (int i = 0; i < 50; i++)
        feat[i] = (float)i * 0.5f - 3.0f;
    double label[10] = {0, 1, 2, NAN, 1, 0, NAN, 2, 3, 1};
    uint64_t tr[4] = {0, 1, 2, 4}, va[2] = {5, 7}, te[2] = {9, 8};
    x.src = src;
    x.dst = dst;
    x.feat = feat;
    x.label = label;
    x.split[0] = tr;
    x.split[1] = va;
    x.split[2] = te;
    x.ns[0] = 4;
    x.ns[1] = 2;
    x.ns[2] = 2;
    struct t_wopt o = {0};
    t_ogb_verify(out, &x, &o, 0, DTYPE_F32);
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip), cmocka_unit_test(test_split_choice), cmocka_unit_test(test_mem_limit),
        cmocka_unit_test(test_bad_input), cmocka_unit_test(test_bad_flags),    cmocka_unit_test(test_real_numpy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
