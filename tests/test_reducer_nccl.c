/* test_reducer_nccl.c - the NCCL reducer (stages/reducer_nccl.c), label
 * gpu: ranks are child processes on device 0 (the parent never touches
 * CUDA, which does not survive fork), each with its own NCCL_HOSTID and
 * NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1, so that NCCL treats them as
 * hosts of their own and connects them over sockets (it refuses two ranks
 * of one host on one GPU). Without a usable device it prints what it
 * would have checked and exits 77 (skipped).
 *   - one rank: the sum is the buffer itself, bit for bit; n = 0 is a
 *     barrier; after abort every call returns -EPIPE;
 *   - two ranks: calls of different sizes (1000 floats, 7, a barrier) give
 *     both ranks the rank-order sum a + b bit for bit (two terms: NCCL's
 *     order cannot change it);
 *   - abort: rank 1 aborts; its next call returns -EPIPE at once, and rank
 *     0's waiting call returns an error (-EPIPE for NCCL's remote error)
 *     instead of hanging - within 60 s, after which its tick cancels and
 *     the test fails;
 *   - a rank that never comes: the other's first call waits, ticking, and
 *     a tick that says stop ends it with -ECANCELED;
 *   - bad arguments: -EINVAL with a message.
 * Each child reports through its exit status (0 = every check held) and
 * says on stderr what failed. */
#include "t_util.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <signal.h>
#include <time.h>

#include "core/util.h"
#include "stages/reducer.h"

#define FLOATS 1000
#define CHILD_LIMIT_S 120 /* a child still running after this has hung */

static float value(int rank, size_t i)
{
    return (float)((double)((i * 2654435761u + (size_t)rank * 40503u) % 10007) / 977.0 - 5.0) *
           (rank == 1 ? 1e-3f : 1.0f);
}

/* ---- in the children (no cmocka: plain checks, a message and an exit status) ------------------ */

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "rank %d: ", g_rank);                                                                      \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fprintf(stderr, " (%s:%d)\n", __FILE__, __LINE__);                                                         \
            _exit(1);                                                                                                  \
        }                                                                                                              \
    } while (0)

static int g_rank;

struct deadline {
    uint64_t until_ns;
    int ticks;
};

/* Cancels the wait once the deadline has passed. */
static int tick_until(void *arg)
{
    struct deadline *d = arg;
    d->ticks++;
    return sl_now_ns() > d->until_ns;
}

static void child_env(int rank)
{
    char host[32];
    snprintf(host, sizeof host, "sluice-test-host-%d", rank);
    setenv("NCCL_HOSTID", host, 1);
    setenv("NCCL_P2P_DISABLE", "1", 1);
    setenv("NCCL_SHM_DISABLE", "1", 1);
    setenv("NCCL_IB_DISABLE", "1", 1);
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
    g_rank = rank;
}

/* buf (device, n floats) = value(rank, i); the call's result back on the host. */
static int sum_call(struct reducer *r, float *dev, float *host, int rank, size_t n)
{
    for (size_t i = 0; i < n; i++)
        host[i] = value(rank, i);
    CHECK(cudaMemcpy(dev, host, n * sizeof *host, cudaMemcpyHostToDevice) == cudaSuccess, "upload");
    int rc = reducer_allreduce(r, dev, n);
    if (rc == 0)
        CHECK(cudaMemcpy(host, dev, n * sizeof *host, cudaMemcpyDeviceToHost) == cudaSuccess, "download");
    return rc;
}

static void child_one_rank(void)
{
    child_env(0);
    ncclUniqueId id;
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    char err[512] = "";
    struct reducer *r;
    struct deadline dl = {.until_ns = sl_now_ns() + 60ull * 1000000000u};
    CHECK(reducer_nccl_open(&r, (const unsigned char *)id.internal, 0, 1, 0, tick_until, &dl, err, sizeof err) == 0,
          "open: %s", err);
    CHECK(r->ops->device && !strcmp(r->ops->name, "nccl"), "the table says device buffers, name nccl");
    float *dev, host[FLOATS];
    CHECK(cudaMalloc((void **)&dev, sizeof host) == cudaSuccess, "cudaMalloc");
    CHECK(sum_call(r, dev, host, 0, FLOATS) == 0, "allreduce of one rank");
    for (size_t i = 0; i < FLOATS; i++) {
        float want = value(0, i);
        CHECK(!memcmp(&host[i], &want, sizeof want), "element %zu: %g, want %g", i, (double)host[i], (double)want);
    }
    CHECK(reducer_allreduce(r, dev, 0) == 0, "a barrier");
    reducer_abort(r);
    reducer_abort(r); /* idempotent */
    CHECK(reducer_allreduce(r, dev, FLOATS) == -EPIPE, "a call after abort is -EPIPE");
    reducer_free(r);
    /* bad arguments */
    CHECK(reducer_nccl_open(&r, (const unsigned char *)id.internal, 1, 1, 0, NULL, NULL, err, sizeof err) == -EINVAL &&
              strstr(err, "rank"),
          "rank 1 of 1 is refused");
    CHECK(reducer_nccl_open(&r, (const unsigned char *)id.internal, 0, 1, -1, NULL, NULL, err, sizeof err) == -EINVAL,
          "device -1 is refused");
    cudaFree(dev);
    _exit(0);
}

/* Rank `rank` of two; the id through the pipe (rank 0 makes it). With
 * abort_at >= 0, rank 1 aborts before its call number abort_at. With
 * absent, rank 1 never joins and rank 0's tick gives up after 3 s. */
static void child_two_ranks(int rank, int fd[2], int abort_at, bool absent)
{
    child_env(rank);
    ncclUniqueId id;
    if (rank == 0) {
        CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
        CHECK(write(fd[1], &id, sizeof id) == (ssize_t)sizeof id, "writing the id");
    } else {
        CHECK(read(fd[0], &id, sizeof id) == (ssize_t)sizeof id, "reading the id");
        if (absent)
            _exit(0);
    }
    char err[512] = "";
    struct reducer *r;
    struct deadline dl = {.until_ns = sl_now_ns() + (absent ? 3ull : 60ull) * 1000000000u};
    CHECK(reducer_nccl_open(&r, (const unsigned char *)id.internal, rank, 2, 0, tick_until, &dl, err, sizeof err) == 0,
          "open: %s", err);
    float *dev, host[FLOATS];
    CHECK(cudaMalloc((void **)&dev, sizeof host) == cudaSuccess, "cudaMalloc");
    if (absent) {
        int rc = sum_call(r, dev, host, rank, FLOATS);
        CHECK(rc == -ECANCELED, "a call without the peer ends when the tick says stop (rc %d)", rc);
        CHECK(dl.ticks >= 3, "the tick was called while waiting (%d times)", dl.ticks);
        CHECK(reducer_allreduce(r, dev, 1) == -EPIPE, "broken after the cancel");
        reducer_free(r);
        _exit(0);
    }
    static const size_t ns[3] = {FLOATS, 7, 0};
    for (int c = 0; c < 3; c++) {
        if (rank == 1 && c == abort_at) {
            reducer_abort(r);
            CHECK(reducer_allreduce(r, dev, ns[c]) == -EPIPE, "the aborting rank's call is -EPIPE");
            reducer_free(r);
            _exit(0);
        }
        int rc = sum_call(r, dev, host, rank, ns[c]);
        if (rank == 0 && c == abort_at) {
            CHECK(rc != 0 && rc != -ECANCELED,
                  "the peer aborted: the waiting call fails (rc %d; -ECANCELED: it "
                  "waited 60 s for nothing)",
                  rc);
            fprintf(stderr, "rank 0: the peer's abort ended the waiting call with %d (%s)\n", rc, strerror(-rc));
            CHECK(reducer_allreduce(r, dev, 1) == -EPIPE, "broken after the failure");
            reducer_free(r);
            _exit(0);
        }
        CHECK(rc == 0, "call %d: rc %d", c, rc);
        for (size_t i = 0; i < ns[c]; i++) {
            float want = value(0, i) + value(1, i);
            CHECK(!memcmp(&host[i], &want, sizeof want), "call %d, element %zu: %.9g, want %.9g", c, i, (double)host[i],
                  (double)want);
        }
    }
    /* a sum of host values through the reducer's scratch (the trainers'
     * parameter digests); more than REDUCER_HOST_FLOATS is refused */
    float hv[33];
    for (int i = 0; i < 33; i++)
        hv[i] = (float)(rank * 100 + i);
    CHECK(reducer_allreduce_host(r, hv, 33) == 0, "allreduce_host");
    for (int i = 0; i < 33; i++)
        CHECK(hv[i] == (float)(100 + 2 * i), "allreduce_host element %d: %g, want %d", i, (double)hv[i], 100 + 2 * i);
    CHECK(reducer_allreduce_host(r, hv, REDUCER_HOST_FLOATS + 1) == -EINVAL, "allreduce_host of too many floats");
    reducer_free(r);
    cudaFree(dev);
    _exit(0);
}

/* ---- in the parent ------------------------------------------------------------------------------- */

/* Waits for pid, killing it after CHILD_LIMIT_S; its exit status, or -1
 * when it had to be killed. */
static int wait_child(pid_t pid)
{
    uint64_t until = sl_now_ns() + (uint64_t)CHILD_LIMIT_S * 1000000000u;
    for (;;) {
        int st;
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        assert_int_equal(w, 0);
        if (sl_now_ns() > until) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        usleep(20000);
    }
}

static void test_one_rank(void **state)
{
    (void)state;
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        child_one_rank();
    int st = wait_child(pid);
    if (st != 0)
        fail_msg("the one-rank child ended with %d (its message is above; -1: it hung)", st);
}

static void two_ranks(int abort_at, bool absent)
{
    int fd[2];
    assert_int_equal(pipe(fd), 0);
    pid_t pid[2];
    fflush(NULL);
    for (int r = 0; r < 2; r++) {
        pid[r] = fork();
        assert_true(pid[r] >= 0);
        if (pid[r] == 0)
            child_two_ranks(r, fd, abort_at, absent);
    }
    close(fd[0]);
    close(fd[1]);
    for (int r = 0; r < 2; r++) {
        int st = wait_child(pid[r]);
        if (st != 0)
            fail_msg("rank %d ended with %d (abort at call %d; its message is above; -1: it hung)", r, st, abort_at);
    }
}

static void test_two_ranks_sum(void **state)
{
    (void)state;
    two_ranks(-1, false);
}

static void test_two_ranks_abort(void **state)
{
    (void)state;
    two_ranks(1, false); /* after one good call: rank 1 aborts, rank 0 waits in its second */
}

static void test_peer_never_joins(void **state)
{
    (void)state;
    two_ranks(-1, true);
}

int main(void)
{
    /* is there a device? asked in a child, so that this process never initialises CUDA */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int n = 0;
        _exit(cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 77);
    }
    int st = -1;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        printf("test_reducer_nccl: no usable CUDA device; skipped. On a device it checks the NCCL reducer: one rank "
               "(the sum is the buffer, a barrier, -EPIPE after abort, bad arguments refused); two ranks in two "
               "processes on one GPU (own NCCL_HOSTID, no P2P, no SHM) summing 1000 and 7 floats to a + b bit for "
               "bit and a barrier; a rank that aborts gets -EPIPE and the other's waiting call fails instead of "
               "hanging; a peer that never joins: the wait ticks and a tick that says stop ends it with "
               "-ECANCELED.\n");
        return 77;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_rank),
        cmocka_unit_test(test_two_ranks_sum),
        cmocka_unit_test(test_two_ranks_abort),
        cmocka_unit_test(test_peer_never_joins),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
