/* test_predict.c - gnnlaunch --predict (docs/inference.md) with the real
 * stages: its accuracies equal the training run's evaluation of the same
 * checkpoint (full neighbourhoods, so sampling cannot differ); the files
 * hold what they say (shapes, ascending ids, argmax); a GCN with the
 * graph's degrees reproduces a full-graph GCN computed here in double
 * from the dataset files and the checkpoint; bad input is refused before
 * anything is written, and a failed prediction leaves nothing behind. */
#include "t_util.h"

#include <dirent.h>
#include <inttypes.h>
#include <math.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ops/ckpt.h"
#include "t_launch.h"

static char g_ds[1200], g_cfg[1200], g_gcn[1200], g_stages[1300];

static void write_config(const char *path, const char *kind, const char *extra)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"%s\"\nhidden = 32\nfanouts = [-1, -1]\ndropout = 0.2\n%s\n"
            "[train]\nbatch_size = 64\nepochs = 2\nlr = 0.01\nseed = 5\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 8\nstaging_mb = 4\nio_depth = 16\n"
            "ordered = true\n",
            g_ds, kind, extra ? extra : "");
    fclose(f);
}

static void run(struct t_proc *r, const char *const *args, int want)
{
    const char *argv[24] = {"--cpu"};
    int a = 1;
    for (int i = 0; args[i] && a < 23; i++)
        argv[a++] = args[i];
    t_launch_run(r, (const char *[]){g_stages, NULL}, argv, 240);
    t_expect_code(r, want);
    t_expect_clean(r);
}

/* The value after "key=" in line, or NAN. */
static double field(const char *line, const char *key)
{
    char pat[32];
    snprintf(pat, sizeof pat, "%s=", key);
    const char *at = strstr(line, pat);
    return at ? strtod(at + strlen(pat), NULL) : NAN;
}

/* A .npy this run wrote: its data (after 128 header bytes), rows, cols. */
static void *npy(const char *dir, const char *name, uint64_t *rows, uint64_t *cols)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        fail_msg("%s is missing", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    rewind(f);
    char *buf = malloc((size_t)size);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    fclose(f);
    assert_memory_equal(buf, "\x93NUMPY\x01\x00", 8);
    const char *s = strstr(buf + 10, "'shape': (");
    assert_non_null(s);
    unsigned long long r = 0, c = 0;
    int got = sscanf(s + 10, "%llu, %llu)", &r, &c);
    *rows = r;
    *cols = got == 2 ? c : 1;
    void *data = malloc((size_t)size - 128 + 1);
    memcpy(data, buf + 128, (size_t)size - 128);
    free(buf);
    return data;
}

static bool exists(const char *p)
{
    return access(p, F_OK) == 0;
}

/* No ".NAME.partial-*" directory is left in dir. */
static void expect_no_partial(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strstr(de->d_name, ".partial-"))
            fail_msg("%s/%s was left behind", dir, de->d_name);
    closedir(d);
}

static void test_predict_matches_training(void **state)
{
    (void)state;
    char ck[1300], set[1400], path[1400], out[1300], line[512];
    snprintf(ck, sizeof ck, "%s/ck-sage", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc r;
    run(&r, (const char *[]){g_cfg, "--set", set, NULL}, 0);
    assert_true(t_last_line(&r, "test_acc=", line, sizeof line));
    double test = field(line, "test_acc"), val = field(line, "val_acc");
    assert_int_equal(ckpt_path(path, sizeof path, ck, 2), 0);
    /* the test split: the training run's last evaluation, to the printed digit */
    snprintf(out, sizeof out, "%s/pred-test", t_ldir);
    run(&r, (const char *[]){"--predict", path, g_cfg, "--split", "test", "--out", out, NULL}, 0);
    assert_true(t_last_line(&r, "test_acc=", line, sizeof line));
    if (fabs(field(line, "test_acc") - test) > 1e-9 || !strstr(line, "nodes=800 "))
        fail_msg("--predict --split test: '%s', the training run's test_acc=%.4f", line, test);
    /* every node */
    snprintf(out, sizeof out, "%s/pred-all", t_ldir);
    run(&r, (const char *[]){"--predict", path, g_cfg, "--out", out, NULL}, 0);
    assert_true(t_last_line(&r, "train_acc=", line, sizeof line));
    if (fabs(field(line, "val_acc") - val) > 1e-9 || fabs(field(line, "test_acc") - test) > 1e-9 ||
        !strstr(line, "nodes=4000 "))
        fail_msg("--predict: '%s', the training run's val_acc=%.4f test_acc=%.4f", line, val, test);
    uint64_t n, c, ln, lc, en, ec, pn, pc;
    int64_t *nodes = npy(out, "nodes.npy", &n, &c);
    float *logits = npy(out, "logits.npy", &ln, &lc);
    float *emb = npy(out, "embeddings.npy", &en, &ec);
    int64_t *pred = npy(out, "pred.npy", &pn, &pc);
    assert_true(n == 4000 && ln == 4000 && lc == 4 && en == 4000 && ec == 32 && pn == 4000);
    bool nonzero = false;
    for (uint64_t i = 0; i < n; i++) {
        assert_true(nodes[i] == (int64_t)i);
        uint32_t best = 0;
        for (uint32_t k = 1; k < 4; k++)
            if (logits[i * 4 + k] > logits[i * 4 + best])
                best = k;
        assert_true(pred[i] == best);
        for (uint32_t k = 0; k < 32; k++) {
            assert_true(isfinite(emb[i * 32 + k]) && emb[i * 32 + k] >= 0); /* after ReLU */
            nonzero |= emb[i * 32 + k] > 0;
        }
    }
    assert_true(nonzero);
    free(nodes), free(logits), free(emb), free(pred);
    snprintf(path, sizeof path, "%s/accuracy.json", out);
    assert_true(exists(path));
    expect_no_partial(t_ldir);
    /* --exact (layer-wise, chunks of 100 nodes so that most neighbours lie
     * outside the chunk): the same accuracies, logits and embeddings to
     * float rounding, and nothing but the outputs left in the directory */
    char exact[1300];
    snprintf(exact, sizeof exact, "%s/pred-exact", t_ldir);
    assert_int_equal(ckpt_path(path, sizeof path, ck, 2), 0);
    t_launch_run(&r, (const char *[]){g_stages, "SLUICE_INFER_CHUNK=100", NULL},
                 (const char *[]){"--cpu", "--predict", path, g_cfg, "--exact", "--out", exact, NULL}, 240);
    t_expect_code(&r, 0);
    assert_true(t_last_line(&r, "train_acc=", line, sizeof line));
    if (fabs(field(line, "val_acc") - val) > 1e-9 || fabs(field(line, "test_acc") - test) > 1e-9)
        fail_msg("--exact: '%s', the training run's val_acc=%.4f test_acc=%.4f", line, val, test);
    const char *names[] = {"logits.npy", "embeddings.npy"};
    for (int k = 0; k < 2; k++) {
        uint64_t r1, c1, r2, c2;
        float *a = npy(out, names[k], &r1, &c1), *b = npy(exact, names[k], &r2, &c2);
        assert_true(r1 == r2 && c1 == c2);
        for (uint64_t i = 0; i < r1 * c1; i++)
            if (fabs(a[i] - b[i]) > 1e-5 * (1 + fabs(a[i])))
                fail_msg("--exact %s element %" PRIu64 ": %g, sampled with every neighbour %g", names[k], i, b[i], a[i]);
        free(a), free(b);
    }
    DIR *d = opendir(exact);
    assert_non_null(d);
    int files = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        files += de->d_name[0] != '.';
    closedir(d);
    assert_int_equal(files, 5); /* nodes, logits, embeddings, pred, accuracy.json: no layer table left */
}

/* Reads dataset file k of g_ds whole. */
static void *ds_file(const struct dataset_meta *m, int k)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", g_ds, m->f[k].file);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    void *p = malloc(m->f[k].bytes + 1);
    assert_int_equal(fread(p, 1, m->f[k].bytes, f), m->f[k].bytes);
    fclose(f);
    return p;
}

static uint64_t id_at(const void *a, enum dtype t, uint64_t i)
{
    return t == DTYPE_U64 ? ((const uint64_t *)a)[i] : ((const uint32_t *)a)[i];
}

/* GCN with the graph's degrees and every neighbour is PyG's GCNConv on
 * the whole graph: its logits, computed here in double from the dataset
 * files and the checkpoint, equal the prediction's to float rounding. */
static void test_gcn_full_graph(void **state)
{
    (void)state;
    char ck[1300], set[1400], path[1400], out[1300], err[512];
    snprintf(ck, sizeof ck, "%s/ck-gcn", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc r;
    run(&r, (const char *[]){g_gcn, "--set", set, NULL}, 0);
    assert_int_equal(ckpt_path(path, sizeof path, ck, 2), 0);
    snprintf(out, sizeof out, "%s/pred-gcn", t_ldir);
    run(&r, (const char *[]){"--predict", path, g_gcn, "--out", out, NULL}, 0);
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(g_ds, &m, true, err, sizeof err), 0);
    const void *indptr = ds_file(&m, DATASET_INDPTR), *indices = ds_file(&m, DATASET_INDICES);
    const unsigned char *feat = ds_file(&m, DATASET_FEATURES);
    enum dtype tp = m.f[DATASET_INDPTR].dtype, ti = m.f[DATASET_INDICES].dtype;
    assert_int_equal(m.f[DATASET_FEATURES].dtype, DTYPE_F32);
    uint64_t N = m.nodes, F = m.f[DATASET_FEATURES].cols, stride = m.f[DATASET_FEATURES].row_stride;
    struct ckpt c;
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), 0);
    const float *w0 = ckpt_find(&c, "layers.0.weight", "F32", NULL, NULL), *b0 = ckpt_find(&c, "layers.0.bias", "F32", NULL, NULL);
    const float *w1 = ckpt_find(&c, "layers.1.weight", "F32", NULL, NULL), *b1 = ckpt_find(&c, "layers.1.bias", "F32", NULL, NULL);
    assert_true(w0 && b0 && w1 && b1);
    const uint64_t H = 32, C = 4;
    double *x = calloc(N * F, sizeof *x), *agg = calloc(N * F, sizeof *agg), *h = calloc(N * H, sizeof *h),
           *agg2 = calloc(N * H, sizeof *agg2), *deg = calloc(N, sizeof *deg);
    for (uint64_t v = 0; v < N; v++) {
        deg[v] = 1.0 + (double)(id_at(indptr, tp, v + 1) - id_at(indptr, tp, v)); /* in-degree + self loop */
        for (uint64_t k = 0; k < F; k++)
            x[v * F + k] = ((const float *)(feat + v * stride))[k];
    }
    /* layer 0: aggregate (self loop included), product, bias, ReLU */
    for (uint64_t v = 0; v < N; v++) {
        for (uint64_t e = id_at(indptr, tp, v); e <= id_at(indptr, tp, v + 1); e++) {
            uint64_t u = e == id_at(indptr, tp, v + 1) ? v : id_at(indices, ti, e);
            double wgt = 1.0 / sqrt(deg[v] * deg[u]);
            for (uint64_t k = 0; k < F; k++)
                agg[v * F + k] += wgt * x[u * F + k];
        }
        for (uint64_t o = 0; o < H; o++) {
            double s = b0[o];
            for (uint64_t k = 0; k < F; k++)
                s += agg[v * F + k] * w0[o * F + k];
            h[v * H + o] = s > 0 ? s : 0;
        }
    }
    uint64_t ln, lc;
    float *logits = npy(out, "logits.npy", &ln, &lc);
    assert_true(ln == N && lc == C);
    double worst = 0;
    for (uint64_t v = 0; v < N; v++) {
        for (uint64_t e = id_at(indptr, tp, v); e <= id_at(indptr, tp, v + 1); e++) {
            uint64_t u = e == id_at(indptr, tp, v + 1) ? v : id_at(indices, ti, e);
            double wgt = 1.0 / sqrt(deg[v] * deg[u]);
            for (uint64_t k = 0; k < H; k++)
                agg2[v * H + k] += wgt * h[u * H + k];
        }
        for (uint64_t o = 0; o < C; o++) {
            double s = b1[o];
            for (uint64_t k = 0; k < H; k++)
                s += agg2[v * H + k] * w1[o * H + k];
            worst = fmax(worst, fabs(s - logits[v * C + o]) / (1.0 + fabs(s)));
        }
    }
    if (!(worst < 1e-4))
        fail_msg("the prediction's logits differ from a full-graph GCN by up to %g (relative)", worst);
    /* layer-wise, the same */
    char exact[1300];
    snprintf(exact, sizeof exact, "%s/pred-gcn-exact", t_ldir);
    run(&r, (const char *[]){"--predict", path, g_gcn, "--exact", "--out", exact, NULL}, 0);
    float *ex = npy(exact, "logits.npy", &ln, &lc);
    for (uint64_t i = 0; i < N * C; i++)
        if (fabs(ex[i] - logits[i]) > 1e-5 * (1 + fabs(logits[i])))
            fail_msg("--exact GCN logit %" PRIu64 ": %g, sampled with every neighbour %g", i, ex[i], logits[i]);
    free(ex);
    ckpt_free(&c);
    free(x), free(agg), free(h), free(agg2), free(deg), free(logits);
    free((void *)indptr), free((void *)indices), free((void *)feat);
}

static void test_predict_refusals(void **state)
{
    (void)state;
    char ck[1300], set[1400], path[1400], out[1300], other[1300];
    snprintf(ck, sizeof ck, "%s/ck-sage", t_ldir);
    assert_int_equal(ckpt_path(path, sizeof path, ck, 2), 0);
    if (!exists(path)) { /* the first test made it; alone, make it here */
        snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
        struct t_proc t;
        run(&t, (const char *[]){g_cfg, "--set", set, NULL}, 0);
    }
    snprintf(out, sizeof out, "%s/pred-refused", t_ldir);
    snprintf(other, sizeof other, "%s/pred-all", t_ldir);
    mkdir(other, 0755); /* exists (the first test's, or made here) */
    struct t_proc r;
    const struct {
        const char *args[10];
        const char *msg;
    } cases[] = {
        {{"--predict", path, g_cfg, "--out", other}, "exists; remove it or choose another directory"},
        {{"--predict", path, g_cfg, "--set", "model.hidden=64", "--out", out}, "holds a model with"},
        {{"--predict", "/nonexistent-sluice.safetensors", g_cfg, "--out", out}, "--predict /nonexistent-sluice"},
        {{g_cfg, "--split", "test"}, "--split needs --predict CHECKPOINT"},
        {{"--predict", path, g_cfg, "--resume"}, "--resume belongs to training"},
        {{"--predict", path, g_cfg, "--split", "dev"}, "--split needs all, train, val or test, not 'dev'"},
        {{"--predict", path, g_cfg, "--out", "/nonexistent-sluice/x"}, "directory /nonexistent-sluice does not exist"},
        {{g_cfg, "--exact"}, "--exact needs --predict CHECKPOINT"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        run(&r, cases[i].args, 2);
        t_expect_log(&r, cases[i].msg);
    }
    assert_false(exists(out));
    /* a prediction whose stages fail (a feature row made NaN on the way,
     * under the default on_nonfinite = "fail") leaves no output */
    t_launch_run(&r, (const char *[]){g_stages, "SLUICE_FAULT_NAN_NODE=7", NULL},
                 (const char *[]){"--cpu", "--predict", path, g_cfg, "--out", out, NULL}, 240);
    t_expect_code(&r, 3);
    t_expect_clean(&r);
    assert_false(exists(out));
    expect_no_partial(t_ldir);
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("predict") != 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/sage.toml", t_ldir);
    snprintf(g_gcn, sizeof g_gcn, "%s/gcn.toml", t_ldir);
    t_real_stages(g_stages, sizeof g_stages);
    char prep[1200], outb[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(outb, sizeof outb,
              "%s synth %s --nodes 4000 --avg-degree 8 --feat-dim 16 --classes 4 --homophily 0.9 "
              "--feature-noise 1.0 --train-frac 0.4 --val-frac 0.2 --test-frac 0.2 --seed 11",
              prep, g_ds) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", outb);
        return -1;
    }
    write_config(g_cfg, "sage", NULL);
    write_config(g_gcn, "gcn", "gcn_norm = \"graph\"\n");
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_predict_matches_training, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_gcn_full_graph, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_predict_refusals, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
