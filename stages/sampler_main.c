/* sampler_main.c - gnn-sampler. For now the stage-only benchmark mode
 * (issue 4, "Stage-only modes"): T threads sample batches of the training
 * split into private buffers for S seconds and report batches and sampled
 * edges per second as key=value lines. The stage-process mode (attached to
 * a run by gnnlaunch) is not built yet: any other invocation prints the
 * usage and exits 2.
 *
 * Work split in the benchmark: the split is shuffled once (epoch 0, rank 0
 * of 1) and cut into batches; threads take global batch numbers g from one
 * atomic counter and sample batch g mod nb of that shuffle with seed
 * sampler_batch_seed(seed, g / nb, 0, g mod nb), so later passes draw
 * fresh neighbours for the same target sets. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "stages/sampler.h"

#define CHECK(stmt)                                                                                                    \
    do {                                                                                                               \
        int rc_ = (stmt);                                                                                              \
        if (rc_ < 0) {                                                                                                 \
            fprintf(stderr, "gnn-sampler: %s failed in %s (%s:%d): %s\n", #stmt, __func__, __FILE__, __LINE__,         \
                    err[0] ? err : strerror(-rc_));                                                                    \
            exit(1);                                                                                                   \
        }                                                                                                              \
    } while (0)

static char err[1024];

static void usage(FILE *f)
{
    fprintf(f, "usage: gnn-sampler --bench DATASET [--fanouts 10,10,10] [--batch-size N] [--threads T]\n"
               "                   [--seconds S] [--seed S]\n"
               "\n"
               "Benchmarks neighbour sampling on DATASET (a gnnprep dataset directory): T threads\n"
               "sample batches of its training split into private buffers for S seconds and print\n"
               "batches_per_s, sampled_edges_per_s and the settings as key=value lines.\n"
               "\n"
               "  --fanouts LIST    per-layer fanouts, -1 = all in-neighbours (default 10,10,10)\n"
               "  --batch-size N    targets per batch (default 1024)\n"
               "  --threads T       sampler threads (default 1)\n"
               "  --seconds S       measuring time (default 10)\n"
               "  --seed S          run seed (default 0)\n"
               "  --help            this text\n"
               "\n"
               "The stage mode (started by gnnlaunch) is not available in this build.\n");
}

struct bench {
    const struct sampler_topo *topo;
    struct batch_shape shape;
    const uint64_t *share;
    uint64_t n_share, nb, seed;
    double deadline;
    atomic_uint_fast64_t next;
    atomic_bool stop;
};

struct worker {
    struct bench *b;
    pthread_t tid;
    uint64_t batches, edges;
    double busy_s;
    int rc;
    char err[512];
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    struct bench *b = w->b;
    struct sampler s;
    void *slot = NULL;
    w->rc = sampler_init(&s, b->topo, &b->shape, w->err, sizeof w->err);
    if (w->rc)
        return NULL;
    size_t size = (size_t)sl_round_up(s.plan.max_bytes, 64);
    slot = aligned_alloc(64, size);
    if (!slot) {
        w->rc = sl_errf(w->err, sizeof w->err, -ENOMEM, "no memory for a %zu-byte batch buffer", size);
        goto out;
    }
    double t0 = sl_now();
    while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
        uint64_t g = atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed);
        uint64_t e = g / b->nb, k = g % b->nb;
        uint64_t first = k * b->shape.batch_size;
        uint32_t n = (uint32_t)SL_MIN(b->shape.batch_size, b->n_share - first);
        struct batch_id id = {.batch = g, .epoch = (uint32_t)e, .rank = 0};
        uint64_t edges;
        w->rc = sampler_sample(&s, slot, size, b->share + first, n, &id, sampler_batch_seed(b->seed, (uint32_t)e, 0, k),
                               &edges, w->err, sizeof w->err);
        if (w->rc)
            break;
        w->batches++;
        w->edges += edges;
        if (sl_now() >= b->deadline)
            atomic_store(&b->stop, true);
    }
    w->busy_s = sl_now() - t0;
out:
    free(slot);
    sampler_free(&s);
    return NULL;
}

static int parse_fanouts(const char *arg, struct batch_shape *s)
{
    char buf[256];
    if (strlen(arg) >= sizeof buf)
        return -EINVAL;
    strcpy(buf, arg);
    s->layers = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *end;
        errno = 0;
        long long v = strtoll(tok, &end, 10);
        if (errno || *end || end == tok || v < -1 || s->layers >= BATCH_LAYERS_MAX)
            return -EINVAL;
        s->fanouts[s->layers++] = v;
    }
    return s->layers ? 0 : -EINVAL;
}

static int bench_main(const char *dir, struct batch_shape *shape, uint64_t threads, double seconds, uint64_t seed,
                      const char *fan_arg)
{
    sl_dataset_meta m;
    struct sampler_topo topo;
    CHECK(sl_meta_read(dir, &m, true, err, sizeof err));
    double t_open = sl_now();
    CHECK(sampler_topo_open(&topo, dir, &m, err, sizeof err));
    t_open = sl_now() - t_open;
    uint64_t *train, n_train, share_n;
    CHECK(sampler_split_load(dir, &m, SL_F_TRAIN, &train, &n_train, err, sizeof err));
    if (n_train == 0) {
        fprintf(stderr, "gnn-sampler: %s has an empty training split; nothing to sample\n", dir);
        exit(1);
    }
    uint64_t *share = malloc((size_t)n_train * sizeof *share);
    if (!share)
        CHECK(-ENOMEM);
    CHECK(sampler_epoch_share(train, n_train, seed, 0, 0, 1, share, &share_n, err, sizeof err));
    shape->batch_size = SL_MIN(shape->batch_size, share_n);
    struct bench b = {.topo = &topo, .shape = *shape, .share = share, .n_share = share_n, .seed = seed};
    b.nb = sampler_batch_count(share_n, shape->batch_size);
    struct worker *w = calloc(threads, sizeof *w);
    if (!w)
        CHECK(-ENOMEM);
    printf("dataset=%s\nnodes=%" PRIu64 "\nedges=%" PRIu64 "\nmax_in_degree=%" PRIu64 "\ntrain=%" PRIu64
           "\nbatches_per_pass=%" PRIu64 "\ntopology_open_s=%.3f\n",
           dir, topo.nodes, topo.edges, topo.max_in_degree, n_train, b.nb, t_open);
    fflush(stdout);
    double t0 = sl_now();
    b.deadline = t0 + seconds;
    for (uint64_t i = 0; i < threads; i++) {
        w[i].b = &b;
        int rc = pthread_create(&w[i].tid, NULL, worker_run, &w[i]);
        if (rc)
            CHECK(-rc);
    }
    uint64_t batches = 0, edges = 0;
    int failed = 0;
    for (uint64_t i = 0; i < threads; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].rc) {
            fprintf(stderr, "gnn-sampler: thread %" PRIu64 ": %s\n", i, w[i].err);
            failed = 1;
        }
        batches += w[i].batches;
        edges += w[i].edges;
    }
    double wall = sl_now() - t0;
    if (!failed)
        printf("threads=%" PRIu64 "\nfanouts=%s\nbatch_size=%" PRIu64 "\nseed=%" PRIu64
               "\nseconds=%.3f\nbatches=%" PRIu64 "\nsampled_edges=%" PRIu64
               "\nbatches_per_s=%.1f\nsampled_edges_per_s=%.0f\n"
               "sampled_edges_per_s_per_thread=%.0f\npeak_rss_bytes=%" PRIu64 "\n",
               threads, fan_arg, shape->batch_size, seed, wall, batches, edges, batches / wall, edges / wall,
               edges / wall / (double)threads, sl_peak_rss());
    free(w);
    free(share);
    free(train);
    sampler_topo_free(&topo);
    return failed;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"bench", required_argument, NULL, 'b'},
        {"fanouts", required_argument, NULL, 'f'},
        {"batch-size", required_argument, NULL, 'n'},
        {"threads", required_argument, NULL, 't'},
        {"seconds", required_argument, NULL, 's'},
        {"seed", required_argument, NULL, 'S'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *dir = NULL, *fan_arg = "10,10,10";
    struct batch_shape shape = {.batch_size = 1024};
    uint64_t threads = 1, seed = 0;
    double seconds = 10;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        uint64_t v = 0;
        switch (c) {
        case 'b':
            dir = optarg;
            break;
        case 'f':
            fan_arg = optarg;
            break;
        case 'n':
            if (sl_parse_u64(optarg, false, &v) || v == 0 || v > BATCH_COUNT_MAX) {
                fprintf(stderr, "gnn-sampler: --batch-size wants an integer in 1..%u, not '%s'\n", BATCH_COUNT_MAX,
                        optarg);
                return 2;
            }
            shape.batch_size = v;
            break;
        case 't':
            if (sl_parse_u64(optarg, false, &v) || v == 0 || v > 1024) {
                fprintf(stderr, "gnn-sampler: --threads wants an integer in 1..1024, not '%s'\n", optarg);
                return 2;
            }
            threads = v;
            break;
        case 's':
            if (sl_parse_double(optarg, &seconds) || !(seconds > 0) || seconds > 86400) {
                fprintf(stderr, "gnn-sampler: --seconds wants a number in (0, 86400], not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'S':
            if (sl_parse_u64(optarg, false, &seed)) {
                fprintf(stderr, "gnn-sampler: --seed wants an unsigned integer, not '%s'\n", optarg);
                return 2;
            }
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (!dir || optind != argc) {
        usage(stderr);
        return 2;
    }
    if (parse_fanouts(fan_arg, &shape)) {
        fprintf(stderr, "gnn-sampler: --fanouts wants 1..%d comma-separated integers >= -1, not '%s'\n",
                BATCH_LAYERS_MAX, fan_arg);
        return 2;
    }
    return bench_main(dir, &shape, threads, seconds, seed, fan_arg);
}
