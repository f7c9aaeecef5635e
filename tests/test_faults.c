/* test_faults.c - faults injected into real training runs (issue 9,
 * "Reliability"; docs/reliability.md, "Faults"): gnnlaunch --cpu with the
 * real stages (build/bin) on small synthetic datasets, in ordered mode.
 *
 * Every case asserts
 *   (a) gnnlaunch exits non-zero with a message naming the cause;
 *   (b) nothing of the run is left in /dev/shm or the run directory
 *       (t_expect_clean);
 *   (c) the newest checkpoint reads back and `--resume` from it completes
 *       (exit 0, a final test_acc= line). An ordered run is a function of
 *       its seed and a checkpoint holds all of its state, so a resumed run
 *       ends with the test accuracy, as printed, and the final checkpoint,
 *       bit for bit, of a run that was never interrupted
 *       (test_train's test_resume_after_kill shows one case of it; here it
 *       is checked after every fault, wherever the run had got to).
 *
 * Cases:
 *   - each stage kind SIGKILLed over several runs, half at a random moment
 *     of the run, half a random time after a randomly chosen checkpoint:
 *     exit 3 naming the stage, rank, pid and signal;
 *   - an I/O error under a running extractor (SLUICE_FAULT_READ_EIO: the
 *     Nth read of the process completes with -EIO, N chosen past the first
 *     checkpoint) on every I/O path (io_uring with O_DIRECT, io_uring
 *     through the page cache, pread, mmap): exit 3, the extractor naming
 *     node, offset and "Input/output error";
 *   - the disk filling up under a checkpoint: a tmpfs in a private mount
 *     namespace as train.checkpoint_dir, sized so that the first checkpoint
 *     fits and the second does not (or, where mounting is not permitted,
 *     RLIMIT_FSIZE on the trainer, whose SIGXFSZ is ignored): exit 3 naming
 *     the checkpoint and the errno text, no partial file, the previous
 *     checkpoint intact, and --resume once there is room again;
 *   - buffers beyond the machine's memory: a feature buffer that would
 *     hold more than MemAvailable is refused before anything starts (exit
 *     2, naming pipeline.feature_buffer_mb and MemAvailable), while sizes
 *     beyond memory that the run never needs are only caps;
 *   - the dataset changed between a run and its --resume: features.bin
 *     truncated or extended, labels.bin or test.bin rewritten with the same
 *     size (found by the launch verification, core/dataset_verify.h;
 *     test_integrity has the rest of it), another dataset of the same
 *     sizes in its place: refused (exit
 *     2) naming the file, or the checkpoint and the dataset; resumed once
 *     the dataset is back; a checkpoint older than the dataset record is
 *     not checked. What a dataset's identity covers, and the small files'
 *     checksum limit, are checked on their own.
 *
 * Random choices come from one seed, printed first; SLUICE_FAULT_SEED=N
 * makes the same choices again (when processes run still varies), and
 * SLUICE_FAULT_RUNS=N sets the runs per stage kind. */
#include "t_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <time.h>

#include "core/dataset.h"
#include "core/util.h"
#include "launcher/layout.h"
#include "ops/ckpt.h"
#include "t_launch.h"

#define CASE_ALARM_S 240
#define KILL_EPOCHS 12 /* the runs of the kill, disk-full and dataset cases */
#define KILL_RUNS 4    /* runs per stage kind */
#define IO_EPOCHS 3    /* the runs of the I/O error case */
#define IO_STRIDE 512  /* row stride of g_ds_io (dim 100, f32) */

static char g_ds[1200], g_ds_io[1200], g_ds_other[1200];
static char g_cfg[1200], g_cfg_io[1200];
static char g_stages[1300]; /* SLUICE_STAGE_DIR=<the real stages in build/bin> */
static unsigned g_seed, g_seed0;

/* An uninterrupted run of a configuration: what resumed runs must equal. */
struct ref {
    bool done;
    char acc[32];   /* test_acc of the final line, as printed */
    char ck[1300];  /* its checkpoint directory */
    double seconds; /* its wall time */
    double epoch_s; /* the mean of its epoch lines' seconds (the run's set-up left out) */
    uint64_t reads; /* rows the extractor read (its line at the end) */
};
static struct ref g_ref, g_ref_io;

/* Batches of 16 targets: 150 batches an epoch, so that an epoch lasts long
 * enough (tens of ms) for a kill timed after a checkpoint to land before
 * the run is over, even on a loaded machine. */
static void write_config(const char *path, const char *ds, const char *extra)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"sage\"\nhidden = 32\nfanouts = [8, 4]\ndropout = 0.2\n\n"
            "[train]\nbatch_size = 16\nepochs = 3\nlr = 0.01\nseed = 5\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 8\nstaging_mb = 4\nio_depth = 16\n"
            "ordered = true\n%s",
            ds, extra ? extra : "");
    fclose(f);
}

/* Starts gnnlaunch --cpu cfg with checkpoints in ck, `epochs` epochs, the
 * extra arguments `more` and the extra environment `env`. */
static void start(struct t_proc *r, const char *const *env, const char *cfg, const char *ck, int epochs,
                  const char *const *more)
{
    char set[1400], ep[32];
    snprintf(set, sizeof set, "train.checkpoint_dir=\"%s\"", ck);
    snprintf(ep, sizeof ep, "%d", epochs);
    const char *envp[8] = {g_stages};
    int ne = 1;
    for (int i = 0; env && env[i] && ne < 7; i++)
        envp[ne++] = env[i];
    const char *argv[24] = {"--cpu", cfg, "--set", set, "--epochs", ep};
    int na = 6;
    for (int i = 0; more && more[i] && na < 23; i++)
        argv[na++] = more[i];
    t_launch_start(r, envp, argv); /* the child has its copies: set and ep may go */
}

/* A run to its end: exit status `want` and nothing left behind. */
static void run(struct t_proc *r, const char *const *env, const char *cfg, const char *ck, int epochs,
                const char *const *more, int want)
{
    start(r, env, cfg, ck, epochs, more);
    t_launch_wait(r, 120);
    t_expect_code(r, want);
    t_expect_clean(r);
}

/* True once the launcher has ended (it is not reaped: t_launch_wait does). */
static bool launcher_ended(const struct t_proc *r)
{
    siginfo_t si;
    memset(&si, 0, sizeof si);
    return waitid(P_PID, (id_t)r->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == r->pid;
}

static void fail_with_log(const struct t_proc *r, const char *what)
{
    char log[8192];
    t_slurp(r->log, log, sizeof log);
    fail_msg("%s (seed %u); gnnlaunch's output:\n%s", what, g_seed0, log);
}

/* The pid of the running stage of rank 0, once it has exec'd. */
static pid_t wait_for_stage(const struct t_proc *r, enum run_stage s)
{
    double t0 = t_now();
    for (;;) {
        struct t_kid k[T_MAX_KIDS];
        int n = t_find_kids(r->pid, k, T_MAX_KIDS);
        for (int i = 0; i < n; i++)
            if (k[i].stage == (int)s && k[i].rank == 0)
                return k[i].pid;
        if (launcher_ended(r) || t_now() - t0 > 60)
            fail_with_log(r, "the stage to kill never ran");
        t_sleep_ms(1);
    }
}

/* Waits for path to exist while the run lives; false if the run ended. */
static bool wait_for_file(const struct t_proc *r, const char *path)
{
    double t0 = t_now();
    while (access(path, F_OK) != 0) {
        if (launcher_ended(r) || t_now() - t0 > 60)
            return access(path, F_OK) == 0;
        t_sleep_ms(1);
    }
    return true;
}

/* The value of test_acc on the last line starting "test_acc=". */
static void final_acc(const struct t_proc *r, int epochs, char *out, size_t len)
{
    static char buf[1 << 16];
    t_slurp(r->log, buf, sizeof buf);
    const char *last = NULL;
    for (const char *p = buf; (p = strstr(p, "test_acc=")); p++)
        if (p == buf || p[-1] == '\n')
            last = p;
    char acc[32];
    int e = 0;
    if (!last || sscanf(last, "test_acc=%31[0-9.] val_acc=%*f epochs=%d", acc, &e) != 2)
        fail_with_log(r, "no final test_acc= line");
    if (e != epochs)
        fail_with_log(r, "the final line counts other epochs than the run had");
    snprintf(out, len, "%s", acc);
}

/* Every tensor of two checkpoints, byte for byte, and the step count. */
static void expect_same_tensors(const char *a, const char *b, const char *what)
{
    struct ckpt x, y;
    char err[1024];
    if (ckpt_read(&x, a, err, sizeof err) != 0 || ckpt_read(&y, b, err, sizeof err) != 0)
        fail_msg("%s: %s", what, err);
    assert_int_equal(ckpt_count(&x), ckpt_count(&y));
    for (uint32_t i = 0; i < ckpt_count(&x); i++) {
        const struct ckpt_entry *e = ckpt_entry_at(&x, i);
        uint32_t nd;
        uint64_t shape[CKPT_MAX_NDIM];
        const void *p = ckpt_find(&x, e->name, e->dtype, &nd, shape);
        const void *q = ckpt_find(&y, e->name, e->dtype, NULL, NULL);
        if (!p || !q)
            fail_msg("%s: %s lacks tensor %s", what, p ? b : a, e->name);
        size_t bytes = ckpt_dtype_size(e->dtype);
        for (uint32_t d = 0; d < nd; d++)
            bytes *= shape[d];
        if (memcmp(p, q, bytes) != 0)
            fail_msg("%s: tensor %s differs between %s and %s (seed %u)", what, e->name, a, b, g_seed0);
    }
    assert_string_equal(ckpt_meta(&x, "step"), ckpt_meta(&y, "step"));
    ckpt_free(&x);
    ckpt_free(&y);
}

/* Entries of dir but hidden ones (.lock); those whose name holds
 * ".partial-" in *partial. */
static int dir_entries(const char *dir, int *partial)
{
    int n = 0;
    *partial = 0;
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "best.safetensors") || !strcmp(e->d_name, "latest.safetensors"))
            continue; /* ., .. and the directory's .lock, and the two pointers (launcher/ckptdir.h) */
        n++;
        *partial += strstr(e->d_name, ".partial-") != NULL;
    }
    closedir(d);
    return n;
}

/* The extractor's line at the end: rows it read. */
static uint64_t rows_read(const struct t_proc *r)
{
    static char buf[1 << 16];
    t_slurp(r->log, buf, sizeof buf);
    unsigned long long b, rows, hits, shared, read = 0;
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
        if (sscanf(line, "gnn-extractor rank 0: %llu batches, %llu rows: %llu hits, %llu shared, %llu read", &b, &rows,
                   &hits, &shared, &read) == 5)
            return read;
    return 0;
}

/* The mean `seconds=` of r's epoch lines (0 when it printed none). */
static double epoch_seconds(const struct t_proc *r)
{
    static char buf[1 << 18];
    t_slurp(r->log, buf, sizeof buf);
    double sum = 0;
    int n = 0;
    for (char *save = NULL, *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        const char *at = strncmp(line, "epoch ", 6) ? NULL : strstr(line, " seconds=");
        if (at)
            sum += strtod(at + 9, NULL), n++;
    }
    return n ? sum / n : 0;
}

/* The uninterrupted run of cfg for `epochs` epochs (once per process). */
static void ensure_ref(struct ref *ref, const char *cfg, int epochs, const char *name, const char *const *more)
{
    if (ref->done)
        return;
    snprintf(ref->ck, sizeof ref->ck, "%s/ck-%s", t_ldir, name);
    struct t_proc r;
    run(&r, NULL, cfg, ref->ck, epochs, more, 0);
    final_acc(&r, epochs, ref->acc, sizeof ref->acc);
    ref->seconds = r.t_end - r.t0;
    ref->epoch_s = epoch_seconds(&r);
    ref->reads = rows_read(&r);
    ref->done = true;
}

/* (c): what --resume makes of checkpoint directory ck after a failed run
 * of `epochs` epochs. No checkpoint: refused, saying so. Every epoch
 * checkpointed: refused, saying so. Otherwise the resumed run must end as
 * ref did. Returns the epoch resumed from (0: none). */
static uint32_t expect_resumable(const char *cfg, const char *ck, const struct ref *ref, int epochs,
                                 const char *const *env, const char *const *more, const char *what)
{
    char path[1400], msg[1024];
    uint32_t epoch = 0;
    int rc = ckpt_latest(ck, path, sizeof path, &epoch, msg, sizeof msg), partial;
    if (rc != 0 && rc != -ENOENT)
        fail_msg("%s: no readable checkpoint in %s: %s (seed %u)", what, ck, msg, g_seed0);
    dir_entries(ck, &partial);
    if (partial) /* ckpt_latest removes those of dead writers */
        fail_msg("%s: %s still holds a partial checkpoint", what, ck);
    const char *args[16] = {"--resume"};
    int na = 1;
    for (int i = 0; more && more[i] && na < 15; i++)
        args[na++] = more[i];
    struct t_proc r;
    if (rc == -ENOENT) {
        run(&r, env, cfg, ck, epochs, args, 2);
        t_expect_log(&r, "--resume: no checkpoint in ");
        return 0;
    }
    if (epoch == (uint32_t)epochs) {
        run(&r, env, cfg, ck, epochs, args, 2);
        t_expect_log(&r, " epochs; pass a larger --epochs to train on");
        return epoch;
    }
    run(&r, env, cfg, ck, epochs, args, 0);
    char want[1500], acc[32], last[1400], ref_last[1400];
    snprintf(want, sizeof want, "gnnlaunch: resuming from %s", path);
    t_expect_log(&r, want);
    final_acc(&r, epochs, acc, sizeof acc);
    if (strcmp(acc, ref->acc) != 0)
        fail_msg("%s: resumed from epoch %" PRIu32
                 ", the run ended at test_acc=%s; an uninterrupted one at %s (seed %u)",
                 what, epoch, acc, ref->acc, g_seed0);
    assert_int_equal(ckpt_path(last, sizeof last, ck, (uint32_t)epochs), 0);
    assert_int_equal(ckpt_path(ref_last, sizeof ref_last, ref->ck, (uint32_t)epochs), 0);
    expect_same_tensors(last, ref_last, what);
    return epoch;
}

/* ---- 1. SIGKILL of each stage kind -------------------------------------------------------- */

static void test_kill_each_stage(void **state)
{
    (void)state;
    ensure_ref(&g_ref, g_cfg, KILL_EPOCHS, "ref", NULL);
    const char *e = getenv("SLUICE_FAULT_RUNS");
    int runs = e && atoi(e) > 0 ? atoi(e) : KILL_RUNS;
    /* odd rounds stop within an epoch's time (the reference's mean epoch,
     * set-up left out: with a fast pipeline the start-up is most of a short
     * run, and a share of the whole run reached epochs past the sampler's
     * and releaser's last batch) after checkpoint k <= KILL_EPOCHS - 4 */
    double epoch_s = g_ref.epoch_s > 0 ? g_ref.epoch_s : g_ref.seconds / KILL_EPOCHS;
    int run_ms = (int)(g_ref.seconds * 1000 * 0.9) + 1, epoch_ms = (int)(epoch_s * 1000) + 1;
    for (int s = 0; s < RUN_STAGES; s++) {
        const char *prog = run_stage_program((enum run_stage)s);
        int resumed = 0, before = 0, complete = 0, after_end = 0;
        char from[256] = "";
        for (int round = 0; round < runs; round++) {
            char ck[1300], first[1400], what[256];
            snprintf(ck, sizeof ck, "%s/ck-kill-%d-%d", t_ldir, s, round);
            /* even rounds: at a moment of the run (ms after its start); odd
             * rounds: within an epoch's time once checkpoint k exists */
            uint32_t k = round % 2 ? 1 + (uint32_t)(rand_r(&g_seed) % (KILL_EPOCHS - 4)) : 0;
            int delay = (int)(rand_r(&g_seed) % (unsigned)(k ? epoch_ms : run_ms));
            if (k)
                snprintf(what, sizeof what, "%s SIGKILLed %d ms after checkpoint %" PRIu32, prog, delay, k);
            else
                snprintf(what, sizeof what, "%s SIGKILLed %d ms into the run", prog, delay);
            struct t_proc r;
            start(&r, NULL, g_cfg, ck, KILL_EPOCHS, NULL);
            pid_t victim = wait_for_stage(&r, (enum run_stage)s);
            assert_int_equal(ckpt_path(first, sizeof first, ck, k), 0);
            if (k && !wait_for_file(&r, first))
                fail_with_log(&r, "the run ended without the checkpoint to kill after");
            double at = (k ? t_now() : r.t0) + delay / 1000.0;
            if (at > t_now())
                t_sleep_ms((int)((at - t_now()) * 1000));
            kill(victim, SIGKILL); /* ESRCH: it has ended and been reaped */
            t_launch_wait(&r, 60);
            t_expect_clean(&r);
            if (r.code == 0 || k) /* which rounds counted, for a failure below */
                fprintf(stderr, "test_faults: %s: %s\n", what, r.code == 0 ? "the run completed" : "the run failed");
            if (r.code == 0) { /* the stage had finished its part: the run must be whole */
                char acc[32];
                final_acc(&r, KILL_EPOCHS, acc, sizeof acc);
                assert_string_equal(acc, g_ref.acc);
                after_end++;
                t_rmrf(ck);
                continue;
            }
            t_expect_code(&r, 3);
            char want[160];
            snprintf(want, sizeof want, "%s rank 0 (pid %ld) was killed by signal 9 (SIGKILL)", prog, (long)victim);
            t_expect_log(&r, want);
            uint32_t got = expect_resumable(g_cfg, ck, &g_ref, KILL_EPOCHS, NULL, NULL, what);
            if (got < k)
                fail_msg("%s: resumed from epoch %" PRIu32 " (seed %u)", what, got, g_seed0);
            if (got == KILL_EPOCHS) {
                complete++; /* killed after the last checkpoint: nothing to resume */
            } else if (got) {
                resumed++;
                snprintf(from + strlen(from), sizeof from - strlen(from), " %" PRIu32, got);
            } else {
                before++;
            }
            t_rmrf(ck);
        }
        fprintf(stderr,
                "test_faults: %s SIGKILLed in %d runs: %d resumed (from epoch%s), %d before the first checkpoint, %d "
                "after the last, %d after the stage had finished\n",
                prog, runs, resumed, from[0] ? from : " -", before, complete, after_end);
        if (resumed + complete < runs / 2)
            fail_msg("%s: only %d of %d runs were killed after a checkpoint (seed %u)", prog, resumed + complete, runs,
                     g_seed0);
    }
}

/* ---- 2. an I/O error under a running extractor -------------------------------------------- */

static void test_read_eio(void **state)
{
    (void)state;
    ensure_ref(&g_ref_io, g_cfg_io, IO_EPOCHS, "ref-io", NULL);
    if (g_ref_io.reads < 1000)
        fail_msg("the I/O reference run read only %" PRIu64 " rows; the buffer should be smaller than the dataset",
                 g_ref_io.reads);
    uint64_t per_epoch = g_ref_io.reads / IO_EPOCHS;
    static const struct {
        const char *name, *env, *io, *announced;
    } paths[] = {
        {"io_uring with O_DIRECT", NULL, "direct", "extracting with io_uring"},
        {"io_uring through the page cache", NULL, "buffered", "extracting with io_uring"},
        {"pread", "SLUICE_NO_IO_URING=1", "direct", "extracting with pread(2)"},
        {"mmap", NULL, "mmap", "reading features through a read-only mapping"},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(paths); i++) {
        /* A read past epoch 1 and its checkpoint, and before the last
         * epoch's. The run is 127 batches (3 epochs of 25 training and 13
         * validation batches, then 13 test batches): checkpoint 1 comes at
         * batch 38, checkpoint 3 at batch 114, but the extractor runs up to
         * the batch arena's 16 slots ahead of the trainer and the passes
         * miss unevenly (the cold first epoch, the evaluation passes), so
         * which read lands between the two checkpoints is only roughly
         * known. The read is drawn from [lo, hi); a run that failed before
         * checkpoint 1 (or after checkpoint 3) still has its resume checked,
         * then raises lo (lowers hi) and tries again, at most 5 times. */
        uint64_t lo = per_epoch * 12 / 10, hi = per_epoch * 24 / 10;
        uint32_t got = 0;
        char what[256], ck[1300];
        unsigned long long node = 0, off = 0;
        for (int attempt = 0; attempt < 5 && lo < hi; attempt++) {
            uint64_t n = lo + (uint64_t)rand_r(&g_seed) % (hi - lo);
            char fault[64], io[64];
            snprintf(fault, sizeof fault, "SLUICE_FAULT_READ_EIO=%" PRIu64, n);
            snprintf(io, sizeof io, "pipeline.io=\"%s\"", paths[i].io);
            snprintf(ck, sizeof ck, "%s/ck-eio-%zu-%d", t_ldir, i, attempt);
            snprintf(what, sizeof what, "read %" PRIu64 " failing with EIO (%s)", n, paths[i].name);
            const char *env[] = {fault, paths[i].env, NULL}, *more[] = {"--set", io, NULL};
            struct t_proc r;
            run(&r, env, g_cfg_io, ck, IO_EPOCHS, more, 3);
            t_expect_log(&r, paths[i].announced);
            t_expect_log(&r, "gnn-extractor rank 0: batch ");
            t_expect_log(&r, "failed: Input/output error");
            t_expect_log(&r, "gnn-extractor rank 0 (pid ");
            t_expect_log(&r, ") exited with status 3");
            /* the node and its offset in features.bin */
            static char log[1 << 16];
            t_slurp(r.log, log, sizeof log);
            const char *p = strstr(log, "read of node ");
            if (!p || sscanf(p, "read of node %llu at offset %llu failed", &node, &off) != 2)
                fail_with_log(&r, "no 'read of node N at offset O failed' from the extractor");
            if (off != node * IO_STRIDE)
                fail_msg("%s: node %llu is at offset %llu, not %llu", what, node, node * IO_STRIDE, off);
            got = expect_resumable(g_cfg_io, ck, &g_ref_io, IO_EPOCHS, (const char *[]){paths[i].env, NULL}, more,
                                   what);
            t_rmrf(ck);
            if (got >= 1 && got < IO_EPOCHS)
                break;
            fprintf(stderr, "test_faults: %s: resumed from epoch %" PRIu32 ", outside 1..%d; another read\n", what,
                    got, IO_EPOCHS - 1);
            if (got == 0)
                lo = n + 1;
            else
                hi = n;
        }
        if (got < 1 || got >= IO_EPOCHS)
            fail_msg("%s: resumed from epoch %" PRIu32 "; no read of 5 tried failed between the first and the last "
                     "checkpoint (seed %u)",
                     what, got, g_seed0);
        fprintf(stderr, "test_faults: %s: node %llu at offset %llu; resumed from epoch %" PRIu32 "\n", what, node, off,
                got);
    }
}

/* ---- 3. the disk fills up under a checkpoint ---------------------------------------------- */

/* A tmpfs of `bytes` on dir, in a mount namespace of this process's own
 * (made once; the children started later share it; nothing leaks out of
 * it). 0, or -1 with the reason in why. */
static int mount_tiny(const char *dir, uint64_t bytes, char *why, size_t len)
{
    static bool private_ns;
    if (!private_ns) {
        if (unshare(CLONE_NEWNS) != 0) {
            snprintf(why, len, "unshare(CLONE_NEWNS): %s", strerror(errno));
            return -1;
        }
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) {
            snprintf(why, len, "making / private: %s", strerror(errno));
            return -1;
        }
        private_ns = true;
    }
    char opt[64];
    snprintf(opt, sizeof opt, "size=%" PRIu64 ",mode=0755", bytes);
    if (mkdir(dir, 0755) != 0 || mount("sluice-test", dir, "tmpfs", MS_NOSUID | MS_NODEV, opt) != 0) {
        snprintf(why, len, "mount -t tmpfs -o %s %s: %s", opt, dir, strerror(errno));
        rmdir(dir);
        return -1;
    }
    return 0;
}

static void test_disk_full(void **state)
{
    (void)state;
    ensure_ref(&g_ref, g_cfg, KILL_EPOCHS, "ref", NULL);
    char ck[1300], path[1400], ref1[1400], why[1200] = "SLUICE_FAULT_DISK=rlimit";
    struct stat st;
    assert_int_equal(ckpt_path(ref1, sizeof ref1, g_ref.ck, 1), 0);
    assert_int_equal(stat(ref1, &st), 0);
    snprintf(ck, sizeof ck, "%s/ck-full", t_ldir);
    /* room for one checkpoint (its paths may differ in length from the
     * reference's by less than the 1 KiB added), not for a second */
    uint64_t room = sl_round_up((uint64_t)st.st_size + 1024, 4096) + 4096; /* and a page for .lock */
    const char *force = getenv("SLUICE_FAULT_DISK");
    bool tmpfs = !(force && !strcmp(force, "rlimit")) && mount_tiny(ck, room, why, sizeof why) == 0;
    struct t_proc r;
    int partial;
    if (tmpfs) {
        fprintf(stderr,
                "test_faults: disk full: train.checkpoint_dir is a %" PRIu64
                "-byte tmpfs in a private mount namespace (a %lld-byte checkpoint fits once)\n",
                room, (long long)st.st_size);
        run(&r, NULL, g_cfg, ck, KILL_EPOCHS, NULL, 3);
        assert_int_equal(ckpt_path(path, sizeof path, ck, 2), 0);
        char want[1500];
        snprintf(want, sizeof want, "gnn-trainer rank 0: epoch 2: cannot write checkpoint %s (through %s.partial-",
                 path, path);
        t_expect_log(&r, want);
        t_expect_log(&r, "No space left on device");
        t_expect_log(&r, "the checkpoints before it are untouched: make room, then continue from the newest with "
                         "gnnlaunch --resume");
        t_expect_log(&r, "gnn-trainer rank 0 (pid ");
        t_expect_log(&r, ") exited with status 3");
        /* the first checkpoint alone, whole; the partial second removed */
        assert_int_equal(dir_entries(ck, &partial), 1);
        assert_int_equal(ckpt_path(path, sizeof path, ck, 1), 0);
        expect_same_tensors(path, ref1, "the checkpoint before the disk filled up");
        /* space freed: the same file system, larger */
        if (mount("sluice-test", ck, "tmpfs", MS_REMOUNT | MS_NOSUID | MS_NODEV, "size=67108864") != 0)
            fail_msg("remounting %s larger: %s", ck, strerror(errno));
    } else {
        /* RLIMIT_FSIZE on the running trainer once checkpoint 1 exists: its
         * next checkpoint write fails with EFBIG (SIGXFSZ ignored: the
         * launcher and its stages inherit that from here) */
        fprintf(stderr, "test_faults: disk full: RLIMIT_FSIZE on the trainer (a tmpfs cannot be mounted: %s)\n", why);
        struct sigaction ign = {.sa_handler = SIG_IGN}, old;
        sigaction(SIGXFSZ, &ign, &old);
        start(&r, NULL, g_cfg, ck, KILL_EPOCHS, NULL);
        sigaction(SIGXFSZ, &old, NULL);
        pid_t trainer = wait_for_stage(&r, RUN_TRAINER);
        assert_int_equal(ckpt_path(path, sizeof path, ck, 1), 0);
        if (!wait_for_file(&r, path))
            fail_with_log(&r, "the run ended before its first checkpoint");
        struct rlimit lim = {.rlim_cur = (rlim_t)st.st_size / 2, .rlim_max = (rlim_t)st.st_size / 2};
        if (prlimit(trainer, RLIMIT_FSIZE, &lim, NULL) != 0)
            fail_msg("prlimit(%ld, RLIMIT_FSIZE): %s", (long)trainer, strerror(errno));
        t_launch_wait(&r, 120);
        t_expect_code(&r, 3);
        t_expect_clean(&r);
        t_expect_log(&r, "cannot write checkpoint ");
        t_expect_log(&r, "File too large");
        t_expect_log(&r, "make room, then continue from the newest with gnnlaunch --resume");
        t_expect_log(&r, ") exited with status 3");
        dir_entries(ck, &partial);
    }
    assert_int_equal(partial, 0);
    uint32_t got = expect_resumable(g_cfg, ck, &g_ref, KILL_EPOCHS, NULL, NULL, "resumed after the disk filled up");
    assert_true(got >= 1);
    if (tmpfs) {
        assert_int_equal(got, 1);
        assert_int_equal(umount2(ck, MNT_DETACH), 0);
    }
    t_rmrf(ck);
}

/* ---- 4. buffers beyond the machine's memory ----------------------------------------------- */

static uint64_t mem_available(void)
{
    char buf[8192];
    t_slurp("/proc/meminfo", buf, sizeof buf);
    const char *p = strstr(buf, "MemAvailable:");
    unsigned long long kib;
    assert_non_null(p);
    assert_int_equal(sscanf(p, "MemAvailable: %llu kB", &kib), 1);
    return (uint64_t)kib * 1024;
}

static void test_buffers_beyond_memory(void **state)
{
    (void)state;
    /* A dataset of g_ds's graph whose rows are so long that one buffer
     * slot per node takes more than MemAvailable: features.bin a sparse
     * file of that size, dataset.toml saying so (only sizes are checked at
     * launch). With feature_buffer_mb and staging_mb at 10^7 MiB (10 TiB)
     * the buffer is the whole dataset, and refused before anything starts.
     * model.hidden = 1 keeps the model the launcher sizes small. */
    uint64_t mem = mem_available(), nodes = 4000;
    uint64_t stride = sl_round_up((mem + nodes - 1) / nodes, 512), bytes = nodes * stride;
    char ds[1300], ck[1300], out[4096];
    snprintf(ds, sizeof ds, "%s/ds-huge", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-huge", t_ldir);
    if (t_run(out, sizeof out,
              "rm -rf '%s' && cp -r '%s' '%s' && truncate -s %" PRIu64 " '%s/features.bin' && "
              "sed -i -e 's/^feat_dim = .*/feat_dim = %" PRIu64 "/' -e '/^\\[features\\]/,/^\\[/{"
              "s/^shape = .*/shape = [%" PRIu64 ", %" PRIu64 "]/;s/^row_stride = .*/row_stride = %" PRIu64 "/;"
              "s/^bytes = .*/bytes = %" PRIu64 "/}' '%s/dataset.toml'",
              ds, g_ds, ds, bytes, ds, stride / 4, nodes, stride / 4, stride, bytes, ds) != 0)
        fail_msg("making %s: %s", ds, out);
    char set[1400];
    snprintf(set, sizeof set, "dataset.path=\"%s\"", ds);
    struct t_proc r;
    run(&r, NULL, g_cfg, ck, 1,
        (const char *[]){"--set", set, "--set", "pipeline.feature_buffer_mb=10000000", "--set",
                         "pipeline.staging_mb=10000000", "--set", "model.hidden=1", NULL},
        2);
    t_expect_log(&r, "the feature buffers, batch arenas and staging buffer would need ");
    t_expect_log(&r, "lower pipeline.feature_buffer_mb");
    t_expect_log(&r, "half of the available memory (MemAvailable), which is ");
    t_expect_no_log(&r, "batch arena per rank"); /* nothing was created */
    t_rmrf(ds);
    /* the same sizes on the small dataset are caps: the buffer holds every
     * node once and each extractor thread stages pipeline.io_depth reads */
    snprintf(ck, sizeof ck, "%s/ck-caps", t_ldir);
    run(&r, NULL, g_cfg, ck, 1,
        (const char *[]){"--set", "pipeline.feature_buffer_mb=10000000", "--set", "pipeline.staging_mb=10000000", NULL},
        0);
    t_expect_log(&r, "gnnlaunch: feature buffer per rank: 4000 slots x 64 B");
    char log[16384];
    t_slurp(r.log, log, sizeof log);
    if (!strstr(log, "extracting with pread(2)")) /* io_uring says how deep it goes */
        t_expect_log(&r, "extracting with io_uring: 16 reads in flight per thread");
    t_rmrf(ck);
}

/* ---- 5. the dataset changed between a run and its --resume -------------------------------- */

/* Flips the lowest bit of the first byte of dir/name: same size, other bytes. */
static void flip_first_byte(const char *dir, const char *name)
{
    char p[1400];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    int fd = open(p, O_RDWR);
    assert_true(fd >= 0);
    unsigned char b;
    assert_int_equal(pread(fd, &b, 1, 0), 1);
    b ^= 1;
    assert_int_equal(pwrite(fd, &b, 1, 0), 1);
    close(fd);
}

/* Rewrites checkpoint path without the dataset metadata, as checkpoints
 * written before it existed are. */
static void strip_dataset_meta(const char *path)
{
    struct ckpt c;
    char err[1024];
    assert_int_equal(ckpt_read(&c, path, err, sizeof err), 0);
    struct ckpt_tensor *t = calloc(ckpt_count(&c), sizeof *t);
    const char **meta = calloc(2 * (size_t)c.nmeta, sizeof *meta);
    assert_true(t && meta);
    for (uint32_t i = 0; i < ckpt_count(&c); i++) {
        const struct ckpt_entry *e = ckpt_entry_at(&c, i);
        t[i] = (struct ckpt_tensor){.name = e->name, .data = c.data + e->begin, .dtype = e->dtype, .ndim = e->ndim};
        memcpy(t[i].shape, e->shape, sizeof t[i].shape);
    }
    uint32_t nm = 0;
    for (uint32_t i = 0; i < c.nmeta; i++)
        if (strcmp(c.meta[2 * i], CKPT_META_DATASET) && strcmp(c.meta[2 * i], CKPT_META_DATASET_PATH) &&
            strcmp(c.meta[2 * i], CKPT_META_RUN) && strcmp(c.meta[2 * i], CKPT_META_RUN_CONFIG)) {
            meta[2 * nm] = c.meta[2 * i];
            meta[2 * nm + 1] = c.meta[2 * i + 1];
            nm++;
        }
    assert_int_equal(nm + 4, c.nmeta);
    if (ckpt_write(path, t, ckpt_count(&c), meta, nm, err, sizeof err) != 0) /* renamed over: c's mapping stays */
        fail_msg("%s", err);
    free(t);
    free(meta);
    ckpt_free(&c);
}

static void test_dataset_changed(void **state)
{
    (void)state;
    char ds[1300], cfg[1300], ck[1300], out[4096], ckpt[1400];
    snprintf(ds, sizeof ds, "%s/ds-changed", t_ldir);
    snprintf(cfg, sizeof cfg, "%s/changed.toml", t_ldir);
    snprintf(ck, sizeof ck, "%s/ck-changed", t_ldir);
    assert_int_equal(ckpt_path(ckpt, sizeof ckpt, ck, 2), 0);
    assert_int_equal(t_run(out, sizeof out, "rm -rf '%s' && cp -r '%s' '%s'", ds, g_ds, ds), 0);
    write_config(cfg, ds, NULL);
    struct t_proc r;
    run(&r, NULL, cfg, ck, 2, NULL, 0);
    char feat_bytes[64], other_id[1500];
    struct stat st;
    snprintf(out, sizeof out, "%s/features.bin", ds);
    assert_int_equal(stat(out, &st), 0);
    snprintf(feat_bytes, sizeof feat_bytes, "bytes but dataset.toml records %lld", (long long)st.st_size);
    snprintf(other_id, sizeof other_id, "--resume: %s was trained on the dataset at %s (identity ", ckpt, ds);
    const struct {
        const char *what;
        const char *cmd;  /* sh, %1$s = the dataset, %2$s = another one of the same sizes */
        const char *file; /* flipped in place, when no cmd */
        const char *msg[2];
    } changes[] = {
        {"features.bin truncated", "truncate -s -4096 '%1$s/features.bin'", NULL, {"features.bin: ", feat_bytes}},
        {"features.bin extended", "truncate -s +4096 '%1$s/features.bin'", NULL, {"features.bin: ", feat_bytes}},
        {"labels.bin rewritten", NULL, "labels.bin", {"/labels.bin: ", "dataset.path = "}},
        {"test.bin rewritten", NULL, "test.bin", {"/test.bin: ", "dataset.path = "}},
        {"another dataset", "rm -rf '%1$s' && cp -r '%2$s' '%1$s'", NULL, {other_id, "holds another one (identity "}},
    };
    for (size_t i = 0; i < SL_ARRAY_LEN(changes); i++) {
        if (changes[i].cmd)
            assert_int_equal(t_run(out, sizeof out, changes[i].cmd, ds, g_ds_other), 0);
        else
            flip_first_byte(ds, changes[i].file);
        run(&r, NULL, cfg, ck, 3, (const char *[]){"--resume", NULL}, 2);
        for (int m = 0; m < 2; m++)
            t_expect_log(&r, changes[i].msg[m]);
        t_expect_no_log(&r, "gnnlaunch: resuming from ");
        t_expect_no_log(&r, "batch arena per rank"); /* refused before anything was created */
        assert_int_equal(t_run(out, sizeof out, "rm -rf '%s' && cp -r '%s' '%s'", ds, g_ds, ds), 0);
    }
    /* the dataset back: resumed from the checkpoint */
    char acc[32], want[1500];
    run(&r, NULL, cfg, ck, 3, (const char *[]){"--resume", NULL}, 0);
    snprintf(want, sizeof want, "gnnlaunch: resuming from %s", ckpt);
    t_expect_log(&r, want);
    final_acc(&r, 3, acc, sizeof acc);
    /* a checkpoint from before the dataset was recorded is not checked */
    assert_int_equal(ckpt_path(ckpt, sizeof ckpt, ck, 3), 0);
    strip_dataset_meta(ckpt);
    char err[1024];
    assert_int_equal(ckpt_check_dataset(ck, 3, 0x1234, ds, err, sizeof err), 0);
    assert_int_equal(t_run(out, sizeof out, "rm -rf '%s' && cp -r '%s' '%s'", ds, g_ds_other, ds), 0);
    /* such a checkpoint records no run either: --resume cannot tell it is
     * this run's (issue 17) and wants it named; named, it is continued */
    run(&r, NULL, cfg, ck, 4, (const char *[]){"--resume", NULL}, 2);
    t_expect_log(&r, "records no run identity");
    char named[1400];
    snprintf(named, sizeof named, "%s.named", ckpt);
    assert_int_equal(t_run(out, sizeof out, "cp '%s' '%s'", ckpt, named), 0);
    run(&r, NULL, cfg, ck, 4, (const char *[]){"--resume-from", named, NULL}, 0);
    final_acc(&r, 4, acc, sizeof acc);
    t_rmrf(ds);
    t_rmrf(ck);
}

/* What tells datasets apart: the recorded contents, not where the
 * dataset is or the command that made it. (The contents themselves are
 * verified at launch: test_verify, test_integrity.) */
static void test_dataset_identity(void **state)
{
    (void)state;
    struct dataset_meta a, b;
    char err[1024], out[4096], moved[1300];
    assert_int_equal(dataset_meta_read(g_ds, &a, true, err, sizeof err), 0);
    assert_int_equal(dataset_meta_read(g_ds_other, &b, true, err, sizeof err), 0);
    assert_true(strcmp(a.source, b.source) != 0);
    assert_true(dataset_meta_identity(&a) != dataset_meta_identity(&b)); /* features.xxh3 differs */
    b.f[DATASET_FEATURES].xxh3 = a.f[DATASET_FEATURES].xxh3;
    assert_true(dataset_meta_identity(&a) == dataset_meta_identity(&b)); /* everything else is the same */
    for (int i = 0; i < DATASET_FILES; i++) {
        b = a;
        b.f[i].xxh3 ^= 1;
        assert_true(dataset_meta_identity(&a) != dataset_meta_identity(&b));
    }
    snprintf(moved, sizeof moved, "%s/ds-moved", t_ldir);
    assert_int_equal(t_run(out, sizeof out, "rm -rf '%s' && cp -r '%s' '%s'", moved, g_ds, moved), 0);
    assert_int_equal(dataset_meta_read(moved, &b, true, err, sizeof err), 0);
    assert_true(dataset_meta_identity(&a) == dataset_meta_identity(&b));
    t_rmrf(moved);
}

/* ---- fixture ---------------------------------------------------------------------------- */

static int synth(const char *out, int dim, double noise)
{
    char prep[1200], log[4096];
    t_bin(prep, sizeof prep, "gnnprep");
    if (t_run(log, sizeof log,
              "%s synth %s --nodes 4000 --avg-degree 8 --feat-dim %d --classes 4 --homophily 0.9 --feature-noise %.1f "
              "--train-frac 0.4 --val-frac 0.2 --test-frac 0.2 --seed 11",
              prep, out, dim, noise) != 0) {
        fprintf(stderr, "gnnprep synth failed: %s\n", log);
        return -1;
    }
    return 0;
}

static int group_setup(void **state)
{
    (void)state;
    if (t_launch_setup("faults") != 0)
        return -1;
    t_real_stages(g_stages, sizeof g_stages);
    snprintf(g_ds, sizeof g_ds, "%s/ds", t_ldir);
    snprintf(g_ds_io, sizeof g_ds_io, "%s/ds-io", t_ldir);
    snprintf(g_ds_other, sizeof g_ds_other, "%s/ds-other", t_ldir);
    snprintf(g_cfg, sizeof g_cfg, "%s/run.toml", t_ldir);
    snprintf(g_cfg_io, sizeof g_cfg_io, "%s/io.toml", t_ldir);
    /* g_ds: 64-byte rows, all in the buffer after the first epoch (a fast
     * run); g_ds_other: its graph, labels and splits with other features
     * (the same sizes everywhere); g_ds_io: 400-byte rows, a buffer of
     * about half of them, so that the extractor reads in every epoch */
    if (synth(g_ds, 16, 1.0) || synth(g_ds_other, 16, 1.5) || synth(g_ds_io, 100, 1.0))
        return -1;
    write_config(g_cfg, g_ds, NULL);
    FILE *f = fopen(g_cfg_io, "w");
    if (!f)
        return -1;
    fprintf(f,
            "[dataset]\npath = \"%s\"\n\n[model]\nkind = \"sage\"\nhidden = 32\nfanouts = [5, 5]\ndropout = 0.2\n\n"
            "[train]\nbatch_size = 64\nepochs = 3\nlr = 0.01\nseed = 5\n\n"
            "[pipeline]\nsamplers = 1\nextractors = 1\nfeature_buffer_mb = 1\nstaging_mb = 4\nio_depth = 16\n"
            "ordered = true\n",
            g_ds_io);
    fclose(f);
    return 0;
}

int main(void)
{
    signal(SIGALRM, t_launch_alarm);
    t_case_alarm_s = CASE_ALARM_S;
    const char *seed = getenv("SLUICE_FAULT_SEED");
    g_seed = seed ? (unsigned)strtoul(seed, NULL, 0) : (unsigned)time(NULL) ^ (unsigned)getpid();
    g_seed0 = g_seed;
    fprintf(stderr, "test_faults: seed %u (SLUICE_FAULT_SEED=%u repeats its choices)\n", g_seed, g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_kill_each_stage, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_read_eio, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_disk_full, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_buffers_beyond_memory, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_dataset_changed, t_launch_case_setup, t_launch_case_teardown),
        cmocka_unit_test_setup_teardown(test_dataset_identity, t_launch_case_setup, t_launch_case_teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, t_launch_group_teardown);
}
