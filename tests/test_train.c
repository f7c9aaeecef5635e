/* test_train.c - training end to end: gnnlaunch --cpu with the real four
 * stages (build/bin) on small synthetic datasets.
 *
 *   - a GraphSAGE run learns (test accuracy well above chance) and ends
 *     with exactly `test_acc=<f> val_acc=<f> epochs=<n> seconds=<f>` as the
 *     last line on stdout, one epoch line per epoch before it;
 *   - in ordered mode two runs with the same seed leave bit-identical
 *     checkpoints (every tensor, Adam's moments included);
 *   - a run SIGKILLed after its first checkpoint and resumed with --resume
 *     ends with the same test accuracy, to the printed digit, as a run that
 *     was never interrupted (ordered mode: everything is a function of the
 *     seed, and the checkpoint holds all the state);
 *   - with the labels permuted at random the model cannot learn: test
 *     accuracy stays near chance;
 *   - two ranks train in step (gradient all-reduce) and learn, and say
 *     their parameters are identical after the first epoch (the digest
 *     comparison after every epoch); a rank made to drift by one ulp
 *     stops the run after that epoch, with no checkpoint of it;
 *   - --resume with no checkpoint, and a checkpoint of another model, are
 *     refused with a clear message;
 *   - a run that starts warm (pipeline.warm_start = "on": the feature
 *     buffer filled by one sequential pass) trains, in ordered mode, to the
 *     same checkpoint as one that reads every row on demand ("off");
 *     "on" with a buffer too small for the rows is refused before start. */
#include "t_util.h"

#include <errno.h>
#include <math.h>
#include <signal.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ops/ckpt.h"
#include "t_launch.h"

#define CASE_ALARM_S 300

static char g_ds[1200], g_perm[1200], g_cfg[1200];
static char g_stages[1300]; /* SLUICE_STAGE_DIR=<the real stages in build/bin> */

static void write_config(const char *path, const char *ds, const char *extra)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"sage\"\nhidden = 32\nfanouts = [8, 4]\ndropout = 0.2\n\n"
            "[train]\nbatch_size = 64\nepochs = 3\nlr = 0.01\nseed = 5\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 8\nstaging_mb = 4\nio_depth = 16\n"
            "ordered = true\n%s",
            ds, extra ? extra : "");
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

static void test_sage_learns(void **state)
{
    (void)state;
    struct t_proc r;
    char ck[1300], set[1400];
    snprintf(ck, sizeof ck, "%s/ck-learn", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    run(&r, (const char *[]){g_cfg, "--set", set, NULL}, 0);
    for (int e = 1; e <= 3; e++) {
        char want[64], line[512];
        snprintf(want, sizeof want, "epoch %d/3 loss=", e);
        if (!t_last_line(&r, want, line, sizeof line))
            fail_msg("no '%s' line in %s", want, r.log);
        /* seconds, then its training and evaluation parts, which add up (to the printed rounding) */
        double secs, tr, ev;
        const char *at = strstr(line, " seconds=");
        if (!at || sscanf(at, " seconds=%lf train_s=%lf eval_s=%lf |", &secs, &tr, &ev) != 3 ||
            fabs(tr + ev - secs) > 0.011 || tr < 0 || ev < 0)
            fail_msg("epoch line without seconds= train_s= eval_s= that add up: %s", line);
    }
    double acc = t_final_test_acc(&r, 3);
    if (acc < 0.6) /* 4 classes: chance is 0.25 */
        fail_msg("GraphSAGE reached only test_acc=%.3f", acc);
    /* one checkpoint per epoch */
    for (int e = 1; e <= 3; e++) {
        char path[1400];
        assert_int_equal(ckpt_path(path, sizeof path, ck, (uint32_t)e), 0);
        assert_int_equal(access(path, R_OK), 0);
    }
}

/* Every tensor of two checkpoints, byte for byte. */
static void expect_same_tensors(const char *a, const char *b)
{
    struct ckpt x, y;
    char err[512];
    assert_int_equal(ckpt_read(&x, a, err, sizeof err), 0);
    assert_int_equal(ckpt_read(&y, b, err, sizeof err), 0);
    assert_int_equal(ckpt_count(&x), ckpt_count(&y));
    for (uint32_t i = 0; i < ckpt_count(&x); i++) {
        const struct ckpt_entry *e = ckpt_entry_at(&x, i);
        uint32_t nd;
        uint64_t shape[CKPT_MAX_NDIM];
        const void *p = ckpt_find(&x, ckpt_name(&x, i), e->dtype, &nd, shape);
        const void *q = ckpt_find(&y, ckpt_name(&x, i), e->dtype, NULL, NULL);
        assert_non_null(p);
        if (!q)
            fail_msg("%s lacks %s", b, ckpt_name(&x, i));
        size_t bytes = ckpt_dtype_size(e->dtype);
        for (uint32_t d = 0; d < nd; d++)
            bytes *= shape[d];
        if (memcmp(p, q, bytes))
            fail_msg("tensor %s differs between %s and %s", ckpt_name(&x, i), a, b);
    }
    assert_string_equal(ckpt_meta(&x, "step"), ckpt_meta(&y, "step"));
    ckpt_free(&x);
    ckpt_free(&y);
}

/* Whether the parameters (not Adam's moments) of two checkpoints are the
 * same bytes. */
static bool same_params(const char *a, const char *b)
{
    struct ckpt x, y;
    char err[512];
    assert_int_equal(ckpt_read(&x, a, err, sizeof err), 0);
    assert_int_equal(ckpt_read(&y, b, err, sizeof err), 0);
    bool same = true;
    uint32_t params = 0;
    for (uint32_t i = 0; i < ckpt_count(&x); i++) {
        const char *name = ckpt_name(&x, i);
        if (!strncmp(name, "adam.", 5))
            continue;
        const struct ckpt_entry *e = ckpt_entry_at(&x, i);
        uint32_t nd;
        uint64_t shape[CKPT_MAX_NDIM];
        const void *p = ckpt_find(&x, name, e->dtype, &nd, shape);
        const void *q = ckpt_find(&y, name, e->dtype, NULL, NULL);
        assert_non_null(p);
        assert_non_null(q);
        size_t bytes = ckpt_dtype_size(e->dtype);
        for (uint32_t d = 0; d < nd; d++)
            bytes *= shape[d];
        same = same && !memcmp(p, q, bytes);
        params++;
    }
    assert_true(params > 0);
    ckpt_free(&x);
    ckpt_free(&y);
    return same;
}

/* A run called `name` with --set SETS (NULL-terminated, at most 4) for
 * `epochs` epochs; its checkpoint directory into dir. */
static void run_ck(const char *name, const char *const *sets, const char *epochs, char *dir, size_t len)
{
    char set[1400];
    snprintf(dir, len, "%s/ck-%s", t_ldir, name);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", dir);
    const char *args[16] = {g_cfg, "--set", set, "--epochs", epochs};
    int a = 5;
    for (int i = 0; sets[i] && a < 14; i++) {
        args[a++] = "--set";
        args[a++] = sets[i];
    }
    struct t_proc r;
    run(&r, args, 0);
}

/* Checkpoint `epoch` of directory dir (a static buffer per slot 0..3). */
static const char *ck_at(int slot, const char *dir, uint32_t epoch)
{
    static char path[4][1400];
    assert_int_equal(ckpt_path(path[slot], sizeof path[slot], dir, epoch), 0);
    return path[slot];
}

/* The learning rate schedule and gradient clipping reach the steps: a
 * step schedule with gamma 0 freezes the parameters after epoch 1; a clip
 * far above any gradient's norm changes no bit, a tight one changes the
 * result; so does a warm-up. */
static void test_lr_schedule_and_clip(void **state)
{
    (void)state;
    char plain[1300], frozen[1300], other[1300];
    run_ck("plain", (const char *[]){NULL}, "3", plain, sizeof plain);
    run_ck("frozen",
           (const char *[]){"train.lr_schedule=\"step\"", "train.lr_step_epochs=1", "train.lr_gamma=0", NULL}, "3",
           frozen, sizeof frozen);
    assert_true(same_params(ck_at(0, frozen, 1), ck_at(1, frozen, 3)));
    assert_false(same_params(ck_at(0, frozen, 3), ck_at(1, plain, 3)));
    run_ck("loose", (const char *[]){"train.grad_clip=1e9", NULL}, "3", other, sizeof other);
    assert_true(same_params(ck_at(0, other, 3), ck_at(1, plain, 3)));
    run_ck("tight", (const char *[]){"train.grad_clip=0.001", NULL}, "3", other, sizeof other);
    assert_false(same_params(ck_at(0, other, 3), ck_at(1, plain, 3)));
    run_ck("warm", (const char *[]){"train.warmup_steps=20", "train.lr_schedule=\"cosine\"", NULL}, "3", other,
           sizeof other);
    assert_false(same_params(ck_at(0, other, 3), ck_at(1, plain, 3)));
}

/* The number after "key": in line, or NAN. */
static double json_num(const char *line, const char *key)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *at = strstr(line, pat);
    return at && strncmp(at + strlen(pat), "null", 4) ? strtod(at + strlen(pat), NULL) : NAN;
}

/* Early stopping on labels that carry no signal (the permuted dataset):
 * validation accuracy stops improving within a few epochs, the run ends
 * with exit 0 `patience` evaluations after its best epoch, the final line
 * gives that epoch's accuracies, best.safetensors and latest.safetensors
 * point at the right epochs and train.keep_last removed the others. */
static void test_early_stop(void **state)
{
    (void)state;
    char cfg[1300], ck[1300], set[1400], met[1300], buf[1 << 16];
    snprintf(cfg, sizeof cfg, "%s/perm.toml", t_ldir);
    write_config(cfg, g_perm, NULL);
    snprintf(ck, sizeof ck, "%s/ck-early", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    snprintf(met, sizeof met, "%s/early.jsonl", t_ldir);
    struct t_proc r;
    /* 2000 epochs take many seconds: the launcher sees the stop long before they end */
    run(&r, (const char *[]){cfg, "--set", set, "--epochs", "2000", "--set", "train.early_stop_patience=2", "--set",
                             "train.keep_last=1", "--metrics", met, NULL},
        0);
    t_expect_log(&r, "stopped early");
    /* the epochs printed, their validation accuracy, and the best (the first maximum) */
    t_slurp(met, buf, sizeof buf);
    double val[64] = {0}, test[64] = {0};
    int n = 0, best = 0;
    double final_test = NAN, final_best = NAN;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        if (strstr(line, "\"type\":\"epoch\"") && n < 64) {
            val[n] = json_num(line, "val_acc");
            test[n] = json_num(line, "test_acc");
            assert_false(isnan(val[n]) || isnan(test[n])); /* a test pass with every validation */
            if (val[n] > val[best])
                best = n;
            n++;
        } else if (strstr(line, "\"type\":\"final\"")) {
            final_test = json_num(line, "test_acc");
            final_best = json_num(line, "best_epoch");
            assert_non_null(strstr(line, "\"stopped_early\":true"));
        }
    }
    if (n != best + 3) /* patience 2: two more evaluations after the best */
        fail_msg("%d epochs printed, the best being epoch %d: expected a stop 2 evaluations after it", n, best + 1);
    assert_true(n < 60);
    t_expect_log(&r, "stopping the run");
    assert_true(final_best == best + 1);
    assert_true(fabs(final_test - test[best]) < 1e-9);
    char line[512];
    double ftest, fval;
    unsigned fe;
    assert_true(t_last_line(&r, "test_acc=", line, sizeof line));
    assert_int_equal(sscanf(line, "test_acc=%lf val_acc=%lf epochs=%u", &ftest, &fval, &fe), 3);
    assert_true(fe == (unsigned)n && fabs(fval - val[best]) < 1e-4 && fabs(ftest - test[best]) < 1e-4);
    /* the pointers, and keep_last = 1: the newest printed epoch and the best remain */
    char path[1400], target[256];
    snprintf(path, sizeof path, "%s/best.safetensors", ck);
    ssize_t k = readlink(path, target, sizeof target - 1);
    assert_true(k > 0);
    target[k] = '\0';
    char want[64];
    snprintf(want, sizeof want, "epoch-%06d.safetensors", best + 1);
    assert_string_equal(target, want);
    snprintf(path, sizeof path, "%s/latest.safetensors", ck);
    k = readlink(path, target, sizeof target - 1);
    assert_true(k > 0);
    target[k] = '\0';
    snprintf(want, sizeof want, "epoch-%06d.safetensors", n);
    assert_string_equal(target, want);
    for (int e = 1; e <= n; e++) {
        assert_int_equal(ckpt_path(path, sizeof path, ck, (uint32_t)e), 0);
        bool kept = access(path, F_OK) == 0;
        if (kept != (e == best + 1 || e == n))
            fail_msg("epoch %d's checkpoint is %s (best %d, newest %d, keep_last 1)", e, kept ? "there" : "gone",
                     best + 1, n);
    }
    struct ckpt c;
    char err[512];
    snprintf(path, sizeof path, "%s/best.safetensors", ck);
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), 0);
    ckpt_free(&c);
    /* resumed for one more epoch with evaluations rarer than epochs: the
     * launcher does not know the best before its first evaluation, and
     * keep_last must still spare the epoch best.safetensors links to */
    /* what the trainers wrote past the stop is gone: the newest checkpoint is the last epoch printed */
    uint32_t newest = 0;
    char lpath[1400];
    assert_int_equal(ckpt_latest(ck, lpath, sizeof lpath, &newest, err, sizeof err), 0);
    if (newest != (uint32_t)n)
        fail_msg("after the early stop at epoch %d the newest checkpoint is epoch %u", n, newest);
    char more[16];
    snprintf(more, sizeof more, "%u", newest + 1);
    run(&r, (const char *[]){cfg, "--set", set, "--resume", "--epochs", more, "--set", "train.keep_last=1", "--set",
                             "train.eval_every=100", NULL},
        0);
    if (ckpt_read(&c, path, err, sizeof err) != 0)
        fail_msg("after the resumed epoch, best.safetensors does not read: %s", err);
    ckpt_free(&c);
    /* on to epoch 66, then resumed from there: a run resumed past the
     * results page's window of 64 epochs once waited for ever to publish
     * its first epoch */
    run(&r, (const char *[]){cfg, "--set", set, "--resume", "--epochs", "66", "--set", "train.eval_every=100", NULL},
        0);
    run(&r, (const char *[]){cfg, "--set", set, "--resume", "--epochs", "67", NULL}, 0);
    t_expect_log(&r, "epochs 67..67 to go");
}

/* Two runs of one seed write the same checkpoint, byte for byte, whatever
 * the trainer's thread count (1, then 3: more than this machine may have). */
static void test_deterministic(void **state)
{
    (void)state;
    char ck[2][1300], set[2][1400], path[2][1400];
    const char *threads[2] = {"pipeline.trainer_threads=1", "pipeline.trainer_threads=3"};
    for (int i = 0; i < 2; i++) {
        struct t_proc r;
        snprintf(ck[i], sizeof ck[i], "%s/ck-det%d", t_ldir, i);
        snprintf(set[i], sizeof set[i], "train.checkpoint_dir=\"%s\"", ck[i]);
        run(&r, (const char *[]){g_cfg, "--set", set[i], "--set", threads[i], "--epochs", "2", NULL}, 0);
        char want[64];
        snprintf(want, sizeof want, "%d BLAS thread", i ? 3 : 1);
        t_expect_log(&r, want);
        assert_int_equal(ckpt_path(path[i], sizeof path[i], ck[i], 2), 0);
    }
    expect_same_tensors(path[0], path[1]);
}

/* Warm start on and off: the same checkpoint, byte for byte; "on" says
 * so in the log, "off" reads rows on demand. */
static void test_warm_start_same(void **state)
{
    (void)state;
    char ck[2][1300], set[2][1400], path[2][1400];
    const char *warm[2] = {"pipeline.warm_start=on", "pipeline.warm_start=off"};
    for (int i = 0; i < 2; i++) {
        struct t_proc r;
        snprintf(ck[i], sizeof ck[i], "%s/ck-warm%d", t_ldir, i);
        snprintf(set[i], sizeof set[i], "train.checkpoint_dir=\"%s\"", ck[i]);
        run(&r, (const char *[]){g_cfg, "--set", set[i], "--set", warm[i], "--epochs", "2", NULL}, 0);
        if (i == 0) {
            t_expect_log(&r, "warm start: 4000 rows");
        } else {
            t_expect_no_log(&r, "warm start:");
        }
        assert_int_equal(ckpt_path(path[i], sizeof path[i], ck[i], 2), 0);
    }
    expect_same_tensors(path[0], path[1]);
}

/* "dataset.path=..." of a dataset whose 4000 rows of 1 KiB do not fit a
 * 1 MiB feature buffer (made once). */
static void wide_dataset(char *ds, size_t len)
{
    char wide[1300], prep[1200], out[4096], meta[1400];
    snprintf(wide, sizeof wide, "%s/ds-wide", t_ldir);
    snprintf(meta, sizeof meta, "%s/dataset.toml", wide);
    t_bin(prep, sizeof prep, "gnnprep");
    if (access(meta, R_OK) != 0 &&
        t_run(out, sizeof out, "%s synth %s --nodes 4000 --avg-degree 4 --feat-dim 256 --classes 4 --seed 3", prep,
              wide) != 0)
        fail_msg("gnnprep synth failed: %s", out);
    snprintf(ds, len, "dataset.path=\"%s\"", wide);
}

/* A static policy's pinned hot set, in a buffer that cannot hold every
 * row: "auto" fills it by the sequential pass, and the run trains to the
 * same checkpoint as one without the pass. */
static void test_warm_hot_set_same(void **state)
{
    (void)state;
    char ds[1400], ck[2][1300], set[2][1400], path[2][1400];
    wide_dataset(ds, sizeof ds);
    const char *warm[2] = {"pipeline.warm_start=auto", "pipeline.warm_start=off"};
    for (int i = 0; i < 2; i++) {
        struct t_proc r;
        snprintf(ck[i], sizeof ck[i], "%s/ck-hot%d", t_ldir, i);
        snprintf(set[i], sizeof set[i], "train.checkpoint_dir=\"%s\"", ck[i]);
        run(&r,
            (const char *[]){g_cfg, "--set", ds, "--set", set[i], "--set", warm[i], "--set", "pipeline.feature_buffer_mb=1",
                             "--set", "pipeline.cache_policy=\"static\"", "--set", "model.fanouts=[2]", "--epochs", "2",
                             NULL},
            0);
        if (i == 0)
            t_expect_log(&r, "warm start: the pinned hot set, ");
        else
            t_expect_no_log(&r, "warm start:");
        assert_int_equal(ckpt_path(path[i], sizeof path[i], ck[i], 2), 0);
    }
    expect_same_tensors(path[0], path[1]);
}

/* "on" with a buffer that cannot hold every row: refused before start,
 * naming the key (4000 rows of 1 KiB do not fit in 1 MiB). */
static void test_warm_start_refused(void **state)
{
    (void)state;
    char ds[1400];
    wide_dataset(ds, sizeof ds);
    const char *base[] = {g_cfg, "--set", ds, "--set", "pipeline.feature_buffer_mb=1", "--set", "model.fanouts=[2]",
                          "--epochs", "1", "--set", NULL, NULL};
    struct t_proc r;
    base[10] = "pipeline.warm_start=on";
    run(&r, base, 2);
    t_expect_log(&r, "pipeline.warm_start = \"on\"");
    t_expect_log(&r, "1024 of its 4000 rows");
    base[10] = "pipeline.warm_start=auto"; /* auto: no warm start, the batches read their rows */
    run(&r, base, 0);
    t_expect_no_log(&r, "warm start:");
}

static void test_resume_after_kill(void **state)
{
    (void)state;
    char ck[1300], set[1400], first[1400];
    snprintf(ck, sizeof ck, "%s/ck-resume", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    assert_int_equal(ckpt_path(first, sizeof first, ck, 1), 0);
    /* the uninterrupted run */
    struct t_proc whole;
    char ck2[1300], set2[1400];
    snprintf(ck2, sizeof ck2, "%s/ck-whole", t_ldir);
    snprintf(set2, sizeof set2, "train.checkpoint_dir=\"%s\"", ck2);
    run(&whole, (const char *[]){g_cfg, "--set", set2, "--epochs", "4", NULL}, 0);
    double want = t_final_test_acc(&whole, 4);
    /* killed once epoch 1's checkpoint exists (slowed so that happens mid-run) */
    struct t_proc r;
    t_launch_start(&r, (const char *[]){g_stages, NULL},
                   (const char *[]){"--cpu", g_cfg, "--set", set, "--epochs", "4", NULL});
    double t0 = t_now();
    while (access(first, R_OK) != 0 && t_now() - t0 < 120)
        t_sleep_ms(5);
    assert_int_equal(access(first, R_OK), 0);
    kill(-r.pid, SIGKILL); /* the launcher's process group: the stages die with it */
    t_launch_wait(&r, 60);
    struct t_proc again;
    run(&again, (const char *[]){g_cfg, "--set", set, "--epochs", "4", "--resume", NULL}, 0);
    t_expect_log(&again, "gnnlaunch: resuming from ");
    double got = t_final_test_acc(&again, 4);
    if (fabs(got - want) > 1e-9)
        fail_msg("resumed run ended at test_acc=%.4f, the uninterrupted one at %.4f", got, want);
}

static void test_permuted_labels_chance(void **state)
{
    (void)state;
    char cfg[1300], ck[1300], set[1400];
    snprintf(cfg, sizeof cfg, "%s/perm.toml", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-perm", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    write_config(cfg, g_perm, NULL);
    struct t_proc r;
    run(&r, (const char *[]){cfg, "--set", set, "--epochs", "4", NULL}, 0);
    double acc = t_final_test_acc(&r, 4);
    if (fabs(acc - 0.25) > 0.08)
        fail_msg("with permuted labels test_acc=%.3f; chance is 0.25", acc);
}

static void test_two_ranks(void **state)
{
    (void)state;
    char ck[1300], set[1400];
    snprintf(ck, sizeof ck, "%s/ck-two", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc r;
    run(&r, (const char *[]){g_cfg, "--set", set, "--set", "pipeline.ranks=2", "--set", "pipeline.ordered=false", NULL},
        0);
    double acc = t_final_test_acc(&r, 3);
    if (acc < 0.6)
        fail_msg("two ranks reached only test_acc=%.3f", acc);
    /* pipeline.topology = "auto" is "memory" here: one copy of indices.bin
     * for the node, loaded by one rank's sampler, read by both */
    char ns[SHM_PREFIX_MAX], want[128];
    shm_prefix(ns, NULL, 0); /* this test's shared-memory namespace (tests/CMakeLists.txt) */
    snprintf(want, sizeof want, "topology memory: shared with this node's other ranks (/%s", ns);
    t_expect_log(&r, want);
    t_expect_log(&r, "loaded by another rank's sampler; waited ");
    /* the trainers compared their parameters' digests after every epoch */
    t_expect_log(&r, "gnn-trainer rank 0: the 2 ranks' parameters are identical after epoch 1 (XXH3 ");
    /* out of order with two samplers and two extractors a rank meets the
     * next epoch's batches before its last one of this epoch: the
     * comparison follows the step clock, not the batches (tied to the
     * batches, its all-reduce once met a gradient all-reduce: exit 3) */
    t_rmrf(ck);
    char small[1300], prep[1200], out[4096], ds[1400];
    snprintf(small, sizeof small, "%s/ds-unordered", t_ldir);
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out, "%s synth %s --nodes 3000 --avg-degree 5 --feat-dim 8 --classes 3 --seed 3", prep,
              small) != 0)
        fail_msg("gnnprep synth failed: %s", out);
    snprintf(ds, sizeof ds, "dataset.path=\"%s\"", small);
    run(&r, (const char *[]){g_cfg, "--set", set, "--set", ds, "--set", "pipeline.ranks=2", "--set",
                             "pipeline.ordered=false", "--set", "pipeline.samplers=2", "--set", "pipeline.extractors=2",
                             "--set", "train.batch_size=16", "--set", "pipeline.trainer_threads=1", "--epochs", "30",
                             NULL},
        0);
    t_expect_no_log(&r, "Invalid argument");
}

/* A rank whose parameters drift (SLUICE_FAULT_DRIFT_RANK: one ulp of
 * one parameter) is caught by the comparison after the first epoch: the
 * run stops (exit 3) naming the epoch, and that epoch leaves no
 * checkpoint. */
static void test_ranks_out_of_step(void **state)
{
    (void)state;
    char ck[1300], set[1400], cfg[1300];
    snprintf(ck, sizeof ck, "%s/ck-drift", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    snprintf(cfg, sizeof cfg, "%s/drift.toml", t_ldir);
    write_config(cfg, g_ds, NULL);
    struct t_proc r;
    t_launch_run(&r, (const char *[]){g_stages, "SLUICE_FAULT_DRIFT_RANK=1", NULL},
                 (const char *[]){"--cpu", cfg, "--set", set, "--set", "pipeline.ranks=2", "--epochs", "2", NULL}, 240);
    t_expect_code(&r, 3);
    t_expect_clean(&r);
    t_expect_log(&r, "ranks' parameters differ after epoch 1 (this rank's XXH3 ");
    t_expect_log(&r, "the ranks are out of step, which is a bug");
    char p[1400];
    assert_int_equal(ckpt_path(p, sizeof p, ck, 1), 0);
    if (access(p, F_OK) == 0)
        fail_msg("%s was written from the epoch whose ranks were out of step", p);
}

/* pipeline.topology = "cache" (a neighbour cache of a quarter of the ids,
 * the rest read directly, the next batch's targets read ahead while a
 * batch is sampled, two sampler threads in order) trains the same model,
 * byte for byte, as "memory": the stage's batches are the same over
 * epoch and split boundaries. */
static void test_topology_cache_same(void **state)
{
    (void)state;
    char ds[1300], cfg[1300], prep[1200], out[4096];
    snprintf(ds, sizeof ds, "%s/ds-topo", t_ldir);
    snprintf(cfg, sizeof cfg, "%s/topo.toml", t_ldir);
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out,
              "%s synth %s --nodes 30000 --avg-degree 24 --feat-dim 8 --classes 4 --homophily 0.9 "
              "--train-frac 0.03 --val-frac 0.01 --test-frac 0.01 --seed 3",
              prep, ds) != 0)
        fail_msg("gnnprep synth failed: %s", out);
    write_config(cfg, ds, NULL);
    const char *modes[2] = {"pipeline.topology=\"memory\"", "pipeline.topology=\"cache\""};
    char ck[2][1300], set[2][1400], path[2][1400];
    for (int i = 0; i < 2; i++) {
        struct t_proc r;
        snprintf(ck[i], sizeof ck[i], "%s/ck-topo%d", t_ldir, i);
        snprintf(set[i], sizeof set[i], "train.checkpoint_dir=\"%s\"", ck[i]);
        run(&r,
            (const char *[]){cfg, "--set", set[i], "--set", modes[i], "--set", "pipeline.neighbour_cache_mb=1",
                             "--set", "pipeline.samplers=2", "--epochs", "2", NULL},
            0);
        t_expect_log(&r, i ? "gnn-sampler rank 0: topology cache: neighbour cache of" : "topology memory");
        if (i)
            t_expect_log(&r, "of them targets' lists read ahead");
        assert_int_equal(ckpt_path(path[i], sizeof path[i], ck[i], 2), 0);
    }
    expect_same_tensors(path[0], path[1]);
}

/* --metrics: every line a JSON object of a documented type with its keys;
 * one epoch object per epoch, in order; the final object last. */
static void test_metrics_file(void **state)
{
    (void)state;
    char ck[1300], set[1400], path[1300];
    snprintf(ck, sizeof ck, "%s/ck-metrics", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    snprintf(path, sizeof path, "%s/run.jsonl", t_ldir);
    struct t_proc r;
    run(&r, (const char *[]){g_cfg, "--set", set, "--metrics", path, NULL}, 0);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[4096];
    int epochs = 0, finals = 0, procs[4] = {0}, n = 0;
    bool final_last = false;
    static const char *const stages[] = {"sampler", "extractor", "trainer", "releaser"};
    static const char *const epoch_keys[] = {"\"t\":",        "\"loss\":",     "\"train_acc\":", "\"val_acc\":",
                                             "\"seconds\":",  "\"read_bytes\":", "\"stages\":{",  "\"busy_s\":", "\"hit_rate\":",
                                             "\"train_s\":",  "\"eval_s\":"};
    static const char *const proc_keys[] = {"\"t\":",     "\"rank\":0", "\"pid\":",    "\"state\":",
                                            "\"busy_s\":", "\"wait_s\":", "\"items\":", "\"heartbeat_age_s\":"};
    while (fgets(line, sizeof line, f)) {
        n++;
        line[strcspn(line, "\n")] = '\0';
        if (!t_json_valid(line))
            fail_msg("line %d of %s is not JSON: %s", n, path, line);
        final_last = false;
        if (strstr(line, "{\"type\":\"epoch\",") == line) {
            char want[32];
            snprintf(want, sizeof want, "\"epoch\":%d,", ++epochs);
            assert_non_null(strstr(line, want));
            for (size_t i = 0; i < SL_ARRAY_LEN(epoch_keys); i++)
                if (!strstr(line, epoch_keys[i]))
                    fail_msg("epoch object lacks %s: %s", epoch_keys[i], line);
            /* the epoch's seconds are its training and its evaluation */
            double secs, tr, ev;
            if (sscanf(strstr(line, "\"seconds\":"), "\"seconds\":%lf,\"train_s\":%lf,\"eval_s\":%lf", &secs, &tr,
                       &ev) != 3 ||
                !(tr > 0 && ev >= 0 && fabs(tr + ev - secs) < 1e-5))
                fail_msg("epoch %d: seconds, train_s and eval_s do not add up: %s", epochs, line);
        } else if (strstr(line, "{\"type\":\"process\",") == line) {
            for (size_t i = 0; i < SL_ARRAY_LEN(proc_keys); i++)
                if (!strstr(line, proc_keys[i]))
                    fail_msg("process object lacks %s: %s", proc_keys[i], line);
            for (int k = 0; k < 4; k++) {
                char want[64];
                snprintf(want, sizeof want, "\"stage\":\"%s\"", stages[k]);
                procs[k] += strstr(line, want) != NULL;
            }
        } else if (strstr(line, "{\"type\":\"final\",\"t\":") == line) {
            finals++;
            final_last = true;
            assert_non_null(strstr(line, "\"complete\":true"));
            assert_non_null(strstr(line, "\"test_acc\":0."));
            assert_non_null(strstr(line, "\"epochs\":3,"));
        } else {
            fail_msg("line %d of %s has no known type: %s", n, path, line);
        }
    }
    fclose(f);
    assert_int_equal(epochs, 3);
    assert_int_equal(finals, 1);
    assert_true(final_last);
    for (int k = 0; k < 4; k++)
        if (procs[k] < 1)
            fail_msg("no process object for the %s", stages[k]);
}

/* The index of thread tid's track among the n seen so far (a new one
 * added, its last span ending at 0). */
static int track_of(int tid, int *tids, double *ends, int *n)
{
    int t = 0;
    while (t < *n && tids[t] != tid)
        t++;
    if (t == *n) {
        assert_true(*n < 64);
        tids[*n] = tid;
        ends[(*n)++] = 0;
    }
    return t;
}

/* The index of a span's category among the four stages'. */
static int stage_of(const char *cat, const char *const cats[4])
{
    for (int i = 0; i < 4; i++)
        if (!strcmp(cat, cats[i]))
            return i;
    fail_msg("a span of no stage: '%s'", cat);
    return -1;
}

/* --trace: valid JSON, one track per stage process, and every batch has a
 * sampler, extractor, trainer and releaser span, in that causal order;
 * every stage a start-up span that ends before its first batch span, the
 * sampler a topology span inside its start-up, and the extractor a warm
 * start span when its log says it warmed up. */
static void test_trace_file(void **state)
{
    (void)state;
    char ck[1300], set[1400], path[1300];
    snprintf(ck, sizeof ck, "%s/ck-trace", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    snprintf(path, sizeof path, "%s/run-trace.json", t_ldir);
    struct t_proc r;
    run(&r, (const char *[]){g_cfg, "--set", set, "--epochs", "2", "--trace", path, NULL}, 0);
    static char buf[1 << 22];
    t_slurp(path, buf, sizeof buf);
    assert_true(strlen(buf) < sizeof buf - 1);
    if (!t_json_valid(buf))
        fail_msg("%s is not valid JSON", path);
    enum { MAXB = 4096 };
    static double start[MAXB][4], end[MAXB][4];
    static int seen[MAXB][4];
    memset(seen, 0, sizeof seen);
    static const char *const cats[] = {"sampler", "extractor", "trainer", "releaser"};
    int tracks = 0, threads = 0, ntid = 0, last_tid[64];
    double last_end[64];
    uint64_t maxb = 0;
    double up_start[4] = {0}, up_end[4] = {0}, first_batch[4], topo[2] = {0};
    int ups[4] = {0}, topos = 0, warms = 0;
    for (int k = 0; k < 4; k++)
        first_batch[k] = 1e300;
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, "\"name\":\"process_name\""))
            tracks++;
        if (strstr(line, "\"name\":\"thread_name\""))
            threads++;
        if (!strstr(line, "\"ph\":\"X\""))
            continue;
        unsigned long long b;
        char cat[32], phase[32];
        double ts, dur;
        int pid, tid;
        if (strstr(line, "\"args\":{\"phase\":")) {
            if (sscanf(line + (line[0] == ','),
                       "{\"name\":\"%31[a-z -]\",\"cat\":\"%31[a-z]\",\"ph\":\"X\",\"ts\":%lf,\"dur\":%lf,\"pid\":%d,"
                       "\"tid\":%d",
                       phase, cat, &ts, &dur, &pid, &tid) != 6 ||
                dur < 0)
                fail_msg("unexpected phase line: %s", line);
            track_of(tid, last_tid, last_end, &ntid); /* a phase names its thread's track too */
            int k = stage_of(cat, cats);
            if (!strcmp(phase, "start-up")) {
                ups[k]++;
                up_start[k] = ts;
                up_end[k] = ts + dur;
            } else if (!strcmp(phase, "topology") && k == 0) {
                topos++;
                topo[0] = ts;
                topo[1] = ts + dur;
            } else if (!strcmp(phase, "warm start") && k == 1) {
                warms++;
            } else {
                fail_msg("unexpected phase %s of the %s: %s", phase, cat, line);
            }
            continue;
        }
        if (sscanf(line + (line[0] == ','),
                   "{\"name\":\"batch %llu\",\"cat\":\"%31[a-z]\",\"ph\":\"X\",\"ts\":%lf,\"dur\":%lf,\"pid\":%d,\"tid\":%d", &b,
                   cat, &ts, &dur, &pid, &tid) != 6)
            fail_msg("unexpected span line: %s", line);
        /* Perfetto's JSON importer needs the complete events of one thread
         * to nest; a stage thread works on one batch at a time, so its spans
         * must not overlap at all (in file order, which is time order) */
        int t = track_of(tid, last_tid, last_end, &ntid);
        if (ts + 0.002 < last_end[t])
            fail_msg("thread %d: span of batch %llu starts at %.3f us, before its previous span ends (%.3f us)", tid, b, ts,
                     last_end[t]);
        last_end[t] = ts + dur;
        assert_true(b < MAXB && dur >= 0);
        int k = stage_of(cat, cats);
        seen[b][k]++;
        start[b][k] = ts;
        end[b][k] = ts + dur;
        if (ts < first_batch[k])
            first_batch[k] = ts;
        if (b > maxb)
            maxb = b;
    }
    assert_int_equal(tracks, 4);
    for (int k = 0; k < 4; k++) {
        if (ups[k] != 1)
            fail_msg("the %s has %d start-up spans", cats[k], ups[k]);
        if (up_end[k] > first_batch[k] + 0.002)
            fail_msg("the %s's start-up ends at %.3f us, after its first batch span starts (%.3f us)", cats[k], up_end[k],
                     first_batch[k]);
    }
    assert_int_equal(topos, 1);
    if (topo[0] + 0.002 < up_start[0] || topo[1] > up_end[0] + 0.002)
        fail_msg("the sampler's topology span (%.3f..%.3f us) is not inside its start-up (%.3f..%.3f us)", topo[0], topo[1],
                 up_start[0], up_end[0]);
    char wline[512];
    assert_int_equal(warms, t_last_line(&r, "gnn-extractor rank 0: warm start: ", wline, sizeof wline) ? 1 : 0);
    assert_int_equal(threads, ntid); /* every thread's track is named */
    assert_true(maxb > 10);
    for (uint64_t b = 0; b <= maxb; b++)
        for (int k = 0; k < 4; k++) {
            if (seen[b][k] != 1)
                fail_msg("batch %llu has %d %s spans", (unsigned long long)b, seen[b][k], cats[k]);
            if (k > 0 && end[b][k - 1] > start[b][k] + 0.002)
                fail_msg("batch %llu: the %s span ends at %.3f us, after the %s span starts (%.3f us)",
                         (unsigned long long)b, cats[k - 1], end[b][k - 1], cats[k], start[b][k]);
        }
}

/* Not a terminal: plain progress lines while epochs run (period set short
 * for the test), each with the batch count against the run's total. */
static void test_progress_lines(void **state)
{
    (void)state;
    char ck[1300], set[1400], line[512];
    snprintf(ck, sizeof ck, "%s/ck-progress", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc r;
    t_launch_run(&r, (const char *[]){g_stages, "SLUICE_PROGRESS_EVERY=0", NULL},
                 (const char *[]){"--cpu", g_cfg, "--set", set, "--epochs", "600", NULL}, 240);
    t_expect_code(&r, 0);
    t_expect_clean(&r);
    if (!t_last_line(&r, "epoch ", line, sizeof line) || !strstr(line, "loss="))
        fail_msg("no epoch line in %s", r.log);
    static char buf[1 << 20];
    t_slurp(r.log, buf, sizeof buf);
    const char *p = strstr(buf, "/600 ");
    for (; p; p = strstr(p + 1, "/600 ")) { /* a progress line, not an epoch line */
        const char *b = strstr(p, " batches  "), *nl = strchr(p, '\n');
        if (b && (!nl || b < nl))
            break;
    }
    if (!p)
        fail_msg("no progress line in %s (the run took %.1f s)", r.log, r.t_end - r.t0);
    unsigned long long done, total;
    int pct;
    char bar[32];
    assert_int_equal(sscanf(p, "/600 %d%% [%20[#.]] %llu/%llu batches", &pct, bar, &done, &total), 4);
    /* within one epoch: 25 training and 13 validation batches (and 13 test batches in the last) */
    assert_true(done <= total && (total == 25 + 13 || total == 25 + 13 + 13) && pct >= 0 && pct <= 100);
    assert_int_equal(strlen(bar), 20);
    assert_non_null(strstr(p, " batches/s"));
    assert_non_null(strstr(p, "run ETA "));
    assert_non_null(strstr(p, "queues extract "));
    /* stdout holds only the lines for scripts: epoch lines and the final line */
    char cmd[4096], *out = malloc(1 << 20);
    assert_non_null(out);
    snprintf(cmd, sizeof cmd, "{ %s SLUICE_PROGRESS_EVERY=0 %s --cpu %s --set '%s' --epochs 200 2>/dev/null; }", g_stages,
             t_launcher, g_cfg, set);
    assert_int_equal(t_run(out, 1 << 20, "%s", cmd), 0);
    for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"))
        if (strncmp(l, "epoch ", 6) && strncmp(l, "test_acc=", 9))
            fail_msg("stdout holds a line that is not an epoch line or the final line: '%s'", l);
        else if (strstr(l, " batches/s"))
            fail_msg("a progress line reached stdout: '%s'", l);
    free(out);
}

/* On a terminal: the progress line is live (each refresh starts with
 * "\r\033[K" and rewrites it in place, never a newline of its own), it is
 * cleared before every epoch line, and the run still ends with the final
 * line. The launcher runs on a pseudo-terminal (t_launch_pty). */
static void test_progress_live(void **state)
{
    (void)state;
    char ck[1300], set[1400];
    snprintf(ck, sizeof ck, "%s/ck-live", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc r;
    t_launch_pty = true;
    t_launch_run(&r, (const char *[]){g_stages, NULL}, (const char *[]){"--cpu", g_cfg, "--set", set, "--epochs", "300", NULL},
                 240);
    t_launch_pty = false;
    t_expect_code(&r, 0);
    t_expect_clean(&r);
    static char buf[1 << 22];
    t_slurp(r.log, buf, sizeof buf);
    size_t live = 0, cleared_epochs = 0, epochs = 0;
    for (const char *p = buf; (p = strstr(p, " batches  ")); p++) {
        /* every progress line is a live one: "\r\033[Kepoch E/300  P% [...] D/T batches ..." */
        const char *start = p;
        while (start > buf && start[-1] != '\n' && start[-1] != '\r')
            start--;
        if (start == buf || start[-1] != '\r' || strncmp(start, "\033[Kepoch ", 9))
            fail_msg("progress line at byte %td is not rewritten in place (no \\r\\033[K before it): %s", start - buf, r.log);
        const char *end = p + strcspn(p, "\r\n");
        if (*end == '\n' || (end[0] == '\r' && end[1] == '\n'))
            fail_msg("progress line at byte %td ends with a newline; a live line never does", start - buf);
        if (!strstr(p, " batches/s") || !strstr(p, "run ETA ") || !strstr(p, " MB/s  queues extract "))
            fail_msg("progress line at byte %td lacks rate, ETA, MB/s or queues", start - buf);
        live++;
    }
    for (const char *p = buf; (p = strstr(p, " loss=")); p++) {
        const char *start = p;
        while (start > buf && start[-1] != '\n' && start[-1] != '\r')
            start--;
        epochs++;
        /* an epoch line follows either a newline or the clearing of a live line */
        if (start > buf && start[-1] == '\r' && !strncmp(start, "\033[K", 3))
            cleared_epochs++;
        else if (start != buf && start[-1] != '\n')
            fail_msg("epoch line at byte %td is glued to a progress line", start - buf);
    }
    if (live == 0)
        fail_msg("no live progress line in %s (the run took %.1f s)", r.log, r.t_end - r.t0);
    assert_int_equal(epochs, 300);
    assert_true(cleared_epochs >= 1);
    /* the final line is a line of its own after the last epoch line (on a
     * terminal stdout and the launcher's stderr notes share the screen) */
    const char *last = NULL;
    for (const char *p = buf; (p = strstr(p, "\ntest_acc=")); p++)
        last = p + 1;
    double test, val, secs;
    unsigned e;
    const char *last_epoch = NULL;
    for (const char *p = buf; (p = strstr(p, " loss=")); p++)
        last_epoch = p;
    if (!last || last < last_epoch ||
        sscanf(last, "test_acc=%lf val_acc=%lf epochs=%u seconds=%lf", &test, &val, &e, &secs) != 4 || e != 300)
        fail_msg("no final line after the last epoch line on the terminal (%s)", r.log);
}

static void test_resume_refused(void **state)
{
    (void)state;
    char ck[1300], set[1400];
    snprintf(ck, sizeof ck, "%s/ck-none", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc r;
    run(&r, (const char *[]){g_cfg, "--set", set, "--resume", NULL}, 2);
    t_expect_log(&r, "--resume: no checkpoint in ");
    /* a checkpoint of another run: the launcher refuses it, naming the key */
    snprintf(ck, sizeof ck, "%s/ck-learn", t_ldir); /* 3 epochs of hidden = 32 */
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    run(&r, (const char *[]){g_cfg, "--set", set, "--set", "model.hidden=16", "--epochs", "5", "--resume", NULL}, 2);
    t_expect_log(&r, "belongs to another run");
    t_expect_log(&r, "model.hidden: 32 -> 16");
    /* named explicitly (--resume-from), the trainer still refuses another
     * model, naming both */
    char file[1400], other[1400];
    snprintf(file, sizeof file, "%s/epoch-000003.safetensors", ck);
    snprintf(other, sizeof other, "train.checkpoint_dir=\"%s/ck-other\"", t_ldir);
    run(&r, (const char *[]){g_cfg, "--set", other, "--set", "model.hidden=16", "--epochs", "5", "--resume-from", file,
                             NULL},
        3);
    t_expect_log(&r, "holds a model with kind=sage layers=2");
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("train") != 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_perm, sizeof g_perm, "%s/ds-perm", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
    t_real_stages(g_stages, sizeof g_stages);
    char prep[1200], out[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out,
              "%s synth %s --nodes 4000 --avg-degree 8 --feat-dim 16 --classes 4 --homophily 0.9 "
              "--feature-noise 1.0 --train-frac 0.4 --val-frac 0.2 --test-frac 0.2 --seed 11",
              prep, g_ds) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", out);
        return -1;
    }
    /* the same graph with its labels shuffled, and dataset.toml recording
     * the shuffled file's checksum (the launcher verifies the labels') */
    if (t_run(out, sizeof out, "cp -r '%s' '%s'", g_ds, g_perm) != 0)
        return -1;
    char path[1400];
    snprintf(path, sizeof path, "%s/labels.bin", g_perm);
    FILE *f = fopen(path, "r+b");
    if (!f)
        return -1;
    int32_t lab[4000];
    if (fread(lab, sizeof lab[0], 4000, f) != 4000)
        return -1;
    uint64_t s = 12345;
    for (int i = 3999; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        int j = (int)((s >> 33) % (uint64_t)(i + 1));
        int32_t x = lab[i];
        lab[i] = lab[j];
        lab[j] = x;
    }
    rewind(f);
    if (fwrite(lab, sizeof lab[0], 4000, f) != 4000)
        return -1;
    fclose(f);
    uint64_t h;
    if (file_xxh3(path, &h, NULL, out, sizeof out) != 0 ||
        t_run(out, sizeof out, "sed -i '/^\\[labels\\]/,/^\\[/s/^xxh3 = .*/xxh3 = \"%016llx\"/' '%s/dataset.toml'",
              (unsigned long long)h, g_perm) != 0)
        return -1;
    write_config(g_cfg, g_ds, NULL);
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_sage_learns, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_deterministic, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_warm_start_same, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_warm_start_refused, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_warm_hot_set_same, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_lr_schedule_and_clip, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_early_stop, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_resume_after_kill, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_permuted_labels_chance, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_two_ranks, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_ranks_out_of_step, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_topology_cache_same, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_resume_refused, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_metrics_file, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_trace_file, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_progress_lines, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_progress_live, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
