/* stage.c - joining a run as a stage process (API and contract in stage.h). */
#include "stages/stage.h"

#include "stages/schedule.h"
#include "stages/schedule_partitions.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static atomic_flag g_failing = ATOMIC_FLAG_INIT;

/* Setup errors: exit 2 before the stage did anything. */
static _Noreturn void open_fail(const struct stage *s, const char *fmt, ...) SL_PRINTF(2, 3);
static _Noreturn void open_fail(const struct stage *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s rank %d: ", s->prog, s->args.rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    if (s->block)
        metrics_set_state(s->block, METRICS_FAILED);
    exit(2);
}

void stage_note(const struct stage *s, const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s rank %d: %s\n", sl_err_line_start(), s->prog, s->args.rank, line);
}

_Noreturn void stage_fail(struct stage *s, const char *fmt, ...)
{
    if (atomic_flag_test_and_set(&g_failing)) {
        /* another thread is already reporting; it exits the process */
        for (;;)
            pause();
    }
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s%s rank %d: %s\n", sl_err_line_start(), s->prog, s->args.rank, line);
    if (s->block) {
        metrics_add(&s->block->errors, 1);
        metrics_set_state(s->block, METRICS_FAILED);
    }
    fflush(stderr);
    exit(3);
}

static void attach_queue(struct stage *s, struct ring *r, int q)
{
    char name[SHM_NAME_MAX], err[512];
    if (run_queue_segname(name, sizeof name, s->args.run_id, (enum run_queue)q, s->args.rank, err,
                             sizeof err) ||
        ring_attach(r, name, err, sizeof err))
        open_fail(s, "%s", err);
}

bool stage_bench_mode(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--bench", 7) || !strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
            return true;
    return argc < 2;
}

/* SLUICE_FAULT_ALLOC_MB=STAGE:MB (docs/reliability.md, "Test hooks"):
 * the stage named STAGE ("extractor") allocates MB MiB and writes every
 * page, then keeps it, as a stage whose memory outgrows the plan would;
 * for tests of the OOM report. */
static void fault_alloc(struct stage *s)
{
    const char *v = getenv("SLUICE_FAULT_ALLOC_MB"), *colon = v ? strchr(v, ':') : NULL;
    const char *name = run_stage_name(s->args.stage);
    if (!colon || strncmp(v, name, (size_t)(colon - v)) || name[colon - v] != '\0')
        return;
    unsigned long mb = strtoul(colon + 1, NULL, 10);
    stage_note(s, "SLUICE_FAULT_ALLOC_MB: allocating and touching %lu MiB (a test setting)", mb);
    char *p = malloc(mb << 20);
    for (size_t i = 0; p && i < (mb << 20); i += 4096)
        p[i] = 1;
    s->fault_mem = p; /* kept until exit */
}

void stage_open(struct stage *s, int argc, char **argv, unsigned needs)
{
    char err[2048], name[SHM_NAME_MAX];
    memset(s, 0, sizeof *s);
    s->t_open_ns = sl_now_ns();
    s->prog = argc > 0 ? argv[0] : "gnn-stage";
    const char *slash = strrchr(s->prog, '/');
    if (slash)
        s->prog = slash + 1;
    if (run_args_parse(argc, argv, &s->args, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n(stage programs are started by gnnlaunch; run `%s --help` for the stage-only modes)\n",
                s->prog, err, s->prog);
        exit(2);
    }
    s->prog = run_stage_program(s->args.stage);
    if (config_load(&s->cfg, s->args.config, NULL, 0, err, sizeof err) != 0)
        open_fail(s, "%s", err);
    if (run_metrics_segname(name, sizeof name, s->args.run_id, err, sizeof err) ||
        metrics_attach(&s->page, name, 0, err, sizeof err))
        open_fail(s, "%s", err);
    struct metrics_block *b = metrics_block(&s->page, s->args.metrics_block);
    if (!b || metrics_claim(b, run_stage_name(s->args.stage), s->args.rank, err, sizeof err) != 0)
        open_fail(s, "cannot claim metrics block %" PRIu32 ": %s", s->args.metrics_block, b ? err : "out of range");
    s->block = b;
    if (dataset_meta_read(s->cfg.dataset.path, &s->meta, true, err, sizeof err) != 0)
        open_fail(s, "dataset %s: %s", s->cfg.dataset.path, err);
    if (run_arena_plan(&s->cfg, &s->meta, &s->plan, err, sizeof err) != 0)
        open_fail(s, "%s", err);
    if (run_arena_segname(name, sizeof name, s->args.run_id, s->args.rank, err, sizeof err) ||
        arena_attach(&s->arena, name, err, sizeof err))
        open_fail(s, "%s", err);
    if (s->arena.slot_size < s->plan.batch.max_bytes)
        open_fail(s, "arena slots of %zu bytes are smaller than this configuration's batches (%" PRIu64 " bytes)",
                  s->arena.slot_size, s->plan.batch.max_bytes);
    int qin = run_stage_input(s->args.stage), qout = run_stage_output(s->args.stage);
    if (qin >= 0) {
        attach_queue(s, &s->in, qin);
        s->has_in = true;
    }
    if (qout >= 0) {
        attach_queue(s, &s->out, qout);
        s->has_out = true;
    }
    enum cache_policy cp = s->cfg.pipeline.cache_policy;
    if ((needs & STAGE_HINTS_FEATBUF) &&
        (cp == CACHE_POLICY_LOOKAHEAD || cp == CACHE_POLICY_LOOKAHEAD_STATIC || cp == CACHE_POLICY_AUTO))
        needs |= STAGE_NEED_FEATBUF;
    if (needs & STAGE_NEED_FEATBUF) {
        if (run_featbuf_segname(name, sizeof name, s->args.run_id, s->args.rank, err, sizeof err) ||
            featbuf_attach(&s->fb, name, err, sizeof err))
            open_fail(s, "%s", err);
        if (s->fb.n_nodes != s->meta.nodes)
            open_fail(s, "feature buffer %s maps %" PRIu64 " nodes but the dataset has %" PRIu64, name,
                      s->fb.n_nodes, s->meta.nodes);
        s->has_fb = true;
    }
    s->trace_fd = -1;
    if (s->args.trace) {
        char file[64], path[PATH_MAX + 80];
        run_trace_name(file, sizeof file, s->args.stage, s->args.rank);
        snprintf(path, sizeof path, "%s/%s", s->args.run_dir, file);
        s->trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (s->trace_fd < 0)
            stage_note(s, "warning: --trace: cannot open %s: %s; tracing off", path, strerror(errno));
    }
    fault_alloc(s);
    metrics_heartbeat(s->block);
}

void stage_trace(struct stage *s, uint64_t batch, uint32_t split, uint64_t t0_ns, uint64_t t1_ns)
{
    int fd = __atomic_load_n(&s->trace_fd, __ATOMIC_RELAXED);
    if (fd < 0)
        return;
    struct run_span sp = {.batch = batch, .t0_ns = t0_ns, .t1_ns = t1_ns, .tid = (uint32_t)gettid(), .split = split};
    if (write(fd, &sp, sizeof sp) != (ssize_t)sizeof sp &&
        __atomic_exchange_n(&s->trace_fd, -1, __ATOMIC_RELAXED) >= 0)
        stage_note(s, "warning: --trace: write failed: %s; tracing off", strerror(errno));
}

void stage_trace_phase(struct stage *s, enum run_phase ph, uint64_t t0_ns, uint64_t t1_ns)
{
    stage_trace(s, 0, RUN_SPAN_PHASE | (uint32_t)ph, t0_ns, t1_ns);
}

void stage_ready(struct stage *s)
{
    if (s->ready)
        return;
    s->ready = true;
    stage_trace_phase(s, RUN_PHASE_STARTUP, s->t_open_ns, sl_now_ns());
}

void stage_close(struct stage *s)
{
    if (s->trace_fd >= 0)
        close(s->trace_fd);
    s->trace_fd = -1;
    if (s->block && atomic_load(&s->block->state) == METRICS_RUNNING)
        metrics_set_state(s->block, METRICS_DONE);
    if (s->has_fb)
        featbuf_free(&s->fb);
    if (s->has_in)
        ring_free(&s->in);
    if (s->has_out)
        ring_free(&s->out);
    arena_free(&s->arena);
    metrics_free(&s->page);
    free(s->fault_mem);
    s->fault_mem = NULL;
    s->block = NULL;
}

/* Runs op (a ring or arena call with a timeout) until it is not a timeout,
 * heartbeating between tries and counting the time as waiting. */
#define STAGE_WAIT_LOOP(s, what, call)                                                                                 \
    for (;;) {                                                                                                         \
        uint64_t t0_ = sl_now_ns();                                                                               \
        int rc_ = (call);                                                                                              \
        metrics_add(&(s)->block->wait_ns, sl_now_ns() - t0_);                                                     \
        metrics_heartbeat((s)->block);                                                                                 \
        if (rc_ == 0 || rc_ == -EPIPE)                                                                                 \
            return rc_;                                                                                                \
        if (rc_ != -ETIMEDOUT && rc_ != -EINTR && rc_ != -EAGAIN)                                                      \
            stage_fail((s), "%s: %s", (what), strerror(-rc_));                                                         \
    }

int stage_pop(struct stage *s, struct run_desc *d)
{
    STAGE_WAIT_LOOP(s, "popping from the input queue", ring_pop(&s->in, d, STAGE_POLL_MS));
}

int stage_push(struct stage *s, const struct run_desc *d)
{
    STAGE_WAIT_LOOP(s, "pushing to the output queue", ring_push(&s->out, d, STAGE_POLL_MS));
}

int stage_alloc(struct stage *s, uint32_t *slot)
{
    STAGE_WAIT_LOOP(s, "taking a batch arena slot", arena_alloc(&s->arena, slot, STAGE_POLL_MS));
}

void stage_end_output(struct stage *s)
{
    if (s->has_out)
        ring_producer_done(&s->out);
}

void stage_view(struct stage *s, const struct run_desc *d, unsigned flags, struct batch_view *v)
{
    char err[512];
    void *slot = arena_slot(&s->arena, d->slot);
    if (!slot)
        stage_fail(s, "batch %" PRIu64 ": descriptor names arena slot %" PRIu32 " of %" PRIu32, d->batch, d->slot,
                   s->arena.nslots);
    if (batch_view(slot, s->arena.slot_size, flags, v, err, sizeof err) != 0)
        stage_fail(s, "batch %" PRIu64 " in arena slot %" PRIu32 " is damaged: %s", d->batch, d->slot, err);
    if (v->h.batch != d->batch || v->h.epoch != d->epoch || v->h.rank != (uint32_t)s->args.rank)
        stage_fail(s,
                   "arena slot %" PRIu32 " holds batch %" PRIu64 " of epoch %" PRIu32 " rank %" PRIu32
                   ", not batch %" PRIu64 " of epoch %" PRIu32 " as its descriptor says",
                   d->slot, v->h.batch, v->h.epoch, v->h.rank, d->batch, d->epoch);
}

/* ---- ordered hand-off ------------------------------------------------------------------- */

void stage_schedule(struct stage *s, struct schedule *out)
{
    char msg[512];
    struct schedule_params p = {
        .rank = run_global_rank(&s->args),
        .ranks = run_world(&s->args),
        .batch_size = s->plan.shape.batch_size,
        .epochs = (uint32_t)s->cfg.train.epochs,
        .eval_every = (uint32_t)s->cfg.train.eval_every,
        .test_with_val = s->cfg.train.early_stop_patience > 0,
        .seed = (uint64_t)s->cfg.train.seed,
    };
    schedule_split_sizes(&s->meta, p.split_n);
    if (s->args.predict != RUN_PREDICT_NONE) { /* one pass over the predicted nodes (schedule.h) */
        schedule_predict_sizes(&s->meta, s->args.predict, p.split_n);
        p.epochs = 1;
        p.test_with_val = false;
    }
    static char arg[8300]; /* the schedule keeps a pointer to it (schedule_params.arg) */
    const struct schedule_ops *ops = schedule_find(SCHEDULE_DEFAULT);
    if (s->args.predict == RUN_PREDICT_NONE) {
        ops = schedule_for_config(&s->cfg, arg, sizeof arg);
        p.arg = arg[0] ? arg : NULL;
    }
    if (schedule_open(out, ops, &p, msg, sizeof msg) != 0)
        stage_fail(s, "%s", msg);
    if (s->args.start_epoch >= p.epochs)
        stage_fail(s, "--start-epoch=%" PRIu32 " is not below train.epochs = %" PRIu32, s->args.start_epoch,
                   p.epochs);
}

void stage_turn_init(struct stage_turn *t, uint64_t first)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, &ca);
    pthread_condattr_destroy(&ca);
    t->next = first;
    t->aborted = false;
}

void stage_turn_destroy(struct stage_turn *t)
{
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mu);
}

int stage_turn_wait(struct stage *s, struct stage_turn *t, uint64_t seq)
{
    int rc = 0;
    uint64_t t0 = sl_now_ns();
    pthread_mutex_lock(&t->mu);
    while (!t->aborted && t->next != seq) {
        struct timespec dl;
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_nsec += STAGE_POLL_MS * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&t->cv, &t->mu, &dl);
        metrics_heartbeat(s->block);
    }
    if (t->aborted)
        rc = -EPIPE;
    pthread_mutex_unlock(&t->mu);
    metrics_add(&s->block->wait_ns, sl_now_ns() - t0);
    return rc;
}

void stage_turn_done(struct stage_turn *t, uint64_t seq)
{
    pthread_mutex_lock(&t->mu);
    if (t->next == seq)
        t->next = seq + 1;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

void stage_turn_abort(struct stage_turn *t)
{
    pthread_mutex_lock(&t->mu);
    t->aborted = true;
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}
