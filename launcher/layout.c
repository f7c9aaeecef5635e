/* layout.c - the processes, shared objects and stage command line of a run
 * (the contract is in layout.h and docs/architecture.md). */
#include "launcher/layout.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/util.h"

_Static_assert(BATCH_LAYERS_MAX == SL_MAX_LAYERS, "a batch holds as many layers as a config may ask for");

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

static void arena_object(char *out, size_t len, int rank)
{
    snprintf(out, len, "r%d.arena", rank);
}

int layout_arena_segname(char *out, size_t len, const char *run_id, int rank, char *err, size_t errlen)
{
    if (rank < 0 || rank >= LAYOUT_RANKS_MAX)
        return sl_errf(err, errlen, -EINVAL, "no arena of rank %d", rank);
    char obj[SHM_OBJECT_MAX];
    arena_object(obj, sizeof obj, rank);
    return shm_name(out, len, run_id, obj, err, errlen);
}

void layout_trace_name(char *out, size_t len, enum layout_stage s, int rank)
{
    snprintf(out, len, "trace.%s.%d", layout_stage_name(s), rank);
}

int layout_featbuf_segname(char *out, size_t len, const char *run_id, int rank, char *err, size_t errlen)
{
    if (rank < 0 || rank >= LAYOUT_RANKS_MAX)
        return sl_errf(err, errlen, -EINVAL, "no feature buffer of rank %d", rank);
    char obj[SHM_OBJECT_MAX];
    snprintf(obj, sizeof obj, "r%d.featbuf", rank);
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

/* ---- sizing the batch arenas ---------------------------------------------------------- */

#define INDPTR_CHUNK 65536 /* indptr entries per read (512 KiB) */

int layout_max_in_degree(const char *dir, const sl_dataset_meta *m, uint64_t *out, char *err, size_t errlen)
{
    const sl_dsfile *f = &m->f[SL_F_INDPTR];
    char path[PATH_MAX];
    if (sl_path_join(path, sizeof path, dir, f->file) != 0)
        return sl_errf(err, errlen, -ENAMETOOLONG, "%s/%s: path too long", dir, f->file);
    uint64_t count;
    if (f->dtype != SL_DT_U64 || sl_add_ovf(m->nodes, 1, &count))
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

/* "[10, -1, 5]" into buf. */
static const char *fanouts_str(const int64_t *f, int64_t n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int64_t k = 0; k < n && used + 1 < len; k++) {
        int w = snprintf(buf + used, len - used, "%s%" PRId64, k ? ", " : "[", f[k]);
        used += w > 0 ? (size_t)w : 0;
    }
    if (used + 1 < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

int layout_arena_plan(const sl_config *c, const sl_dataset_meta *m, struct layout_arena_plan *p, char *err,
                      size_t errlen)
{
    memset(p, 0, sizeof *p);
    struct batch_shape *s = &p->shape;
    s->batch_size = (uint64_t)c->train.batch_size;
    s->layers = (uint32_t)c->model.n_fanouts;
    s->nodes = m->nodes;
    s->edges = m->edges;
    s->max_in_degree = BATCH_UNKNOWN;
    bool all = false;
    for (int64_t k = 0; k < c->model.n_fanouts && k < BATCH_LAYERS_MAX; k++) {
        s->fanouts[k] = c->model.fanouts[k];
        all |= c->model.fanouts[k] < 0;
    }
    if (all) {
        int rc = layout_max_in_degree(c->dataset.path, m, &s->max_in_degree, err, errlen);
        if (rc)
            return rc;
    }
    char msg[768], fan[160];
    int rc = batch_plan(s, &p->batch, msg, sizeof msg);
    if (rc)
        return sl_errf(err, errlen, rc, "model.fanouts = %s, train.batch_size = %" PRId64 ": %s",
                       fanouts_str(c->model.fanouts, c->model.n_fanouts, fan, sizeof fan), c->train.batch_size, msg);
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
                       fanouts_str(c->model.fanouts, c->model.n_fanouts, fan, sizeof fan), c->train.batch_size, slots,
                       p->batch.max_bytes);
    return 0;
}

int layout_arena_check(const struct layout_arena_plan *p, int ranks, uint64_t mem_available, uint64_t shm_free,
                       char *err, size_t errlen)
{
    uint64_t total;
    bool ovf = sl_mul_ovf(p->rank_bytes, (uint64_t)(ranks > 0 ? ranks : 1), &total);
    const char *limit = NULL;
    char have[32], need[32], slot[32], what[160];
    if (mem_available != UINT64_MAX && (ovf || total > mem_available / 2)) {
        snprintf(what, sizeof what, "more than half of the %s of available memory (MemAvailable)",
                 sl_fmt_bytes(mem_available, have, sizeof have));
        limit = what;
    } else if (shm_free != UINT64_MAX && (ovf || total > shm_free)) {
        snprintf(what, sizeof what,
                 "more than the %s free in " SHM_DIR " (a stage would die of SIGBUS when it "
                 "fills up; a container needs a larger --shm-size)",
                 sl_fmt_bytes(shm_free, have, sizeof have));
        limit = what;
    }
    if (!limit)
        return 0;
    char deg[64] = "";
    if (p->shape.max_in_degree != BATCH_UNKNOWN)
        snprintf(deg, sizeof deg, ", max in-degree %" PRIu64, p->shape.max_in_degree);
    char fan[160];
    fanouts_str(p->shape.fanouts, p->shape.layers, fan, sizeof fan);
    return sl_errf(err, errlen, -ENOMEM,
                   "the batch arenas would need %s%s (%d rank%s x %" PRIu32 " slots x %s for a worst-case batch of "
                   "train.batch_size = %" PRIu64 " targets with model.fanouts = %s: up to %" PRIu64
                   " nodes%s), %s; lower train.batch_size, use smaller (finite) model.fanouts, or lower "
                   "pipeline.extract_queue, pipeline.train_queue, pipeline.samplers or pipeline.extractors "
                   "(or pipeline.ranks)",
                   ovf ? "more than " : "", sl_fmt_bytes(ovf ? UINT64_MAX : total, need, sizeof need), ranks,
                   ranks == 1 ? "" : "s", p->params.nslots, sl_fmt_bytes(p->params.slot_size, slot, sizeof slot),
                   p->shape.batch_size, fan, p->batch.n_max[p->shape.layers], deg, limit);
}

int layout_featbuf_plan(const sl_config *c, const sl_dataset_meta *m, const struct layout_arena_plan *a,
                        struct layout_featbuf_plan *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    const sl_dsfile *f = &m->f[SL_F_FEATURES];
    if (!f->present || f->cols == 0)
        return sl_errf(err, errlen, -EINVAL, "dataset %s has no features.bin; gnnlaunch trains on node features",
                       c->dataset.path);
    uint64_t row_bytes = f->cols * sl_dtype_size(f->dtype);
    p->stride = sl_round_up(row_bytes, FEATBUF_ROW_ALIGN_DEFAULT);
    uint64_t n_max = a->batch.n_max[a->shape.layers], reserve, bytes, slots;
    if (sl_mul_ovf((uint64_t)c->pipeline.extractors, n_max, &reserve) ||
        sl_mul_ovf((uint64_t)c->pipeline.feature_buffer_mb, 1ull << 20, &bytes))
        return sl_errf(err, errlen, -EOVERFLOW, "pipeline.extractors x batch nodes or pipeline.feature_buffer_mb overflows");
    p->reserve = SL_MIN(reserve, m->nodes);
    slots = SL_MIN(bytes / p->stride, m->nodes);
    slots = SL_MIN(slots, (uint64_t)FEATBUF_SLOTS_MAX);
    char have[32], need[32];
    if (slots < p->reserve) {
        uint64_t mb = (p->reserve * p->stride + (1ull << 20) - 1) >> 20;
        char fan[160];
        fanouts_str(c->model.fanouts, c->model.n_fanouts, fan, sizeof fan);
        return sl_errf(err, errlen, -EINVAL,
                       "pipeline.feature_buffer_mb = %" PRId64 " holds %" PRIu64 " rows of %" PRIu64
                       " bytes, but %" PRId64 " extractor thread%s with batches of up to %" PRIu64
                       " nodes (train.batch_size = %" PRId64 ", model.fanouts = %s) need %" PRIu64
                       " slots so extraction cannot deadlock; raise pipeline.feature_buffer_mb to at least %" PRIu64
                       ", or lower pipeline.extractors, train.batch_size or model.fanouts",
                       c->pipeline.feature_buffer_mb, slots, p->stride, c->pipeline.extractors,
                       c->pipeline.extractors == 1 ? "" : "s", n_max, c->train.batch_size, fan, p->reserve, mb);
    }
    p->params = (struct featbuf_params){
        .n_nodes = m->nodes,
        .nslots = (uint32_t)slots,
        .row_bytes = (size_t)row_bytes,
        .row_align = FEATBUF_ROW_ALIGN_DEFAULT,
        .policy = FEATBUF_POLICY_LRU,
    };
    p->rank_bytes = featbuf_mem_size(&p->params);
    if (p->rank_bytes == 0)
        return sl_errf(err, errlen, -EOVERFLOW, "a feature buffer of %" PRIu64 " slots x %" PRIu64
                       " bytes for %" PRIu64 " nodes is too large", slots, p->stride, m->nodes);
    uint64_t staging = (uint64_t)c->pipeline.staging_mb << 20;
    uint64_t threads = (uint64_t)c->pipeline.ranks * (uint64_t)c->pipeline.extractors;
    p->staging_per_thread = staging / threads / 4096 * 4096;
    uint64_t one = sl_round_up(f->row_stride, 4096) + 4096, depth_bytes;
    p->staging_used = sl_mul_ovf((uint64_t)c->pipeline.io_depth, one, &depth_bytes)
                          ? p->staging_per_thread
                          : SL_MIN(p->staging_per_thread, depth_bytes);
    if (p->staging_per_thread < one)
        return sl_errf(err, errlen, -EINVAL,
                       "pipeline.staging_mb = %" PRId64 " gives each of the %" PRIu64
                       " extractor threads (pipeline.ranks x pipeline.extractors) %s, less than one row's read (%s); "
                       "raise pipeline.staging_mb",
                       c->pipeline.staging_mb, threads, sl_fmt_bytes(p->staging_per_thread, have, sizeof have),
                       sl_fmt_bytes(one, need, sizeof need));
    return 0;
}

int layout_featbuf_check(const struct layout_featbuf_plan *f, const struct layout_arena_plan *a, int ranks,
                         uint64_t mem_available, uint64_t shm_free, char *err, size_t errlen)
{
    uint64_t per = f->rank_bytes + a->rank_bytes, total;
    bool ovf = per < f->rank_bytes || sl_mul_ovf(per, (uint64_t)(ranks > 0 ? ranks : 1), &total);
    char have[32], need[32], fb[32];
    const char *limit = NULL;
    if (mem_available != UINT64_MAX && (ovf || total > mem_available / 2))
        limit = "half of the available memory (MemAvailable)";
    else if (shm_free != UINT64_MAX && (ovf || total > shm_free))
        limit = "what is free in " SHM_DIR " (a container needs a larger --shm-size)";
    if (!limit)
        return 0;
    return sl_errf(err, errlen, -ENOMEM,
                   "the feature buffers and batch arenas would need %s (%d rank%s x (%s feature buffer + %s arena)), "
                   "more than %s, which is %s; lower pipeline.feature_buffer_mb (or pipeline.ranks)",
                   sl_fmt_bytes(ovf ? UINT64_MAX : total, need, sizeof need), ranks, ranks == 1 ? "" : "s",
                   sl_fmt_bytes(f->rank_bytes, fb, sizeof fb), sl_fmt_bytes(a->rank_bytes, have, sizeof have), limit,
                   sl_fmt_bytes(mem_available != UINT64_MAX && (ovf || total > mem_available / 2) ? mem_available
                                                                                               : shm_free,
                                have, sizeof have));
}

int layout_memory(uint64_t *mem_available, uint64_t *shm_free, char *err, size_t errlen)
{
    *mem_available = *shm_free = UINT64_MAX;
    int rc = 0;
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f) {
        rc = sl_errf(err, errlen, -errno, "/proc/meminfo: %s", strerror(errno));
    } else {
        char line[256];
        unsigned long long kib;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1 && kib <= UINT64_MAX / 1024)
                *mem_available = (uint64_t)kib * 1024;
        fclose(f);
        if (*mem_available == UINT64_MAX)
            rc = sl_errf(err, errlen, -ENOENT, "/proc/meminfo has no MemAvailable line");
    }
    struct statvfs vfs;
    uint64_t bytes;
    if (statvfs(SHM_DIR, &vfs) != 0)
        rc = rc ? rc : sl_errf(err, errlen, -errno, SHM_DIR ": %s", strerror(errno));
    else if (!sl_mul_ovf(vfs.f_bavail, vfs.f_frsize, &bytes))
        *shm_free = bytes;
    return rc;
}

/* ---- launcher side -------------------------------------------------------------- */

int layout_allreduce_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen)
{
    return shm_name(out, len, run_id, "allreduce", err, errlen);
}

int layout_results_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen)
{
    return shm_name(out, len, run_id, "results", err, errlen);
}

int layout_create(struct layout *l, const char *run_id, const sl_config *c, int ranks, const struct layout_objects *o,
                  char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    const struct arena_params *arena = o ? o->arena : NULL;
    const struct featbuf_params *fb = o ? o->featbuf : NULL;
    if (ranks < 1 || ranks > LAYOUT_RANKS_MAX || !arena)
        return sl_errf(err, errlen, -EINVAL, "%d ranks is outside 1..%d, or no arena shape", ranks, LAYOUT_RANKS_MAX);
    int rc = shm_run_id_check(run_id, err, errlen);
    if (rc)
        return rc;
    snprintf(l->run_id, sizeof l->run_id, "%s", run_id);
    l->ranks = ranks;
    rc = metrics_create(&l->metrics, run_id, "metrics", (uint32_t)ranks * LAYOUT_STAGES, err, errlen);
    if (rc)
        goto err;
    l->queues = calloc((size_t)ranks * LAYOUT_QUEUES, sizeof *l->queues);
    l->arenas = calloc((size_t)ranks, sizeof *l->arenas);
    if (fb)
        l->featbufs = calloc((size_t)ranks, sizeof *l->featbufs);
    if (!l->queues || !l->arenas || (fb && !l->featbufs)) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for %d ranks' queue and arena handles", ranks);
        goto err;
    }
    for (int r = 0; r < ranks; r++) {
        char obj[SHM_OBJECT_MAX];
        for (int q = 0; q < LAYOUT_QUEUES; q++) {
            struct ring_params p;
            queue_object(obj, sizeof obj, (enum layout_queue)q, r);
            layout_queue_params(c, (enum layout_queue)q, &p);
            rc = ring_create(&l->queues[r * LAYOUT_QUEUES + q], run_id, obj, &p, err, errlen);
            if (rc)
                goto err;
        }
        arena_object(obj, sizeof obj, r);
        rc = arena_create(&l->arenas[r], run_id, obj, arena, err, errlen);
        if (rc)
            goto err;
        if (fb) {
            snprintf(obj, sizeof obj, "r%d.featbuf", r);
            rc = featbuf_create(&l->featbufs[r], run_id, obj, fb, err, errlen);
            if (rc)
                goto err;
        }
    }
    if (o->allreduce_floats &&
        (rc = allreduce_create(&l->allreduce, run_id, "allreduce", (uint32_t)ranks, o->allreduce_floats, err,
                               errlen)) != 0)
        goto err;
    if (o->epochs && (rc = results_create(&l->results, run_id, "results", (uint32_t)ranks, o->epochs, err, errlen)) != 0)
        goto err;
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

struct arena *layout_arena(const struct layout *l, int rank)
{
    if (!l || !l->arenas || rank < 0 || rank >= l->ranks)
        return NULL;
    struct arena *a = &l->arenas[rank];
    return a->hdr ? a : NULL;
}

struct featbuf *layout_featbuf(const struct layout *l, int rank)
{
    if (!l || !l->featbufs || rank < 0 || rank >= l->ranks)
        return NULL;
    struct featbuf *f = &l->featbufs[rank];
    return f->hdr ? f : NULL;
}

void layout_close(struct layout *l)
{
    if (!l)
        return;
    for (int r = 0; l->featbufs && r < l->ranks; r++)
        if (l->featbufs[r].hdr)
            featbuf_mark_broken(&l->featbufs[r]);
    if (l->allreduce.sh)
        allreduce_close(&l->allreduce);
    for (int i = 0; l->queues && i < l->ranks * LAYOUT_QUEUES; i++)
        if (l->queues[i].sh)
            ring_close(&l->queues[i]);
    for (int r = 0; l->arenas && r < l->ranks; r++)
        if (l->arenas[r].hdr)
            arena_close(&l->arenas[r]);
}

void layout_free(struct layout *l)
{
    if (!l)
        return;
    if (l->queues)
        for (int i = 0; i < l->ranks * LAYOUT_QUEUES; i++)
            ring_free(&l->queues[i]);
    if (l->arenas)
        for (int r = 0; r < l->ranks; r++)
            arena_free(&l->arenas[r]);
    if (l->featbufs)
        for (int r = 0; r < l->ranks; r++)
            featbuf_free(&l->featbufs[r]);
    free(l->queues);
    free(l->arenas);
    free(l->featbufs);
    if (l->allreduce.sh)
        allreduce_free(&l->allreduce);
    results_free(&l->results);
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
    if (a->start_epoch)
        pack(&p, "--start-epoch=%" PRIu32, a->start_epoch);
    if (a->resume)
        pack(&p, "--resume");
    if (a->trace)
        pack(&p, "--trace");
    if (a->nodes > 1) {
        pack(&p, "--node=%d", a->node);
        pack(&p, "--nodes=%d", a->nodes);
    }
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
    a->nodes = 1;
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
        if (!strcmp(arg, "--trace")) {
            a->trace = true;
            continue;
        }
        static const char *const names[] = {"--run",    "--rank",          "--ranks",       "--run-dir", "--config",
                                            "--metrics-block", "--start-epoch", "--node", "--nodes"};
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
        case 6:
            if (!parse_int(val, 0, 1000000, &v))
                return sl_errf(err, errlen, -EINVAL, "%s: --start-epoch=%s is not an epoch number", prog, val);
            a->start_epoch = (uint32_t)v;
            break;
        case 7:
        case 8:
            if (!parse_int(val, which == 7 ? 0 : 1, LAYOUT_WORLD_MAX - (which == 7), &v))
                return sl_errf(err, errlen, -EINVAL, "%s: %s=%s is not an integer in range", prog, names[which], val);
            *(which == 7 ? &a->node : &a->nodes) = (int)v;
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
    if (a->node >= a->nodes || (uint64_t)a->nodes * (uint64_t)a->ranks > LAYOUT_WORLD_MAX)
        return sl_errf(err, errlen, -EINVAL, "%s: --node=%d of --nodes=%d with --ranks=%d is out of range", prog,
                       a->node, a->nodes, a->ranks);
    if ((uint32_t)block != layout_block(a->rank, a->stage))
        return sl_errf(err, errlen, -EINVAL,
                       "%s: --metrics-block=%ld does not belong to rank %d (expected %" PRIu32 ")", prog, block,
                       a->rank, layout_block(a->rank, a->stage));
    a->metrics_block = (uint32_t)block;
    return 0;
}
