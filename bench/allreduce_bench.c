/* allreduce_bench.c - time of the shared-memory all-reduce (ipc/allreduce.c)
 * across processes, nccl-tests style.
 *
 *   allreduce-bench [--ranks 1,2,4] [--min-bytes 64K] [--max-bytes 64M]
 *                   [--iters N] [--warmup N] [--spin N] [--json]
 *
 * For each rank count R the bench creates one all-reduce sized for
 * --max-bytes and forks R rank processes that attach it by name, as
 * trainers do. For each size from --min-bytes to --max-bytes (doubling)
 * every rank checks one call's sum (small integers, so the expected value
 * is exact), then makes --warmup untimed calls, a zero-length call as a
 * start line, and --iters timed calls on its buffer in place. The time per
 * call is the slowest rank's mean. Bandwidths follow nccl-tests: algbw =
 * bytes / time; busbw = algbw * 2(R-1)/R, the traffic of a ring all-reduce,
 * comparable across R. R = 1 measures the call's early return only.
 * --iters 0 (default) picks 1 GiB / bytes, clamped to 5..1000.
 *
 * Output: one `key=value ...` line per (R, size), or one JSON object per
 * line with --json. Benchmarks report; they judge nothing (a wrong sum is
 * an error, not a figure). The shared memory of the run is removed on every
 * exit path. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench/bench_common.h"
#include "core/opt.h"
#include "core/util.h"
#include "ipc/allreduce.h"
#include "ipc/shm.h"

#define MAX_RANKS 64
#define MAX_SIZES 32

struct opts {
    uint32_t ranks[8];
    int nranks;
    uint64_t min_bytes, max_bytes, iters, warmup;
    bool spin_set, json;
    uint32_t spin;
};

/* What the ranks leave for the parent (shared anonymous mapping). */
struct results {
    uint64_t ns[MAX_SIZES][MAX_RANKS]; /* timed loop of each rank */
    uint64_t iters[MAX_SIZES];
    _Atomic uint32_t wrong; /* ranks that saw a wrong sum */
};

static struct results *g_res;

static uint64_t iters_for(const struct opts *o, uint64_t bytes)
{
    if (o->iters)
        return o->iters;
    uint64_t it = (UINT64_C(1) << 30) / bytes;
    return it < 5 ? 5 : it > 1000 ? 1000 : it;
}

static int nsizes(const struct opts *o)
{
    int k = 0;
    for (uint64_t b = o->min_bytes; b <= o->max_bytes && k < MAX_SIZES; b *= 2)
        k++;
    return k;
}

static int rank_main(const char *name, uint32_t rank, uint32_t ranks, const struct opts *o)
{
    struct allreduce a;
    char err[256];
    if (allreduce_attach(&a, name, rank, err, sizeof err) != 0) {
        fprintf(stderr, "rank %u: %s\n", rank, err);
        return 1;
    }
    if (o->spin_set)
        a.spin = o->spin;
    float *buf = malloc(o->max_bytes);
    if (!buf) {
        fprintf(stderr, "rank %u: out of memory\n", rank);
        return 1;
    }
    int rc = 0;
    uint64_t bytes = o->min_bytes;
    for (int k = 0; k < nsizes(o); k++, bytes *= 2) {
        size_t n = bytes / sizeof(float);
        /* one checked call: element i of rank r is (r + 1) * (i % 5) */
        for (size_t i = 0; i < n; i++)
            buf[i] = (float)((rank + 1) * (i % 5));
        if ((rc = allreduce_sum(&a, buf, n, ALLREDUCE_FOREVER)) != 0)
            break;
        float tri = (float)(ranks * (ranks + 1) / 2);
        for (size_t i = 0; i < n; i++)
            if (buf[i] != tri * (float)(i % 5)) {
                atomic_fetch_add(&g_res->wrong, 1);
                break;
            }
        memset(buf, 0, bytes);
        uint64_t iters = iters_for(o, bytes);
        for (uint64_t i = 0; i < o->warmup && rc == 0; i++)
            rc = allreduce_sum(&a, buf, n, ALLREDUCE_FOREVER);
        if (rc == 0)
            rc = allreduce_sum(&a, NULL, 0, ALLREDUCE_FOREVER); /* start line */
        uint64_t t0 = sl_now_ns();
        for (uint64_t i = 0; i < iters && rc == 0; i++)
            rc = allreduce_sum(&a, buf, n, ALLREDUCE_FOREVER);
        g_res->ns[k][rank] = sl_now_ns() - t0;
        g_res->iters[k] = iters;
        if (rc)
            break;
    }
    if (rc)
        fprintf(stderr, "rank %u: allreduce_sum: %s\n", rank, strerror(-rc));
    free(buf);
    allreduce_free(&a);
    return rc ? 1 : 0;
}

static void print_result(const struct opts *o, uint32_t ranks, uint64_t bytes, uint64_t iters, double us)
{
    if (ranks == 1) { /* nothing moves: report the call's cost, no bandwidth */
        if (!o->json)
            printf("ranks=1 floats=%" PRIu64 " bytes=%" PRIu64 " iters=%" PRIu64 " us_per_call=%.3f note=noop\n",
                   bytes / 4, bytes, iters, us);
        else
            printf("{\"ranks\":1,\"floats\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"iters\":%" PRIu64
                   ",\"us_per_call\":%.3f,\"note\":\"noop\"}\n",
                   bytes / 4, bytes, iters, us);
        fflush(stdout);
        return;
    }
    double algbw = (double)bytes / (us * 1e-6) / 1e9;
    double busbw = algbw * 2.0 * (double)(ranks - 1) / (double)ranks;
    if (!o->json)
        printf("ranks=%" PRIu32 " floats=%" PRIu64 " bytes=%" PRIu64 " iters=%" PRIu64 " us_per_call=%.2f "
               "GBps_algbw=%.3f GBps_busbw=%.3f\n",
               ranks, bytes / 4, bytes, iters, us, algbw, busbw);
    else
        printf("{\"ranks\":%" PRIu32 ",\"floats\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"iters\":%" PRIu64
               ",\"us_per_call\":%.2f,\"GBps_algbw\":%.3f,\"GBps_busbw\":%.3f}\n",
               ranks, bytes / 4, bytes, iters, us, algbw, busbw);
    fflush(stdout);
}

static void run_ranks(const struct opts *o, uint32_t ranks)
{
    char err[256], obj[32];
    snprintf(obj, sizeof obj, "bench-r%" PRIu32, ranks);
    struct allreduce ar;
    int rc = allreduce_create(&ar, bench_run, obj, ranks, o->max_bytes / sizeof(float), err, sizeof err);
    if (rc) {
        fprintf(stderr, "allreduce-bench: %s\n", err);
        bench_cleanup();
        exit(1);
    }
    memset(g_res, 0, sizeof *g_res);
    pid_t pids[MAX_RANKS];
    for (uint32_t r = 0; r < ranks; r++) {
        pids[r] = fork();
        if (pids[r] < 0)
            bench_die("fork", -errno);
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            bench_run[0] = '\0'; /* the parent cleans up */
            _exit(rank_main(ar.seg.name, r, ranks, o));
        }
    }
    bool failed = false;
    for (uint32_t left = ranks; left > 0; left--) { /* in exit order: a failure closes for the rest */
        int st = 0;
        pid_t pid = wait(&st);
        if (pid < 0)
            bench_die("wait", -errno);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "allreduce-bench: rank process %d failed (status %#x)\n", (int)pid, (unsigned)st);
            if (!failed)
                allreduce_close(&ar); /* let the others out */
            failed = true;
        }
    }
    if (failed || atomic_load(&g_res->wrong)) {
        if (!failed)
            fprintf(stderr, "allreduce-bench: %u ranks saw a wrong sum\n", atomic_load(&g_res->wrong));
        bench_cleanup();
        exit(1);
    }
    uint64_t bytes = o->min_bytes;
    for (int k = 0; k < nsizes(o); k++, bytes *= 2) {
        uint64_t worst = 0;
        for (uint32_t r = 0; r < ranks; r++)
            worst = SL_MAX(worst, g_res->ns[k][r]);
        print_result(o, ranks, bytes, g_res->iters[k], (double)worst / 1e3 / (double)g_res->iters[k]);
    }
    char name[SHM_NAME_MAX];
    snprintf(name, sizeof name, "%s", ar.seg.name);
    allreduce_free(&ar);
    shm_seg_unlink(name);
}

static void usage(FILE *f)
{
    fprintf(f, "usage: allreduce-bench [--ranks 1,2,4] [--min-bytes 64K] [--max-bytes 64M] [--iters N]\n"
               "                       [--warmup N] [--spin N] [--json]\n");
}

int main(int argc, char **argv)
{
    struct opts o = {
        .ranks = {1, 2, 4}, .nranks = 3, .min_bytes = 64 << 10, .max_bytes = 64 << 20, .iters = 0, .warmup = 3};
    struct opt_list ranks = {.v = {1, 2, 4}, .n = 3};
    uint64_t spin = 0;
    bool help = false;
    const struct opt opts[] = {
        {.name = "--ranks", .kind = OPT_LIST, .dst = &ranks, .lo = 1, .hi = MAX_RANKS},
        {.name = "--min-bytes", .kind = OPT_SIZE, .dst = &o.min_bytes, .lo = 1, .hi = INT64_MAX},
        {.name = "--max-bytes", .kind = OPT_SIZE, .dst = &o.max_bytes, .lo = 1, .hi = INT64_MAX},
        {.name = "--iters", .kind = OPT_UINT, .dst = &o.iters, .lo = 0, .hi = INT64_MAX},
        {.name = "--warmup", .kind = OPT_UINT, .dst = &o.warmup, .lo = 0, .hi = INT64_MAX},
        {.name = "--spin", .kind = OPT_UINT, .dst = &spin, .lo = 0, .hi = UINT32_MAX},
        {.name = "--json", .kind = OPT_FLAG, .dst = &o.json},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    bool seen[SL_ARRAY_LEN(opts)];
    int rc = opt_main("allreduce-bench", opts, (int)SL_ARRAY_LEN(opts), argc, argv, seen, &help, usage);
    if (rc >= 0)
        return rc;
    o.nranks = ranks.n;
    for (int i = 0; i < ranks.n; i++)
        o.ranks[i] = (uint32_t)ranks.v[i];
    o.spin = (uint32_t)spin;
    o.spin_set = seen[opt_index(opts, (int)SL_ARRAY_LEN(opts), "--spin")];
    if (o.min_bytes % 4 || o.max_bytes % 4 || o.min_bytes > o.max_bytes) {
        fprintf(stderr, "allreduce-bench: sizes must be multiples of 4 bytes with --min-bytes <= --max-bytes\n");
        return 2;
    }
    g_res = mmap(NULL, sizeof *g_res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_res == MAP_FAILED)
        bench_die("mmap", -errno);
    bench_begin("allreduce-bench");
    for (int i = 0; i < o.nranks; i++)
        run_ranks(&o, o.ranks[i]);
    bench_cleanup();
    return 0;
}
