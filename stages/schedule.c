/* schedule.c - what every schedule shares (contract: schedule.h): the
 * table of named schedules, opening and loading one, the queries on its
 * epoch table, and the cursor that turns batch numbers into targets
 * through the schedule's pass orders. */
#include "stages/schedule.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "stages/sampler.h"
#include "stages/schedule_partitions.h"

static const struct schedule_ops *const registry[] = {&schedule_shuffle_ops, &schedule_partitions_ops};

const struct schedule_ops *schedule_find(const char *name)
{
    for (size_t i = 0; i < sizeof registry / sizeof *registry; i++)
        if (name && !strcmp(registry[i]->name, name))
            return registry[i];
    return NULL;
}

int schedule_open(struct schedule *s, const struct schedule_ops *ops, const struct schedule_params *p, char *err,
                  size_t errlen)
{
    memset(s, 0, sizeof *s);
    s->ops = ops ? ops : &schedule_shuffle_ops;
    s->p = *p;
    if (p->epochs == 0 || p->batch_size == 0 || p->ranks == 0 || p->rank >= p->ranks || p->eval_every == 0)
        return sl_errf(err, errlen, -EINVAL,
                       "batch stream: %" PRIu32 " epochs, batch size %" PRIu64 ", rank %" PRIu32 " of %" PRIu32
                       ", eval every %" PRIu32,
                       p->epochs, p->batch_size, p->rank, p->ranks, p->eval_every);
    s->epoch = calloc(p->epochs, sizeof *s->epoch);
    if (!s->epoch)
        return sl_errf(err, errlen, -ENOMEM, "no memory for a %" PRIu32 "-epoch batch stream", p->epochs);
    int rc = s->ops->open(s, err, errlen);
    if (rc)
        schedule_free(s);
    return rc;
}

static int prepare(struct schedule *s, char *err, size_t errlen)
{
    s->loaded = true;
    return s->ops->prepare ? s->ops->prepare(s, err, errlen) : 0;
}

int schedule_load(struct schedule *s, const char *dir, const struct dataset_meta *m, char *err, size_t errlen)
{
    for (uint32_t k = 0; k < BATCH_SPLITS; k++) {
        if (s->p.split_n[k] == 0 && k != BATCH_TRAIN)
            continue;
        uint64_t n;
        int rc = sampler_split_load(dir, m, schedule_split_file(k), &s->own[k], &n, err, errlen);
        if (rc)
            return rc;
        if (n != s->p.split_n[k])
            return sl_errf(err, errlen, -EINVAL, "%s: the %s split has %" PRIu64 " ids, the schedule expects %" PRIu64,
                           dir, dataset_file_key[schedule_split_file(k)], n, s->p.split_n[k]);
        s->ids[k] = s->own[k];
    }
    return prepare(s, err, errlen);
}

int schedule_set_ids(struct schedule *s, const uint64_t *const ids[BATCH_SPLITS], char *err, size_t errlen)
{
    for (uint32_t k = 0; k < BATCH_SPLITS; k++) {
        if (s->p.split_n[k] && !ids[k])
            return sl_errf(err, errlen, -EINVAL, "no ids for split %" PRIu32 " of %" PRIu64, k, s->p.split_n[k]);
        s->ids[k] = s->p.split_n[k] ? ids[k] : NULL;
    }
    return prepare(s, err, errlen);
}

void schedule_free(struct schedule *s)
{
    if (!s)
        return;
    if (s->ops && s->ops->free)
        s->ops->free(s);
    for (int k = 0; k < BATCH_SPLITS; k++)
        free(s->own[k]);
    free(s->epoch);
    memset(s, 0, sizeof *s);
}

uint64_t schedule_epoch_start(const struct schedule *s, uint32_t e)
{
    return e < s->p.epochs ? s->epoch[e].start : s->len;
}

uint64_t schedule_pass_batches(const struct schedule *s, uint32_t e, uint32_t split)
{
    return e < s->p.epochs && split < BATCH_SPLITS ? s->epoch[e].batches[split] : 0;
}

uint64_t schedule_pass_targets(const struct schedule *s, uint32_t e, uint32_t split)
{
    return e < s->p.epochs && split < BATCH_SPLITS ? s->epoch[e].targets[split] : 0;
}

void schedule_at(const struct schedule *s, uint64_t g, struct schedule_pos *p)
{
    s->ops->at(s, g, p);
}

uint64_t schedule_seed(const struct schedule *s, const struct schedule_pos *p)
{
    return s->ops->seed(s, p);
}

/* ---- cursors -------------------------------------------------------------------------------- */

void schedule_cursor_init(struct schedule_cursor *c, const struct schedule *s, uint64_t first)
{
    memset(c, 0, sizeof *c);
    c->s = s;
    c->next = first;
    for (int k = 0; k < BATCH_SPLITS; k++)
        c->pass_epoch[k] = UINT32_MAX;
}

void schedule_cursor_free(struct schedule_cursor *c)
{
    if (!c)
        return;
    for (int k = 0; k < BATCH_SPLITS; k++)
        free(c->scratch[k]);
    memset(c, 0, sizeof *c);
}

int schedule_batch(struct schedule_cursor *c, uint64_t g, struct schedule_batch *b, char *err, size_t errlen)
{
    const struct schedule *s = c->s;
    if (g >= s->len)
        return sl_errf(err, errlen, -ERANGE, "batch %" PRIu64 " is past the end of the stream (%" PRIu64 " batches)", g,
                       s->len);
    if (!s->loaded)
        return sl_errf(err, errlen, -EINVAL, "batch %" PRIu64 ": the schedule has no targets (not loaded)", g);
    struct schedule_pos *p = &b->pos;
    s->ops->at(s, g, p);
    uint32_t k = p->split;
    if (c->pass_epoch[k] != p->epoch) {
        if (!c->scratch[k]) {
            c->scratch[k] = malloc((size_t)SL_MAX(s->p.split_n[k], 1) * sizeof *c->scratch[k]);
            if (!c->scratch[k])
                return sl_errf(err, errlen, -ENOMEM, "no memory for a pass over %" PRIu64 " targets", s->p.split_n[k]);
        }
        c->pass_epoch[k] = UINT32_MAX;
        const uint64_t *order = c->scratch[k];
        int rc = s->ops->order(s, p->epoch, k, c->scratch[k], &order, err, errlen);
        if (rc)
            return rc;
        c->pass[k] = order;
        c->pass_epoch[k] = p->epoch;
    }
    b->targets = c->pass[k] + p->first;
    b->seed = s->ops->seed(s, p);
    return 0;
}

int schedule_next(struct schedule_cursor *c, struct schedule_batch *b, char *err, size_t errlen)
{
    if (c->next >= c->s->len)
        return -ENODATA;
    int rc = schedule_batch(c, c->next, b, err, errlen);
    if (rc == 0)
        c->next++;
    return rc;
}

/* ---- the splits ------------------------------------------------------------------------------ */

int schedule_split_file(uint32_t split)
{
    static const int files[BATCH_SPLITS] = {DATASET_TRAIN, DATASET_VAL, DATASET_TEST};
    return split < BATCH_SPLITS ? files[split] : -1;
}

void schedule_split_sizes(const struct dataset_meta *m, uint64_t n[BATCH_SPLITS])
{
    for (uint32_t k = 0; k < BATCH_SPLITS; k++) {
        const struct dataset_file *f = &m->f[schedule_split_file(k)];
        n[k] = f->present ? f->rows : 0;
    }
}

/* The split (BATCH_*) holding the ids of a prediction over one split. */
static uint32_t predict_split(enum run_predict which)
{
    return which == RUN_PREDICT_TRAIN ? BATCH_TRAIN : which == RUN_PREDICT_VAL ? BATCH_VAL : BATCH_TEST;
}

void schedule_predict_sizes(const struct dataset_meta *m, enum run_predict which, uint64_t n[BATCH_SPLITS])
{
    uint64_t all[BATCH_SPLITS];
    schedule_split_sizes(m, all);
    for (uint32_t k = 0; k < BATCH_SPLITS; k++)
        n[k] = 0;
    n[BATCH_TEST] = which == RUN_PREDICT_ALL ? m->nodes : all[predict_split(which)];
}

int schedule_load_predict(struct schedule *s, const char *dir, const struct dataset_meta *m, enum run_predict which,
                          char *err, size_t errlen)
{
    uint64_t n = s->p.split_n[BATCH_TEST];
    if (which == RUN_PREDICT_ALL) {
        if (n != m->nodes)
            return sl_errf(err, errlen, -EINVAL, "a prediction over all %" PRIu64 " nodes has %" PRIu64 " targets",
                           m->nodes, n);
        if (!(s->own[BATCH_TEST] = malloc((size_t)SL_MAX(n, 1) * sizeof(uint64_t))))
            return sl_errf(err, errlen, -ENOMEM, "out of memory for the ids of %" PRIu64 " nodes", n);
        for (uint64_t i = 0; i < n; i++)
            s->own[BATCH_TEST][i] = i;
    } else {
        uint32_t k = predict_split(which);
        uint64_t got;
        int rc = sampler_split_load(dir, m, schedule_split_file(k), &s->own[BATCH_TEST], &got, err, errlen);
        if (rc)
            return rc;
        if (got != n)
            return sl_errf(err, errlen, -EINVAL, "%s: the %s split has %" PRIu64 " ids, the schedule expects %" PRIu64,
                           dir, dataset_file_key[schedule_split_file(k)], got, n);
    }
    s->ids[BATCH_TEST] = s->own[BATCH_TEST];
    return prepare(s, err, errlen);
}
