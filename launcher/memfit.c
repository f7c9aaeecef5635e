/* memfit.c - the memory plan of a run and the explanation of an OOM kill
 * (the rules are in memfit.h). */
#include "launcher/memfit.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"
#include "stages/sampler.h"
#include "stages/sampler_fetch.h"
#include "stages/schedule_partitions.h"

#define MIB ((uint64_t)1 << 20)

/* a + b, saturating at UINT64_MAX. */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    uint64_t s;
    return sl_add_ovf(a, b, &s) ? UINT64_MAX : s;
}

/* a x b, saturating at UINT64_MAX. */
static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    uint64_t s;
    return sl_mul_ovf(a, b, &s) ? UINT64_MAX : s;
}

uint64_t memfit_workspace(const struct config *c, const struct dataset_meta *m, const struct run_arena_plan *a)
{
    uint64_t feat = m->f[DATASET_FEATURES].cols, hidden = (uint64_t)c->model.hidden;
    uint64_t wide = SL_MAX(feat, hidden);
    uint32_t layers = a->shape.layers;
    uint64_t floats = mul_sat(2, mul_sat(a->batch.n_max[layers], feat));
    for (uint32_t h = 0; h < layers; h++)
        floats = add_sat(floats, mul_sat(4, mul_sat(a->batch.n_max[h], wide)));
    return mul_sat(floats, sizeof(float));
}

/* Whether a topology of `bytes` in memory leaves the feature buffers and
 * staging enough of room: all they want when that is less than a quarter
 * of it (MEMFIT_TOPO_FEAT_DIV), else a quarter and at least the
 * extraction reserve. */
static bool fits_in_memory(uint64_t bytes, uint64_t room, const struct layout_featbuf_plan *f, uint64_t nr)
{
    uint64_t want = add_sat(mul_sat(f->rank_bytes, nr), f->staging_bytes);
    uint64_t least = SL_MAX(room / MEMFIT_TOPO_FEAT_DIV, mul_sat(mul_sat(f->reserve, f->stride), nr));
    return bytes <= room && room - bytes >= SL_MIN(want, least);
}

/* Resolves pipeline.topology "auto" and sizes an unset
 * pipeline.neighbour_cache_mb (rules in memfit.h), then counts the
 * topology of nr ranks into p->topology. Needs p->limit, arenas, margin.
 * 0, or -EINVAL when "cache" is asked of a graph too small for one. */
static int plan_topology(struct memfit_plan *p, struct config *c, const struct dataset_meta *m,
                         const struct layout_featbuf_plan *f, uint64_t nr, char *err, size_t errlen)
{
    if (c->pipeline.mode == PIPELINE_PACKED) { /* the samplers read batches from the pack: no topology at all */
        p->topology = p->topology_shm = 0;
        return 0;
    }
    uint64_t ip = m->f[DATASET_INDPTR].bytes, ix = m->f[DATASET_INDICES].bytes;
    /* labels.bin: read into each sampler's memory, but with "mmap" (sampler.h) */
    uint64_t lb = m->f[DATASET_LABELS].present ? m->f[DATASET_LABELS].bytes : 0;
    uint64_t idx = sampler_cache_index_bytes(m->nodes);
    uint64_t rd = mul_sat((uint64_t)c->pipeline.samplers, SAMPLER_READ_BUFS); /* the threads' read buffers */
    bool mb_given = config_given(c, "pipeline.neighbour_cache_mb") && c->pipeline.neighbour_cache_mb > 0;
    uint64_t before = add_sat(p->arenas, p->margin), room = UINT64_MAX;
    if (p->limit != CGROUP_NONE)
        room = p->limit > before ? p->limit - before : 0;
    if (c->pipeline.topology == TOPOLOGY_AUTO) {
        p->topology_auto = true;
        if (mb_given)
            c->pipeline.topology = TOPOLOGY_CACHE;
        else if (room == UINT64_MAX || fits_in_memory(add_sat(mul_sat(add_sat(ip, lb), nr), ix), room, f, nr))
            c->pipeline.topology = TOPOLOGY_MEMORY;
        else
            c->pipeline.topology = TOPOLOGY_CACHE;
    }
    if (c->pipeline.topology == TOPOLOGY_CACHE && !mb_given) {
        uint64_t ipl = add_sat(ip, lb);
        uint64_t share = add_sat(add_sat(ipl, rd), add_sat(idx, ix / 4)); /* no limit known */
        if (room != UINT64_MAX) {
            /* a quarter of the room, or what the feature buffers (at their
             * size before any sizing: all rows when they fit) and staging
             * leave of it less a 32nd, whichever is more */
            uint64_t want = add_sat(mul_sat(f->rank_bytes, nr), f->staging_bytes), slack = room / MEMFIT_TOPO_SLACK_DIV;
            uint64_t rest = room > add_sat(want, slack) ? room - want - slack : 0;
            share = SL_MAX(room / MEMFIT_TOPO_CACHE_DIV, rest) / nr;
        }
        uint64_t budget = share > add_sat(ipl, rd) ? share - ipl - rd : 0;
        budget = SL_MIN(budget, add_sat(idx, ix) - 1); /* below the whole of indices.bin */
        uint64_t mb = budget / MIB;
        if (mb * MIB <= idx) {
            if (!p->topology_auto) {
                char a[32], b[32];
                return sl_errf(err, errlen, -EINVAL,
                               "pipeline.topology = \"cache\": the memory plan leaves no neighbour cache above its "
                               "index of %s (8 bytes a node; indices.bin is %s); give pipeline.neighbour_cache_mb, or "
                               "use pipeline.topology = \"memory\" or \"mmap\"",
                               sl_fmt_bytes(idx, a, sizeof a), sl_fmt_bytes(ix, b, sizeof b));
            }
            c->pipeline.topology = TOPOLOGY_MMAP; /* no room for a useful cache: mapped pages at least give way */
        } else {
            c->pipeline.neighbour_cache_mb = (int64_t)mb;
            p->neighbour_cache_sized = true;
            (void)config_set_given(c, "pipeline.neighbour_cache_mb", false);
        }
    }
    if (p->topology_auto)
        (void)config_set_given(c, "pipeline.topology", false);
    uint64_t per = ip, shared = 0; /* mmap: mapped pages are page cache, reclaimed under the limit */
    if (c->pipeline.topology == TOPOLOGY_MEMORY) {
        per = add_sat(ip, lb);
        shared = ix; /* one copy per node: a private one, or the segment the node's ranks share */
    } else if (c->pipeline.topology == TOPOLOGY_CACHE) {
        per = add_sat(add_sat(add_sat(ip, lb), rd), mul_sat((uint64_t)c->pipeline.neighbour_cache_mb, MIB));
    }
    p->topology = add_sat(mul_sat(per, nr), shared);
    p->topology_shm = nr > 1 ? shared : 0;
    return 0;
}

static uint64_t plan_total(const struct memfit_plan *p)
{
    return add_sat(add_sat(add_sat(add_sat(p->featbuf, p->staging), add_sat(p->arenas, p->topology)), p->margin),
                   add_sat(p->partbuf, p->pack));
}

/* The partition buffer of a partitions run (rules in memfit.h) within
 * room (UINT64_MAX: no limit known): resolves an auto
 * pipeline.buffer_partitions and counts (c + spare) x part_bytes into
 * p->partbuf. 0, -ENOSPC / -ENOMEM (not even one partition fits, or the
 * given c does not), or the ordering's -EINVAL. */
static int plan_partbuf(struct memfit_plan *p, struct config *c, const struct dataset_meta *m,
                        const struct parts_meta *pm, uint64_t room, char *err, size_t errlen)
{
    enum po_order order = (enum po_order)c->pipeline.partition_order;
    uint32_t cs = (uint32_t)c->pipeline.buffer_partitions, spare = 0;
    char msg[512], b1[32], b2[32];
    int rc;
    if (cs == 0) {
        uint64_t budget = room == UINT64_MAX ? UINT64_MAX : room / 2;
        struct po_tune_in in = {.nodes = m->nodes, .edges = m->edges, .row_bytes = pm->row_stride, .edge_bytes = 8,
                                .edge_copies = 1, .train_nodes = pm->train_nodes, .mem_bytes = budget,
                                .reserve_bytes = 0, .min_read = MIB, .cover = PO_COVER_NODES, .parts = pm->parts};
        struct po_tune t;
        if ((rc = po_tune(&in, &t, msg, sizeof msg)) != 0)
            return sl_errf(err, errlen, rc == -ENOSPC ? -ENOMEM : rc,
                           "pipeline.buffer_partitions = \"auto\": %s (the budget is half of the %s the memory plan "
                           "leaves for buffers); give the run more memory or make a layout of more partitions",
                           msg, sl_fmt_bytes(room, b1, sizeof b1));
        for (cs = t.slots;; cs--) { /* the spare frames count too */
            if ((rc = schedule_partitions_spare(pm->parts, cs, pm->train_parts, order, &spare, msg, sizeof msg)) != 0)
                return sl_errf(err, errlen, rc, "pipeline.buffer_partitions = %" PRIu32 ": %s", cs, msg);
            if (cs == 1 || mul_sat((uint64_t)cs + spare, pm->part_bytes) <= budget)
                break;
        }
        c->pipeline.buffer_partitions = cs;
        p->partbuf_sized = true;
    } else if ((rc = schedule_partitions_spare(pm->parts, cs, pm->train_parts, order, &spare, msg, sizeof msg)) != 0)
        return sl_errf(err, errlen, rc, "pipeline.buffer_partitions = %" PRIu32 ": %s", cs, msg);
    p->partbuf_spare = spare;
    p->partbuf = mul_sat((uint64_t)cs + spare, pm->part_bytes);
    if (room != UINT64_MAX && p->partbuf > room)
        return sl_errf(err, errlen, -ENOMEM,
                       "pipeline.buffer_partitions = %" PRIu32 ": the partition buffer (%" PRIu32 " partitions and %" PRIu32
                       " spare frames of %" PRIu64 " bytes) needs %s, more than the %s the memory plan leaves for "
                       "buffers; lower pipeline.buffer_partitions or set it to \"auto\"",
                       cs, cs, spare, pm->part_bytes, sl_fmt_bytes(p->partbuf, b1, sizeof b1),
                       sl_fmt_bytes(room, b2, sizeof b2));
    return 0;
}

/* The staging segment's bytes for pipeline.staging_mb = mb, from f's row
 * geometry (layout_staging_params); 0 when mb gives a thread no block. */
static uint64_t staging_for(const struct config *c, const struct layout_featbuf_plan *f, int64_t mb)
{
    struct config t = *c;
    t.pipeline.staging_mb = mb;
    struct staging_params sp;
    if (layout_staging_params(&t, (int)c->pipeline.ranks, f->params.row_bytes, &sp, NULL, 0) != 0)
        return 0;
    return staging_mem_size(&sp);
}

/* Lowers an unset pipeline.staging_mb until the segment is at most cap
 * bytes, keeping one block per thread. */
static void size_staging(struct config *c, const struct layout_featbuf_plan *f, uint64_t cap)
{
    if (f->staging_bytes <= cap)
        return;
    uint64_t threads = (uint64_t)c->pipeline.ranks * (uint64_t)c->pipeline.extractors;
    int64_t least = (int64_t)((mul_sat(threads, f->staging.block_bytes) + MIB - 1) / MIB);
    int64_t mb = SL_MAX((int64_t)(cap / MIB), least);
    while (mb > least && staging_for(c, f, mb) > cap)
        mb--;
    if (mb < c->pipeline.staging_mb)
        c->pipeline.staging_mb = mb;
}

/* "pipeline.feature_buffer_mb = 512 (512.0 MiB x 2 ranks)" and the like,
 * for every memory key the configuration gives; "" when none. */
static void given_keys(const struct config *c, const struct memfit_plan *p, int ranks, bool gpu, char *buf,
                       size_t len)
{
    char a[32], b[32];
    buf[0] = '\0';
    if (config_given(c, "pipeline.feature_buffer_mb") && !gpu)
        snprintf(buf, len, "pipeline.feature_buffer_mb = %" PRId64 " (%s of feature buffer%s%s)",
                 c->pipeline.feature_buffer_mb, sl_fmt_bytes(p->featbuf, a, sizeof a), ranks > 1 ? " over " : "",
                 ranks > 1 ? "the ranks" : "");
    if (config_given(c, "pipeline.staging_mb"))
        snprintf(buf + strlen(buf), len - strlen(buf), "%spipeline.staging_mb = %" PRId64 " (%s of staging)",
                 buf[0] ? ", " : "", c->pipeline.staging_mb, sl_fmt_bytes(p->staging, b, sizeof b));
}

int memfit_plan_make(struct memfit_plan *p, struct config *c, const struct dataset_meta *m,
                     const struct run_arena_plan *a, struct layout_featbuf_plan *f, const struct parts_meta *parts,
                     uint64_t pack_bytes, const struct cgroup_mem *cg, int ranks, bool gpu, uint64_t mem_available, uint64_t shm_free,
                     char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    p->cg = *cg;
    uint64_t nr = (uint64_t)(ranks > 0 ? ranks : 1);
    p->limit = cg->limit;
    if (cg->limit != CGROUP_NONE)
        snprintf(p->limit_what, sizeof p->limit_what, "cgroup %s %s", cg->limit_name, cgroup_mem_limit_file(cg));
    if (mem_available != UINT64_MAX && mem_available < p->limit) {
        p->limit = mem_available;
        snprintf(p->limit_what, sizeof p->limit_what, "MemAvailable");
    }
    p->arenas = mul_sat(a->rank_bytes, nr);
    p->workspace = gpu ? 0 : mul_sat(memfit_workspace(c, m, a), nr); /* a GPU trainer's is on its device */
    p->processes = mul_sat(MEMFIT_PROCESS_BYTES, mul_sat(RUN_STAGES, nr));
    p->cache = p->limit == CGROUP_NONE ? MEMFIT_CACHE_MIN : SL_MAX(MEMFIT_CACHE_MIN, p->limit / MEMFIT_CACHE_DIV);
    p->margin = add_sat(add_sat(p->workspace, p->processes), p->cache);
    p->pack = mul_sat(pack_bytes, nr);
    int rc;
    if ((rc = plan_topology(p, c, m, f, nr, err, errlen)) != 0)
        return rc;

    /* what the limit leaves for the feature buffers and staging, also
     * within layout.h's rules: half of MemAvailable, /dev/shm's space */
    uint64_t fixed = add_sat(add_sat(add_sat(p->topology, p->arenas), p->margin), p->pack), room = UINT64_MAX;
    if (p->limit != CGROUP_NONE)
        room = p->limit > fixed ? p->limit - fixed : 0;
    if (mem_available != UINT64_MAX)
        room = SL_MIN(room, mem_available / 2 > p->arenas ? mem_available / 2 - p->arenas : 0);
    if (shm_free != UINT64_MAX)
        room =
            SL_MIN(room, shm_free > add_sat(p->arenas, p->topology_shm) ? shm_free - p->arenas - p->topology_shm : 0);
    if (parts) { /* the partition buffer comes first: the feature buffers are sized to what it leaves */
        if ((rc = plan_partbuf(p, c, m, parts, room, err, errlen)) != 0)
            return rc;
        if (room != UINT64_MAX)
            room -= p->partbuf;
    }
    if (room != UINT64_MAX && !config_given(c, "pipeline.staging_mb")) {
        int64_t before = c->pipeline.staging_mb;
        size_staging(c, f, room / 8);
        if (c->pipeline.staging_mb != before) {
            p->staging_sized = true;
            if ((rc = layout_featbuf_plan(c, m, a, f, err, errlen)) != 0)
                return rc;
            layout_featbuf_use_device(f, gpu);
        }
    }
    if (room != UINT64_MAX && !gpu && !config_given(c, "pipeline.feature_buffer_mb")) {
        uint64_t left = room > f->staging_bytes ? room - f->staging_bytes : 0, per = left / nr;
        /* twice at most: a buffer made smaller than the dataset may change
         * policy (pipeline.cache_policy = auto: lookahead, whose metadata
         * the first pass did not count); if lookahead's metadata leaves too
         * few rows, auto takes lru (rows first) and sizes again */
        int64_t asked = c->pipeline.feature_buffer_mb;
        for (int attempt = 0; attempt < 2; attempt++) {
            for (int pass = 0; pass < 2 && f->rank_bytes > per; pass++) {
                uint64_t rows = (uint64_t)f->params.nslots * f->stride;
                uint64_t fixed_part = f->rank_bytes > rows ? f->rank_bytes - rows : 0; /* header, node map, links */
                uint64_t mb = per > fixed_part ? (per - fixed_part) / MIB : 0;
                uint64_t least = (f->reserve * f->stride + MIB - 1) / MIB;
                c->pipeline.feature_buffer_mb = (int64_t)SL_MAX(mb, SL_MAX(least, 1));
                p->featbuf_sized = true;
                if ((rc = layout_featbuf_plan(c, m, a, f, err, errlen)) != 0)
                    return rc;
                layout_featbuf_use_device(f, gpu);
            }
            if (f->rank_bytes <= per || c->pipeline.cache_policy != CACHE_POLICY_AUTO ||
                f->params.policy == FEATBUF_POLICY_LRU)
                break;
            c->pipeline.cache_policy = CACHE_POLICY_LRU;
            c->pipeline.feature_buffer_mb = asked;
            if ((rc = layout_featbuf_plan(c, m, a, f, err, errlen)) != 0)
                return rc;
            layout_featbuf_use_device(f, gpu);
        }
    }
    p->featbuf = mul_sat(f->rank_bytes, nr);
    p->gpu = gpu;
    p->staging = f->staging_bytes;
    uint64_t total = plan_total(p);
    if (p->limit == CGROUP_NONE || total <= p->limit)
        return 0;

    char keys[512], lim[32], tot[32], fb[32], ar[32], top[32], mar[32], st[32];
    given_keys(c, p, ranks, gpu, keys, sizeof keys);
    sl_fmt_bytes(p->limit, lim, sizeof lim);
    sl_fmt_bytes(total, tot, sizeof tot);
    sl_fmt_bytes(p->featbuf, fb, sizeof fb);
    sl_fmt_bytes(p->arenas, ar, sizeof ar);
    sl_fmt_bytes(p->topology, top, sizeof top);
    sl_fmt_bytes(p->margin, mar, sizeof mar);
    sl_fmt_bytes(p->staging, st, sizeof st);
    char pbuf[192] = "", pb[32];
    if (p->partbuf) /* the partitions mode */
        snprintf(pbuf, sizeof pbuf, "partition buffer %s (pipeline.buffer_partitions = %" PRId64 "), ",
                 sl_fmt_bytes(p->partbuf, pb, sizeof pb), c->pipeline.buffer_partitions);
    if (p->pack) /* the packed mode */
        snprintf(pbuf, sizeof pbuf, "packed reads %s (the extractor threads' chunk and cache extent buffers, the "
                 "pack's index), ", sl_fmt_bytes(p->pack, pb, sizeof pb));
    if (keys[0])
        return sl_errf(err, errlen, -ENOMEM,
                       "the configuration asks for more memory than the run is given: %s, with batch arenas %s, "
                       "topology %s (indptr.bin, and indices.bin or the neighbour cache), %sa margin of %s "
                       "(trainer, processes, page cache) make %s, more than the limit of %s (%s); lower those keys, or leave them unset "
                       "so that gnnlaunch sizes them to the limit",
                       keys, ar, top, pbuf, mar, tot, lim, p->limit_what);
    return sl_errf(err, errlen, -ENOMEM,
                   "the run needs at least %s (feature buffer %s at its extraction reserve or below the default, "
                   "staging %s, batch arenas %s, topology %s, %smargin %s for the trainer, processes and page cache), "
                   "more than the limit of %s (%s); lower train.batch_size, model.fanouts, pipeline.extractors%s or "
                   "pipeline.ranks, or give the run more memory",
                   tot, fb, st, ar, top, pbuf, mar, lim, p->limit_what,
                   p->partbuf ? ", pipeline.buffer_partitions" : "");
}

/* "packed reads 12.0 MiB (...), " for a packed run's plan, else "". */
static void pack_part(const struct memfit_plan *p, const struct config *c, char *buf, size_t len)
{
    char b[32];
    buf[0] = '\0';
    if (p->pack)
        snprintf(buf, len, "packed reads %s (pipeline.extractors = %" PRId64 " threads' chunk and cache extent "
                 "buffers, the pack's index and bitmaps), ",
                 sl_fmt_bytes(p->pack, b, sizeof b), (int64_t)c->pipeline.extractors);
}

void memfit_plan_describe(const struct memfit_plan *p, const struct config *c, char *buf, size_t len)
{
    char lim[32], fb[32], st[32], ar[32], top[32], mar[32], ws[32], pr[32], ca[32], tot[32];
    char limit[PATH_MAX + 256], topo[160];
    if (p->limit == CGROUP_NONE)
        snprintf(limit, sizeof limit, "no limit found (no memory cgroup limit, MemAvailable unreadable)");
    else
        snprintf(limit, sizeof limit, "limit %s (%s)", sl_fmt_bytes(p->limit, lim, sizeof lim), p->limit_what);
    char pbuf[320] = "", pb[32];
    if (p->partbuf)
        snprintf(pbuf, sizeof pbuf, "partition buffer %s (pipeline.buffer_partitions = %" PRId64 "%s, + %" PRIu32
                 " spare), ",
                 sl_fmt_bytes(p->partbuf, pb, sizeof pb), c->pipeline.buffer_partitions,
                 p->partbuf_sized ? ", auto-tuned" : ", as given", p->partbuf_spare);
    else
        pack_part(p, c, pbuf, sizeof pbuf);
    int w = snprintf(topo, sizeof topo, "pipeline.topology = \"%s\"%s", topology_mode_name(c->pipeline.topology),
                     p->topology_auto ? ", chosen" : "");
    if (c->pipeline.topology == TOPOLOGY_CACHE && w > 0 && (size_t)w < sizeof topo)
        snprintf(topo + w, sizeof topo - (size_t)w, ", pipeline.neighbour_cache_mb = %" PRId64 "%s",
                 c->pipeline.neighbour_cache_mb, p->neighbour_cache_sized ? ", sized to fit" : "");
    snprintf(buf, len,
             "memory: %s, plan: feature buffer %s%s (pipeline.feature_buffer_mb = %" PRId64 "%s), staging %s "
             "(pipeline.staging_mb = %" PRId64 "%s), arenas %s, topology %s (%s), %smargin %s (trainer %s, processes %s, "
             "page cache %s); %s in all",
             limit, sl_fmt_bytes(p->featbuf, fb, sizeof fb), p->gpu ? " here for the slot tables, the rows on the GPUs" : "",
             c->pipeline.feature_buffer_mb,
             p->featbuf_sized                                  ? ", sized to fit"
             : config_given(c, "pipeline.feature_buffer_mb") ? ", as given"
                                                               : "",
             sl_fmt_bytes(p->staging, st, sizeof st), c->pipeline.staging_mb,
             p->staging_sized                           ? ", sized to fit"
             : config_given(c, "pipeline.staging_mb") ? ", as given"
                                                        : "",
             sl_fmt_bytes(p->arenas, ar, sizeof ar), sl_fmt_bytes(p->topology, top, sizeof top), topo, pbuf,
             sl_fmt_bytes(p->margin, mar, sizeof mar), sl_fmt_bytes(p->workspace, ws, sizeof ws),
             sl_fmt_bytes(p->processes, pr, sizeof pr), sl_fmt_bytes(p->cache, ca, sizeof ca),
             sl_fmt_bytes(plan_total(p), tot, sizeof tot));
}

bool memfit_oom_explain(const struct memfit_plan *p, const struct config *c, const char *who, char *buf, size_t len)
{
    uint64_t now = cgroup_mem_oom_kills(&p->cg), start = p->cg.oom_kills_start;
    if (p->cg.version == 0 || now == CGROUP_NONE || start == CGROUP_NONE || now <= start)
        return false;
    const char *what = "";
    uint64_t used = cgroup_mem_usage(&p->cg, &what);
    char u[64] = "an unknown amount", lim[64], mar[32], ws[32], key[512];
    if (used != CGROUP_NONE)
        snprintf(u, sizeof u, "%s (%s)", sl_fmt_bytes(used, lim, sizeof lim), what);
    char limit[PATH_MAX + 256];
    if (p->cg.limit != CGROUP_NONE)
        snprintf(limit, sizeof limit, "the limit of %s (cgroup %s %s)", sl_fmt_bytes(p->cg.limit, lim, sizeof lim),
                 p->cg.limit_name, cgroup_mem_limit_file(&p->cg));
    else if (p->limit != CGROUP_NONE)
        snprintf(limit, sizeof limit, "%s of %s (no cgroup limit: the machine's memory ran out)",
                 sl_fmt_bytes(p->limit, lim, sizeof lim), p->limit_what);
    else
        snprintf(limit, sizeof limit, "no known limit");
    if (config_given(c, "pipeline.feature_buffer_mb"))
        snprintf(key, sizeof key,
                 "lower pipeline.feature_buffer_mb (%" PRId64 ", as the configuration gives it), or leave it unset so "
                 "that gnnlaunch sizes it to the limit",
                 c->pipeline.feature_buffer_mb);
    else
        snprintf(key, sizeof key,
                 "the plan left a margin of %s (trainer %s) beside the buffers; lower train.batch_size or "
                 "model.fanouts (they size the batches and the trainer's memory), or set pipeline.feature_buffer_mb "
                 "below the %" PRId64 " planned",
                 sl_fmt_bytes(p->margin, mar, sizeof mar), sl_fmt_bytes(p->workspace, ws, sizeof ws),
                 c->pipeline.feature_buffer_mb);
    snprintf(buf, len,
             "%s was killed by the out-of-memory killer (SIGKILL; %" PRIu64 " OOM kill%s in cgroup %s since the "
             "start): the run used %s against %s; %s",
             who, now - start, now - start == 1 ? "" : "s", p->cg.name, u, limit, key);
    return true;
}
