/* run.c - the run contract: stage and queue kinds, shared-object names,
 * batch arena plan and the stage command line (the contract is in run.h
 * and docs/architecture.md). */
#include "ipc/run.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/opt.h"
#include "core/util.h"


static const char *const programs[RUN_STAGES] = {"gnn-sampler", "gnn-extractor", "gnn-trainer", "gnn-releaser"};
static const char *const queue_names[RUN_QUEUES] = {"extract", "train", "release"};

const char *run_stage_program(enum run_stage s)
{
    return (unsigned)s < RUN_STAGES ? programs[s] : "?";
}

const char *run_stage_name(enum run_stage s)
{
    return (unsigned)s < RUN_STAGES ? programs[s] + 4 : "?"; /* past "gnn-" */
}

int run_stage_from_program(const char *prog)
{
    if (!prog)
        return -1;
    const char *base = strrchr(prog, '/');
    base = base ? base + 1 : prog;
    for (int s = 0; s < RUN_STAGES; s++)
        if (!strcmp(base, programs[s]) || !strcmp(base, programs[s] + 4))
            return s;
    if (!strcmp(base, RUN_TRAINER_GPU_PROGRAM))
        return RUN_TRAINER;
    return -1;
}

const char *run_queue_name(enum run_queue q)
{
    return (unsigned)q < RUN_QUEUES ? queue_names[q] : "?";
}

int run_stage_input(enum run_stage s)
{
    return s >= RUN_EXTRACTOR && s < RUN_STAGES ? (int)s - 1 : -1;
}

int run_stage_output(enum run_stage s)
{
    return s < RUN_RELEASER ? (int)s : -1;
}

int run_metrics_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen)
{
    return shm_name(out, len, run_id, "metrics", err, errlen);
}

void run_queue_object(char *out, size_t len, enum run_queue q, int rank)
{
    snprintf(out, len, "r%d.%s", rank, run_queue_name(q));
}

int run_queue_segname(char *out, size_t len, const char *run_id, enum run_queue q, int rank, char *err, size_t errlen)
{
    if ((unsigned)q >= RUN_QUEUES || rank < 0 || rank >= RUN_RANKS_MAX)
        return sl_errf(err, errlen, -EINVAL, "no queue %d of rank %d", (int)q, rank);
    char obj[SHM_OBJECT_MAX];
    run_queue_object(obj, sizeof obj, q, rank);
    return shm_name(out, len, run_id, obj, err, errlen);
}

void run_arena_object(char *out, size_t len, int rank)
{
    snprintf(out, len, "r%d.arena", rank);
}

void run_featbuf_object(char *out, size_t len, int rank)
{
    snprintf(out, len, "r%d.featbuf", rank);
}

int run_arena_segname(char *out, size_t len, const char *run_id, int rank, char *err, size_t errlen)
{
    if (rank < 0 || rank >= RUN_RANKS_MAX)
        return sl_errf(err, errlen, -EINVAL, "no arena of rank %d", rank);
    char obj[SHM_OBJECT_MAX];
    run_arena_object(obj, sizeof obj, rank);
    return shm_name(out, len, run_id, obj, err, errlen);
}

const char *run_phase_name(uint32_t phase)
{
    static const char *const names[RUN_PHASES] = {"start-up", "topology", "warm start"};
    return phase < RUN_PHASES ? names[phase] : "?";
}

void run_trace_name(char *out, size_t len, enum run_stage s, int rank)
{
    snprintf(out, len, "trace.%s.%d", run_stage_name(s), rank);
}

int run_featbuf_segname(char *out, size_t len, const char *run_id, int rank, char *err, size_t errlen)
{
    if (rank < 0 || rank >= RUN_RANKS_MAX)
        return sl_errf(err, errlen, -EINVAL, "no feature buffer of rank %d", rank);
    char obj[SHM_OBJECT_MAX];
    run_featbuf_object(obj, sizeof obj, rank);
    return shm_name(out, len, run_id, obj, err, errlen);
}

/* ---- sizing the batch arenas ---------------------------------------------------------- */

#define INDPTR_CHUNK 65536 /* indptr entries per read (512 KiB) */

int run_max_in_degree(const char *dir, const struct dataset_meta *m, uint64_t *out, char *err, size_t errlen)
{
    const struct dataset_file *f = &m->f[DATASET_INDPTR];
    char path[PATH_MAX];
    if (sl_path_join(path, sizeof path, dir, f->file) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s/%s: path too long", dir, f->file);
    uint64_t count;
    if (f->dtype != DTYPE_U64 || sl_add_ovf(m->nodes, 1, &count))
        return sl_errf(err, errlen, -EINVAL, "%s: not a u64 array of %" PRIu64 " + 1 entries; run gnnprep check", path,
                       m->nodes);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return sl_errf(err, errlen, -errno, "%s: %s", path, strerror(errno));
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    uint64_t *buf = malloc(INDPTR_CHUNK * sizeof *buf);
    int rc = buf ? 0 : sl_errf(err, errlen, -ENOMEM, "out of memory reading %s", path);
    uint64_t prev = 0, max = 0;
    for (uint64_t i = 0; rc == 0 && i < count;) {
        size_t n = (size_t)SL_MIN((uint64_t)INDPTR_CHUNK, count - i), got;
        int r = sl_pread_full(fd, buf, n * sizeof *buf, (off_t)(i * sizeof *buf), &got);
        if (r == -EIO)
            rc = sl_errf(err, errlen, -EINVAL, "%s: ends at entry %" PRIu64 " of %" PRIu64 "; run gnnprep check", path,
                         i + got / sizeof *buf, count);
        else if (r)
            rc = sl_errf(err, errlen, r, "%s: read failed: %s", path, strerror(-r));
        for (size_t j = 0; rc == 0 && j < n; j++) {
            uint64_t v = le64toh(buf[j]);
            if (i + j == 0 ? v != 0 : v < prev)
                rc = sl_errf(err, errlen, -EINVAL,
                             "%s: entry %" PRIu64 " is %" PRIu64 " after %" PRIu64
                             " (CSC offsets start at 0 and never decrease); run gnnprep check",
                             path, i + j, v, prev);
            max = SL_MAX(max, v - prev);
            prev = v;
        }
        i += n;
    }
    if (rc == 0 && prev != m->edges)
        rc = sl_errf(err, errlen, -EINVAL,
                     "%s: ends at %" PRIu64 ", but dataset.toml counts %" PRIu64 " edges; run gnnprep check", path,
                     prev, m->edges);
    free(buf);
    close(fd);
    if (rc == 0)
        *out = max;
    return rc;
}

int run_arena_plan(const struct config *c, const struct dataset_meta *m, struct run_arena_plan *p, char *err,
                   size_t errlen)
{
    memset(p, 0, sizeof *p);
    struct batch_shape *s = &p->shape;
    s->batch_size = (uint64_t)c->train.batch_size;
    s->layers = (uint32_t)c->model.n_fanouts;
    s->nodes = m->nodes;
    s->edges = m->edges;
    s->max_in_degree = BATCH_UNKNOWN;
    s->degrees = c->model.kind == MODEL_GCN && c->model.gcn_norm == GCN_NORM_GRAPH;
    bool all = false;
    for (int64_t k = 0; k < c->model.n_fanouts && k < MODEL_LAYERS_MAX; k++) {
        s->fanouts[k] = c->model.fanouts[k];
        all |= c->model.fanouts[k] < 0;
    }
    if (all) {
        int rc = run_max_in_degree(c->dataset.path, m, &s->max_in_degree, err, errlen);
        if (rc)
            return rc;
    }
    char msg[768], fan[160];
    int rc = batch_plan(s, &p->batch, msg, sizeof msg);
    if (rc)
        return sl_errf(err, errlen, rc, "model.fanouts = %s, train.batch_size = %" PRId64 ": %s",
                       config_fanouts_str(c->model.fanouts, c->model.n_fanouts, fan, sizeof fan), c->train.batch_size,
                       msg);
    p->params.slot_size = (size_t)p->batch.max_bytes;
    uint32_t slots = batch_arena_slots((uint64_t)c->pipeline.extract_queue, (uint64_t)c->pipeline.train_queue,
                                       (uint64_t)c->pipeline.samplers, (uint64_t)c->pipeline.extractors);
    p->params.nslots = SL_MIN(slots, ARENA_SLOTS_MAX);
    size_t bytes = p->batch.max_bytes <= SIZE_MAX / 2 ? arena_mem_size(&p->params) : 0;
    if (bytes == 0 || sl_add_ovf(bytes, SHM_DATA_OFFSET, &p->rank_bytes))
        return sl_errf(err, errlen, -EOVERFLOW,
                       "model.fanouts = %s, train.batch_size = %" PRId64 ": %" PRIu32 " slots of %" PRIu64
                       " bytes are more than an arena can hold; lower train.batch_size or "
                       "model.fanouts",
                       config_fanouts_str(c->model.fanouts, c->model.n_fanouts, fan, sizeof fan), c->train.batch_size,
                       slots, p->batch.max_bytes);
    return 0;
}

int run_allreduce_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen)
{
    return shm_name(out, len, run_id, "allreduce", err, errlen);
}

int run_results_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen)
{
    return shm_name(out, len, run_id, "results", err, errlen);
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

const char *run_predict_name(enum run_predict p)
{
    static const char *const names[] = {"", "all", "train", "val", "test"};
    return (unsigned)p < SL_ARRAY_LEN(names) ? names[p] : "?";
}

int run_predict_parse(const char *s)
{
    for (int p = RUN_PREDICT_ALL; p <= RUN_PREDICT_TEST; p++)
        if (!strcmp(s, run_predict_name((enum run_predict)p)))
            return p;
    return -EINVAL;
}

/* OPT_FN for --predict: a split name into an enum run_predict. */
static int take_predict(const char *val, void *dst, char *err, size_t errlen)
{
    int p = run_predict_parse(val);
    if (p < 0)
        return sl_errf(err, errlen, -EINVAL, "--predict needs all, train, val or test, not '%s'", val);
    *(enum run_predict *)dst = (enum run_predict)p;
    return 0;
}

int run_args_build(const struct run_args *a, char *buf, size_t len, char **argv, int max, char *err, size_t errlen)
{
    if ((unsigned)a->stage >= RUN_STAGES || max < RUN_ARGV_MAX || len == 0)
        return sl_errf(err, errlen, -EINVAL, "bad stage %d or argv room %d", (int)a->stage, max);
    struct argpack p = {.buf = buf, .len = len, .argv = argv, .max = max};
    pack(&p, "%s", run_stage_program(a->stage));
    pack(&p, "--run=%s", a->run_id);
    pack(&p, "--rank=%d", a->rank);
    pack(&p, "--ranks=%d", a->ranks);
    pack(&p, "--run-dir=%s", a->run_dir);
    pack(&p, "--config=%s", a->config);
    pack(&p, "--metrics-block=%" PRIu32, a->metrics_block);
    if (a->start_epoch)
        pack(&p, "--start-epoch=%" PRIu32, a->start_epoch);
    if (a->resume)
        pack(&p, "--resume");
    if (a->trace)
        pack(&p, "--trace");
    if (a->predict != RUN_PREDICT_NONE)
        pack(&p, "--predict=%s", run_predict_name(a->predict));
    if (a->nodes > 1) {
        pack(&p, "--node=%d", a->node);
        pack(&p, "--nodes=%d", a->nodes);
    }
    if (a->device >= 0)
        pack(&p, "--device=%d", a->device);
    if (a->has_nccl_id) {
        char hex[2 * RUN_NCCL_ID_BYTES + 1];
        sl_hex(a->nccl_id, sizeof a->nccl_id, hex);
        pack(&p, "--nccl-id=%s", hex);
    }
    if (p.full)
        return sl_errf(err, errlen, -ENAMETOOLONG, "command line of %s does not fit %zu bytes",
                       run_stage_program(a->stage), len);
    argv[p.n] = NULL;
    return 0;
}

/* OPT_FN for --run: a valid run id into a char[SHM_RUN_ID_MAX]. */
static int take_run_id(const char *val, void *dst, char *err, size_t errlen)
{
    if (shm_run_id_check(val, err, errlen) != 0)
        return -EINVAL;
    snprintf(dst, SHM_RUN_ID_MAX, "%s", val);
    return 0;
}

/* OPT_FN for --nccl-id: 256 hex digits into a struct run_args. */
static int take_nccl_id(const char *val, void *dst, char *err, size_t errlen)
{
    struct run_args *a = dst;
    if (sl_unhex(val, a->nccl_id, sizeof a->nccl_id) != 0)
        return sl_errf(err, errlen, -EINVAL, "--nccl-id needs %d hex digits (an NCCL unique id), got %zu characters",
                       2 * RUN_NCCL_ID_BYTES, strlen(val));
    a->has_nccl_id = true;
    return 0;
}

int run_args_parse(int argc, char **argv, struct run_args *a, char *err, size_t errlen)
{
    memset(a, 0, sizeof *a);
    int stage = run_stage_from_program(argc > 0 ? argv[0] : NULL);
    if (stage < 0)
        return sl_errf(err, errlen, -EINVAL,
                       "'%s' is not a stage program (gnn-sampler, gnn-extractor, "
                       "gnn-trainer, gnn-releaser)",
                       argc > 0 && argv[0] ? argv[0] : "");
    a->stage = (enum run_stage)stage;
    const char *prog = run_stage_program(a->stage);
    int64_t rank = -1, ranks = -1, block = -1, start = 0, node = 0, nodes = 1, device = -1;
    const struct opt opts[] = {
        {.name = "--run", .kind = OPT_FN, .dst = a->run_id, .fn = take_run_id},
        {.name = "--rank", .kind = OPT_INT, .dst = &rank, .lo = 0, .hi = RUN_RANKS_MAX - 1},
        {.name = "--ranks", .kind = OPT_INT, .dst = &ranks, .lo = 1, .hi = RUN_RANKS_MAX},
        {.name = "--run-dir", .kind = OPT_STR, .dst = a->run_dir, .len = PATH_MAX},
        {.name = "--config", .kind = OPT_STR, .dst = a->config, .len = PATH_MAX},
        {.name = "--metrics-block",
         .kind = OPT_INT,
         .dst = &block,
         .lo = 0,
         .hi = (int64_t)METRICS_BLOCKS_MAX - 1,
         .what = "is not a block index"},
        {.name = "--start-epoch",
         .kind = OPT_INT,
         .dst = &start,
         .lo = 0,
         .hi = 1000000,
         .what = "is not an epoch number"},
        {.name = "--node", .kind = OPT_INT, .dst = &node, .lo = 0, .hi = RUN_WORLD_MAX - 1},
        {.name = "--nodes", .kind = OPT_INT, .dst = &nodes, .lo = 1, .hi = RUN_WORLD_MAX},
        {.name = "--device",
         .kind = OPT_INT,
         .dst = &device,
         .lo = 0,
         .hi = RUN_RANKS_MAX - 1,
         .what = "is not a GPU ordinal"},
        {.name = "--nccl-id", .kind = OPT_FN, .dst = a, .fn = take_nccl_id},
        {.name = "--resume", .kind = OPT_FLAG, .dst = &a->resume},
        {.name = "--trace", .kind = OPT_FLAG, .dst = &a->trace},
        {.name = "--predict", .kind = OPT_FN, .dst = &a->predict, .fn = take_predict},
    };
    int rc = opt_parse(prog, opts, (int)SL_ARRAY_LEN(opts), argc, argv, 1, NULL,
                       "; stages are started by gnnlaunch (see docs/architecture.md)", err, errlen);
    if (rc != 0)
        return rc;
    a->rank = (int)rank;
    a->ranks = (int)ranks;
    a->start_epoch = (uint32_t)start;
    a->node = (int)node;
    a->nodes = (int)nodes;
    a->device = (int)device;
    if (!a->run_id[0] || a->rank < 0 || a->ranks < 0 || !a->run_dir[0] || !a->config[0] || block < 0)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: missing --run, --rank, --ranks, --run-dir, --config or "
                       "--metrics-block; stages are started by gnnlaunch",
                       prog);
    if (a->rank >= a->ranks)
        return sl_errf(err, errlen, -EINVAL, "%s: --rank=%d is not below --ranks=%d", prog, a->rank, a->ranks);
    if (a->node >= a->nodes || (uint64_t)a->nodes * (uint64_t)a->ranks > RUN_WORLD_MAX)
        return sl_errf(err, errlen, -EINVAL, "%s: --node=%d of --nodes=%d with --ranks=%d is out of range", prog,
                       a->node, a->nodes, a->ranks);
    if (a->has_nccl_id && a->device < 0)
        return sl_errf(err, errlen, -EINVAL, "%s: --nccl-id needs --device (the rank's GPU)", prog);
    if ((uint32_t)block != run_block(a->rank, a->stage))
        return sl_errf(err, errlen, -EINVAL,
                       "%s: --metrics-block=%ld does not belong to rank %d (expected %" PRIu32 ")", prog, block,
                       a->rank, run_block(a->rank, a->stage));
    a->metrics_block = (uint32_t)block;
    return 0;
}
