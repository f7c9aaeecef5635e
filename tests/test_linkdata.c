/* test_linkdata.c - link-prediction datasets (core/linkdata.h): `gnnprep
 * synth --task link` (deterministic, triples in range and unique, the
 * planted structure there and its MRR recomputed here from the triples
 * alone), `gnnprep import --triples` from text (names numbered by first
 * appearance, gzip, spaces) and from .npy, `gnnprep check` and `info` on
 * them, and the refusals: damaged files and metadata, bad input files,
 * bad flags, a dictionary over --mem-limit, each dataset kind where the
 * other is needed (gnnlaunch included), nothing left at OUT. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>

#include "t_util.h"
#include "t_imp.h"
#include "core/dataset.h"
#include "core/linkdata.h"
#include "core/util.h"

static char g_dir[4096], g_prep[4096];
static char out[1 << 16];

/* All triples of a split as u64 (malloc'd, 3 per triple). */
static uint64_t *load_split(const char *dir, const struct link_meta *m, int s)
{
    char p[4300];
    snprintf(p, sizeof p, "%s/%s", dir, m->split[s].file);
    size_t len;
    unsigned char *raw = t_slurp(p, &len);
    assert_int_equal(len, m->split[s].bytes);
    uint64_t n = m->split[s].rows * 3, *v = malloc((n + 1) * sizeof *v);
    assert_non_null(v);
    for (uint64_t i = 0; i < n; i++) {
        if (m->split[s].dtype == DTYPE_U32) {
            uint32_t x;
            memcpy(&x, raw + i * 4, 4);
            v[i] = x;
        } else {
            memcpy(&v[i], raw + i * 8, 8);
        }
    }
    free(raw);
    return v;
}

static int cmp_tri(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    for (int i = 0; i < 3; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? -1 : 1;
    return 0;
}

static void meta(const char *dir, struct link_meta *m)
{
    char err[1024];
    int rc = link_meta_read(dir, m, true, err, sizeof err);
    if (rc)
        fail_msg("link_meta_read %s: %s", dir, err);
}

/* ---- synth ------------------------------------------------------------------------------ */

static uint64_t find(uint64_t *p, uint64_t x)
{
    while (p[x] != x)
        x = p[x] = p[p[x]];
    return x;
}

static double harm(uint64_t n)
{
    double s = 0;
    for (uint64_t i = 1; i <= n; i++)
        s += 1.0 / (double)i;
    return s;
}

static void test_synth(void **state)
{
    (void)state;
    const uint64_t N = 2000, R = 8, M = 10;
    char a[4200], b[4200], c[4200];
    snprintf(a, sizeof a, "%s/kg-a", g_dir);
    snprintf(b, sizeof b, "%s/kg-b", g_dir);
    snprintf(c, sizeof c, "%s/kg-c", g_dir);
    const char *args = "--task link --nodes 2000 --relations 8 --avg-degree 10.5 --cluster-size 10";
    assert_int_equal(t_run(out, sizeof out, "%s synth %s %s --seed 3", g_prep, a, args), 0);
    assert_int_equal(t_run(out, sizeof out, "%s synth %s %s --seed 3", g_prep, b, args), 0);
    assert_int_equal(t_run(out, sizeof out, "%s synth %s %s --seed 4", g_prep, c, args), 0);
    assert_non_null(strstr(out, "planted_mrr="));
    struct link_meta ma, mb, mc;
    meta(a, &ma);
    meta(b, &mb);
    meta(c, &mc);
    assert_int_equal(ma.nodes, N);
    assert_int_equal(ma.relations, R);
    assert_true(link_meta_identity(&ma) == link_meta_identity(&mb)); /* same seed, same bytes */
    for (int s = 0; s < LINK_SPLITS; s++)
        assert_true(ma.split[s].xxh3 == mb.split[s].xxh3);
    assert_true(link_meta_identity(&ma) != link_meta_identity(&mc));
    assert_int_equal(t_run(out, sizeof out, "%s check %s", g_prep, a), 0);
    assert_int_equal(t_run(out, sizeof out, "%s info %s", g_prep, a), 0);
    assert_non_null(strstr(out, "planted MRR  0."));

    /* every triple: ids in range, no self loop, no repeat across splits;
     * each head heads 10 or 11 triples, fewer only by repeats dropped */
    uint64_t total = 0;
    for (int s = 0; s < LINK_SPLITS; s++)
        total += ma.split[s].rows;
    uint64_t *all = malloc(total * 3 * sizeof *all), at = 0;
    uint64_t *heads = calloc(N, sizeof *heads);
    for (int s = 0; s < LINK_SPLITS; s++) {
        uint64_t *v = load_split(a, &ma, s);
        memcpy(all + at * 3, v, ma.split[s].rows * 24);
        at += ma.split[s].rows;
        free(v);
    }
    for (uint64_t i = 0; i < total; i++) {
        uint64_t *t = all + i * 3;
        assert_true(t[0] < N && t[1] < R && t[2] < N);
        assert_true(t[0] != t[2]);
        heads[t[0]]++;
    }
    for (uint64_t v = 0; v < N; v++)
        assert_true(heads[v] >= 5 && heads[v] <= 11);
    assert_true(total >= 19 * N / 2 && total <= 21 * N / 2);
    double test_share = (double)ma.split[LINK_TEST].rows / (double)total;
    assert_true(test_share > 0.04 && test_share < 0.06);
    qsort(all, total, 24, cmp_tri);
    for (uint64_t i = 1; i < total; i++)
        assert_true(cmp_tri(all + (i - 1) * 3, all + i * 3) < 0);

    /* The planted structure, found from the triples alone: the tails of one
     * (head, relation) lie in one cluster, and so do the heads whose
     * relation-r tails lie in one cluster; joining both until nothing
     * changes recovers the clusters (each of M nodes). Relation r then maps
     * a cluster to one cluster, and the planted MRR is recomputed from
     * those clusters. */
    uint64_t *p = malloc(N * sizeof *p), *head_of = malloc(N * R * sizeof *head_of);
    for (uint64_t v = 0; v < N; v++)
        p[v] = v;
    for (int round = 0; round < 20; round++) {
        uint64_t joined = 0;
        for (uint64_t i = 1; i < total; i++) { /* sorted: a (head, relation)'s tails are adjacent */
            uint64_t *x = all + (i - 1) * 3, *y = all + i * 3, rx, ry;
            if (x[0] == y[0] && x[1] == y[1] && (rx = find(p, x[2])) != (ry = find(p, y[2])))
                p[rx] = ry, joined++;
        }
        /* and the heads whose relation-r tails lie in one cluster share one */
        for (uint64_t i = 0; i < N * R; i++)
            head_of[i] = UINT64_MAX;
        for (uint64_t i = 0; i < total; i++) {
            uint64_t *t = all + i * 3, *slot = &head_of[find(p, t[2]) * R + t[1]], ra, rb;
            if (*slot == UINT64_MAX)
                *slot = t[0];
            else if ((ra = find(p, *slot)) != (rb = find(p, t[0])))
                p[ra] = rb, joined++;
        }
        if (!joined)
            break;
    }
    free(head_of);
    uint64_t *size = calloc(N, sizeof *size), comps = 0;
    for (uint64_t v = 0; v < N; v++)
        size[find(p, v)]++;
    for (uint64_t v = 0; v < N; v++)
        if (size[v]) {
            comps++;
            assert_int_equal(size[v], M);
        }
    assert_int_equal(comps, N / M);
    uint64_t *map = malloc(N * R * sizeof *map); /* (cluster root, relation) -> target root */
    for (uint64_t i = 0; i < N * R; i++)
        map[i] = UINT64_MAX;
    for (uint64_t i = 0; i < total; i++) {
        uint64_t *t = all + i * 3, from = find(p, t[0]), to = find(p, t[2]);
        uint64_t *slot = &map[from * R + t[1]];
        assert_true(*slot == UINT64_MAX || *slot == to); /* one target cluster per relation */
        *slot = to;
        /* an involution: the relation maps the target back */
        uint64_t back = map[to * R + t[1]];
        assert_true(back == UINT64_MAX || back == from);
    }
    uint64_t *test = load_split(a, &ma, LINK_TEST);
    double sum = 0;
    for (uint64_t i = 0; i < ma.split[LINK_TEST].rows; i++) {
        uint64_t h = test[i * 3], r = test[i * 3 + 1], t = test[i * 3 + 2], target = map[find(p, h) * R + r];
        assert_int_equal(target, find(p, t));
        uint64_t others = 0; /* other known tails of (h, r), all in the target cluster */
        for (uint64_t j = 0; j < total; j++)
            others += all[j * 3] == h && all[j * 3 + 1] == r && all[j * 3 + 2] != t;
        sum += harm(M - others) / (double)(M - others);
    }
    double mrr = sum / (double)ma.split[LINK_TEST].rows;
    if (fabs(mrr - ma.planted_mrr) > 1e-5)
        fail_msg("planted_mrr %.6f recorded, %.6f recomputed", ma.planted_mrr, mrr);
    assert_true(mrr > 20 * harm(N) / (double)N); /* far above chance */
    free(test);
    free(map);
    free(size);
    free(p);
    free(heads);
    free(all);
    t_rmrf(a);
    t_rmrf(b);
    t_rmrf(c);
}

static void test_synth_refusals(void **state)
{
    (void)state;
    char o[4200];
    snprintf(o, sizeof o, "%s/kg-bad", g_dir);
    static const struct {
        const char *args, *msg;
    } bad[] = {
        {"--task link --relations 4 --avg-degree 5", "--task link needs --nodes"},
        {"--task link --nodes 100 --avg-degree 5", "needs --relations"},
        {"--task link --nodes 100 --relations 4 --avg-degree 0", "--avg-degree"},
        {"--task link --nodes 100 --relations 4 --avg-degree 5 --cluster-size 200", "larger than --nodes"},
        {"--task link --nodes 100 --relations 4 --avg-degree 5 --valid-frac 0.5 --test-frac 0.5", "no training"},
        {"--task link --nodes 100 --relations 4 --avg-degree 5 --noise 2", "--noise"},
        {"--task link --nodes 100 --relations 4 --avg-degree 5 --feat-dim 3", "unknown argument '--feat-dim'"},
        {"--task edges --nodes 100", "--task 'edges' is not node or link"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        int rc = t_run(out, sizeof out, "%s synth %s %s", g_prep, o, bad[i].args);
        if (rc != 2 || !strstr(out, bad[i].msg))
            fail_msg("synth %s: exit %d, wanted 2 and '%s':\n%s", bad[i].args, rc, bad[i].msg, out);
        t_assert_no_output(o);
    }
    /* --task node is the node-classification generator */
    assert_int_equal(t_run(out, sizeof out, "%s synth %s --task node --nodes 50 --avg-degree 3 --feat-dim 4 --classes 2",
                           g_prep, o),
                     0);
    struct dataset_meta dm;
    char err[1024];
    assert_int_equal(dataset_meta_read(o, &dm, true, err, sizeof err), 0);
    t_rmrf(o);
}

/* ---- import ----------------------------------------------------------------------------- */

static void write_text(const char *path, const char *text)
{
    t_write(path, text, strlen(text));
}

static void test_import_text(void **state)
{
    (void)state;
    char tr[4200], va[4200], te[4200], o[4200], p[4300];
    snprintf(tr, sizeof tr, "%s/train.txt", g_dir);
    snprintf(va, sizeof va, "%s/valid.txt.gz", g_dir);
    snprintf(te, sizeof te, "%s/test.tsv", g_dir);
    snprintf(o, sizeof o, "%s/kg-text", g_dir);
    /* tabs (a name with a space inside), a line split at spaces, an empty
     * line, CRLF, no newline at the end */
    write_text(tr, "/m/a\tlikes\t/m/b\n/m/b\tlikes\tNew York\r\n\n/m/a  knows   /m/c\nNew York\tknows\t/m/a");
    t_gz_write(va, "/m/c\tlikes\t/m/a\n");
    write_text(te, "/m/d\tlocated in\tNew York\n/m/b\tknows\t/m/c\n");
    assert_int_equal(t_run(out, sizeof out, "%s import %s --triples %s --valid %s --test %s", g_prep, o, tr, va, te), 0);
    assert_non_null(strstr(out, "1 entities appear only in the validation or test triples"));
    struct link_meta m;
    meta(o, &m);
    assert_int_equal(m.nodes, 5);
    assert_int_equal(m.relations, 3);
    assert_true(m.names[LINK_ENTITY_NAMES].present && m.names[LINK_RELATION_NAMES].present);
    /* ids by first appearance: /m/a 0, /m/b 1, New York 2, /m/c 3, /m/d 4;
     * likes 0, knows 1, located in 2 */
    static const uint64_t want_train[] = {0, 0, 1, 1, 0, 2, 0, 1, 3, 2, 1, 0};
    static const uint64_t want_valid[] = {3, 0, 0};
    static const uint64_t want_test[] = {4, 2, 2, 1, 1, 3};
    const uint64_t *want[] = {want_train, want_valid, want_test};
    const uint64_t rows[] = {4, 1, 2};
    for (int s = 0; s < LINK_SPLITS; s++) {
        assert_int_equal(m.split[s].rows, rows[s]);
        uint64_t *v = load_split(o, &m, s);
        assert_memory_equal(v, want[s], rows[s] * 24);
        free(v);
    }
    size_t len;
    snprintf(p, sizeof p, "%s/entities.txt", o);
    char *names = (char *)t_slurp(p, &len);
    assert_string_equal(names, "/m/a\n/m/b\nNew York\n/m/c\n/m/d\n");
    free(names);
    snprintf(p, sizeof p, "%s/relations.txt", o);
    names = (char *)t_slurp(p, &len);
    assert_string_equal(names, "likes\nknows\nlocated in\n");
    free(names);
    assert_int_equal(t_run(out, sizeof out, "%s check %s", g_prep, o), 0);
    assert_int_equal(t_run(out, sizeof out, "%s info %s", g_prep, o), 0);
    assert_non_null(strstr(out, "nodes        5 (named)"));

    /* a repeated name in entities.txt is found by the check */
    snprintf(p, sizeof p, "%s/entities.txt", o);
    write_text(p, "/m/a\n/m/b\nNew York\n/m/b\n/m/d\n"); /* same size */
    assert_int_equal(t_run(out, sizeof out, "%s check %s", g_prep, o), 2);
    assert_non_null(strstr(out, "lines 2 and 4 hold the same name '/m/b'"));
    t_rmrf(o);
}

static void test_import_npy(void **state)
{
    (void)state;
    char tr[4200], va[4200], te[4200], o[4200], o2[4200];
    snprintf(tr, sizeof tr, "%s/train.npy", g_dir);
    snprintf(va, sizeof va, "%s/valid.npy", g_dir);
    snprintf(te, sizeof te, "%s/test.npy", g_dir);
    snprintf(o, sizeof o, "%s/kg-npy", g_dir);
    snprintf(o2, sizeof o2, "%s/kg-npy2", g_dir);
    const int64_t train[] = {0, 1, 2, 2, 0, 5, 7, 1, 1};
    const int32_t valid[] = {5, 0, 7};
    t_npy_write(tr, "<i8", "(3, 3)", train, sizeof train);
    t_npy_write(va, "<i4", "(1, 3)", valid, sizeof valid);
    t_npy_write(te, "<i4", "(0, 3)", NULL, 0);
    assert_int_equal(t_run(out, sizeof out, "%s import %s --triples %s --valid %s --test %s", g_prep, o, tr, va, te), 0);
    struct link_meta m;
    meta(o, &m);
    assert_int_equal(m.nodes, 8);
    assert_int_equal(m.relations, 2);
    assert_false(m.names[0].present);
    assert_int_equal(m.split[LINK_TEST].rows, 0);
    uint64_t *v = load_split(o, &m, LINK_TRAIN);
    for (int i = 0; i < 9; i++)
        assert_int_equal(v[i], (uint64_t)train[i]);
    free(v);
    assert_int_equal(t_run(out, sizeof out, "%s check %s", g_prep, o), 0);
    /* larger counts by flag; smaller ones refused */
    assert_int_equal(t_run(out, sizeof out, "%s import %s --triples %s --valid %s --test %s --nodes 100 --relations 9",
                           g_prep, o2, tr, va, te),
                     0);
    meta(o2, &m);
    assert_int_equal(m.nodes, 100);
    assert_int_equal(m.relations, 9);
    t_rmrf(o2);
    assert_int_equal(t_run(out, sizeof out, "%s import %s --triples %s --valid %s --test %s --nodes 5", g_prep, o2, tr,
                           va, te),
                     2);
    assert_non_null(strstr(out, "--nodes 5 but the triples name node 7"));
    t_assert_no_output(o2);

    /* a damaged triple file: the check names the triple; a changed byte
     * that keeps ids in range is caught by the checksum */
    char p[4300];
    snprintf(p, sizeof p, "%s/train.bin", o);
    size_t len;
    unsigned char *raw = t_slurp(p, &len);
    raw[4 * 4] = 200; /* triple 1's relation */
    t_write(p, raw, len);
    assert_int_equal(t_run(out, sizeof out, "%s check %s", g_prep, o), 2);
    assert_non_null(strstr(out, "triple 1 has relation 200, but the dataset has 2 relations"));
    raw[4 * 4] = 1;
    t_write(p, raw, len);
    assert_int_equal(t_run(out, sizeof out, "%s check %s", g_prep, o), 2);
    assert_non_null(strstr(out, "XXH3-64 is"));
    free(raw);
    t_rmrf(o);
}

static void test_import_refusals(void **state)
{
    (void)state;
    char d[4200], o[4200];
    snprintf(d, sizeof d, "%s/bad", g_dir);
    snprintf(o, sizeof o, "%s/kg-refused", g_dir);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cd %s && printf 'a\\tr\\tb\\n' > ok.txt && : > empty.txt && "
                              "printf 'a\\tr\\tb\\nc\\td\\n' > two.txt && printf 'a\\t\\tb\\n' > hole.txt",
             d, d);
    assert_int_equal(system(cmd), 0);
    char p[4300];
    snprintf(p, sizeof p, "%s/f.npy", d);
    const float fl[] = {0, 1, 2};
    t_npy_write(p, "<f4", "(1, 3)", fl, sizeof fl);
    snprintf(p, sizeof p, "%s/neg.npy", d);
    const int32_t neg[] = {0, -1, 2};
    t_npy_write(p, "<i4", "(1, 3)", neg, sizeof neg);
    snprintf(p, sizeof p, "%s/wide.npy", d);
    const int32_t wide[] = {0, 1, 2, 3};
    t_npy_write(p, "<i4", "(1, 4)", wide, sizeof wide);
    static const struct {
        const char *args, *msg;
    } bad[] = {
        {"--triples ok.txt --valid empty.txt", "--test is missing"},
        {"--triples two.txt --valid empty.txt --test empty.txt", "two.txt:2: 2 fields, expected 3"},
        {"--triples hole.txt --valid empty.txt --test empty.txt", "hole.txt:1: field 2 is empty"},
        {"--triples empty.txt --valid ok.txt --test empty.txt", "empty.txt: no triple; there is nothing to train on"},
        {"--triples missing.txt --valid empty.txt --test empty.txt", "missing.txt"},
        {"--triples ok.txt --valid f.npy --test empty.txt", "all be .npy or all be text"},
        {"--triples f.npy --valid f.npy --test f.npy", "a float32 array of shape (1, 3)"},
        {"--triples neg.npy --valid neg.npy --test neg.npy", "triple 0 has relation -1"},
        {"--triples wide.npy --valid wide.npy --test wide.npy", "shape (1, 4)"},
        {"--triples ok.txt --valid empty.txt --test empty.txt --nodes 4", "--nodes and --relations are for .npy"},
        {"--triples ok.txt --valid empty.txt --test empty.txt --mem-limit 1", "--mem-limit"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(bad); i++) {
        int rc = t_run(out, sizeof out, "cd %s && %s import %s %s", d, g_prep, o, bad[i].args);
        if (rc != 2 || !strstr(out, bad[i].msg))
            fail_msg("import %s: exit %d, wanted 2 and '%s':\n%s", bad[i].args, rc, bad[i].msg, out);
        t_assert_no_output(o);
    }
    /* names beyond --mem-limit: 70,000 distinct names of 20 bytes and more */
    snprintf(p, sizeof p, "%s/many.txt", d);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    for (int i = 0; i < 35000; i++)
        fprintf(f, "entity-number-%08d\tr\tother-entity-%08d\n", i, i);
    fclose(f);
    int rc = t_run(out, sizeof out, "cd %s && %s import %s --triples many.txt --valid empty.txt --test empty.txt "
                   "--mem-limit 1M", d, g_prep, o);
    if (rc != 2 || !strstr(out, "raise --mem-limit"))
        fail_msg("import over --mem-limit: exit %d:\n%s", rc, out);
    t_assert_no_output(o);
    assert_int_equal(t_run(out, sizeof out, "cd %s && %s import %s --triples many.txt --valid empty.txt --test empty.txt",
                           d, g_prep, o),
                     0);
    struct link_meta m;
    meta(o, &m);
    assert_int_equal(m.nodes, 70000);
    t_rmrf(o);
    t_rmrf(d);
}

/* ---- each kind where the other is needed ------------------------------------------------- */

static void test_kinds(void **state)
{
    (void)state;
    char kg[4200], nc[4200], cfg[4300], err[2048];
    snprintf(kg, sizeof kg, "%s/kg-kind", g_dir);
    snprintf(nc, sizeof nc, "%s/nc-kind", g_dir);
    assert_int_equal(
        t_run(out, sizeof out, "%s synth %s --task link --nodes 100 --relations 2 --avg-degree 4", g_prep, kg), 0);
    assert_int_equal(
        t_run(out, sizeof out, "%s synth %s --nodes 100 --avg-degree 4 --feat-dim 4 --classes 2", g_prep, nc), 0);
    struct dataset_meta dm;
    struct link_meta lm;
    assert_int_equal(dataset_meta_read(kg, &dm, true, err, sizeof err), -EMEDIUMTYPE);
    assert_non_null(strstr(err, "a link-prediction dataset"));
    assert_int_equal(link_meta_read(nc, &lm, true, err, sizeof err), -EMEDIUMTYPE);
    assert_non_null(strstr(err, "a node-classification dataset"));
    assert_true(link_is_link_dataset(kg));
    assert_false(link_is_link_dataset(nc));

    /* gnnlaunch refuses a link dataset before it starts anything */
    snprintf(cfg, sizeof cfg, "%s/kind.toml", g_dir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f, "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"sage\"\nhidden = 8\nfanouts = [2]\n\n[train]\nepochs = 1\n",
            kg);
    fclose(f);
    char launch[4096];
    t_bin(launch, sizeof launch, "gnnlaunch");
    int rc = t_run(out, sizeof out, "%s --cpu %s", launch, cfg);
    if (rc != 2 || !strstr(out, "a link-prediction dataset"))
        fail_msg("gnnlaunch on a link dataset: exit %d:\n%s", rc, out);

    /* metadata: an unknown key, a wrong size, a missing table */
    char p[4300], text[8192];
    snprintf(p, sizeof p, "%s/dataset.toml", kg);
    size_t len;
    char *orig = (char *)t_slurp(p, &len);
    static const struct {
        const char *from, *to, *msg;
    } edits[] = {
        {"relations = 2\n", "relations = 2\nrelation = 2\n", "unknown key relation"},
        {"[valid]", "[valid_]", "unknown key valid_"},
        {"planted_mrr = ", "planted_mrr = 3", "planted_mrr must be a number in [0, 1]"},
        {"shape = [", "shape = [1", "bytes"},
        {"dtype = \"u32\"", "dtype = \"u64\"", ""},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(edits); i++) {
        const char *at = strstr(orig, edits[i].from);
        assert_non_null(at);
        snprintf(text, sizeof text, "%.*s%s%s", (int)(at - orig), orig, edits[i].to, at + strlen(edits[i].from));
        t_write(p, text, strlen(text));
        rc = link_meta_read(kg, &lm, true, err, sizeof err);
        if (rc != -EINVAL || !strstr(err, edits[i].msg))
            fail_msg("dataset.toml with '%s': %d %s", edits[i].to, rc, err);
    }
    t_write(p, orig, len);
    assert_int_equal(link_meta_read(kg, &lm, true, err, sizeof err), 0);
    free(orig);
    t_rmrf(kg);
    t_rmrf(nc);
}

int main(void)
{
    t_scratch(g_dir, sizeof g_dir, "linkdata");
    t_bin(g_prep, sizeof g_prep, "gnnprep");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_synth),      cmocka_unit_test(test_synth_refusals), cmocka_unit_test(test_import_text),
        cmocka_unit_test(test_import_npy), cmocka_unit_test(test_import_refusals), cmocka_unit_test(test_kinds),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (rc == 0)
        t_rmrf(g_dir);
    return rc;
}
