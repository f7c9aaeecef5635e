/* extractor_main.c - gnn-extractor: the extraction stage of a run
 * (started by gnnlaunch) and, with --bench, the stage-only benchmark
 * (stages/extract_bench.c).
 *
 * Stage. pipeline.extractors threads, each with its own engine (one
 * io_uring, its part of the staging buffer; stages/extract.h), pop batch
 * descriptors from the extract queue, read the features of every node of
 * the batch into the rank's feature buffer (taking one reference per node),
 * write the slots into the batch's alias[], mark it aliased and push the
 * descriptor into the train queue. With pipeline.ordered the pushes happen
 * in batch-number order (the sampler's stream is 0, 1, 2, ... in order
 * too), so the trainer sees the sampling order. Reads land in the node's
 * staging buffer (/sluice.<run>.staging, ipc/staging.h), which the
 * launcher sized: each thread has a portion of its own and borrows blocks
 * of idle threads and ranks when it has more reads to keep in flight than
 * its portion holds (announced once when a portion holds fewer than
 * pipeline.io_depth reads). On a GPU rank (the feature buffer keeps its
 * rows on the device) the process first opens the trainer's device rows
 * (extractor_use_device, waiting until the trainer has published them)
 * and every thread's engine copies rows there with the CUDA row sink; the
 * rows are closed again after the last engine is freed. I/O errors fail
 * the stage (exit 3) naming the node, the file offset and the errno; a
 * closed queue or a broken feature buffer (the run is stopping) ends it
 * quietly. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ipc/staging.h"
#include "stages/cachesim.h"
#include "stages/extract.h"
#include "stages/featbuf_cuda.h"
#include "stages/pack_rows.h"
#include "stages/partbuf.h"
#include "stages/schedule.h"
#include "stages/schedule_partitions.h"
#include "stages/stage.h"
#include "stages/warm.h"

int extract_bench_main(int argc, char **argv); /* extract_bench.c */

struct xrun {
    struct stage *st;
    struct extract_source src;
    struct staging stg;
    struct featbuf_cuda dev; /* a GPU rank's device rows, opened in this process */
    struct rowtrace trace;   /* pipeline.trace_rows, or f NULL */
    unsigned depth;
    bool ordered;
    struct stage_turn turn;
    atomic_bool stop;
    pthread_t warm_tid; /* the warm start's pass, when it runs */
    bool warm;
    uint64_t *hot, nhot; /* the static policies' pinned hot set (sorted ids): the pass's rows when not all fit */
    /* pipeline.mode = "packed": rows come from the pack's chunks and hot tier (pack_rows.h) */
    bool packed;
    struct pack_rows pr;
    struct schedule sched; /* the run's, for pr */
    atomic_uint_fast64_t chunk_reads, chunk_bytes, chunk_ns; /* the threads' chunk reads, summed as they end */
    atomic_uint_fast64_t cache_reads, cache_bytes, cache_ns; /* of them, the cache tier's extents */
    /* pipeline.mode = "partitions": training batches' rows come from the
     * partition buffer, which the owner thread moves through the buffer
     * states (the protocol: partitions_owner) */
    bool partitioned;
    struct partbuf pb;
    struct schedule psched;       /* the run's partitions schedule */
    void *node_pos;               /* the layout's node_pos.bin */
    bool pos_u64;
    struct po_plan *plans;        /* (epochs) */
    uint64_t **left0;             /* (epochs)(states) training batches of each state */
    pthread_t owner;
    bool owner_started;
    pthread_mutex_t gmu;
    pthread_cond_t gcv;
    uint32_t g_epoch, g_state;    /* the state in the buffer for batches (g_state PO_EMPTY: none yet) */
    uint64_t g_left;              /* its batches not yet extracted */
    bool g_closing;               /* the threads are gone: batches still counted will not come (under gmu) */
};

static uint64_t node_position(const struct xrun *r, uint64_t v)
{
    return r->pos_u64 ? ((const uint64_t *)r->node_pos)[v] : ((const uint32_t *)r->node_pos)[v];
}

static int idle(void *arg)
{
    struct xrun *r = arg;
    stage_heartbeat(r->st);
    return atomic_load(&r->stop) ? -EPIPE : 0;
}

/* The CUDA device this rank was given (gnnlaunch --gpus: --device), the
 * one its trainer exported the feature rows on; -1 (EXTRACT_DEVICE_ANY)
 * for a CPU rank, which never asks. */
static int rank_device(const struct stage *st)
{
    return st->args.device;
}

struct xthread {
    struct xrun *r;
    int index; /* this thread's place among the rank's extractor threads: its staging portion */
    pthread_t tid;
    struct extract_stats st;
    /* the batch under way, for publishing its progress as it reads (tick) */
    uint64_t t0;                 /* when it was taken */
    struct extract_stats before; /* the engine's counters then */
    struct extract_stats pub;    /* ... as last published to the metrics page */
    uint64_t busy_pub;           /* its busy nanoseconds published so far */
};

/* Publishes what the batch under way did since the last call to the
 * stage's metrics page (gnnstat, the epoch lines): busy and wait time,
 * bytes, reads and retries. Busy is the batch's time so far less its
 * waits; tick runs only between waits, and the final call after the
 * last, so it never goes back. */
static void publish(struct xthread *t, const struct extract_stats *now_st, uint64_t now)
{
    struct metrics_block *b = t->r->st->block;
    uint64_t waited = now_st->wait_ns - t->before.wait_ns, spent = now - t->t0;
    uint64_t busy = spent > waited ? spent - waited : 0;
    if (busy > t->busy_pub) {
        metrics_add(&b->busy_ns, busy - t->busy_pub);
        t->busy_pub = busy;
    }
    metrics_add(&b->wait_ns, now_st->wait_ns - t->pub.wait_ns);
    metrics_add(&b->bytes, now_st->io_bytes - t->pub.io_bytes);
    metrics_add(&b->io_ops, now_st->io_ops - t->pub.io_ops);
    metrics_add(&b->errors, now_st->retries - t->pub.retries);
    t->pub = *now_st;
}

/* The engine's tick (extract.h): a batch that reads for seconds keeps the
 * stage's heartbeat and counters live, and stops early when the run does. */
static int tick(void *arg, const struct extractor *x)
{
    struct xthread *t = arg;
    stage_heartbeat(t->r->st);
    publish(t, &x->st, sl_now_ns());
    return atomic_load(&t->r->stop) ? -EPIPE : 0;
}

static void stop_all(struct xrun *r)
{
    atomic_store(&r->stop, true);
    stage_turn_abort(&r->turn);
}

/* ---- the partition mode's buffer states ----
 * Protocol. One owner thread moves the partition buffer through every
 * state of every epoch in order (those that train no batch too, so that
 * it reads what the plan counts): partbuf_switch to the state, prefetch
 * of the next one (the next epoch's first after an epoch's last), then it
 * publishes the state with the count of its batches (training ones, and
 * the epoch's evaluation batches when they are evaluated inside the state:
 * pipeline.partition_eval) and waits until the extractor threads have
 * extracted them all. A thread with a batch of state (e, s) waits until
 * (e, s) is published, copies the batch's rows out of the buffer into the
 * feature buffer (extractor_run_rows: no disk read) and counts it off; the rows it copied
 * live on in the feature buffer, so the buffer may drop the state as soon
 * as the count reaches zero, whatever the trainer does next. The sampler
 * pushes in batch order (sampler_main.c), so every batch of (e, s) is in
 * the extract queue before any of the next state: threads waiting on the
 * next state never keep a batch of this one from being popped.
 * Evaluation batches on the whole graph (no state) are extracted from
 * features.bin as in the online mode and never wait. */
static int partitions_wait(struct xrun *r, uint32_t epoch, uint32_t state)
{
    pthread_mutex_lock(&r->gmu);
    while (!(r->g_state == state && r->g_epoch == epoch) && !atomic_load(&r->stop)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&r->gcv, &r->gmu, &ts);
        pthread_mutex_unlock(&r->gmu);
        stage_heartbeat(r->st);
        pthread_mutex_lock(&r->gmu);
    }
    pthread_mutex_unlock(&r->gmu);
    return atomic_load(&r->stop) ? -EPIPE : 0;
}

static void partitions_done(struct xrun *r)
{
    pthread_mutex_lock(&r->gmu);
    if (--r->g_left == 0)
        pthread_cond_broadcast(&r->gcv);
    pthread_mutex_unlock(&r->gmu);
}

static void *partitions_owner(void *arg)
{
    struct xrun *r = arg;
    struct stage *st = r->st;
    char msg[1024];
    uint32_t epochs = r->psched.p.epochs;
    struct partbuf_stats seen = {0};
    for (uint32_t e = st->args.start_epoch; e < epochs && !atomic_load(&r->stop); e++) {
        const struct po_plan *pl = &r->plans[e];
        for (uint32_t s = 0; s < pl->states && !atomic_load(&r->stop); s++) {
            if (partbuf_switch(&r->pb, pl, s, msg, sizeof msg) != 0)
                stage_fail(st, "epoch %" PRIu32 ", buffer state %" PRIu32 ": %s", e, s, msg);
            int rc = 0;
            if (s + 1 < pl->states)
                rc = partbuf_prefetch(&r->pb, pl, s + 1, msg, sizeof msg);
            else if (e + 1 < epochs)
                rc = partbuf_prefetch(&r->pb, &r->plans[e + 1], 0, msg, sizeof msg);
            if (rc)
                stage_fail(st, "epoch %" PRIu32 ", prefetching after buffer state %" PRIu32 ": %s", e, s, msg);
            struct partbuf_stats ps; /* the partitions' reads count as the extractor's (the epoch lines) */
            partbuf_stats(&r->pb, &ps);
            metrics_add(&st->block->bytes, ps.bytes - seen.bytes);
            metrics_add(&st->block->io_ops, ps.reads - seen.reads);
            seen = ps;
            pthread_mutex_lock(&r->gmu);
            r->g_epoch = e;
            r->g_state = s;
            r->g_left = r->left0[e][s];
            pthread_cond_broadcast(&r->gcv);
            while (r->g_left > 0 && !atomic_load(&r->stop) && !r->g_closing) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                ts.tv_sec += 1;
                pthread_cond_timedwait(&r->gcv, &r->gmu, &ts);
            }
            bool cut = r->g_left > 0; /* the run ended early (stopped, early stopping): no more states */
            pthread_mutex_unlock(&r->gmu);
            if (cut)
                return NULL;
        }
    }
    return NULL;
}

/* Opens the partition mode's side: the schedule (its plans and the count
 * of each state's training batches), node_pos.bin, the buffer (a segment
 * of the run: /sluice.<run>.partbuf) and its owner thread. */
static void partitions_open(struct xrun *r)
{
    struct stage *st = r->st;
    char msg[1024];
    stage_schedule(st, &r->psched);
    if (schedule_load(&r->psched, st->cfg.dataset.path, &st->meta, msg, sizeof msg) != 0 ||
        schedule_partitions_node_pos(&r->psched, &r->node_pos, &r->pos_u64, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    uint32_t epochs = r->psched.p.epochs, spare = 0;
    const struct parts_meta *pm = schedule_partitions_meta(&r->psched);
    r->plans = calloc(epochs, sizeof *r->plans);
    r->left0 = calloc(epochs, sizeof *r->left0);
    if (!r->plans || !r->left0)
        stage_fail(st, "out of memory");
    for (uint32_t e = 0; e < epochs; e++) {
        if (schedule_partitions_plan(&r->psched, e, &r->plans[e], msg, sizeof msg) != 0)
            stage_fail(st, "%s", msg);
        spare = SL_MAX(spare, r->plans[e].single ? 0 : r->plans[e].group);
        if (!(r->left0[e] = calloc(r->plans[e].states, sizeof **r->left0)))
            stage_fail(st, "out of memory");
        uint64_t g0 = schedule_epoch_start(&r->psched, e), nb = 0;
        for (int k = 0; k < BATCH_SPLITS; k++)
            nb += schedule_pass_batches(&r->psched, e, (uint32_t)k);
        for (uint64_t g = g0; g < g0 + nb; g++) { /* training, then evaluation inside the state (if so) */
            struct schedule_pos p;
            schedule_at(&r->psched, g, &p);
            uint32_t s = schedule_partitions_state(&r->psched, &p);
            if (s == PO_EMPTY && p.split != BATCH_TRAIN)
                continue; /* evaluated on the whole graph */
            if (s >= r->plans[e].states)
                stage_fail(st, "batch %" PRIu64 " of epoch %" PRIu32 " is in buffer state %" PRIu32 " of %" PRIu32, g, e,
                           s, r->plans[e].states);
            r->left0[e][s]++;
        }
    }
    struct partbuf_params bp = {.run_id = st->args.run_id, .slots = r->plans[0].slots, .spare = spare,
                                .buffered = st->cfg.pipeline.io == EXTRACT_IO_BUFFERED};
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", schedule_partitions_dir(&r->psched));
    if (partbuf_init(&r->pb, dir, pm, &bp, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&r->gmu, NULL);
    pthread_cond_init(&r->gcv, &ca);
    pthread_condattr_destroy(&ca);
    r->g_state = PO_EMPTY;
    r->g_epoch = UINT32_MAX;
    int rc = pthread_create(&r->owner, NULL, partitions_owner, r);
    if (rc)
        stage_fail(st, "cannot start the partition buffer's thread: %s", strerror(rc));
    r->owner_started = true;
    stage_note(st, "partitions: buffer of %" PRIu32 " + %" PRIu32 " spare frames of %.1f MiB (%s, %s reads of %.1f MiB, "
               "%u in flight%s); %s rows are copied out of it",
               r->pb.slots, r->pb.frames - r->pb.slots, (double)r->pb.frame_bytes / (1 << 20), dir,
               r->pb.direct ? "direct" : "buffered", (double)r->pb.read_bytes / (1 << 20), r->pb.depth,
               r->pb.uring ? ", io_uring" : "",
               schedule_partitions_eval_in_buffer(&r->psched) ? "training and evaluation" : "training");
}

/* Joins the owner, reports what the buffer read, frees the mode's side. */
static void partitions_close(struct xrun *r)
{
    struct stage *st = r->st;
    if (r->owner_started) {
        /* the extractor threads are gone: the owner finishes the states
         * whose batches were all extracted (the trailing ones that train
         * nothing too) and stops at one that still waits for batches
         * (the run stopped or stopped early) */
        pthread_mutex_lock(&r->gmu);
        r->g_closing = true;
        pthread_cond_broadcast(&r->gcv);
        pthread_mutex_unlock(&r->gmu);
        pthread_join(r->owner, NULL);
    }
    struct partbuf_stats ps;
    partbuf_stats(&r->pb, &ps);
    if (!atomic_load(&r->stop))
        stage_note(st,
                   "partitions: read %" PRIu64 " partitions, %.1f MiB in %" PRIu64 " requests (%.2f MiB each), %.2f s "
                   "reading; switches waited %.2f s for reads",
                   ps.loads, (double)ps.bytes / (1 << 20), ps.reads,
                   ps.reads ? (double)ps.bytes / (double)ps.reads / (1 << 20) : 0.0, (double)ps.read_ns / 1e9,
                   (double)ps.wait_ns / 1e9);
    partbuf_free(&r->pb);
    for (uint32_t e = 0; r->plans && e < r->psched.p.epochs; e++) {
        po_plan_free(&r->plans[e]);
        if (r->left0)
            free(r->left0[e]);
    }
    free(r->plans);
    free(r->left0);
    free(r->node_pos);
    schedule_free(&r->psched);
    if (r->owner_started) {
        pthread_cond_destroy(&r->gcv);
        pthread_mutex_destroy(&r->gmu);
    }
}

static void *thread_main(void *arg)
{
    struct xthread *t = arg;
    struct xrun *r = t->r;
    struct stage *st = r->st;
    char msg[1024];
    struct extractor x;
    uint32_t portion = staging_portion_of(&r->stg, st->args.rank, t->index);
    if (extractor_init_shared(&x, &r->src, &st->fb, r->depth, &r->stg, portion, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    x.idle = idle;
    x.idle_arg = r;
    x.tick = tick;
    x.tick_arg = t;
    /* SLUICE_PACK_OVERLAP=1: a batch's chunk read beside its cache extents (pack_rows.h; no faster on the
     * disk measured, docs/packed.md) */
    struct pack_rows_buf pb = {.overlap = sl_env_on("SLUICE_PACK_OVERLAP")};
    const void **prows = NULL; /* the partition mode: each node's row in the buffer */
    uint32_t prows_cap = 0;
    struct run_desc d;
    while (!atomic_load(&r->stop) && stage_pop(st, &d) == 0) {
        uint64_t t0 = sl_now_ns();
        t->t0 = x.tick_ns = t0;
        t->before = t->pub = x.st;
        t->busy_pub = 0;
        struct batch_view v;
        stage_view(st, &d, BATCH_VIEW_HEADER_ONLY, &v);
        uint32_t n = batch_nodes(&v);
        if (r->trace.f && rowtrace_add(&r->trace, d.batch, v.nodes, n) != 0)
            stage_fail(st, "pipeline.trace_rows: writing %s failed: %s", r->trace.path, strerror(-r->trace.rc));
        x.batch = d.batch;
        int rc;
        struct schedule_pos sp;
        uint32_t pstate = PO_EMPTY;
        if (r->partitioned) {
            schedule_at(&r->psched, d.batch, &sp);
            pstate = schedule_partitions_state(&r->psched, &sp);
        }
        if (pstate != PO_EMPTY) { /* a batch of a buffer state: its rows from the buffer */
            if (partitions_wait(r, sp.epoch, pstate) != 0) {
                stop_all(r);
                break;
            }
            if (n > prows_cap) {
                free(prows);
                prows_cap = n;
                if (!(prows = malloc(prows_cap * sizeof *prows)))
                    stage_fail(st, "out of memory");
            }
            for (uint32_t i = 0; i < n; i++)
                if (!(prows[i] = partbuf_row(&r->pb, node_position(r, v.nodes[i]))))
                    stage_fail(st, "batch %" PRIu64 " (epoch %" PRIu32 ", buffer state %" PRIu32 "): node %" PRIu64
                               " is not in the partition buffer: the sampler and the buffer disagree on the state",
                               d.batch, d.epoch, pstate, v.nodes[i]);
            rc = extractor_run_rows(&x, v.nodes, n, prows, v.alias, msg, sizeof msg);
            if (rc == 0)
                partitions_done(r);
        } else if (r->packed) { /* the batch's rows in one read of its chunk, hot rows pinned in the buffer */
            uint64_t reads = pb.reads, bytes = pb.bytes;
            if (pack_rows_batch(&r->pr, &pb, d.batch, v.nodes, n, msg, sizeof msg) != 0)
                stage_fail(st, "batch %" PRIu64 " (epoch %" PRIu32 "): %s", d.batch, d.epoch, msg);
            x.st.io_ops += pb.reads - reads;
            x.st.io_bytes += pb.bytes - bytes;
            rc = extractor_run_rows(&x, v.nodes, n, pb.rows, v.alias, msg, sizeof msg);
        } else
            rc = extractor_run(&x, v.nodes, n, v.alias, msg, sizeof msg);
        if (rc == -EPIPE) {
            stop_all(r);
            break;
        }
        if (rc)
            stage_fail(st, "batch %" PRIu64 " (epoch %" PRIu32 "): %s", d.batch, d.epoch, msg);
        if (x.unreferenced)
            batch_set_aliased_unreferenced(&v); /* a resident buffer: the releaser has nothing to drop */
        else
            batch_set_aliased(&v);
        uint64_t t1 = sl_now_ns();
        stage_trace(st, d.batch, v.h.split, t0, t1);
        publish(t, &x.st, t1);
        if ((r->ordered && stage_turn_wait(st, &r->turn, d.batch) != 0) || stage_push(st, &d) != 0) {
            /* the run is stopping: the batch's references die with the buffer */
            stop_all(r);
            break;
        }
        if (r->ordered)
            stage_turn_done(&r->turn, d.batch);
        metrics_add(&st->block->items, 1);
    }
    t->st = x.st;
    atomic_fetch_add(&r->chunk_reads, pb.reads);
    atomic_fetch_add(&r->chunk_bytes, pb.bytes);
    atomic_fetch_add(&r->chunk_ns, pb.read_ns);
    atomic_fetch_add(&r->cache_reads, pb.cache_reads);
    atomic_fetch_add(&r->cache_bytes, pb.cache_bytes);
    atomic_fetch_add(&r->cache_ns, pb.cache_ns);
    pack_rows_buf_free(&pb);
    free(prows);
    extractor_free(&x);
    return NULL;
}

/* A packed run: opens the pack against the run and pins its hot tier in
 * the buffer, loaded through one engine, before any batch is extracted. */
static void packed_open(struct xrun *r)
{
    struct stage *st = r->st;
    char msg[1024];
    stage_schedule(st, &r->sched);
    if (pack_rows_open(&r->pr, st->cfg.pipeline.pack, &st->cfg, run_global_rank(&st->args), run_world(&st->args),
                       &r->sched, &st->meta, st->cfg.pipeline.io == EXTRACT_IO_BUFFERED, msg, sizeof msg) != 0)
        stage_fail(st, "pipeline.pack: %s", msg);
    struct extractor x;
    uint32_t portion = staging_portion_of(&r->stg, st->args.rank, 0);
    if (extractor_init_shared(&x, &r->src, &st->fb, r->depth, &r->stg, portion, msg, sizeof msg) != 0)
        stage_fail(st, "%s", msg);
    x.idle = idle;
    x.idle_arg = r;
    uint64_t t0 = sl_now_ns(), loaded = 0;
    int rc = pack_rows_load_hot(&r->pr, &x, &loaded, msg, sizeof msg);
    extractor_free(&x);
    if (rc == -EPIPE) {
        stop_all(r);
        return;
    }
    if (rc)
        stage_fail(st, "pipeline.pack: %s", msg);
    const struct pack_manifest *m = &r->pr.pack.m;
    double s = (double)(sl_now_ns() - t0) / 1e9;
    stage_note(st,
               "packed: %s, %" PRIu64 " batches of %" PRIu32 " epochs; hot tier of %" PRIu64
               " rows (%.1f MiB) pinned in %.2f s; each batch's other rows read from its chunk in one %s read%s",
               r->pr.pack.dir, m->batches, m->epochs, loaded, (double)(loaded * m->row_bytes) / (1 << 20), s,
               r->pr.pack.direct ? "direct" : "buffered",
               m->cache_rows ? " and from its extents of the cache tier (cache.bin)" : "");
}

/* The warm start (stages/warm.h): one sequential pass over features.bin
 * beside the extractor threads, which wait on the rows it claimed instead
 * of reading them one by one. */
static void *warm_main(void *arg)
{
    struct xrun *r = arg;
    struct stage *st = r->st;
    char msg[1024];
    struct warm_stats ws;
    struct warm_params wp = {.no_huge = !st->cfg.pipeline.huge_pages};
    wp.nodes = r->hot;
    wp.nnodes = r->hot ? r->nhot : 0;
    uint64_t t0 = sl_now_ns();
    int rc = warm_fill(&r->src, &st->fb, &wp, idle, r, &ws, msg, sizeof msg);
    stage_trace_phase(st, RUN_PHASE_WARM, t0, sl_now_ns());
    if (rc == -EPIPE) {
        stop_all(r);
        return NULL;
    }
    if (rc)
        stage_fail(st, "%s", msg);
    if (r->hot) { /* not every row: the buffer stays the batches' and the policy's */
        double s = (double)ws.total_ns / 1e9, mib = (double)ws.bytes / (1 << 20);
        stage_note(st,
                   "warm start: the pinned hot set, %" PRIu64 " rows (%.1f MiB) of %" PRIu64 ", in %.2f s: %.1f MiB of "
                   "%s read in order at %.0f MiB/s (reads of %.1f MiB, up to %u in flight); %" PRIu64
                   " loaded by the pass, %" PRIu64 " held or loaded by batches first; %.1f MiB of rows in huge pages",
                   ws.rows, (double)ws.rows * (double)r->src.row_bytes / (1 << 20), r->src.rows, s, mib, r->src.path,
                   s > 0 ? mib / s : 0.0, (double)ws.chunk_bytes / (1 << 20), ws.depth, ws.loaded, ws.skipped,
                   (double)ws.huge_bytes / (1 << 20));
        return NULL;
    }
    /* every row is in for good: from now on batches look rows up without references */
    int rrc = featbuf_set_resident(&st->fb);
    if (rrc == -EPIPE) {
        stop_all(r);
        return NULL;
    }
    double s = (double)ws.total_ns / 1e9, mib = (double)ws.bytes / (1 << 20);
    stage_note(st,
               "warm start: %" PRIu64 " rows (%.1f MiB) in %.2f s, %.0f MiB/s, sequential direct reads of %.1f MiB, up to %u "
               "in flight: %" PRIu64
               " loaded by the pass (%" PRIu64 " chunks straight into their slots, %" PRIu64 " copied%s), %" PRIu64
               " held or loaded by batches first; claiming took %.2f s; %s%.1f MiB of rows in huge pages (%.2f s%s%s); %s",
               ws.rows, mib, s, s > 0 ? mib / s : 0.0, (double)ws.chunk_bytes / (1 << 20), ws.depth, ws.loaded,
               ws.chunks_direct, ws.chunks_copied, st->fb.rows ? "" : " to the GPU", ws.skipped,
               (double)ws.claim_ns / 1e9, st->fb.rows ? "" : "rows on the GPU, ",
               (double)ws.huge_bytes / (1 << 20), (double)ws.huge_ns / 1e9, ws.huge_rc ? ", stopped: " : "",
               ws.huge_rc == -ECANCELED ? (st->cfg.pipeline.huge_pages ? "SLUICE_NO_HUGE_PAGES is set"
                                                                       : "pipeline.huge_pages = false")
               : ws.huge_rc             ? strerror(-ws.huge_rc)
                                        : "",
               rrc == 0              ? "the buffer is resident: batches take no references from now on"
               : rrc == -EOPNOTSUPP ? "the cache policy learns from every acquire: batches take references as before"
                                    : "not every row is in (a batch took the room): batches take references as before");
    return NULL;
}

/* The static policies (pipeline.cache_policy static, lookahead-static):
 * pins the nodes of highest out-degree in the sampled direction, as many
 * as the buffer's pin budget (the launcher made it pipeline.hot_fraction
 * of the slots above the extraction reserve). The rows load on first use
 * and stay, or by the warm start's sequential pass (pipeline.warm_start
 * "auto"). Returns the set (sorted ids; the caller frees it) and its size
 * in *n, or NULL. */
static uint64_t *pin_hot_set(struct stage *st, uint64_t *n)
{
    enum cache_policy cp = st->cfg.pipeline.cache_policy;
    uint64_t k = st->fb.pin_slots;
    *n = 0;
    if ((cp != CACHE_POLICY_STATIC && cp != CACHE_POLICY_LOOKAHEAD_STATIC) || k == 0)
        return NULL;
    char msg[1024];
    uint64_t t0 = sl_now_ns();
    uint64_t *hot = malloc(k * sizeof *hot);
    if (!hot)
        stage_fail(st, "no memory for a hot set of %" PRIu64 " nodes", k);
    if (cachesim_hot_set(st->cfg.dataset.path, &st->meta, k, hot, msg, sizeof msg))
        stage_fail(st, "the hot set: %s", msg);
    for (uint64_t i = 0; i < k; i++) {
        int rc = featbuf_pin(&st->fb, hot[i]);
        if (rc)
            stage_fail(st, "pinning hot node %" PRIu64 ": %s", hot[i], strerror(-rc));
    }
    stage_note(st, "%s policy: pinned the %" PRIu64 " nodes of highest out-degree (%.1f s to find them)",
               cache_policy_name(cp), k, (double)(sl_now_ns() - t0) / 1e9);
    *n = k;
    return hot;
}

static int stage_main(int argc, char **argv)
{
    static struct stage st;
    static struct xrun r;
    char msg[1024], who[64];
    stage_open(&st, argc, argv, STAGE_NEED_FEATBUF);
    r.st = &st;
    snprintf(who, sizeof who, "%s rank %d", st.prog, st.args.rank);
    if (extract_source_open(&r.src, st.cfg.dataset.path, &st.meta, st.cfg.pipeline.io, who, msg, sizeof msg))
        stage_fail(&st, "%s", msg);
    if (st.fb.row_bytes < r.src.row_bytes)
        stage_fail(&st, "feature buffer rows hold %zu bytes, the dataset's rows %" PRIu64, st.fb.row_bytes,
                   r.src.row_bytes);
    int nthreads = (int)st.cfg.pipeline.extractors;
    if (staging_attach(&r.stg, st.args.run_id, msg, sizeof msg))
        stage_fail(&st, "%s", msg);
    if (staging_portion_of(&r.stg, st.args.rank, nthreads - 1) == STAGING_NONE)
        stage_fail(&st, "the staging buffer has portions for %u ranks of %u extractor threads, not rank %d of %d "
                   "threads; restart the run",
                   r.stg.ranks, r.stg.threads, st.args.rank, nthreads);
    if (!st.fb.rows) { /* a GPU rank: open the trainer's device rows for the CUDA row sinks */
        int rc = extractor_use_device(&r.dev, &st.fb, rank_device(&st), -1, stage_idle, &st, msg, sizeof msg);
        if (rc == -EPIPE) { /* the run stopped before the trainer published them */
            staging_free(&r.stg);
            extract_source_free(&r.src);
            stage_close(&st);
            return 0;
        }
        if (rc)
            stage_fail(&st, "%s", msg);
    }
    r.depth = (unsigned)st.cfg.pipeline.io_depth;
    if (r.stg.blocks_per < r.depth)
        stage_note(&st, "a thread's own staging holds %u of its pipeline.io_depth = %u reads (%" PRIu64
                   " KiB); it borrows blocks of idle threads for the others (raise pipeline.staging_mb for more of "
                   "its own)",
                   r.stg.blocks_per, r.depth, (uint64_t)r.stg.blocks_per * r.stg.block_bytes >> 10);
    r.ordered = st.cfg.pipeline.ordered;
    if (st.cfg.pipeline.trace_rows[0] &&
        rowtrace_open(&r.trace, st.cfg.pipeline.trace_rows, st.args.rank, st.meta.nodes, msg, sizeof msg))
        stage_fail(&st, "%s", msg);
    r.packed = st.cfg.pipeline.mode == PIPELINE_PACKED && !st.args.predict;
    r.partitioned = st.cfg.pipeline.mode == PIPELINE_PARTITIONS && !st.args.predict;
    if (r.packed)
        packed_open(&r);
    else if (r.partitioned)
        partitions_open(&r);
    else
        r.hot = pin_hot_set(&st, &r.nhot);
    struct schedule sched;
    stage_schedule(&st, &sched);
    /* batch numbers continue across a resume */
    stage_turn_init(&r.turn, schedule_epoch_start(&sched, st.args.start_epoch));
    schedule_free(&sched);
    enum config_warm wm = st.cfg.pipeline.warm_start;
    if (wm == CONFIG_WARM_ON && !warm_fits(&st.fb, &r.src))
        stage_fail(&st, "pipeline.warm_start = \"on\", but the feature buffer (%u slots%s) cannot hold all %" PRIu64
                   " rows; raise pipeline.feature_buffer_mb or set pipeline.warm_start = \"auto\"",
                   st.fb.nslots, st.fb.rows ? "" : ", on a GPU", r.src.rows);
    /* every row when they all fit; else, with "auto", a static policy's
     * pinned hot set. Not for partitions (reads are the buffer's) nor a
     * pack (its hot tier is its warm start). */
    bool all = warm_fits(&st.fb, &r.src);
    if (all || wm != CONFIG_WARM_AUTO || !r.hot || !warm_fits_set(&st.fb, &r.src, r.nhot)) {
        free(r.hot);
        r.hot = NULL;
    }
    if (wm != CONFIG_WARM_OFF && !r.packed && !r.partitioned && (all || r.hot)) {
        int rc = pthread_create(&r.warm_tid, NULL, warm_main, &r);
        if (rc)
            stage_fail(&st, "cannot start the warm start's thread: %s", strerror(rc));
        r.warm = true;
    }
    struct xthread *t = calloc((size_t)nthreads, sizeof *t);
    if (!t)
        stage_fail(&st, "out of memory");
    stage_ready(&st);
    for (int i = 0; i < nthreads; i++) {
        t[i].r = &r;
        t[i].index = i;
        int rc = pthread_create(&t[i].tid, NULL, thread_main, &t[i]);
        if (rc)
            stage_fail(&st, "cannot start extractor thread %d: %s", i, strerror(rc));
    }
    struct extract_stats sum = {0};
    for (int i = 0; i < nthreads; i++) {
        pthread_join(t[i].tid, NULL);
        extract_stats_add(&sum, &t[i].st);
    }
    if (r.warm)
        pthread_join(r.warm_tid, NULL);
    free(r.hot);
    if (!atomic_load(&r.stop))
        stage_end_output(&st);
    stage_note(&st,
               "%" PRIu64 " batches, %" PRIu64 " rows: %" PRIu64 " hits, %" PRIu64 " shared, %" PRIu64
               " read (%.1f MiB), hit rate %.3f; %.3f of the row copies started while other reads were outstanding",
               sum.batches, sum.rows, sum.hits, sum.waits, sum.loads, (double)sum.io_bytes / (1 << 20),
               sum.rows ? (double)(sum.hits + sum.waits) / (double)sum.rows : 0.0,
               sum.copies ? (double)sum.copies_overlapped / (double)sum.copies : 0.0);
    if (r.packed) {
        uint64_t b = atomic_load(&r.chunk_bytes), ns = atomic_load(&r.chunk_ns);
        uint64_t cb = atomic_load(&r.cache_bytes), cns = atomic_load(&r.cache_ns);
        uint64_t busy = pack_rows_busy(&r.pr);
        stage_note(&st,
                   "packed: %" PRIu64 " reads, %.1f MiB, %.2f s reading (summed over the threads): %.0f MiB/s "
                   "per read stream; of them %" PRIu64 " reads of cache extents, %.1f MiB in %.2f s; "
                   "reading %.2f s (some thread reading): %.0f MiB/s for the rank; chunks read %s the extents",
                   atomic_load(&r.chunk_reads), (double)b / (1 << 20), (double)ns / 1e9,
                   ns ? (double)b / (1 << 20) / ((double)ns / 1e9) : 0.0, atomic_load(&r.cache_reads),
                   (double)cb / (1 << 20), (double)cns / 1e9, (double)busy / 1e9,
                   busy ? (double)b / (1 << 20) / ((double)busy / 1e9) : 0.0,
                   sl_env_on("SLUICE_PACK_OVERLAP") ? "beside" : "before");
    }
    free(t);
    extractor_unuse_device(&r.dev); /* after every engine (and its sink) is freed */
    if (rowtrace_close(&r.trace, msg, sizeof msg))
        stage_fail(&st, "%s", msg);
    stage_turn_destroy(&r.turn);
    if (r.packed) {
        pack_rows_free(&r.pr);
        schedule_free(&r.sched);
    }
    if (r.partitioned)
        partitions_close(&r);
    extract_source_free(&r.src);
    staging_free(&r.stg);
    stage_close(&st);
    return 0;
}

int main(int argc, char **argv)
{
    if (stage_bench_mode(argc, argv))
        return extract_bench_main(argc, argv);
    return stage_main(argc, argv);
}
