/* schedule_default.c - the default batch schedule, "shuffle": the
 * shuffled per-epoch stream (what it is: schedule.h, "the default
 * schedule"). Its state is the fixed validation and test orders of the
 * rank, built once by prepare and shared by every cursor. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "stages/sampler.h"
#include "stages/schedule.h"

/* The rank's shares of the validation and test splits (epoch 0's
 * shuffle); NULL for the training split and absent splits. */
struct shuffle_state {
    uint64_t *fixed[BATCH_SPLITS];
};

int schedule_shuffle_share(const uint64_t *ids, uint64_t n, uint64_t seed, uint32_t epoch, uint32_t rank,
                           uint32_t ranks, uint64_t *out, uint64_t *share, char *err, size_t errlen)
{
    *share = 0;
    if (ranks == 0 || rank >= ranks)
        return sl_errf(err, errlen, -EINVAL, "rank %" PRIu32 " of %" PRIu32 " ranks", rank, ranks);
    /* The slice bounds, without overflow for any n. */
    unsigned __int128 lo128 = (unsigned __int128)n * rank / ranks;
    unsigned __int128 hi128 = (unsigned __int128)n * (rank + 1) / ranks;
    uint64_t lo = (uint64_t)lo128, hi = (uint64_t)hi128;
    /* Fisher-Yates from the back, seeded by (seed, epoch) only, so every
     * rank computes the same permutation; positions at or above lo are
     * final once the loop passes them, so the loop stops at lo. */
    memcpy(out, ids, (size_t)n * sizeof *out);
    uint64_t st = sampler_batch_seed(seed, epoch, UINT32_MAX, UINT64_MAX);
    for (uint64_t i = n; i > 1 && i > lo; i--) {
        uint64_t j = sampler_rand_below(&st, i);
        uint64_t x = out[i - 1];
        out[i - 1] = out[j];
        out[j] = x;
    }
    memmove(out, out + lo, (size_t)(hi - lo) * sizeof *out);
    *share = hi - lo;
    return 0;
}

uint64_t schedule_share_size(uint64_t n, uint32_t rank, uint32_t ranks)
{
    if (ranks == 0 || rank >= ranks)
        return 0;
    return (uint64_t)((unsigned __int128)n * (rank + 1) / ranks - (unsigned __int128)n * rank / ranks);
}

/* Whether epoch e ends with a validation pass. */
static bool evaluates(const struct schedule *s, uint32_t e)
{
    const struct schedule_params *p = &s->p;
    return schedule_batch_count(schedule_share_size(p->split_n[BATCH_VAL], p->rank, p->ranks), p->batch_size) > 0 &&
           ((e + 1) % p->eval_every == 0 || e + 1 == p->epochs);
}

static int shuffle_open(struct schedule *s, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    const struct schedule_params *p = &s->p;
    uint64_t share[BATCH_SPLITS], nb[BATCH_SPLITS];
    for (int k = 0; k < BATCH_SPLITS; k++) {
        share[k] = schedule_share_size(p->split_n[k], p->rank, p->ranks);
        nb[k] = schedule_batch_count(share[k], p->batch_size);
    }
    uint64_t g = 0;
    for (uint32_t e = 0; e < p->epochs; e++) {
        struct schedule_epoch *ep = &s->epoch[e];
        ep->start = g;
        ep->batches[BATCH_TRAIN] = nb[BATCH_TRAIN];
        ep->targets[BATCH_TRAIN] = share[BATCH_TRAIN];
        if (evaluates(s, e)) {
            ep->batches[BATCH_VAL] = nb[BATCH_VAL];
            ep->targets[BATCH_VAL] = share[BATCH_VAL];
        }
        if (e + 1 == p->epochs || (p->test_with_val && ep->batches[BATCH_VAL])) {
            ep->batches[BATCH_TEST] = nb[BATCH_TEST];
            ep->targets[BATCH_TEST] = share[BATCH_TEST];
        }
        g += ep->batches[BATCH_TRAIN] + ep->batches[BATCH_VAL] + ep->batches[BATCH_TEST];
    }
    s->len = g;
    /* every rank pads its epoch to the largest rank's training batch count */
    s->steps = 0;
    for (uint32_t r = 0; r < p->ranks; r++)
        s->steps = SL_MAX(
            s->steps, schedule_batch_count(schedule_share_size(p->split_n[BATCH_TRAIN], r, p->ranks), p->batch_size));
    return 0;
}

static int shuffle_prepare(struct schedule *s, char *err, size_t errlen)
{
    struct shuffle_state *st = calloc(1, sizeof *st);
    if (!st)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    s->impl = st;
    return schedule_fixed_eval_orders(s, st->fixed, err, errlen);
}

void schedule_locate(const struct schedule *s, uint64_t g, struct schedule_pos *p)
{
    /* the last epoch whose start is <= g */
    uint32_t lo = 0, hi = s->p.epochs - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo + 1) / 2;
        if (s->epoch[mid].start <= g)
            lo = mid;
        else
            hi = mid - 1;
    }
    const struct schedule_epoch *ep = &s->epoch[lo];
    uint64_t off = g - ep->start;
    uint32_t k = BATCH_TRAIN;
    while (k + 1 < BATCH_SPLITS && off >= ep->batches[k])
        off -= ep->batches[k++];
    p->g = g;
    p->epoch = lo;
    p->split = k;
    p->k = off;
}

int schedule_fixed_eval_orders(const struct schedule *s, uint64_t *fixed[BATCH_SPLITS], char *err, size_t errlen)
{
    for (int k = BATCH_VAL; k < BATCH_SPLITS; k++) {
        uint64_t n = s->p.split_n[k], share;
        if (n == 0)
            continue;
        fixed[k] = malloc((size_t)n * sizeof *fixed[k]);
        if (!fixed[k])
            return sl_errf(err, errlen, -ENOMEM, "no memory for a share of %" PRIu64 " targets", n);
        int rc = schedule_shuffle_share(s->ids[k], n, s->p.seed, 0, s->p.rank, s->p.ranks, fixed[k], &share, err,
                                        errlen);
        if (rc)
            return rc;
    }
    return 0;
}

static void shuffle_free(struct schedule *s)
{
    struct shuffle_state *st = s->impl;
    if (!st)
        return;
    for (int k = 0; k < BATCH_SPLITS; k++)
        free(st->fixed[k]);
    free(st);
    s->impl = NULL;
}

static void shuffle_at(const struct schedule *s, uint64_t g, struct schedule_pos *p)
{
    schedule_locate(s, g, p);
    p->first = p->k * s->p.batch_size;
    p->targets = (uint32_t)SL_MIN(s->p.batch_size, s->epoch[p->epoch].targets[p->split] - p->first);
}

static uint64_t shuffle_seed(const struct schedule *s, const struct schedule_pos *p)
{
    return sampler_batch_seed(s->p.seed, p->epoch, s->p.rank, ((uint64_t)p->split << 56) | p->k);
}

static int shuffle_order(const struct schedule *s, uint32_t epoch, uint32_t split, uint64_t *scratch,
                         const uint64_t **out, char *err, size_t errlen)
{
    const struct shuffle_state *st = s->impl;
    if (split != BATCH_TRAIN) {
        *out = st->fixed[split];
        return 0;
    }
    uint64_t n;
    *out = scratch;
    return schedule_shuffle_share(s->ids[BATCH_TRAIN], s->p.split_n[BATCH_TRAIN], s->p.seed, epoch, s->p.rank,
                                  s->p.ranks, scratch, &n, err, errlen);
}

const struct schedule_ops schedule_shuffle_ops = {
    .name = SCHEDULE_DEFAULT,
    .open = shuffle_open,
    .prepare = shuffle_prepare,
    .at = shuffle_at,
    .seed = shuffle_seed,
    .order = shuffle_order,
    .free = shuffle_free,
};
