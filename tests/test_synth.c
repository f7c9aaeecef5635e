/* test_synth.c - `gnnprep synth`: flags, failure cleanup, determinism,
 * CSC structure, the graph's statistics (heavy tails, homophily, neighbours
 * that carry information), feature dtypes and strides, and the metadata.
 * Runs the built gnnprep ($SLUICE_BIN) on small graphs and reads the files
 * back directly. */
#include "t_util.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>

#include "core/dataset.h"
#include "core/util.h"

/* ---- helpers ---- */

/* Runs `gnnprep synth OUT ARGS`; output (stdout+stderr) into out. */
static int synth_run(char *out, size_t outlen, const char *dir, const char *args)
{
    char bin[4096];
    t_bin(bin, sizeof bin, "gnnprep");
    return t_run(out, outlen, "'%s' synth '%s' %s", bin, dir, args);
}

/* True if dir's parent holds a staging directory of dir (".NAME.partial-*"). */
static int has_partial(const char *parent, const char *name)
{
    char prefix[512];
    snprintf(prefix, sizeof prefix, ".%s.partial-", name);
    DIR *d = opendir(parent);
    assert_non_null(d);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)))
            found = 1;
    closedir(d);
    return found;
}

typedef struct ds {
    struct dataset_meta m;
    uint64_t *indptr;   /* (N+1) */
    uint32_t *indices;  /* (E) */
    unsigned char *feat;
    int32_t *labels;    /* (N) */
    uint32_t *split[3]; /* train, val, test */
    size_t feat_len;
} ds;

static void *load_file(const char *dir, const struct dataset_file *f, size_t *len)
{
    char path[4096], err[512];
    char *buf = NULL;
    size_t n = 0;
    assert_int_equal(sl_path_join(path, sizeof path, dir, f->file), 0);
    int rc = sl_read_file(path, (size_t)1 << 31, &buf, &n, err, sizeof err);
    if (rc)
        fail_msg("%s", err);
    assert_int_equal(n, f->bytes);
    if (len)
        *len = n;
    return buf;
}

static void ds_load(ds *d, const char *dir)
{
    char err[1024];
    memset(d, 0, sizeof *d);
    int rc = dataset_meta_read(dir, &d->m, true, err, sizeof err);
    if (rc)
        fail_msg("dataset_meta_read(%s): %s", dir, err);
    d->indptr = load_file(dir, &d->m.f[DATASET_INDPTR], NULL);
    d->indices = load_file(dir, &d->m.f[DATASET_INDICES], NULL);
    d->feat = load_file(dir, &d->m.f[DATASET_FEATURES], &d->feat_len);
    d->labels = load_file(dir, &d->m.f[DATASET_LABELS], NULL);
    for (int i = 0; i < 3; i++)
        d->split[i] = load_file(dir, &d->m.f[DATASET_TRAIN + i], NULL);
}

static void ds_free(ds *d)
{
    free(d->indptr);
    free(d->indices);
    free(d->feat);
    free(d->labels);
    for (int i = 0; i < 3; i++)
        free(d->split[i]);
}

/* Makes a dataset in a fresh scratch dir; fails the test on a non-zero exit. */
static void make(char *dir, size_t len, const char *name, const char *args)
{
    char scratch[4096], out[8192];
    t_scratch(scratch, sizeof scratch, name);
    snprintf(dir, len, "%s/ds", scratch);
    int rc = synth_run(out, sizeof out, dir, args);
    if (rc != 0)
        fail_msg("gnnprep synth %s exited %d:\n%s", args, rc, out);
}

/* Removes the scratch directory that make() created for dir. */
static void unmake(const char *dir)
{
    char parent[4200];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    assert_non_null(slash);
    *slash = '\0';
    t_rmrf(parent);
}

static float feat_at(const ds *d, uint64_t v, uint64_t j)
{
    const struct dataset_file *f = &d->m.f[DATASET_FEATURES];
    const unsigned char *row = d->feat + v * f->row_stride;
    if (f->dtype == DTYPE_F32) {
        float x;
        memcpy(&x, row + j * 4, 4);
        return x;
    }
    uint16_t h;
    memcpy(&h, row + j * 2, 2);
    return half_to_f32(h);
}

/* Checks every invariant of the CSC topology, labels and splits. */
static void check_structure(const ds *d, double train, double val, double test)
{
    const uint64_t n = d->m.nodes, e = d->m.edges;
    assert_int_equal(d->indptr[0], 0);
    assert_int_equal(d->indptr[n], e);
    for (uint64_t v = 0; v < n; v++) {
        assert_true(d->indptr[v] <= d->indptr[v + 1]);
        for (uint64_t k = d->indptr[v]; k < d->indptr[v + 1]; k++) {
            uint32_t u = d->indices[k];
            assert_true(u < n);
            if (u == v)
                fail_msg("self loop at node %" PRIu64, v);
            if (k > d->indptr[v] && d->indices[k - 1] >= u)
                fail_msg("node %" PRIu64 ": in-neighbours not strictly ascending at %" PRIu64, v, k);
        }
    }
    for (uint64_t v = 0; v < n; v++)
        assert_true(d->labels[v] >= 0 && (uint32_t)d->labels[v] < d->m.classes);
    /* splits: exact sizes, sorted ascending, disjoint */
    const double frac[3] = {train, val, test};
    unsigned char *seen = calloc(n, 1);
    for (int i = 0; i < 3; i++) {
        uint64_t rows = d->m.f[DATASET_TRAIN + i].rows;
        assert_int_equal(rows, (uint64_t)llround(frac[i] * (double)n));
        for (uint64_t k = 0; k < rows; k++) {
            uint32_t v = d->split[i][k];
            assert_true(v < n);
            assert_true(k == 0 || d->split[i][k - 1] < v);
            assert_int_equal(seen[v], 0);
            seen[v] = 1;
        }
    }
    free(seen);
}

static uint64_t max_in_degree(const ds *d)
{
    uint64_t mx = 0;
    for (uint64_t v = 0; v < d->m.nodes; v++)
        mx = SL_MAX(mx, d->indptr[v + 1] - d->indptr[v]);
    return mx;
}

static double edge_homophily(const ds *d)
{
    uint64_t same = 0;
    for (uint64_t v = 0; v < d->m.nodes; v++)
        for (uint64_t k = d->indptr[v]; k < d->indptr[v + 1]; k++)
            same += d->labels[d->indices[k]] == d->labels[v];
    return (double)same / (double)d->m.edges;
}

/* ---- flags and failure paths ---- */

static void test_help(void **state)
{
    (void)state;
    char bin[4096], out[16384];
    t_bin(bin, sizeof bin, "gnnprep");
    assert_int_equal(t_run(out, sizeof out, "'%s' synth --help", bin), 0);
    assert_non_null(strstr(out, "--homophily"));
    assert_non_null(strstr(out, "default 0.80"));
    assert_non_null(strstr(out, "--feature-noise"));
    assert_non_null(strstr(out, "--train-frac"));
}

static void test_bad_flags(void **state)
{
    (void)state;
    static const struct {
        const char *args, *names;
    } cases[] = {
        {"", "--nodes"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8", "--classes"},
        {"--nodes abc --avg-degree 5 --feat-dim 8 --classes 2", "--nodes"},
        {"--nodes 0 --avg-degree 5 --feat-dim 8 --classes 2", "--nodes"},
        {"--nodes -5 --avg-degree 5 --feat-dim 8 --classes 2", "--nodes"},
        {"--nodes 10x --avg-degree 5 --feat-dim 8 --classes 2", "--nodes"},
        {"--avg-degree 5 --feat-dim 8 --classes 2 --nodes", "--nodes"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --bogus 1", "--bogus"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 0", "--classes"},
        {"--nodes 100 --avg-degree 5 --feat-dim 0 --classes 2", "--feat-dim"},
        {"--nodes 100 --avg-degree 5 --feat-dim 100M --classes 2", "--feat-dim"},
        {"--nodes 100 --avg-degree 100 --feat-dim 8 --classes 2", "--avg-degree"},
        {"--nodes 100 --avg-degree 99.5 --feat-dim 8 --classes 2", "--avg-degree"},
        {"--nodes 100 --avg-degree 0 --feat-dim 8 --classes 2", "--avg-degree"},
        {"--nodes 100 --avg-degree -3 --feat-dim 8 --classes 2", "--avg-degree"},
        {"--nodes 100 --avg-degree many --feat-dim 8 --classes 2", "--avg-degree"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --homophily 1.5", "--homophily"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --homophily high", "--homophily"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --feature-noise -1", "--feature-noise"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --train-frac 1.2", "--train-frac"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --val-frac -0.1", "--val-frac"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --train-frac 0.6 --val-frac 0.3 --test-frac 0.2",
         "--test-frac"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --dtype f64", "--dtype"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --seed -1", "--seed"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --threads 0", "--threads"},
        {"--nodes 100 --nodes 200 --avg-degree 5 --feat-dim 8 --classes 2", "--nodes"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 extra", "extra"},
        {"--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2 --seed", "--seed"},
    };
    char scratch[4096], dir[4200], out[8192];
    t_scratch(scratch, sizeof scratch, "synth-flags");
    snprintf(dir, sizeof dir, "%s/ds", scratch);
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        int rc = synth_run(out, sizeof out, dir, cases[i].args);
        char *nl = strchr(out, '\n');
        if (rc != 2 || !strstr(out, cases[i].names) || !nl || nl[1] != '\0' || strncmp(out, "gnnprep synth: ", 15))
            fail_msg("case %zu (%s): exit %d, want 2 and one line naming %s; got:\n%s", i, cases[i].args, rc,
                     cases[i].names, out);
        assert_false(t_exists(dir));
        assert_false(has_partial(scratch, "ds"));
    }
    t_rmrf(scratch);
}

static void test_out_exists(void **state)
{
    (void)state;
    char scratch[4096], dir[4200], keep[4300], out[8192];
    t_scratch(scratch, sizeof scratch, "synth-exists");
    snprintf(dir, sizeof dir, "%s/ds", scratch);
    snprintf(keep, sizeof keep, "%s/keep", dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    FILE *f = fopen(keep, "w");
    assert_non_null(f);
    fclose(f);
    int rc = synth_run(out, sizeof out, dir, "--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2");
    assert_int_equal(rc, 2);
    assert_non_null(strstr(out, "already exists"));
    assert_true(t_exists(keep));
    assert_false(has_partial(scratch, "ds"));
    /* a missing parent directory is bad input too */
    snprintf(dir, sizeof dir, "%s/no/such/ds", scratch);
    assert_int_equal(synth_run(out, sizeof out, dir, "--nodes 100 --avg-degree 5 --feat-dim 8 --classes 2"), 2);
    t_rmrf(scratch);
}

/* A write error (here a file-size limit, as a full disk would give) exits 1
 * and removes the staging directory. */
static void test_io_error(void **state)
{
    (void)state;
    char scratch[4096], dir[4200], bin[4096], out[8192];
    t_scratch(scratch, sizeof scratch, "synth-io");
    snprintf(dir, sizeof dir, "%s/ds", scratch);
    t_bin(bin, sizeof bin, "gnnprep");
    int rc = t_run(out, sizeof out, "ulimit -f 400; '%s' synth '%s' --nodes 20000 --avg-degree 10 --feat-dim 64 --classes 4",
                   bin, dir);
    if (rc != 1)
        fail_msg("exit %d, want 1:\n%s", rc, out);
    assert_non_null(strstr(out, ".bin"));
    assert_false(t_exists(dir));
    assert_false(has_partial(scratch, "ds"));
    t_rmrf(scratch);
}

/* ---- determinism ---- */

static void test_determinism(void **state)
{
    (void)state;
    const char *base = "--nodes 30000 --avg-degree 12 --feat-dim 20 --classes 6";
    char a1[4200], a2[4200], a3[4200], b[4200], args[512];
    snprintf(args, sizeof args, "%s --seed 7 --threads 1", base);
    make(a1, sizeof a1, "synth-det1", args);
    snprintf(args, sizeof args, "%s --seed 7 --threads 2", base);
    make(a2, sizeof a2, "synth-det2", args);
    snprintf(args, sizeof args, "%s --seed 7 --threads 5 --dtype f32", base);
    make(a3, sizeof a3, "synth-det3", args);
    snprintf(args, sizeof args, "%s --seed 8", base);
    make(b, sizeof b, "synth-det4", args);
    struct dataset_meta m1, m2, m3, mb;
    char err[1024];
    assert_int_equal(dataset_meta_read(a1, &m1, true, err, sizeof err), 0);
    assert_int_equal(dataset_meta_read(a2, &m2, true, err, sizeof err), 0);
    assert_int_equal(dataset_meta_read(a3, &m3, true, err, sizeof err), 0);
    assert_int_equal(dataset_meta_read(b, &mb, true, err, sizeof err), 0);
    for (int i = 0; i < DATASET_FILES; i++) {
        assert_int_equal(m1.f[i].xxh3, m2.f[i].xxh3);
        assert_int_equal(m1.f[i].xxh3, m3.f[i].xxh3);
        assert_int_equal(m1.f[i].bytes, m2.f[i].bytes);
    }
    for (int i = DATASET_INDICES; i <= DATASET_TEST; i++)
        if (m1.f[i].xxh3 == mb.f[i].xxh3)
            fail_msg("%s is the same for seeds 7 and 8", dataset_file_key[i]);
    /* the recorded checksum is the file's */
    char path[4300];
    uint64_t h = 0, bytes = 0;
    snprintf(path, sizeof path, "%s/features.bin", a1);
    assert_int_equal(file_xxh3(path, &h, &bytes, err, sizeof err), 0);
    assert_int_equal(h, m1.f[DATASET_FEATURES].xxh3);
    assert_int_equal(bytes, m1.f[DATASET_FEATURES].bytes);
    unmake(a1);
    unmake(a2);
    unmake(a3);
    unmake(b);
}

/* ---- structure ---- */

static void test_structure(void **state)
{
    (void)state;
    static const struct {
        const char *args;
        double d;
    } cases[] = {
        {"--nodes 5000 --avg-degree 12 --feat-dim 16 --classes 5 --seed 3", 12},
        /* dense: degrees near N-1 exhaust classes and take the fallback */
        {"--nodes 30 --avg-degree 25 --feat-dim 4 --classes 3 --seed 4", 25},
        {"--nodes 2 --avg-degree 1 --feat-dim 1 --classes 1", 1},
        {"--nodes 1k --avg-degree 2.5 --feat-dim 3 --classes 40 --homophily 0 --seed 9", 2.5},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        char dir[4200];
        make(dir, sizeof dir, "synth-struct", cases[i].args);
        ds d;
        ds_load(&d, dir);
        check_structure(&d, 0.10, 0.05, 0.05);
        double mean = (double)d.m.edges / (double)d.m.nodes;
        if (fabs(mean - cases[i].d) > 0.12 * cases[i].d)
            fail_msg("%s: mean in-degree %.2f, want about %.2f", cases[i].args, mean, cases[i].d);
        ds_free(&d);
        unmake(dir);
    }
    char dir[4200];
    make(dir, sizeof dir, "synth-struct", "--nodes 4000 --avg-degree 8 --feat-dim 8 --classes 4 "
                                          "--train-frac 0.5 --val-frac 0.25 --test-frac 0.25");
    ds d;
    ds_load(&d, dir);
    check_structure(&d, 0.5, 0.25, 0.25);
    ds_free(&d);
    unmake(dir);
}

/* ---- graph statistics ---- */

static void test_heavy_tail(void **state)
{
    (void)state;
    char dir[4200];
    make(dir, sizeof dir, "synth-tail", "--nodes 200k --avg-degree 10 --feat-dim 4 --classes 8 --seed 11");
    ds d;
    ds_load(&d, dir);
    const uint64_t n = d.m.nodes;
    double mean = (double)d.m.edges / (double)n;
    assert_true(fabs(mean - 10.0) < 0.5);
    uint32_t *outdeg = calloc(n, sizeof *outdeg);
    uint64_t *hist = calloc(n, sizeof *hist);
    uint64_t big = 0;
    for (uint64_t v = 0; v < n; v++) {
        uint64_t k = d.indptr[v + 1] - d.indptr[v];
        hist[k]++;
        big += k >= 5 * mean;
        for (uint64_t e = d.indptr[v]; e < d.indptr[v + 1]; e++)
            outdeg[d.indices[e]]++;
    }
    uint64_t max_in = max_in_degree(&d), max_out = 0, big_out = 0;
    for (uint64_t v = 0; v < n; v++) {
        max_out = SL_MAX(max_out, outdeg[v]);
        big_out += outdeg[v] >= 5 * mean;
    }
    uint64_t acc = 0, median = 0;
    while ((acc += hist[median]) < n / 2)
        median++;
    print_message("heavy tail: mean %.2f median %" PRIu64 " max_in %" PRIu64 " max_out %" PRIu64
                  " in>=5x %" PRIu64 " out>=5x %" PRIu64 "\n", mean, median, max_in, max_out, big, big_out);
    /* A Poisson or uniform graph of this mean has max degree ~ 25 and no
     * node at 5x the mean; a power law has hubs and a fat tail. */
    assert_true((double)max_in > 50 * mean);
    assert_true((double)max_out > 20 * mean);
    assert_true(big > n / 100);
    assert_true(big_out > n / 200);
    assert_true((double)median < mean);
    free(outdeg);
    free(hist);
    ds_free(&d);
    unmake(dir);
}

static void test_homophily(void **state)
{
    (void)state;
    static const double hs[] = {0.8, 0.3, 1.0, 0.0};
    for (size_t i = 0; i < SL_ARRAY_LEN(hs); i++) {
        char dir[4200], args[256];
        snprintf(args, sizeof args, "--nodes 50k --avg-degree 10 --feat-dim 2 --classes 8 --homophily %.2f", hs[i]);
        make(dir, sizeof dir, "synth-homo", args);
        ds d;
        ds_load(&d, dir);
        double h = edge_homophily(&d);
        print_message("homophily %.2f: measured %.4f\n", hs[i], h);
        if (fabs(h - hs[i]) > 0.02)
            fail_msg("--homophily %.2f gave edge homophily %.4f", hs[i], h);
        ds_free(&d);
        unmake(dir);
    }
}

/* Nearest-centroid classification (class means fitted on the train split,
 * scored on every other node) from a node's own features, and from its own
 * features together with the mean of its in-neighbours' features (each part
 * weighted by the inverse of its within-class variance, as a linear model
 * would learn). On the defaults the second must be clearly better: the
 * property that makes a GNN beat a feature-only model. */
static void test_informative_neighbours(void **state)
{
    (void)state;
    char dir[4200];
    make(dir, sizeof dir, "synth-info", "--nodes 20000 --avg-degree 20 --feat-dim 64 --classes 16 --seed 5");
    ds d;
    ds_load(&d, dir);
    const uint64_t n = d.m.nodes, F = d.m.feat_dim, C = d.m.classes, D2 = 2 * F;
    double *rep = calloc(n * D2, sizeof *rep); /* (n, 2F): own | neighbour mean */
    for (uint64_t v = 0; v < n; v++) {
        uint64_t k = d.indptr[v + 1] - d.indptr[v];
        for (uint64_t j = 0; j < F; j++)
            rep[v * D2 + j] = feat_at(&d, v, j);
        for (uint64_t e = d.indptr[v]; e < d.indptr[v + 1]; e++)
            for (uint64_t j = 0; j < F; j++)
                rep[v * D2 + F + j] += feat_at(&d, d.indices[e], j) / (double)k;
    }
    unsigned char *train = calloc(n, 1);
    for (uint64_t i = 0; i < d.m.f[DATASET_TRAIN].rows; i++)
        train[d.split[0][i]] = 1;
    double *mu = calloc(C * D2, sizeof *mu), *cnt = calloc(C, sizeof *cnt);
    for (uint64_t v = 0; v < n; v++)
        if (train[v]) {
            cnt[d.labels[v]]++;
            for (uint64_t j = 0; j < D2; j++)
                mu[d.labels[v] * D2 + j] += rep[v * D2 + j];
        }
    for (uint64_t c = 0; c < C; c++)
        for (uint64_t j = 0; j < D2; j++)
            mu[c * D2 + j] /= SL_MAX(cnt[c], 1.0);
    double var[2] = {0, 0};
    for (uint64_t v = 0; v < n; v++)
        if (train[v])
            for (uint64_t j = 0; j < D2; j++) {
                double t = rep[v * D2 + j] - mu[d.labels[v] * D2 + j];
                var[j >= F] += t * t;
            }
    uint64_t ok_own = 0, ok_both = 0, total = 0;
    for (uint64_t v = 0; v < n; v++) {
        if (train[v])
            continue;
        double best_own = INFINITY, best_both = INFINITY;
        int32_t c_own = -1, c_both = -1;
        for (uint64_t c = 0; c < C; c++) {
            double s[2] = {0, 0};
            for (uint64_t j = 0; j < D2; j++) {
                double t = rep[v * D2 + j] - mu[c * D2 + j];
                s[j >= F] += t * t;
            }
            double both = s[0] / var[0] + s[1] / var[1];
            if (s[0] < best_own) {
                best_own = s[0];
                c_own = (int32_t)c;
            }
            if (both < best_both) {
                best_both = both;
                c_both = (int32_t)c;
            }
        }
        ok_own += c_own == d.labels[v];
        ok_both += c_both == d.labels[v];
        total++;
    }
    double acc_own = (double)ok_own / (double)total, acc_both = (double)ok_both / (double)total;
    print_message("nearest centroid: own features %.3f, own + neighbour mean %.3f (chance %.3f)\n", acc_own,
                  acc_both, 1.0 / (double)C);
    assert_true(acc_own > 3.0 / (double)C); /* features carry signal */
    assert_true(acc_own < 0.75);             /* but not all of it */
    assert_true(acc_both > acc_own + 0.2);   /* neighbours add what they lack */
    free(rep);
    free(train);
    free(mu);
    free(cnt);
    ds_free(&d);
    unmake(dir);
}

/* ---- features ---- */

static void test_f16_matches_f32(void **state)
{
    (void)state;
    const char *base = "--nodes 3000 --avg-degree 6 --feat-dim 100 --classes 7 --seed 2 --feature-noise 2";
    char a[4200], b[4200], args[512];
    snprintf(args, sizeof args, "%s --dtype f32", base);
    make(a, sizeof a, "synth-f32", args);
    snprintf(args, sizeof args, "%s --dtype f16", base);
    make(b, sizeof b, "synth-f16", args);
    ds x, y;
    ds_load(&x, a);
    ds_load(&y, b);
    for (int i = 0; i < DATASET_FILES; i++)
        if (i != DATASET_FEATURES)
            assert_int_equal(x.m.f[i].xxh3, y.m.f[i].xxh3);
    assert_int_equal(y.m.f[DATASET_FEATURES].dtype, DTYPE_F16);
    const uint64_t F = x.m.feat_dim;
    const uint64_t sx = x.m.f[DATASET_FEATURES].row_stride, sy = y.m.f[DATASET_FEATURES].row_stride;
    for (uint64_t v = 0; v < x.m.nodes; v++)
        for (uint64_t j = 0; j < F; j++) {
            float f;
            uint16_t h;
            memcpy(&f, x.feat + v * sx + j * 4, 4);
            memcpy(&h, y.feat + v * sy + j * 2, 2);
            if (h != half_from_f32(f))
                fail_msg("node %" PRIu64 " dim %" PRIu64 ": f16 %04x, f32 %g rounds to %04x", v, j, h, (double)f,
                         half_from_f32(f));
        }
    ds_free(&x);
    ds_free(&y);
    unmake(a);
    unmake(b);
}

/* Row strides follow dataset_row_stride for awkward dimensions, padding is
 * zero, the file is padded to DATASET_FEAT_PAD, and values look like
 * centroid + noise (per-dimension spread about the noise level). */
static void test_strides(void **state)
{
    (void)state;
    static const uint64_t dims[] = {3, 100, 128, 768};
    static const char *const dts[] = {"f32", "f16"};
    for (size_t i = 0; i < SL_ARRAY_LEN(dims); i++)
        for (size_t t = 0; t < 2; t++) {
            char dir[4200], args[256];
            snprintf(args, sizeof args, "--nodes 300 --avg-degree 4 --feat-dim %" PRIu64 " --classes 3 --dtype %s",
                     dims[i], dts[t]);
            make(dir, sizeof dir, "synth-stride", args);
            ds d;
            ds_load(&d, dir);
            const struct dataset_file *f = &d.m.f[DATASET_FEATURES];
            uint64_t esz = t == 0 ? 4 : 2, rb = dims[i] * esz;
            uint64_t stride = dataset_row_stride(rb, DATASET_FEAT_ALIGN);
            if (f->row_stride != stride || d.m.feat_align != DATASET_FEAT_ALIGN)
                fail_msg("%s: row_stride %" PRIu64 ", want %" PRIu64, args, f->row_stride, stride);
            assert_int_equal(f->bytes, sl_round_up(300 * stride, DATASET_FEAT_PAD));
            double ss = 0;
            for (uint64_t v = 0; v < 300; v++) {
                for (uint64_t b = rb; b < stride; b++)
                    assert_int_equal(d.feat[v * stride + b], 0);
                for (uint64_t j = 0; j < dims[i]; j++)
                    ss += (double)feat_at(&d, v, j) * feat_at(&d, v, j);
            }
            for (uint64_t b = 300 * stride; b < f->bytes; b++)
                assert_int_equal(d.feat[b], 0);
            /* E[x^2] per value = 0.6^2 (noise) + 1/F (unit centroid) */
            double msq = ss / (300.0 * (double)dims[i]), want = 0.36 + 1.0 / (double)dims[i];
            if (fabs(msq - want) > 0.15 * want)
                fail_msg("%s: mean square %.4f, want about %.4f", args, msq, want);
            ds_free(&d);
            unmake(dir);
        }
}

/* ---- metadata and summary ---- */

static void test_meta_and_summary(void **state)
{
    (void)state;
    char scratch[4096], dir[4200], out[8192], bin[4096];
    t_scratch(scratch, sizeof scratch, "synth-meta");
    snprintf(dir, sizeof dir, "%s/ds", scratch);
    int rc = synth_run(out, sizeof out, dir, "--nodes 10k --avg-degree 7 --feat-dim 24 --classes 4 --seed 13");
    if (rc)
        fail_msg("exit %d:\n%s", rc, out);
    ds d;
    ds_load(&d, dir);
    assert_int_equal(d.m.version, DATASET_VERSION);
    assert_int_equal(d.m.nodes, 10000);
    assert_int_equal(d.m.feat_dim, 24);
    assert_int_equal(d.m.classes, 4);
    assert_int_equal(d.m.feat_align, DATASET_FEAT_ALIGN);
    assert_non_null(strstr(d.m.source, "gnnprep synth"));
    assert_non_null(strstr(d.m.source, "--nodes 10k"));
    for (int i = 0; i < DATASET_FILES; i++)
        assert_true(d.m.f[i].present);
    assert_int_equal(d.m.f[DATASET_INDICES].dtype, DTYPE_U32);
    /* the summary's numbers are the dataset's */
    char want[128];
    snprintf(want, sizeof want, " edges=%" PRIu64 " ", d.m.edges);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, " max_in_degree=%" PRIu64 " ", max_in_degree(&d));
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "peak_rss="));
    ds_free(&d);
    /* and gnnprep check accepts it */
    t_bin(bin, sizeof bin, "gnnprep");
    rc = t_run(out, sizeof out, "'%s' check '%s'", bin, dir);
    if (rc)
        fail_msg("gnnprep check exited %d:\n%s", rc, out);
    t_rmrf(scratch);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_help),
        cmocka_unit_test(test_bad_flags),
        cmocka_unit_test(test_out_exists),
        cmocka_unit_test(test_io_error),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_structure),
        cmocka_unit_test(test_heavy_tail),
        cmocka_unit_test(test_homophily),
        cmocka_unit_test(test_informative_neighbours),
        cmocka_unit_test(test_f16_matches_f32),
        cmocka_unit_test(test_strides),
        cmocka_unit_test(test_meta_and_summary),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
