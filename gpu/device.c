/* device.c - the decision of which GPU each rank uses and its words, and
 * the forked children that ask CUDA and NCCL (device.h). Plain C, built
 * with or without CUDA: the calls into CUDA and NCCL themselves are in
 * device_cuda.c (device_nocuda.c in a build without CUDA). */
#include "gpu/device.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/util.h"
#include "gpu/device_int.h"

/* The text of CUDA_VISIBLE_DEVICES entry i ("2", "GPU-8f1c..."), or false
 * when the list has fewer entries. */
static bool visible_entry(const char *visible, int i, char *out, size_t len)
{
    const char *p = visible;
    for (int k = 0; p && k < i; k++) {
        p = strchr(p, ',');
        if (p)
            p++;
    }
    if (!p)
        return false;
    size_t n = strcspn(p, ",");
    while (n > 0 && (*p == ' ' || *p == '\t')) {
        p++;
        n--;
    }
    while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
        n--;
    if (n == 0)
        return false;
    snprintf(out, len, "%.*s", (int)n, p);
    return true;
}

static int visible_count(const char *visible)
{
    char e[128];
    int n = 0;
    while (visible_entry(visible, n, e, sizeof e))
        n++;
    return n;
}

int device_plan_make(int asked, const struct device_probe *p, const char *visible, struct device_plan *plan, char *err,
                     size_t errlen)
{
    memset(plan, 0, sizeof *plan);
    if (!p->cuda)
        return sl_errf(err, errlen, -ENOTSUP,
                       "--gpus %d: this gnnlaunch was built without CUDA (no nvcc when it was configured); install "
                       "the CUDA toolkit and rebuild with cmake -DSLUICE_CUDA=ON (docs/gpu.md), or train on the CPU "
                       "with --cpu",
                       asked);
    char where[192] = "";
    if (visible)
        snprintf(where, sizeof where, " with CUDA_VISIBLE_DEVICES=%.120s", visible);
    if (visible && visible_count(visible) == 0)
        return sl_errf(err, errlen, -ENODEV,
                       "--gpus %d: no GPU is visible: CUDA_VISIBLE_DEVICES is set but lists none; unset it or list "
                       "the GPUs to use (CUDA_VISIBLE_DEVICES=0,1), or train on the CPU with --cpu",
                       asked);
    if (p->error[0]) {
        char need[96] = "";
        if (p->runtime > 0)
            snprintf(need, sizeof need, " and that the NVIDIA driver supports CUDA %d.%d", p->runtime / 1000,
                     p->runtime % 1000 / 10);
        return sl_errf(err, errlen, -ENODEV,
                       "--gpus %d: no usable GPU%s (CUDA: %s%s); check that nvidia-smi lists the GPUs%s, or train on "
                       "the CPU with --cpu",
                       asked, where, p->error, p->driver ? "" : "; no NVIDIA driver was found", need);
    }
    if (p->count <= 0)
        return sl_errf(err, errlen, -ENODEV, "--gpus %d: CUDA sees no GPU%s; train on the CPU with --cpu", asked,
                       where);
    if (asked > p->count) {
        char hint[256] = "";
        if (visible && visible_count(visible) > p->count)
            snprintf(hint, sizeof hint,
                     "; CUDA_VISIBLE_DEVICES lists %d, but CUDA stops at the first entry it does not know",
                     visible_count(visible));
        return sl_errf(err, errlen, -ERANGE,
                       "--gpus %d: only %d GPU%s visible%s%s; ask for at most --gpus %d (one rank per GPU)", asked,
                       p->count, p->count == 1 ? " is" : "s are", where, hint, p->count);
    }
    plan->ranks = asked;
    plan->per_device = 1;
    return 0;
}

/* Appends to out at *o, keeping room for "..." at the end. */
static bool append(char *out, size_t len, size_t *o, const char *fmt, ...) SL_PRINTF(4, 5);
static bool append(char *out, size_t len, size_t *o, const char *fmt, ...)
{
    if (len < 8 || *o + 4 >= len)
        return false;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out + *o, len - 4 - *o, fmt, ap);
    va_end(ap);
    if (n < 0 || *o + (size_t)n >= len - 4) {
        out[*o] = '\0';
        return false;
    }
    *o += (size_t)n;
    return true;
}

void device_plan_describe(const struct device_plan *plan, const struct device_probe *p, const char *visible, char *out,
                          size_t len)
{
    size_t o = 0;
    if (len == 0)
        return;
    out[0] = '\0';
    for (int r = 0; r < plan->ranks; r++) {
        int d = device_of_rank(plan, r);
        const char *name = d < DEVICE_NAMES_MAX ? p->names[d] : "";
        char entry[128], what[DEVICE_NAME_MAX + 200] = "";
        bool has_entry = visible && visible_entry(visible, d, entry, sizeof entry);
        if (name[0] || has_entry)
            snprintf(what, sizeof what, " (%s%s%s%s)", name, name[0] && has_entry ? ", " : "",
                     has_entry ? "CUDA_VISIBLE_DEVICES entry " : "", has_entry ? entry : "");
        if (!append(out, len, &o, "%srank %d on GPU %d%s", r ? ", " : "", r, d, what)) {
            snprintf(out + o, len - o, "...");
            return;
        }
    }
}

int device_probe_run(struct device_probe *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    const char *fake = getenv("SLUICE_FAKE_GPUS");
    if (fake && *fake) {
        uint64_t n;
        if (sl_parse_u64(fake, false, &n) != 0 || n > 4096)
            return sl_errf(err, errlen, -EINVAL, "SLUICE_FAKE_GPUS=%s is not a number of GPUs (it is for tests)", fake);
        p->cuda = p->fake = true;
        p->count = (int)n;
        for (int i = 0; i < p->count && i < DEVICE_NAMES_MAX; i++)
            snprintf(p->names[i], sizeof p->names[i], "fake GPU %d", i);
        return 0;
    }
    return device_probe_cuda(p, err, errlen);
}

/* ---- children that talk to CUDA and NCCL ------------------------------------------------ */

/* "exited with status 3", "was killed by signal 11 (SIGSEGV)". */
static void describe_status(int st, char *out, size_t len)
{
    if (WIFEXITED(st)) {
        snprintf(out, len, "exited with status %d", WEXITSTATUS(st));
    } else if (WIFSIGNALED(st)) {
        const char *abbrev = sigabbrev_np(WTERMSIG(st));
        snprintf(out, len, "was killed by signal %d (SIG%s)", WTERMSIG(st), abbrev ? abbrev : "?");
    } else {
        snprintf(out, len, "ended with wait status %#x", (unsigned)st);
    }
}

static void reap(pid_t pid, int *st)
{
    while (waitpid(pid, st, 0) < 0 && errno == EINTR)
        ;
}

int device_child_run(void (*child)(void *arg, int fd), void *arg, void *answer, size_t size, double timeout_s,
                     bool keep, pid_t *pid_out, const char *what, char *err, size_t errlen)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        return sl_errf(err, errlen, -errno, "%s: pipe: %s", what, strerror(errno));
    pid_t parent = getpid();
    fflush(NULL); /* nothing buffered twice */
    pid_t pid = fork();
    if (pid < 0) {
        int rc = -errno;
        close(p[0]);
        close(p[1]);
        return sl_errf(err, errlen, rc, "%s: fork: %s", what, strerror(-rc));
    }
    if (pid == 0) {
        close(p[0]);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127); /* the caller is gone already */
        setpgid(0, 0);
        dup2(STDERR_FILENO, STDOUT_FILENO);
        child(arg, p[1]);
        _exit(0);
    }
    close(p[1]);
    setpgid(pid, pid); /* as the child does; whichever runs first */
    size_t got = 0;
    double deadline = sl_now() + timeout_s;
    int rc = 0;
    while (got < size) {
        double left = deadline - sl_now();
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        int n = left > 0 ? poll(&pfd, 1, (int)(left * 1000) + 1) : 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n == 0 ? -ETIMEDOUT : -errno;
            break;
        }
        ssize_t k = read(p[0], (char *)answer + got, size - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            rc = k == 0 ? -EPIPE : -errno;
            break;
        }
        got += (size_t)k;
    }
    close(p[0]);
    int st = 0;
    if (rc == -ETIMEDOUT) {
        kill(pid, SIGKILL);
        reap(pid, &st);
        return sl_errf(err, errlen, rc, "%s (pid %ld) did not answer within %.0f s and was killed", what, (long)pid,
                       timeout_s);
    }
    if (rc) {
        char how[96];
        kill(pid, SIGKILL); /* a read error: the child may live on */
        reap(pid, &st);
        describe_status(st, how, sizeof how);
        return sl_errf(err, errlen, rc == -EPIPE ? -EIO : rc, "%s (pid %ld) %s before it answered", what, (long)pid,
                       how);
    }
    if (keep) {
        *pid_out = pid;
        return 0;
    }
    reap(pid, &st);
    return 0;
}

int device_nccl_root_start(struct device_nccl_root *r, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    if (device_have_nccl())
        return device_nccl_root_fork(r, err, errlen);
    const char *fake = getenv("SLUICE_FAKE_GPUS");
    if (!fake || !*fake)
        return sl_errf(err, errlen, -ENOTSUP,
                       "this gnnlaunch was built without NCCL, which a run of more than one GPU needs; install NCCL "
                       "(nccl.h and libnccl.so.2, e.g. the libnccl-dev package or NVIDIA's nccl wheel) and rebuild "
                       "(docs/gpu.md)");
    /* tests without NCCL: an id of random bytes that nobody connects to */
    size_t got = 0;
    while (got < sizeof r->id) {
        ssize_t n = getrandom(r->id + got, sizeof r->id - got, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return sl_errf(err, errlen, -errno, "getrandom: %s", strerror(errno));
        got += (size_t)n;
    }
    return 0;
}

void device_nccl_root_stop(struct device_nccl_root *r)
{
    if (r->pid <= 0)
        return;
    int st;
    pid_t w = waitpid(r->pid, &st, WNOHANG);
    if (w == 0) { /* still ours and running: its pid cannot have been reused */
        kill(r->pid, SIGKILL);
        reap(r->pid, &st);
    }
    r->pid = 0;
}
