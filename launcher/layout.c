/* layout.c - the processes, shared objects and stage command line of a run
 * (the contract is in layout.h and docs/architecture.md). */
#include "launcher/layout.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static const char *const programs[LAYOUT_STAGES] = {"gnn-sampler", "gnn-extractor", "gnn-trainer", "gnn-releaser"};
static const char *const queue_names[LAYOUT_QUEUES] = {"extract", "train", "release"};

const char *layout_stage_program(enum layout_stage s)
{
    return (unsigned)s < LAYOUT_STAGES ? programs[s] : "?";
}

const char *layout_stage_name(enum layout_stage s)
{
    return (unsigned)s < LAYOUT_STAGES ? programs[s] + 4 : "?"; /* past "gnn-" */
}

int layout_stage_from_program(const char *prog)
{
    if (!prog)
        return -1;
    const char *base = strrchr(prog, '/');
    base = base ? base + 1 : prog;
    for (int s = 0; s < LAYOUT_STAGES; s++)
        if (!strcmp(base, programs[s]) || !strcmp(base, programs[s] + 4))
            return s;
    return -1;
}

const char *layout_queue_name(enum layout_queue q)
{
    return (unsigned)q < LAYOUT_QUEUES ? queue_names[q] : "?";
}

int layout_stage_input(enum layout_stage s)
{
    return s >= LAYOUT_EXTRACTOR && s < LAYOUT_STAGES ? (int)s - 1 : -1;
}

int layout_stage_output(enum layout_stage s)
{
    return s < LAYOUT_RELEASER ? (int)s : -1;
}

int layout_metrics_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen)
{
    return shm_name(out, len, run_id, "metrics", err, errlen);
}

static void queue_object(char *out, size_t len, enum layout_queue q, int rank)
{
    snprintf(out, len, "r%d.%s", rank, layout_queue_name(q));
}

int layout_queue_segname(char *out, size_t len, const char *run_id, enum layout_queue q, int rank, char *err,
                         size_t errlen)
{
    if ((unsigned)q >= LAYOUT_QUEUES || rank < 0 || rank >= LAYOUT_RANKS_MAX)
        return sl_errf(err, errlen, -EINVAL, "no queue %d of rank %d", (int)q, rank);
    char obj[SHM_OBJECT_MAX];
    queue_object(obj, sizeof obj, q, rank);
    return shm_name(out, len, run_id, obj, err, errlen);
}

static uint32_t pow2_at_least(int64_t n)
{
    uint32_t c = 2;
    while ((int64_t)c < n && c < RING_CAPACITY_MAX)
        c <<= 1;
    return c;
}

void layout_queue_params(const sl_config *c, enum layout_queue q, struct ring_params *p)
{
    int64_t want = q == LAYOUT_Q_EXTRACT ? c->pipeline.extract_queue
                   : q == LAYOUT_Q_TRAIN ? c->pipeline.train_queue
                                         : c->pipeline.extract_queue + c->pipeline.train_queue;
    *p =
        (struct ring_params){.entry_size = sizeof(struct layout_desc), .capacity = pow2_at_least(want), .producers = 1};
}

/* ---- launcher side -------------------------------------------------------------- */

int layout_create(struct layout *l, const char *run_id, const sl_config *c, int ranks, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    if (ranks < 1 || ranks > LAYOUT_RANKS_MAX)
        return sl_errf(err, errlen, -EINVAL, "%d ranks is outside 1..%d", ranks, LAYOUT_RANKS_MAX);
    int rc = shm_run_id_check(run_id, err, errlen);
    if (rc)
        return rc;
    snprintf(l->run_id, sizeof l->run_id, "%s", run_id);
    l->ranks = ranks;
    rc = metrics_create(&l->metrics, run_id, "metrics", (uint32_t)ranks * LAYOUT_STAGES, err, errlen);
    if (rc)
        goto err;
    l->queues = calloc((size_t)ranks * LAYOUT_QUEUES, sizeof *l->queues);
    if (!l->queues) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for %d ranks' queue handles", ranks);
        goto err;
    }
    for (int r = 0; r < ranks; r++)
        for (int q = 0; q < LAYOUT_QUEUES; q++) {
            char obj[SHM_OBJECT_MAX];
            struct ring_params p;
            queue_object(obj, sizeof obj, (enum layout_queue)q, r);
            layout_queue_params(c, (enum layout_queue)q, &p);
            rc = ring_create(&l->queues[r * LAYOUT_QUEUES + q], run_id, obj, &p, err, errlen);
            if (rc)
                goto err;
        }
    return 0;

err:
    layout_free(l);
    shm_run_unlink(run_id);
    return rc;
}

struct ring *layout_queue(const struct layout *l, int rank, enum layout_queue q)
{
    if (!l || !l->queues || rank < 0 || rank >= l->ranks || (unsigned)q >= LAYOUT_QUEUES)
        return NULL;
    struct ring *r = &l->queues[rank * LAYOUT_QUEUES + q];
    return r->sh ? r : NULL;
}

void layout_close_queues(struct layout *l)
{
    if (!l || !l->queues)
        return;
    for (int i = 0; i < l->ranks * LAYOUT_QUEUES; i++)
        if (l->queues[i].sh)
            ring_close(&l->queues[i]);
}

void layout_free(struct layout *l)
{
    if (!l)
        return;
    if (l->queues)
        for (int i = 0; i < l->ranks * LAYOUT_QUEUES; i++)
            ring_free(&l->queues[i]);
    free(l->queues);
    metrics_free(&l->metrics);
    memset(l, 0, sizeof *l);
}

/* ---- the stage command line ----------------------------------------------------- */

/* Packs argument strings one after another into a buffer. */
struct argpack {
    char *buf;
    size_t len, used;
    char **argv;
    int n, max;
    bool full;
};

static void pack(struct argpack *p, const char *fmt, ...) SL_PRINTF(2, 3);
static void pack(struct argpack *p, const char *fmt, ...)
{
    if (p->full)
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(p->buf + p->used, p->len - p->used, fmt, ap);
    va_end(ap);
    if (k < 0 || p->used + (size_t)k + 1 > p->len || p->n + 1 >= p->max) {
        p->full = true;
        return;
    }
    p->argv[p->n++] = p->buf + p->used;
    p->used += (size_t)k + 1;
}

int layout_args_build(const struct layout_args *a, char *buf, size_t len, char **argv, int max, char *err,
                      size_t errlen)
{
    if ((unsigned)a->stage >= LAYOUT_STAGES || max < LAYOUT_ARGV_MAX || len == 0)
        return sl_errf(err, errlen, -EINVAL, "bad stage %d or argv room %d", (int)a->stage, max);
    struct argpack p = {.buf = buf, .len = len, .argv = argv, .max = max};
    pack(&p, "%s", layout_stage_program(a->stage));
    pack(&p, "--run=%s", a->run_id);
    pack(&p, "--rank=%d", a->rank);
    pack(&p, "--ranks=%d", a->ranks);
    pack(&p, "--run-dir=%s", a->run_dir);
    pack(&p, "--config=%s", a->config);
    pack(&p, "--metrics-block=%" PRIu32, a->metrics_block);
    if (a->resume)
        pack(&p, "--resume");
    if (p.full)
        return sl_errf(err, errlen, -ENAMETOOLONG, "command line of %s does not fit %zu bytes",
                       layout_stage_program(a->stage), len);
    argv[p.n] = NULL;
    return 0;
}

/* Reads a decimal int in [lo, hi] from s into *out; false if it is not one. */
static bool parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

int layout_args_parse(int argc, char **argv, struct layout_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    a->rank = a->ranks = -1;
    int stage = layout_stage_from_program(argc > 0 ? argv[0] : NULL);
    if (stage < 0)
        return sl_errf(err, errlen, -EINVAL,
                       "'%s' is not a stage program (gnn-sampler, gnn-extractor, "
                       "gnn-trainer, gnn-releaser)",
                       argc > 0 && argv[0] ? argv[0] : "");
    a->stage = (enum layout_stage)stage;
    const char *prog = layout_stage_program(a->stage);
    long block = -1;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--resume")) {
            a->resume = true;
            continue;
        }
        static const char *const names[] = {"--run", "--rank", "--ranks", "--run-dir", "--config", "--metrics-block"};
        int which = -1;
        const char *val = NULL;
        for (int k = 0; k < (int)SL_ARRAY_LEN(names) && which < 0; k++) {
            size_t n = strlen(names[k]);
            if (strncmp(arg, names[k], n) != 0)
                continue;
            if (arg[n] == '=') {
                which = k;
                val = arg + n + 1;
            } else if (arg[n] == '\0') {
                which = k;
                if (i + 1 >= argc)
                    return sl_errf(err, errlen, -EINVAL, "%s: %s needs a value", prog, arg);
                val = argv[++i];
            }
        }
        long v;
        switch (which) {
        case 0:
            if (shm_run_id_check(val, err, errlen) != 0)
                return -EINVAL;
            snprintf(a->run_id, sizeof a->run_id, "%s", val);
            break;
        case 1:
        case 2:
            if (!parse_int(val, which == 1 ? 0 : 1, LAYOUT_RANKS_MAX - (which == 1), &v))
                return sl_errf(err, errlen, -EINVAL, "%s: %s=%s is not an integer in range", prog, names[which], val);
            *(which == 1 ? &a->rank : &a->ranks) = (int)v;
            break;
        case 3:
        case 4: {
            char *dst = which == 3 ? a->run_dir : a->config;
            if (!*val || strlen(val) >= PATH_MAX)
                return sl_errf(err, errlen, -EINVAL, "%s: %s needs a path shorter than %d bytes", prog, names[which],
                               PATH_MAX);
            snprintf(dst, PATH_MAX, "%s", val);
            break;
        }
        case 5:
            if (!parse_int(val, 0, (long)METRICS_BLOCKS_MAX - 1, &block))
                return sl_errf(err, errlen, -EINVAL, "%s: --metrics-block=%s is not a block index", prog, val);
            break;
        default:
            return sl_errf(err, errlen, -EINVAL,
                           "%s: unknown argument '%s'; stages are started by gnnlaunch "
                           "(see docs/architecture.md)",
                           prog, arg);
        }
    }
    if (!a->run_id[0] || a->rank < 0 || a->ranks < 0 || !a->run_dir[0] || !a->config[0] || block < 0)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: missing --run, --rank, --ranks, --run-dir, --config or "
                       "--metrics-block; stages are started by gnnlaunch",
                       prog);
    if (a->rank >= a->ranks)
        return sl_errf(err, errlen, -EINVAL, "%s: --rank=%d is not below --ranks=%d", prog, a->rank, a->ranks);
    if ((uint32_t)block != layout_block(a->rank, a->stage))
        return sl_errf(err, errlen, -EINVAL,
                       "%s: --metrics-block=%ld does not belong to rank %d (expected %" PRIu32 ")", prog, block,
                       a->rank, layout_block(a->rank, a->stage));
    a->metrics_block = (uint32_t)block;
    return 0;
}
