/* test_gnnstat.c - gnnstat against live gnnlaunch runs.
 *
 *   - a live run of the real stages (build/bin) training a small synthetic
 *     dataset for many epochs: `gnnstat --once RUN` prints one JSON
 *     snapshot whose run, launcher and stage pids are the real ones, whose
 *     rates are numbers >= 0 (and not all zero: the stages work or wait), whose
 *     queue depths lie within their capacities and whose feature buffer has
 *     loaded rows; the run is found by name, by run id, by directory and,
 *     being the only one, with no RUN at all; the plain (not a terminal)
 *     view prints --count frames; `gnnstat --stop RUN` makes the launcher
 *     exit 130 leaving nothing behind;
 *   - no run, an unknown name, bad flags: exit 2 with a message;
 *   - two live runs (the test stand-in stages, one with two ranks): no RUN
 *     lists both and exits 2; each is reached by name, the two-rank one
 *     showing both ranks; a launcher that does not answer (SIGSTOPped)
 *     gives exit 2 within the timeout instead of a hang;
 *   - a launcher SIGKILLed: its run directory is reported as stale, exit 2;
 *   - the view itself (tools/stat_view.c) from two made-up snapshots: each
 *     rate, the hit rate, a counter that went backwards, the text frame.
 *
 * gnnstat runs with the test's private XDG_RUNTIME_DIR, as the launcher. */
#include "t_util.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <signal.h>

#include "core/util.h"
#include "launcher/layout.h"
#include "launcher/rundir.h"
#include "t_launch.h"
#include "tools/stat_view.h"

#define CASE_ALARM_S 180

static char g_ds[1200], g_cfg[1200];
static char g_stages[1300]; /* SLUICE_STAGE_DIR=<the real stages in build/bin> */
static char g_stat[1200];   /* gnnstat */
static char g_out[1 << 16], g_err[1 << 14];
static pid_t g_other[2]; /* launchers a case runs beside t_lpid (killed by teardown) */

/* Runs `gnnstat ARGS` (ARGS a shell word list, built printf-style) with the
 * launches' XDG_RUNTIME_DIR: stdout into g_out, stderr into g_err; returns
 * its exit status (128 + signal when killed). */
static int gnnstat(const char *fmt, ...) SL_PRINTF(1, 2);
static int gnnstat(const char *fmt, ...)
{
    char args[2048], cmd[8192], out[1300], err[1300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(out, sizeof out, "%s/stat.out", t_ldir);
    snprintf(err, sizeof err, "%s/stat.err", t_ldir);
    snprintf(cmd, sizeof cmd, "XDG_RUNTIME_DIR='%s' '%s' %s >'%s' 2>'%s' </dev/null", t_xdg, g_stat, args, out, err);
    int st = system(cmd);
    t_slurp(out, g_out, sizeof g_out);
    t_slurp(err, g_err, sizeof g_err);
    assert_true(st != -1);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static void expect_stat(int got, int want, const char *what)
{
    if (got != want)
        fail_msg("gnnstat %s exited %d, expected %d\nstdout: %s\nstderr: %s", what, got, want, g_out, g_err);
}

static void expect_err(const char *what)
{
    if (!strstr(g_err, what))
        fail_msg("expected '%s' in gnnstat's stderr:\n%s", what, g_err);
}

static json_t *parse_out(void)
{
    json_error_t je;
    json_t *v = json_loads(g_out, 0, &je);
    if (!json_is_object(v))
        fail_msg("gnnstat --once printed no JSON object (%s): %s", je.text, g_out);
    return v;
}

static json_int_t jint(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("'%s' is not an integer in %s", key, g_out);
    return json_integer_value(v);
}

/* A rate: a number >= 0 (null is refused: --once always has two snapshots). */
static double jrate(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_number(v) || !(json_number_value(v) >= 0) || !isfinite(json_number_value(v)))
        fail_msg("'%s' is not a rate >= 0 in %s", key, g_out);
    return json_number_value(v);
}

static const char *jstr(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    if (!s)
        fail_msg("'%s' is not a string in %s", key, g_out);
    return s;
}

/* Checks a --once snapshot of a running run: name, launcher pid, ranks,
 * every stage of every rank with sane rates, queue depths within their
 * capacities. Returns the sum of every stage's items/s, busy % and wait %:
 * above 0 when the two snapshots differ for any stage that worked or
 * waited between them. */
static double check_snapshot(const json_t *v, const char *name, pid_t launcher, int ranks)
{
    assert_string_equal(jstr(v, "name"), name);
    assert_int_equal(jint(v, "pid"), launcher);
    assert_string_equal(jstr(v, "state"), "running");
    assert_int_equal(jint(v, "ranks"), ranks);
    assert_true(jrate(v, "interval_s") > 0);
    const json_t *stages = json_object_get(v, "stages"), *s;
    assert_int_equal(json_array_size(stages), (size_t)ranks * RUN_STAGES);
    double activity = 0;
    size_t i;
    json_array_foreach(stages, i, s)
    {
        int rank = (int)(i / RUN_STAGES);
        assert_string_equal(jstr(s, "stage"), run_stage_name((enum run_stage)(i % RUN_STAGES)));
        assert_int_equal(jint(s, "rank"), rank);
        assert_true(json_is_true(json_object_get(s, "alive")));
        activity += jrate(s, "items_per_s") + jrate(s, "busy_pct") + jrate(s, "wait_pct");
        static const char *const rates[] = {"busy_pct", "wait_pct", "mb_per_s", "io_per_s", "heartbeat_age_s"};
        for (size_t k = 0; k < SL_ARRAY_LEN(rates); k++)
            jrate(s, rates[k]);
        assert_true(jrate(s, "heartbeat_age_s") < 5.0);
        assert_int_equal(jint(s, "errors"), 0);
    }
    const json_t *rs = json_object_get(v, "rank_stats"), *r;
    assert_int_equal(json_array_size(rs), (size_t)ranks);
    json_array_foreach(rs, i, r)
    {
        assert_int_equal(jint(r, "rank"), (json_int_t)i);
        static const char *const queues[] = {"extract", "train", "release"};
        for (size_t k = 0; k < SL_ARRAY_LEN(queues); k++) {
            const json_t *q = json_object_get(json_object_get(r, "queues"), queues[k]);
            json_int_t used = jint(q, "used"), cap = jint(q, "capacity");
            if (cap < 2 || (cap & (cap - 1)) || used < 0 || used > cap)
                fail_msg("rank %zu queue %s: %lld/%lld", i, queues[k], (long long)used, (long long)cap);
        }
    }
    const json_t *e = json_object_get(v, "epoch");
    json_int_t cur = jint(e, "current"), total = jint(e, "total"), done = jint(e, "done");
    assert_true(total >= 1 && cur >= 1 && cur <= total && done >= 0 && done < total);
    assert_int_equal(json_array_size(json_object_get(e, "published")), (size_t)ranks);
    return activity;
}

static void test_live_run(void **state)
{
    (void)state;
    char ck[1300], set[1400];
    snprintf(ck, sizeof ck, "%s/ck-live", t_ldir);
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    struct t_proc r;
    t_launch_start(&r, (const char *[]){g_stages, NULL},
                   (const char *[]){"--cpu", g_cfg, "--run-name", "live", "--set", set, NULL});
    struct t_kid k[T_MAX_KIDS];
    /* every stage has moved a batch: the rates below are measured while
     * the whole pipeline runs (once only the sampler had moved: on a
     * loaded machine the extractor was still starting, and nothing moved
     * in gnnstat's 0.5 s) */
    int n = t_wait_all_moved(&r, RUN_STAGES, k, 1);
    assert_int_equal(n, RUN_STAGES);

    expect_stat(gnnstat("--once --interval 0.5 live"), 0, "--once live");
    json_t *v = parse_out();
    assert_string_equal(jstr(v, "run_id"), k[0].run);
    /* not all zero: rates come from two different snapshots. Not "some
     * stage moved a batch": on a loaded machine the extractor once spent
     * the whole 0.5 s (91% busy) on one batch while the others waited */
    if (!(check_snapshot(v, "live", r.pid, 1) > 0))
        fail_msg("no stage worked or waited in 0.5 s of a running pipeline: %s", g_out);
    /* the stage pids are the launcher's children */
    const json_t *s;
    size_t i;
    json_array_foreach(json_object_get(v, "stages"), i, s)
    {
        bool found = false;
        for (int j = 0; j < n; j++)
            found |= k[j].stage == (int)i && k[j].pid == jint(s, "pid");
        if (!found)
            fail_msg("stage %zu's pid %lld is no stage the launcher started", i, (long long)jint(s, "pid"));
    }
    /* the feature buffer: rows were loaded (the buffer is smaller than the
     * features, so the first batches load); a hit rate is a fraction */
    const json_t *fb = json_object_get(json_array_get(json_object_get(v, "rank_stats"), 0), "featbuf");
    assert_true(json_is_object(fb));
    assert_true(jint(fb, "slots") > 0 && jint(fb, "loads") > 0 && jint(fb, "loads") >= jint(fb, "evictions"));
    assert_true(json_is_boolean(json_object_get(fb, "stale")));
    const json_t *hit = json_object_get(fb, "hit_rate");
    assert_true(json_is_null(hit) || (json_number_value(hit) >= 0 && json_number_value(hit) <= 1));
    jrate(fb, "loads_per_s");
    json_decref(v);

    /* the same run by id, by directory, and as the only one */
    char dir[1400];
    snprintf(dir, sizeof dir, "%s/live", t_base);
    const char *how[] = {k[0].run, dir, ""};
    for (size_t h = 0; h < SL_ARRAY_LEN(how); h++) {
        expect_stat(gnnstat("--once --interval 0.2 %s", how[h]), 0, how[h]);
        v = parse_out();
        check_snapshot(v, "live", r.pid, 1);
        json_decref(v);
    }

    /* the view, not on a terminal: plain frames, one per refresh */
    expect_stat(gnnstat("--count 2 --interval 0.2"), 0, "--count 2");
    int frames = 0;
    for (const char *p = g_out; (p = strstr(p, "run live (")); p++)
        frames++;
    assert_int_equal(frames, 2);
    static const char *const want[] = {"sampler",  "extractor", "trainer",      "releaser", "queues",
                                       "extract ", "featbuf",   "rows/s, hit ", "epoch ",   "of one core"};
    for (size_t w = 0; w < SL_ARRAY_LEN(want); w++)
        if (!strstr(g_out, want[w]))
            fail_msg("the view lacks '%s':\n%s", want[w], g_out);
    assert_null(strstr(g_out, "\033[")); /* no terminal codes in a pipe */

    /* a clean stop */
    expect_stat(gnnstat("--stop live"), 0, "--stop live");
    assert_non_null(strstr(g_out, "\"ok\":true"));
    t_launch_wait(&r, 30);
    t_expect_code(&r, 130);
    t_expect_log(&r, "stopped on request");
    assert_true(t_kids_gone(k, n));
    t_expect_clean(&r);
    expect_stat(gnnstat("--once live"), 2, "--once after the stop");
    expect_err("no run named 'live'");
}

static void test_no_run(void **state)
{
    (void)state;
    assert_int_equal(t_base_entries(), 0);
    expect_stat(gnnstat("--once"), 2, "--once with no run");
    expect_err("no running gnnlaunch job");
    expect_stat(gnnstat("--once nosuch"), 2, "--once nosuch");
    expect_err("no run named 'nosuch'");
    expect_stat(gnnstat("--stop nosuch"), 2, "--stop nosuch");
    expect_err("no run named 'nosuch'");
    expect_stat(gnnstat("--once %s/nosuch", t_ldir), 2, "--once DIR");
    expect_err("no run directory");
    expect_stat(gnnstat("--stop"), 2, "--stop without RUN");
    expect_err("--stop needs the RUN");
    expect_stat(gnnstat("--interval 0"), 2, "--interval 0");
    expect_err("--interval '0'");
    expect_stat(gnnstat("--bogus"), 2, "--bogus");
    expect_err("unknown option '--bogus'");
    expect_stat(gnnstat("a b"), 2, "two RUNs");
    expect_stat(gnnstat("--list"), 0, "--list");
    assert_non_null(strstr(g_out, "no runs"));
    expect_stat(gnnstat("--help"), 0, "--help");
    assert_non_null(strstr(g_out, "usage: gnnstat"));
}

/* Starts a test-stage run that keeps going until stopped. */
static void start_slow(struct t_proc *r, const char *name, const char *ranks)
{
    const char *env[] = {"SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=2000", NULL};
    t_launch_start(r, env, (const char *[]){g_cfg, "--run-name", name, "--set", ranks, NULL});
}

static void test_two_runs(void **state)
{
    (void)state;
    struct t_proc one, two;
    struct t_kid k1[T_MAX_KIDS], k2[T_MAX_KIDS];
    start_slow(&one, "one", "pipeline.ranks=1");
    g_other[0] = one.pid;
    t_wait_flowing(&one, RUN_STAGES, k1, 1);
    start_slow(&two, "two", "pipeline.ranks=2");
    g_other[1] = two.pid;
    t_wait_flowing(&two, 2 * RUN_STAGES, k2, 1);

    expect_stat(gnnstat("--once"), 2, "--once with two runs");
    expect_err("2 runs are live");
    assert_non_null(strstr(g_err, "  one "));
    assert_non_null(strstr(g_err, "  two "));
    expect_stat(gnnstat("--list"), 0, "--list");
    assert_non_null(strstr(g_out, "live"));
    assert_non_null(strstr(g_out, g_cfg));

    expect_stat(gnnstat("--once --interval 0.3 two"), 0, "--once two");
    json_t *v = parse_out();
    check_snapshot(v, "two", two.pid, 2);
    json_decref(v);
    expect_stat(gnnstat("--count 1 --interval 0.1 two"), 0, "--count 1 two");
    assert_non_null(strstr(g_out, "rank 0"));
    assert_non_null(strstr(g_out, "rank 1"));

    /* a launcher that does not answer: an error within the timeout */
    kill(one.pid, SIGSTOP);
    double t0 = t_now();
    expect_stat(gnnstat("--once --timeout 1 one"), 2, "--once on a stopped launcher");
    expect_err("is not answering");
    assert_true(t_now() - t0 < 10);
    kill(one.pid, SIGCONT);

    /* each is reaped by its wait, or killed and reaped there if it fails */
    expect_stat(gnnstat("--stop one"), 0, "--stop one");
    g_other[0] = 0;
    t_launch_wait(&one, 30);
    expect_stat(gnnstat("--stop two"), 0, "--stop two");
    g_other[1] = 0;
    t_launch_wait(&two, 30);
    t_expect_code(&one, 130);
    t_expect_code(&two, 130);
    assert_true(t_kids_gone(k1, RUN_STAGES) && t_kids_gone(k2, 2 * RUN_STAGES));
    t_expect_clean(&one);
    t_expect_clean(&two);
}

static void test_stale_run(void **state)
{
    (void)state;
    struct t_proc r;
    struct t_kid k[T_MAX_KIDS];
    start_slow(&r, "gone", "pipeline.ranks=1");
    int n = t_wait_flowing(&r, RUN_STAGES, k, 1);
    kill(r.pid, SIGKILL);
    t_launch_wait(&r, 30);
    for (double t0 = t_now(); !t_kids_gone(k, n) && t_now() - t0 < 10;)
        t_sleep_ms(10); /* the stages follow by PDEATHSIG */
    assert_true(t_kids_gone(k, n));

    expect_stat(gnnstat("--once gone"), 2, "--once on a stale run");
    expect_err("run 'gone' is stale");
    expect_stat(gnnstat("--stop gone"), 2, "--stop on a stale run");
    expect_err("is stale");
    char dir[1400];
    snprintf(dir, sizeof dir, "%s/gone", t_base);
    expect_stat(gnnstat("--once %s", dir), 2, "--once DIR of a stale run");
    expect_err("is stale");
    expect_stat(gnnstat("--once"), 2, "--once with only a stale run");
    expect_err("only stale runs");
    assert_non_null(strstr(g_err, "stale"));
    expect_stat(gnnstat("--list"), 0, "--list");
    assert_non_null(strstr(g_out, "gone"));
    assert_non_null(strstr(g_out, "stale"));

    /* what the next gnnlaunch would do */
    int reclaimed = shm_run_reclaim(k[0].run, NULL, NULL, NULL, 0);
    if (reclaimed <= 0) {
        char ls[4096];
        t_run(ls, sizeof ls, "ls -l /dev/shm | grep '%s'; ps -eo pid,stat,cmd | grep '%s' | grep -v grep", k[0].run,
              k[0].run);
        fail_msg("shm_run_reclaim(%s) = %d; /dev/shm and processes of the run:\n%s", k[0].run, reclaimed, ls);
    }
    assert_int_equal(rundir_reclaim(t_base), 1);
    t_expect_clean(&r);
}

/* ---- the view from two snapshots (tools/stat_view.c), no launcher ---- */

static double view_num(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    if (!json_is_number(v))
        fail_msg("'%s' is not a number", key);
    return json_number_value(v);
}

/* One process of a made-up status snapshot (launcher/control.h). */
static json_t *snap_proc(const char *name, json_int_t busy, json_int_t wait, json_int_t items, json_int_t bytes,
                         json_int_t io)
{
    char stage[32];
    snprintf(stage, sizeof stage, "gnn-%s", name);
    json_t *p =
        json_pack("{s:s, s:s, s:i, s:i, s:b, s:n, s:s, s:I, s:I, s:I, s:I, s:I, s:i, s:f}", "stage", stage, "name",
                  name, "rank", 0, "pid", 7, "alive", 1, "exit", "state", "running", "busy_ns", busy, "wait_ns", wait,
                  "items", items, "bytes", bytes, "io_ops", io, "errors", 0, "heartbeat_age_s", 0.25);
    assert_non_null(p);
    return p;
}

/* A made-up snapshot of one rank at uptime t, its feature buffer's counters
 * and epoch; procs are stolen. */
static json_t *snap(double t, json_t *procs, json_int_t hits, json_int_t waits, json_int_t loads, json_int_t evictions,
                    json_int_t epoch)
{
    json_t *s = json_pack("{s:s, s:s, s:i, s:s, s:f, s:i, s:o, s:{s:I, s:i, s:I, s:i, s:[I]}, s:[{s:i, s:{s:{s:i, "
                          "s:i, s:b}, s:{s:i, s:i, s:b}, s:{s:i, s:i, s:b}}, s:{s:i, s:i, s:I, s:I, s:I, s:I, s:i}}]}",
                          "run_id", "r", "name", "n", "pid", 5, "state", "running", "uptime_s", t, "ranks", 1,
                          "processes", procs, "epoch", "current", epoch, "total", 3, "done", epoch - 1, "start", 0,
                          "published", epoch - 1, "rank_stats", "rank", 0, "queues", "extract", "used", 3, "capacity",
                          8, "closed", 0, "train", "used", 4, "capacity", 4, "closed", 0, "release", "used", 0,
                          "capacity", 16, "closed", 1, "featbuf", "slots", 100, "standby", 40, "hits", hits, "waits",
                          waits, "loads", loads, "evictions", evictions, "failed", 0);
    assert_non_null(s);
    return s;
}

static void test_view_rates(void **state)
{
    (void)state;
    /* 2 s apart (uptime_s); the extractor has two busy threads; the
     * releaser's items go backwards (must read as a rate of 0) */
    json_t *a = snap(10.0,
                     json_pack("[o, o, o]", snap_proc("sampler", 1000000000, 0, 100, 0, 0),
                               snap_proc("extractor", 0, 0, 50, 1000000, 10), snap_proc("releaser", 0, 0, 90, 0, 0)),
                     10, 0, 10, 0, 1);
    json_t *b =
        snap(12.0,
             json_pack("[o, o, o]", snap_proc("sampler", 2500000000, 400000000, 300, 0, 0),
                       snap_proc("extractor", 3000000000, 0, 90, 5000000, 2010), snap_proc("releaser", 0, 0, 80, 0, 0)),
             70, 20, 30, 5, 2);
    json_t *v = stat_view_make(a, b);
    assert_non_null(v);
    assert_true(fabs(view_num(v, "interval_s") - 2.0) < 1e-9);
    const json_t *st = json_object_get(v, "stages");
    assert_int_equal(json_array_size(st), 3);
    const json_t *smp = json_array_get(st, 0), *ext = json_array_get(st, 1), *rel = json_array_get(st, 2);
    assert_string_equal(json_string_value(json_object_get(smp, "stage")), "sampler");
    assert_true(fabs(view_num(smp, "items_per_s") - 100.0) < 1e-9);
    assert_true(fabs(view_num(smp, "busy_pct") - 75.0) < 1e-9);
    assert_true(fabs(view_num(smp, "wait_pct") - 20.0) < 1e-9);
    assert_true(fabs(view_num(ext, "busy_pct") - 150.0) < 1e-9); /* of one core: two threads */
    assert_true(fabs(view_num(ext, "mb_per_s") - 2.0) < 1e-9);
    assert_true(fabs(view_num(ext, "io_per_s") - 1000.0) < 1e-9);
    assert_true(view_num(rel, "items_per_s") == 0.0);
    const json_t *r = json_array_get(json_object_get(v, "rank_stats"), 0);
    const json_t *fb = json_object_get(r, "featbuf");
    /* 60 hits + 20 shared of 100 rows asked for */
    assert_true(fabs(view_num(fb, "hit_rate") - 0.8) < 1e-9);
    assert_true(fabs(view_num(fb, "rows_per_s") - 50.0) < 1e-9);
    assert_true(fabs(view_num(fb, "loads_per_s") - 10.0) < 1e-9);
    assert_true(fabs(view_num(fb, "evictions_per_s") - 2.5) < 1e-9);
    assert_int_equal(json_integer_value(json_object_get(json_object_get(v, "epoch"), "current")), 2);

    /* the frame */
    struct rundir_info run = {.pid = 5};
    snprintf(run.name, sizeof run.name, "n");
    snprintf(run.run_id, sizeof run.run_id, "r");
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    stat_view_render(f, v, &run);
    fclose(f);
    static const char *const want[] = {"run n (r)",
                                       "epoch 2/3",
                                       "150.0",
                                       "75.0",
                                       "extract 3/8",
                                       "train 4/4",
                                       "release 0/16 (closed)",
                                       "50 rows/s, hit 80.0%",
                                       "loads 10/s",
                                       "40 on standby"};
    for (size_t i = 0; i < SL_ARRAY_LEN(want); i++)
        if (!strstr(text, want[i]))
            fail_msg("the frame lacks '%s':\n%s", want[i], text);
    free(text);
    json_decref(v);

    /* one snapshot only: every rate is null, totals are there */
    v = stat_view_make(NULL, b);
    smp = json_array_get(json_object_get(v, "stages"), 0);
    assert_true(json_is_null(json_object_get(smp, "items_per_s")));
    assert_int_equal(json_integer_value(json_object_get(smp, "items")), 300);
    assert_true(json_is_null(
        json_object_get(json_object_get(json_array_get(json_object_get(v, "rank_stats"), 0), "featbuf"), "hit_rate")));
    json_decref(v);
    json_decref(a);
    json_decref(b);
}

static int case_teardown(void **state)
{
    /* a failed case must leave no run behind: the next case counts runs */
    for (size_t i = 0; i < SL_ARRAY_LEN(g_other); i++)
        if (g_other[i] > 0) {
            kill(g_other[i], SIGCONT);
            kill(g_other[i], SIGKILL);
            waitpid(g_other[i], NULL, 0);
            g_other[i] = 0;
        }
    return t_launch_case_teardown(state);
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("gnnstat") != 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
    t_real_stages(g_stages, sizeof g_stages);
    t_bin(g_stat, sizeof g_stat, "gnnstat");
    char prep[1200], out[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    /* 20000 rows of 64 floats (256 B slots: 5 MB) through a 4 MiB feature
     * buffer, so every epoch loads rows; many epochs: the run lives until
     * it is stopped */
    if (t_run(out, sizeof out, "%s synth %s --nodes 20000 --avg-degree 10 --feat-dim 64 --classes 4 --seed 3", prep,
              g_ds) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", out);
        return -1;
    }
    FILE *f = fopen(g_cfg, "w");
    if (!f)
        return -1;
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"sage\"\nhidden = 32\nfanouts = [10, 10]\n\n"
            "[train]\nbatch_size = 32\nepochs = 100000\nlr = 0.01\nseed = 5\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nextract_queue = 4\ntrain_queue = 2\nfeature_buffer_mb = 4\n"
            "staging_mb = 4\nio_depth = 16\n",
            g_ds);
    fclose(f);
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_view_rates),
        cmocka_unit_test_setup_teardown(test_no_run, t_launch_case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_live_run, t_launch_case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_two_runs, t_launch_case_setup, case_teardown),
        cmocka_unit_test_setup_teardown(test_stale_run, t_launch_case_setup, case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
