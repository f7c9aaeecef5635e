/* schedule.h - the batch schedule of one rank: which batches a run has,
 * in which order, and what batch number g holds (its epoch, its split,
 * its targets, its sampling seed). The sampler turns batch g into a
 * sampled batch; the extractor, the trainer and the launcher only count
 * and check batches against the schedule. Nobody else decides batch
 * membership, pass lengths or epoch boundaries.
 *
 * Batch numbers. g = 0, 1, ... schedule_len() - 1 over the whole run
 * (struct run_desc.batch). The stream is a sequence of epochs; epoch e
 * starts at schedule_epoch_start(e) (start(epochs) = len) and is a
 * sequence of passes, one per split with schedule_pass_batches(e, split)
 * > 0, in split order (training, then validation, then test). A pass over
 * a split cuts an order of that split's targets (the pass order, see
 * order below) into consecutive batches: batch k of the pass holds
 * targets [first, first + targets) of the order, no target twice.
 *
 * Determinism. Everything about batch g - position, targets, seed - is a
 * function of (struct schedule_params, the split ids, g) only: never of
 * which thread asks, in which order, or what was asked before. Any number
 * of cursors may compute any batches in any order and agree; a lookahead
 * (a consumer peeking at g + k before g is consumed) is just a second
 * cursor, and costs one pass order per (epoch, split) it enters.
 *
 * The table. A schedule is a struct schedule_ops (chosen by name with
 * schedule_find, or passed directly: tests plug in their own) plus the
 * generic code in schedule.c:
 *   open     lays out the run from s->p (checked: epochs, batch size,
 *            eval_every >= 1, rank < ranks): fills s->epoch[0 .. epochs)
 *            (allocated and zeroed by schedule_open; start, batches and
 *            targets of each pass), s->len and s->steps; may keep state
 *            in s->impl. Counting only: no ids.
 *   prepare  (may be NULL) called once the split ids are in s->ids
 *            (schedule_load or schedule_set_ids): builds what every
 *            cursor shares (the default: the fixed validation and test
 *            orders).
 *   at       batch g (< len) -> struct schedule_pos.
 *   seed     the sampling seed of a position.
 *   order    the pass order of (epoch, split) for this rank: either
 *            written into scratch (room for p.split_n[split] ids) or
 *            pointed at an array the schedule owns; the first
 *            s->epoch[e].targets[split] entries are the pass. The hook
 *            a partition-ordered schedule replaces; an offline reader
 *            points into its file.
 *   free     releases s->impl (open may have failed half-way).
 * The cursor (schedule.c) caches one pass order per split and recomputes
 * it when a batch of another epoch of that split is asked for.
 * Variants to come fit this way: a partition-ordered schedule supplies
 * its own order (and open, if its passes differ in length); a reader of
 * offline-sampled batches lays the run out from its file (p.arg) in open
 * and points order into it; a lookahead window opens a cursor of its own
 * on the same schedule and asks for g + k whenever it likes.
 *
 * Threads. A schedule is read-only after open/prepare and may be shared;
 * a cursor belongs to one thread.
 *
 * Errors: 0 or -errno with a message in err (may be NULL). Nothing blocks
 * except schedule_load's file reads. */
#ifndef SLUICE_STAGES_SCHEDULE_H
#define SLUICE_STAGES_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"
#include "ipc/batch.h"
#include "ipc/run.h"

/* What a rank's schedule is made from. */
struct schedule_params {
    uint64_t split_n[BATCH_SPLITS]; /* ids in the train, val and test splits (0: absent) */
    uint32_t rank, ranks;           /* global rank and world (layout.h) */
    uint64_t batch_size;            /* targets per batch, at most */
    uint32_t epochs, eval_every;    /* train.epochs, train.eval_every */
    bool test_with_val;             /* a test pass after every validation pass (early stopping), not only the last epoch */
    uint64_t seed;                  /* train.seed */
    const char *arg;                /* the variant's own argument (a file, ...), NULL for none */
};

/* One epoch of the rank's stream. */
struct schedule_epoch {
    uint64_t start;                 /* its first batch number */
    uint64_t batches[BATCH_SPLITS]; /* batches of its pass over each split (0: no such pass) */
    uint64_t targets[BATCH_SPLITS]; /* targets of that pass */
};

/* Where batch g is. */
struct schedule_pos {
    uint64_t g;
    uint32_t epoch;
    uint32_t split;   /* enum batch_split */
    uint64_t k;       /* batch within the pass */
    uint64_t first;   /* its first target's index in the pass order */
    uint32_t targets; /* its target count (>= 1) */
};

/* Batch g in full. */
struct schedule_batch {
    struct schedule_pos pos;
    uint64_t seed;           /* the sampler's RNG seed for it */
    const uint64_t *targets; /* (pos.targets) node ids; valid until the cursor's next call */
};

struct schedule;

struct schedule_ops {
    const char *name;
    int (*open)(struct schedule *s, char *err, size_t errlen);
    int (*prepare)(struct schedule *s, char *err, size_t errlen);
    void (*at)(const struct schedule *s, uint64_t g, struct schedule_pos *p);
    uint64_t (*seed)(const struct schedule *s, const struct schedule_pos *p);
    int (*order)(const struct schedule *s, uint32_t epoch, uint32_t split, uint64_t *scratch, const uint64_t **out,
                 char *err, size_t errlen);
    void (*free)(struct schedule *s);
};

struct schedule {
    const struct schedule_ops *ops;
    struct schedule_params p;          /* p.arg is borrowed */
    uint64_t len;                      /* batches in the run */
    uint64_t steps;                    /* the most training batches any rank has in any epoch */
    struct schedule_epoch *epoch;      /* (p.epochs), filled by ops->open */
    const uint64_t *ids[BATCH_SPLITS]; /* each split's ids (p.split_n[k]) once loaded, else NULL */
    uint64_t *own[BATCH_SPLITS];       /* those schedule_load read (freed with the schedule) */
    bool loaded;
    void *impl; /* the variant's state */
};

/* The schedule called `name` ("shuffle", the default), or NULL. */
const struct schedule_ops *schedule_find(const char *name);
#define SCHEDULE_DEFAULT "shuffle"

/* Lays out a rank's schedule with ops (NULL: the default). Counting only;
 * enough for schedule_len, _epoch_start, _pass_*, _at and _seed. 0, -EINVAL (no
 * epochs, batch size 0, eval_every 0, rank >= ranks), -ENOMEM, or the
 * variant's error. */
int schedule_open(struct schedule *s, const struct schedule_ops *ops, const struct schedule_params *p, char *err,
                  size_t errlen);
/* Reads the ids of the training split and of every other split with
 * p.split_n > 0 from the dataset in dir (their counts must match) so that
 * cursors can hand out targets. 0, -ENOENT (no training split), -EINVAL
 * (count mismatch), or sampler_split_load's / prepare's error. */
int schedule_load(struct schedule *s, const char *dir, const struct dataset_meta *m, char *err, size_t errlen);
/* The same with the caller's arrays (ids[k]: p.split_n[k] ids), which
 * must outlive the schedule. Call one of the two, once. */
int schedule_set_ids(struct schedule *s, const uint64_t *const ids[BATCH_SPLITS], char *err, size_t errlen);
/* Frees; accepts a zeroed or half-opened schedule. */
void schedule_free(struct schedule *s);

static inline uint64_t schedule_len(const struct schedule *s)
{
    return s->len;
}

/* First batch number of epoch e (e <= p.epochs; e = epochs gives len). */
uint64_t schedule_epoch_start(const struct schedule *s, uint32_t e);
/* Batches and targets of epoch e's pass over split (0: no such pass). */
uint64_t schedule_pass_batches(const struct schedule *s, uint32_t e, uint32_t split);
uint64_t schedule_pass_targets(const struct schedule *s, uint32_t e, uint32_t split);
/* Training steps every rank takes in an epoch (the trainer pads to it). */
static inline uint64_t schedule_steps(const struct schedule *s)
{
    return s->steps;
}

/* Batch g (< len) of the schedule. */
void schedule_at(const struct schedule *s, uint64_t g, struct schedule_pos *p);
/* The sampling seed of the batch at p. */
uint64_t schedule_seed(const struct schedule *s, const struct schedule_pos *p);

/* A thread's view of a loaded schedule. */
struct schedule_cursor {
    const struct schedule *s;
    uint64_t next;                      /* schedule_next's next batch */
    uint64_t *scratch[BATCH_SPLITS];    /* (p.split_n[k]) allocated when first needed */
    const uint64_t *pass[BATCH_SPLITS]; /* the cached pass order of each split ... */
    uint32_t pass_epoch[BATCH_SPLITS];  /* ... and its epoch (UINT32_MAX: none) */
};

/* A cursor over s (schedule_load/set_ids done) whose schedule_next starts
 * at batch `first`. Never fails (memory comes with the first batch). */
void schedule_cursor_init(struct schedule_cursor *c, const struct schedule *s, uint64_t first);
void schedule_cursor_free(struct schedule_cursor *c);
/* Batch g (< len): position, seed and targets. 0, -ERANGE (g >= len),
 * -ENOMEM, or the order's error. */
int schedule_batch(struct schedule_cursor *c, uint64_t g, struct schedule_batch *b, char *err, size_t errlen);
/* The cursor's next batch, then advances: 0, -ENODATA past the last
 * batch, or schedule_batch's error. */
int schedule_next(struct schedule_cursor *c, struct schedule_batch *b, char *err, size_t errlen);

/* ---- the splits --------------------------------------------------------------------------- */

/* The dataset file of a split (enum batch_split -> DATASET_TRAIN, DATASET_VAL,
 * DATASET_TEST; -1 for none), and every split's id count from the dataset's
 * metadata (0 for an absent split). */
int schedule_split_file(uint32_t split);
void schedule_split_sizes(const struct dataset_meta *m, uint64_t n[BATCH_SPLITS]);

/* A prediction run (gnnlaunch --predict; docs/inference.md): one epoch
 * whose only pass is a test-split pass over the predicted nodes - every
 * node (RUN_PREDICT_ALL) or one split's ids - so that the default
 * schedule cuts them into batches in a fixed order and shares them out
 * over the ranks as it does a test split. schedule_predict_sizes gives
 * the split sizes for struct schedule_params (with epochs = 1);
 * schedule_load_predict the ids, in place of schedule_load (0 or -errno
 * as that). */
void schedule_predict_sizes(const struct dataset_meta *m, enum run_predict which, uint64_t n[BATCH_SPLITS]);
int schedule_load_predict(struct schedule *s, const char *dir, const struct dataset_meta *m, enum run_predict which,
                          char *err, size_t errlen);

/* ---- the default schedule, "shuffle" (schedule_default.c) ---------------------------------- *
 * Epoch e consists of the training pass of e, then - if e is an
 * evaluation epoch ((e + 1) is a multiple of eval_every, or e is the last)
 * and there is a validation split - the validation pass; after the last
 * epoch's passes comes the test pass. Each pass cuts the rank's share of
 * its split into batches of batch_size targets, the last one shorter; the
 * share is schedule_shuffle_share of the split, at epoch e for training
 * and at epoch 0 for validation and test (so evaluation batches are the
 * same every time). Training batch k of epoch e is sampled with seed
 * sampler_batch_seed(seed, e, rank, k); evaluation batches get distinct
 * seeds (split in the top bits of k). */
extern const struct schedule_ops schedule_shuffle_ops;

/* Rank `rank` of `ranks`'s share of epoch `epoch`: shuffles ids[0 .. n)
 * with a permutation seeded by (seed, epoch) only - the same on every
 * rank - and writes the slice [rank*n/ranks, (rank+1)*n/ranks) of it into
 * out (room for n entries), its length into *share. The ranks' slices
 * cover the ids exactly once and differ in size by at most one. ids is not
 * modified. 0 or -EINVAL (rank >= ranks, ranks = 0). */
int schedule_shuffle_share(const uint64_t *ids, uint64_t n, uint64_t seed, uint32_t epoch, uint32_t rank,
                           uint32_t ranks, uint64_t *out, uint64_t *share, char *err, size_t errlen);

/* The validation and test pass orders every schedule keeps fixed for the
 * run: each split's share at epoch 0 (schedule_shuffle_share), malloc'd
 * into fixed[k] for k = BATCH_VAL.. with p.split_n[k] > 0 (the caller
 * frees them, also after an error). For a variant's prepare. 0, -ENOMEM
 * or the share's error. */
int schedule_fixed_eval_orders(const struct schedule *s, uint64_t *fixed[BATCH_SPLITS], char *err, size_t errlen);

/* Where batch g (< the schedule's length) falls by the epoch table:
 * p->g, p->epoch (the last epoch starting at or before g), p->split and
 * p->k (its index in that pass). A variant's at() fills first and targets
 * from them. */
void schedule_locate(const struct schedule *s, uint64_t g, struct schedule_pos *p);

/* Targets in rank `rank` of `ranks`'s share of n ids (0 for a bad rank). */
uint64_t schedule_share_size(uint64_t n, uint32_t rank, uint32_t ranks);

/* Batches of batch_size targets that n targets make (the last shorter). */
static inline uint64_t schedule_batch_count(uint64_t n, uint64_t batch_size)
{
    return batch_size ? (n + batch_size - 1) / batch_size : 0;
}

#endif
