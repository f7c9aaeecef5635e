/* test_pipeline.c - the real stages end to end under gnnlaunch: gnn-sampler
 * -> gnn-extractor -> a row-checking consumer in the trainer's place
 * (row_check_stage.c) -> gnn-releaser, on synthetic datasets whose
 * features are larger than the feature buffer, for whole epochs.
 *
 * The consumer rebuilds every batch from its seed and compares it, checks
 * every feature row against features.bin, every epoch's targets exactly
 * once and (ordered runs) the order; the releaser fails the run if any
 * reference is left at the end. Cases cover one and two ranks, every I/O
 * mode, the pread fallback, rows smaller than a disk block (f16, dim 3), a
 * feature file truncated under a running extractor, a buffer below the
 * deadlock reserve (refused before start), and the cache policies (lookahead
 * announcing batches from the sampler, a pinned hot set) with row traces. */
#include "t_util.h"

#include <errno.h>
#include <signal.h>

#include "stages/cachesim.h"
#include "t_launch.h"

#define CASE_ALARM_S 240

static char g_pipe[1200];            /* the stage directory: real stages + the consumer */
static char g_ds[1200], g_ds16[1200]; /* f32 dim 100, f16 dim 3 */
static char g_cfg[1200];

static void write_config(const char *path, const char *ds, const char *extra)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nfanouts = [5, 5]\n\n[train]\nbatch_size = 100\nepochs = 2\nseed = 7\n\n"
            "[pipeline]\nsamplers = 2\nextractors = 2\nextract_queue = 4\ntrain_queue = 4\nfeature_buffer_mb = 4\n"
            "staging_mb = 4\nio_depth = 16\n%s",
            ds, extra ? extra : "");
    fclose(f);
}

/* The consumer's report for rank: every field as expected. */
static void expect_rows_ok(const struct t_proc *r, int rank, unsigned epochs)
{
    char path[1400], buf[512];
    snprintf(path, sizeof path, "%s/trainer.%d", r->report, rank);
    t_slurp(path, buf, sizeof buf);
    unsigned long long batches, rows, bad_rows, bad_batches, dups, complete, order, passes_bad;
    if (sscanf(buf, "batches=%llu rows=%llu bad_rows=%llu bad_batches=%llu dups=%llu epochs_complete=%llu "
                    "order_errors=%llu eval_passes_bad=%llu",
               &batches, &rows, &bad_rows, &bad_batches, &dups, &complete, &order, &passes_bad) != 8)
        fail_msg("%s: no report ('%s'); see %s", path, buf, r->log);
    if (batches == 0 || rows < batches || bad_rows || bad_batches || dups || complete != epochs || order || passes_bad)
        fail_msg("rank %d: %s (want every row and batch right, %u complete epochs)", rank, buf, epochs);
}

static struct t_proc g_last; /* run_ok's last run, for more checks of its log */

static void run_ok(const char *cfg, const char *const *env_extra, const char *const *args, int ranks, unsigned epochs)
{
    struct t_proc r;
    const char *env[8] = {NULL};
    int n = 0;
    static char dir[1300];
    snprintf(dir, sizeof dir, "SLUICE_STAGE_DIR=%s", g_pipe);
    env[n++] = dir;
    for (int i = 0; env_extra && env_extra[i] && n < 7; i++)
        env[n++] = env_extra[i];
    const char *argv[16] = {"--cpu", cfg};
    int a = 2;
    for (int i = 0; args && args[i] && a < 15; i++)
        argv[a++] = args[i];
    t_launch_run(&r, env, argv, 200);
    t_expect_code(&r, 0);
    t_expect_log(&r, "gnnlaunch: feature buffer per rank: ");
    t_expect_log(&r, "gnn-releaser rank 0: released ");
    for (int k = 0; k < ranks; k++)
        expect_rows_ok(&r, k, epochs);
    t_expect_clean(&r);
    g_last = r;
}

static void test_one_rank_direct(void **state)
{
    (void)state;
    run_ok(g_cfg, NULL, NULL, 1, 2);
}

static void test_two_ranks_ordered_buffered(void **state)
{
    (void)state;
    run_ok(g_cfg, (const char *[]){"SLUICE_TEST_DELAY_US=200", NULL},
           (const char *[]){"--set", "pipeline.ranks=2", "--set", "pipeline.ordered=true", "--set",
                            "pipeline.io=buffered", "--set", "train.eval_every=2", "--epochs", "3", NULL},
           2, 3);
}

static void test_mmap(void **state)
{
    (void)state;
    run_ok(g_cfg, NULL, (const char *[]){"--set", "pipeline.io=mmap", "--epochs", "1", NULL}, 1, 1);
}

static void test_pread_fallback(void **state)
{
    (void)state;
    struct t_proc r;
    static char dir[1300];
    snprintf(dir, sizeof dir, "SLUICE_STAGE_DIR=%s", g_pipe);
    t_launch_run(&r, (const char *[]){dir, "SLUICE_NO_IO_URING=1", NULL},
                 (const char *[]){"--cpu", g_cfg, "--epochs", "1", NULL}, 200);
    t_expect_code(&r, 0);
    t_expect_log(&r, "pread");
    expect_rows_ok(&r, 0, 1);
    t_expect_clean(&r);
}

static void test_small_rows_f16(void **state)
{
    (void)state;
    char cfg[1300];
    snprintf(cfg, sizeof cfg, "%s/f16.toml", t_ldir);
    write_config(cfg, g_ds16, "ordered = true\n");
    run_ok(cfg, NULL, NULL, 1, 2);
    t_expect_no_log(&g_last, "cache policy"); /* auto: every row fits 4 MiB of 64-byte slots: lru */
}

/* features.bin shrinks while the run reads it: the extractor fails naming
 * the node and offset, the launcher stops everything and exits 3. */
static void test_file_truncated_under_us(void **state)
{
    (void)state;
    char ds[1300], cfg[1300], out[4096];
    snprintf(ds, sizeof ds, "%s/ds-trunc", t_ldir);
    snprintf(cfg, sizeof cfg, "%s/trunc.toml", t_ldir);
    assert_int_equal(t_run(out, sizeof out, "rm -rf '%s' && cp -r '%s' '%s'", ds, g_ds, ds), 0);
    write_config(cfg, ds, NULL);
    struct t_proc r;
    static char dir[1300];
    snprintf(dir, sizeof dir, "SLUICE_STAGE_DIR=%s", g_pipe);
    t_launch_run(&r, (const char *[]){dir, "SLUICE_TEST_TRUNCATE_AT=3", "SLUICE_TEST_DELAY_US=20000", NULL},
                 (const char *[]){"--cpu", cfg, NULL}, 200);
    t_expect_code(&r, 3);
    t_expect_log(&r, "gnn-extractor rank 0");
    t_expect_log(&r, "offset");
    t_expect_clean(&r);
    t_rmrf(ds);
}

/* Every row right and every reference released with the lookahead policy
 * (two ranks: two buffers, each told by its rank's sampler threads), with
 * lookahead over a pinned hot set, and with static; the row traces hold
 * every batch each rank's extractor took. */
static void test_cache_policies(void **state)
{
    (void)state;
    char dir[] = "/tmp/sluice-rows-XXXXXX", set[1200], path[1300], err[256];
    assert_non_null(mkdtemp(dir));
    snprintf(set, sizeof set, "pipeline.trace_rows=%s/rows", dir);
    run_ok(g_cfg, NULL,
           (const char *[]){"--set", "pipeline.cache_policy=lookahead", "--set", "pipeline.lookahead=4", "--set",
                            "pipeline.ranks=2", "--set", set, NULL},
           2, 2);
    t_expect_log(&g_last, "lookahead: announcing 4 batches ahead");
    uint64_t batches = 0;
    for (int rank = 0; rank < 2; rank++) {
        snprintf(path, sizeof path, "%s/rows.rank%d", dir, rank);
        struct cachesim_trace t;
        if (cachesim_trace_read(&t, path, err, sizeof err))
            fail_msg("rank %d's trace: %s", rank, err);
        assert_int_equal(t.rank, (uint32_t)rank);
        assert_int_equal(t.n_nodes, 20000);
        assert_false(t.truncated);
        assert_true(t.batches > 0 && t.accesses >= t.batches);
        batches += t.batches;
        cachesim_trace_free(&t);
        unlink(path);
    }
    assert_true(batches >= 2 * 2 * 40); /* 8000 training targets x 2 epochs in batches of 100, over two ranks */
    rmdir(dir);
    run_ok(g_cfg, NULL, (const char *[]){"--set", "pipeline.cache_policy=lookahead-static", "--epochs", "1", NULL}, 1,
           1);
    run_ok(g_cfg, NULL, (const char *[]){"--set", "pipeline.cache_policy=static", "--epochs", "1", NULL}, 1, 1);
    t_expect_log(&g_last, "pinned the ");
    /* the default, auto: lookahead when the rows do not fit (20000 nodes, 8192 slots) */
    run_ok(g_cfg, NULL, (const char *[]){"--epochs", "1", NULL}, 1, 1);
    t_expect_log(&g_last, "gnnlaunch: cache policy auto (lookahead: the features do not fit the buffer)");
    t_expect_log(&g_last, "lookahead: announcing 32 batches ahead");
}

/* A buffer below extractors x the largest batch could deadlock: refused
 * before anything starts, naming the key and the size that would do. */
static void test_buffer_below_reserve(void **state)
{
    (void)state;
    struct t_proc r;
    static char dir[1300];
    snprintf(dir, sizeof dir, "SLUICE_STAGE_DIR=%s", g_pipe);
    t_launch_run(&r, (const char *[]){dir, NULL},
                 (const char *[]){"--cpu", g_cfg, "--set", "pipeline.feature_buffer_mb=1", NULL}, 60);
    t_expect_code(&r, 2);
    t_expect_log(&r, "raise pipeline.feature_buffer_mb to at least 4");
    t_expect_clean(&r);
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("pipeline") != 0)
        return -1;
    const char *bin = getenv("SLUICE_BIN");
    snprintf(g_pipe, sizeof g_pipe, "%s/../tests/pipeline", bin ? bin : "build/bin");
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_ds16, sizeof g_ds16, "%s/ds16", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
    char prep[1200], out[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    /* 20000 rows of 512 bytes on disk (10 MB) against a 4 MiB buffer */
    if (t_run(out, sizeof out, "%s synth %s --nodes 20000 --avg-degree 8 --feat-dim 100 --classes 5 --seed 3 --train-frac 0.4", prep,
              g_ds) != 0 ||
        t_run(out, sizeof out, "%s synth %s --nodes 30000 --avg-degree 6 --feat-dim 3 --classes 4 --dtype f16", prep,
              g_ds16) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", out);
        return -1;
    }
    write_config(g_cfg, g_ds, NULL);
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_rank_direct, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_two_ranks_ordered_buffered, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_mmap, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_pread_fallback, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_small_rows_f16, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_file_truncated_under_us, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_buffer_below_reserve, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_cache_policies, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
