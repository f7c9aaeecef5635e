/* batch.c - a sampled mini-batch in an arena slot: worst-case sizing, the
 * sampler's writer and the checked view (layout and protocol in batch.h).
 *
 * The writer is a bump allocator over the slot: header, labels and the
 * node table (room for the worst case of this batch's B, since nodes keep
 * arriving while the blocks are written) come first; each block's indptr
 * and src follow the previous block as it is closed; alias[] goes last.
 * The worst case of every count is the plan's, so a batch that keeps to
 * its bounds always ends at or before plan.max_bytes, the size batch_plan
 * reported for the slot. */
#include "ipc/batch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/util.h"

#define HDR_BYTES ((uint64_t)sizeof(struct batch_hdr))

/* Bytes of an array of n 4-byte / 8-byte entries, padded to 8. */
static uint64_t a4(uint64_t n)
{
    return sl_round_up(n * 4, 8);
}
static uint64_t a8(uint64_t n)
{
    return n * 8;
}

static uint64_t sat_mul(uint64_t a, uint64_t b)
{
    uint64_t r;
    return sl_mul_ovf(a, b, &r) ? UINT64_MAX : r;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    uint64_t r;
    return sl_add_ovf(a, b, &r) ? UINT64_MAX : r;
}

/* Bytes of the layout for these counts (n[0 .. L], e[0 .. L-1], each at
 * most BATCH_COUNT_MAX, so no term or sum can overflow). */
static uint64_t layout_bytes(uint32_t layers, const uint64_t *n, const uint64_t *e, bool degrees)
{
    uint64_t b = HDR_BYTES + a4(n[0]) + a8(n[layers]);
    for (uint32_t k = 0; k < layers; k++)
        b += a4(n[k] + 1) + a4(e[k]);
    return b + a4(n[layers]) + (degrees ? a4(n[layers]) : 0);
}

/* "[10, -1, 5]" into buf. */
static const char *fmt_fanouts(const struct batch_shape *s, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (uint32_t k = 0; k < s->layers && k < MODEL_LAYERS_MAX && used + 1 < len; k++) {
        int w = snprintf(buf + used, len - used, "%s%" PRId64, k ? ", " : "[", s->fanouts[k]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    if (used + 1 < len)
        snprintf(buf + used, len - used, "]");
    return buf;
}

int batch_plan(const struct batch_shape *s, struct batch_plan *p, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    if (!s || s->layers < 1 || s->layers > MODEL_LAYERS_MAX)
        return sl_errf(err, errlen, -EINVAL, "batch: %u layers is outside 1..%d", s ? s->layers : 0, MODEL_LAYERS_MAX);
    if (s->nodes == 0 || s->batch_size == 0)
        return sl_errf(err, errlen, -EINVAL,
                       "batch: a graph of %" PRIu64 " nodes and batches of %" PRIu64 " targets cannot make a batch",
                       s->nodes, s->batch_size);
    char fan[160];
    bool known_d = s->max_in_degree != BATCH_UNKNOWN;
    for (uint32_t k = 0; k < s->layers; k++) {
        int64_t f = s->fanouts[k];
        if (f < -1)
            return sl_errf(err, errlen, -EINVAL, "batch: fanout %" PRId64 " of layer %u is neither -1 (all) nor >= 0",
                           f, k);
        if (f == -1 && !known_d)
            return sl_errf(err, errlen, -EINVAL,
                           "batch: fanouts %s: -1 (all neighbours) needs the graph's max in-degree",
                           fmt_fanouts(s, fan, sizeof fan));
        p->fanout_cap[k] = f < 0 ? s->max_in_degree : known_d ? SL_MIN((uint64_t)f, s->max_in_degree) : (uint64_t)f;
    }
    p->layers = s->layers;
    /* the same bounds in double, for a message that says how far off an
     * impossible shape is */
    double dn = (double)SL_MIN(s->batch_size, s->nodes), dbytes = 0;
    uint64_t n = SL_MIN(s->batch_size, s->nodes);
    p->n_max[0] = n;
    if (n > BATCH_COUNT_MAX)
        return sl_errf(err, errlen, -EOVERFLOW, "batch: batches of %" PRIu64 " targets; at most %" PRIu32 " fit", n,
                       BATCH_COUNT_MAX);
    int over = -1; /* first block whose counts do not fit */
    dbytes = (double)HDR_BYTES + 4.0 * dn;
    for (uint32_t k = 0; k < s->layers; k++) {
        uint64_t e = sat_mul(n, p->fanout_cap[k]);
        double de = dn * (double)p->fanout_cap[k];
        if (s->edges != BATCH_UNKNOWN) {
            e = SL_MIN(e, s->edges);
            de = de < (double)s->edges ? de : (double)s->edges;
        }
        dbytes += 4.0 * (dn + 1) + 4.0 * de;
        n = SL_MIN(sat_add(n, e), s->nodes);
        dn = dn + de < (double)s->nodes ? dn + de : (double)s->nodes;
        if (over < 0 && (e > BATCH_COUNT_MAX || n > BATCH_COUNT_MAX))
            over = (int)k;
        p->e_max[k] = e;
        p->n_max[k + 1] = n;
    }
    dbytes += (s->degrees ? 16.0 : 12.0) * dn;
    if (over >= 0) {
        char need[32], deg[64] = "";
        uint64_t shown = dbytes < 1.8e19 ? (uint64_t)dbytes : UINT64_MAX;
        if (known_d)
            snprintf(deg, sizeof deg, " and max in-degree %" PRIu64, s->max_in_degree);
        return sl_errf(err, errlen, -EOVERFLOW,
                       "fanouts %s with batches of %" PRIu64 " targets on a graph of %" PRIu64 " nodes%s need %s%s "
                       "per batch (block %d alone could hold %" PRIu64 " edges and %" PRIu64 " nodes; a batch holds "
                       "at most %" PRIu32 " of either); give finite or smaller fanouts or a smaller batch size",
                       fmt_fanouts(s, fan, sizeof fan), s->batch_size, s->nodes, deg,
                       shown == UINT64_MAX ? "more than " : "", sl_fmt_bytes(shown, need, sizeof need), over,
                       p->e_max[over], p->n_max[over + 1], BATCH_COUNT_MAX);
    }
    p->max_bytes = layout_bytes(p->layers, p->n_max, p->e_max, s->degrees);
    return 0;
}

size_t batch_max_bytes(const struct batch_shape *s, char *err, size_t errlen)
{
    struct batch_plan p;
    if (batch_plan(s, &p, err, errlen) != 0)
        return 0;
    if (p.max_bytes > SIZE_MAX / 2) {
        sl_errf(err, errlen, -EOVERFLOW, "batch: %" PRIu64 " bytes per batch do not fit this machine's memory",
                p.max_bytes);
        return 0;
    }
    return (size_t)p.max_bytes;
}

uint32_t batch_arena_slots(uint64_t extract_queue, uint64_t train_queue, uint64_t samplers, uint64_t extractors)
{
    uint64_t n = sat_add(sat_add(extract_queue, train_queue), sat_add(samplers, extractors));
    n = sat_add(n, 2); /* the trainer's batch and the releaser's */
    return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

/* ---- the writer ------------------------------------------------------------------------- */

/* Records the first error of the batch and returns it (or the earlier one). */
static int fail(struct batch_writer *w, int rc, const char *fmt, ...) SL_PRINTF(3, 4);
static int fail(struct batch_writer *w, int rc, const char *fmt, ...)
{
    if (w->rc)
        return w->rc;
    w->rc = rc;
    int n = snprintf(w->err, sizeof w->err, "batch %" PRIu64 ": ", w->h ? w->h->batch : 0);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof w->err)
        vsnprintf(w->err + n, sizeof w->err - (size_t)n, fmt, ap);
    va_end(ap);
    return rc;
}

int batch_init(struct batch_writer *w, void *slot, size_t size, const struct batch_shape *s, uint32_t targets,
               const struct batch_id *id, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    if (!slot || (uintptr_t)slot % 8 != 0 || !s || !id || id->split >= BATCH_SPLITS)
        return w->rc = sl_errf(err, errlen, -EINVAL,
                               "batch: no slot, shape or id, a slot not 8-byte aligned, or an unknown split");
    if (targets == 0 || targets > s->batch_size || targets > s->nodes)
        return w->rc = sl_errf(err, errlen, -EINVAL,
                               "batch: %" PRIu32 " targets is outside 1..%" PRIu64 " (batch size %" PRIu64 ", %" PRIu64
                               " nodes)",
                               targets, SL_MIN(s->batch_size, s->nodes), s->batch_size, s->nodes);
    struct batch_shape one = *s;
    one.batch_size = targets;
    int rc = batch_plan(&one, &w->plan, err, errlen);
    if (rc)
        return w->rc = rc;
    if (w->plan.max_bytes > size)
        return w->rc = sl_errf(err, errlen, -ENOSPC,
                               "batch: a slot of %zu bytes cannot hold a batch of %" PRIu32 " targets (up to %" PRIu64
                               " bytes); the arena was sized for another configuration or dataset",
                               size, targets, w->plan.max_bytes);
    w->base = slot;
    w->size = size;
    w->nodes_max = s->nodes;
    w->degrees = s->degrees;
    struct batch_hdr *h = slot;
    memset(h, 0, sizeof *h);
    h->magic = BATCH_MAGIC;
    h->version = BATCH_VERSION;
    h->batch = id->batch;
    h->epoch = id->epoch;
    h->rank = id->rank;
    h->split = id->split;
    h->layers = s->layers;
    h->targets = targets;
    w->h = h;
    w->cursor = HDR_BYTES;
    h->labels_off = w->cursor;
    w->labels = (int32_t *)(w->base + w->cursor);
    w->cursor += a4(targets);
    h->nodes_off = w->cursor;
    w->nodes = (uint64_t *)(w->base + w->cursor);
    w->cursor += a8(w->plan.n_max[s->layers]);
    return 0;
}

int batch_add_target(struct batch_writer *w, uint64_t global_id, int32_t label)
{
    if (w->rc)
        return w->rc;
    if (w->block != 0 || w->in_block)
        return fail(w, -EPROTO, "targets come before block 0");
    if (w->nn >= w->h->targets)
        return fail(w, -E2BIG, "more than the %" PRIu32 " targets announced", w->h->targets);
    if (global_id >= w->nodes_max)
        return fail(w, -ERANGE, "target %" PRIu64 " is not a node of a graph of %" PRIu64, global_id, w->nodes_max);
    w->nodes[w->nn] = global_id;
    w->labels[w->nn] = label;
    w->nn++;
    return 0;
}

int batch_begin_block(struct batch_writer *w)
{
    if (w->rc)
        return w->rc;
    if (w->in_block || w->block >= w->plan.layers)
        return fail(w, -EPROTO, "block %" PRIu32 " begun while %s", w->block,
                    w->in_block ? "another is open" : "every block is done");
    if (w->block == 0 && w->nn != w->h->targets)
        return fail(w, -EPROTO, "block 0 begun with %" PRIu32 " of %" PRIu32 " targets", w->nn, w->h->targets);
    uint32_t k = w->block;
    w->h->n[k] = w->nn;
    w->h->indptr_off[k] = w->cursor;
    w->indptr = (uint32_t *)(w->base + w->cursor);
    w->cursor += a4((uint64_t)w->nn + 1);
    w->h->src_off[k] = w->cursor;
    w->src = (uint32_t *)(w->base + w->cursor);
    if (w->cursor + a4(w->plan.e_max[k]) > w->size) /* cannot happen within the plan's bounds */
        return fail(w, -EIO, "block %" PRIu32 " does not fit the slot (internal error)", k);
    w->indptr[0] = 0;
    w->dst = w->ne = 0;
    w->dst_edges = 0;
    w->in_block = true;
    return 0;
}

/* Room for count more nodes in the current hop: 0 or the sticky error. */
static int nodes_room(struct batch_writer *w, uint64_t count)
{
    if (w->rc)
        return w->rc;
    if (!w->in_block)
        return fail(w, -EPROTO, "nodes are added inside a block (targets with batch_add_target)");
    uint64_t bound = w->plan.n_max[w->block + 1];
    if ((uint64_t)w->nn + count > bound)
        return fail(w, -E2BIG,
                    "block %" PRIu32 ": more than %" PRIu64 " nodes after hop %" PRIu32 " (the bound for %" PRIu32
                    " targets)",
                    w->block, bound, w->block + 1, w->h->targets);
    return 0;
}

int64_t batch_add_node(struct batch_writer *w, uint64_t global_id)
{
    int rc = nodes_room(w, 1);
    if (rc)
        return rc;
    if (global_id >= w->nodes_max)
        return fail(w, -ERANGE, "node %" PRIu64 " is not a node of a graph of %" PRIu64, global_id, w->nodes_max);
    w->nodes[w->nn] = global_id;
    return w->nn++;
}

uint64_t *batch_reserve_nodes(struct batch_writer *w, uint32_t count, uint32_t *first)
{
    if (nodes_room(w, count))
        return NULL;
    uint64_t *p = w->nodes + w->nn;
    *first = w->nn;
    w->nn += count;
    return p;
}

/* Room for count more sources of the current destination. */
static int edges_room(struct batch_writer *w, uint64_t count)
{
    if (w->rc)
        return w->rc;
    uint32_t k = w->block;
    if (!w->in_block || w->dst >= w->h->n[k])
        return fail(w, -EPROTO, "edge outside a destination (block %" PRIu32 ", %s)", k,
                    w->in_block ? "every destination closed" : "no block open");
    if (w->dst_edges + count > w->plan.fanout_cap[k])
        return fail(w, -E2BIG, "block %" PRIu32 ": destination %" PRIu32 " has more than %" PRIu64 " sources", k,
                    w->dst, w->plan.fanout_cap[k]);
    if ((uint64_t)w->ne + count > w->plan.e_max[k])
        return fail(w, -E2BIG, "block %" PRIu32 ": more than %" PRIu64 " edges", k, w->plan.e_max[k]);
    return 0;
}

int batch_add_edge(struct batch_writer *w, uint32_t local)
{
    int rc = edges_room(w, 1);
    if (rc)
        return rc;
    if (local >= w->nn)
        return fail(w, -ERANGE, "block %" PRIu32 ": source %" PRIu32 " is not a node yet (%" PRIu32 " nodes)", w->block,
                    local, w->nn);
    w->src[w->ne++] = local;
    w->dst_edges++;
    return 0;
}

uint32_t *batch_reserve_edges(struct batch_writer *w, uint32_t count)
{
    if (edges_room(w, count))
        return NULL;
    uint32_t *p = w->src + w->ne;
    w->ne += count;
    w->dst_edges += count;
    return p;
}

int batch_end_dst(struct batch_writer *w)
{
    if (w->rc)
        return w->rc;
    if (!w->in_block || w->dst >= w->h->n[w->block])
        return fail(w, -EPROTO, "block %" PRIu32 ": no destination to close", w->block);
    w->indptr[++w->dst] = w->ne;
    w->dst_edges = 0;
    return 0;
}

int batch_end_block(struct batch_writer *w)
{
    if (w->rc)
        return w->rc;
    uint32_t k = w->block;
    if (!w->in_block || w->dst != w->h->n[k])
        return fail(w, -EPROTO, "block %" PRIu32 " closed with %" PRIu32 " of %" PRIu32 " destinations done", k, w->dst,
                    w->in_block ? w->h->n[k] : 0);
    for (uint32_t i = 0; i < w->ne; i++)
        if (w->src[i] >= w->nn)
            return fail(w, -ERANGE,
                        "block %" PRIu32 ": source %" PRIu32 " (edge %" PRIu32 ") is not one of the %" PRIu32 " nodes",
                        k, w->src[i], i, w->nn);
    for (uint32_t i = w->checked; i < w->nn; i++)
        if (w->nodes[i] >= w->nodes_max)
            return fail(w, -ERANGE, "node %" PRIu32 " has global id %" PRIu64 ", not below %" PRIu64, i, w->nodes[i],
                        w->nodes_max);
    w->checked = w->nn;
    w->h->e[k] = w->ne;
    w->h->n[k + 1] = w->nn;
    w->cursor = w->h->src_off[k] + a4(w->ne);
    w->block++;
    w->in_block = false;
    return 0;
}

uint32_t *batch_degrees(struct batch_writer *w)
{
    if (!w->rc && !w->degrees)
        fail(w, -EPROTO, "degrees for a batch whose shape has none");
    if (!w->rc && (w->in_block || w->block != w->plan.layers))
        fail(w, -EPROTO, "degrees after %" PRIu32 " of %" PRIu32 " blocks", w->block, w->plan.layers);
    if (!w->rc && w->h->deg_off)
        fail(w, -EPROTO, "degrees placed twice");
    if (!w->rc && w->cursor + 2 * a4(w->nn) > SL_MIN(w->size, w->plan.max_bytes))
        fail(w, -EIO, "%" PRIu64 " bytes exceed the plan's %" PRIu64 " (internal error)", w->cursor + 2 * a4(w->nn),
             w->plan.max_bytes);
    if (w->rc)
        return NULL;
    w->h->deg_off = w->cursor;
    uint32_t *d = (uint32_t *)(void *)(w->base + w->cursor);
    memset(d, 0, (size_t)w->nn * 4);
    w->cursor += a4(w->nn);
    return d;
}

int batch_finish(struct batch_writer *w, char *err, size_t errlen)
{
    if (!w->rc && (w->in_block || w->block != w->plan.layers))
        fail(w, -EPROTO, "finished after %" PRIu32 " of %" PRIu32 " blocks", w->block, w->plan.layers);
    if (!w->rc && w->degrees && !w->h->deg_off)
        fail(w, -EPROTO, "finished without the degrees its shape asks for (batch_degrees)");
    if (!w->rc && w->cursor + a4(w->nn) > SL_MIN(w->size, w->plan.max_bytes))
        fail(w, -EIO, "%" PRIu64 " bytes exceed the plan's %" PRIu64 " (internal error)", w->cursor + a4(w->nn),
             w->plan.max_bytes);
    if (w->rc)
        return sl_errf(err, errlen, w->rc, "%s", w->err);
    w->h->alias_off = w->cursor;
    memset(w->base + w->cursor, 0xff, (size_t)w->nn * 4);
    w->cursor += a4(w->nn);
    w->h->bytes = w->cursor;
    w->h->flags = BATCH_SEALED;
    return 0;
}

/* ---- the view --------------------------------------------------------------------------- */

struct span {
    const char *what;
    int k; /* block, or -1 */
    uint64_t off, len;
};

static int view_fail(char *err, size_t errlen, const struct batch_hdr *h, const char *fmt, ...) SL_PRINTF(4, 5);
static int view_fail(char *err, size_t errlen, const struct batch_hdr *h, const char *fmt, ...)
{
    if (!err || !errlen)
        return -EINVAL;
    int n = snprintf(err, errlen, "damaged batch %" PRIu64 " in arena slot: ", h->batch);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < errlen)
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static const char *span_name(const struct span *s, char *buf, size_t len)
{
    if (s->k < 0)
        snprintf(buf, len, "%s", s->what);
    else
        snprintf(buf, len, "%s %d", s->what, s->k);
    return buf;
}

/* Every array inside [header end, bytes], 8-byte aligned, none overlapping. */
static int check_spans(struct span *sp, int n, const struct batch_hdr *h, char *err, size_t errlen)
{
    char a[32], b[32];
    for (int i = 0; i < n; i++) {
        uint64_t end;
        if (sp[i].off % 8 != 0 || sp[i].off < HDR_BYTES || sl_add_ovf(sp[i].off, sp[i].len, &end) || end > h->bytes)
            return view_fail(err, errlen, h,
                             "%s at offset %" PRIu64 " (%" PRIu64 " bytes) is not an aligned part of the %" PRIu64
                             " bytes in use",
                             span_name(&sp[i], a, sizeof a), sp[i].off, sp[i].len, h->bytes);
    }
    for (int i = 1; i < n; i++) /* insertion sort by offset: at most 3 + 2 * MODEL_LAYERS_MAX */
        for (int j = i; j > 0 && sp[j].off < sp[j - 1].off; j--) {
            struct span t = sp[j];
            sp[j] = sp[j - 1];
            sp[j - 1] = t;
        }
    const struct span *prev = NULL;
    for (int i = 0; i < n; i++) {
        if (sp[i].len == 0)
            continue;
        if (prev && prev->off + prev->len > sp[i].off)
            return view_fail(err, errlen, h, "arrays %s and %s overlap", span_name(prev, a, sizeof a),
                             span_name(&sp[i], b, sizeof b));
        prev = &sp[i];
    }
    return 0;
}

int batch_view(void *slot, size_t size, unsigned flags, struct batch_view *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    if (!slot || (uintptr_t)slot % 8 != 0 || size < HDR_BYTES)
        return sl_errf(err, errlen, -EINVAL, "batch: %zu bytes at %p cannot hold a batch", size, slot);
    memcpy(&v->h, slot, sizeof v->h); /* checked once, used from here on */
    const struct batch_hdr *h = &v->h;
    if (h->magic != BATCH_MAGIC)
        return sl_errf(err, errlen, -EINVAL,
                       "arena slot does not hold a batch (magic %#" PRIx64 "); the descriptor names a wrong slot",
                       h->magic);
    if (h->version != BATCH_VERSION)
        return sl_errf(err, errlen, -EINVAL,
                       "arena slot holds a batch of version %" PRIu32 ", this build reads %u; run every stage from "
                       "the same build",
                       h->version, BATCH_VERSION);
    if (!(h->flags & BATCH_SEALED))
        return view_fail(err, errlen, h, "unfinished (the sampler passed it on before batch_finish)");
    if (h->split >= BATCH_SPLITS)
        return view_fail(err, errlen, h, "split %" PRIu32 " is not train, val or test", h->split);
    if (h->layers < 1 || h->layers > MODEL_LAYERS_MAX)
        return view_fail(err, errlen, h, "%" PRIu32 " layers is outside 1..%d", h->layers, MODEL_LAYERS_MAX);
    if (h->targets < 1 || h->n[0] != h->targets)
        return view_fail(err, errlen, h, "%" PRIu32 " targets but n[0] = %" PRIu32, h->targets, h->n[0]);
    uint32_t L = h->layers;
    for (uint32_t k = 0; k < L; k++)
        if (h->n[k + 1] < h->n[k] || h->n[k + 1] - h->n[k] > h->e[k])
            return view_fail(err, errlen, h,
                             "hop %" PRIu32 " has %" PRIu32 " nodes after %" PRIu32 " with %" PRIu32
                             " edges in block %" PRIu32 " (counts must grow by at most the block's edges)",
                             k + 1, h->n[k + 1], h->n[k], h->e[k], k);
    if (h->bytes < HDR_BYTES || h->bytes > size)
        return view_fail(err, errlen, h, "%" PRIu64 " bytes in use in a slot of %zu", h->bytes, size);
    struct span sp[4 + 2 * MODEL_LAYERS_MAX];
    int ns = 0;
    sp[ns++] = (struct span){"labels", -1, h->labels_off, 4ull * h->targets};
    sp[ns++] = (struct span){"nodes", -1, h->nodes_off, 8ull * h->n[L]};
    sp[ns++] = (struct span){"alias", -1, h->alias_off, 4ull * h->n[L]};
    if (h->deg_off)
        sp[ns++] = (struct span){"deg", -1, h->deg_off, 4ull * h->n[L]};
    for (uint32_t k = 0; k < L; k++) {
        sp[ns++] = (struct span){"indptr of block", (int)k, h->indptr_off[k], 4ull * ((uint64_t)h->n[k] + 1)};
        sp[ns++] = (struct span){"src of block", (int)k, h->src_off[k], 4ull * h->e[k]};
    }
    int rc = check_spans(sp, ns, h, err, errlen);
    if (rc)
        return rc;
    unsigned char *base = slot;
    v->labels = (const int32_t *)(base + h->labels_off);
    v->nodes = (const uint64_t *)(base + h->nodes_off);
    v->alias = (uint32_t *)(base + h->alias_off);
    v->deg = h->deg_off ? (const uint32_t *)(base + h->deg_off) : NULL;
    v->flags = &((struct batch_hdr *)slot)->flags;
    for (uint32_t k = 0; k < L; k++) {
        v->indptr[k] = (const uint32_t *)(base + h->indptr_off[k]);
        v->src[k] = (const uint32_t *)(base + h->src_off[k]);
    }
    if (flags & BATCH_VIEW_HEADER_ONLY)
        return 0;
    for (uint32_t k = 0; k < L; k++) {
        const uint32_t *ip = v->indptr[k], *src = v->src[k];
        if (ip[0] != 0 || ip[h->n[k]] != h->e[k])
            return view_fail(err, errlen, h, "block %" PRIu32 ": indptr runs %" PRIu32 "..%" PRIu32 ", not 0..%" PRIu32,
                             k, ip[0], ip[h->n[k]], h->e[k]);
        for (uint32_t d = 0; d < h->n[k]; d++)
            if (ip[d + 1] < ip[d])
                return view_fail(err, errlen, h, "block %" PRIu32 ": indptr decreases at destination %" PRIu32, k, d);
        for (uint32_t i = 0; i < h->e[k]; i++)
            if (src[i] >= h->n[k + 1])
                return view_fail(err, errlen, h,
                                 "block %" PRIu32 ": source %" PRIu32 " of edge %" PRIu32 " is not below n[%" PRIu32
                                 "] = %" PRIu32,
                                 k, src[i], i, k + 1, h->n[k + 1]);
    }
    return 0;
}

void batch_set_aliased_unreferenced(struct batch_view *v)
{
    if (v->flags)
        *v->flags |= BATCH_ALIASED | BATCH_UNREFERENCED;
    v->h.flags |= BATCH_ALIASED | BATCH_UNREFERENCED;
}

void batch_set_aliased(struct batch_view *v)
{
    if (v->flags)
        *v->flags |= BATCH_ALIASED;
    v->h.flags |= BATCH_ALIASED;
}
