/* extract_bench.c - `gnn-extractor --bench`: the extraction engine alone
 * (stages/extract.h) against a dataset, for stage-only measurements
 * (DESIGN.md section 2).
 *
 * A private feature buffer of R slots (featbuf_mem_format on anonymous
 * memory; by default N/16 rows, at most 262144, at least T x B, so that
 * uniformly random nodes mostly miss) is shared by T threads. Each thread
 * has its own engine (its own io_uring and staging) of depth Q and its own
 * RNG (splitmix64 seeded from --seed and the thread number); it draws
 * batches of B uniformly random node ids (repeats allowed), runs
 * extractor_run, then drops the batch's references with
 * featbuf_release_many, until S seconds have passed. Results are key=value
 * lines on stdout: the settings first, then rows_per_s, iops (completed
 * read requests per second), MBps (bytes read from the file, 10^6 B/s),
 * hit_rate ((hits + shared) / rows, where shared rows were being loaded
 * by another thread or an earlier entry of the same batch) and peak RSS.
 *
 * Exit: 0; 1 run-time failure (message on stderr); 2 bad flags (usage on
 * stderr). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "core/dataset.h"
#include "core/opt.h"
#include "core/util.h"
#include "stages/extract.h"
#include "stages/featbuf.h"

int extract_bench_main(int argc, char **argv);

#define PROG "gnn-extractor"

static void usage(FILE *f)
{
    fprintf(f, "usage: " PROG " --bench DATASET [--io-depth Q] [--threads T] [--buffer-rows R]\n"
               "                     [--seconds S] [--batch-nodes B] [--io direct|buffered|mmap] [--seed S]\n"
               "\n"
               "Benchmarks feature extraction on DATASET (a gnnprep dataset directory): T threads,\n"
               "each with its own engine (one io_uring, Q reads in flight), extract batches of B\n"
               "uniformly random nodes into a private feature buffer of R rows and release them,\n"
               "for S seconds, and print rows_per_s, iops, MBps, hit_rate and the settings as\n"
               "key=value lines.\n"
               "\n"
               "  --io-depth Q      reads in flight per thread, 1..4096 (default 64)\n"
               "  --threads T       extractor threads (default 1)\n"
               "  --buffer-rows R   feature buffer slots (default N/16 up to 262144, at least T x B)\n"
               "  --seconds S       measuring time (default 10)\n"
               "  --batch-nodes B   nodes per batch (default 1024)\n"
               "  --io MODE         direct (O_DIRECT, default), buffered or mmap\n"
               "  --seed S          RNG seed (default 0)\n"
               "  --help            this text\n"
               "\n"
               "SLUICE_NO_IO_URING=1 in the environment measures the pread(2) fallback.\n"
               "Without --bench, " PROG " is the extraction stage of a run and is started by\n"
               "gnnlaunch with the run's arguments (--run=... --rank=... --config=...).\n");
}

struct bench {
    const struct extract_source *src;
    struct featbuf *fb;
    unsigned depth;
    uint32_t batch;
    uint64_t seed;
    double deadline;
    atomic_bool stop;
};

struct worker {
    struct bench *b;
    pthread_t tid;
    unsigned id;
    bool uring;
    struct extract_stats st;
    int rc;
    char err[1024];
};

/* Uniform in [0, n) (multiply-shift; bias below 2^-32 for n < 2^32). */
static uint64_t below(uint64_t *s, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)sl_splitmix64(s) * n) >> 64);
}

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    struct bench *b = w->b;
    struct extractor x;
    uint64_t *nodes = malloc((size_t)b->batch * sizeof *nodes);
    uint32_t *slots = malloc((size_t)b->batch * sizeof *slots);
    w->rc = extractor_init(&x, b->src, b->fb, b->depth, NULL, 0, w->err, sizeof w->err);
    if (w->rc)
        goto out;
    w->uring = x.use_uring;
    if (!nodes || !slots) {
        w->rc = sl_errf(w->err, sizeof w->err, -ENOMEM, "no memory for a batch of %u nodes", b->batch);
        goto out;
    }
    uint64_t rng = b->seed * 0x100000001B3ull + w->id + 1;
    while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
        for (uint32_t i = 0; i < b->batch; i++)
            nodes[i] = below(&rng, b->src->rows);
        w->rc = extractor_run(&x, nodes, b->batch, slots, w->err, sizeof w->err);
        if (w->rc)
            break;
        w->rc = x.unreferenced ? 0 : featbuf_release_many(b->fb, slots, b->batch);
        if (w->rc) {
            sl_errf(w->err, sizeof w->err, w->rc, "releasing a batch: %s", strerror(-w->rc));
            break;
        }
        if (sl_now() >= b->deadline)
            atomic_store(&b->stop, true);
    }
    w->st = x.st;
out:
    if (w->rc)
        atomic_store(&b->stop, true); /* the others stop too */
    extractor_free(&x);
    free(nodes);
    free(slots);
    return NULL;
}

static int run(const char *dir, enum extract_io io, unsigned depth, uint64_t threads, uint64_t rows_arg, double seconds,
               uint32_t batch, uint64_t seed)
{
    char err[1024];
    struct dataset_meta m;
    struct extract_source src;
    int rc = dataset_meta_read(dir, &m, true, err, sizeof err);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    rc = extract_source_open(&src, dir, &m, io, PROG, err, sizeof err);
    if (rc) {
        fprintf(stderr, PROG ": %s\n", err);
        return 1;
    }
    uint64_t need = threads * batch;
    uint64_t nslots = rows_arg ? rows_arg : SL_MAX(need, SL_MIN(src.rows / 16, 262144));
    if (nslots < need || nslots > FEATBUF_SLOTS_MAX) {
        fprintf(stderr, PROG ": --buffer-rows %" PRIu64 " must be in %" PRIu64 "..%u (threads x batch nodes)\n", nslots,
                need, FEATBUF_SLOTS_MAX);
        extract_source_free(&src);
        return 2;
    }
    struct featbuf_params p = {.n_nodes = src.rows, .nslots = (uint32_t)nslots, .row_bytes = (size_t)src.row_bytes};
    size_t len = featbuf_mem_size(&p);
    void *mem = len ? mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
    struct featbuf fb = {0}; /* featbuf_init keeps fb.seg, which must be zero */
    if (mem == MAP_FAILED) {
        fprintf(stderr, PROG ": no memory for a feature buffer of %" PRIu64 " rows (%zu bytes)\n", nslots, len);
        extract_source_free(&src);
        return 1;
    }
    if ((rc = featbuf_mem_format(mem, len, &p, err, sizeof err)) != 0 ||
        (rc = featbuf_init(&fb, mem, len, err, sizeof err)) != 0) {
        fprintf(stderr, PROG ": feature buffer: %s\n", err);
        munmap(mem, len);
        extract_source_free(&src);
        return 1;
    }
    printf("dataset=%s\nnodes=%" PRIu64 "\nfeat_dim=%" PRIu64 "\ndtype=%s\nrow_bytes=%" PRIu64 "\nrow_stride=%" PRIu64
           "\nio=%s\nalign=%u\nread_bytes_max=%" PRIu64 "\nio_depth=%u\nthreads=%" PRIu64 "\nbatch_nodes=%" PRIu32
           "\nbuffer_rows=%" PRIu64 "\nbuffer_bytes=%zu\nseed=%" PRIu64 "\n",
           dir, src.rows, m.feat_dim, dtype_name(m.f[DATASET_FEATURES].dtype), src.row_bytes, src.row_stride,
           extract_io_name(src.io), src.align, src.extent_max, depth, threads, batch, nslots, len, seed);
    fflush(stdout);

    struct bench b = {.src = &src, .fb = &fb, .depth = depth, .batch = batch, .seed = seed};
    struct worker *w = calloc(threads, sizeof *w);
    if (!w) {
        fprintf(stderr, PROG ": out of memory\n");
        munmap(mem, len);
        extract_source_free(&src);
        return 1;
    }
    double t0 = sl_now();
    b.deadline = t0 + seconds;
    uint64_t started = 0;
    for (; started < threads; started++) {
        w[started].b = &b;
        w[started].id = (unsigned)started;
        rc = pthread_create(&w[started].tid, NULL, worker_run, &w[started]);
        if (rc) {
            fprintf(stderr, PROG ": cannot start thread %" PRIu64 ": %s\n", started, strerror(rc));
            atomic_store(&b.stop, true);
            break;
        }
    }
    struct extract_stats sum = {0};
    int failed = started < threads;
    bool uring = true;
    for (uint64_t i = 0; i < started; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].rc) {
            fprintf(stderr, PROG ": thread %" PRIu64 ": %s\n", i, w[i].err);
            failed = 1;
        }
        uring = uring && w[i].uring;
        extract_stats_add(&sum, &w[i].st);
    }
    double wall = sl_now() - t0;
    if (!failed && featbuf_check(&fb, err, sizeof err) != 0) {
        fprintf(stderr, PROG ": feature buffer inconsistent after the run: %s\n", err);
        failed = 1;
    }
    if (!failed) {
        const char *backend = src.io == EXTRACT_IO_MMAP ? "mmap" : uring ? "io_uring" : "pread";
        printf("io_backend=%s\nseconds=%.3f\nbatches=%" PRIu64 "\nrows=%" PRIu64 "\nhits=%" PRIu64 "\nshared=%" PRIu64
               "\nloads=%" PRIu64 "\nio_ops=%" PRIu64 "\nread_bytes=%" PRIu64
               "\nread_bytes_per_load=%.1f\nretries=%" PRIu64 "\nwait_s=%.3f\n"
               "rows_per_s=%.0f\niops=%.0f\nMBps=%.1f\nhit_rate=%.4f\ncopies_overlapped_share=%.4f\n"
               "peak_rss_bytes=%" PRIu64 "\n",
               backend, wall, sum.batches, sum.rows, sum.hits, sum.waits, sum.loads, sum.io_ops, sum.io_bytes,
               sum.loads ? (double)sum.io_bytes / (double)sum.loads : 0.0, sum.retries, (double)sum.wait_ns / 1e9,
               (double)sum.rows / wall, (double)sum.io_ops / wall, (double)sum.io_bytes / wall / 1e6,
               sum.rows ? (double)(sum.hits + sum.waits) / (double)sum.rows : 0.0,
               sum.copies ? (double)sum.copies_overlapped / (double)sum.copies : 0.0, sl_peak_rss());
    }
    free(w);
    featbuf_free(&fb);
    munmap(mem, len);
    extract_source_free(&src);
    return failed;
}

/* OPT_FN for --io: direct, buffered or mmap into an int. */
static int take_io(const char *val, void *dst, char *err, size_t errlen)
{
    int io = extract_io_parse(val);
    if (io < 0)
        return sl_errf(err, errlen, -EINVAL, "--io wants direct, buffered or mmap, not '%s'", val);
    *(int *)dst = io;
    return 0;
}

int extract_bench_main(int argc, char **argv)
{
    char dir[4096] = "";
    uint64_t depth = 64, threads = 1, rows = 0, batch = 1024, seed = 0;
    double seconds = 10;
    int io = EXTRACT_IO_DIRECT;
    bool help = false;
    const struct opt opts[] = {
        {.name = "--bench", .kind = OPT_STR, .dst = dir, .len = sizeof dir},
        {.name = "--io-depth", .kind = OPT_UINT, .dst = &depth, .lo = 1, .hi = 4096},
        {.name = "--threads", .kind = OPT_UINT, .dst = &threads, .lo = 1, .hi = 1024},
        {.name = "--buffer-rows", .kind = OPT_UINT, .dst = &rows, .lo = 1, .hi = FEATBUF_SLOTS_MAX},
        {.name = "--seconds", .kind = OPT_DOUBLE, .dst = &seconds, .lo = 0, .hi = 86400},
        {.name = "--batch-nodes", .kind = OPT_UINT, .dst = &batch, .lo = 1, .hi = 1u << 24},
        {.name = "--io", .kind = OPT_FN, .dst = &io, .fn = take_io},
        {.name = "--seed", .kind = OPT_UINT, .dst = &seed, .lo = 0, .hi = (int64_t)UINT64_MAX},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    int rc = opt_main(PROG, opts, (int)SL_ARRAY_LEN(opts), argc, argv, NULL, &help, usage);
    if (rc >= 0)
        return rc;
    if (!dir[0]) {
        usage(stderr);
        return 2;
    }
    return run(dir, (enum extract_io)io, (unsigned)depth, threads, rows, seconds, (uint32_t)batch, seed);
}
