/* ring_bench.c - ring-queue throughput and latency between processes.
 *
 *   ring-bench [--mode tput|lat|both] [--entry 16,64] [--items N] [--iters N]
 *              [--warmup N] [--capacity C] [--producers P] [--consumers C]
 *              [--json]
 *
 * tput: P producer processes push --items entries in total through one ring
 *   to C consumer processes. Every process attaches the ring by name, as
 *   stages do, and all start together (released by closing a pipe). The
 *   consumers check that each producer's entries arrive in order. Reports
 *   items/s and MB/s of entry payload from the start to the moment the last
 *   consumer sees the end of the stream.
 * lat:  ping-pong between two processes over two rings: the parent pushes an
 *   entry, the child pops it and pushes it back, the parent pops it and
 *   records the round trip. Reports p50/p90/p99/p99.9/max in microseconds,
 *   after --warmup round trips that are not recorded.
 * Output: one `key=value ...` line per measurement, or one JSON object per
 * line with --json. Benchmarks report; they judge nothing. The shared
 * memory of the run is removed on every exit path. */
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
#include "ipc/ring.h"
#include "ipc/shm.h"

#define MAX_PROCS 64

struct opts {
    bool tput, lat, json;
    uint32_t entries[8];
    int nentries;
    uint64_t items, iters, warmup;
    uint32_t capacity, producers, consumers;
};

/* Results the children leave for the parent (shared anonymous mapping). */
struct results {
    _Atomic uint64_t end_ns;       /* latest end-of-stream seen by a consumer */
    _Atomic uint64_t popped;       /* entries popped by all consumers */
    _Atomic uint64_t order_errors; /* entries out of per-producer order */
};

static struct results *g_res;

/* Start line: each child writes a byte to the ready pipe once attached,
 * then blocks until the parent closes the start pipe. */
static int g_ready[2] = {-1, -1}, g_start[2] = {-1, -1};

static void wait_start(void)
{
    char c = 1;
    while (write(g_ready[1], &c, 1) < 0 && errno == EINTR)
        ;
    while (read(g_start[0], &c, 1) < 0 && errno == EINTR)
        ;
}

typedef int (*child_fn)(const char *name, const char *name2, uint32_t idx, const struct opts *o, uint32_t entry);

static pid_t spawn(child_fn fn, const char *name, const char *name2, uint32_t idx, const struct opts *o, uint32_t entry)
{
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork", -errno);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (g_start[1] >= 0)
            close(g_start[1]);
        bench_run[0] = '\0'; /* the parent cleans up */
        _exit(fn(name, name2, idx, o, entry));
    }
    return pid;
}

static void reap(const pid_t *pids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        int st = 0;
        if (waitpid(pids[i], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "ring-bench: child %u failed (status %#x)\n", i, (unsigned)st);
            bench_cleanup();
            exit(1);
        }
    }
}

/* ---- throughput ---------------------------------------------------------------------- */

static int tput_producer(const char *name, const char *unused, uint32_t idx, const struct opts *o, uint32_t entry)
{
    struct ring r;
    char err[256];
    if (ring_attach(&r, name, err, sizeof err)) {
        fprintf(stderr, "producer %u: %s\n", idx, err);
        return 1;
    }
    uint64_t n = o->items / o->producers + (idx < o->items % o->producers ? 1 : 0);
    unsigned char buf[RING_ENTRY_MAX] = {0};
    wait_start();
    for (uint64_t s = 0; s < n; s++) {
        uint64_t tag = ((uint64_t)idx << 48) | s;
        memcpy(buf, &tag, sizeof tag);
        int rc = ring_push(&r, buf, RING_FOREVER);
        if (rc) {
            fprintf(stderr, "producer %u: push: %s\n", idx, strerror(-rc));
            return 1;
        }
    }
    ring_producer_done(&r);
    ring_free(&r);
    return 0;
}

static int tput_consumer(const char *name, const char *unused, uint32_t idx, const struct opts *o, uint32_t entry)
{
    struct ring r;
    char err[256];
    if (ring_attach(&r, name, err, sizeof err)) {
        fprintf(stderr, "consumer %u: %s\n", idx, err);
        return 1;
    }
    uint64_t next[MAX_PROCS] = {0};
    uint64_t got = 0, bad = 0;
    unsigned char buf[RING_ENTRY_MAX];
    wait_start();
    int rc;
    while ((rc = ring_pop(&r, buf, RING_FOREVER)) == 0) {
        uint64_t tag;
        memcpy(&tag, buf, sizeof tag);
        uint32_t p = (uint32_t)(tag >> 48);
        uint64_t s = tag & ((UINT64_C(1) << 48) - 1);
        if (p >= o->producers || s < next[p])
            bad++;
        else
            next[p] = s + 1;
        got++;
    }
    uint64_t t = sl_now_ns();
    ring_free(&r);
    if (rc != -EPIPE) {
        fprintf(stderr, "consumer %u: pop: %s\n", idx, strerror(-rc));
        return 1;
    }
    uint64_t prev = atomic_load(&g_res->end_ns);
    while (prev < t && !atomic_compare_exchange_weak(&g_res->end_ns, &prev, t))
        ;
    atomic_fetch_add(&g_res->popped, got);
    atomic_fetch_add(&g_res->order_errors, bad);
    return 0;
}

static void print_result(const struct opts *o, const char *mode, uint32_t entry, const char *fmt, ...) SL_PRINTF(4, 5);

static void print_result(const struct opts *o, const char *mode, uint32_t entry, const char *fmt, ...)
{
    char body[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (!o->json) {
        printf("mode=%s entry_bytes=%" PRIu32 " capacity=%" PRIu32 " %s\n", mode, entry, o->capacity, body);
    } else {
        /* body is "k=v k=v"; emit {"mode":"..","k":v,...} */
        printf("{\"mode\":\"%s\",\"entry_bytes\":%" PRIu32 ",\"capacity\":%" PRIu32, mode, entry, o->capacity);
        char *save = NULL;
        for (char *kv = strtok_r(body, " ", &save); kv; kv = strtok_r(NULL, " ", &save)) {
            char *eq = strchr(kv, '=');
            if (!eq)
                continue;
            *eq = '\0';
            printf(",\"%s\":%s", kv, eq + 1);
        }
        printf("}\n");
    }
    fflush(stdout);
}

static void run_tput(const struct opts *o, uint32_t entry)
{
    char err[256], obj[32];
    snprintf(obj, sizeof obj, "bench-tput-%" PRIu32, entry);
    struct ring r;
    struct ring_params rp = {.entry_size = entry, .capacity = o->capacity, .producers = o->producers};
    int rc = ring_create(&r, bench_run, obj, &rp, err, sizeof err);
    if (rc) {
        fprintf(stderr, "ring-bench: %s\n", err);
        bench_cleanup();
        exit(1);
    }
    memset(g_res, 0, sizeof *g_res);
    if (pipe(g_ready) != 0 || pipe(g_start) != 0)
        bench_die("pipe", -errno);
    pid_t pids[2 * MAX_PROCS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < o->consumers; i++)
        pids[n++] = spawn(tput_consumer, r.seg.name, NULL, i, o, entry);
    for (uint32_t i = 0; i < o->producers; i++)
        pids[n++] = spawn(tput_producer, r.seg.name, NULL, i, o, entry);
    close(g_start[0]);
    close(g_ready[1]);
    for (uint32_t i = 0; i < n; i++) { /* everyone attached (a child that fails closes its end early) */
        char ch;
        if (read(g_ready[0], &ch, 1) != 1)
            break;
    }
    close(g_ready[0]);
    uint64_t t0 = sl_now_ns();
    close(g_start[1]);
    g_start[0] = g_start[1] = g_ready[0] = g_ready[1] = -1;
    reap(pids, n);
    double s = (double)(atomic_load(&g_res->end_ns) - t0) / 1e9;
    uint64_t got = atomic_load(&g_res->popped);
    if (got != o->items || atomic_load(&g_res->order_errors) != 0) {
        fprintf(stderr, "ring-bench: delivered %" PRIu64 " of %" PRIu64 ", %" PRIu64 " out of order\n", got, o->items,
                atomic_load(&g_res->order_errors));
        bench_cleanup();
        exit(1);
    }
    print_result(o, "tput", entry,
                 "producers=%" PRIu32 " consumers=%" PRIu32 " items=%" PRIu64 " seconds=%.4f items_per_s=%.0f "
                 "MB_per_s=%.1f",
                 o->producers, o->consumers, got, s, (double)got / s, (double)got * entry / s / 1e6);
    char name[SHM_NAME_MAX];
    snprintf(name, sizeof name, "%s", r.seg.name);
    ring_free(&r);
    shm_seg_unlink(name);
}

/* ---- latency ------------------------------------------------------------------------- */

static int lat_echo(const char *ping_name, const char *pong_name, uint32_t idx, const struct opts *o, uint32_t entry)
{
    struct ring ping, pong;
    char err[256];
    if (ring_attach(&ping, ping_name, err, sizeof err) || ring_attach(&pong, pong_name, err, sizeof err)) {
        fprintf(stderr, "echo: %s\n", err);
        return 1;
    }
    unsigned char buf[RING_ENTRY_MAX];
    int rc;
    while ((rc = ring_pop(&ping, buf, RING_FOREVER)) == 0) {
        rc = ring_push(&pong, buf, RING_FOREVER);
        if (rc)
            break;
    }
    ring_free(&ping);
    ring_free(&pong);
    return rc == -EPIPE ? 0 : 1;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double pct(const uint64_t *v, uint64_t n, double p)
{
    uint64_t i = (uint64_t)(p * (double)(n - 1) + 0.5);
    return (double)v[i] / 1e3;
}

static void run_lat(const struct opts *o, uint32_t entry)
{
    char err[256], obj1[32], obj2[32];
    snprintf(obj1, sizeof obj1, "bench-ping-%" PRIu32, entry);
    snprintf(obj2, sizeof obj2, "bench-pong-%" PRIu32, entry);
    struct ring ping, pong;
    struct ring_params rp = {.entry_size = entry, .capacity = o->capacity};
    if (ring_create(&ping, bench_run, obj1, &rp, err, sizeof err) ||
        ring_create(&pong, bench_run, obj2, &rp, err, sizeof err)) {
        fprintf(stderr, "ring-bench: %s\n", err);
        bench_cleanup();
        exit(1);
    }
    pid_t pid = spawn(lat_echo, ping.seg.name, pong.seg.name, 0, o, entry);
    uint64_t *rtt = malloc(o->iters * sizeof *rtt);
    if (!rtt)
        bench_die("malloc", -ENOMEM);
    unsigned char buf[RING_ENTRY_MAX] = {0}, back[RING_ENTRY_MAX];
    for (uint64_t i = 0; i < o->warmup + o->iters; i++) {
        memcpy(buf, &i, sizeof i);
        uint64_t t0 = sl_now_ns();
        int rc = ring_push(&ping, buf, RING_FOREVER);
        if (rc == 0)
            rc = ring_pop(&pong, back, RING_FOREVER);
        uint64_t t1 = sl_now_ns();
        if (rc)
            bench_die("ping-pong", rc);
        if (memcmp(buf, back, entry) != 0)
            bench_die("ping-pong: entry came back changed", -EIO);
        if (i >= o->warmup)
            rtt[i - o->warmup] = t1 - t0;
    }
    ring_close(&ping);
    reap(&pid, 1);
    qsort(rtt, o->iters, sizeof *rtt, cmp_u64);
    double sum = 0;
    for (uint64_t i = 0; i < o->iters; i++)
        sum += (double)rtt[i];
    print_result(o, "lat", entry,
                 "iters=%" PRIu64 " rtt_us_mean=%.2f rtt_us_p50=%.2f rtt_us_p90=%.2f rtt_us_p99=%.2f "
                 "rtt_us_p999=%.2f rtt_us_max=%.2f",
                 o->iters, sum / (double)o->iters / 1e3, pct(rtt, o->iters, 0.50), pct(rtt, o->iters, 0.90),
                 pct(rtt, o->iters, 0.99), pct(rtt, o->iters, 0.999), (double)rtt[o->iters - 1] / 1e3);
    free(rtt);
    char n1[SHM_NAME_MAX], n2[SHM_NAME_MAX];
    snprintf(n1, sizeof n1, "%s", ping.seg.name);
    snprintf(n2, sizeof n2, "%s", pong.seg.name);
    ring_free(&ping);
    ring_free(&pong);
    shm_seg_unlink(n1);
    shm_seg_unlink(n2);
}

/* ---- main ---------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: ring-bench [--mode tput|lat|both] [--entry 16,64] [--items N] [--iters N]\n"
               "                  [--warmup N] [--capacity C] [--producers P] [--consumers C] [--json]\n");
}

/* OPT_FN for --mode: tput, lat or both into bool[2]. */
static int take_mode(const char *val, void *dst, char *err, size_t errlen)
{
    bool *m = dst;
    m[0] = !strcmp(val, "tput") || !strcmp(val, "both");
    m[1] = !strcmp(val, "lat") || !strcmp(val, "both");
    return m[0] || m[1] ? 0 : -EINVAL;
}

int main(int argc, char **argv)
{
    static struct opts o; /* static: gcc -O3 misreads a zero-initialised local here as maybe-uninitialized */
    bool mode[2] = {true, true}, json = false, help = false;
    struct opt_list entries = {.v = {16, 64}, .n = 2};
    uint64_t items = 5000000, iters = 200000, warmup = 10000, capacity = 1024, producers = 1, consumers = 1;
    const struct opt opts[] = {
        {.name = "--mode", .kind = OPT_FN, .dst = mode, .fn = take_mode, .what = "is not tput, lat or both"},
        {.name = "--entry", .kind = OPT_LIST, .dst = &entries, .lo = 8, .hi = RING_ENTRY_MAX},
        {.name = "--items", .kind = OPT_UINT, .dst = &items, .lo = 1, .hi = INT64_MAX},
        {.name = "--iters", .kind = OPT_UINT, .dst = &iters, .lo = 1, .hi = INT64_MAX},
        {.name = "--warmup", .kind = OPT_UINT, .dst = &warmup, .lo = 1, .hi = INT64_MAX},
        {.name = "--capacity", .kind = OPT_UINT, .dst = &capacity, .lo = 1, .hi = UINT32_MAX},
        {.name = "--producers", .kind = OPT_UINT, .dst = &producers, .lo = 1, .hi = MAX_PROCS},
        {.name = "--consumers", .kind = OPT_UINT, .dst = &consumers, .lo = 1, .hi = MAX_PROCS},
        {.name = "--json", .kind = OPT_FLAG, .dst = &json},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    int rc = opt_main("ring-bench", opts, (int)SL_ARRAY_LEN(opts), argc, argv, NULL, &help, usage);
    if (rc >= 0)
        return rc;
    o.tput = mode[0];
    o.lat = mode[1];
    o.nentries = entries.n;
    for (int i = 0; i < entries.n; i++)
        o.entries[i] = (uint32_t)entries.v[i];
    o.items = items;
    o.iters = iters;
    o.warmup = warmup;
    o.capacity = (uint32_t)capacity;
    o.producers = (uint32_t)producers;
    o.consumers = (uint32_t)consumers;
    if (o.producers > MAX_PROCS || o.consumers > MAX_PROCS) {
        fprintf(stderr, "ring-bench: at most %d producers and %d consumers\n", MAX_PROCS, MAX_PROCS);
        return 2;
    }
    g_res = mmap(NULL, sizeof *g_res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_res == MAP_FAILED)
        bench_die("mmap", -errno);
    bench_begin("ring-bench");
    for (int i = 0; i < o.nentries; i++) {
        if (o.tput)
            run_tput(&o, o.entries[i]);
        if (o.lat)
            run_lat(&o, o.entries[i]);
    }
    bench_cleanup();
    return 0;
}
