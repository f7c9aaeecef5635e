/* test_stage.c - TEST-ONLY stand-in for the four stage programs, used to
 * test gnnlaunch before the real stages exist. It is built as
 * build/tests/test-stage and linked as build/tests/stages/gnn-sampler,
 * gnn-extractor, gnn-trainer and gnn-releaser (never into build/bin); tests
 * point gnnlaunch at it with SLUICE_STAGE_DIR. argv[0] says which stage it
 * plays.
 *
 * It keeps the stage contract (docs/architecture.md): parses the command
 * line with layout_args_parse, loads the effective config, attaches the
 * metrics page and claims its block, heartbeats, and moves descriptors
 * through its rank's queues as a real little pipeline:
 *   sampler    pushes SLUICE_TEST_ITEMS descriptors {batch = i, aux[0] =
 *              check(rank, i), aux[1] = rank} into the extract queue
 *   extractor  extract -> train, trainer  train -> release, verifying each
 *   releaser   pops the release queue and records each batch in a bitmap
 * Each producer calls ring_producer_done at the end of its stream, so the
 * close flows down the pipeline. With SLUICE_TEST_REPORT set, each stage
 * writes DIR/<stage>.<rank>: "items=N corrupt=C dups=D distinct=K end=E"
 * (end: eos = end of stream, stopped = a queue was closed under it).
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

#include "core/util.h"
#include "ipc/metrics.h"
#include "ipc/ring.h"
#include "launcher/config.h"
#include "launcher/layout.h"

#define POLL_MS 200

enum fail_mode { FAIL_NONE, FAIL_EXIT3, FAIL_EXIT0, FAIL_KILL, FAIL_HANG, FAIL_HANG_NOTERM };

static struct layout_args g_args;
static struct metrics_block *g_block;
static enum fail_mode g_fail = FAIL_NONE;
static uint64_t g_fail_at;
static uint64_t g_delay_us;

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
    fprintf(stderr, "test-stage %s rank %d: ", layout_stage_program(g_args.stage), g_args.rank);
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
        if (strcmp(stage, "*") && layout_stage_from_program(stage) != (int)g_args.stage)
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
static int push(struct ring *r, const struct layout_desc *d)
{
    for (;;) {
        uint64_t t0 = metrics_now_ns();
        int rc = ring_push(r, d, POLL_MS);
        metrics_add(&g_block->wait_ns, metrics_now_ns() - t0);
        metrics_heartbeat(g_block);
        if (rc == 0 || rc == -EPIPE)
            return rc;
        if (rc != -ETIMEDOUT && rc != -EINTR)
            die(3, "push: %s", strerror(-rc));
    }
}

static int pop(struct ring *r, struct layout_desc *d)
{
    for (;;) {
        uint64_t t0 = metrics_now_ns();
        int rc = ring_pop(r, d, POLL_MS);
        metrics_add(&g_block->wait_ns, metrics_now_ns() - t0);
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
    if (layout_queue_segname(name, sizeof name, g_args.run_id, (enum layout_queue)q, g_args.rank, err, sizeof err) ||
        ring_attach(r, name, err, sizeof err))
        die(2, "%s", err);
}

static void report(uint64_t items, uint64_t corrupt, uint64_t dups, uint64_t distinct, const char *end)
{
    const char *dir = getenv("SLUICE_TEST_REPORT");
    if (!dir || !*dir)
        return;
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/%s.%d", dir, layout_stage_name(g_args.stage), g_args.rank);
    FILE *f = fopen(path, "w");
    if (!f)
        die(3, "cannot write %s", path);
    fprintf(f, "items=%" PRIu64 " corrupt=%" PRIu64 " dups=%" PRIu64 " distinct=%" PRIu64 " end=%s\n", items, corrupt,
            dups, distinct, end);
    fclose(f);
}

int main(int argc, char **argv)
{
    char err[2048];
    if (layout_args_parse(argc, argv, &g_args, err, sizeof err) != 0) {
        fprintf(stderr, "test-stage: %s\n", err);
        return 2;
    }
    parse_term();
    parse_fail();
    sl_config cfg;
    if (sl_config_load(&cfg, g_args.config, NULL, 0, err, sizeof err) != 0)
        die(2, "%s", err);
    if (cfg.dataset.path[0] != '/' || access(g_args.run_dir, R_OK | X_OK) != 0)
        die(2, "dataset.path '%s' is not absolute or run dir %s is missing", cfg.dataset.path, g_args.run_dir);
    const char *s = getenv("SLUICE_TEST_ITEMS");
    uint64_t n_items = s ? strtoull(s, NULL, 10) : 1000;
    s = getenv("SLUICE_TEST_DELAY_US");
    g_delay_us = s ? strtoull(s, NULL, 10) : 0;

    struct metrics_page page;
    char name[SHM_NAME_MAX];
    if (layout_metrics_segname(name, sizeof name, g_args.run_id, err, sizeof err) ||
        metrics_attach(&page, name, 0, err, sizeof err))
        die(2, "%s", err);
    struct metrics_block *b = metrics_block(&page, g_args.metrics_block);
    if (!b || metrics_claim(b, layout_stage_name(g_args.stage), g_args.rank, err, sizeof err) != 0)
        die(2, "cannot claim metrics block %" PRIu32 ": %s", g_args.metrics_block, b ? err : "out of range");
    g_block = b;

    struct ring in = {0}, out = {0};
    int qin = layout_stage_input(g_args.stage), qout = layout_stage_output(g_args.stage);
    if (qin >= 0)
        attach_queue(&in, qin);
    if (qout >= 0)
        attach_queue(&out, qout);

    uint64_t done = 0, corrupt = 0, dups = 0, distinct = 0;
    uint64_t *seen = g_args.stage == LAYOUT_RELEASER ? calloc((n_items + 63) / 64 + 1, 8) : NULL;
    const char *end = "eos";
    for (;;) {
        maybe_fail(done);
        struct layout_desc d;
        if (qin < 0) {
            if (done == n_items)
                break;
            d = (struct layout_desc){.batch = done,
                                     .slot = (uint32_t)(done % 64),
                                     .epoch = 0,
                                     .aux = {check_value(g_args.rank, done), (uint64_t)g_args.rank}};
        } else if (pop(&in, &d) == -EPIPE) {
            break; /* end of stream, or the launcher closed the queue to stop the run */
        }
        uint64_t t0 = metrics_now_ns();
        if (d.batch >= n_items || d.aux[1] != (uint64_t)g_args.rank || d.aux[0] != check_value(g_args.rank, d.batch)) {
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
        metrics_add(&b->busy_ns, metrics_now_ns() - t0);
        if (qout >= 0 && push(&out, &d) == -EPIPE) {
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
    ring_free(&in);
    ring_free(&out);
    metrics_free(&page);
    return 0;
}
