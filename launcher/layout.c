/* layout.c - creating, sizing and closing the shared objects of a run
 * (the contract is in layout.h; names and the stage command line are in
 * ipc/run.c). */
#include "launcher/layout.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "core/util.h"

void layout_queue_params(const struct config *c, enum run_queue q, struct ring_params *p)
{
    int64_t want = q == RUN_Q_EXTRACT ? c->pipeline.extract_queue
                   : q == RUN_Q_TRAIN ? c->pipeline.train_queue
                                      : c->pipeline.extract_queue + c->pipeline.train_queue;
    *p = (struct ring_params){
        .entry_size = sizeof(struct run_desc),
        .capacity = (uint32_t)SL_MIN(sl_pow2_at_least(want > 0 ? (uint64_t)want : 0, 2), RING_CAPACITY_MAX),
        .producers = 1};
}

int layout_arena_check(const struct run_arena_plan *p, int ranks, uint64_t mem_available, uint64_t shm_free, char *err,
                       size_t errlen)
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
    config_fanouts_str(p->shape.fanouts, p->shape.layers, fan, sizeof fan);
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

/* The row stride docs/format.md gives rows of row_bytes bytes: the next
 * power of two up to 512, else the next multiple of 512. */
static uint64_t format_stride(uint64_t row_bytes)
{
    return row_bytes <= 512 ? sl_pow2_at_least(row_bytes, 1) : sl_round_up(row_bytes, 512);
}

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* The most bytes a direct read of one row covers, at any alignment A up to
 * STAGING_BLOCK_ALIGN (the extraction engine's extent, extract.h): rows
 * start at multiples of g = gcd(stride, 4096) within a 4 KiB block, so the
 * widest extent starts 4096 - g bytes into its first block; an extent
 * aligned to a smaller A lies inside it. A multiple of 4096. */
static uint64_t read_bound(uint64_t row_bytes, uint64_t stride)
{
    uint64_t g = gcd_u64(stride, STAGING_BLOCK_ALIGN);
    return sl_round_up(STAGING_BLOCK_ALIGN - g + row_bytes, STAGING_BLOCK_ALIGN);
}

int layout_staging_params(const struct config *c, int ranks, uint64_t row_bytes, struct staging_params *out, char *err,
                          size_t errlen)
{
    memset(out, 0, sizeof *out);
    uint64_t block = read_bound(row_bytes, format_stride(row_bytes));
    uint64_t threads = (uint64_t)(ranks > 0 ? ranks : 1) * (uint64_t)c->pipeline.extractors;
    uint64_t share = ((uint64_t)c->pipeline.staging_mb << 20) / threads;
    uint64_t blocks = SL_MIN(share / block, (uint64_t)c->pipeline.io_depth);
    if (blocks == 0) {
        char have[32], need[32];
        return sl_errf(err, errlen, -EINVAL,
                       "pipeline.staging_mb = %" PRId64 " gives each of the %" PRIu64
                       " extractor threads (pipeline.ranks x pipeline.extractors) %s, less than one row's read (%s); "
                       "raise pipeline.staging_mb",
                       c->pipeline.staging_mb, threads, sl_fmt_bytes(share, have, sizeof have),
                       sl_fmt_bytes(block, need, sizeof need));
    }
    *out = (struct staging_params){.ranks = (uint32_t)(ranks > 0 ? ranks : 1),
                                   .threads = (uint32_t)c->pipeline.extractors,
                                   .blocks = (uint32_t)blocks,
                                   .block_bytes = block,
                                   .keep = 1};
    return 0;
}

int layout_featbuf_plan(const struct config *c, const struct dataset_meta *m, const struct run_arena_plan *a,
                        struct layout_featbuf_plan *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    const struct dataset_file *f = &m->f[DATASET_FEATURES];
    if (!f->present || f->cols == 0)
        return sl_errf(err, errlen, -EINVAL, "dataset %s has no features.bin; gnnlaunch trains on node features",
                       c->dataset.path);
    uint64_t row_bytes = f->cols * dtype_size(f->dtype);
    p->stride = sl_round_up(row_bytes, FEATBUF_ROW_ALIGN_DEFAULT);
    uint64_t n_max = a->batch.n_max[a->shape.layers], reserve, bytes, slots;
    if (sl_mul_ovf((uint64_t)c->pipeline.extractors, n_max, &reserve) ||
        sl_mul_ovf((uint64_t)c->pipeline.feature_buffer_mb, 1ull << 20, &bytes))
        return sl_errf(err, errlen, -EOVERFLOW,
                       "pipeline.extractors x batch nodes or pipeline.feature_buffer_mb overflows");
    p->reserve = SL_MIN(reserve, m->nodes);
    slots = SL_MIN(bytes / p->stride, m->nodes);
    slots = SL_MIN(slots, (uint64_t)FEATBUF_SLOTS_MAX);
    if (slots < p->reserve) {
        uint64_t mb = (p->reserve * p->stride + (1ull << 20) - 1) >> 20;
        char fan[160];
        config_fanouts_str(c->model.fanouts, c->model.n_fanouts, fan, sizeof fan);
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
    enum cache_policy cp = c->pipeline.cache_policy;
    if (cp == CACHE_POLICY_AUTO) /* evictions only when the rows do not all fit: then lookahead pays */
        cp = slots < m->nodes ? CACHE_POLICY_LOOKAHEAD : CACHE_POLICY_LRU;
    if (cp == CACHE_POLICY_LOOKAHEAD || cp == CACHE_POLICY_LOOKAHEAD_STATIC) {
        /* the hint log covers the window and the batches sampled but not yet
         * extracted (queued, or in the extractors' hands), at the worst case
         * of nodes per batch, within pipeline.lookahead_mb */
        uint64_t span = (uint64_t)c->pipeline.lookahead + (uint64_t)c->pipeline.extract_queue +
                        (uint64_t)c->pipeline.samplers + (uint64_t)c->pipeline.extractors;
        uint64_t want = span * SL_MAX(n_max, 1), budget = ((uint64_t)c->pipeline.lookahead_mb << 20) / 12;
        p->params.policy = FEATBUF_POLICY_LOOKAHEAD;
        p->params.window = (uint32_t)c->pipeline.lookahead;
        p->params.hint_entries = SL_MAX(SL_MIN(SL_MIN(want, budget), (uint64_t)UINT32_MAX - 1), 1);
    }
    if (cp == CACHE_POLICY_STATIC || cp == CACHE_POLICY_LOOKAHEAD_STATIC)
        p->params.pin_slots = (uint32_t)((double)(slots - p->reserve) * c->pipeline.hot_fraction);
    if (c->pipeline.mode == PIPELINE_PACKED) { /* the pack's hot tier is pinned, the rest of its rows come once per batch */
        p->params.policy = FEATBUF_POLICY_LRU;
        p->params.window = 0;
        p->params.hint_entries = 0;
        p->params.pin_slots = (uint32_t)(slots - p->reserve);
    }
    if (c->pipeline.mode == PIPELINE_PARTITIONS) { /* rows come from the partition buffer state by state: plain lru */
        p->params.policy = FEATBUF_POLICY_LRU;
        p->params.window = 0;
        p->params.hint_entries = 0;
        p->params.pin_slots = 0;
    }
    p->rank_bytes = featbuf_mem_size(&p->params);
    if (p->rank_bytes == 0)
        return sl_errf(err, errlen, -EOVERFLOW,
                       "a feature buffer of %" PRIu64 " slots x %" PRIu64 " bytes for %" PRIu64 " nodes is too large",
                       slots, p->stride, m->nodes);
    int rc = layout_staging_params(c, (int)c->pipeline.ranks, row_bytes, &p->staging, err, errlen);
    if (rc)
        return rc;
    if (read_bound(row_bytes, f->row_stride) > p->staging.block_bytes)
        return sl_errf(err, errlen, -EINVAL,
                       "%s: features.bin's row stride %" PRIu64 " is not what docs/format.md gives %" PRIu64
                       "-byte rows (%" PRIu64 "); run gnnprep check",
                       c->dataset.path, f->row_stride, row_bytes, format_stride(row_bytes));
    p->staging_bytes = staging_mem_size(&p->staging);
    uint64_t all = (uint64_t)p->staging.ranks * p->staging.threads * p->staging.blocks;
    p->staging_per_thread = p->staging.blocks * p->staging.block_bytes;
    p->staging_used = SL_MIN((uint64_t)c->pipeline.io_depth, all) * p->staging.block_bytes;
    if (p->staging_bytes == 0)
        return sl_errf(err, errlen, -EOVERFLOW, "pipeline.staging_mb = %" PRId64 " is too large",
                       c->pipeline.staging_mb);
    return 0;
}

int layout_warm_check(const struct config *c, const struct layout_featbuf_plan *p, bool gpu, char *err, size_t errlen)
{
    if (c->pipeline.warm_start != CONFIG_WARM_ON)
        return 0;
    (void)gpu; /* rows on GPUs are filled by the same pass, copied up from its staging */
    if (p->params.nslots < p->params.n_nodes)
        return sl_errf(err, errlen, -EINVAL,
                       "pipeline.warm_start = \"on\" needs a slot for every row, and the feature buffer holds %u of its "
                       "%" PRIu64 " rows (pipeline.feature_buffer_mb = %" PRId64 ", %" PRIu64
                       "-byte slots); raise pipeline.feature_buffer_mb to at least %" PRIu64
                       ", or set pipeline.warm_start = \"auto\"",
                       p->params.nslots, p->params.n_nodes, c->pipeline.feature_buffer_mb, p->stride,
                       (uint64_t)((p->params.n_nodes * p->stride + (1ull << 20) - 1) >> 20));
    return 0;
}

void layout_featbuf_use_device(struct layout_featbuf_plan *p, bool on)
{
    p->params.rows_on_device = on;
    p->rank_bytes = featbuf_mem_size(&p->params);
}

int layout_featbuf_check(const struct layout_featbuf_plan *f, const struct run_arena_plan *a, int ranks,
                         uint64_t mem_available, uint64_t shm_free, char *err, size_t errlen)
{
    uint64_t per = f->rank_bytes + a->rank_bytes, total;
    bool ovf = per < f->rank_bytes || sl_mul_ovf(per, (uint64_t)(ranks > 0 ? ranks : 1), &total) ||
               sl_add_ovf(total, f->staging_bytes, &total);
    char have[32], need[32], fb[32], stg[32];
    const char *limit = NULL;
    if (mem_available != UINT64_MAX && (ovf || total > mem_available / 2))
        limit = "half of the available memory (MemAvailable)";
    else if (shm_free != UINT64_MAX && (ovf || total > shm_free))
        limit = "what is free in " SHM_DIR " (a container needs a larger --shm-size)";
    if (!limit)
        return 0;
    return sl_errf(
        err, errlen, -ENOMEM,
        "the feature buffers, batch arenas and staging buffer would need %s (%d rank%s x (%s feature buffer + %s "
        "arena) + %s staging), more than %s, which is %s; lower pipeline.feature_buffer_mb (or pipeline.ranks, "
        "pipeline.staging_mb)",
        sl_fmt_bytes(ovf ? UINT64_MAX : total, need, sizeof need), ranks, ranks == 1 ? "" : "s",
        sl_fmt_bytes(f->rank_bytes, fb, sizeof fb), sl_fmt_bytes(a->rank_bytes, have, sizeof have),
        sl_fmt_bytes(f->staging_bytes, stg, sizeof stg), limit,
        sl_fmt_bytes(mem_available != UINT64_MAX && (ovf || total > mem_available / 2) ? mem_available : shm_free, have,
                     sizeof have));
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

int layout_create(struct layout *l, const char *run_id, const struct config *c, int ranks,
                  const struct layout_objects *o, char *err, size_t errlen)
{
    memset(l, 0, sizeof *l);
    const struct arena_params *arena = o ? o->arena : NULL;
    const struct featbuf_params *fb = o ? o->featbuf : NULL;
    if (ranks < 1 || ranks > RUN_RANKS_MAX || !arena)
        return sl_errf(err, errlen, -EINVAL, "%d ranks is outside 1..%d, or no arena shape", ranks, RUN_RANKS_MAX);
    int rc = shm_run_id_check(run_id, err, errlen);
    if (rc)
        return rc;
    snprintf(l->run_id, sizeof l->run_id, "%s", run_id);
    l->ranks = ranks;
    rc = metrics_create(&l->metrics, run_id, "metrics", (uint32_t)ranks * RUN_STAGES, err, errlen);
    if (rc)
        goto err;
    l->queues = calloc((size_t)ranks * RUN_QUEUES, sizeof *l->queues);
    l->arenas = calloc((size_t)ranks, sizeof *l->arenas);
    if (fb)
        l->featbufs = calloc((size_t)ranks, sizeof *l->featbufs);
    if (!l->queues || !l->arenas || (fb && !l->featbufs)) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory for %d ranks' queue and arena handles", ranks);
        goto err;
    }
    for (int r = 0; r < ranks; r++) {
        char obj[SHM_OBJECT_MAX];
        for (int q = 0; q < RUN_QUEUES; q++) {
            struct ring_params p;
            run_queue_object(obj, sizeof obj, (enum run_queue)q, r);
            layout_queue_params(c, (enum run_queue)q, &p);
            rc = ring_create(&l->queues[r * RUN_QUEUES + q], run_id, obj, &p, err, errlen);
            if (rc)
                goto err;
        }
        run_arena_object(obj, sizeof obj, r);
        rc = arena_create(&l->arenas[r], run_id, obj, arena, err, errlen);
        if (rc)
            goto err;
        if (fb) {
            run_featbuf_object(obj, sizeof obj, r);
            rc = featbuf_create(&l->featbufs[r], run_id, obj, fb, err, errlen);
            if (rc)
                goto err;
        }
    }
    if (fb) {
        struct staging_params sp;
        if ((rc = layout_staging_params(c, ranks, fb->row_bytes, &sp, err, errlen)) != 0 ||
            (rc = staging_create(&l->staging, run_id, &sp, err, errlen)) != 0)
            goto err;
    }
    if (o->allreduce_floats && (rc = allreduce_create(&l->allreduce, run_id, "allreduce", (uint32_t)ranks,
                                                      o->allreduce_floats, err, errlen)) != 0)
        goto err;
    if (o->epochs &&
        (rc = results_create(&l->results, run_id, "results", (uint32_t)ranks, o->epochs, err, errlen)) != 0)
        goto err;
    return 0;

err:
    layout_free(l);
    shm_run_unlink(run_id);
    return rc;
}

struct ring *layout_queue(const struct layout *l, int rank, enum run_queue q)
{
    if (!l || !l->queues || rank < 0 || rank >= l->ranks || (unsigned)q >= RUN_QUEUES)
        return NULL;
    struct ring *r = &l->queues[rank * RUN_QUEUES + q];
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

struct staging *layout_staging(const struct layout *l)
{
    return l && l->staging.hdr ? (struct staging *)&l->staging : NULL;
}

void layout_close(struct layout *l)
{
    if (!l)
        return;
    for (int r = 0; l->featbufs && r < l->ranks; r++)
        if (l->featbufs[r].hdr)
            featbuf_mark_broken(&l->featbufs[r]);
    if (l->staging.hdr)
        staging_close(&l->staging);
    if (l->allreduce.sh)
        allreduce_close(&l->allreduce);
    for (int i = 0; l->queues && i < l->ranks * RUN_QUEUES; i++)
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
        for (int i = 0; i < l->ranks * RUN_QUEUES; i++)
            ring_free(&l->queues[i]);
    if (l->arenas)
        for (int r = 0; r < l->ranks; r++)
            arena_free(&l->arenas[r]);
    if (l->featbufs)
        for (int r = 0; r < l->ranks; r++)
            featbuf_free(&l->featbufs[r]);
    staging_free(&l->staging);
    free(l->queues);
    free(l->arenas);
    free(l->featbufs);
    if (l->allreduce.sh)
        allreduce_free(&l->allreduce);
    results_free(&l->results);
    metrics_free(&l->metrics);
    memset(l, 0, sizeof *l);
}
