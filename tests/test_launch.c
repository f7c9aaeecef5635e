/* test_launch.c - gnnlaunch end to end, with the TEST-ONLY stage programs
 * of test_stage.c (build/tests/stages, via SLUICE_STAGE_DIR) on a tiny
 * dataset made by gnnprep synth.
 *
 * Every launch runs with its own XDG_RUNTIME_DIR under the scratch
 * directory, so "the run directory is gone" means that directory's sluice/
 * is empty, and "nothing left in /dev/shm" means no sluice-<ns>.<run-id>.*
 * there. Stages report what they moved into files (SLUICE_TEST_REPORT),
 * which the happy-path cases check for exactly-once delivery per rank.
 * Failures are injected with SLUICE_TEST_FAIL (see test_stage.c) or by
 * this test sending signals. An alarm bounds every case; when it fires it
 * SIGKILLs the launcher, whose stages then die by PDEATHSIG. */
#include "t_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <zmq.h>

#include "core/config.h"
#include "core/util.h"
#include "ipc/metrics.h"
#include "ipc/shm.h"
#include "launcher/layout.h"
#include "launcher/rundir.h"
#include "t_launch.h"

#define CASE_ALARM_S 120
#define ITEMS_FAST "3000"

static char g_cfg[1200];         /* a valid config */
static char g_ds[1200];          /* the dataset */
static unsigned g_seed, g_seed0; /* random state, and the seed it started from */

static void expect_report(const struct t_proc *r, const char *stage, int rank, uint64_t items, bool releaser)
{
    char path[1400], buf[256];
    snprintf(path, sizeof path, "%s/%s.%d", r->report, stage, rank);
    t_slurp(path, buf, sizeof buf);
    unsigned long long it, corrupt, dups, distinct;
    if (sscanf(buf, "items=%llu corrupt=%llu dups=%llu distinct=%llu", &it, &corrupt, &dups, &distinct) != 4)
        fail_msg("%s: no report ('%s')", path, buf);
    if (it != items || corrupt || dups || (releaser && distinct != items))
        fail_msg("%s rank %d: %s (expected %llu items, each once)", stage, rank, buf, (unsigned long long)items);
    /* every slot the sampler took came back by the end of the stream */
    const char *a = strstr(buf, "arena_free=");
    unsigned free_slots, slots;
    if (!a || sscanf(a, "arena_free=%u arena_slots=%u", &free_slots, &slots) != 2 || slots == 0)
        fail_msg("%s: no arena counts ('%s')", path, buf);
    if (releaser && free_slots != slots)
        fail_msg("%s rank %d: %u of %u arena slots free at the end of the stream", stage, rank, free_slots, slots);
}

#ifdef __SANITIZE_THREAD__
/* as in launcher/control.c: races inside uninstrumented libzmq are false reports */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void)
{
    return "race:libzmq.so\n";
}
#endif

/* One request on the control socket of run directory `name`; the reply
 * into out. */
static void control_request(const char *name, const char *req, char *out, size_t len)
{
    char ep[1500];
    snprintf(ep, sizeof ep, "ipc://%s/%s/control", t_base, name);
    void *ctx = zmq_ctx_new();
    void *s = zmq_socket(ctx, ZMQ_REQ);
    int ms = 10000, zero = 0;
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &ms, sizeof ms);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    assert_int_equal(zmq_connect(s, ep), 0);
    assert_int_equal(zmq_send(s, req, strlen(req), 0), (int)strlen(req));
    int n = zmq_recv(s, out, len - 1, 0);
    if (n < 0)
        fail_msg("no answer to '%s' on %s: %s", req, ep, zmq_strerror(zmq_errno()));
    out[SL_MIN((size_t)n, len - 1)] = '\0';
    zmq_close(s);
    zmq_ctx_term(ctx);
}

/* ---- cases ------------------------------------------------------------------------------- */

static void test_usage(void **state)
{
    struct t_proc r;
    char dirarg[1400], stage_env[64] = "SLUICE_STAGE_DIR=/nonexistent-sluice-stages";
    snprintf(dirarg, sizeof dirarg, "--metrics=%s", t_ldir);
    const struct {
        const char *args[6];
        int code;
        const char *msg;
    } cases[] = {
        {{NULL}, 2, "no CONFIG given"},
        {{"--help"}, 0, "usage: gnnlaunch"},
        {{"--version"}, 0, "gnnlaunch (sluice) "},
        {{"--cpu", "--gpus", "2", g_cfg}, 2, "exclude each other"},
        {{"--gpus=0", g_cfg}, 2, "--gpus needs a number of GPUs from 1 to 1024, not '0'"},
        {{"--gpus", "1025", g_cfg}, 2, "--gpus needs a number of GPUs from 1 to 1024, not '1025'"},
        {{"--gpus", "two", g_cfg}, 2, "--gpus needs a number of GPUs from 1 to 1024, not 'two'"},
        {{g_cfg, "--epochs", "x"}, 2, "--epochs needs a positive integer"},
        {{g_cfg, "--bogus"}, 2, "unknown option '--bogus'"},
        {{g_cfg, "--epoch", "3"}, 2, "unknown option '--epoch'; did you mean --epochs?"},
        {{g_cfg, "--gpu=2"}, 2, "unknown option '--gpu=2'; did you mean --gpus?"},
        {{g_cfg, "--master-port", "70000"}, 2, "--master-port needs a TCP port from 1 to 65535, not '70000'"},
        {{g_cfg, "--master", "a:1", "--master-addr", "b"}, 2, "give one of them"},
        {{g_cfg, "--nnodes", "0"}, 2, "--nnodes needs a number of nodes >= 1, not '0'"},
        {{g_cfg, "--nnodes", "2", "--node-rank", "0"}, 2, "--nodes 2 needs --master HOST:PORT"},
        {{g_cfg, "--set"}, 2, "--set needs a value"},
        {{g_cfg, g_cfg}, 2, "one CONFIG expected"},
        {{g_cfg, "--metrics", "/nonexistent-sluice/m.jsonl"}, 2, "directory /nonexistent-sluice does not exist"},
        {{g_cfg, dirarg}, 2, "is a directory"},
        {{g_cfg, "--run-name", "a/b"}, 2, "--run-name 'a/b' has character '/'"},
        {{g_cfg, "--set", "train.lr=fast"}, 2, "--set train.lr=fast: train.lr must be a number"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        t_launch_run(&r, NULL, cases[i].args, 30);
        t_expect_code(&r, cases[i].code);
        t_expect_log(&r, cases[i].msg);
        t_expect_clean(&r);
    }
    const char *env[] = {stage_env, NULL};
    t_launch_run(&r, env, (const char *[]){g_cfg, NULL}, 30);
    t_expect_code(&r, 2);
    t_expect_log(&r, "stage program /nonexistent-sluice-stages/gnn-sampler");
    t_expect_clean(&r);
}

static void test_bad_config(void **state)
{
    char path[1300], text[1600];
    snprintf(path, sizeof path, "%s/bad.toml", t_ldir);
    const struct {
        const char *body;
        const char *msg;
    } cases[] = {
        {"[model]\nkind = \"sage\"\nfanoutz = [5, 5]\n",
         "bad.toml:5:11: unknown key model.fanoutz; did you mean model.fanouts?"},
        {"[train]\n\nepochs = \"three\"\n", "bad.toml:5:10: train.epochs must be an integer"},
        {"[pipeline]\nranks = 0\n", "bad.toml:4:9: pipeline.ranks = 0 is outside its range"},
        {"[model\n", "bad.toml:3:"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        snprintf(text, sizeof text, "[dataset]\npath = \"%s\"\n%s", g_ds, cases[i].body);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs(text, f);
        fclose(f);
        /* the dataset line comes first, so the case's lines start at 3 */
        struct t_proc r;
        t_launch_run(&r, NULL, (const char *[]){"--cpu", path, NULL}, 30);
        t_expect_code(&r, 2);
        t_expect_log(&r, cases[i].msg);
        t_expect_clean(&r);
    }
    /* a shared-memory namespace of other characters: one message, refused
     * before anything is touched */
    struct t_proc r;
    const char *env[] = {"SLUICE_SHM_NAMESPACE=bad-ns", NULL};
    t_launch_run(&r, env, (const char *[]){"--cpu", g_cfg, NULL}, 30);
    t_expect_code(&r, 2);
    t_expect_log(&r, "gnnlaunch: SLUICE_SHM_NAMESPACE 'bad-ns' has character '-'");
    t_expect_no_log(&r, "warning");
    t_expect_clean(&r);
}

static void test_missing_dataset(void **state)
{
    struct t_proc r;
    t_launch_run(&r, NULL, (const char *[]){g_cfg, "--set", "dataset.path=/nonexistent-sluice/ds", NULL}, 30);
    t_expect_code(&r, 2);
    t_expect_log(&r, "/nonexistent-sluice/ds");
    t_expect_clean(&r);
    /* a dataset with a file missing */
    char copy[1300], cmd[3000], set[1400];
    snprintf(copy, sizeof copy, "%s/ds-broken", t_ldir);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s' && rm '%s/labels.bin'", copy, g_ds, copy, copy);
    assert_int_equal(system(cmd), 0);
    snprintf(set, sizeof set, "dataset.path=%s", copy);
    t_launch_run(&r, NULL, (const char *[]){g_cfg, "--set", set, NULL}, 30);
    t_expect_code(&r, 2);
    t_expect_log(&r, "labels.bin");
    t_expect_clean(&r);
}

static void happy(int ranks)
{
    struct t_proc r;
    char set[64];
    snprintf(set, sizeof set, "pipeline.ranks=%d", ranks);
    const char *env[] = {"SLUICE_TEST_ITEMS=" ITEMS_FAST, NULL};
    t_launch_run(&r, env, (const char *[]){"--cpu", g_cfg, "--set", set, "--epochs", "2", NULL}, 120);
    t_expect_code(&r, 0);
    t_expect_log(&r, "stage processes exited cleanly");
    /* 4 + 2 queued, 2 samplers, 2 extractors, the trainer's and the releaser's */
    t_expect_log(&r, "gnnlaunch: batch arena per rank: 12 slots x ");
    for (int rank = 0; rank < ranks; rank++)
        for (int s = 0; s < RUN_STAGES; s++)
            expect_report(&r, run_stage_name((enum run_stage)s), rank, strtoull(ITEMS_FAST, NULL, 10),
                          s == RUN_RELEASER);
    t_expect_clean(&r);
}

static void test_happy_one_rank(void **state)
{
    happy(1);
}
static void test_happy_two_ranks(void **state)
{
    happy(2);
}

/* Arenas that would not fit in memory: refused before anything starts,
 * naming the keys to change. A graph of 200k nodes makes worst-case
 * batches of tens of MiB with fanouts -1 (which also makes gnnlaunch read
 * the max in-degree from indptr.bin), and 1024 ranks with the longest
 * queues need petabytes, beyond any machine's memory. */
static void test_arena_too_large(void **state)
{
    char ds[1300], set[1400], prep[1200], out[4096];
    snprintf(ds, sizeof ds, "%s/ds-big", t_ldir);
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(out, sizeof out, "%s synth %s --nodes 200000 --avg-degree 10 --feat-dim 1 --classes 2", prep, ds) != 0)
        fail_msg("gnnprep synth failed: %s", out);
    snprintf(set, sizeof set, "dataset.path=%s", ds);
    struct t_proc r;
    t_launch_run(&r, NULL,
                 (const char *[]){g_cfg, "--set", set, "--set", "pipeline.ranks=1024", "--set", "model.fanouts=[-1,-1]",
                                  "--set", "train.batch_size=10000000", "--set", "pipeline.extract_queue=4096", "--set",
                                  "pipeline.train_queue=4096", NULL},
                 60);
    t_expect_code(&r, 2);
    t_expect_log(&r, "the batch arenas would need ");
    t_expect_log(&r, "1024 ranks x 8198 slots x ");
    t_expect_log(&r, "model.fanouts = [-1, -1]");
    t_expect_log(&r, ", max in-degree ");
    t_expect_log(&r, "lower train.batch_size");
    t_expect_no_log(&r, "batch arena per rank"); /* nothing was created */
    t_expect_clean(&r);
    t_rmrf(ds);
}

static void test_argv_visible(void **state)
{
    struct t_proc r;
    const char *env[] = {"SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=2000", NULL};
    t_launch_start(&r, env, (const char *[]){g_cfg, "--set", "pipeline.ranks=2", NULL});
    struct t_kid k[T_MAX_KIDS];
    int n = t_wait_flowing(&r, 8, k, 1);
    assert_int_equal(n, 8);
    int seen = 0;
    for (int i = 0; i < n; i++) {
        char want[128], comm[64], path[64];
        snprintf(want, sizeof want, "%s --run=%s --rank=%d --ranks=2 --run-dir=", run_stage_program(k[i].stage),
                 k[i].run, k[i].rank);
        if (strncmp(k[i].cmdline, want, strlen(want)) != 0)
            fail_msg("pid %ld's command line is '%s', expected it to start '%s'", (long)k[i].pid, k[i].cmdline, want);
        assert_non_null(strstr(k[i].cmdline, "--config="));
        snprintf(path, sizeof path, "/proc/%ld/comm", (long)k[i].pid);
        t_slurp(path, comm, sizeof comm);
        comm[strcspn(comm, "\n")] = '\0';
        assert_string_equal(comm, run_stage_program(k[i].stage)); /* what top shows */
        assert_true(k[i].rank >= 0 && k[i].rank < 2);
        seen |= 1 << (k[i].rank * RUN_STAGES + k[i].stage);
        char prefix[64];
        snprintf(prefix, sizeof prefix, "%ld-", (long)r.pid);
        assert_int_equal(strncmp(k[i].run, prefix, strlen(prefix)), 0);
    }
    assert_int_equal(seen, 0xff);          /* every stage of both ranks, once */
    for (int rank = 0; rank < 2; rank++) { /* each rank's batch arena, while the run lives */
        char arena[128];
        char ns[SHM_PREFIX_MAX];
        shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
        snprintf(arena, sizeof arena, "%s%s.r%d.arena", ns, k[0].run, rank);
        assert_int_equal(t_shm_count(arena), 1);
    }
    kill(r.pid, SIGINT);
    t_launch_wait(&r, 30);
    t_expect_code(&r, 130);
    t_expect_clean(&r);
}

static void test_interrupt(void **state)
{
    const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < SL_ARRAY_LEN(sigs); i++) {
        struct t_proc r;
        const char *env[] = {"SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=1000", NULL};
        t_launch_start(&r, env, (const char *[]){g_cfg, NULL});
        struct t_kid k[T_MAX_KIDS];
        int n = t_wait_flowing(&r, 4, k, 5);
        /* SIGINT as a terminal's Ctrl-C sends it: to the whole foreground
         * process group, which must hold only the launcher */
        if (sigs[i] == SIGINT)
            kill(-r.pid, SIGINT);
        else
            kill(r.pid, sigs[i]);
        t_launch_wait(&r, 30);
        t_expect_code(&r, 130);
        char want[64];
        snprintf(want, sizeof want, "interrupted by SIG%s", sigabbrev_np(sigs[i]));
        t_expect_log(&r, want);
        t_expect_no_log(&r, "warning"); /* a stage killed by the SIGINT itself would be one */
        assert_true(t_kids_gone(k, n));
        t_expect_clean(&r);
    }
}

static void test_kill_each_stage(void **state)
{
    for (int s = 0; s < RUN_STAGES; s++)
        for (int round = 0; round < 4; round++) {
            struct t_proc r;
            /* odd rounds: stages ignore SIGTERM and must stop because the
             * launcher closed their queues, before the SIGKILL deadline */
            const char *env[] = {"SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=500",
                                 round % 2 ? "SLUICE_TEST_TERM=ignore" : NULL, NULL};
            t_launch_start(&r, env, (const char *[]){g_cfg, "--set", "pipeline.ranks=2", NULL});
            struct t_kid k[T_MAX_KIDS];
            int n = t_wait_flowing(&r, 8, k, 1);
            int rank = (int)(rand_r(&g_seed) % 2);
            t_sleep_ms((int)(rand_r(&g_seed) % 300)); /* a random moment */
            struct t_kid *victim = NULL;
            for (int i = 0; i < n; i++)
                if (k[i].stage == s && k[i].rank == rank)
                    victim = &k[i];
            assert_non_null(victim);
            assert_int_equal(kill(victim->pid, SIGKILL), 0);
            t_launch_wait(&r, 30);
            t_expect_code(&r, 3);
            /* prompt: every other stage stopped on SIGTERM or the closed
             * queues, none needed the SIGKILL after the grace period (the
             * "sending SIGKILL" check below). Not a wall-clock bound: the
             * launcher's exit within 2 s of the kill once took 2.15 s on a
             * loaded machine with no stage left behind */
            char want[160];
            snprintf(want, sizeof want, "%s rank %d (pid %ld) was killed by signal 9 (SIGKILL)",
                     run_stage_program((enum run_stage)s), rank, (long)victim->pid);
            t_expect_log(&r, want);
            t_expect_no_log(&r, "sending SIGKILL"); /* every stage stopped on the closed queues */
            assert_true(t_kids_gone(k, n));
            t_expect_clean(&r);
        }
}

static void test_stage_exits_3(void **state)
{
    struct t_proc r;
    const char *env[] = {"SLUICE_TEST_ITEMS=100000", "SLUICE_TEST_FAIL=extractor:1:exit3:20", NULL};
    t_launch_run(&r, env, (const char *[]){g_cfg, "--set", "pipeline.ranks=2", NULL}, 60);
    t_expect_code(&r, 3);
    t_expect_log(&r, "gnn-extractor rank 1 (pid ");
    t_expect_log(&r, ") exited with status 3");
    t_expect_clean(&r);
}

static void test_stage_quits_early(void **state)
{
    struct t_proc r;
    const char *env[] = {"SLUICE_TEST_ITEMS=100000", "SLUICE_TEST_FAIL=trainer:0:exit0:5", NULL};
    t_launch_run(&r, env, (const char *[]){g_cfg, NULL}, 60);
    t_expect_code(&r, 3);
    t_expect_log(&r, "exited with status 0 before the end of its input queue r0.train");
    t_expect_clean(&r);
}

static void test_hang_ignoring_sigterm(void **state)
{
    struct t_proc r;
    /* the extractor ignores SIGTERM and stops after 3 batches; the trainer
     * fails after 2, by which time the extractor surely ignores SIGTERM */
    const char *env[] = {"SLUICE_TEST_ITEMS=100000", "SLUICE_TEST_FAIL=extractor:0:hang-noterm:3,trainer:0:exit3:2",
                         NULL};
    t_launch_run(&r, env, (const char *[]){g_cfg, NULL}, 60);
    t_expect_code(&r, 3);
    t_expect_log(&r, "gnn-trainer rank 0 (pid ");
    t_expect_log(&r, ") exited with status 3");
    t_expect_log(&r, "did not exit within 2 s of SIGTERM; sending SIGKILL");
    if (r.t_end - r.t0 < 2.0)
        fail_msg("the launcher ended after %.2f s, before the SIGKILL grace period", r.t_end - r.t0);
    t_expect_clean(&r);
}

static void test_launcher_killed(void **state)
{
    struct t_proc r;
    const char *env[] = {"SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=1000", NULL};
    t_launch_start(&r, env, (const char *[]){g_cfg, "--set", "pipeline.ranks=2", "--run-name", "doomed", NULL});
    struct t_kid k[T_MAX_KIDS];
    int n = t_wait_flowing(&r, 8, k, 1);
    char prefix[80];
    char ns[SHM_PREFIX_MAX];
    shm_prefix(ns, NULL, 0); /* this test's namespace (tests/CMakeLists.txt) */
    snprintf(prefix, sizeof prefix, "%s%s.", ns, k[0].run);
    kill(r.pid, SIGKILL);
    t_launch_wait(&r, 10);
    assert_int_equal(r.code, 128 + SIGKILL);
    double t0 = t_now();
    while (!t_kids_gone(k, n) && t_now() - t0 < 5)
        t_sleep_ms(5);
    if (!t_kids_gone(k, n))
        fail_msg("stages outlived their launcher by 5 s (PR_SET_PDEATHSIG)");
    /* what the dead launcher left is reclaimed by the next launch */
    assert_true(t_shm_count(prefix) >= 1 + 2 * RUN_QUEUES);
    assert_int_equal(t_base_entries(), 1);
    struct t_proc next;
    const char *env2[] = {"SLUICE_TEST_ITEMS=100", NULL};
    t_launch_run(&next, env2, (const char *[]){g_cfg, "--run-name", "doomed", NULL}, 60);
    t_expect_code(&next, 0);
    t_expect_log(&next, "shared-memory segments left by dead runs");
    t_expect_log(&next, "left by dead runs in ");
    assert_int_equal(t_shm_count(prefix), 0);
    t_expect_clean(&next);
}

static void test_control_status(void **state)
{
    struct t_proc r;
    char mfile[1300], mset[1400];
    snprintf(mfile, sizeof mfile, "%s/metrics.jsonl", t_ldir);
    snprintf(mset, sizeof mset, "--metrics=%s", mfile);
    const char *env[] = {"SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=1000", NULL};
    t_launch_start(&r, env, (const char *[]){g_cfg, "--run-name", "watched", mset, NULL});
    struct t_kid k[T_MAX_KIDS];
    int n = t_wait_flowing(&r, 4, k, 5);

    /* the run directory: private, with its state and effective config */
    char path[1500], buf[8192];
    struct stat st;
    snprintf(path, sizeof path, "%s/watched", t_base);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0700);
    snprintf(path, sizeof path, "%s/watched/run.toml", t_base);
    t_slurp(path, buf, sizeof buf);
    char want[1500];
    snprintf(want, sizeof want, "pid = %ld\n", (long)r.pid);
    assert_non_null(strstr(buf, want));
    snprintf(want, sizeof want, "run_id = \"%s\"\n", k[0].run);
    assert_non_null(strstr(buf, want));
    snprintf(want, sizeof want, "metrics_file = \"%s\"\n", mfile);
    assert_non_null(strstr(buf, want));
    snprintf(path, sizeof path, "%s/watched/config.toml", t_base);
    struct config c;
    char err[1024];
    assert_int_equal(config_load(&c, path, NULL, 0, err, sizeof err), 0);
    assert_string_equal(c.dataset.path, g_ds);

    /* status */
    static char reply[1 << 16];
    control_request("watched", "status", reply, sizeof reply);
    if (!t_json_valid(reply))
        fail_msg("status is not valid JSON: %s", reply);
    snprintf(want, sizeof want, "{\"run_id\":\"%s\",\"name\":\"watched\",\"pid\":%ld,\"state\":\"running\"", k[0].run,
             (long)r.pid);
    if (strncmp(reply, want, strlen(want)) != 0)
        fail_msg("status starts '%.200s', expected '%s'", reply, want);
    for (int i = 0; i < n; i++) {
        snprintf(want, sizeof want, "{\"stage\":\"%s\",\"name\":\"%s\",\"rank\":0,\"pid\":%ld,\"alive\":true",
                 run_stage_program(k[i].stage), run_stage_name(k[i].stage), (long)k[i].pid);
        if (!strstr(reply, want))
            fail_msg("status lacks '%s': %s", want, reply);
    }
    assert_non_null(strstr(reply, "\"state\":\"running\",\"busy_ns\":"));
    assert_non_null(strstr(reply, "\"heartbeat_age_s\":"));
    control_request("watched", "hello", reply, sizeof reply);
    assert_true(t_json_valid(reply));
    assert_non_null(strstr(reply, "\"ok\":false"));

    /* the publisher: the same snapshot once a second */
    snprintf(path, sizeof path, "ipc://%s/watched/metrics", t_base);
    void *ctx = zmq_ctx_new();
    void *sub = zmq_socket(ctx, ZMQ_SUB);
    int ms = 5000, zero = 0;
    zmq_setsockopt(sub, ZMQ_RCVTIMEO, &ms, sizeof ms);
    zmq_setsockopt(sub, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(sub, ZMQ_SUBSCRIBE, "", 0);
    assert_int_equal(zmq_connect(sub, path), 0);
    int got = zmq_recv(sub, reply, sizeof reply - 1, 0);
    if (got <= 0)
        fail_msg("nothing published on %s within 5 s", path);
    reply[SL_MIN((size_t)got, sizeof reply - 1)] = '\0';
    assert_true(t_json_valid(reply));
    assert_non_null(strstr(reply, "\"processes\":[{\"stage\":\"gnn-sampler\""));
    zmq_close(sub);
    zmq_ctx_term(ctx);

    /* the name is taken while the run lives, and so is its checkpoint
     * directory (checkpoints/watched: locked for the run's life) */
    struct t_proc twin;
    t_launch_run(&twin, NULL, (const char *[]){g_cfg, "--run-name", "watched", NULL}, 30);
    t_expect_code(&twin, 2);
    t_expect_log(&twin, "checkpoints/watched is in use by another run (gnnlaunch pid");
    char own[1400];
    snprintf(own, sizeof own, "train.checkpoint_dir=\"%s/ck-twin\"", t_ldir);
    t_launch_run(&twin, NULL, (const char *[]){g_cfg, "--run-name", "watched", "--set", own, NULL}, 30);
    t_expect_code(&twin, 2);
    t_expect_log(&twin, "run name 'watched' is in use by a running gnnlaunch");

    kill(r.pid, SIGINT);
    t_launch_wait(&r, 30);
    t_expect_code(&r, 130);
    assert_true(t_kids_gone(k, n));
    t_expect_clean(&r);
}

static void test_control_stop(void **state)
{
    struct t_proc r;
    const char *env[] = {"SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=1000", NULL};
    t_launch_start(&r, env, (const char *[]){g_cfg, "--run-name", "stopme", NULL});
    struct t_kid k[T_MAX_KIDS];
    int n = t_wait_flowing(&r, 4, k, 5);
    char reply[256];
    control_request("stopme", "stop", reply, sizeof reply);
    assert_string_equal(reply, "{\"ok\":true,\"state\":\"stopping\"}");
    t_launch_wait(&r, 30);
    t_expect_code(&r, 130);
    t_expect_log(&r, "stopped on request");
    assert_true(t_kids_gone(k, n));
    t_expect_clean(&r);
}

/* ---- --gpus -------------------------------------------------------------------------------- */

/* One field of a stage's report ("device", "nccl_id"), or fails. */
static void report_field(const struct t_proc *r, const char *stage, int rank, const char *key, char *out, size_t len)
{
    char path[1400], buf[1024], want[64];
    snprintf(path, sizeof path, "%s/%s.%d", r->report, stage, rank);
    t_slurp(path, buf, sizeof buf);
    snprintf(want, sizeof want, " %s=", key);
    const char *v = strstr(buf, want);
    if (!v)
        fail_msg("%s: no %s in '%s'", path, key, buf);
    v += strlen(want);
    snprintf(out, len, "%.*s", (int)strcspn(v, " \n"), v);
}

/* The pid in the launcher's "bootstrap root lives in helper pid P" line,
 * or 0 when there is none. */
static pid_t nccl_helper_of(const struct t_proc *r)
{
    char log[1 << 14];
    t_slurp(r->log, log, sizeof log);
    const char *p = strstr(log, "lives in helper pid ");
    return p ? (pid_t)atol(p + strlen("lives in helper pid ")) : 0;
}

/* Whether a process runs (exists and is no zombie). */
static bool alive(pid_t pid)
{
    char path[64], st[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(st, 1, sizeof st - 1, f);
    fclose(f);
    st[n] = '\0';
    const char *close = strrchr(st, ')');
    return !(close && close[1] == ' ' && close[2] == 'Z');
}

/* Waits up to 5 s for a process to be gone (or a zombie of someone else). */
static bool gone(pid_t pid)
{
    for (double t0 = t_now(); t_now() - t0 < 5; t_sleep_ms(10))
        if (!alive(pid))
            return true;
    return false;
}

/* No GPU: one line naming --gpus and what to do, exit 2, nothing made,
 * checked before the rest (the dataset here is missing too). An invalid
 * CUDA_VISIBLE_DEVICES hides every GPU on any machine; so does an empty
 * one. */
static void test_gpus_none(void **state)
{
    const struct {
        const char *env;
        const char *msg;
    } cases[] = {
#if SLUICE_HAVE_CUDA
        {"CUDA_VISIBLE_DEVICES=-1", "gnnlaunch: --gpus 1: no usable GPU with CUDA_VISIBLE_DEVICES=-1 (CUDA: "},
        {"CUDA_VISIBLE_DEVICES=", "gnnlaunch: --gpus 1: no GPU is visible: CUDA_VISIBLE_DEVICES is set but lists none"},
#else
        {"CUDA_VISIBLE_DEVICES=-1", "gnnlaunch: --gpus 1: this gnnlaunch was built without CUDA"},
        {"CUDA_VISIBLE_DEVICES=0", "cmake -DSLUICE_CUDA=ON"},
#endif
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(cases); i++) {
        struct t_proc r;
        t_launch_run(&r, (const char *[]){cases[i].env, NULL},
                     (const char *[]){"--gpus", "1", g_cfg, "--set", "dataset.path=/nonexistent-sluice/ds", NULL}, 90);
        t_expect_code(&r, 2);
        t_expect_log(&r, cases[i].msg);
        t_expect_log(&r, "--cpu");
        char log[8192];
        t_slurp(r.log, log, sizeof log);
        if (strchr(log, '\n') != log + strlen(log) - 1)
            fail_msg("%s: expected one line, got:\n%s", cases[i].env, log);
        t_expect_clean(&r);
    }
}

/* Made-up GPUs (SLUICE_FAKE_GPUS) and the test stages: --gpus N runs N
 * ranks whatever pipeline.ranks says, every stage of rank r gets
 * --device=r, the trainers of both ranks get the same NCCL unique id and
 * the others none; the NCCL root's helper (a build with NCCL) is gone
 * after the run. More GPUs than there are: exit 2 before anything. */
static void test_gpus_fake(void **state)
{
    struct t_proc r;
    const char *env[] = {"SLUICE_FAKE_GPUS=2", "SLUICE_TEST_ITEMS=500", NULL};
    t_launch_run(&r, env, (const char *[]){"--gpus", "2", g_cfg, "--set", "pipeline.ranks=3", NULL}, 120);
    t_expect_code(&r, 0);
    t_expect_log(&r, "gnnlaunch: note: --gpus 2 runs 2 ranks, one per GPU; pipeline.ranks = 3 (");
    t_expect_log(&r, "SLUICE_FAKE_GPUS is set");
    t_expect_log(&r, "gnnlaunch: --gpus 2: rank 0 on GPU 0 (fake GPU 0), rank 1 on GPU 1 (fake GPU 1)\n");
    t_expect_log(&r, ": 2 ranks x 4 stages started");
    char id[2][300], v[300];
    for (int rank = 0; rank < 2; rank++) {
        for (int s = 0; s < RUN_STAGES; s++) {
            const char *stage = run_stage_name((enum run_stage)s);
            expect_report(&r, stage, rank, 500, s == RUN_RELEASER);
            report_field(&r, stage, rank, "device", v, sizeof v);
            if (atoi(v) != rank)
                fail_msg("%s rank %d ran with --device=%s", stage, rank, v);
            if (s != RUN_TRAINER) {
                report_field(&r, stage, rank, "nccl_id", v, sizeof v);
                assert_string_equal(v, "none");
            }
        }
        report_field(&r, "trainer", rank, "nccl_id", id[rank], sizeof id[rank]);
        assert_int_equal(strlen(id[rank]), 2 * RUN_NCCL_ID_BYTES);
        report_field(&r, "trainer", rank, "cluster_id", v, sizeof v);
        assert_string_equal(v, "none"); /* one node: no cluster.toml */
    }
    assert_string_equal(id[0], id[1]);
    assert_true(strspn(id[0], "0") < strlen(id[0])); /* not a zeroed id */
    char made[64];
    snprintf(made, sizeof made, "gnnlaunch: NCCL unique id %.16s... made for 2 GPUs", id[0]);
    t_expect_log(&r, made); /* the one the launcher made (in its helper with NCCL) */
    pid_t helper = nccl_helper_of(&r);
    if (SLUICE_HAVE_NCCL && helper <= 0)
        fail_msg("a build with NCCL made the id without its helper");
    if (helper > 0 && !gone(helper))
        fail_msg("the NCCL root's helper (pid %ld) outlived the run", (long)helper);
    t_expect_clean(&r);

    /* one GPU: no id, no helper */
    t_launch_run(&r, (const char *[]){"SLUICE_FAKE_GPUS=2", "SLUICE_TEST_ITEMS=50", NULL},
                 (const char *[]){"--gpus", "1", g_cfg, NULL}, 120);
    t_expect_code(&r, 0);
    t_expect_no_log(&r, "NCCL");
    report_field(&r, "trainer", 0, "nccl_id", v, sizeof v);
    assert_string_equal(v, "none");
    report_field(&r, "trainer", 0, "device", v, sizeof v);
    assert_string_equal(v, "0");
    t_expect_clean(&r);

    /* two ranks on one GPU (--ranks-per-gpu): both on device 0, each
     * trainer a host of its own for NCCL (NCCL_HOSTID, P2P and SHM off),
     * the other stages with the launcher's environment */
    t_launch_run(&r, (const char *[]){"SLUICE_FAKE_GPUS=1", "SLUICE_TEST_ITEMS=200", "NCCL_HOSTID=mine", NULL},
                 (const char *[]){"--gpus", "1", "--ranks-per-gpu", "2", g_cfg, NULL}, 120);
    t_expect_code(&r, 0);
    t_expect_log(&r, "gnnlaunch: --gpus 1: rank 0 on GPU 0 (fake GPU 0), rank 1 on GPU 0 (fake GPU 0)\n");
    t_expect_log(&r, "gnnlaunch: --ranks-per-gpu 2: the ranks that share a GPU join NCCL as if on hosts of their own");
    t_expect_log(&r, ": 2 ranks x 4 stages started");
    t_expect_log(&r, "gnnlaunch: NCCL unique id ");
    char host[2][300];
    for (int rank = 0; rank < 2; rank++) {
        for (int s = 0; s < RUN_STAGES; s++) {
            const char *stage = run_stage_name((enum run_stage)s);
            expect_report(&r, stage, rank, 200, s == RUN_RELEASER);
            report_field(&r, stage, rank, "device", v, sizeof v);
            assert_string_equal(v, "0");
            if (s != RUN_TRAINER) {
                report_field(&r, stage, rank, "nccl_hostid", v, sizeof v);
                assert_string_equal(v, "mine"); /* the launcher's, untouched */
            }
        }
        report_field(&r, "trainer", rank, "nccl_hostid", host[rank], sizeof host[rank]);
        if (strncmp(host[rank], "sluice-", 7) != 0)
            fail_msg("rank %d's trainer ran with NCCL_HOSTID=%s", rank, host[rank]);
        report_field(&r, "trainer", rank, "nccl_p2p_disable", v, sizeof v);
        assert_string_equal(v, "1");
    }
    if (!strcmp(host[0], host[1]))
        fail_msg("both trainers ran with NCCL_HOSTID=%s", host[0]);
    t_expect_clean(&r);
    t_launch_run(&r, (const char *[]){NULL}, (const char *[]){"--ranks-per-gpu", "2", g_cfg, NULL}, 60);
    t_expect_code(&r, 2);
    t_expect_log(&r, "--ranks-per-gpu needs --gpus N");
    t_expect_clean(&r);

    /* more than there are */
    t_launch_run(&r, (const char *[]){"SLUICE_FAKE_GPUS=2", "CUDA_VISIBLE_DEVICES=4,5", NULL},
                 (const char *[]){"--gpus", "3", g_cfg, NULL}, 60);
    t_expect_code(&r, 2);
    t_expect_log(&r, "gnnlaunch: --gpus 3: only 2 GPUs are visible with CUDA_VISIBLE_DEVICES=4,5; ask for at most "
                     "--gpus 2 (one rank per GPU)");
    t_expect_no_log(&r, "batch arena per rank"); /* nothing was created */
    t_expect_clean(&r);
}

/* The NCCL root's helper on the ways out: Ctrl-C (130), a failed stage
 * (3), the launcher SIGKILLed (the helper dies with it). */
static void test_gpus_helper_ends(void **state)
{
    if (!SLUICE_HAVE_NCCL)
        skip(); /* no helper without NCCL: the fake id is made in process */
    const char *env[] = {"SLUICE_FAKE_GPUS=2", "SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=1000", NULL};
    for (int how = 0; how < 3; how++) {
        struct t_proc r;
        const char *fail[] = {"SLUICE_FAKE_GPUS=2", "SLUICE_TEST_ITEMS=100000000", "SLUICE_TEST_DELAY_US=1000",
                              "SLUICE_TEST_FAIL=trainer:1:exit3:500", NULL};
        t_launch_start(&r, how == 1 ? fail : env, (const char *[]){"--gpus", "2", g_cfg, "--run-name", "gpuend", NULL});
        struct t_kid k[T_MAX_KIDS];
        int n = t_wait_flowing(&r, 8, k, 1);
        pid_t helper = nccl_helper_of(&r);
        assert_true(helper > 0);
        if (!alive(helper)) /* for the run's whole life (the failing trainer takes 0.5 s to fail) */
            fail_msg("case %d: the NCCL root's helper (pid %ld) is gone while the run goes on", how, (long)helper);
        if (how == 0)
            kill(-r.pid, SIGINT);
        else if (how == 2)
            kill(r.pid, SIGKILL);
        t_launch_wait(&r, 30);
        t_expect_code(&r, how == 0 ? 130 : how == 1 ? 3 : 128 + SIGKILL);
        if (!gone(helper))
            fail_msg("case %d: the NCCL root's helper (pid %ld) outlived its launcher", how, (long)helper);
        double t0 = t_now();
        while (!t_kids_gone(k, n) && t_now() - t0 < 5)
            t_sleep_ms(5);
        assert_true(t_kids_gone(k, n));
        if (how == 2) { /* what the dead launcher left, as the next launch would reclaim it */
            char err[256];
            shm_run_reclaim(k[0].run, NULL, NULL, err, sizeof err);
            rundir_reclaim(t_base);
        }
        t_expect_clean(&r);
    }
}

/* The real stages on a made-up GPU: gnn-trainer cannot put the feature
 * rows on a GPU that is not there (a build with CUDA: the CUDA error; one
 * without: it has no CUDA backend), says so in its one line, and the run
 * fails (exit 3) leaving nothing behind. */
static void test_gpus_real_trainer(void **state)
{
    char bin[1300], stage_env[1400];
    t_bin(bin, sizeof bin, "");
    snprintf(stage_env, sizeof stage_env, "SLUICE_STAGE_DIR=%s", bin);
    struct t_proc r;
    char set[1400];
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s/ck-gpu\"", t_ldir);
    t_launch_run(&r, (const char *[]){stage_env, "SLUICE_FAKE_GPUS=1", NULL},
                 (const char *[]){"--gpus", "1", g_cfg, "--set", set, NULL}, 60);
    t_expect_code(&r, 3);
    t_expect_log(&r, "CUDA");
    t_expect_log(&r, "failed after");
    /* the GPU rank's first stage to meet CUDA refuses: the trainer (a CUDA
     * build: no usable device), or, in a build without CUDA, whichever of
     * the extractor and the trainer gets there first */
    static char log[1 << 16];
    t_slurp(r.log, log, sizeof log);
    if (!strstr(log, "gnn-trainer rank 0: ") && !strstr(log, "gnn-extractor rank 0: "))
        fail_msg("neither the trainer nor the extractor of rank 0 said why (%s)", r.log);
    /* where the build has the CUDA trainer, the GPU rank ran it, not the
     * CPU-only gnn-trainer */
    char gpu_trainer[1400];
    snprintf(gpu_trainer, sizeof gpu_trainer, "%s/gnn-trainer-gpu", bin);
    if (access(gpu_trainer, X_OK) == 0 && strstr(log, "this gnn-trainer was built without CUDA"))
        fail_msg("the GPU rank ran the CPU-only gnn-trainer although %s is there (%s)", gpu_trainer, r.log);
    t_expect_clean(&r);
}

/* ---- fixture ----------------------------------------------------------------------------- */

static int group_setup(void **state)
{
    if (t_launch_setup("launch") != 0)
        return -1;
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
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
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const char *seed = getenv("SLUICE_TEST_SEED");
    g_seed = seed ? (unsigned)strtoul(seed, NULL, 0) : (unsigned)time(NULL);
    g_seed0 = g_seed;
    fprintf(stderr, "test_launch: seed %u (SLUICE_TEST_SEED to repeat)\n", g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_usage, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_bad_config, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_missing_dataset, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_happy_one_rank, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_happy_two_ranks, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_argv_visible, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_arena_too_large, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_interrupt, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_kill_each_stage, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_stage_exits_3, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_stage_quits_early, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_hang_ignoring_sigterm, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_launcher_killed, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_control_status, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_control_stop, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_gpus_none, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_gpus_fake, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_gpus_helper_ends, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_gpus_real_trainer, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
