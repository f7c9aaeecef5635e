/* test_gpu_device.c - gpu/device.h without needing a GPU:
 *   - the decision (device_plan_make) over made-up probes: no CUDA in the
 *     build, CUDA's error, no device, fewer devices than asked, an empty
 *     or invalid CUDA_VISIBLE_DEVICES; each message names --gpus N and
 *     says what to do; and the plan's one-line description, with
 *     CUDA_VISIBLE_DEVICES entries and cut with "..." when long;
 *   - SLUICE_FAKE_GPUS;
 *   - the real probe: it answers (a device count, or CUDA's error on a
 *     machine without a driver), leaves no child behind, and the calling
 *     process gains no thread, no mapping of libcuda and no open
 *     /dev/nvidia* (CUDA was initialised in the child only);
 *   - the NCCL root's helper (a build with NCCL): a 128-byte id, a helper
 *     in its own process group named gnnlaunch-nccl, no thread in the
 *     caller; stopped, it is reaped; stopping one already reaped
 *     elsewhere is harmless; it dies with its parent (PR_SET_PDEATHSIG).
 *     A build without NCCL refuses with a message naming NCCL, and makes
 *     a random id under SLUICE_FAKE_GPUS. */
#include "t_util.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>

#include "core/util.h"
#include "gpu/device.h"

static int count_threads(void)
{
    DIR *d = opendir("/proc/self/task");
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Whether this process maps a library whose path contains `what`. */
static bool maps(const char *what)
{
    FILE *f = fopen("/proc/self/maps", "r");
    assert_non_null(f);
    char line[1024];
    bool found = false;
    while (fgets(line, sizeof line, f))
        found |= strstr(line, what) != NULL;
    fclose(f);
    return found;
}

/* Whether this process holds an open file whose path starts with prefix. */
static bool holds(const char *prefix)
{
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    bool found = false;
    for (struct dirent *e; (e = readdir(d));) {
        char path[300], target[512];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            found |= strncmp(target, prefix, strlen(prefix)) == 0;
        }
    }
    closedir(d);
    return found;
}

/* True once pid is gone or a zombie (then not ours: init reaps it). */
static bool dead_within(pid_t pid, double seconds)
{
    char path[64], st[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", (long)pid);
    for (double t0 = sl_now(); sl_now() - t0 < seconds; usleep(10000)) {
        FILE *f = fopen(path, "r");
        if (!f)
            return true;
        size_t n = fread(st, 1, sizeof st - 1, f);
        fclose(f);
        st[n] = '\0';
        const char *close = strrchr(st, ')');
        if (close && close[1] == ' ' && close[2] == 'Z')
            return true;
    }
    return false;
}

static void no_children_left(void)
{
    errno = 0;
    assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
    assert_int_equal(errno, ECHILD);
}

/* ---- the decision ---------------------------------------------------------------------------- */

static struct device_probe probe_of(bool cuda, int count, const char *error)
{
    struct device_probe p;
    memset(&p, 0, sizeof p);
    p.cuda = cuda;
    p.count = count;
    p.runtime = 13000;
    p.driver = error ? 0 : 13000;
    snprintf(p.error, sizeof p.error, "%s", error ? error : "");
    for (int i = 0; i < count && i < DEVICE_NAMES_MAX; i++)
        snprintf(p.names[i], sizeof p.names[i], "Card %c", 'A' + i);
    return p;
}

/* device_plan_make(asked, probe, visible) returns rc and a message with
 * every string of the NULL-terminated list; a plan of `asked` ranks, rank
 * r on device r, when rc is 0. */
static void check_plan(int asked, struct device_probe p, const char *visible, int rc, ...)
{
    struct device_plan plan = {.ranks = -5};
    char err[1024] = "";
    int got = device_plan_make(asked, &p, visible, &plan, err, sizeof err);
    if (got != rc)
        fail_msg("--gpus %d, %d GPUs, CUDA_VISIBLE_DEVICES %s: rc %d, expected %d (%s)", asked, p.count,
                 visible ? visible : "unset", got, rc, err);
    va_list ap;
    va_start(ap, rc);
    for (const char *want; (want = va_arg(ap, const char *));)
        if (!strstr(err, want))
            fail_msg("--gpus %d: expected '%s' in '%s'", asked, want, err);
    va_end(ap);
    if (rc == 0) {
        assert_int_equal(plan.ranks, asked);
        for (int r = 0; r < plan.ranks; r++)
            assert_int_equal(device_of_rank(&plan, r), r); /* rank r on visible device r */
        assert_int_equal(device_of_rank(&plan, plan.ranks), -1);
    } else {
        assert_int_equal(plan.ranks, 0);
        assert_null(strchr(err, '\n')); /* one line */
    }
}

static void test_plan(void **state)
{
    (void)state;
    static const char insufficient[] =
        "CUDA driver version is insufficient for CUDA runtime version, cudaErrorInsufficientDriver";
    static const char nodev[] = "no CUDA-capable device is detected, cudaErrorNoDevice";
    check_plan(1, probe_of(false, 0, NULL), NULL, -ENOTSUP, "--gpus 1: this gnnlaunch was built without CUDA",
               "rebuild with cmake -DSLUICE_CUDA=ON", "or train on the CPU with --cpu", NULL);
    check_plan(2, probe_of(true, 0, insufficient), NULL, -ENODEV,
               "--gpus 2: no usable GPU (CUDA: CUDA driver version is insufficient",
               "; no NVIDIA driver was found); check that nvidia-smi lists the GPUs and that the NVIDIA driver "
               "supports CUDA 13.0, or train on the CPU with --cpu",
               NULL);
    check_plan(1, probe_of(true, 0, nodev), "-1", -ENODEV,
               "--gpus 1: no usable GPU with CUDA_VISIBLE_DEVICES=-1 (CUDA: no CUDA-capable device", "--cpu", NULL);
    check_plan(1, probe_of(true, 0, NULL), "", -ENODEV,
               "--gpus 1: no GPU is visible: CUDA_VISIBLE_DEVICES is set but lists none; unset it", "--cpu", NULL);
    check_plan(1, probe_of(true, 0, NULL), " , ", -ENODEV, "CUDA_VISIBLE_DEVICES is set but lists none", NULL);
    check_plan(1, probe_of(true, 0, NULL), NULL, -ENODEV, "--gpus 1: CUDA sees no GPU; train on the CPU with --cpu",
               NULL);
    check_plan(4, probe_of(true, 2, NULL), NULL, -ERANGE,
               "--gpus 4: only 2 GPUs are visible; ask for at most --gpus 2 (one rank per GPU)", NULL);
    check_plan(2, probe_of(true, 1, NULL), "3", -ERANGE,
               "--gpus 2: only 1 GPU is visible with CUDA_VISIBLE_DEVICES=3; ask for at most --gpus 1", NULL);
    check_plan(3, probe_of(true, 1, NULL), "2,bogus,4", -ERANGE,
               "CUDA_VISIBLE_DEVICES lists 3, but CUDA stops at the first entry it does not know", "--gpus 1", NULL);
    check_plan(1, probe_of(true, 1, NULL), NULL, 0, NULL);
    check_plan(2, probe_of(true, 2, NULL), "1,0", 0, NULL);
    check_plan(2, probe_of(true, 8, NULL), NULL, 0, NULL);
    check_plan(8, probe_of(true, 8, NULL), "0,1,2,3,4,5,6,7", 0, NULL);
}

static void test_describe(void **state)
{
    (void)state;
    struct device_probe p = probe_of(true, 3, NULL);
    struct device_plan plan;
    char err[512], line[512];
    assert_int_equal(device_plan_make(3, &p, NULL, &plan, err, sizeof err), 0);
    device_plan_describe(&plan, &p, NULL, line, sizeof line);
    assert_string_equal(line, "rank 0 on GPU 0 (Card A), rank 1 on GPU 1 (Card B), rank 2 on GPU 2 (Card C)");
    /* CUDA_VISIBLE_DEVICES entries, UUIDs as they are, spaces trimmed */
    assert_int_equal(device_plan_make(2, &p, "3, GPU-8f1c2a", &plan, err, sizeof err), 0);
    device_plan_describe(&plan, &p, "3, GPU-8f1c2a", line, sizeof line);
    assert_string_equal(line, "rank 0 on GPU 0 (Card A, CUDA_VISIBLE_DEVICES entry 3), "
                              "rank 1 on GPU 1 (Card B, CUDA_VISIBLE_DEVICES entry GPU-8f1c2a)");
    /* a device past the named ones */
    p = probe_of(true, DEVICE_NAMES_MAX + 2, NULL);
    assert_int_equal(device_plan_make(DEVICE_NAMES_MAX + 1, &p, NULL, &plan, err, sizeof err), 0);
    static char big[8192];
    device_plan_describe(&plan, &p, NULL, big, sizeof big);
    char last[64];
    snprintf(last, sizeof last, ", rank %d on GPU %d", DEVICE_NAMES_MAX, DEVICE_NAMES_MAX);
    assert_non_null(strstr(big, last));
    assert_string_equal(big + strlen(big) - strlen(last), last); /* no name, no parentheses */
    /* too long for the buffer: whole entries, then "..." */
    char small[40];
    device_plan_describe(&plan, &p, NULL, small, sizeof small);
    assert_string_equal(small, "rank 0 on GPU 0 (Card A)...");
}

static void test_fake(void **state)
{
    (void)state;
    struct device_probe p;
    char err[512];
    setenv("SLUICE_FAKE_GPUS", "3", 1);
    assert_int_equal(device_probe_run(&p, err, sizeof err), 0);
    assert_true(p.cuda && p.fake);
    assert_int_equal(p.count, 3);
    assert_string_equal(p.names[2], "fake GPU 2");
    no_children_left(); /* no child was forked */
    setenv("SLUICE_FAKE_GPUS", "lots", 1);
    assert_int_equal(device_probe_run(&p, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "SLUICE_FAKE_GPUS=lots"));
    unsetenv("SLUICE_FAKE_GPUS");
}

/* ---- the probe ------------------------------------------------------------------------------- */

static void test_probe(void **state)
{
    (void)state;
    unsetenv("SLUICE_FAKE_GPUS");
    int threads = count_threads();
    const char *vis[] = {NULL, "-1"}; /* as the machine is; and every GPU hidden */
    for (int i = 0; i < 2; i++) {
        if (vis[i])
            setenv("CUDA_VISIBLE_DEVICES", vis[i], 1);
        struct device_probe p;
        char err[512];
        assert_int_equal(device_probe_run(&p, err, sizeof err), 0);
        assert_int_equal(p.cuda, SLUICE_HAVE_CUDA);
        assert_false(p.fake);
        if (!SLUICE_HAVE_CUDA) {
            assert_int_equal(p.count, 0);
        } else if (p.error[0]) {
            assert_int_equal(p.count, 0);
            assert_non_null(strstr(p.error, "cudaError")); /* CUDA's name for it */
        } else {
            assert_true(p.count >= 1);
            assert_null(vis[i]); /* -1 hides every GPU */
            assert_true(p.names[0][0]);
            assert_true(p.driver > 0);
        }
        print_message("probe%s%s: count %d, driver %d, runtime %d, error '%s', first '%s'\n",
                      vis[i] ? " with CUDA_VISIBLE_DEVICES=" : "", vis[i] ? vis[i] : "", p.count, p.driver, p.runtime,
                      p.error, p.names[0]);
        no_children_left();
        assert_int_equal(count_threads(), threads);
        assert_false(maps("libcuda.so"));
        assert_false(holds("/dev/nvidia"));
    }
    unsetenv("CUDA_VISIBLE_DEVICES");
}

/* ---- the NCCL root --------------------------------------------------------------------------- */

static void test_nccl_root(void **state)
{
    (void)state;
    unsetenv("SLUICE_FAKE_GPUS");
    struct device_nccl_root r;
    char err[1024] = "";
    if (!SLUICE_HAVE_NCCL) {
        assert_int_equal(device_nccl_root_start(&r, err, sizeof err), -ENOTSUP);
        assert_non_null(strstr(err, "built without NCCL"));
        setenv("SLUICE_FAKE_GPUS", "2", 1);
        assert_int_equal(device_nccl_root_start(&r, err, sizeof err), 0);
        assert_int_equal(r.pid, 0);
        uint8_t zero[DEVICE_NCCL_ID_BYTES] = {0};
        assert_memory_not_equal(r.id, zero, sizeof zero);
        device_nccl_root_stop(&r);
        unsetenv("SLUICE_FAKE_GPUS");
        return;
    }
    int threads = count_threads();
    struct device_nccl_root a, b;
    if (device_nccl_root_start(&a, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_true(a.pid > 0);
    assert_int_equal(kill(a.pid, 0), 0);
    assert_int_equal(getpgid(a.pid), a.pid); /* its own group: a terminal's Ctrl-C misses it */
    char path[64], comm[64] = "";
    snprintf(path, sizeof path, "/proc/%ld/comm", (long)a.pid);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(comm, sizeof comm, f));
    fclose(f);
    assert_string_equal(comm, "gnnlaunch-nccl\n");
    assert_int_equal(count_threads(), threads); /* NCCL's root thread is in the helper */
    assert_false(maps("libcuda.so"));
    if (device_nccl_root_start(&b, err, sizeof err) != 0)
        fail_msg("%s", err);
    assert_memory_not_equal(a.id, b.id, DEVICE_NCCL_ID_BYTES); /* each run its own root */
    pid_t pa = a.pid, pb = b.pid;
    device_nccl_root_stop(&a);
    assert_int_equal(a.pid, 0);
    assert_int_equal(kill(pa, 0), -1); /* killed and reaped */
    device_nccl_root_stop(&a);         /* twice: nothing */
    /* reaped by someone else's waitpid(-1) (the launcher's reaper): stop
     * only forgets it */
    kill(pb, SIGKILL);
    assert_int_equal(waitpid(-1, NULL, 0), pb);
    device_nccl_root_stop(&b);
    assert_int_equal(b.pid, 0);
    no_children_left();

    /* it dies with its parent */
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t parent = fork();
    assert_true(parent >= 0);
    if (parent == 0) {
        close(p[0]);
        struct device_nccl_root c;
        if (device_nccl_root_start(&c, err, sizeof err) != 0)
            _exit(1);
        if (write(p[1], &c.pid, sizeof c.pid) != (ssize_t)sizeof c.pid)
            _exit(1);
        pause();
        _exit(0);
    }
    close(p[1]);
    pid_t helper = 0;
    assert_int_equal(read(p[0], &helper, sizeof helper), (ssize_t)sizeof helper);
    close(p[0]);
    assert_int_equal(kill(helper, 0), 0);
    kill(parent, SIGKILL);
    assert_int_equal(waitpid(parent, NULL, 0), parent);
    if (!dead_within(helper, 5))
        fail_msg("the NCCL root's helper (pid %ld) outlived its parent by 5 s", (long)helper);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan),  cmocka_unit_test(test_describe),  cmocka_unit_test(test_fake),
        cmocka_unit_test(test_probe), cmocka_unit_test(test_nccl_root),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
