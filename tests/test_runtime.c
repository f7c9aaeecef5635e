/* test_runtime.c - run-time defects of issue 17 (items 3, 5, 6 and 7),
 * each against gnnlaunch --cpu with the real stages (build/bin) on a small
 * synthetic dataset (docs/reliability.md, "Faults"):
 *   - a NaN input row (SLUICE_FAULT_NAN_NODE): exit 3 naming epoch, batch
 *     and node, no checkpoint of that epoch; with train.on_nonfinite =
 *     "skip-batch" exit 0, the batches named as skipped;
 *   - a split without a labelled node: exit 2 naming the split file,
 *     nothing started;
 *   - a stage stopped by SIGSTOP (trainer, extractor): exit 3 within
 *     pipeline.stall_timeout_s + 3 s naming stage, rank, pid and "stalled";
 *     nothing left in /dev/shm;
 *   - checkpoints of different runs: --resume of another configuration
 *     refused naming the keys, a second run on a locked directory refused,
 *     a fresh start moves the old run's files into old-<time>/, --resume
 *     of the same run continues, --resume-from FILE of another run works;
 *   - --metrics /dev/full: a warning and exit 0, exit 3 with
 *     --strict-outputs;
 *   - a FIFO as the config: exit 2 at once;
 *   - a run directory base taken by someone else (a link at
 *     $TMPDIR/sluice-<uid>, no XDG_RUNTIME_DIR): the run goes on in a
 *     private directory recorded under $HOME. */
#include "t_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <xxhash.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ipc/metrics.h"
#include "ipc/run.h"
#include "launcher/layout.h"
#include "ops/ckpt.h"
#include "t_launch.h"

#define CASE_ALARM_S 120

static char g_ds[1200], g_cfg[1200];
static char g_stages[1300]; /* SLUICE_STAGE_DIR=<build/bin> */

static void write_config(const char *path, const char *ds, int hidden)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"sage\"\nhidden = %d\nfanouts = [8, 4]\ndropout = 0.2\n\n"
            "[train]\nbatch_size = 64\nepochs = 2\nlr = 0.01\nseed = 5\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 8\nstaging_mb = 4\nio_depth = 16\n"
            "ordered = true\n",
            ds, hidden);
    fclose(f);
}

/* gnnlaunch --cpu cfg with checkpoints in ck and the extra arguments. */
static void start(struct t_proc *r, const char *const *env, const char *cfg, const char *ck, const char *const *more)
{
    char set[1400];
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    const char *envp[8] = {g_stages};
    int ne = 1;
    for (int i = 0; env && env[i] && ne < 7; i++)
        envp[ne++] = env[i];
    const char *argv[24] = {"--cpu", cfg, "--set", set};
    int na = 4;
    for (int i = 0; more && more[i] && na < 23; i++)
        argv[na++] = more[i];
    t_launch_start(r, envp, argv);
}

static int run(struct t_proc *r, const char *const *env, const char *cfg, const char *ck, const char *const *more)
{
    start(r, env, cfg, ck, more);
    return t_launch_wait(r, 90);
}

static bool exists(const char *dir, const char *name)
{
    char p[2400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

/* A node of the training split (its first id). */
static uint64_t train_node(void)
{
    char p[1300];
    snprintf(p, sizeof p, "%s/train.bin", g_ds);
    FILE *f = fopen(p, "rb");
    assert_non_null(f);
    uint32_t id;
    assert_int_equal(fread(&id, sizeof id, 1, f), 1);
    fclose(f);
    return id;
}

/* ---- item 3: non-finite values --------------------------------------------------------- */

static void test_nonfinite(void **state)
{
    (void)state;
    char ck[1300], env[64], want[96];
    snprintf(ck, sizeof ck, "%s/ck-nan", t_ldir);
    uint64_t node = train_node();
    snprintf(env, sizeof env, "SLUICE_FAULT_NAN_NODE=%llu", (unsigned long long)node);
    const char *envs[] = {env, NULL};
    struct t_proc r;
    assert_int_equal(run(&r, envs, g_cfg, ck, NULL), 3);
    t_expect_log(&r, "gnn-trainer rank 0: epoch 1, training batch");
    t_expect_log(&r, "the loss is nan");
    snprintf(want, sizeof want, "of node %llu (rows of features.bin", (unsigned long long)node);
    t_expect_log(&r, want);
    t_expect_clean(&r);
    assert_false(exists(ck, "epoch-000001.safetensors")); /* no checkpoint from the poisoned epoch */

    const char *skip[] = {"--set", "train.on_nonfinite=\"skip-batch\"", NULL};
    assert_int_equal(run(&r, envs, g_cfg, ck, skip), 0);
    t_expect_log(&r, "skipped (train.on_nonfinite = \"skip-batch\")");
    t_expect_log(&r, "test_acc=");
    t_expect_clean(&r);
    assert_true(exists(ck, "epoch-000002.safetensors"));

    const char *bad[] = {"--set", "train.on_nonfinite=\"ignore\"", NULL};
    assert_int_equal(run(&r, NULL, g_cfg, ck, bad), 2);
    t_expect_log(&r, "train.on_nonfinite = \"ignore\" is not one of \"fail\", \"skip-batch\"");
    t_rmrf(ck);
}

/* A copy of the dataset whose val split has no labelled node. */
static void test_unlabelled_split(void **state)
{
    (void)state;
    char ds[1300], cfg[1300], ck[1300], err[1024];
    snprintf(ds, sizeof ds, "%s/ds-nolabel", t_ldir);
    snprintf(cfg, sizeof cfg, "%s/nolabel.toml", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-nolabel", t_ldir);
    char log[4096];
    assert_int_equal(t_run(log, sizeof log, "cp -r %s %s", g_ds, ds), 0);
    struct dataset_meta m;
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    char lp[1400], vp[1400];
    snprintf(lp, sizeof lp, "%s/labels.bin", ds);
    snprintf(vp, sizeof vp, "%s/val.bin", ds);
    int lfd = open(lp, O_RDWR), vfd = open(vp, O_RDONLY);
    assert_true(lfd >= 0 && vfd >= 0);
    uint32_t id;
    while (read(vfd, &id, sizeof id) == (ssize_t)sizeof id) {
        int32_t none = -1;
        assert_int_equal(pwrite(lfd, &none, sizeof none, (off_t)id * 4), 4);
    }
    close(vfd);
    close(lfd);
    /* record the new checksum, so that only the labelling is wrong */
    char *text = NULL;
    size_t n = 0;
    assert_int_equal(sl_read_file(lp, 1 << 30, &text, &n, err, sizeof err), 0);
    m.f[DATASET_LABELS].xxh3 = XXH3_64bits(text, n);
    free(text);
    assert_int_equal(dataset_meta_write(ds, &m, err, sizeof err), 0);
    write_config(cfg, ds, 32);
    struct t_proc r;
    assert_int_equal(run(&r, NULL, cfg, ck, NULL), 2);
    t_expect_log(&r, "val.bin: none of its");
    t_expect_log(&r, "val_acc would be nan");
    t_expect_clean(&r);
    assert_false(exists(ck, "epoch-000001.safetensors"));
    t_rmrf(ds);
    t_rmrf(ck);
}

/* ---- item 5: stalls -------------------------------------------------------------------- */

/* pid of rank 0's stage s once it has handled a batch (its metrics block
 * counts an item: before that, start-up, no stall is judged). */
static pid_t wait_busy_stage(struct t_proc *r, enum run_stage s)
{
    struct t_kid k[T_MAX_KIDS];
    int n = t_wait_flowing(r, RUN_STAGES, k, 1);
    pid_t pid = -1;
    for (int i = 0; i < n; i++)
        if (k[i].stage == (int)s && k[i].rank == 0)
            pid = k[i].pid;
    if (pid < 0)
        fail_msg("stage %d of rank 0 not found", (int)s);
    char name[SHM_NAME_MAX];
    struct metrics_page page = {0};
    assert_int_equal(run_metrics_segname(name, sizeof name, k[0].run, NULL, 0), 0);
    assert_int_equal(metrics_attach(&page, name, SHM_RDONLY, NULL, 0), 0);
    const struct metrics_block *b = metrics_block(&page, run_block(0, s));
    assert_non_null(b);
    double t0 = t_now();
    while (atomic_load(&b->items) == 0) {
        if (t_now() - t0 > 60)
            fail_msg("stage %d of rank 0 never handled a batch", (int)s);
        t_sleep_ms(1);
    }
    metrics_free(&page);
    return pid;
}

static void stall_case(enum run_stage s, const char *name)
{
    char ck[1300], want[128];
    snprintf(ck, sizeof ck, "%s/ck-stall-%s", t_ldir, name);
    const char *more[] = {"--epochs", "400", "--set", "pipeline.stall_timeout_s=2", NULL};
    struct t_proc r;
    start(&r, NULL, g_cfg, ck, more);
    pid_t pid = wait_busy_stage(&r, s);
    t_sleep_ms(100); /* past its first batch */
    assert_int_equal(kill(pid, SIGSTOP), 0);
    double t0 = t_now();
    assert_int_equal(t_launch_wait(&r, 20), 3);
    double took = t_now() - t0;
    snprintf(want, sizeof want, "%s rank 0 (pid %ld) stalled: no heartbeat for", name, (long)pid);
    t_expect_log(&r, want);
    t_expect_log(&r, "(pipeline.stall_timeout_s = 2); it is stopped (state T");
    if (took > 2 + 1 + 2 + 1.5) /* the limit, the tick, SIGTERM's grace, slack */
        fail_msg("the stall of %s took %.1f s to stop the run", name, took);
    t_expect_clean(&r);
    t_rmrf(ck);
}

static void test_stall(void **state)
{
    (void)state;
    stall_case(RUN_TRAINER, "gnn-trainer");
    stall_case(RUN_EXTRACTOR, "gnn-extractor");
}

/* ---- item 6: runs and their checkpoints ------------------------------------------------- */

static int count_old(const char *ck)
{
    DIR *d = opendir(ck);
    assert_non_null(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += !strncmp(e->d_name, "old-", 4);
    closedir(d);
    return n;
}

static void test_run_identity(void **state)
{
    (void)state;
    char ck[1300], cfg64[1300], file[1400];
    snprintf(ck, sizeof ck, "%s/ck-id", t_ldir);
    snprintf(cfg64, sizeof cfg64, "%s/h64.toml", t_ldir);
    write_config(cfg64, g_ds, 64);
    struct t_proc r;
    assert_int_equal(run(&r, NULL, g_cfg, ck, NULL), 0);
    snprintf(file, sizeof file, "%s/epoch-000002.safetensors", ck);
    struct ckpt c;
    char err[1024];
    assert_int_equal(ckpt_read(&c, file, err, sizeof err), 0);
    assert_non_null(ckpt_meta(&c, CKPT_META_RUN));
    assert_non_null(strstr(ckpt_meta(&c, CKPT_META_RUN_CONFIG), "model.hidden = 32\n"));
    ckpt_free(&c);

    /* another configuration cannot --resume it: the keys are listed */
    const char *resume4[] = {"--resume", "--epochs", "4", NULL};
    const char *lr[] = {"--resume", "--epochs", "4", "--set", "train.lr=0.02", NULL};
    assert_int_equal(run(&r, NULL, cfg64, ck, resume4), 2);
    t_expect_log(&r, "belongs to another run");
    t_expect_log(&r, "model.hidden: 32 -> 64");
    assert_int_equal(run(&r, NULL, g_cfg, ck, lr), 2);
    t_expect_log(&r, "train.lr: 0.01 -> 0.02");

    /* a second run while the directory is locked */
    char lock[1400];
    snprintf(lock, sizeof lock, "%s/.lock", ck);
    int fd = open(lock, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX | LOCK_NB), 0);
    assert_int_equal(run(&r, NULL, g_cfg, ck, NULL), 2);
    t_expect_log(&r, "is in use by another run");
    close(fd);

    /* the same run resumes */
    assert_int_equal(run(&r, NULL, g_cfg, ck, resume4), 0);
    t_expect_log(&r, "resuming from");
    assert_true(exists(ck, "epoch-000004.safetensors"));
    assert_int_equal(count_old(ck), 0);

    /* a fresh start of 1 epoch: the old run's 4 go aside, none is left to mix */
    const char *one[] = {"--epochs", "1", NULL};
    assert_int_equal(run(&r, NULL, cfg64, ck, one), 0);
    t_expect_log(&r, "the 4 checkpoints of the previous run");
    assert_int_equal(count_old(ck), 1);
    assert_true(exists(ck, "epoch-000001.safetensors"));
    assert_false(exists(ck, "epoch-000002.safetensors"));

    /* --resume-from a checkpoint of another run (hidden 32, epoch 2, now
     * under old-*) into the directory of the hidden-64 run */
    DIR *d = opendir(ck);
    struct dirent *e;
    char old[300] = "";
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "old-", 4))
            snprintf(old, sizeof old, "%s", e->d_name);
    closedir(d);
    snprintf(file, sizeof file, "%s/%s/epoch-000002.safetensors", ck, old);
    const char *from[] = {"--resume-from", file, "--epochs", "3", NULL};
    assert_int_equal(run(&r, NULL, g_cfg, ck, from), 0);
    t_expect_log(&r, "resuming from");
    assert_true(exists(ck, "epoch-000003.safetensors"));
    assert_false(exists(ck, "epoch-000001.safetensors")); /* the hidden-64 run's went aside */
    assert_int_equal(count_old(ck), 2);

    /* --resume-from a cut copy: refused, and nothing moved aside */
    char cut[1400], log[2048];
    snprintf(cut, sizeof cut, "%s/cut.safetensors", t_ldir);
    snprintf(file, sizeof file, "%s/epoch-000003.safetensors", ck);
    struct stat sb;
    assert_int_equal(stat(file, &sb), 0);
    assert_int_equal(t_run(log, sizeof log, "cp '%s' '%s'", file, cut), 0);
    assert_int_equal(truncate(cut, sb.st_size / 2), 0);
    const char *from_cut[] = {"--resume-from", cut, "--epochs", "4", NULL};
    assert_int_equal(run(&r, NULL, g_cfg, ck, from_cut), 2);
    t_expect_log(&r, "--resume-from");
    assert_true(exists(ck, "epoch-000003.safetensors"));
    assert_int_equal(count_old(ck), 2);

    /* a move aside cut short earlier (a leftover .old-*.partial) is
     * finished by the next fresh start, beside its own */
    char partial[1400];
    snprintf(partial, sizeof partial, "%s/.old-20200101-000000.partial", ck);
    assert_int_equal(mkdir(partial, 0755), 0);
    assert_int_equal(run(&r, NULL, g_cfg, ck, one), 0);
    assert_int_equal(count_old(ck), 4);
    assert_true(exists(ck, "old-20200101-000000"));
    t_rmrf(ck);
}

/* ---- item 7 ---------------------------------------------------------------------------- */

static void test_outputs(void **state)
{
    (void)state;
    char ck[1300];
    snprintf(ck, sizeof ck, "%s/ck-out", t_ldir);
    struct t_proc r;
    const char *full[] = {"--metrics", "/dev/full", NULL};
    assert_int_equal(run(&r, NULL, g_cfg, ck, full), 0);
    t_expect_log(&r, "warning: --metrics /dev/full: write failed: No space left on device");
    t_expect_log(&r, "--metrics could not be written in full");
    t_expect_log(&r, "test_acc=");
    const char *strict[] = {"--metrics", "/dev/full", "--strict-outputs", NULL};
    assert_int_equal(run(&r, NULL, g_cfg, ck, strict), 3);
    t_expect_log(&r, "exit 3 (--strict-outputs)");
    t_expect_clean(&r);
    t_rmrf(ck);
}

static void test_fifo_config(void **state)
{
    (void)state;
    char fifo[1300], ck[1300];
    snprintf(fifo, sizeof fifo, "%s/fifo.toml", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-fifo", t_ldir);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    struct t_proc r;
    start(&r, NULL, fifo, ck, NULL);
    assert_int_equal(t_launch_wait(&r, 10), 2); /* fails the test if it blocks */
    t_expect_log(&r, "not a regular file (a FIFO)");
    unlink(fifo);
}

/* A file-size limit below the run's shared memory (ulimit -f): one error
 * naming the limit, exit 2, nothing left in /dev/shm (SIGXFSZ once killed
 * the launcher while it sized the segments, leaving them behind). */
static void test_file_size_limit(void **state)
{
    (void)state;
    char ck[1300];
    snprintf(ck, sizeof ck, "%s/ck-fsize", t_ldir);
    struct rlimit old, small;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    small = old;
    small.rlim_cur = 64 * 1024; /* the child inherits it: room for its log, not for a batch arena */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &small), 0);
    struct t_proc r;
    start(&r, NULL, g_cfg, ck, NULL);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    assert_int_equal(t_launch_wait(&r, 60), 2);
    t_expect_log(&r, "file size limit (ulimit -f)");
    t_expect_clean(&r);
}

/* A training split smaller than the ranks: refused before anything
 * starts, naming the counts (a rank with no training batch once made the
 * run fail later with "the batch stream ended after 0 of 2 epochs"). */
static void test_split_below_ranks(void **state)
{
    (void)state;
    char ds[1300], prep[1200], out[4096], cfg[1300], ck[1300];
    snprintf(ds, sizeof ds, "%s/ds-tiny", t_ldir);
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out, "%s synth %s --nodes 40 --avg-degree 3 --feat-dim 4 --classes 2", prep, ds) != 0)
        fail_msg("gnnprep synth failed: %s", out);
    snprintf(cfg, sizeof cfg, "%s/tiny.toml", t_ldir);
    FILE *f = fopen(cfg, "w");
    assert_non_null(f);
    fprintf(f, "[dataset]\npath = \"%s\"\n", ds);
    fclose(f);
    snprintf(ck, sizeof ck, "%s/ck-tiny", t_ldir);
    struct t_proc r;
    assert_int_equal(run(&r, NULL, cfg, ck, (const char *[]){"--set", "pipeline.ranks=6", NULL}), 2);
    t_expect_log(&r, "the training split has 4 nodes, fewer than the 6 ranks of the run");
    t_expect_clean(&r);
}

static void test_rundir_taken(void **state)
{
    (void)state;
    char tmp[1300], home[1300], link[1400], ck[1300], rec[1400];
    snprintf(tmp, sizeof tmp, "%s/tmpdir", t_ldir);
    snprintf(home, sizeof home, "%s/home", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-rundir", t_ldir);
    assert_int_equal(mkdir(tmp, 0755), 0);
    assert_int_equal(mkdir(home, 0755), 0);
    snprintf(link, sizeof link, "%s/sluice-%lu", tmp, (unsigned long)geteuid());
    assert_int_equal(symlink("/nonexistent-of-another-user", link), 0); /* taken first */
    char etmp[1400], ehome[1400];
    snprintf(etmp, sizeof etmp, "TMPDIR=%s", tmp);
    snprintf(ehome, sizeof ehome, "HOME=%s", home);
    const char *env[] = {"XDG_RUNTIME_DIR=", etmp, ehome, NULL};
    struct t_proc r;
    assert_int_equal(run(&r, env, g_cfg, ck, NULL), 0);
    t_expect_log(&r, "is not a private directory of yours");
    snprintf(rec, sizeof rec, "%s/.cache/sluice/run-base", home);
    char base[1400] = "";
    t_slurp(rec, base, sizeof base);
    assert_int_equal(strncmp(base, link, strlen(link)), 0); /* <link>-XXXXXX */
    base[strcspn(base, "\n")] = '\0';
    struct stat st;
    assert_int_equal(lstat(base, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(st.st_mode & 0777, 0700);
    /* a second run takes the recorded directory without a word */
    assert_int_equal(run(&r, env, g_cfg, ck, NULL), 0);
    t_expect_no_log(&r, "is not a private directory of yours");
    char prefix[64];
    char ns[SHM_PREFIX_MAX];
    shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
    snprintf(prefix, sizeof prefix, "%s%ld-", ns, (long)r.pid);
    assert_int_equal(t_shm_count(prefix), 0);
    char runs[1400];
    snprintf(runs, sizeof runs, "%s", base); /* its run directory was removed */
    DIR *d = opendir(runs);
    assert_non_null(d);
    int left = 0;
    for (struct dirent *e; (e = readdir(d));)
        left += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(left, 0);
    t_rmrf(tmp);
    t_rmrf(home);
    t_rmrf(ck);
}

/* ---- fixture ---------------------------------------------------------------------------- */

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("runtime") != 0)
        return -1;
    t_real_stages(g_stages, sizeof g_stages);
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
    char prep[1200], log[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(log, sizeof log,
              "%s synth %s --nodes 4000 --avg-degree 8 --feat-dim 16 --classes 4 --homophily 0.9 "
              "--train-frac 0.4 --val-frac 0.2 --test-frac 0.2 --seed 11",
              prep, g_ds) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", log);
        return -1;
    }
    write_config(g_cfg, g_ds, 32);
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_nonfinite, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_unlabelled_split, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_stall, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_run_identity, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_outputs, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_fifo_config, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_file_size_limit, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_split_below_ranks, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_rundir_taken, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
