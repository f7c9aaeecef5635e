/* results.h - the results page: what each trainer rank learned in each
 * epoch (loss, accuracies, time), in shared memory, for the launcher to
 * combine over ranks and print (DESIGN.md section 7; issue 5).
 *
 * Why a page and not a collective. Trainers all-reduce gradients once a
 * step; evaluation batches need no collective, and with mini-batch
 * reordering two ranks may finish an epoch's evaluation at different
 * points of their step sequence. So each rank adds its counts up locally
 * and publishes one record per epoch here; the launcher, which already
 * wakes up every second, prints an epoch's line once every rank has
 * published it, and the final test line at the end of the run.
 *
 * Records. A window of RESULTS_WINDOW epochs per rank: epoch e of rank r
 * lives in record (r, e mod RESULTS_WINDOW). The writer fills the record's
 * fields, then stores `epoch + 1` into `seq` (release); a reader loads
 * `seq` (acquire) and reads the fields when it equals e + 1. Before
 * reusing a record (epoch e >= RESULTS_WINDOW) a writer waits until the
 * reader's `consumed` counter (epochs printed) passes e - RESULTS_WINDOW,
 * so no record is overwritten unread (in practice never: ranks advance in
 * step and the reader reads every second). The test pass is the record of
 * the last epoch (test_labelled > 0 once its pass is in).
 *
 * Errors: 0 or -errno with a message in err (may be NULL). */
#ifndef SLUICE_IPC_RESULTS_H
#define SLUICE_IPC_RESULTS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "ipc/shm.h"

#define RESULTS_MAGIC 0x3153455243434c53ull /* "SLCCRES1" little endian */
#define RESULTS_WINDOW 64u
#define RESULTS_RANKS_MAX 65536u

/* One rank's epoch. Counts are of labelled targets. */
struct results_rec {
    _Atomic uint64_t seq; /* epoch + 1 once the fields below are complete */
    double loss_sum;      /* sum over training batches of (mean loss x labelled targets) */
    uint64_t train_batches;
    uint64_t train_labelled, train_correct;
    uint64_t val_labelled, val_correct; /* 0, 0 when the epoch did not evaluate */
    uint64_t test_labelled, test_correct;
    double seconds;  /* wall time of the epoch at this rank */
    double busy_s;   /* of which computing (forward, backward, step) */
    double reduce_s; /* of which in the gradient all-reduce */
    double train_s;  /* of seconds, until the epoch's last training step */
    double eval_s;   /* the rest: its validation (and, last, the test) batches */
    double val_loss_sum; /* sum over validation batches of (mean loss x labelled targets) */
    float lr;            /* the learning rate of the epoch's last step (the same on every rank) */
    uint32_t reserved;
};
_Static_assert(sizeof(struct results_rec) == 128, "two cache lines per record");

struct results_hdr {
    uint64_t magic;
    uint32_t ranks, window;
    uint64_t epochs;              /* epochs of the run */
    _Atomic uint64_t consumed;    /* epochs the reader has printed */
    uint64_t reserved[4];
};

struct results {
    struct results_hdr *hdr;
    struct results_rec *recs; /* (ranks, RESULTS_WINDOW) */
    uint32_t ranks;           /* hdr->ranks as checked at create/attach; the
                               * only bound used on recs (the header is shared,
                               * writable memory: never re-read for indexing) */
    struct shm_seg seg;
};

/* Creates /sluice.<run>.<object> for `ranks` ranks and `epochs` epochs. */
int results_create(struct results *r, const char *run_id, const char *object, uint32_t ranks, uint64_t epochs,
                   char *err, size_t errlen);
/* Attaches by full name (checks magic and sizes). */
int results_attach(struct results *r, const char *name, char *err, size_t errlen);
void results_free(struct results *r);

/* Writer (trainer of `rank`): the record to fill for epoch e, or NULL
 * while the reader has not consumed epoch e - window yet (retry after a
 * short sleep). */
struct results_rec *results_slot(struct results *r, uint32_t rank, uint64_t epoch);
/* Publishes a filled record as epoch e's. */
void results_publish(struct results_rec *rec, uint64_t epoch);

/* Reader: true when every rank has published epoch e; *sum then holds
 * the counts added over ranks (seconds, busy_s, reduce_s: the maximum). */
bool results_epoch(const struct results *r, uint64_t epoch, struct results_rec *sum);
/* Reader: rank's record of epoch e into *out when that rank has
 * published it (true); false otherwise. */
bool results_get(const struct results *r, uint32_t rank, uint64_t epoch, struct results_rec *out);
/* Adds rec into sum as results_epoch does over ranks: counts and loss_sum
 * add up, seconds, busy_s and reduce_s take the maximum. Summing the
 * records of ranks 0, 1, ... in turn into a zeroed sum gives the same bits
 * as results_epoch (a multi-node launcher does so over every node's ranks
 * in global rank order). */
void results_rec_add(struct results_rec *sum, const struct results_rec *rec);
/* Reader: epoch e is printed; writers may reuse its records. */
void results_consume(struct results *r, uint64_t epoch);

#endif
