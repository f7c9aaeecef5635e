/* test_ogb.c - `gnnprep import-ogb` end to end: the tests write fixtures in
 * OGB's exact raw layout (raw/data.npz with libarchive's zip writer, stored
 * and deflated, zip64; raw/node-label.npz with NaNs; split/NAME/{train,valid,test}.csv.gz
 * with zlib), run the built gnnprep and compare every value of the dataset
 * with what was written: CSC against a reference built here, features with
 * their stride padding, labels, sorted splits. Also: a tiny --mem-limit
 * gives byte-identical topology to a large one; every kind of bad input
 * exits 2 naming the file and leaves nothing behind; and a fixture written
 * by real numpy (tests/fixtures/ogb_tiny, see make_ogb_tiny.py) imports to
 * known values. */
#include <errno.h>
#include <math.h>

#include "t_util.h"
#include "t_imp.h"
#include "core/dataset.h"
#include "core/util.h"

static char gnnprep[4096];
static char outbuf[1 << 16];

/* ---- a random graph in memory ---- */
typedef struct fix {
    uint64_t n, e, f;
    uint64_t *src, *dst;
    float *feat;       /* (n, f), values exact in float16 */
    double *label;     /* (n), NaN = unlabelled */
    uint64_t *split[3];
    size_t ns[3];      /* ids in file order (shuffled) */
} fix;

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

static void fix_gen(fix *x, uint64_t n, uint64_t e, uint64_t f, uint64_t seed)
{
    memset(x, 0, sizeof *x);
    x->n = n;
    x->e = e;
    x->f = f;
    x->src = malloc(e * sizeof *x->src);
    x->dst = malloc(e * sizeof *x->dst);
    x->feat = malloc(n * f * sizeof *x->feat);
    x->label = malloc(n * sizeof *x->label);
    uint64_t s = seed;
    for (uint64_t i = 0; i < e; i++) {
        x->src[i] = rng(&s) % n;
        /* skewed destinations, some self loops and repeats */
        x->dst[i] = i % 17 == 0 ? x->src[i] : (rng(&s) % n) * (rng(&s) % n) / n;
        if (i % 13 == 5 && i)
            x->src[i] = x->src[i - 1], x->dst[i] = x->dst[i - 1];
    }
    for (uint64_t i = 0; i < n * f; i++)
        x->feat[i] = (float)((int64_t)(rng(&s) % 2001) - 1000) / 64.0f;
    for (uint64_t v = 0; v < n; v++)
        x->label[v] = v % 5 == 3 ? NAN : (double)(rng(&s) % 7);
    uint64_t *perm = malloc(n * sizeof *perm);
    for (uint64_t v = 0; v < n; v++)
        perm[v] = v;
    for (uint64_t v = n - 1; v > 0; v--) {
        uint64_t j = rng(&s) % (v + 1), t = perm[v];
        perm[v] = perm[j];
        perm[j] = t;
    }
    /* splits hold labelled nodes only, as OGB's do */
    uint64_t nl = 0;
    for (uint64_t v = 0; v < n; v++)
        if (!isnan(x->label[perm[v]]))
            perm[nl++] = perm[v];
    size_t cut[4] = {0, nl / 2, nl / 2 + nl / 5, nl / 2 + nl / 5 + nl / 5};
    for (int k = 0; k < 3; k++) {
        x->ns[k] = cut[k + 1] - cut[k];
        x->split[k] = malloc((x->ns[k] + 1) * sizeof(uint64_t));
        memcpy(x->split[k], perm + cut[k], x->ns[k] * sizeof(uint64_t));
    }
    free(perm);
}

static void fix_free(fix *x)
{
    free(x->src);
    free(x->dst);
    free(x->feat);
    free(x->label);
    for (int k = 0; k < 3; k++)
        free(x->split[k]);
}

/* ---- writing the OGB layout ---- */
typedef struct wopt {
    int zip;              /* T_ZIP_* for data.npz (node-label.npz is deflated) */
    const char *feat_t;   /* "<f4" (default), "<f2", "<f8", "|O" */
    const char *label_t;  /* "<f8" (default), "<f4" */
    bool label_1d;
    const char *edge_t;   /* "<i8" (default), "<i4", "<f4" */
    int edge_rows;        /* 2 (default) */
    size_t feat_cut;      /* bytes cut off the end of node_feat.npy */
    bool no_feat, no_numnodes;
    int64_t numnodes_delta;
    const char *split;    /* split directory name, "time" by default */
    const char *split_text[3]; /* replaces a split file's text */
} wopt;

static unsigned char *npy_of(const char *t, const char *shape, const double *v, size_t n, size_t *len)
{
    size_t isz = t[2] == '8' ? 8 : t[2] == '4' ? 4 : t[2] == '2' ? 2 : 1;
    unsigned char *raw = calloc(n + 1, isz);
    for (size_t i = 0; i < n; i++) {
        if (!strcmp(t, "<f8")) {
            memcpy(raw + 8 * i, &v[i], 8);
        } else if (!strcmp(t, "<f4")) {
            float x = (float)v[i];
            memcpy(raw + 4 * i, &x, 4);
        } else if (!strcmp(t, "<f2")) {
            uint16_t h = sl_f32_to_f16((float)v[i]);
            memcpy(raw + 2 * i, &h, 2);
        } else if (!strcmp(t, "<i8")) {
            int64_t x = (int64_t)v[i];
            memcpy(raw + 8 * i, &x, 8);
        } else if (!strcmp(t, "<i4")) {
            int32_t x = (int32_t)v[i];
            memcpy(raw + 4 * i, &x, 4);
        } else {
            raw[i] = (unsigned char)v[i]; /* "|O": bytes that are not a pickle */
        }
    }
    unsigned char *b = t_npy_make(1, t, shape, raw, n * isz, len);
    free(raw);
    return b;
}

static void ogb_write(const char *dir, const fix *x, const wopt *o)
{
    char p[4300], shape[128];
    snprintf(p, sizeof p, "mkdir -p '%s/raw' '%s/split/%s'", dir, dir, o->split ? o->split : "time");
    assert_int_equal(system(p), 0);
    const char *edge_t = o->edge_t ? o->edge_t : "<i8";
    int rows = o->edge_rows ? o->edge_rows : 2;
    double *ev = malloc((size_t)rows * x->e * sizeof *ev + 8);
    for (uint64_t i = 0; i < x->e; i++) {
        ev[i] = (double)(int64_t)x->src[i];
        ev[x->e + i] = (double)(int64_t)x->dst[i];
        if (rows == 3)
            ev[2 * x->e + i] = 0;
    }
    size_t le, lf, ln, lm, lx;
    snprintf(shape, sizeof shape, "(%d, %llu)", rows, (unsigned long long)x->e);
    unsigned char *me = npy_of(edge_t, shape, ev, (size_t)rows * x->e, &le);
    double *fv = malloc(x->n * x->f * sizeof *fv + 8);
    for (uint64_t i = 0; i < x->n * x->f; i++)
        fv[i] = x->feat[i];
    snprintf(shape, sizeof shape, "(%llu, %llu)", (unsigned long long)x->n, (unsigned long long)x->f);
    unsigned char *mf = npy_of(o->feat_t ? o->feat_t : "<f4", shape, fv, x->n * x->f, &lf);
    double nn = (double)((int64_t)x->n + o->numnodes_delta), ne = (double)x->e;
    unsigned char *mn = npy_of("<i8", "(1,)", &nn, 1, &ln);
    unsigned char *mm = npy_of("<i8", "(1,)", &ne, 1, &lm);
    double junk[4] = {0x80, 4, 'N', '.'};
    unsigned char *mx = npy_of("|O", "()", junk, 4, &lx); /* edge_feat=None as numpy pickles it */
    t_member mem[5];
    size_t k = 0;
    mem[k++] = (t_member){"edge_index.npy", me, le};
    mem[k++] = (t_member){"edge_feat.npy", mx, lx};
    if (!o->no_feat)
        mem[k++] = (t_member){"node_feat.npy", mf, lf - o->feat_cut};
    if (!o->no_numnodes)
        mem[k++] = (t_member){"num_nodes_list.npy", mn, ln};
    mem[k++] = (t_member){"num_edges_list.npy", mm, lm};
    snprintf(p, sizeof p, "%s/raw/data.npz", dir);
    t_zip_write(p, mem, k, o->zip);

    snprintf(shape, sizeof shape, o->label_1d ? "(%llu,)" : "(%llu, 1)", (unsigned long long)x->n);
    size_t ll;
    unsigned char *ml = npy_of(o->label_t ? o->label_t : "<f8", shape, x->label, x->n, &ll);
    t_member lm1 = {"node_label.npy", ml, ll};
    snprintf(p, sizeof p, "%s/raw/node-label.npz", dir);
    t_zip_write(p, &lm1, 1, T_ZIP_DEFLATE);

    static const char *const names[3] = {"train", "valid", "test"};
    for (int s = 0; s < 3; s++) {
        char *text = malloc(x->ns[s] * 24 + 1);
        size_t n = 0;
        text[0] = 0;
        for (size_t i = 0; i < x->ns[s]; i++)
            n += (size_t)sprintf(text + n, "%llu\n", (unsigned long long)x->split[s][i]);
        snprintf(p, sizeof p, "%s/split/%s/%s.csv.gz", dir, o->split ? o->split : "time", names[s]);
        t_gz_write(p, o->split_text[s] ? o->split_text[s] : text);
        free(text);
    }
    free(ev);
    free(fv);
    free(me);
    free(mf);
    free(mn);
    free(mm);
    free(mx);
    free(ml);
}

/* ---- checking the dataset against the fixture ---- */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Source value as the file held it, then as f32 (what gnnprep converts). */
static float src_value(const char *feat_t, float v)
{
    if (feat_t && !strcmp(feat_t, "<f2"))
        return sl_f16_to_f32(sl_f32_to_f16(v));
    return v; /* f4 exact; f8 holds the same float exactly */
}

static void verify(const char *out, const fix *x, const wopt *o, int cflags, sl_dtype fdt)
{
    sl_dataset_meta m;
    t_load_meta(out, &m);
    assert_int_equal(m.nodes, x->n);
    assert_int_equal(m.feat_dim, x->f);
    assert_int_equal(m.feat_align, SL_FEAT_ALIGN);
    double maxl = -1;
    for (uint64_t v = 0; v < x->n; v++)
        if (!isnan(x->label[v]))
            maxl = SL_MAX(maxl, x->label[v]);
    assert_int_equal(m.classes, (uint32_t)maxl + 1);
    assert_non_null(strstr(m.source, "gnnprep import-ogb"));
    /* what gnnprep check demands, the importer delivers */
    char chk[4096];
    if (t_run(chk, sizeof chk, "'%s' check '%s'", gnnprep, out) != 0)
        fail_msg("gnnprep check rejects the import:\n%s", chk);

    uint64_t *ip, *ix;
    size_t ne;
    t_ref_csc(x->n, x->src, x->dst, x->e, cflags, &ip, &ix, &ne);
    t_check_topology(out, &m, ip, ix, ne);
    free(ip);
    free(ix);

    /* features: every value, the zero padding of each row and of the file */
    char p[4200];
    size_t len;
    snprintf(p, sizeof p, "%s/features.bin", out);
    unsigned char *b = t_slurp(p, &len);
    const sl_dsfile *ff = &m.f[SL_F_FEATURES];
    assert_int_equal(ff->dtype, fdt);
    size_t es = sl_dtype_size(fdt);
    assert_int_equal(ff->row_stride, sl_feat_row_stride(x->f * es, SL_FEAT_ALIGN));
    assert_int_equal(len, sl_round_up(x->n * ff->row_stride, SL_FEAT_FILE_PAD));
    for (uint64_t v = 0; v < x->n; v++) {
        const unsigned char *row = b + v * ff->row_stride;
        for (uint64_t c = 0; c < x->f; c++) {
            float want = src_value(o->feat_t, x->feat[v * x->f + c]);
            if (fdt == SL_DT_F32) {
                float got;
                memcpy(&got, row + 4 * c, 4);
                if (memcmp(&got, &want, 4))
                    fail_msg("feature [%llu][%llu] = %g, expected %g", (unsigned long long)v, (unsigned long long)c,
                             (double)got, (double)want);
            } else {
                uint16_t got, w16 = sl_f32_to_f16(want);
                memcpy(&got, row + 2 * c, 2);
                if (got != w16)
                    fail_msg("f16 feature [%llu][%llu] = %04x, expected %04x", (unsigned long long)v,
                             (unsigned long long)c, got, w16);
            }
        }
        for (uint64_t k = x->f * es; k < ff->row_stride; k++)
            if (row[k])
                fail_msg("row %llu: padding byte %llu is not zero", (unsigned long long)v, (unsigned long long)k);
    }
    for (size_t k = x->n * ff->row_stride; k < len; k++)
        if (b[k])
            fail_msg("features.bin: tail byte %zu is not zero", k);
    free(b);

    snprintf(p, sizeof p, "%s/labels.bin", out);
    b = t_slurp(p, &len);
    assert_int_equal(len, 4 * x->n);
    for (uint64_t v = 0; v < x->n; v++) {
        int32_t got, want = isnan(x->label[v]) ? -1 : (int32_t)x->label[v];
        memcpy(&got, b + 4 * v, 4);
        if (got != want)
            fail_msg("label[%llu] = %d, expected %d", (unsigned long long)v, got, want);
    }
    free(b);

    for (int s = 0; s < 3; s++) {
        uint64_t *ids = malloc((x->ns[s] + 1) * sizeof *ids);
        memcpy(ids, x->split[s], x->ns[s] * sizeof *ids);
        qsort(ids, x->ns[s], sizeof *ids, cmp_u64);
        t_check_split(out, &m, SL_F_TRAIN + s, ids, x->ns[s]);
        free(ids);
    }
}

static void setup_bin(void)
{
    t_bin(gnnprep, sizeof gnnprep, "gnnprep");
    if (!t_exists(gnnprep))
        fail_msg("%s not built", gnnprep);
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
    sl_dtype fdt;
} variants[] = {
    {"stored f32 dim 3", 0, 50, 300, 3, "<f4", "<f8", false, "", 0, SL_DT_F32},
    {"deflate zip64 f16 dim 100 undirected", T_ZIP_DEFLATE | T_ZIP_ZIP64, 64, 500, 100, "<f2", "<f4", true,
     "--undirected --dedupe --drop-self-loops", T_UNDIRECTED | T_DEDUPE | T_NO_LOOPS, SL_DT_F16},
    {"stored zip64 f64 -> f16 dim 129", T_ZIP_ZIP64, 33, 200, 129, "<f8", "<f8", false, "--dtype f16 --dedupe",
     T_DEDUPE, SL_DT_F16},
    {"deflate f32 dim 768 drop loops", T_ZIP_DEFLATE, 20, 120, 768, "<f4", "<f8", true, "--drop-self-loops",
     T_NO_LOOPS, SL_DT_F32},
    {"deflate f16 -> f32 dim 1", T_ZIP_DEFLATE, 40, 90, 1, "<f2", "<f8", false, "--dtype=f32 --undirected",
     T_UNDIRECTED, SL_DT_F32},
};

static void test_roundtrip(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200];
    t_scratch(dir, sizeof dir, "ogb-rt");
    for (size_t i = 0; i < SL_ARRAY_LEN(variants); i++) {
        const struct variant *v = &variants[i];
        fix x;
        fix_gen(&x, v->n, v->e, v->f, 1000 + i);
        wopt o = {.zip = v->zip, .feat_t = v->feat_t, .label_t = v->label_t, .label_1d = v->label_1d};
        snprintf(raw, sizeof raw, "%s/ogbn_v%zu", dir, i);
        snprintf(out, sizeof out, "%s/out%zu", dir, i);
        ogb_write(raw, &x, &o);
        int rc = t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' %s", gnnprep, raw, out, v->flags);
        if (rc != 0)
            fail_msg("variant '%s': exit %d\n%s", v->what, rc, outbuf);
        print_message("variant '%s': ok\n", v->what);
        verify(out, &x, &o, v->cflags, v->fdt);
        fix_free(&x);
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
    fix x;
    fix_gen(&x, 30, 80, 4, 7);
    wopt o = {.split = "sales_ranking"};
    snprintf(raw, sizeof raw, "%s/ogbn_products", dir);
    ogb_write(raw, &x, &o);
    snprintf(out, sizeof out, "%s/out", dir);
    /* the only split is found by itself; products gets the --undirected hint */
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out), 0);
    assert_non_null(strstr(outbuf, "--undirected"));
    verify(out, &x, &o, 0, SL_DT_F32);
    t_rmrf(out);
    /* a second split directory: ambiguous without --split */
    fix y = x;
    uint64_t *sw = y.split[0];
    y.split[0] = y.split[2];
    y.split[2] = sw;
    size_t nw = y.ns[0];
    y.ns[0] = y.ns[2];
    y.ns[2] = nw;
    wopt o2 = {.split = "other"};
    ogb_write(raw, &y, &o2);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out), 2);
    assert_non_null(strstr(outbuf, "several splits"));
    t_assert_no_output(out);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' --split other --quiet", gnnprep, raw, out), 0);
    assert_string_equal(outbuf, "");
    verify(out, &y, &o2, 0, SL_DT_F32);
    t_rmrf(out);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' --split=sales_ranking", gnnprep, raw, out), 0);
    verify(out, &x, &o, 0, SL_DT_F32);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb --help", gnnprep), 0);
    assert_non_null(strstr(outbuf, "--mem-limit"));
    fix_free(&x);
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
    fix x;
    fix_gen(&x, 5000, 200000, 2, 99);
    wopt o = {.zip = T_ZIP_DEFLATE | T_ZIP_ZIP64};
    snprintf(raw, sizeof raw, "%s/raw", dir);
    ogb_write(raw, &x, &o);
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
    verify(o1, &x, &o, T_UNDIRECTED, SL_DT_F32);
    fix_free(&x);
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

static void apply(enum mutation m, const char *raw, fix *x, wopt *o)
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
    ogb_write(raw, x, o);
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
        fix y = *x;
        y.n = x->n - 1;
        size_t ll;
        char shape[64];
        snprintf(shape, sizeof shape, "(%llu, 1)", (unsigned long long)y.n);
        unsigned char *ml = npy_of("<f8", shape, x->label, y.n, &ll);
        t_member lm1 = {"node_label.npy", ml, ll};
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
        fix x;
        fix_gen(&x, 20, 40, 3, 5);
        wopt o = {0};
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
        fix_free(&x);
    }
    t_rmrf(dir);
}

static void test_bad_flags(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200], marker[4300];
    t_scratch(dir, sizeof dir, "ogb-flags");
    fix x;
    fix_gen(&x, 20, 40, 3, 5);
    wopt o = {0};
    snprintf(raw, sizeof raw, "%s/raw", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    ogb_write(raw, &x, &o);
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
    fix_free(&x);
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
    fix x;
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
    wopt o = {0};
    verify(out, &x, &o, 0, SL_DT_F32);
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
