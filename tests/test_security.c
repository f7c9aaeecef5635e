/* test_security.c - what a run lets other users see or change, and what a
 * damaged shared segment can make an attaching process do.
 *
 *   - a live run (test stages, two ranks) under umask 0, so that nothing
 *     passes thanks to a friendly umask: every /dev/shm segment of the run
 *     (metrics, rings, arenas, feature buffers, all-reduce, results) is a
 *     regular file of ours with mode 0600; the run directory and its base
 *     are 0700 and ours; the control and metrics sockets are sockets of
 *     ours with mode 0600; nothing in the run directory (state, config,
 *     the stages' trace spans) is readable or writable by group or
 *     others; the --metrics file, and the --trace file written when the
 *     run ends, have no group/other write;
 *   - a training run with the real stages under umask 0: the dataset gnnprep
 *     wrote, the checkpoint directory and files, the --metrics and --trace
 *     files have no group/other write;
 *   - a segment under a run's name that another user owns is not attached;
 *   - headers a damaged or hostile process wrote: a results page whose rank
 *     count grows after attach is still indexed by the count checked at
 *     attach; one whose count does not fit its segment is refused; a
 *     feature buffer whose total is cut below its node map (rows on the
 *     device) or below its row offset (rows here) is refused
 *     (tests/fuzz/fuzz_ipc.c found the first).
 *
 * The tests run as whatever user runs the suite (root included: modes are
 * checked, not access), so they assert modes and owners, not denials. */
#include "t_util.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <sys/stat.h>

#include "core/util.h"
#include "ipc/results.h"
#include "ipc/shm.h"
#include "stages/featbuf.h"
#include "t_launch.h"

#define CASE_ALARM_S 240

static char g_ds[1200], g_cfg[1200], g_train_cfg[1200];
static char g_real_stages[1300]; /* SLUICE_STAGE_DIR=<the real stages in build/bin> */

/* Sets the umask to 0 for one case; the launcher and stages inherit it. */
static mode_t g_old_umask;
static int umask0_setup(void **state)
{
    g_old_umask = umask(0);
    return t_launch_case_setup(state);
}
static int umask0_teardown(void **state)
{
    umask(g_old_umask);
    return t_launch_case_teardown(state);
}

static void expect_mode(const char *path, mode_t type, mode_t want)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        fail_msg("%s: %s", path, strerror(errno));
    if ((st.st_mode & S_IFMT) != type)
        fail_msg("%s: file type %o, expected %o", path, (unsigned)(st.st_mode & S_IFMT), (unsigned)type);
    if (st.st_uid != geteuid())
        fail_msg("%s: owned by uid %u, not by us (%u)", path, (unsigned)st.st_uid, (unsigned)geteuid());
    if ((st.st_mode & 07777) != want)
        fail_msg("%s: mode %04o, expected %04o", path, (unsigned)(st.st_mode & 07777), (unsigned)want);
}

/* No write permission for group or others (any file type). */
static void expect_no_go_write(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        fail_msg("%s: %s", path, strerror(errno));
    if (st.st_uid != geteuid())
        fail_msg("%s: owned by uid %u, not by us (%u)", path, (unsigned)st.st_uid, (unsigned)geteuid());
    if (S_ISLNK(st.st_mode))
        return; /* a link's own mode is always 0777 and never checked (best/latest.safetensors) */
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        fail_msg("%s: mode %04o lets group or others write it", path, (unsigned)(st.st_mode & 07777));
}

/* Every entry of dir (not recursing) through check; returns how many. */
static int each_entry(const char *dir, void (*check)(const char *))
{
    DIR *d = opendir(dir);
    if (!d)
        fail_msg("%s: %s", dir, strerror(errno));
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        check(p);
        n++;
    }
    closedir(d);
    return n;
}

static void expect_private_entry(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        fail_msg("%s: %s", path, strerror(errno));
    if (st.st_uid != geteuid() || (st.st_mode & 077))
        fail_msg("%s: mode %04o (uid %u): group or others have access", path, (unsigned)(st.st_mode & 07777),
                 (unsigned)st.st_uid);
}

static void test_live_run_private(void **state)
{
    (void)state;
    struct t_proc r;
    char mfile[1300], mset[1400], tfile[1300], tset[1400];
    snprintf(mfile, sizeof mfile, "%s/live-metrics.jsonl", t_ldir);
    snprintf(mset, sizeof mset, "--metrics=%s", mfile);
    snprintf(tfile, sizeof tfile, "%s/live-trace.json", t_ldir);
    snprintf(tset, sizeof tset, "--trace=%s", tfile);
    const char *env[] = {"SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=1000", NULL};
    t_launch_start(&r, env,
                   (const char *[]){g_cfg, "--run-name", "private", "--set", "pipeline.ranks=2", mset, tset, NULL});
    struct t_kid k[T_MAX_KIDS];
    int n = t_wait_flowing(&r, 8, k, 5);
    assert_int_equal(n, 8);

    /* every segment of the run: ours, 0600 */
    static const char *const objects[] = {"metrics",  "results",    "allreduce", "staging",    "r0.extract",
                                          "r0.train", "r0.release", "r0.arena",  "r0.featbuf", "r1.extract",
                                          "r1.train", "r1.release", "r1.arena",  "r1.featbuf"};
    char path[1500], ns[SHM_PREFIX_MAX];
    shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
    for (size_t i = 0; i < SL_ARRAY_LEN(objects); i++) {
        snprintf(path, sizeof path, SHM_DIR "/%s%s.%s", ns, k[0].run, objects[i]);
        expect_mode(path, S_IFREG, 0600);
    }
    char prefix[SHM_NAME_MAX];
    snprintf(prefix, sizeof prefix, "%s%s.", ns, k[0].run);
    assert_int_equal(t_shm_count(prefix), (int)SL_ARRAY_LEN(objects)); /* and no others */

    /* the run directory, its base and everything in it: ours, no access for others */
    expect_mode(t_base, S_IFDIR, 0700);
    snprintf(path, sizeof path, "%s/private", t_base);
    expect_mode(path, S_IFDIR, 0700);
    snprintf(path, sizeof path, "%s/private/control", t_base);
    expect_mode(path, S_IFSOCK, 0600);
    snprintf(path, sizeof path, "%s/private/metrics", t_base);
    expect_mode(path, S_IFSOCK, 0600);
    snprintf(path, sizeof path, "%s/private", t_base);
    assert_true(each_entry(path, expect_private_entry) >= 4); /* run.toml, config.toml, the sockets, trace spans */

    /* --metrics is open and written to: no group/other write */
    expect_no_go_write(mfile);

    kill(r.pid, SIGINT);
    t_launch_wait(&r, 30);
    t_expect_code(&r, 130);
    t_expect_clean(&r);
    expect_no_go_write(tfile);
}

static void test_training_files_private(void **state)
{
    (void)state;
    char ds[1300], ck[1300], set[1400], mfile[1300], tfile[1300], mset[1400], tset[1400], path[1500], out[4096];
    /* a dataset written under umask 0 */
    snprintf(ds, sizeof ds, "%s/ds-umask0", t_ldir);
    char prep[1200];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out, "%s synth %s --nodes 2000 --avg-degree 6 --feat-dim 8 --classes 3 --seed 3", prep, ds))
        fail_msg("gnnprep synth failed: %s", out);
    expect_no_go_write(ds);
    assert_int_equal(each_entry(ds, expect_no_go_write), 8); /* dataset.toml and 7 binaries */

    snprintf(ck, sizeof ck, "%s/ck-umask0", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    snprintf(mfile, sizeof mfile, "%s/train-metrics.jsonl", t_ldir);
    snprintf(tfile, sizeof tfile, "%s/train-trace.json", t_ldir);
    snprintf(mset, sizeof mset, "--metrics=%s", mfile);
    snprintf(tset, sizeof tset, "--trace=%s", tfile);
    char dset[1400];
    snprintf(dset, sizeof dset, "dataset.path=\"%s\"", ds);
    struct t_proc r;
    t_launch_run(&r, (const char *[]){g_real_stages, NULL},
                 (const char *[]){"--cpu", g_train_cfg, "--set", dset, "--set", set, mset, tset, NULL}, 180);
    t_expect_code(&r, 0);
    t_expect_clean(&r);

    expect_no_go_write(ck);
    assert_int_equal(each_entry(ck, expect_no_go_write), 5); /* epoch-000001, epoch-000002, .lock, best, latest */
    snprintf(path, sizeof path, "%s/epoch-000002.safetensors", ck);
    assert_true(t_exists(path));
    expect_no_go_write(mfile);
    expect_no_go_write(tfile);
}

/* ---- damaged headers -------------------------------------------------------------------- */

static void test_results_header_changed(void **state)
{
    (void)state;
    char run[SHM_RUN_ID_MAX], err[512], name[SHM_NAME_MAX];
    assert_int_equal(shm_run_id_new(run, sizeof run), 0);
    struct results w, a;
    assert_int_equal(results_create(&w, run, "results", 2, 3, err, sizeof err), 0);
    assert_int_equal(shm_name(name, sizeof name, run, "results", err, sizeof err), 0);
    assert_int_equal(results_attach(&a, name, err, sizeof err), 0);
    assert_int_equal(a.ranks, 2);

    /* a writer grows the rank count after the attach: the attacher keeps
     * using the count it checked (record 500000 would lie 4 GB past the
     * segment, and reading the sum over 10^6 ranks would too) */
    w.hdr->ranks = 1000000;
    assert_null(results_slot(&a, 500000, 0));
    struct results_rec *rec = results_slot(&a, 1, 0);
    assert_non_null(rec);
    rec->train_batches = 7;
    results_publish(rec, 0);
    rec = results_slot(&a, 0, 0);
    rec->train_batches = 5;
    results_publish(rec, 0);
    struct results_rec sum;
    assert_true(results_epoch(&a, 0, &sum));
    assert_int_equal(sum.train_batches, 12);
    results_free(&a);

    /* a page whose count does not fit its segment is refused */
    assert_int_equal(results_attach(&a, name, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "not a results page"));
    w.hdr->ranks = 2;
    assert_int_equal(results_attach(&a, name, err, sizeof err), 0);
    results_free(&a);
    results_free(&w);
    assert_int_equal(shm_run_unlink(run), 1);
}

/* A segment under one of our names but owned by someone else (a file
 * another user put in the world-writable /dev/shm) is not attached. Making
 * one needs chown, so the case is skipped when not run as root. */
static void test_foreign_segment_refused(void **state)
{
    (void)state;
    char run[SHM_RUN_ID_MAX], err[512], path[SHM_NAME_MAX + 16];
    assert_int_equal(shm_run_id_new(run, sizeof run), 0);
    struct shm_seg a, b;
    assert_int_equal(shm_seg_create(&a, run, "planted", SHM_KIND_RAW, 4096, err, sizeof err), 0);
    snprintf(path, sizeof path, SHM_DIR "%s", a.name);
    assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_RAW, 0, err, sizeof err), 0); /* ours: fine */
    shm_seg_detach(&b);
    bool owned_by_other = chown(path, 65534, 65534) == 0;
    if (owned_by_other) {
        assert_int_equal(shm_seg_attach(&b, a.name, SHM_KIND_RAW, 0, err, sizeof err), -EPERM);
        assert_non_null(strstr(err, "belongs to uid 65534, not to you"));
        assert_null(b.hdr);
    }
    shm_seg_detach(&a);
    assert_int_equal(shm_run_unlink(run), 1);
    if (!owned_by_other)
        skip(); /* not root: cannot give the file away */
}

/* The u64 at a 8-byte aligned offset in the first page of mem that equals
 * v (a private header field found by its value); fails unless exactly one. */
static uint64_t *find_u64(void *mem, uint64_t v)
{
    uint64_t *p = mem, *hit = NULL;
    for (size_t i = 0; i < 4096 / 8; i++)
        if (p[i] == v) {
            if (hit)
                fail_msg("two header words hold %llu", (unsigned long long)v);
            hit = &p[i];
        }
    if (!hit)
        fail_msg("no header word holds %llu", (unsigned long long)v);
    return hit;
}

static void test_featbuf_header_cut(void **state)
{
    (void)state;
    char err[512];
    for (int device = 0; device < 2; device++) {
        /* rows on the device: the map ends the layout; rows here: 64 rows of 4 KiB end it */
        struct featbuf_params p = {.n_nodes = device ? 100000 : 1000,
                                   .nslots = 64,
                                   .row_bytes = 4096,
                                   .rows_on_device = device,
                                   .policy = FEATBUF_POLICY_LRU};
        size_t size = featbuf_mem_size(&p);
        assert_true(size > 0);
        void *mem = NULL;
        assert_int_equal(posix_memalign(&mem, 4096, size), 0);
        assert_int_equal(featbuf_mem_format(mem, size, &p, err, sizeof err), 0);
        struct featbuf fb;
        assert_int_equal(featbuf_init(&fb, mem, size, err, sizeof err), 0);
        assert_int_equal(fb.n_nodes, p.n_nodes);
        featbuf_free(&fb);

        /* the header's total cut below where the last array ends: the map
         * (device) or, below the rows' offset, the rows; a bind to that
         * many bytes must refuse rather than hand out pointers past them */
        uint64_t *total = find_u64(mem, size);
        size_t cut = device ? size / 2 : 4096;
        *total = cut;
        if (featbuf_init(&fb, mem, cut, err, sizeof err) != -EINVAL)
            fail_msg("%s rows: a total of %zu bytes of %zu was accepted", device ? "device" : "host", cut, size);
        assert_non_null(strstr(err, "damaged"));
        *total = size;
        assert_int_equal(featbuf_init(&fb, mem, size, err, sizeof err), 0);
        featbuf_free(&fb);
        free(mem);
    }
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("security") != 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
    snprintf(g_train_cfg, sizeof g_train_cfg, "%s/train.toml", t_ldir);
    t_real_stages(g_real_stages, sizeof g_real_stages);
    char prep[1200], out[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out, "%s synth %s --nodes 300 --avg-degree 4 --feat-dim 8 --classes 3", prep, g_ds) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", out);
        return -1;
    }
    FILE *f = fopen(g_cfg, "w");
    if (!f)
        return -1;
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nfanouts = [5, 5]\n\n[train]\nbatch_size = 16\n\n"
            "[pipeline]\nextract_queue = 4\ntrain_queue = 2\n",
            g_ds);
    fclose(f);
    f = fopen(g_train_cfg, "w");
    if (!f)
        return -1;
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"sage\"\nhidden = 16\nfanouts = [4, 4]\n\n"
            "[train]\nbatch_size = 64\nepochs = 2\nlr = 0.01\nseed = 5\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 4\nstaging_mb = 2\n",
            g_ds);
    fclose(f);
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_live_run_private, umask0_setup, umask0_teardown),
        cmocka_unit_test_setup_teardown(test_training_files_private, umask0_setup, umask0_teardown),
        cmocka_unit_test(test_results_header_changed),
        cmocka_unit_test(test_foreign_segment_refused),
        cmocka_unit_test(test_featbuf_header_cut),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
