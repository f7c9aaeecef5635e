/* test_config.c - configuration loading: defaults, the shipped configs,
 * --set overrides, and errors that point at the right place and suggest
 * the closest key. `test_config --write-reference FILE` regenerates
 * docs/config.md from the schema; test_reference fails if they differ. */
#include <errno.h>

#include "t_util.h"
#include "core/config.h"

static char dir[4096];
static char err[2048];

static const char *write_cfg(const char *name, const char *text)
{
    static char path[4300];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static int setup(void **s)
{
    (void)s;
    t_scratch(dir, sizeof dir, "config");
    return 0;
}
static int teardown(void **s)
{
    (void)s;
    t_rmrf(dir);
    return 0;
}

static void test_shipped(void **state)
{
    (void)state;
    const char *src = getenv("SLUICE_SRC");
    char p[4096];
    struct config c;
    snprintf(p, sizeof p, "%s/configs/papers.toml", src ? src : ".");
    if (config_load(&c, p, NULL, 0, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(c.model.kind, MODEL_SAGE);
    assert_int_equal(c.model.layers, 3);
    assert_int_equal(c.model.hidden, 256);
    assert_int_equal(c.model.n_fanouts, 3);
    assert_int_equal(c.model.fanouts[2], 10);
    assert_int_equal(c.train.batch_size, 1000);
    assert_string_equal(c.dataset.path, "data/papers");
    snprintf(p, sizeof p, "%s/configs/demo.toml", src ? src : ".");
    if (config_load(&c, p, NULL, 0, err, sizeof err))
        fail_msg("%s", err);
    assert_int_equal(c.model.layers, 2); /* from the fanouts */
    assert_int_equal(c.pipeline.io, EXTRACT_IO_DIRECT);
}

static void test_defaults_and_sets(void **state)
{
    (void)state;
    struct config c;
    const char *p = write_cfg("a.toml", "[dataset]\npath = \"d\"\n");
    assert_int_equal(config_load(&c, p, NULL, 0, err, sizeof err), 0);
    assert_int_equal(c.model.layers, 3);
    assert_int_equal(c.model.n_fanouts, 3);
    assert_true(c.train.lr == 0.003);
    assert_false(c.pipeline.ordered);
    const char *sets[] = {"model.fanouts=[15,-1]", "train.lr=0.01", "model.kind=gat", "pipeline.ordered=true",
                          "pipeline.io=mmap", "train.epochs=7", "dataset.path=other dir"};
    assert_int_equal(config_load(&c, p, sets, 7, err, sizeof err), 0);
    assert_int_equal(c.model.layers, 2);
    assert_int_equal(c.model.fanouts[0], 15);
    assert_int_equal(c.model.fanouts[1], -1);
    assert_true(c.train.lr == 0.01);
    assert_int_equal(c.model.kind, MODEL_GAT);
    assert_true(c.pipeline.ordered);
    assert_int_equal(c.pipeline.io, EXTRACT_IO_MMAP);
    assert_int_equal(c.train.epochs, 7);
    assert_string_equal(c.dataset.path, "other dir");
    /* layers alone: every layer samples 10 */
    const char *s2[] = {"model.layers=4"};
    assert_int_equal(config_load(&c, p, s2, 1, err, sizeof err), 0);
    assert_int_equal(c.model.n_fanouts, 4);
    assert_int_equal(c.model.fanouts[3], 10);
    /* integer for a float key is fine; a path with a control character,
     * a quote and a backslash is written escaped and reads back the same */
    const char *s3[] = {"train.lr=1", "dataset.path=\"a\\fb\\\"c\\\\d\\u007F\""};
    if (config_load(&c, p, s3, 2, err, sizeof err))
        fail_msg("%s", err);
    assert_true(c.train.lr == 1.0);
    assert_string_equal(c.dataset.path, "a\fb\"c\\d\x7f");
    /* the effective config written as TOML loads back to the same values */
    char q[4300];
    snprintf(q, sizeof q, "%s/eff.toml", dir);
    FILE *f = fopen(q, "w");
    config_write_toml(&c, f);
    fclose(f);
    struct config d;
    if (config_load(&d, q, NULL, 0, err, sizeof err))
        fail_msg("%s", err);
    /* the values, not which keys were given: the file gives every key */
    assert_true(config_given(&d, "model.gcn_norm") && !config_given(&c, "model.gcn_norm"));
    memcpy(d.given, c.given, sizeof d.given);
    assert_memory_equal(&c, &d, sizeof c);
}

static const struct {
    const char *text;
    const char *set;
    const char *want;
} bad[] = {
    {"[dataset]\npath = \"d\"\n[model]\nfanout = [10]\n", NULL, "c.toml:4:10: unknown key model.fanout; did you mean model.fanouts?"},
    /* what a PyG script calls it */
    {"[dataset]\npath = \"d\"\n[model]\nhidden_channels = 64\n", NULL,
     "c.toml:4:19: unknown key model.hidden_channels; PyG's hidden_channels is model.hidden here"},
    {"[dataset]\npath = \"d\"\n", "train.num_workers=4",
     "unknown key train.num_workers; PyG's num_workers is pipeline.samplers and pipeline.extractors"},
    {"[dataset]\npath = \"d\"\n", "train.learning_rate=0.01", "PyG's learning_rate is train.lr here"},
    {"[modle]\nlayers = 2\n[dataset]\npath=\"d\"\n", NULL, "c.toml:1:1: unknown section [modle]; did you mean [model]?"},
    {"[dataset]\npath = \"d\"\n[model]\nlayers = \"3\"\n", NULL, "c.toml:4:10: model.layers must be an integer, not string"},
    {"[dataset]\npath = \"d\"\n[model]\nlayers = 2.5\n", NULL, "c.toml:4:10: model.layers must be an integer, not float"},
    {"[dataset]\npath = \"d\"\n[model]\nlayers = 0\n", NULL, "model.layers = 0 is outside its range [1, 8]"},
    {"[dataset]\npath = \"d\"\n[model]\nkind = \"grapsage\"\n", NULL, "is not one of \"sage\", \"gcn\", \"gat\", \"mlp\""},
    {"[dataset]\npath = \"d\"\n[model]\nkind = \"gta\"\n", NULL, "did you mean \"gat\"?"},
    {"[dataset]\npath = \"d\"\n[model]\nfanouts = [10, 0]\n", NULL, "c.toml:4:16: model.fanouts[1] must be a positive integer or -1"},
    {"[dataset]\npath = \"d\"\n[model]\nfanouts = []\n", NULL, "model.fanouts must be an array of 1 to 8 integers"},
    {"[dataset]\npath = \"d\"\n[model]\nlayers = 2\nfanouts = [10, 10, 10]\n", NULL, "model.layers = 2 but model.fanouts has 3 entries"},
    {"[dataset]\npath = \"d\"\n[model]\nkind = \"gat\"\nhidden = 10\nheads = 4\n", NULL, "not a multiple of model.heads"},
    {"[model]\nlayers = 2\n", NULL, "dataset.path is required"},
    {"epochs = 3\n[dataset]\npath = \"d\"\n", NULL, "c.toml:1:10: unknown key epochs; did you mean train.epochs?"},
    {"[dataset]\npath = \"d\"\n[train]\nlr = -1.0\n", NULL, "train.lr = -1 is outside its range"},
    {"[dataset]\npath = \"d\"\n[pipeline]\nordered = 1\n", NULL, "pipeline.ordered must be true or false, not integer"},
    {"[dataset]\npath = \"d\"\n[pipeline]\nio.depth = 1\n", NULL, "unknown key pipeline.io"},
    {"[dataset]\npath = \"d\"\n[train]\nlr = 0.1\nlr = 0.2\n", NULL, "c.toml:5:1: duplicate key 'lr' (first defined at line 4)"},
    {"[dataset]\npath = \"d\"\n", "train.lr=abc", "--set train.lr=abc: train.lr must be a number, not string"},
    {"[dataset]\npath = \"d\"\n", "train.epoch=3", "--set train.epoch=3: unknown key train.epoch; did you mean train.epochs?"},
    {"[dataset]\npath = \"d\"\n", "model.fanouts=[10,", "--set model.fanouts=[10,: bad value"},
    {"[dataset]\npath = \"d\"\n", "train.lr", "--set train.lr: expected section.key=value"},
    {"[dataset]\npath = \"d\"\n", "model.layers=9", "model.layers = 9 is outside its range [1, 8]"},
    {"[dataset]\npath = \"d\"\n", "pipeline.cache_policy=belady",
     "pipeline.cache_policy = \"belady\" is not one of \"lru\", \"lookahead\", \"static\", \"lookahead-static\""},
    {"[dataset]\npath = \"d\"\n", "pipeline.cache_policy=lookahed", "did you mean \"lookahead\"?"},
    {"[dataset]\npath = \"d\"\n", "pipeline.lookahead=0", "pipeline.lookahead = 0 is outside its range [1, 4096]"},
    {"[dataset]\npath = \"d\"\n", "pipeline.lookahead=5000", "pipeline.lookahead = 5000 is outside its range [1, 4096]"},
    {"[dataset]\npath = \"d\"\n", "pipeline.hot_fraction=1", "pipeline.hot_fraction = 1 is outside its range [0, 0.95]"},
    {"[dataset]\npath = \"d\"\n[model]\nencoder = \"sage\"\n", NULL,
     "model.encoder = \"sage\" puts a GNN under a link-prediction decoder, so it needs model.kind = \"distmult\" or "
     "\"complex\", not \"sage\""},
    {"[dataset]\npath = \"d\"\n[model]\nkind = \"gcn\"\n", "model.encoder=sage", "not \"gcn\""},
    {"[dataset]\npath = \"d\"\n[model]\nkind = \"distmult\"\nencoder = \"gat\"\n", NULL,
     "model.encoder = \"gat\" is not one of \"none\", \"sage\""},
};

static void test_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *p = write_cfg("c.toml", bad[i].text);
        struct config c;
        const char *sets[] = {bad[i].set};
        err[0] = '\0';
        int rc = config_load(&c, p, sets, bad[i].set ? 1 : 0, err, sizeof err);
        if (rc != -EINVAL || !strstr(err, bad[i].want))
            fail_msg("case %zu: rc %d, want '%s', got '%s'", i, rc, bad[i].want, err);
    }
    struct config c;
    char p[4300];
    snprintf(p, sizeof p, "%s/missing.toml", dir);
    assert_int_equal(config_load(&c, p, NULL, 0, err, sizeof err), -ENOENT);
    assert_non_null(strstr(err, "missing.toml"));
}

static void test_reference(void **state)
{
    (void)state;
    const char *src = getenv("SLUICE_SRC");
    char p[4096], *want = NULL, *have = NULL;
    size_t wl = 0, hl = 0;
    snprintf(p, sizeof p, "%s/docs/config.md", src ? src : ".");
    FILE *f = fopen(p, "r");
    if (!f)
        fail_msg("%s missing: run build/tests/test_config --write-reference docs/config.md", p);
    FILE *m = open_memstream(&want, &wl);
    config_write_reference(m);
    fclose(m);
    m = open_memstream(&have, &hl);
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        fwrite(buf, 1, n, m);
    fclose(m);
    fclose(f);
    if (wl != hl || memcmp(want, have, wl))
        fail_msg("docs/config.md is out of date: run build/tests/test_config --write-reference docs/config.md");
    free(want);
    free(have);
}

/* train.on_nonfinite and pipeline.stall_timeout_s: defaults, values,
 * refusals (issue 17, items 3 and 5). */
static void test_runtime_keys(void **state)
{
    (void)state;
    struct config c;
    const char *p = write_cfg("rt.toml", "[dataset]\npath = \"d\"\n");
    assert_int_equal(config_load(&c, p, NULL, 0, err, sizeof err), 0);
    assert_int_equal(c.train.on_nonfinite, CONFIG_NONFINITE_FAIL);
    assert_true(c.pipeline.stall_timeout_s == 120.0);
    const char *sets[] = {"train.on_nonfinite=skip-batch", "pipeline.stall_timeout_s=2.5"};
    assert_int_equal(config_load(&c, p, sets, 2, err, sizeof err), 0);
    assert_int_equal(c.train.on_nonfinite, CONFIG_NONFINITE_SKIP);
    assert_true(c.pipeline.stall_timeout_s == 2.5);
    const char *bad1[] = {"train.on_nonfinite=skip_batch"};
    assert_int_equal(config_load(&c, p, bad1, 1, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "did you mean \"skip-batch\"?"));
    const char *bad2[] = {"pipeline.stall_timeout_s=-1"};
    assert_int_equal(config_load(&c, p, bad2, 1, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "outside its range"));
}

/* The run identity covers what a run computes and nothing else; a
 * difference is listed key by key (issue 17, item 6). */
static void test_run_identity(void **state)
{
    (void)state;
    struct config a, b;
    const char *p = write_cfg("id.toml", "[dataset]\npath = \"d\"\n[model]\nhidden = 32\n");
    assert_int_equal(config_load(&a, p, NULL, 0, err, sizeof err), 0);
    const char *how[] = {"train.epochs=99", "pipeline.extract_queue=64", "train.checkpoint_dir=\"x\"",
                         "pipeline.stall_timeout_s=5", "dataset.path=\"elsewhere\""};
    assert_int_equal(config_load(&b, p, how, 5, err, sizeof err), 0);
    assert_true(config_run_identity(&a, 7) == config_run_identity(&b, 7));
    assert_true(config_run_identity(&a, 7) != config_run_identity(&a, 8)); /* another dataset */
    const char *what[] = {"model.hidden=64", "train.lr=0.02"};
    assert_int_equal(config_load(&b, p, what, 2, err, sizeof err), 0);
    assert_true(config_run_identity(&a, 7) != config_run_identity(&b, 7));
    char ta[2048], tb[2048], diff[1024];
    config_run_text(&a, ta, sizeof ta);
    config_run_text(&b, tb, sizeof tb);
    assert_non_null(strstr(ta, "train.lr = 0.003\n"));
    assert_int_equal(config_run_diff(ta, tb, diff, sizeof diff), 2);
    assert_string_equal(diff, "model.hidden: 32 -> 64; train.lr: 0.003 -> 0.02");
    assert_int_equal(config_run_diff(ta, ta, diff, sizeof diff), 0);
    /* the partition keys count in the partitions mode only */
    const char *online_parts[] = {"pipeline.buffer_partitions=4", "pipeline.partition_order=\"beta\""};
    assert_int_equal(config_load(&b, p, online_parts, 2, err, sizeof err), 0);
    assert_true(config_run_identity(&a, 7) == config_run_identity(&b, 7));
    const char *packed[] = {"pipeline.mode=\"packed\"", "pipeline.pack=\"somewhere\""};
    assert_int_equal(config_load(&b, p, packed, 2, err, sizeof err), 0);
    assert_true(config_run_identity(&a, 7) == config_run_identity(&b, 7)); /* the same samples as online */
    const char *parts4[] = {"pipeline.mode=\"partitions\"", "pipeline.partitions=32", "pipeline.buffer_partitions=4"};
    const char *parts8[] = {"pipeline.mode=\"partitions\"", "pipeline.partitions=32", "pipeline.buffer_partitions=8"};
    struct config c4, c8;
    assert_int_equal(config_load(&c4, p, parts4, 3, err, sizeof err), 0);
    assert_int_equal(config_load(&c8, p, parts8, 3, err, sizeof err), 0);
    assert_true(config_run_identity(&a, 7) != config_run_identity(&c4, 7));
    assert_true(config_run_identity(&c4, 7) != config_run_identity(&c8, 7));
    char t4[2048], t8[2048];
    config_run_text(&c4, t4, sizeof t4);
    config_run_text(&c8, t8, sizeof t8);
    assert_int_equal(config_run_diff(t4, t8, diff, sizeof diff), 1);
    assert_string_equal(diff, "pipeline.buffer_partitions: 4 -> 8");
    assert_int_equal(config_run_diff(ta, t4, diff, sizeof diff), 6);
    assert_non_null(strstr(diff, "pipeline.mode: (absent) -> \"partitions\""));
    assert_int_equal(config_run_diff("a = 1\n", "b = 2\n", diff, sizeof diff), 2);
    assert_string_equal(diff, "a: 1 -> (absent); b: (absent) -> 2");
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--write-reference")) {
        FILE *f = fopen(argv[2], "w");
        if (!f)
            return 1;
        config_write_reference(f);
        return fclose(f) ? 1 : 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped),
        cmocka_unit_test(test_defaults_and_sets),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_reference),
        cmocka_unit_test(test_runtime_keys),
        cmocka_unit_test(test_run_identity),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
