/* schedule_partitions.c - the partition-ordered schedule (what it is:
 * schedule_partitions.h). Its state: the parsed argument, the layout's
 * metadata, the training nodes (ascending, as the split file holds them)
 * with their partitions, and per epoch the rank's training batches
 * (first target in the pass order, count, state); prepare adds the fixed
 * validation and test orders. */
#include "stages/schedule_partitions.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/partition.h"
#include "core/util.h"
#include "stages/sampler.h"

struct pbatch {
    uint64_t first;
    uint32_t targets;
    uint32_t state;
};

struct psched {
    uint32_t slots;
    enum po_order order;
    enum po_cover cover;
    int fill; /* enum partition_fill (core/config.h); "auto" resolved at open from the layout's order */
    int eval; /* enum partition_eval; "auto" resolved at open */
    char layout[4096], dataset[4096];
    struct parts_meta pm;
    uint64_t ntrain;
    uint64_t *train;     /* (ntrain) ascending */
    uint32_t *tpart;     /* (ntrain) partition of train[i] */
    struct pbatch **eb;  /* (epochs) the rank's training batches of each epoch */
    uint64_t *fixed[BATCH_SPLITS];
};

uint64_t schedule_partitions_seed(uint64_t seed, uint32_t epoch)
{
    return sl_mix64(seed ^ sl_mix64(0x7061727469746e73ull + epoch));
}

static int parse_arg(struct psched *ps, const char *arg, char *err, size_t errlen)
{
    char buf[4200], order[32] = "", cover[32] = "", fill[32] = "", eval[32] = "";
    unsigned slots = 0;
    int n = 0;
    if (!arg || strlen(arg) >= sizeof buf ||
        sscanf(arg, "%u:%31[a-z]:%31[a-z]:%31[a-z]:%31[a-z]:%n", &slots, order, cover, fill, eval, &n) != 5 || n == 0 ||
        !arg[n])
        return sl_errf(err, errlen, -EINVAL,
                       "partitions schedule: argument \"%s\" is not SLOTS:ORDER:COVER:FILL:EVAL:LAYOUT (e.g. "
                       "4:comet:nodes:auto:auto:DIR/parts.32)",
                       arg ? arg : "");
    if ((ps->fill = partition_fill_parse(fill)) < 0)
        return sl_errf(err, errlen, -EINVAL, "partitions schedule: fill \"%s\" is not auto, random or first", fill);
    if ((ps->eval = partition_eval_parse(eval)) < 0)
        return sl_errf(err, errlen, -EINVAL, "partitions schedule: evaluation \"%s\" is not auto, buffer or graph", eval);
    if (po_order_parse(order, &ps->order) < 0)
        return sl_errf(err, errlen, -EINVAL, "partitions schedule: ordering \"%s\" is not comet or beta", order);
    if (!strcmp(cover, "nodes"))
        ps->cover = PO_COVER_NODES;
    else if (!strcmp(cover, "pairs"))
        ps->cover = PO_COVER_PAIRS;
    else
        return sl_errf(err, errlen, -EINVAL, "partitions schedule: coverage \"%s\" is not nodes or pairs", cover);
    ps->slots = slots;
    snprintf(ps->layout, sizeof ps->layout, "%s", arg + n);
    snprintf(buf, sizeof buf, "%s", arg + n);
    snprintf(ps->dataset, sizeof ps->dataset, "%s", dirname(buf));
    return 0;
}

static struct po_params plan_params(const struct schedule *s, const struct psched *ps, uint32_t epoch)
{
    return (struct po_params){.parts = ps->pm.parts, .slots = ps->slots, .train_parts = ps->pm.train_parts,
                              .fixed_parts = SL_MAX(ps->fill == PARTITION_FILL_FIRST ? ps->slots : 0,
                                                    ps->eval == PARTITION_EVAL_BUFFER ? ps->pm.eval_parts : 0),
                              .order = ps->order, .cover = ps->cover, .seed = schedule_partitions_seed(s->p.seed, epoch)};
}

int schedule_partitions_plan(const struct schedule *s, uint32_t epoch, struct po_plan *pl, char *err, size_t errlen)
{
    const struct psched *ps = s->impl;
    struct po_params pp = plan_params(s, ps, epoch);
    return po_plan_build(pl, &pp, err, errlen);
}

/* The partition of training node v (v is in train). */
static uint32_t part_of(const struct psched *ps, uint64_t v)
{
    uint64_t lo = 0, hi = ps->ntrain;
    while (lo + 1 < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (ps->train[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    return ps->tpart[lo];
}

/* Epoch e's plan with `share` (n targets, the pass's shuffled share)
 * assigned: the caller frees pl. */
static int assign_share(const struct schedule *s, const struct psched *ps, uint32_t e, const uint64_t *share, uint64_t n,
                        struct po_plan *pl, char *err, size_t errlen)
{
    uint32_t *part = malloc((n + 1) * sizeof *part);
    if (!part)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    for (uint64_t i = 0; i < n; i++)
        part[i] = part_of(ps, share[i]);
    int rc = schedule_partitions_plan(s, e, pl, err, errlen);
    if (rc == 0 && (rc = po_plan_assign(pl, ps->order, schedule_partitions_seed(s->p.seed, e), share, part, n, err,
                                        errlen)) < 0)
        po_plan_free(pl);
    free(part);
    return rc;
}

/* Reads the training nodes' positions out of node_pos.bin into tpart. */
static int read_parts(struct psched *ps, uint64_t nodes, char *err, size_t errlen)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", ps->layout, parts_file_name[PARTS_NODE_POS]);
    FILE *f = fopen(path, "rb");
    if (!f)
        return sl_errf(err, errlen, -errno, "%s: cannot open: %s", path, strerror(errno));
    size_t es = dtype_size(dtype_for_ids(nodes));
    int rc = 0;
    for (uint64_t i = 0; i < ps->ntrain && rc == 0; i++) {
        uint64_t pos = 0;
        if (fseeko(f, (off_t)(ps->train[i] * es), SEEK_SET) != 0 || fread(&pos, es, 1, f) != 1) /* little endian */
            rc = sl_errf(err, errlen, -EIO, "%s: cannot read the position of node %" PRIu64, path, ps->train[i]);
        else if (pos >= nodes)
            rc = sl_errf(err, errlen, -EINVAL, "%s: node %" PRIu64 " has position %" PRIu64 ", beyond the nodes; remake the layout",
                         path, ps->train[i], pos);
        else
            ps->tpart[i] = (uint32_t)(pos / ps->pm.part_nodes);
    }
    fclose(f);
    return rc;
}

static int psched_open(struct schedule *s, char *err, size_t errlen)
{
    struct psched *ps = calloc(1, sizeof *ps);
    if (!ps)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    s->impl = ps;
    const struct schedule_params *p = &s->p;
    int rc = parse_arg(ps, p->arg, err, errlen);
    if (rc)
        return rc;
    struct dataset_meta m;
    if ((rc = dataset_meta_read(ps->dataset, &m, true, err, errlen)) < 0 ||
        (rc = parts_meta_read(ps->layout, &m, &ps->pm, err, errlen)) < 0)
        return rc;
    if (ps->fill == PARTITION_FILL_AUTO)
        ps->fill = ps->pm.order == PARTS_ORDER_NEIGHBOURS ? PARTITION_FILL_FIRST : PARTITION_FILL_RANDOM;
    /* evaluation inside the buffer: the evaluation nodes packed in partitions that MariusGNN's one-state rule
     * keeps in every epoch's (only) state */
    bool can = ps->pm.eval_parts > 0 && ps->pm.eval_parts <= ps->slots && ps->order == PO_ORDER_COMET &&
               ps->cover == PO_COVER_NODES && ps->pm.train_parts < ps->slots;
    /* auto: only where the layout also holds the evaluation nodes' neighbours (on a random layout in-buffer
     * evaluation sees a few in-neighbours and cost 17-37 points: bench/results/partitions-acc-2026-11-27.md) */
    if (ps->eval == PARTITION_EVAL_AUTO)
        ps->eval = can && ps->pm.order == PARTS_ORDER_NEIGHBOURS ? PARTITION_EVAL_BUFFER : PARTITION_EVAL_GRAPH;
    if (ps->eval == PARTITION_EVAL_BUFFER && !can) {
        if (!ps->pm.eval_parts)
            return sl_errf(err, errlen, -EINVAL,
                           "pipeline.partition_eval = \"buffer\": %s spreads the validation and test nodes over all "
                           "partitions; remake it with gnnprep partition --eval-first, or set \"graph\"", ps->layout);
        return sl_errf(err, errlen, -EINVAL,
                       "pipeline.partition_eval = \"buffer\" needs one buffer state an epoch holding the %" PRIu32
                       " partitions of the training and evaluation nodes of %s (comet with buffer_partitions at least "
                       "%" PRIu32 " and above the training partitions); the buffer holds %" PRIu32 " with ordering %s",
                       ps->pm.eval_parts, ps->layout, SL_MAX(ps->pm.eval_parts, ps->pm.train_parts + 1), ps->slots,
                       po_order_name(ps->order));
    }
    if (p->split_n[BATCH_TRAIN] != m.f[DATASET_TRAIN].rows)
        return sl_errf(err, errlen, -EINVAL, "partitions schedule: %" PRIu64 " training targets, the dataset has %" PRIu64,
                       p->split_n[BATCH_TRAIN], m.f[DATASET_TRAIN].rows);
    if ((rc = sampler_split_load(ps->dataset, &m, DATASET_TRAIN, &ps->train, &ps->ntrain, err, errlen)) < 0)
        return rc;
    for (uint64_t i = 1; i < ps->ntrain; i++)
        if (ps->train[i] <= ps->train[i - 1])
            return sl_errf(err, errlen, -EINVAL, "%s: the training split is not ascending; run gnnprep check", ps->dataset);
    ps->tpart = malloc((ps->ntrain + 1) * sizeof *ps->tpart);
    ps->eb = calloc(p->epochs, sizeof *ps->eb);
    uint64_t *scratch = malloc((ps->ntrain + 1) * sizeof *scratch);
    if (!ps->tpart || !ps->eb || !scratch) {
        free(scratch);
        return sl_errf(err, errlen, -ENOMEM, "out of memory for %" PRIu64 " training targets", ps->ntrain);
    }
    if ((rc = read_parts(ps, m.nodes, err, errlen)) < 0)
        goto out;
    /* the passes: training per epoch and rank from the plans; evaluation as the default */
    uint64_t g = 0;
    s->steps = 0;
    for (uint32_t e = 0; e < p->epochs && rc == 0; e++) {
        struct schedule_epoch *ep = &s->epoch[e];
        ep->start = g;
        for (uint32_t r = 0; r < p->ranks && rc == 0; r++) {
            uint64_t n;
            if ((rc = schedule_shuffle_share(ps->train, ps->ntrain, p->seed, e, r, p->ranks, scratch, &n, err, errlen)) < 0)
                break;
            struct po_plan pl;
            if ((rc = assign_share(s, ps, e, scratch, n, &pl, err, errlen)) < 0)
                break;
            uint64_t nb = 0;
            for (uint32_t st = 0; st < pl.states; st++)
                nb += schedule_batch_count(pl.target_off[st + 1] - pl.target_off[st], p->batch_size);
            s->steps = SL_MAX(s->steps, nb);
            if (r == p->rank) {
                ps->eb[e] = malloc((nb + 1) * sizeof **ps->eb);
                if (!ps->eb[e]) {
                    po_plan_free(&pl);
                    rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
                    break;
                }
                uint64_t k = 0;
                for (uint32_t st = 0; st < pl.states; st++)
                    for (uint64_t t = pl.target_off[st]; t < pl.target_off[st + 1]; t += p->batch_size)
                        ps->eb[e][k++] = (struct pbatch){t, (uint32_t)SL_MIN(p->batch_size, pl.target_off[st + 1] - t), st};
                ep->batches[BATCH_TRAIN] = nb;
                ep->targets[BATCH_TRAIN] = n;
            }
            po_plan_free(&pl);
        }
        if (rc)
            break;
        uint64_t val = schedule_share_size(p->split_n[BATCH_VAL], p->rank, p->ranks);
        uint64_t nbv = schedule_batch_count(val, p->batch_size);
        if (nbv > 0 && ((e + 1) % p->eval_every == 0 || e + 1 == p->epochs)) {
            ep->batches[BATCH_VAL] = nbv;
            ep->targets[BATCH_VAL] = val;
        }
        if (e + 1 == p->epochs || (p->test_with_val && ep->batches[BATCH_VAL])) {
            uint64_t test = schedule_share_size(p->split_n[BATCH_TEST], p->rank, p->ranks);
            ep->batches[BATCH_TEST] = schedule_batch_count(test, p->batch_size);
            ep->targets[BATCH_TEST] = test;
        }
        g += ep->batches[BATCH_TRAIN] + ep->batches[BATCH_VAL] + ep->batches[BATCH_TEST];
    }
    s->len = g;
out:
    free(scratch);
    return rc;
}

static int psched_prepare(struct schedule *s, char *err, size_t errlen)
{
    struct psched *ps = s->impl;
    return schedule_fixed_eval_orders(s, ps->fixed, err, errlen);
}

static void psched_free(struct schedule *s)
{
    struct psched *ps = s->impl;
    if (!ps)
        return;
    for (uint32_t e = 0; ps->eb && e < s->p.epochs; e++)
        free(ps->eb[e]);
    free(ps->eb);
    free(ps->train);
    free(ps->tpart);
    for (int k = 0; k < BATCH_SPLITS; k++)
        free(ps->fixed[k]);
    free(ps);
    s->impl = NULL;
}

static void psched_at(const struct schedule *s, uint64_t g, struct schedule_pos *p)
{
    const struct psched *ps = s->impl;
    schedule_locate(s, g, p);
    if (p->split == BATCH_TRAIN) {
        p->first = ps->eb[p->epoch][p->k].first;
        p->targets = ps->eb[p->epoch][p->k].targets;
    } else {
        p->first = p->k * s->p.batch_size;
        p->targets = (uint32_t)SL_MIN(s->p.batch_size, s->epoch[p->epoch].targets[p->split] - p->first);
    }
}

uint32_t schedule_partitions_state(const struct schedule *s, const struct schedule_pos *p)
{
    const struct psched *ps = s->impl;
    if (p->split == BATCH_TRAIN)
        return ps->eb[p->epoch][p->k].state;
    return ps->eval == PARTITION_EVAL_BUFFER ? 0 : PO_EMPTY; /* the epoch's one state */
}

static uint64_t psched_seed(const struct schedule *s, const struct schedule_pos *p)
{
    return sampler_batch_seed(s->p.seed, p->epoch, s->p.rank, ((uint64_t)p->split << 56) | p->k);
}

static int psched_order(const struct schedule *s, uint32_t epoch, uint32_t split, uint64_t *scratch,
                        const uint64_t **out, char *err, size_t errlen)
{
    const struct psched *ps = s->impl;
    if (split != BATCH_TRAIN) {
        *out = ps->fixed[split];
        return 0;
    }
    uint64_t n;
    int rc = schedule_shuffle_share(s->ids[BATCH_TRAIN], s->p.split_n[BATCH_TRAIN], s->p.seed, epoch, s->p.rank,
                                    s->p.ranks, scratch, &n, err, errlen);
    if (rc)
        return rc;
    struct po_plan pl;
    if ((rc = assign_share(s, ps, epoch, scratch, n, &pl, err, errlen)) < 0)
        return rc;
    memcpy(scratch, pl.targets, (size_t)n * sizeof *scratch); /* the states in order */
    po_plan_free(&pl);
    *out = scratch;
    return 0;
}

const struct schedule_ops schedule_partitions_ops = {
    .name = SCHEDULE_PARTITIONS,
    .open = psched_open,
    .prepare = psched_prepare,
    .at = psched_at,
    .seed = psched_seed,
    .order = psched_order,
    .free = psched_free,
};

const struct schedule_ops *schedule_for_config(const struct config *c, char *arg, size_t len)
{
    if (c->pipeline.mode != PIPELINE_PARTITIONS) {
        if (len)
            arg[0] = '\0';
        return schedule_find(SCHEDULE_DEFAULT);
    }
    char dir[32];
    parts_dir_name((uint32_t)c->pipeline.partitions, dir, sizeof dir);
    snprintf(arg, len, "%" PRId64 ":%s:nodes:%s:%s:%s/%s", c->pipeline.buffer_partitions,
             po_order_name((enum po_order)c->pipeline.partition_order), partition_fill_name(c->pipeline.partition_fill),
             partition_eval_name(c->pipeline.partition_eval), c->dataset.path, dir);
    return &schedule_partitions_ops;
}

int schedule_partitions_spare(uint32_t p, uint32_t c, uint32_t k, enum po_order order, uint32_t *spare, char *err,
                              size_t errlen)
{
    struct po_params pp = {.parts = p, .slots = c, .train_parts = k, .order = order, .cover = PO_COVER_NODES};
    struct po_plan pl;
    int rc = po_plan_build(&pl, &pp, err, errlen);
    if (rc == 0)
        *spare = pl.single ? 0 : pl.group; /* the grouping's shape, not its draw: the same every epoch */
    po_plan_free(&pl);
    return rc;
}

bool schedule_partitions_eval_in_buffer(const struct schedule *s)
{
    return ((const struct psched *)s->impl)->eval == PARTITION_EVAL_BUFFER;
}

const struct parts_meta *schedule_partitions_meta(const struct schedule *s)
{
    return &((const struct psched *)s->impl)->pm;
}

const char *schedule_partitions_dir(const struct schedule *s)
{
    return ((const struct psched *)s->impl)->layout;
}

int schedule_partitions_node_pos(const struct schedule *s, void **out, bool *u64, char *err, size_t errlen)
{
    const struct psched *ps = s->impl;
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", ps->layout, parts_file_name[PARTS_NODE_POS]);
    enum dtype t = dtype_for_ids(ps->pm.nodes);
    size_t want = (size_t)(ps->pm.nodes * dtype_size(t)), len = 0;
    char *buf = NULL;
    int rc = sl_read_file(path, want + 1, &buf, &len, err, errlen);
    if (rc)
        return rc;
    if (len != want) {
        free(buf);
        return sl_errf(err, errlen, -EINVAL, "%s: %zu bytes, not the %zu of %" PRIu64 " nodes; remake the layout with "
                       "gnnprep partition", path, len, want, ps->pm.nodes);
    }
    *out = buf;
    *u64 = t == DTYPE_U64;
    return 0;
}
