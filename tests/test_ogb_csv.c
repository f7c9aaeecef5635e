/* test_ogb_csv.c - `gnnprep import-ogb` on OGB's CSV raw layout (ogbn-arxiv,
 * ogbn-products): the tests write fixtures in that exact layout with zlib
 * (raw/edge.csv.gz, node-feat.csv.gz, node-label.csv.gz, num-node-list.csv.gz,
 * num-edge-list.csv.gz, split/NAME/{train,valid,test}.csv.gz; see t_ogb.h), run the built
 * gnnprep and compare every value: CSC against a reference, features with
 * their padding, labels with nan -> -1, sorted splits. The same graph
 * written in the binary layout (data.npz) and in the CSV layout imports to
 * byte-identical datasets, for every combination of --undirected, --dedupe
 * and --drop-self-loops and out of core. Every kind of bad input exits 2
 * with a message naming the file (and line), leaving nothing behind. */
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

static const char *const cflag_names[3] = {"--undirected", "--dedupe", "--drop-self-loops"};
static const int cflag_bits[3] = {T_UNDIRECTED, T_DEDUPE, T_NO_LOOPS};

/* The gnnprep flags for a combination of T_UNDIRECTED, T_DEDUPE, T_NO_LOOPS. */
static void flags_of(int combo, char *buf, size_t len)
{
    buf[0] = '\0';
    for (int k = 0; k < 3; k++)
        if (combo & cflag_bits[k])
            snprintf(buf + strlen(buf), len - strlen(buf), " %s", cflag_names[k]);
}

/* ---- round trips ---- */
static const struct variant {
    const char *what;
    uint64_t n, e, f;
    bool crlf;
    const char *flags;
    int cflags;
    enum dtype fdt;
} variants[] = {
    {"dim 3", 50, 300, 3, false, "", 0, DTYPE_F32},
    {"dim 1, crlf line ends", 40, 90, 1, true, "--undirected", T_UNDIRECTED, DTYPE_F32},
    {"dim 100 as f16, all edge options", 64, 500, 100, false, "--dtype f16 --undirected --dedupe --drop-self-loops",
     T_UNDIRECTED | T_DEDUPE | T_NO_LOOPS, DTYPE_F16},
    {"dim 129", 33, 200, 129, false, "--dedupe", T_DEDUPE, DTYPE_F32},
    /* 4000 rows of 1200 bytes: several feature batches */
    {"dim 300, several feature batches", 4000, 20000, 300, false, "--drop-self-loops", T_NO_LOOPS, DTYPE_F32},
    {"dim 768 as f16", 20, 120, 768, true, "--dtype=f16", 0, DTYPE_F16},
};

static void test_roundtrip(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200];
    t_scratch(dir, sizeof dir, "ogbcsv-rt");
    for (size_t i = 0; i < SL_ARRAY_LEN(variants); i++) {
        const struct variant *v = &variants[i];
        struct t_fix x;
        t_fix_gen(&x, v->n, v->e, v->f, 2000 + i);
        struct t_wopt o = {.crlf = v->crlf};
        snprintf(raw, sizeof raw, "%s/ogbn_v%zu", dir, i);
        snprintf(out, sizeof out, "%s/out%zu", dir, i);
        t_ogb_write_csv(raw, &x, &o);
        int rc = t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' %s", gnnprep, raw, out, v->flags);
        if (rc != 0)
            fail_msg("variant '%s': exit %d\n%s", v->what, rc, outbuf);
        if (!strstr(outbuf, "text features per node") || !strstr(outbuf, "edges: csv"))
            fail_msg("variant '%s': the CSV layout was not the one read:\n%s", v->what, outbuf);
        print_message("variant '%s': ok\n", v->what);
        t_ogb_verify(out, &x, &o, v->cflags, v->fdt);
        t_fix_free(&x);
    }
    t_rmrf(dir);
}

/* ---- the two layouts give the same dataset ---- */

/* Asserts that datasets a and b are equal but for `source`: every count,
 * every file's entry in dataset.toml (checksum included) and its bytes. */
static void assert_same_dataset(const char *a, const char *b, const char *what)
{
    struct dataset_meta ma, mb;
    t_load_meta(a, &ma);
    t_load_meta(b, &mb);
    if (ma.nodes != mb.nodes || ma.edges != mb.edges || ma.feat_dim != mb.feat_dim || ma.classes != mb.classes ||
        ma.feat_align != mb.feat_align || ma.version != mb.version)
        fail_msg("%s: the counts differ", what);
    for (int i = 0; i < DATASET_FILES; i++) {
        const struct dataset_file *fa = &ma.f[i], *fb = &mb.f[i];
        if (strcmp(fa->file, fb->file) || fa->dtype != fb->dtype || fa->rows != fb->rows || fa->cols != fb->cols ||
            fa->row_stride != fb->row_stride || fa->bytes != fb->bytes || fa->present != fb->present)
            fail_msg("%s: [%s] differs in dataset.toml", what, dataset_file_key[i]);
        if (fa->xxh3 != fb->xxh3)
            fail_msg("%s: [%s] xxh3 %016llx (npz) vs %016llx (csv)", what, dataset_file_key[i],
                     (unsigned long long)fa->xxh3, (unsigned long long)fb->xxh3);
        char pa[4300], pb[4300];
        size_t la, lb;
        snprintf(pa, sizeof pa, "%s/%s", a, fa->file);
        snprintf(pb, sizeof pb, "%s/%s", b, fb->file);
        unsigned char *da = t_slurp(pa, &la), *db = t_slurp(pb, &lb);
        if (la != lb || memcmp(da, db, la))
            fail_msg("%s: %s differs", what, fa->file);
        free(da);
        free(db);
    }
}

/* Every combination of the edge options, on both layouts. */
static void test_same_as_npz(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], npz[4200], csv[4200], o1[4200], o2[4200], flags[128];
    t_scratch(dir, sizeof dir, "ogbcsv-same");
    struct t_fix x;
    t_fix_gen(&x, 300, 2500, 7, 77);
    struct t_wopt o = {.zip = T_ZIP_DEFLATE};
    snprintf(npz, sizeof npz, "%s/npz", dir);
    snprintf(csv, sizeof csv, "%s/csv", dir);
    t_ogb_write(npz, &x, &o);
    t_ogb_write_csv(csv, &x, &o);
    for (int combo = 0; combo < 8; combo++) {
        flags_of(combo, flags, sizeof flags);
        snprintf(o1, sizeof o1, "%s/from-npz%d", dir, combo);
        snprintf(o2, sizeof o2, "%s/from-csv%d", dir, combo);
        if (t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' %s", gnnprep, npz, o1, flags) != 0 ||
            !strstr(outbuf, "edges: npy"))
            fail_msg("npz, flags '%s':\n%s", flags, outbuf);
        if (t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' %s", gnnprep, csv, o2, flags) != 0 ||
            !strstr(outbuf, "edges: csv"))
            fail_msg("csv, flags '%s':\n%s", flags, outbuf);
        assert_same_dataset(o1, o2, flags);
        t_ogb_verify(o2, &x, &o, combo, DTYPE_F32);
        print_message("flags '%s': identical\n", flags);
    }
    t_fix_free(&x);
    t_rmrf(dir);
}

/* Out of core: more edges than one read batch, sorted in spilled runs,
 * still the same bytes as the binary layout sorted in memory. */
static void test_mem_limit(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], npz[4200], csv[4200], o1[4200], o2[4200];
    t_scratch(dir, sizeof dir, "ogbcsv-mem");
    struct t_fix x;
    t_fix_gen(&x, 5000, 300000, 2, 99);
    struct t_wopt o = {.zip = T_ZIP_DEFLATE | T_ZIP_ZIP64};
    snprintf(npz, sizeof npz, "%s/npz", dir);
    snprintf(csv, sizeof csv, "%s/csv", dir);
    t_ogb_write(npz, &x, &o);
    t_ogb_write_csv(csv, &x, &o);
    snprintf(o1, sizeof o1, "%s/large", dir);
    snprintf(o2, sizeof o2, "%s/small", dir);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' --undirected", gnnprep, npz, o1), 0);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' --mem-limit 1M --undirected", gnnprep,
                           csv, o2), 0);
    unsigned long long runs = 0;
    const char *r = strstr(outbuf, " stored, ");
    assert_non_null(r);
    assert_int_equal(sscanf(r, " stored, %llu sorted runs", &runs), 1);
    if (runs < 2)
        fail_msg("--mem-limit 1M spilled %llu runs; the test needs an out-of-core sort\n%s", runs, outbuf);
    assert_non_null(strstr(outbuf, "300000 edges read"));
    assert_same_dataset(o1, o2, "--mem-limit 1M");
    t_ogb_verify(o2, &x, &o, T_UNDIRECTED, DTYPE_F32);
    t_fix_free(&x);
    t_rmrf(dir);
}

/* Which layout is read: data.npz wins when both are there; neither is an
 * error naming raw/ and both layouts; the help describes both. */
static void test_layout(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200], cmd[8600];
    t_scratch(dir, sizeof dir, "ogbcsv-layout");
    struct t_fix x, y;
    t_fix_gen(&x, 30, 80, 4, 7);
    t_fix_gen(&y, 25, 60, 4, 8);
    struct t_wopt o = {.split = "sales_ranking"};
    snprintf(raw, sizeof raw, "%s/ogbn_products", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    t_ogb_write_csv(raw, &x, &o);
    /* products stores its edges once: the hint comes for the CSV layout too */
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out), 0);
    assert_non_null(strstr(outbuf, "pass --undirected"));
    t_ogb_verify(out, &x, &o, 0, DTYPE_F32);
    t_rmrf(out);
    /* a data.npz beside the CSV files is the one read */
    t_ogb_write(raw, &y, &o);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s' --quiet", gnnprep, raw, out), 0);
    t_ogb_verify(out, &y, &o, 0, DTYPE_F32);
    t_rmrf(out);
    /* neither layout */
    snprintf(cmd, sizeof cmd, "rm '%s/raw/data.npz' '%s/raw/edge.csv.gz'", raw, raw);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out), 2);
    static const char *const want[] = {"ogbn_products/raw: holds neither data.npz nor edge.csv.gz", "No such file",
                                       "raw/node-label.npz", "num-edge-list.csv.gz"};
    for (size_t k = 0; k < SL_ARRAY_LEN(want); k++)
        if (!strstr(outbuf, want[k]))
            fail_msg("the message lacks \"%s\":\n%s", want[k], outbuf);
    t_assert_no_output(out);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb --help", gnnprep), 0);
    static const char *const help[] = {"raw/data.npz", "raw/edge.csv.gz", "node-feat.csv.gz", "num-node-list.csv.gz",
                                       "--undirected", "--mem-limit", "--split"};
    for (size_t k = 0; k < SL_ARRAY_LEN(help); k++)
        if (!strstr(outbuf, help[k]))
            fail_msg("--help lacks \"%s\":\n%s", help[k], outbuf);
    t_fix_free(&x);
    t_fix_free(&y);
    t_rmrf(dir);
}

/* ---- bad input: exit 2, a message naming the file and line, nothing left ---- */
enum special { S_NONE, S_RM, S_TRUNC, S_EMPTY };

static const struct bad {
    const char *what;
    int file;              /* T_CSV_*: the line edit */
    uint64_t line;         /* 0: no edit */
    const char *text;      /* the line's new text */
    bool del;              /* delete the line instead */
    int64_t dn, de;        /* num-node-list / num-edge-list deltas */
    enum special sp;       /* then this to raw/<name> */
    const char *name;
    const char *want[3];   /* substrings of the output */
} bads[] = {
    /* node-feat.csv.gz (20 rows of 3) */
    {"ragged short row", T_CSV_FEAT, 7, "1,2", false, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:7: 2 columns, expected 3"}},
    {"ragged long row", T_CSV_FEAT, 8, "1,2,3,4", false, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:8: 4 columns, expected 3"}},
    {"non-numeric feature", T_CSV_FEAT, 5, "1,abc,3", false, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:5: column 2: \"abc\" is not a number"}},
    {"trailing junk", T_CSV_FEAT, 5, "1,2,3.5x", false, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:5: column 3: \"3.5x\" is not a number"}},
    {"space before a number", T_CSV_FEAT, 6, "1, 2,3", false, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:6: column 2: \" 2\" is not a number"}},
    {"empty feature", T_CSV_FEAT, 9, "1,,3", false, 0, 0, S_NONE, NULL, {"node-feat.csv.gz:9: column 2: empty"}},
    {"inf feature", T_CSV_FEAT, 4, "1,2,inf", false, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:4: column 3: \"inf\" is not a finite number"}},
    {"nan feature", T_CSV_FEAT, 3, "nan,2,3", false, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:3: column 1: \"nan\" is not a finite number"}},
    {"feature beyond float32", T_CSV_FEAT, 1, "1,1e39,3", false, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:1: column 2: \"1e39\" is not a finite number"}},
    {"a feature row too many", T_CSV_FEAT, 21, "1,2,3", false, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:21: more rows than num-node-list.csv.gz's count of 20"}},
    {"a feature row too few", T_CSV_FEAT, 20, NULL, true, 0, 0, S_NONE, NULL,
     {"node-feat.csv.gz:19: ends after 19 rows, but num-node-list.csv.gz says 20"}},
    {"no node-feat.csv.gz", 0, 0, NULL, false, 0, 0, S_RM, "node-feat.csv.gz",
     {"raw/node-feat.csv.gz: no such file", "needs node features"}},
    {"empty node-feat.csv.gz", 0, 0, NULL, false, 0, 0, S_EMPTY, "node-feat.csv.gz",
     {"raw/node-feat.csv.gz: empty, but num-node-list.csv.gz says 20 nodes"}},
    {"truncated node-feat.csv.gz", 0, 0, NULL, false, 0, 0, S_TRUNC, "node-feat.csv.gz",
     {"raw/node-feat.csv.gz: damaged gzip data after line"}},
    /* edge.csv.gz (40 edges) */
    {"edge with one column", T_CSV_EDGE, 3, "5", false, 0, 0, S_NONE, NULL, {"edge.csv.gz:3: one column"}},
    {"edge with three columns", T_CSV_EDGE, 4, "1,2,3", false, 0, 0, S_NONE, NULL, {"edge.csv.gz:4: 3 columns"}},
    {"negative id", T_CSV_EDGE, 5, "-1,2", false, 0, 0, S_NONE, NULL,
     {"edge.csv.gz:5: column 1: \"-1\" is negative"}},
    {"id = N", T_CSV_EDGE, 6, "3,20", false, 0, 0, S_NONE, NULL,
     {"edge.csv.gz:6: column 2: node id 20 is out of range", "20 nodes"}},
    {"non-numeric id", T_CSV_EDGE, 7, "3,x", false, 0, 0, S_NONE, NULL,
     {"edge.csv.gz:7: column 2: \"x\" is not a non-negative integer"}},
    {"float id", T_CSV_EDGE, 8, "3.0,4", false, 0, 0, S_NONE, NULL,
     {"edge.csv.gz:8: column 1: \"3.0\" is not a non-negative integer"}},
    {"space-separated edge", T_CSV_EDGE, 2, "3 4", false, 0, 0, S_NONE, NULL,
     {"edge.csv.gz:2: column 1: \"3 4\" is not a non-negative integer"}},
    {"blank edge line", T_CSV_EDGE, 9, "", false, 0, 0, S_NONE, NULL, {"edge.csv.gz:9: column 1"}},
    {"num-edge-list says one more", 0, 0, NULL, false, 0, 1, S_NONE, NULL,
     {"edge.csv.gz:40: ends after 40 edges, but num-edge-list.csv.gz says 41"}},
    {"num-edge-list says one fewer", 0, 0, NULL, false, 0, -1, S_NONE, NULL,
     {"edge.csv.gz:40: more edges than num-edge-list.csv.gz's count of 39"}},
    {"no edge.csv.gz", 0, 0, NULL, false, 0, 0, S_RM, "edge.csv.gz",
     {"raw: holds neither data.npz nor edge.csv.gz", "No such file"}},
    {"truncated edge.csv.gz", 0, 0, NULL, false, 0, 0, S_TRUNC, "edge.csv.gz",
     {"raw/edge.csv.gz: damaged gzip data after line"}},
    /* node-label.csv.gz (20 lines) */
    {"label 2.5", T_CSV_LABEL, 5, "2.5", false, 0, 0, S_NONE, NULL,
     {"node-label.csv.gz:5: label 2.5 is not a class number"}},
    {"label -2", T_CSV_LABEL, 6, "-2", false, 0, 0, S_NONE, NULL,
     {"node-label.csv.gz:6: label -2 is not a class number"}},
    {"label inf", T_CSV_LABEL, 2, "inf", false, 0, 0, S_NONE, NULL,
     {"node-label.csv.gz:2: label inf is not a class number"}},
    {"label text", T_CSV_LABEL, 7, "cat", false, 0, 0, S_NONE, NULL,
     {"node-label.csv.gz:7: \"cat\" is not a number"}},
    {"two labels on a line", T_CSV_LABEL, 8, "1,0", false, 0, 0, S_NONE, NULL,
     {"node-label.csv.gz:8: 2 columns", "multi-label"}},
    {"a label too many", T_CSV_LABEL, 21, "1", false, 0, 0, S_NONE, NULL,
     {"node-label.csv.gz:21: more labels than num-node-list.csv.gz's count of 20"}},
    {"no node-label.csv.gz", 0, 0, NULL, false, 0, 0, S_RM, "node-label.csv.gz",
     {"raw/node-label.csv.gz: cannot open", "No such file"}},
    /* num-node-list.csv.gz */
    {"num-node-list says one more", 0, 0, NULL, false, 1, 0, S_NONE, NULL,
     {"node-label.csv.gz:20: ends after 20 labels, but num-node-list.csv.gz says 21"}},
    {"num-node-list says one fewer", 0, 0, NULL, false, -1, 0, S_NONE, NULL,
     {"node-label.csv.gz:20: more labels than num-node-list.csv.gz's count of 19"}},
    {"num-node-list far beyond node-feat", T_CSV_NUM_NODES, 1, "1000000000000", false, 0, 0, S_NONE, NULL,
     {"num-node-list.csv.gz says 1000000000000 nodes", "node-feat.csv.gz", "cannot hold more than"}},
    {"num-node-list of two graphs", T_CSV_NUM_NODES, 2, "20", false, 0, 0, S_NONE, NULL,
     {"num-node-list.csv.gz:2: a second line"}},
    {"num-node-list not a number", T_CSV_NUM_NODES, 1, "twenty", false, 0, 0, S_NONE, NULL,
     {"num-node-list.csv.gz:1: \"twenty\" is not a node count"}},
    {"num-node-list zero", T_CSV_NUM_NODES, 1, "0", false, 0, 0, S_NONE, NULL,
     {"num-node-list.csv.gz: zero nodes"}},
    {"no num-node-list.csv.gz", 0, 0, NULL, false, 0, 0, S_RM, "num-node-list.csv.gz",
     {"raw/num-node-list.csv.gz: cannot open", "No such file"}},
    {"empty num-edge-list.csv.gz", 0, 0, NULL, false, 0, 0, S_EMPTY, "num-edge-list.csv.gz",
     {"raw/num-edge-list.csv.gz: empty"}},
    {"no num-edge-list.csv.gz", 0, 0, NULL, false, 0, 0, S_RM, "num-edge-list.csv.gz",
     {"raw/num-edge-list.csv.gz: cannot open", "No such file"}},
};

static void apply(const struct bad *b, const char *raw, const struct t_fix *x)
{
    struct t_wopt o = {.numnodes_delta = b->dn, .numedges_delta = b->de};
    if (b->line) {
        o.edit_file = b->file;
        o.edit_line = b->line;
        o.edit_text = b->del ? NULL : b->text;
    }
    t_ogb_write_csv(raw, x, &o);
    char p[4300];
    snprintf(p, sizeof p, "%s/raw/%s", raw, b->name ? b->name : "");
    switch (b->sp) {
    case S_RM:
        assert_int_equal(unlink(p), 0);
        break;
    case S_EMPTY:
        t_gz_write(p, "");
        break;
    case S_TRUNC: {
        /* cut inside the deflate data, well before the gzip trailer */
        size_t len;
        unsigned char *z = t_slurp(p, &len);
        assert_true(len > 40);
        t_write(p, z, len / 2);
        free(z);
        break;
    }
    default:
        break;
    }
}

static void test_bad_input(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200];
    t_scratch(dir, sizeof dir, "ogbcsv-bad");
    struct t_fix x;
    t_fix_gen(&x, 20, 40, 3, 5);
    for (size_t i = 0; i < SL_ARRAY_LEN(bads); i++) {
        const struct bad *b = &bads[i];
        snprintf(raw, sizeof raw, "%s/raw%zu", dir, i);
        snprintf(out, sizeof out, "%s/out%zu", dir, i);
        apply(b, raw, &x);
        int rc = t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out);
        if (rc != 2)
            fail_msg("case '%s': exit %d, expected 2\n%s", b->what, rc, outbuf);
        for (int k = 0; k < 3 && b->want[k]; k++)
            if (!strstr(outbuf, b->want[k]))
                fail_msg("case '%s': the message lacks \"%s\":\n%s", b->what, b->want[k], outbuf);
        t_assert_no_output(out);
    }
    t_fix_free(&x);
    t_rmrf(dir);
}

/* Labels the splits need: a split node whose label line says nan. */
static void test_unlabelled_split_node(void **state)
{
    (void)state;
    setup_bin();
    char dir[4096], raw[4200], out[4200], want[128];
    t_scratch(dir, sizeof dir, "ogbcsv-unl");
    struct t_fix x;
    t_fix_gen(&x, 20, 40, 3, 5);
    uint64_t v = x.split[0][0]; /* a training node */
    struct t_wopt o = {.edit_file = T_CSV_LABEL, .edit_line = v + 1, .edit_text = "nan"};
    snprintf(raw, sizeof raw, "%s/raw", dir);
    snprintf(out, sizeof out, "%s/out", dir);
    t_ogb_write_csv(raw, &x, &o);
    assert_int_equal(t_run(outbuf, sizeof outbuf, "'%s' import-ogb '%s' '%s'", gnnprep, raw, out), 2);
    snprintf(want, sizeof want, "node %llu of the train split has no label", (unsigned long long)v);
    if (!strstr(outbuf, want) || !strstr(outbuf, "raw/node-label.csv.gz"))
        fail_msg("the message lacks \"%s\" or node-label.csv.gz:\n%s", want, outbuf);
    t_assert_no_output(out);
    t_fix_free(&x);
    t_rmrf(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),  cmocka_unit_test(test_same_as_npz),
        cmocka_unit_test(test_mem_limit),  cmocka_unit_test(test_layout),
        cmocka_unit_test(test_bad_input),  cmocka_unit_test(test_unlabelled_split_node),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
