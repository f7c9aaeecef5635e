/* test_integrity.c - nothing wrong trains silently (issue 17, items 1, 2
 * and 4; docs/reliability.md): gnnlaunch --cpu with the real stages
 * (build/bin) on a small synthetic dataset.
 *
 * Cases:
 *   - launch verification: a dataset damaged after a good launch (or after
 *     `gnnprep check`) is refused before anything starts (exit 2), naming
 *     the file and, for content rules, the first offending ids: NaN and
 *     infinite feature rows, zeroed rows, another dataset's features of
 *     the same size, in-range neighbour ids rewritten at random, a wrong
 *     checksum in dataset.toml, an out-of-range neighbour id, labels at or
 *     above `classes`, `classes` edited in dataset.toml, duplicate ids in
 *     a split, the validation split overlapping the training split;
 *     --skip-verify runs anyway and says so;
 *   - an unchanged dataset is read once: the second launch (and a launch
 *     after gnnprep check) verifies nothing;
 *   - features.bin and indices.bin overwritten in place (dd conv=notrunc)
 *     during a run: exit 3 naming the file, no checkpoint from an epoch
 *     after the change (at most the one whose check came before the
 *     write), and --resume afterwards refused (exit 2) naming the file.
 * Every run leaves nothing in /dev/shm or its run directory. */
#include "t_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sys/stat.h>
#include <time.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ops/ckpt.h"
#include "t_launch.h"

#define CASE_ALARM_S 240
#define NODES 4000

static char g_ds[1200], g_other[1200], g_stages[1300];

static void write_config(const char *path, const char *ds, const char *ck)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"sage\"\nhidden = 32\nfanouts = [8, 4]\n\n"
            "[train]\nbatch_size = 64\nepochs = 2\nlr = 0.01\nseed = 5\ncheckpoint_dir = \"%s\"\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 8\nstaging_mb = 4\nio_depth = 16\n"
            "ordered = true\n",
            ds, ck);
    fclose(f);
}

/* gnnlaunch --cpu cfg [--epochs E] [more...] */
static void start(struct t_proc *r, const char *cfg, int epochs, const char *more)
{
    char ep[32];
    snprintf(ep, sizeof ep, "%d", epochs);
    const char *argv[8] = {"--cpu", cfg, "--epochs", ep, more, NULL};
    t_launch_start(r, (const char *[]){g_stages, NULL}, argv);
}

static void run(struct t_proc *r, const char *cfg, int epochs, const char *more, int want)
{
    start(r, cfg, epochs, more);
    t_launch_wait(r, 120);
    t_expect_code(r, want);
    t_expect_clean(r);
}

/* A fresh copy of the good dataset at dir (new inodes: no valid record). */
static void copy_fresh(const char *dir)
{
    char out[4096];
    assert_int_equal(t_run(out, sizeof out, "rm -rf '%s' && cp -r '%s' '%s'", dir, g_ds, dir), 0);
    usleep(20000); /* past the clock tick of the copy, so a verification is recorded */
}

static void poke(const char *dir, const char *file, off_t off, const void *p, size_t n)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, p, n, off), (ssize_t)n);
    close(fd);
}

static void peek(const char *dir, const char *file, off_t off, void *p, size_t n)
{
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(pread(fd, p, n, off), (ssize_t)n);
    close(fd);
}

/* ---- the damage, one kind per case (row stride 64: dim 16, f32) ---- */

static void d_nan(const char *ds)
{
    float x[2] = {NAN, NAN};
    poke(ds, "features.bin", 64 * 10 + 12, x, sizeof x);
}
static void d_inf(const char *ds)
{
    float x = INFINITY;
    poke(ds, "features.bin", 64 * 3000, &x, 4);
}
static void d_zero_rows(const char *ds)
{
    static const char z[64 * 20];
    poke(ds, "features.bin", 64 * 100, z, sizeof z);
}
static void d_other_features(const char *ds)
{
    char out[4096];
    assert_int_equal(t_run(out, sizeof out, "cp '%s/features.bin' '%s/features.bin'", g_other, ds), 0);
}
static void d_random_ids(const char *ds)
{
    uint32_t ids[64];
    uint64_t s = 99;
    for (size_t i = 0; i < SL_ARRAY_LEN(ids); i++)
        ids[i] = (uint32_t)(sl_splitmix64(&s) % NODES);
    poke(ds, "indices.bin", 4096, ids, sizeof ids);
}
static void d_wrong_checksum(const char *ds)
{
    struct dataset_meta m;
    char err[1024];
    assert_int_equal(dataset_meta_read(ds, &m, true, err, sizeof err), 0);
    m.f[DATASET_INDICES].xxh3 ^= 0x100;
    assert_int_equal(dataset_meta_write(ds, &m, err, sizeof err), 0);
}
static void d_id_range(const char *ds)
{
    uint32_t x = NODES + 5;
    poke(ds, "indices.bin", 4 * 100, &x, 4);
}
static void d_label(const char *ds)
{
    int32_t x[2] = {4, 9};
    poke(ds, "labels.bin", 4 * 5, &x[0], 4);
    poke(ds, "labels.bin", 4 * 77, &x[1], 4);
}
static void d_classes(const char *ds)
{
    char out[4096];
    assert_int_equal(t_run(out, sizeof out, "sed -i 's/^classes = 4$/classes = 2/' '%s/dataset.toml' && grep -q "
                                            "'^classes = 2$' '%s/dataset.toml'", ds, ds),
                     0);
}
static void d_dup(const char *ds)
{
    uint32_t x;
    peek(ds, "train.bin", 0, &x, 4);
    poke(ds, "train.bin", 4 * 3, &x, 4);
}
static void d_overlap(const char *ds)
{
    uint32_t x[3];
    peek(ds, "train.bin", 4 * 10, x, sizeof x);
    poke(ds, "val.bin", 0, x, sizeof x);
}

/* The launch that must refuse dataset ds of config cfg: exit 2 with every
 * needle, before anything was created. */
static void expect_refused(const char *cfg, const char *what, const char *const *needles)
{
    struct t_proc r;
    run(&r, cfg, 1, NULL, 2);
    for (int i = 0; needles[i]; i++)
        t_expect_log(&r, needles[i]);
    t_expect_no_log(&r, "batch arena per rank");
    (void)what;
}

static void test_refused_at_launch(void **state)
{
    (void)state;
    char ds[1300], cfg[1300], ck[1300], prep[1200], out[8192];
    snprintf(ds, sizeof ds, "%s/ds-bad", t_ldir);
    snprintf(cfg, sizeof cfg, "%s/bad.toml", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-bad", t_ldir);
    t_bin(prep, sizeof prep, "gnnprep");
    write_config(cfg, ds, ck);
    const struct {
        const char *what;
        void (*damage)(const char *);
        const char *needles[4];
    } cases[] = {
        {"NaN row", d_nan, {"features.bin: 1 rows hold NaN or infinite values: node 10 (feature 3)", NULL}},
        {"infinite row", d_inf, {"features.bin: 1 rows hold NaN or infinite values: node 3000 (feature 0)", NULL}},
        {"zeroed rows", d_zero_rows, {"features.bin: checksum mismatch", NULL}},
        {"another dataset's features", d_other_features, {"features.bin: checksum mismatch", NULL}},
        {"random in-range neighbour ids", d_random_ids, {"indices.bin: ", "regenerate the dataset"}},
        {"wrong recorded checksum", d_wrong_checksum, {"indices.bin: checksum mismatch", NULL}},
        {"neighbour id out of range", d_id_range,
         {"indices.bin: 1 in-neighbour ids outside [0, 4000): edge 100 of node ", "has id 4005"}},
        {"labels at or above classes", d_label,
         {"labels.bin: 2 labels outside [-1, 4): node 5 (label 4), node 77 (label 9)", NULL}},
        {"classes edited", d_classes, {"labels.bin: ", "labels outside [-1, 2): node ", "says classes = 2"}},
        {"duplicate ids in a split", d_dup, {"train.bin: 1 nodes appear more than once: node ", NULL}},
        {"validation overlaps training", d_overlap,
         {"val.bin: 3 nodes are also in train.bin (splits must be disjoint): node ", NULL}},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        copy_fresh(ds);
        struct t_proc r;
        if (i % 2 == 0) { /* verified by a good launch ... */
            run(&r, cfg, 1, NULL, 0);
            t_expect_log(&r, "gnnlaunch: dataset ");
            t_expect_log(&r, " verified: ");
        } else { /* ... or by gnnprep check */
            if (t_run(out, sizeof out, "%s check -q '%s'", prep, ds) != 0)
                fail_msg("gnnprep check: %s", out);
        }
        cases[i].damage(ds);
        fprintf(stderr, "test_integrity: %s\n", cases[i].what);
        expect_refused(cfg, cases[i].what, cases[i].needles);
        if (i == 2) { /* zeroed rows: --skip-verify trains on them, saying so */
            run(&r, cfg, 1, "--skip-verify", 0);
            t_expect_log(&r, "warning: --skip-verify: the contents of ");
        }
    }
    t_rmrf(ds);
    t_rmrf(ck);
}

/* An unchanged dataset is read once; gnnprep check's pass counts. */
static void test_verified_once(void **state)
{
    (void)state;
    char ds[1300], cfg[1300], ck[1300], prep[1200], out[4096], rec[1400];
    snprintf(ds, sizeof ds, "%s/ds-once", t_ldir);
    snprintf(cfg, sizeof cfg, "%s/once.toml", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-once", t_ldir);
    snprintf(rec, sizeof rec, "%s/verified", ds);
    t_bin(prep, sizeof prep, "gnnprep");
    write_config(cfg, ds, ck);
    copy_fresh(ds);
    struct t_proc r;
    run(&r, cfg, 1, NULL, 0);
    t_expect_log(&r, " verified: ");
    t_expect_log(&r, "recorded in ");
    assert_int_equal(access(rec, F_OK), 0);
    for (int i = 0; i < 2; i++) {
        run(&r, cfg, 1, NULL, 0);
        t_expect_no_log(&r, " verified: ");
    }
    copy_fresh(ds);
    assert_int_equal(t_run(out, sizeof out, "%s check '%s'", prep, ds), 0);
    assert_non_null(strstr(out, "recorded in "));
    run(&r, cfg, 1, NULL, 0);
    t_expect_no_log(&r, " verified: ");
    t_rmrf(ds);
    t_rmrf(ck);
}

/* Checkpoints in dir modified after t (CLOCK_REALTIME ns), and in all. */
static int ckpts_after(const char *dir, int64_t t, int *all)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    *all = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "epoch-", 6) || !strstr(e->d_name, ".safetensors") || strstr(e->d_name, "partial"))
            continue;
        char p[2400];
        struct stat st;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        assert_int_equal(stat(p, &st), 0);
        (*all)++;
        n += (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec > t;
    }
    closedir(d);
    return n;
}

static int64_t now_real_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void test_changed_during_run(void **state)
{
    (void)state;
    const char *files[] = {"features.bin", "indices.bin"};
    for (int f = 0; f < 2; f++) {
        char ds[1300], cfg[1300], ck[1300], first[1400], out[4096], want[256];
        snprintf(ds, sizeof ds, "%s/ds-run", t_ldir);
        snprintf(cfg, sizeof cfg, "%s/run-%d.toml", t_ldir, f);
        snprintf(ck, sizeof ck, "%s/ck-run-%d", t_ldir, f);
        write_config(cfg, ds, ck);
        copy_fresh(ds);
        assert_int_equal(ckpt_path(first, sizeof first, ck, 1), 0);
        struct t_proc r;
        start(&r, cfg, 200, NULL);
        double t0 = t_now();
        while (access(first, F_OK) != 0) {
            if (t_now() - t0 > 60)
                fail_msg("no first checkpoint %s", first);
            usleep(1000);
        }
        /* 4 KiB in the middle of the file rewritten in place: random
         * features, or random neighbour ids that are all in range (so that
         * no batch fails on them and only the dataset check can stop it) */
        if (f == 0) {
            assert_int_equal(t_run(out, sizeof out, "dd if=/dev/urandom of='%s/%s' bs=4096 count=1 seek=2 "
                                                    "conv=notrunc status=none", ds, files[f]),
                             0);
        } else {
            char ids_path[1400];
            uint32_t ids[1024];
            uint64_t s = 7;
            for (size_t i = 0; i < SL_ARRAY_LEN(ids); i++)
                ids[i] = (uint32_t)(sl_splitmix64(&s) % NODES);
            snprintf(ids_path, sizeof ids_path, "%s/ids.bin", t_ldir);
            FILE *idf = fopen(ids_path, "w");
            assert_non_null(idf);
            assert_int_equal(fwrite(ids, sizeof ids, 1, idf), 1);
            fclose(idf);
            assert_int_equal(t_run(out, sizeof out, "dd if='%s' of='%s/%s' bs=4096 count=1 seek=2 conv=notrunc "
                                                    "status=none", ids_path, ds, files[f]),
                             0);
        }
        int64_t changed = now_real_ns();
        t_launch_wait(&r, 120);
        t_expect_code(&r, 3);
        snprintf(want, sizeof want, "/%s changed during the run: it was written (modification time ", files[f]);
        t_expect_log(&r, want);
        t_expect_log(&r, "no checkpoint is written from it");
        t_expect_clean(&r);
        int all, late = ckpts_after(ck, changed, &all);
        /* at most the checkpoint whose epoch boundary was checked before
         * the write could land after it; none of a later epoch */
        if (late > 1 || all >= 200)
            fail_msg("%s: %d checkpoints of %d written after the change", files[f], late, all);
        /* --resume: the launch verification finds the changed bytes */
        start(&r, cfg, 200, "--resume");
        t_launch_wait(&r, 60);
        t_expect_code(&r, 2);
        snprintf(want, sizeof want, "%s/%s: ", ds, files[f]);
        t_expect_log(&r, want);
        t_expect_no_log(&r, "batch arena per rank");
        t_expect_clean(&r);
        t_rmrf(ck);
    }
}

/* ---- fixture ---------------------------------------------------------------------------- */

static int synth(const char *out, double noise)
{
    char prep[1200], log[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(log, sizeof log,
              "%s synth %s --nodes %d --avg-degree 8 --feat-dim 16 --classes 4 --homophily 0.9 --feature-noise %.1f "
              "--train-frac 0.4 --val-frac 0.2 --test-frac 0.2 --seed 11",
              prep, out, NODES, noise) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", log);
        return -1;
    }
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("integrity") != 0)
        return -1;
    t_real_stages(g_stages, sizeof g_stages);
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_other, sizeof g_other, "%s/ds-other", t_ldir);
    return synth(g_ds, 1.0) || synth(g_other, 1.5) ? -1 : 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_refused_at_launch, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_verified_once, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_changed_during_run, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
