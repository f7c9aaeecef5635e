/* partorder.c - buffer states and target assignment of a partition buffer
 * (core/partorder.h): the k < c rule, COMET's logical sweep and BETA, and
 * MariusGNN's auto-tuning.
 *
 * Every ordering is made by one generator over "units" (logical partitions
 * for comet, physical ones for beta) and u_slots unit slots, which calls
 * back with the unit in each slot after every change; the callback either
 * counts the physical partitions loaded (po_expected_swaps) or writes the
 * physical slot table (po_plan_build). Unit slot i owns the physical slots
 * [i*g, i*g + g); a unit of fewer than g partitions leaves the rest empty. */
#include "core/partorder.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

/* A plan's table may hold at most this many slots (states * c). */
#define PO_MAX_TABLE (1ull << 28)

static const char *const order_names[PO_ORDERS] = {[PO_ORDER_COMET] = "comet", [PO_ORDER_BETA] = "beta"};

const char *po_order_name(enum po_order o)
{
    return (unsigned)o < PO_ORDERS ? order_names[o] : "?";
}

int po_order_parse(const char *s, enum po_order *out)
{
    for (unsigned i = 0; i < PO_ORDERS; i++)
        if (s && !strcmp(s, order_names[i])) {
            *out = (enum po_order)i;
            return 0;
        }
    return -EINVAL;
}

const char *po_cover_name(enum po_cover c)
{
    return c == PO_COVER_NODES ? "nodes" : c == PO_COVER_PAIRS ? "pairs" : "?";
}

uint64_t po_lower_bound_nodes(uint32_t p, uint32_t c)
{
    return c >= p ? 0 : (uint64_t)(p - c);
}

uint64_t po_lower_bound_pairs(uint32_t p, uint32_t c)
{
    if (c >= p || c < 2)
        return 0;
    uint64_t pairs = (uint64_t)p * (p - 1) / 2 - (uint64_t)c * (c - 1) / 2;
    return (pairs + c - 2) / (c - 1);
}

uint64_t po_beta_swaps(uint32_t p, uint32_t c)
{
    if (c >= p || c < 2)
        return c >= p ? 0 : (uint64_t)(p - c);
    /* (p-c) + (x+1) [(p-c) - x(c-1)/2], x = floor((p-c)/(c-1)); x(c-1)
     * halves exactly only when x or c-1 is even, so keep it doubled. */
    uint64_t d = p - c, x = d / (c - 1);
    return d + (x + 1) * (2 * d - x * (c - 1)) / 2;
}

uint32_t po_auto_logical(uint32_t p, uint32_t c)
{
    if (c >= p || c < 2)
        return p;
    uint32_t half = c / 2;
    return (p + half - 1) / half;
}

/* ---- the generator ---- */

struct gen {
    uint32_t units, u_slots;
    const uint32_t *size; /* (units) physical partitions in each unit */
    enum po_order order;
    enum po_cover cover;
    uint64_t rng;
    int (*emit)(void *ctx, const uint32_t *uslot); /* after S_0 and after each change */
    void *ctx;
};

/* Algorithm 3 of Marius, with slots kept in place; for nodes coverage it
 * stops after the first sweep, when every unit has been in the buffer. */
static int gen_beta(struct gen *g, uint32_t *buf, uint32_t *disk)
{
    uint32_t c = g->u_slots, nd = g->units - c;
    for (uint32_t i = 0; i < c; i++)
        buf[i] = i;
    for (uint32_t i = 0; i < nd; i++)
        disk[i] = c + i;
    int rc = g->emit(g->ctx, buf);
    while (rc == 0 && nd > 0) {
        for (uint32_t i = 0; i < nd && rc == 0; i++) {
            uint32_t t = buf[c - 1];
            buf[c - 1] = disk[i];
            disk[i] = t;
            rc = g->emit(g->ctx, buf);
        }
        if (rc || g->cover == PO_COVER_NODES)
            break;
        uint32_t n = 0;
        for (uint32_t i = 0; i + 1 < c && i < nd && rc == 0; i++, n++) {
            buf[i] = disk[i];
            rc = g->emit(g->ctx, buf);
        }
        memmove(disk, disk + n, (size_t)(nd - n) * sizeof *disk);
        nd -= n;
    }
    return rc;
}

/* COMET for node coverage (MariusGNN §5.2, k >= c): a random unit in the
 * buffer leaves for the next that has not been in, until all have. */
static int gen_sweep(struct gen *g, uint32_t *buf)
{
    uint32_t c = g->u_slots;
    for (uint32_t i = 0; i < c; i++)
        buf[i] = i;
    int rc = g->emit(g->ctx, buf);
    for (uint32_t next = c; next < g->units && rc == 0; next++) {
        buf[sl_splitmix64(&g->rng) % c] = next;
        rc = g->emit(g->ctx, buf);
    }
    return rc;
}

static int gen_run(struct gen *g)
{
    uint32_t *buf = calloc(g->u_slots, sizeof *buf), *disk = calloc(g->units, sizeof *disk);
    int rc = -ENOMEM;
    if (buf && disk) {
        if (g->u_slots >= g->units) {
            /* everything fits: one state (slots beyond the units stay empty) */
            for (uint32_t i = 0; i < g->u_slots; i++)
                buf[i] = i < g->units ? i : PO_EMPTY;
            rc = g->emit(g->ctx, buf);
        } else if (g->order == PO_ORDER_COMET && g->cover == PO_COVER_NODES) {
            rc = gen_sweep(g, buf);
        } else {
            rc = gen_beta(g, buf, disk);
        }
    }
    free(buf);
    free(disk);
    return rc;
}

/* ---- shapes: checking the parameters and sizing the units ---- */

struct shape {
    bool single;
    uint32_t units, u_slots, group;
    uint32_t *size;  /* (units) */
    uint32_t *start; /* (units) first member's index in perm */
};

static void shape_free(struct shape *s)
{
    free(s->size);
    free(s->start);
    memset(s, 0, sizeof *s);
}

static int shape_make(const struct po_params *pp, struct shape *s, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    uint32_t p = pp->parts, c = pp->slots, k = pp->train_parts ? pp->train_parts : p;
    if (p < 1 || p > PO_MAX_PARTS)
        return sl_errf(err, errlen, -EINVAL, "partitions: %" PRIu32 " is outside 1..%u", p, PO_MAX_PARTS);
    if (c < 1 || c > p)
        return sl_errf(err, errlen, -EINVAL, "buffer_partitions: %" PRIu32 " is outside 1..%" PRIu32 " (the partitions)", c, p);
    if (k > p)
        return sl_errf(err, errlen, -EINVAL, "training partitions: %" PRIu32 " exceeds the %" PRIu32 " partitions", k, p);
    if ((unsigned)pp->order >= PO_ORDERS || (pp->cover != PO_COVER_NODES && pp->cover != PO_COVER_PAIRS))
        return sl_errf(err, errlen, -EINVAL, "unknown ordering or coverage");
    if (pp->cover == PO_COVER_PAIRS && c < 2 && p > 1)
        return sl_errf(err, errlen, -EINVAL,
                       "buffer_partitions: pair coverage needs at least 2 partitions in the buffer, not %" PRIu32, c);
    if (pp->order == PO_ORDER_COMET && pp->cover == PO_COVER_NODES && k < c) {
        s->single = true;
        return 0;
    }
    uint32_t l = p;
    if (pp->order == PO_ORDER_COMET)
        l = pp->logical ? pp->logical : po_auto_logical(p, c);
    if (l < 1 || l > p)
        return sl_errf(err, errlen, -EINVAL, "logical partitions: %" PRIu32 " is outside 1..%" PRIu32, l, p);
    uint32_t g = (p + l - 1) / l, cl = c / g;
    uint32_t need = pp->cover == PO_COVER_PAIRS && l > 1 ? 2 : 1;
    if (cl < need)
        return sl_errf(err, errlen, -EINVAL,
                       "logical partitions: %" PRIu32 " groups of up to %" PRIu32 " partitions leave room for only %" PRIu32
                       " in a buffer of %" PRIu32 " (need %" PRIu32 "); use more logical partitions",
                       l, g, cl, c, need);
    s->units = l;
    s->u_slots = SL_MIN(cl, l);
    s->group = g;
    s->size = calloc(l, sizeof *s->size);
    s->start = calloc(l, sizeof *s->start);
    if (!s->size || !s->start) {
        shape_free(s);
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    }
    /* l groups of floor(p/l) or one more, the larger first */
    uint32_t at = 0;
    for (uint32_t i = 0; i < l; i++) {
        s->size[i] = p / l + (i < p % l);
        s->start[i] = at;
        at += s->size[i];
    }
    return 0;
}

/* ---- counting ---- */

struct count_ctx {
    const struct shape *sh;
    uint32_t *prev; /* (u_slots) */
    bool first;
    uint64_t swaps, states;
};

static int count_emit(void *vctx, const uint32_t *uslot)
{
    struct count_ctx *x = vctx;
    for (uint32_t i = 0; i < x->sh->u_slots; i++) {
        if (!x->first && uslot[i] != x->prev[i] && uslot[i] != PO_EMPTY)
            x->swaps += x->sh->size[uslot[i]];
        x->prev[i] = uslot[i];
    }
    x->first = false;
    x->states++;
    return 0;
}

uint64_t po_expected_swaps(const struct po_params *pp)
{
    struct shape sh;
    if (shape_make(pp, &sh, NULL, 0) < 0 || sh.single)
        return 0;
    struct count_ctx x = {.sh = &sh, .prev = calloc(sh.u_slots, sizeof(uint32_t)), .first = true};
    struct gen g = {.units = sh.units, .u_slots = sh.u_slots, .size = sh.size, .order = pp->order, .cover = pp->cover,
                    .rng = pp->seed, .emit = count_emit, .ctx = &x};
    if (!x.prev || gen_run(&g) < 0)
        x.swaps = 0;
    free(x.prev);
    shape_free(&sh);
    return x.swaps;
}

/* ---- building ---- */

struct build_ctx {
    const struct shape *sh;
    const uint32_t *perm; /* (p) physical partitions, grouped */
    struct po_plan *pl;
    uint64_t cap; /* states the table has room for */
};

static int build_emit(void *vctx, const uint32_t *uslot)
{
    struct build_ctx *x = vctx;
    struct po_plan *pl = x->pl;
    if (pl->states == x->cap) {
        uint64_t cap = x->cap ? x->cap * 2 : 64;
        if (cap * pl->slots > PO_MAX_TABLE)
            cap = PO_MAX_TABLE / pl->slots;
        if (cap <= x->cap)
            return -E2BIG;
        uint32_t *t = realloc(pl->slot, cap * pl->slots * sizeof *t);
        if (!t)
            return -ENOMEM;
        pl->slot = t;
        x->cap = cap;
    }
    uint32_t *row = pl->slot + (uint64_t)pl->states * pl->slots;
    for (uint32_t j = 0; j < pl->slots; j++)
        row[j] = PO_EMPTY;
    for (uint32_t i = 0; i < x->sh->u_slots; i++) {
        uint32_t u = uslot[i];
        if (u == PO_EMPTY)
            continue;
        for (uint32_t m = 0; m < x->sh->size[u]; m++)
            row[i * x->sh->group + m] = x->perm[x->sh->start[u] + m];
    }
    if (pl->states == 0) {
        for (uint32_t j = 0; j < pl->slots; j++)
            pl->first_loads += row[j] != PO_EMPTY;
    } else {
        const uint32_t *prev = row - pl->slots;
        for (uint32_t j = 0; j < pl->slots; j++)
            pl->swaps += row[j] != PO_EMPTY && row[j] != prev[j];
    }
    pl->states++;
    return 0;
}

void po_plan_free(struct po_plan *pl)
{
    if (!pl)
        return;
    free(pl->slot);
    free(pl->target_off);
    free(pl->targets);
    memset(pl, 0, sizeof *pl);
}

static int build_single(struct po_plan *pl, const struct po_params *pp)
{
    uint32_t p = pp->parts, c = pp->slots, k = SL_MIN(SL_MAX(pp->train_parts, pp->fixed_parts), c);
    uint32_t *rest = malloc((size_t)(p - k + 1) * sizeof *rest);
    pl->slot = malloc((size_t)c * sizeof *pl->slot);
    if (!rest || !pl->slot) {
        free(rest);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < k; i++)
        pl->slot[i] = i;
    /* c - k of the others, drawn by a partial Fisher-Yates shuffle */
    for (uint32_t i = 0; i < p - k; i++)
        rest[i] = k + i;
    uint64_t rng = pp->seed;
    for (uint32_t i = 0; i < c - k; i++) {
        uint32_t j = i + (uint32_t)(sl_splitmix64(&rng) % (p - k - i));
        uint32_t t = rest[i];
        rest[i] = rest[j];
        rest[j] = t;
        pl->slot[k + i] = rest[i];
    }
    free(rest);
    pl->states = 1;
    pl->single = true;
    pl->first_loads = c;
    pl->logical = p;
    pl->logical_slots = c;
    pl->group = 1;
    return 0;
}

int po_plan_build(struct po_plan *pl, const struct po_params *pp, char *err, size_t errlen)
{
    memset(pl, 0, sizeof *pl);
    struct shape sh;
    int rc = shape_make(pp, &sh, err, errlen);
    if (rc < 0)
        return rc;
    pl->parts = pp->parts;
    pl->slots = pp->slots;
    if (sh.single) {
        if ((rc = build_single(pl, pp)) < 0) {
            po_plan_free(pl);
            return sl_errf(err, errlen, rc, "out of memory");
        }
        return 0;
    }
    pl->logical = sh.units;
    pl->logical_slots = sh.u_slots;
    pl->group = sh.group;
    uint32_t *perm = malloc((size_t)pp->parts * sizeof *perm);
    if (!perm) {
        shape_free(&sh);
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < pp->parts; i++)
        perm[i] = i;
    uint64_t rng = sl_mix64(pp->seed ^ 0x706172746f72646eull);
    if (pp->order == PO_ORDER_COMET) /* random grouping (beta keeps ids in order) */
        for (uint32_t i = pp->parts; i > 1; i--) {
            uint32_t j = (uint32_t)(sl_splitmix64(&rng) % i);
            uint32_t t = perm[i - 1];
            perm[i - 1] = perm[j];
            perm[j] = t;
        }
    struct build_ctx x = {.sh = &sh, .perm = perm, .pl = pl};
    struct gen g = {.units = sh.units, .u_slots = sh.u_slots, .size = sh.size, .order = pp->order, .cover = pp->cover,
                    .rng = pp->seed, .emit = build_emit, .ctx = &x};
    rc = gen_run(&g);
    free(perm);
    shape_free(&sh);
    if (rc < 0) {
        po_plan_free(pl);
        return sl_errf(err, errlen, rc,
                       rc == -E2BIG ? "the ordering has too many states for %" PRIu32 " partitions and %" PRIu32
                                      " slots; use fewer partitions or more slots"
                                    : "out of memory (ordering of %" PRIu32 " partitions, %" PRIu32 " slots)",
                       pp->parts, pp->slots);
    }
    return 0;
}

uint32_t po_state_loads(const struct po_plan *pl, uint32_t s)
{
    uint32_t n = 0;
    for (uint32_t j = 0; j < pl->slots; j++) {
        uint32_t q = po_slot(pl, s, j);
        n += q != PO_EMPTY && (s == 0 || q != po_slot(pl, s - 1, j));
    }
    return n;
}

uint64_t po_epoch_carry_loads(const struct po_plan *prev, const struct po_plan *next)
{
    uint64_t n = 0;
    uint32_t last = prev->states - 1;
    for (uint32_t j = 0; j < next->slots; j++) {
        uint32_t q = po_slot(next, 0, j);
        bool held = false;
        for (uint32_t i = 0; q != PO_EMPTY && i < prev->slots && !held; i++)
            held = po_slot(prev, last, i) == q;
        n += q != PO_EMPTY && !held;
    }
    return n;
}

/* ---- target assignment ---- */

int po_plan_assign(struct po_plan *pl, enum po_order order, uint64_t seed, const uint64_t *targets,
                   const uint32_t *part, uint64_t n, char *err, size_t errlen)
{
    free(pl->target_off);
    free(pl->targets);
    pl->target_off = NULL;
    pl->targets = NULL;
    pl->ntargets = 0;
    uint32_t p = pl->parts;
    uint64_t *occ_off = calloc((size_t)p + 1, sizeof *occ_off), *fill = NULL;
    uint32_t *occ = NULL, *state_of = NULL;
    int rc = -ENOMEM;
    if (!occ_off)
        goto err;
    /* the states holding each partition, ascending (CSR) */
    for (uint32_t s = 0; s < pl->states; s++)
        for (uint32_t j = 0; j < pl->slots; j++)
            if (po_slot(pl, s, j) != PO_EMPTY)
                occ_off[po_slot(pl, s, j) + 1]++;
    for (uint32_t q = 0; q < p; q++)
        occ_off[q + 1] += occ_off[q];
    occ = malloc((occ_off[p] + 1) * sizeof *occ);
    fill = calloc((size_t)p + 1, sizeof *fill);
    state_of = malloc((n + 1) * sizeof *state_of);
    pl->target_off = calloc((size_t)pl->states + 1, sizeof *pl->target_off);
    pl->targets = malloc((n + 1) * sizeof *pl->targets);
    if (!occ || !fill || !state_of || !pl->target_off || !pl->targets)
        goto err;
    for (uint32_t s = 0; s < pl->states; s++)
        for (uint32_t j = 0; j < pl->slots; j++) {
            uint32_t q = po_slot(pl, s, j);
            if (q != PO_EMPTY)
                occ[occ_off[q] + fill[q]++] = s;
        }
    for (uint64_t i = 0; i < n; i++) {
        uint32_t q = part[i];
        if (q >= p) {
            rc = sl_errf(err, errlen, -EINVAL, "target %" PRIu64 ": partition %" PRIu32 " is outside 0..%" PRIu32,
                         targets[i], q, p - 1);
            goto out;
        }
        uint64_t cnt = occ_off[q + 1] - occ_off[q];
        if (cnt == 0) {
            rc = sl_errf(err, errlen, -EINVAL,
                         "target %" PRIu64 ": its partition %" PRIu32 " is in no buffer state (the training nodes "
                         "must be in the first %" PRIu32 " partitions)",
                         targets[i], q, pl->single ? pl->slots : p);
            goto out;
        }
        uint64_t pick = 0;
        if (order == PO_ORDER_COMET)
            pick = sl_mix64(seed ^ sl_mix64(targets[i] + SL_GOLDEN_GAMMA)) % cnt;
        state_of[i] = occ[occ_off[q] + pick];
        pl->target_off[state_of[i] + 1]++;
    }
    for (uint32_t s = 0; s < pl->states; s++)
        pl->target_off[s + 1] += pl->target_off[s];
    memset(fill, 0, ((size_t)p + 1) * sizeof *fill);
    /* stable counting sort by state; reuse occ_off as the per-state cursor */
    free(occ_off);
    occ_off = calloc((size_t)pl->states + 1, sizeof *occ_off);
    if (!occ_off)
        goto err;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t s = state_of[i];
        pl->targets[pl->target_off[s] + occ_off[s]++] = targets[i];
    }
    pl->ntargets = n;
    rc = 0;
    goto out;
err:
    rc = sl_errf(err, errlen, -ENOMEM, "out of memory (assigning %" PRIu64 " targets)", n);
out:
    if (rc < 0) {
        free(pl->target_off);
        free(pl->targets);
        pl->target_off = NULL;
        pl->targets = NULL;
    }
    free(occ_off);
    free(occ);
    free(fill);
    free(state_of);
    return rc;
}

/* ---- auto-tuning ---- */

int po_tune(const struct po_tune_in *in, struct po_tune *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (in->nodes == 0 || in->row_bytes == 0 || in->min_read == 0)
        return sl_errf(err, errlen, -EINVAL, "auto-tuning needs nodes, a row size and a read size");
    if (in->parts > PO_MAX_PARTS || in->parts > in->nodes)
        return sl_errf(err, errlen, -EINVAL, "partitions: %" PRIu32 " is above %u or the %" PRIu64 " nodes", in->parts,
                       PO_MAX_PARTS, in->nodes);
    double no = (double)in->nodes * (double)in->row_bytes;
    double eo = (double)in->edges * (double)in->edge_bytes;
    double d = (double)in->min_read;
    double a = no / d, b = sqrt(eo / d);
    double pd = a < b ? a : b;
    uint64_t p = in->parts ? in->parts : pd < 2 ? 2 : pd > PO_MAX_PARTS ? PO_MAX_PARTS : (uint64_t)pd;
    if (p > in->nodes)
        p = in->nodes;
    uint64_t part_nodes = (in->nodes + p - 1) / p;
    out->parts = (uint32_t)p;
    out->part_bytes = sl_round_up(part_nodes * in->row_bytes, 4096); /* a layout's blocks (core/partition.h) */
    out->bucket_bytes = (uint64_t)(eo / ((double)p * (double)p));
    uint32_t copies = in->edge_copies ? in->edge_copies : 1;
    uint32_t need = in->cover == PO_COVER_PAIRS ? 2 : 1;
    uint64_t c = 0, bytes = 0;
    for (uint64_t t = 1; t <= p; t++) {
        double cost = (double)t * (double)out->part_bytes + (double)copies * (double)t * (double)t * (double)out->bucket_bytes +
                      (double)in->reserve_bytes;
        if (cost > (double)in->mem_bytes)
            break;
        c = t;
        bytes = (uint64_t)(cost - (double)in->reserve_bytes);
    }
    if (c < need) {
        char b1[32], b2[32];
        double least = (double)need * (double)out->part_bytes +
                       (double)copies * need * need * (double)out->bucket_bytes + (double)in->reserve_bytes;
        return sl_errf(err, errlen, -ENOSPC,
                       "a buffer of %" PRIu32 " partition(s) of %" PRIu64 " (%s each) needs %s; raise the memory budget",
                       need, p, sl_fmt_bytes(out->part_bytes, b1, sizeof b1), sl_fmt_bytes((uint64_t)least, b2, sizeof b2));
    }
    out->slots = (uint32_t)c;
    out->buffer_bytes = bytes;
    out->in_memory = c >= p;
    out->logical = po_auto_logical(out->parts, out->slots);
    uint32_t g = (out->parts + out->logical - 1) / out->logical;
    out->logical_slots = out->slots / g;
    uint64_t k = (in->train_nodes + part_nodes - 1) / part_nodes;
    out->train_parts = (uint32_t)SL_MIN(k, p);
    return 0;
}
