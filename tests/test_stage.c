/* test_stage.c - TEST-ONLY stand-in for the four stage programs, used to
 * test gnnlaunch before the real stages exist. It is built as
 * build/tests/test-stage and linked as build/tests/stages/gnn-sampler,
 * gnn-extractor, gnn-trainer and gnn-releaser (never into build/bin); tests
 * point gnnlaunch at it with SLUICE_STAGE_DIR. argv[0] says which stage it
 * plays.
 *
 * It keeps the stage contract (docs/architecture.md): parses the command
 * line with run_args_parse, loads the effective config, attaches the
 * metrics page and claims its block, heartbeats, attaches its rank's batch
 * arena and moves real batches through its rank's queues as a little
 * pipeline:
 *   sampler    for i < SLUICE_TEST_ITEMS: takes an arena slot, samples
 *              batch i of the dataset's graph from seed check(rank, i)
 *              with the config's batch size and fanouts (tests/t_batch.c,
 *              sized by run_arena_plan like the launcher's arena), and
 *              pushes {batch = i, slot, aux[0] = check(rank, i), aux[1] =
 *              rank} into the extract queue
 *   extractor  checks the batch's header (batch_view), fills its alias[]
 *              from the node ids, extract -> train
 *   trainer    checks the whole batch, rebuilds it from its seed and
 *              compares, checks alias[], train -> release
 *   releaser   returns the slot (arena_release) and records each batch in
 *              a bitmap
 * Each producer calls ring_producer_done at the end of its stream, so the
 * close flows down the pipeline. With SLUICE_TEST_REPORT set, each stage
 * writes DIR/<stage>.<rank> (DIR/<stage>.<rank>.n<node> on a multi-node
 * run): "items=N corrupt=C dups=D distinct=K end=E arena_free=F
 * arena_slots=S device=G nccl_id=X cluster_id=Y nccl_hostid=H
 * nccl_p2p_disable=P" (end: eos = end of
 * stream, stopped = a queue or the arena was closed under it; F counts
 * free slots when the stage ended: all of them for the releaser at end of
 * stream; G is --device or -1; X is --nccl-id in hex or "none"; Y is the
 * unique_id of the run directory's cluster.toml in hex, or "none" when
 * there is none; H and P are the stage's NCCL_HOSTID and
 * NCCL_P2P_DISABLE, or "none" when unset).
 *
 * Environment:
 *   SLUICE_TEST_ITEMS     descriptors per rank (default 1000)
 *   SLUICE_TEST_DELAY_US  sleep per item in every stage (default 0)
 *   SLUICE_TEST_FAIL      comma-separated STAGE:RANK:MODE:K (STAGE a name
 *                         or *, RANK a number or *), acting when the
 *                         stage has handled K items. MODE: exit3, exit0
 *                         (quit early), kill (SIGKILL itself), hang (sleep
 *                         until killed), hang-noterm (ignore SIGTERM from
 *                         the start, then hang at K or at the end).
 *   SLUICE_TEST_TERM      "ignore": ignore SIGTERM (a stop then relies on
 *                         the launcher closing the queues)
 * Exit status: 0 done or stopped, 2 bad arguments or segments, 3 on
 * request or when a queue call fails unexpectedly. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/config.h"
#include "core/dataset.h"
#include "core/util.h"
#include "ipc/arena.h"
#include "ipc/batch.h"
#include "ipc/metrics.h"
#include "ipc/ring.h"
#include "launcher/layout.h"
#include "stages/trainer_reduce.h"
#include "t_batch.h"

#define POLL_MS 200

enum fail_mode { FAIL_NONE, FAIL_EXIT3, FAIL_EXIT0, FAIL_KILL, FAIL_HANG, FAIL_HANG_NOTERM };

static struct run_args g_args;
static struct metrics_block *g_block;
static enum fail_mode g_fail = FAIL_NONE;
static uint64_t g_fail_at;
static uint64_t g_delay_us;
static struct arena g_arena;            /* this rank's batch arena */
static struct run_arena_plan g_plan; /* the run's batch shape */
static struct t_csc g_graph;            /* sampler, trainer: the dataset's graph */
static void *g_rebuilt;                 /* trainer: a batch rebuilt from its seed */
static int g_complaints;

static uint64_t check_value(int rank, uint64_t i)
{
    uint64_t x = (uint64_t)rank * 0x9E3779B97F4A7C15ull ^ (i + 1) * 0xBF58476D1CE4E5B9ull;
    x ^= x >> 31;
    return x * 0x94D049BB133111EBull;
}

static _Noreturn void die(int code, const char *fmt, ...) SL_PRINTF(2, 3);
static _Noreturn void die(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "test-stage %s rank %d: ", run_stage_program(g_args.stage), g_args.rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (g_block)
        metrics_set_state(g_block, METRICS_FAILED);
    exit(code);
}

/* Reads SLUICE_TEST_FAIL and keeps the spec that matches this process. */
static void parse_fail(void)
{
    const char *env = getenv("SLUICE_TEST_FAIL");
    if (!env || !*env)
        return;
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", env);
    char *save = NULL;
    for (char *spec = strtok_r(buf, ",", &save); spec; spec = strtok_r(NULL, ",", &save)) {
        char stage[32], rank[16], mode[32];
        unsigned long long k;
        if (sscanf(spec, "%31[^:]:%15[^:]:%31[^:]:%llu", stage, rank, mode, &k) != 4)
            die(2, "bad SLUICE_TEST_FAIL entry '%s' (STAGE:RANK:MODE:K)", spec);
        if (strcmp(stage, "*") && run_stage_from_program(stage) != (int)g_args.stage)
            continue;
        if (strcmp(rank, "*") && atoi(rank) != g_args.rank)
            continue;
        static const char *const modes[] = {"", "exit3", "exit0", "kill", "hang", "hang-noterm"};
        g_fail = FAIL_NONE;
        for (int m = 1; m < (int)SL_ARRAY_LEN(modes); m++)
            if (!strcmp(mode, modes[m]))
                g_fail = (enum fail_mode)m;
        if (g_fail == FAIL_NONE)
            die(2, "unknown failure mode '%s'", mode);
        g_fail_at = k;
    }
    if (g_fail == FAIL_HANG_NOTERM)
        signal(SIGTERM, SIG_IGN);
}

/* SLUICE_TEST_TERM=ignore: ignore SIGTERM, so that only the launcher's
 * closing of the queues can end this stage when a run stops. */
static void parse_term(void)
{
    const char *env = getenv("SLUICE_TEST_TERM");
    if (env && !strcmp(env, "ignore"))
        signal(SIGTERM, SIG_IGN);
}

static _Noreturn void hang(void)
{
    for (;;)
        pause();
}

/* Acts on the failure spec once `done` items were handled. */
static void maybe_fail(uint64_t done)
{
    if (g_fail == FAIL_NONE || done != g_fail_at)
        return;
    switch (g_fail) {
    case FAIL_EXIT3:
        die(3, "failing on purpose at item %" PRIu64, done);
    case FAIL_EXIT0:
        metrics_set_state(g_block, METRICS_DONE);
        exit(0);
    case FAIL_KILL:
        raise(SIGKILL);
        break;
    case FAIL_HANG:
    case FAIL_HANG_NOTERM:
        hang();
    case FAIL_NONE:
        break;
    }
}

static void pause_us(uint64_t us)
{
    if (!us)
        return;
    struct timespec ts = {.tv_sec = (time_t)(us / 1000000), .tv_nsec = (long)(us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* Push / pop with a bounded wait, heartbeating while blocked: 0 or -EPIPE;
 * other errors are fatal. */
static int push(struct ring *r, const struct run_desc *d)
{
    for (;;) {
        uint64_t t0 = sl_now_ns();
        int rc = ring_push(r, d, POLL_MS);
        metrics_add(&g_block->wait_ns, sl_now_ns() - t0);
        metrics_heartbeat(g_block);
        if (rc == 0 || rc == -EPIPE)
            return rc;
        if (rc != -ETIMEDOUT && rc != -EINTR)
            die(3, "push: %s", strerror(-rc));
    }
}

static int pop(struct ring *r, struct run_desc *d)
{
    for (;;) {
        uint64_t t0 = sl_now_ns();
        int rc = ring_pop(r, d, POLL_MS);
        metrics_add(&g_block->wait_ns, sl_now_ns() - t0);
        metrics_heartbeat(g_block);
        if (rc == 0 || rc == -EPIPE)
            return rc;
        if (rc != -ETIMEDOUT && rc != -EINTR)
            die(3, "pop: %s", strerror(-rc));
    }
}

static void attach_queue(struct ring *r, int q)
{
    char name[SHM_NAME_MAX], err[512];
    if (run_queue_segname(name, sizeof name, g_args.run_id, (enum run_queue)q, g_args.rank, err, sizeof err) ||
        ring_attach(r, name, err, sizeof err))
        die(2, "%s", err);
}

/* ---- batches ---------------------------------------------------------------------------- */

static uint32_t targets_of(uint64_t seed)
{
    return 1 + (uint32_t)(seed % SL_MIN(g_plan.shape.batch_size, g_plan.shape.nodes));
}

/* What the extractor writes as the feature-buffer slot of a node. */
static uint32_t alias_of(uint64_t node)
{
    return (uint32_t)(node * 2654435761u % 1000003u);
}

/* Reports a bad batch (the first few) and returns false. */
static bool complain(const struct run_desc *d, const char *fmt, ...) SL_PRINTF(2, 3);
static bool complain(const struct run_desc *d, const char *fmt, ...)
{
    if (g_complaints++ < 5) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "test-stage %s rank %d: batch %" PRIu64 " in slot %" PRIu32 ": ",
                run_stage_program(g_args.stage), g_args.rank, d->batch, d->slot);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
    return false;
}

static void open_batches(void)
{
    char err[2048], name[SHM_NAME_MAX];
    struct config cfg;
    struct dataset_meta meta;
    if (config_load(&cfg, g_args.config, NULL, 0, err, sizeof err) != 0 ||
        dataset_meta_read(cfg.dataset.path, &meta, false, err, sizeof err) != 0 ||
        run_arena_plan(&cfg, &meta, &g_plan, err, sizeof err) != 0)
        die(2, "%s", err);
    if (run_arena_segname(name, sizeof name, g_args.run_id, g_args.rank, err, sizeof err) != 0 ||
        arena_attach(&g_arena, name, err, sizeof err) != 0)
        die(2, "%s", err);
    if (g_arena.slot_size < g_plan.params.slot_size)
        die(2, "arena slots of %zu bytes are smaller than this configuration's batches (%zu bytes)", g_arena.slot_size,
            g_plan.params.slot_size);
    if (g_args.stage == RUN_SAMPLER || g_args.stage == RUN_TRAINER) {
        if (t_csc_load(&g_graph, cfg.dataset.path, &meta, err, sizeof err) != 0)
            die(2, "%s", err);
        if (!(g_rebuilt = malloc(g_plan.params.slot_size)))
            die(3, "out of memory");
    }
}

/* Sampler: takes a slot (heartbeating while none is free) and writes batch
 * d->batch into it. 0, or -EPIPE when the run is stopping. */
static int sample(struct run_desc *d)
{
    uint32_t slot;
    for (;;) {
        uint64_t t0 = sl_now_ns();
        int rc = arena_alloc(&g_arena, &slot, POLL_MS);
        metrics_add(&g_block->wait_ns, sl_now_ns() - t0);
        metrics_heartbeat(g_block);
        if (rc == 0)
            break;
        if (rc == -EPIPE)
            return rc;
        if (rc != -ETIMEDOUT && rc != -EINTR)
            die(3, "arena_alloc: %s", strerror(-rc));
    }
    char err[512];
    struct batch_id id = {.batch = d->batch, .epoch = d->epoch, .rank = (uint32_t)g_args.rank};
    if (t_sample_batch(&g_graph, &g_plan.shape, targets_of(d->aux[0]), d->aux[0], &id, (unsigned)(d->batch % 4),
                       arena_slot(&g_arena, slot), g_arena.slot_size, err, sizeof err) != 0)
        die(3, "%s", err);
    d->slot = slot;
    return 0;
}

/* Extractor, trainer, releaser: checks the batch d names and does the
 * stage's part. false if anything is wrong. */
static bool handle(const struct run_desc *d)
{
    void *slot = arena_slot(&g_arena, d->slot);
    if (!slot)
        return complain(d, "no such slot (%" PRIu32 " slots)", g_arena.nslots);
    if (g_args.stage == RUN_RELEASER) {
        int rc = arena_release(&g_arena, d->slot);
        return rc == 0 || complain(d, "arena_release: %s", strerror(-rc));
    }
    char err[512];
    struct batch_view v, w;
    unsigned flags = g_args.stage == RUN_EXTRACTOR ? BATCH_VIEW_HEADER_ONLY : 0;
    if (batch_view(slot, g_arena.slot_size, flags, &v, err, sizeof err) != 0)
        return complain(d, "%s", err);
    if (v.h.batch != d->batch || v.h.epoch != d->epoch || v.h.rank != (uint32_t)g_args.rank)
        return complain(d, "holds batch %" PRIu64 " of epoch %" PRIu32 ", rank %" PRIu32, v.h.batch, v.h.epoch,
                        v.h.rank);
    if (g_args.stage == RUN_EXTRACTOR) {
        for (uint32_t i = 0; i < batch_nodes(&v); i++)
            v.alias[i] = alias_of(v.nodes[i]);
        batch_set_aliased(&v);
        return true;
    }
    /* the trainer: the batch must be the one its seed makes */
    struct batch_id id = {.batch = d->batch, .epoch = d->epoch, .rank = (uint32_t)g_args.rank};
    if (t_sample_batch(&g_graph, &g_plan.shape, targets_of(d->aux[0]), d->aux[0], &id, 0, g_rebuilt,
                       g_plan.params.slot_size, err, sizeof err) != 0 ||
        batch_view(g_rebuilt, g_plan.params.slot_size, 0, &w, err, sizeof err) != 0)
        return complain(d, "cannot rebuild it: %s", err);
    if (t_batch_compare(&v, &w, err, sizeof err) != 0)
        return complain(d, "differs from the batch its seed makes: %s", err);
    if (!(v.h.flags & BATCH_ALIASED))
        return complain(d, "the extractor did not mark it aliased");
    for (uint32_t i = 0; i < batch_nodes(&v); i++)
        if (v.alias[i] != alias_of(v.nodes[i]))
            return complain(d, "alias[%" PRIu32 "] = %" PRIu32 ", expected %" PRIu32, i, v.alias[i],
                            alias_of(v.nodes[i]));
    return true;
}

static void report(uint64_t items, uint64_t corrupt, uint64_t dups, uint64_t distinct, const char *end)
{
    const char *dir = getenv("SLUICE_TEST_REPORT");
    if (!dir || !*dir)
        return;
    char path[PATH_MAX], node[32] = "";
    if (g_args.nodes > 1)
        snprintf(node, sizeof node, ".n%d", g_args.node);
    snprintf(path, sizeof path, "%s/%s.%d%s", dir, run_stage_name(g_args.stage), g_args.rank, node);
    char id[2 * RUN_NCCL_ID_BYTES + 1] = "none", cluster_id[2 * TRAINER_UNIQUE_ID_BYTES + 1] = "none", err[512];
    if (g_args.has_nccl_id)
        sl_hex(g_args.nccl_id, sizeof g_args.nccl_id, id);
    struct trainer_cluster tc;
    int rc = trainer_cluster_read(g_args.run_dir, &tc, err, sizeof err);
    if (rc == 0) {
        sl_hex(tc.unique_id, sizeof tc.unique_id, cluster_id);
        trainer_cluster_free(&tc);
    } else if (rc != -ENOENT) {
        die(3, "%s", err);
    }
    FILE *f = fopen(path, "w");
    if (!f)
        die(3, "cannot write %s", path);
    fprintf(f,
            "items=%" PRIu64 " corrupt=%" PRIu64 " dups=%" PRIu64 " distinct=%" PRIu64 " end=%s arena_free=%" PRIu32
            " arena_slots=%" PRIu32 " device=%d nccl_id=%s cluster_id=%s nccl_hostid=%s nccl_p2p_disable=%s\n",
            items, corrupt, dups, distinct, end, arena_available(&g_arena), g_arena.nslots, g_args.device, id,
            cluster_id, getenv("NCCL_HOSTID") ? getenv("NCCL_HOSTID") : "none",
            getenv("NCCL_P2P_DISABLE") ? getenv("NCCL_P2P_DISABLE") : "none");
    fclose(f);
}

int main(int argc, char **argv)
{
    char err[2048];
    if (run_args_parse(argc, argv, &g_args, err, sizeof err) != 0) {
        fprintf(stderr, "test-stage: %s\n", err);
        return 2;
    }
    parse_term();
    parse_fail();
    struct config cfg;
    if (config_load(&cfg, g_args.config, NULL, 0, err, sizeof err) != 0)
        die(2, "%s", err);
    if (cfg.dataset.path[0] != '/' || access(g_args.run_dir, R_OK | X_OK) != 0)
        die(2, "dataset.path '%s' is not absolute or run dir %s is missing", cfg.dataset.path, g_args.run_dir);
    const char *s = getenv("SLUICE_TEST_ITEMS");
    uint64_t n_items = s ? strtoull(s, NULL, 10) : 1000;
    s = getenv("SLUICE_TEST_DELAY_US");
    g_delay_us = s ? strtoull(s, NULL, 10) : 0;

    struct metrics_page page;
    char name[SHM_NAME_MAX];
    if (run_metrics_segname(name, sizeof name, g_args.run_id, err, sizeof err) ||
        metrics_attach(&page, name, 0, err, sizeof err))
        die(2, "%s", err);
    struct metrics_block *b = metrics_block(&page, g_args.metrics_block);
    if (!b || metrics_claim(b, run_stage_name(g_args.stage), g_args.rank, err, sizeof err) != 0)
        die(2, "cannot claim metrics block %" PRIu32 ": %s", g_args.metrics_block, b ? err : "out of range");
    g_block = b;

    struct ring in = {0}, out = {0};
    int qin = run_stage_input(g_args.stage), qout = run_stage_output(g_args.stage);
    if (qin >= 0)
        attach_queue(&in, qin);
    if (qout >= 0)
        attach_queue(&out, qout);
    open_batches();

    uint64_t done = 0, corrupt = 0, dups = 0, distinct = 0;
    uint64_t *seen = g_args.stage == RUN_RELEASER ? calloc((n_items + 63) / 64 + 1, 8) : NULL;
    const char *end = "eos";
    for (;;) {
        maybe_fail(done);
        struct run_desc d;
        if (qin < 0) {
            if (done == n_items)
                break;
            d = (struct run_desc){
                .batch = done, .epoch = 0, .aux = {check_value(g_args.rank, done), (uint64_t)g_args.rank}};
            uint64_t t0 = sl_now_ns();
            if (sample(&d) == -EPIPE) {
                end = "stopped"; /* the launcher closed the arena to stop the run */
                break;
            }
            metrics_add(&b->busy_ns, sl_now_ns() - t0);
        } else if (pop(&in, &d) == -EPIPE) {
            break; /* end of stream, or the launcher closed the queue to stop the run */
        }
        uint64_t t0 = sl_now_ns();
        bool batch_ok = qin < 0 || handle(&d); /* (the releaser releases here) */
        if (d.batch >= n_items || d.aux[1] != (uint64_t)g_args.rank || d.aux[0] != check_value(g_args.rank, d.batch) ||
            !batch_ok) {
            corrupt++;
        } else if (seen) {
            uint64_t bit = UINT64_C(1) << (d.batch % 64);
            if (seen[d.batch / 64] & bit)
                dups++;
            else
                distinct++;
            seen[d.batch / 64] |= bit;
        }
        pause_us(g_delay_us);
        metrics_add(&b->busy_ns, sl_now_ns() - t0);
        if (qout >= 0 && push(&out, &d) == -EPIPE) {
            if (qin < 0)
                arena_release(&g_arena, d.slot); /* never reached the pipeline */
            end = "stopped";
            done++;
            break;
        }
        done++;
        metrics_add(&b->items, 1);
        metrics_add(&b->bytes, sizeof d);
    }
    if (g_fail == FAIL_HANG_NOTERM)
        hang();
    if (qout >= 0 && !strcmp(end, "eos"))
        ring_producer_done(&out);
    report(done, corrupt, dups, distinct, end);
    metrics_set_state(b, METRICS_DONE);
    free(seen);
    free(g_rebuilt);
    t_csc_free(&g_graph);
    arena_free(&g_arena);
    ring_free(&in);
    ring_free(&out);
    metrics_free(&page);
    return 0;
}
