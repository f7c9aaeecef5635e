/* sampler_main.c - gnn-sampler: the stage process (started by gnnlaunch
 * with the stage command line of ipc/run.h) and the stage-only
 * benchmark (--bench).
 *
 * Stage. pipeline.samplers threads take global batch numbers g = 0, 1, ...
 * from one atomic counter; the rank's batch schedule (stages/schedule.h:
 * each epoch's training batches, validation batches after evaluation
 * epochs, test batches at the end) says which split and epoch g belongs
 * to, its targets and its seed. A thread asks its own schedule cursor for
 * batch g, takes an arena slot, samples the batch into it with the
 * schedule's seed and pushes
 * {batch = g, slot, epoch, aux = {sampled edges, split}} into the extract
 * queue. Here rank is the global rank of a multi-node run (layout.h), so
 * a batch's contents depend only on (seed, rank, g); with
 * pipeline.ordered the pushes also happen in the order of g (stage_turn),
 * which makes the whole stream reproducible. After the last batch the extract queue is closed
 * for writing (ring_producer_done). A closed queue or arena (the run is
 * stopping) ends the stage quietly; a sampling error fails it (exit 3).
 *
 * Benchmark. T threads sample batches of the training split into private
 * buffers for S seconds and report batches and sampled edges per second
 * as key=value lines.
 *
 * Work split in the benchmark: a one-epoch schedule of the training split
 * alone (rank 0 of 1: the split shuffled once and cut into nb batches);
 * threads take global batch numbers g from one atomic counter and sample
 * batch g mod nb of it with seed sampler_batch_seed(seed, g / nb, 0,
 * g mod nb), so later passes draw fresh neighbours for the same target
 * sets. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/opt.h"
#include "core/util.h"
#include "stages/featbuf_policy.h"
#include "stages/pack.h"
#include "stages/sampler.h"
#include "stages/schedule.h"
#include "stages/schedule_partitions.h"
#include "stages/stage.h"

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
               "                   [--seconds S] [--seed S] [--topology mmap|memory|cache]\n"
               "                   [--cache-mb MB] [--buffered] [--no-prefetch] [--round-reads N]\n"
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
               "  --topology MODE   how indices.bin is reached: mmap (default), memory (read whole at\n"
               "                    start) or cache (a neighbour cache of --cache-mb MiB, the rest\n"
               "                    read with direct I/O); see pipeline.topology\n"
               "  --cache-mb MB     the neighbour cache's budget with --topology cache\n"
               "  --buffered        read indices.bin through the page cache, not with O_DIRECT\n"
               "  --no-prefetch     with --topology cache, do not read the next batch's targets' lists\n"
               "                    while a batch is sampled (the stage always does)\n"
               "  --round-reads N   with --topology cache, reads per round of a hop at most\n"
               "                    (default 128; 100000: rounds bounded by the read buffer only)\n"
               "  --help            this text\n"
               "\n"
               "Without --bench, gnn-sampler is the sampling stage of a run and is started by\n"
               "gnnlaunch with the run's arguments (--run=... --rank=... --config=...).\n");
}

struct bench {
    const struct sampler_topo *topo;
    struct batch_shape shape;
    const struct schedule *sched; /* one epoch of the training split */
    uint64_t nb, seed;
    bool prefetch; /* --no-prefetch clears it */
    double deadline;
    atomic_uint_fast64_t next;
    atomic_bool stop;
};

struct worker {
    struct bench *b;
    pthread_t tid;
    uint64_t batches, edges, lists_read, bytes_read, lists_prefetched;
    double busy_s;
    int rc;
    char err[512];
};

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    struct bench *b = w->b;
    struct sampler s;
    struct schedule_cursor cur;
    struct schedule_batch sb;
    void *slot = NULL;
    schedule_cursor_init(&cur, b->sched, 0);
    w->rc = sampler_init(&s, b->topo, &b->shape, w->err, sizeof w->err);
    if (w->rc)
        goto out;
    size_t size = (size_t)sl_round_up(s.plan.max_bytes, 64);
    slot = aligned_alloc(64, size);
    if (!slot) {
        w->rc = sl_errf(w->err, sizeof w->err, -ENOMEM, "no memory for a %zu-byte batch buffer", size);
        goto out;
    }
    if ((w->rc = schedule_batch(&cur, 0, &sb, w->err, sizeof w->err))) /* the shuffle, before the clock */
        goto out;
    double t0 = sl_now();
    /* as the stage does: the next batch's targets read while this one is sampled (CACHE) */
    uint64_t gnext = atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed);
    while (!atomic_load_explicit(&b->stop, memory_order_relaxed)) {
        uint64_t g = gnext, e = g / b->nb, k = g % b->nb;
        gnext = atomic_fetch_add_explicit(&b->next, 1, memory_order_relaxed);
        if (b->prefetch && s.pre) {
            if ((w->rc = schedule_batch(&cur, gnext % b->nb, &sb, w->err, sizeof w->err)) ||
                (w->rc = sampler_prefetch(&s, sb.targets, sb.pos.targets, w->err, sizeof w->err)))
                break;
        }
        if ((w->rc = schedule_batch(&cur, k, &sb, w->err, sizeof w->err)))
            break;
        struct batch_id id = {.batch = g, .epoch = (uint32_t)e, .rank = 0};
        uint64_t edges;
        w->rc = sampler_sample(&s, slot, size, sb.targets, sb.pos.targets, &id,
                               sampler_batch_seed(b->seed, (uint32_t)e, 0, k), &edges, w->err, sizeof w->err);
        if (w->rc)
            break;
        w->batches++;
        w->edges += edges;
        if (sl_now() >= b->deadline)
            atomic_store(&b->stop, true);
    }
    w->busy_s = sl_now() - t0;
    w->lists_read = s.lists_read;
    w->bytes_read = s.bytes_read;
    w->lists_prefetched = s.lists_prefetched;
out:
    free(slot);
    sampler_free(&s);
    schedule_cursor_free(&cur);
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
        if (errno || *end || end == tok || v < -1 || s->layers >= MODEL_LAYERS_MAX)
            return -EINVAL;
        s->fanouts[s->layers++] = v;
    }
    return s->layers ? 0 : -EINVAL;
}

/* What opening the topology read, for the bench's output and the stage's note. */
static void topo_describe(const struct sampler_topo *t, char *buf, size_t len)
{
    char a[32], b[32];
    int w = snprintf(buf, len, "topology %s", sampler_topo_mode_name(t->mode));
    if (t->mode == SAMPLER_TOPO_MMAP || w < 0 || (size_t)w >= len)
        return;
    if (t->shm && !t->shm_loader) {
        snprintf(buf + w, len - (size_t)w, ": shared with this node's other ranks (%s), loaded by another rank's "
                 "sampler; waited %.2f s", t->shm->name, t->load_s);
        return;
    }
    if (t->shm)
        w += snprintf(buf + w, len - (size_t)w, ": shared with this node's other ranks (%s)", t->shm->name);
    if (t->mode == SAMPLER_TOPO_CACHE)
        w += snprintf(buf + w, len - (size_t)w,
                      ": neighbour cache of %" PRIu64 " lists (%.1f%% of %" PRIu64 " nodes), %s of ids (%.1f%% of "
                      "the edges) and a %s index, the rest read in %u-byte granules",
                      t->cache_nodes, 100.0 * (double)t->cache_nodes / (double)t->nodes, t->nodes,
                      sl_fmt_bytes(t->cache_edges * (t->indices_u64 ? 8 : 4), a, sizeof a),
                      t->edges ? 100.0 * (double)t->cache_edges / (double)t->edges : 0.0,
                      sl_fmt_bytes(sampler_cache_index_bytes(t->nodes), b, sizeof b), t->read_align);
    if (w > 0 && (size_t)w < len)
        snprintf(buf + w, len - (size_t)w, "; read %s of indices.bin in %.2f s (%.0f MiB/s, %s)",
                 sl_fmt_bytes(t->load_bytes, a, sizeof a), t->load_s,
                 t->load_s > 0 ? (double)t->load_bytes / t->load_s / 1048576.0 : 0.0,
                 t->direct ? "direct" : "buffered");
}

static int bench_main(const char *dir, struct batch_shape *shape, uint64_t threads, double seconds, uint64_t seed,
                      const char *fan_arg, const struct sampler_topo_opts *to, bool prefetch)
{
    struct dataset_meta m;
    struct sampler_topo topo;
    CHECK(dataset_meta_read(dir, &m, true, err, sizeof err));
    double t_open = sl_now();
    CHECK(sampler_topo_open_mode(&topo, dir, &m, to, err, sizeof err));
    t_open = sl_now() - t_open;
    char desc[512];
    topo_describe(&topo, desc, sizeof desc);
    fprintf(stderr, "gnn-sampler: %s\n", desc);
    uint64_t *train, n_train;
    CHECK(sampler_split_load(dir, &m, DATASET_TRAIN, &train, &n_train, err, sizeof err));
    if (n_train == 0) {
        fprintf(stderr, "gnn-sampler: %s has an empty training split; nothing to sample\n", dir);
        exit(1);
    }
    shape->batch_size = SL_MIN(shape->batch_size, n_train);
    struct schedule sched;
    struct schedule_params sp = {.split_n = {n_train}, .rank = 0, .ranks = 1, .batch_size = shape->batch_size,
                                 .epochs = 1, .eval_every = 1, .seed = seed};
    CHECK(schedule_open(&sched, NULL, &sp, err, sizeof err));
    CHECK(schedule_set_ids(&sched, (const uint64_t *const[BATCH_SPLITS]){train}, err, sizeof err));
    struct bench b = {.topo = &topo, .shape = *shape, .sched = &sched, .seed = seed, .prefetch = prefetch};
    b.nb = schedule_len(&sched);
    struct worker *w = calloc(threads, sizeof *w);
    if (!w)
        CHECK(-ENOMEM);
    printf("dataset=%s\nnodes=%" PRIu64 "\nedges=%" PRIu64 "\nmax_in_degree=%" PRIu64 "\ntrain=%" PRIu64
           "\nbatches_per_pass=%" PRIu64 "\ntopology=%s\ntopology_open_s=%.3f\ntopology_load_bytes=%" PRIu64
           "\nneighbour_cache_nodes=%" PRIu64 "\nneighbour_cache_edges=%" PRIu64 "\nround_reads=%" PRIu32 "\nprefetch=%d\n",
           dir, topo.nodes, topo.edges, topo.max_in_degree, n_train, b.nb, sampler_topo_mode_name(topo.mode), t_open,
           topo.load_bytes, topo.cache_nodes, topo.cache_edges, topo.round_reads, prefetch && topo.mode == SAMPLER_TOPO_CACHE);
    fflush(stdout);
    double t0 = sl_now();
    b.deadline = t0 + seconds;
    for (uint64_t i = 0; i < threads; i++) {
        w[i].b = &b;
        int rc = pthread_create(&w[i].tid, NULL, worker_run, &w[i]);
        if (rc)
            CHECK(-rc);
    }
    uint64_t batches = 0, edges = 0, lists_read = 0, bytes_read = 0, lists_prefetched = 0;
    int failed = 0;
    for (uint64_t i = 0; i < threads; i++) {
        pthread_join(w[i].tid, NULL);
        if (w[i].rc) {
            fprintf(stderr, "gnn-sampler: thread %" PRIu64 ": %s\n", i, w[i].err);
            failed = 1;
        }
        batches += w[i].batches;
        edges += w[i].edges;
        lists_read += w[i].lists_read;
        bytes_read += w[i].bytes_read;
        lists_prefetched += w[i].lists_prefetched;
    }
    double wall = sl_now() - t0;
    if (!failed)
        printf("threads=%" PRIu64 "\nfanouts=%s\nbatch_size=%" PRIu64 "\nseed=%" PRIu64
               "\nseconds=%.3f\nbatches=%" PRIu64 "\nsampled_edges=%" PRIu64
               "\nbatches_per_s=%.1f\nsampled_edges_per_s=%.0f\n"
               "sampled_edges_per_s_per_thread=%.0f\nlists_read=%" PRIu64 "\nlist_bytes_read=%" PRIu64
               "\nlists_prefetched=%" PRIu64 "\npeak_rss_bytes=%" PRIu64 "\n",
               threads, fan_arg, shape->batch_size, seed, wall, batches, edges, batches / wall, edges / wall,
               edges / wall / (double)threads, lists_read, bytes_read, lists_prefetched, sl_peak_rss());
    free(w);
    schedule_free(&sched);
    free(train);
    sampler_topo_free(&topo);
    return failed;
}

/* ---- the stage ------------------------------------------------------------------------- */

struct srun {
    struct stage *st;
    struct sampler_topo topo;
    atomic_uint_fast64_t lists_read, bytes_read, lists_prefetched; /* CACHE: the threads' reads, summed as they end */
    struct schedule sched; /* loaded: every thread has a cursor on it */
    bool ordered;
    struct stage_turn turn;
    atomic_uint_fast64_t next;
    atomic_bool stop;
    /* lookahead (pipeline.cache_policy lookahead*): batches below hint_next
     * were announced to the feature buffer's policy */
    uint64_t window;
    atomic_uint_fast64_t hint_next;
    /* pipeline.mode = "packed": batches are read from the pack, not sampled */
    bool packed;
    struct pack pack;
    /* pipeline.mode = "partitions": training batches are sampled among the
     * nodes of their buffer state's partitions (sampler_set_filter) */
    bool partitioned;
    void *node_pos; /* the layout's node_pos.bin */
    bool pos_u64;
    struct po_plan *plans; /* (epochs) each epoch's buffer states */
};

/* One thread's means of announcing batches: its own cursor and a scratch
 * batch to sample into (the batch is sampled again for real later; the
 * seed makes both samples the same). */
struct hinter {
    struct schedule_cursor cur;
    void *mem;
    size_t size;
    uint32_t last_nodes; /* nodes of the last batch it announced: the next one's estimate */
};

/* Announces every batch up to g + window not announced yet (any thread may
 * take any of them) while the policy's hint log has room for it: samples
 * it into the scratch batch and hints its nodes. Each announcement takes a batch number from hint_next, so hints
 * of several threads interleave a little; the policy copes. */
static void hint_ahead(struct srun *r, struct sampler *s, struct hinter *h, uint64_t g, uint64_t total)
{
    struct stage *st = r->st;
    char msg[1024];
    for (;;) {
        uint64_t k = atomic_load(&r->hint_next);
        if (k > g + r->window || k >= total)
            return;
        if (k < g) { /* announcing fell behind (the log was full): batches sampled already may be extracted too */
            atomic_compare_exchange_weak(&r->hint_next, &k, g);
            continue;
        }
        /* the memory budget: announce only what the hint log has room for
         * (a batch like the last one, and a quarter more); the rest of the
         * window waits until extraction frees records */
        if (featbuf_lookahead_room(&st->fb) < (uint64_t)h->last_nodes * 5 / 4)
            return;
        if (!atomic_compare_exchange_weak(&r->hint_next, &k, k + 1))
            continue;
        struct schedule_batch sb;
        if (schedule_batch(&h->cur, k, &sb, msg, sizeof msg) != 0)
            stage_fail(st, "%s", msg);
        uint64_t t0 = sl_now_ns(), edges;
        struct batch_id id = {.batch = k, .epoch = sb.pos.epoch, .rank = (uint32_t)st->args.rank,
                              .split = sb.pos.split};
        struct batch_view v;
        if (sampler_sample(s, h->mem, h->size, sb.targets, sb.pos.targets, &id, sb.seed, &edges, msg, sizeof msg) ||
            batch_view(h->mem, h->size, BATCH_VIEW_HEADER_ONLY, &v, msg, sizeof msg))
            stage_fail(st, "announcing batch %" PRIu64 " (epoch %" PRIu32 "): %s", k, sb.pos.epoch, msg);
        h->last_nodes = batch_nodes(&v);
        int rc = featbuf_hint(&st->fb, k, v.nodes, batch_nodes(&v));
        metrics_add(&st->block->busy_ns, sl_now_ns() - t0);
        if (rc == -EPIPE) { /* the run is stopping */
            atomic_store(&r->stop, true);
            return;
        }
        if (rc)
            stage_fail(st, "announcing batch %" PRIu64 " to the feature buffer: %s", k, strerror(-rc));
    }
}

/* A packed run's sampler thread: batch g's image is read from its chunk
 * in the pack (stages/pack.h) and placed in the slot as batch g; the
 * order, the ordered pushes and the stop protocol are the online
 * thread's. */
static void *packed_thread(void *arg)
{
    struct srun *r = arg;
    struct stage *st = r->st;
    char msg[1024];
    uint32_t rank = (uint32_t)st->args.rank, grank = run_global_rank(&st->args);
    uint64_t total = schedule_len(&r->sched);
    size_t cap = (size_t)pack_round(st->arena.slot_size);
    unsigned char *buf = aligned_alloc(PACK_ALIGN, cap);
    if (!buf)
        stage_fail(st, "no memory for a %zu-byte packed batch", cap);
    while (!atomic_load(&r->stop)) {
        uint64_t g = atomic_fetch_add(&r->next, 1);
        if (g >= total)
            break;
        struct schedule_pos p;
        schedule_at(&r->sched, g, &p);
        const struct pack_entry *e = pack_find(&r->pack, grank, p.epoch, p.split, p.k);
        if (!e)
            stage_fail(st, "batch %" PRIu64 " (epoch %" PRIu32 ") is not in %s", g, p.epoch, r->pack.dir);
        if (pack_round(e->batch_bytes) > cap)
            stage_fail(st, "packed batch %" PRIu64 " holds %" PRIu64 " bytes, more than an arena slot (%zu); the pack "
                       "was made for another shape", g, e->batch_bytes, st->arena.slot_size);
        uint32_t slot;
        if (stage_alloc(st, &slot) != 0)
            break;
        uint64_t t0 = sl_now_ns();
        metrics_busy_begin(st->block, t0);
        void *mem = arena_slot(&st->arena, slot);
        if (pack_read_image(&r->pack, e, buf, msg, sizeof msg) != 0 ||
            pack_place_batch(e, buf, mem, st->arena.slot_size, g, rank, msg, sizeof msg) != 0)
            stage_fail(st, "batch %" PRIu64 " (epoch %" PRIu32 "): %s", g, p.epoch, msg);
        const struct batch_hdr *h = mem;
        uint64_t edges = 0;
        for (uint32_t k = 0; k < h->layers; k++)
            edges += h->e[k];
        metrics_busy_end(st->block, t0, sl_now_ns() - t0);
        metrics_add(&st->block->bytes, pack_round(e->batch_bytes));
        metrics_add(&st->block->io_ops, 1);
        struct run_desc d = {.batch = g, .slot = slot, .epoch = p.epoch, .aux = {edges, p.split}};
        stage_trace(st, g, p.split, t0, sl_now_ns());
        if ((r->ordered && stage_turn_wait(st, &r->turn, g) != 0) || stage_push(st, &d) != 0) {
            arena_release(&st->arena, slot);
            atomic_store(&r->stop, true);
            stage_turn_abort(&r->turn);
            break;
        }
        if (r->ordered)
            stage_turn_done(&r->turn, g);
        metrics_add(&st->block->items, 1);
    }
    free(buf);
    return NULL;
}

static void *stage_thread(void *arg)
{
    struct srun *r = arg;
    struct stage *st = r->st;
    char msg[1024];
    struct sampler s;
    struct batch_shape shape = st->plan.shape;
    if (sampler_init(&s, &r->topo, &shape, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    struct schedule_cursor cur; /* its schedule is the global rank's: what the batch holds (targets, seeds) */
    schedule_cursor_init(&cur, &r->sched, 0);
    uint32_t rank = (uint32_t)st->args.rank; /* in the batch header: the node's rank that owns the arena */
    uint64_t total = schedule_len(&r->sched);
    struct hinter h = {0};
    if (r->window) {
        schedule_cursor_init(&h.cur, &r->sched, 0);
        h.size = (size_t)sl_round_up(s.plan.max_bytes, 64);
        h.mem = aligned_alloc(64, h.size);
        if (!h.mem)
            stage_fail(st, "no memory for a %zu-byte lookahead batch", h.size);
    }
    /* CACHE: the thread takes its next batch number before it samples the
     * current one and has that batch's targets' lists read meanwhile
     * (sampler_prefetch); batch numbers are still taken in order, so the
     * lowest one outstanding is always some thread's current batch (what
     * pipeline.ordered waits for) */
    bool ahead = s.pre != NULL;
    struct schedule_cursor ncur;
    if (ahead)
        schedule_cursor_init(&ncur, &r->sched, 0);
    uint64_t gnext = UINT64_MAX; /* the next batch number taken already, if any */
    /* the partition mode: the thread's own copy of which partitions are in the buffer in the state of its batch */
    uint8_t *part_in = NULL;
    struct sampler_filter filt = {0};
    uint32_t f_epoch = UINT32_MAX, f_state = PO_EMPTY; /* what part_in holds; PO_EMPTY: the filter is off */
    if (r->partitioned) {
        const struct parts_meta *pm = schedule_partitions_meta(&r->sched);
        if (!(part_in = calloc(pm->parts, 1)))
            stage_fail(st, "out of memory");
        filt = (struct sampler_filter){.node_pos = r->node_pos, .pos_u64 = r->pos_u64, .part_nodes = pm->part_nodes,
                                       .parts = pm->parts, .part_in = part_in};
    }
    while (!atomic_load(&r->stop)) {
        uint64_t g = gnext != UINT64_MAX ? gnext : atomic_fetch_add(&r->next, 1);
        gnext = UINT64_MAX;
        if (g >= total)
            break;
        if (ahead)
            gnext = atomic_fetch_add(&r->next, 1);
        if (ahead && gnext < total) {
            struct schedule_batch nb;
            if (schedule_batch(&ncur, gnext, &nb, msg, sizeof msg) != 0 ||
                sampler_prefetch(&s, nb.targets, nb.pos.targets, msg, sizeof msg) != 0)
                stage_fail(st, "batch %" PRIu64 ": %s", gnext, msg);
        }
        if (r->window)
            hint_ahead(r, &s, &h, g, total);
        struct schedule_batch sb;
        if (schedule_batch(&cur, g, &sb, msg, sizeof msg) != 0)
            stage_fail(st, "%s", msg);
        const struct schedule_pos *p = &sb.pos;
        if (r->partitioned) { /* follow the batch's buffer state; PO_EMPTY (evaluation on the whole graph): no filter */
            uint32_t bs = schedule_partitions_state(&r->sched, p);
            if (bs != f_state || (bs != PO_EMPTY && p->epoch != f_epoch)) {
                if (bs != PO_EMPTY) {
                    const struct po_plan *pl = &r->plans[p->epoch];
                    memset(part_in, 0, filt.parts);
                    for (uint32_t j = 0; j < pl->slots; j++)
                        if (po_slot(pl, bs, j) != PO_EMPTY)
                            part_in[po_slot(pl, bs, j)] = 1;
                }
                if ((bs == PO_EMPTY) != (f_state == PO_EMPTY) &&
                    sampler_set_filter(&s, bs == PO_EMPTY ? NULL : &filt, msg, sizeof msg) != 0)
                    stage_fail(st, "%s", msg);
                f_state = bs;
                f_epoch = p->epoch;
            }
        }
        uint32_t slot;
        if (stage_alloc(st, &slot) != 0)
            break;
        uint64_t t0 = sl_now_ns(), edges;
        metrics_busy_begin(st->block, t0);
        struct batch_id id = {.batch = g, .epoch = p->epoch, .rank = rank, .split = p->split};
        void *mem = arena_slot(&st->arena, slot);
        if (sampler_sample(&s, mem, st->arena.slot_size, sb.targets, p->targets, &id, sb.seed, &edges, msg,
                           sizeof msg) != 0)
            stage_fail(st, "batch %" PRIu64 " (epoch %" PRIu32 "): %s", g, p->epoch, msg);
        metrics_busy_end(st->block, t0, sl_now_ns() - t0);
        metrics_add(&st->block->bytes, ((const struct batch_hdr *)mem)->bytes);
        struct run_desc d = {.batch = g, .slot = slot, .epoch = p->epoch, .aux = {edges, p->split}};
        stage_trace(st, g, p->split, t0, sl_now_ns());
        if ((r->ordered && stage_turn_wait(st, &r->turn, g) != 0) || stage_push(st, &d) != 0) {
            arena_release(&st->arena, slot); /* never entered the pipeline */
            atomic_store(&r->stop, true);
            stage_turn_abort(&r->turn);
            break;
        }
        if (r->ordered)
            stage_turn_done(&r->turn, g);
        metrics_add(&st->block->items, 1);
    }
    if (r->window) {
        free(h.mem);
        schedule_cursor_free(&h.cur);
    }
    atomic_fetch_add(&r->lists_read, s.lists_read);
    atomic_fetch_add(&r->bytes_read, s.bytes_read);
    atomic_fetch_add(&r->lists_prefetched, s.lists_prefetched);
    if (ahead)
        schedule_cursor_free(&ncur);
    schedule_cursor_free(&cur);
    sampler_free(&s);
    free(part_in);
    return NULL;
}

static int stage_main(int argc, char **argv)
{
    static struct stage st;
    static struct srun r;
    char msg[1024];
    stage_open(&st, argc, argv, STAGE_HINTS_FEATBUF);
    r.st = &st;
    const char *dir = st.cfg.dataset.path;
    /* gnnlaunch resolved "auto" (launcher/memfit.h); a stage started without it reads into memory */
    struct sampler_topo_opts to = {.mode = SAMPLER_TOPO_MEMORY,
                                   .cache_bytes = (uint64_t)st.cfg.pipeline.neighbour_cache_mb << 20,
                                   .buffered = st.cfg.pipeline.io == EXTRACT_IO_BUFFERED,
                                   .shm_run = st.args.ranks > 1 ? st.args.run_id : NULL}; /* one copy per node */
    if (st.cfg.pipeline.topology == TOPOLOGY_MMAP)
        to.mode = SAMPLER_TOPO_MMAP;
    else if (st.cfg.pipeline.topology == TOPOLOGY_CACHE)
        to.mode = SAMPLER_TOPO_CACHE;
    r.packed = st.cfg.pipeline.mode == PIPELINE_PACKED && !st.args.predict;
    stage_schedule(&st, &r.sched); /* global rank and world (layout.h) */
    if (r.packed) { /* no topology, no targets: the pack has the batches (gnnlaunch checked it covers the run) */
        if (pack_open(&r.pack, st.cfg.pipeline.pack, st.cfg.pipeline.io == EXTRACT_IO_BUFFERED, msg, sizeof msg) != 0 ||
            pack_check(&r.pack, &st.cfg, run_world(&st.args), &st.meta, msg, sizeof msg) != 0)
            stage_fail(&st, "pipeline.pack: %s", msg);
    } else {
        uint64_t t0 = sl_now_ns();
        if (sampler_topo_open_mode(&r.topo, dir, &st.meta, &to, msg, sizeof msg) != 0)
            stage_fail(&st, "%s", msg);
        stage_trace_phase(&st, RUN_PHASE_TOPOLOGY, t0, sl_now_ns());
        topo_describe(&r.topo, msg, sizeof msg);
        stage_note(&st, "%s", msg);
        if ((st.args.predict ? schedule_load_predict(&r.sched, dir, &st.meta, st.args.predict, msg, sizeof msg)
                             : schedule_load(&r.sched, dir, &st.meta, msg, sizeof msg)) != 0)
            stage_fail(&st, "%s", msg);
    }
    r.ordered = st.cfg.pipeline.ordered;
    r.partitioned = st.cfg.pipeline.mode == PIPELINE_PARTITIONS && !st.args.predict;
    if (r.partitioned) {
        /* Batches enter the extract queue in batch order: the extractor
         * switches the buffer to a state only once every batch of the
         * state before is extracted, and a queue holding the next state's
         * batches ahead of one of the state before could never drain. */
        r.ordered = true;
        if (schedule_partitions_node_pos(&r.sched, &r.node_pos, &r.pos_u64, msg, sizeof msg) != 0)
            stage_fail(&st, "%s", msg);
        if (!(r.plans = calloc(r.sched.p.epochs, sizeof *r.plans)))
            stage_fail(&st, "out of memory");
        for (uint32_t e = 0; e < r.sched.p.epochs; e++)
            if (schedule_partitions_plan(&r.sched, e, &r.plans[e], msg, sizeof msg) != 0)
                stage_fail(&st, "%s", msg);
        const struct parts_meta *pm = schedule_partitions_meta(&r.sched);
        stage_note(&st, "partitions: training batches sampled among the nodes of their buffer state's %" PRIu64
                   " partitions of %" PRIu32 " (%s); evaluation batches %s",
                   (uint64_t)r.plans[0].slots, pm->parts, schedule_partitions_dir(&r.sched),
                   schedule_partitions_eval_in_buffer(&r.sched) ? "likewise, in the epoch's state" : "on the whole graph");
    }
    /* resumed runs start at the first batch of the first epoch not in the checkpoint */
    uint64_t first = schedule_epoch_start(&r.sched, st.args.start_epoch);
    atomic_store(&r.next, first);
    atomic_store(&r.hint_next, first);
    stage_turn_init(&r.turn, first);
    if (!r.packed && st.has_fb && st.fb.policy == &featbuf_policy_lookahead) { /* auto may have made it lru */
        r.window = (uint64_t)st.cfg.pipeline.lookahead;
        uint32_t win = featbuf_policy_window(&st.fb);
        uint64_t rows = featbuf_policy_entries(&st.fb);
        stage_note(&st,
                   "lookahead: announcing %" PRIu64 " batches ahead to the feature buffer's %s policy (window %" PRIu32
                   ", hint log %" PRIu64 " rows = %.1f MiB + node table %.1f MiB in the buffer; one %.1f MiB "
                   "scratch batch per thread)",
                   r.window, st.fb.policy->name, win, rows, (double)rows * 12 / (1 << 20),
                   (double)st.fb.n_nodes * 4 / (1 << 20), (double)st.plan.batch.max_bytes / (1 << 20));
    }
    int nthreads = (int)st.cfg.pipeline.samplers;
    uint32_t last = r.sched.p.epochs - 1; /* evaluates and tests */
    stage_note(&st,
               "%" PRIu64 " batches: %" PRIu64 " training targets (%" PRIu64 " batches) x %" PRIu32
               " epochs, %" PRIu64 " validation and %" PRIu64 " test targets; %d thread%s%s",
               schedule_len(&r.sched), schedule_pass_targets(&r.sched, 0, BATCH_TRAIN),
               schedule_pass_batches(&r.sched, 0, BATCH_TRAIN), r.sched.p.epochs,
               schedule_pass_targets(&r.sched, last, BATCH_VAL), schedule_pass_targets(&r.sched, last, BATCH_TEST),
               nthreads, nthreads == 1 ? "" : "s", r.ordered ? ", in order" : "");
    pthread_t *t = calloc((size_t)nthreads, sizeof *t);
    if (!t)
        stage_fail(&st, "out of memory");
    stage_ready(&st);
    for (int i = 0; i < nthreads; i++) {
        int rc = pthread_create(&t[i], NULL, r.packed ? packed_thread : stage_thread, &r);
        if (rc)
            stage_fail(&st, "cannot start sampler thread %d: %s", i, strerror(rc));
    }
    for (int i = 0; i < nthreads; i++)
        pthread_join(t[i], NULL);
    stage_end_output(&st);
    if (r.topo.mode == SAMPLER_TOPO_CACHE) {
        char b[32];
        uint64_t n = atomic_load(&r.lists_read);
        stage_note(&st, "topology cache: %" PRIu64 " in-neighbour lists read directly, %s; %" PRIu64
                   " of them targets' lists read ahead, while the batch before was sampled", n,
                   sl_fmt_bytes(atomic_load(&r.bytes_read), b, sizeof b), atomic_load(&r.lists_prefetched));
    }
    free(t);
    stage_turn_destroy(&r.turn);
    if (r.partitioned) {
        for (uint32_t e = 0; e < r.sched.p.epochs; e++)
            po_plan_free(&r.plans[e]);
        free(r.plans);
        free(r.node_pos);
    }
    schedule_free(&r.sched);
    if (r.packed)
        pack_free(&r.pack);
    else
        sampler_topo_free(&r.topo);
    stage_close(&st);
    return 0;
}

int main(int argc, char **argv)
{
    if (!stage_bench_mode(argc, argv))
        return stage_main(argc, argv);
    char dir[4096] = "", fan_arg[256] = "10,10,10";
    struct batch_shape shape = {.batch_size = 1024};
    uint64_t threads = 1, seed = 0, cache_mb = 0, round_reads = 0;
    double seconds = 10;
    bool help = false, buffered = false, no_prefetch = false;
    char topo_arg[16] = "mmap";
    const struct opt opts[] = {
        {.name = "--bench", .kind = OPT_STR, .dst = dir, .len = sizeof dir},
        {.name = "--fanouts", .kind = OPT_STR, .dst = fan_arg, .len = sizeof fan_arg},
        {.name = "--batch-size", .kind = OPT_UINT, .dst = &shape.batch_size, .lo = 1, .hi = BATCH_COUNT_MAX},
        {.name = "--threads", .kind = OPT_UINT, .dst = &threads, .lo = 1, .hi = 1024},
        {.name = "--seconds", .kind = OPT_DOUBLE, .dst = &seconds, .lo = 0, .hi = 86400},
        {.name = "--seed", .kind = OPT_UINT, .dst = &seed, .lo = 0, .hi = (int64_t)UINT64_MAX},
        {.name = "--topology", .kind = OPT_STR, .dst = topo_arg, .len = sizeof topo_arg},
        {.name = "--cache-mb", .kind = OPT_UINT, .dst = &cache_mb, .lo = 1, .hi = (int64_t)1 << 40},
        {.name = "--buffered", .kind = OPT_FLAG, .dst = &buffered},
        {.name = "--no-prefetch", .kind = OPT_FLAG, .dst = &no_prefetch},
        {.name = "--round-reads", .kind = OPT_UINT, .dst = &round_reads, .lo = 1, .hi = UINT32_MAX},
        {.name = "--help", .kind = OPT_FLAG, .dst = &help},
    };
    int rc = opt_main("gnn-sampler", opts, (int)SL_ARRAY_LEN(opts), argc, argv, NULL, &help, usage);
    if (rc >= 0)
        return rc;
    if (!dir[0]) {
        usage(stderr);
        return 2;
    }
    if (parse_fanouts(fan_arg, &shape)) {
        fprintf(stderr, "gnn-sampler: --fanouts wants 1..%d comma-separated integers >= -1, not '%s'\n",
                MODEL_LAYERS_MAX, fan_arg);
        return 2;
    }
    struct sampler_topo_opts to = {.cache_bytes = cache_mb << 20, .buffered = buffered, .round_reads = (uint32_t)round_reads};
    if (!strcmp(topo_arg, "mmap"))
        to.mode = SAMPLER_TOPO_MMAP;
    else if (!strcmp(topo_arg, "memory"))
        to.mode = SAMPLER_TOPO_MEMORY;
    else if (!strcmp(topo_arg, "cache"))
        to.mode = SAMPLER_TOPO_CACHE;
    else {
        fprintf(stderr, "gnn-sampler: --topology wants mmap, memory or cache, not '%s'\n", topo_arg);
        return 2;
    }
    if (to.mode == SAMPLER_TOPO_CACHE && !cache_mb) {
        fprintf(stderr, "gnn-sampler: --topology cache needs --cache-mb MB (the neighbour cache's budget)\n");
        return 2;
    }
    return bench_main(dir, &shape, threads, seconds, seed, fan_arg, &to, !no_prefetch);
}
