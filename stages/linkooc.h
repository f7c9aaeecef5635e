/* linkooc.h - link prediction with node embeddings larger than memory
 * (issue 23; Marius §4, docs/link.md "Out of core"): the node table in p
 * partitions on disk with its Adagrad sums beside it, the training
 * triples in p x p edge buckets, and epochs that walk BETA's buffer
 * states (core/partorder.h) through a buffer of c partitions with
 * write-back (stages/embbuf.h). The relation table stays in memory
 * (stages/link.h's link_model with node NULL).
 *
 * Partitions. Node v is in partition v / part_nodes, part_nodes =
 * ceil(nodes / p): contiguous id ranges. Contiguous because the
 * initialisation draws the table row after row from one stream
 * (link_init_stream): partition after partition is then the same draw,
 * and the out-of-core table starts bit for bit as the in-memory one. The
 * buckets stay balanced when ids say nothing about the graph (gnnprep
 * synth and import number nodes so); a dataset whose ids cluster edges
 * gets unequal buckets, which costs time but not correctness.
 *
 * The layout, in dir (written at the start of every run, into
 * dir.partial-<pid> then renamed; the run's working copy, not a
 * checkpoint):
 *   embeddings.bin  p slots of part_bytes = round_up(2 * part_nodes * d *
 *                   4, 4096): the part_nodes embedding rows (d float32),
 *                   then their Adagrad sums, then zeros. One read brings
 *                   both. The last partition's rows past the table are 0.
 *   buckets.bin     the training triples grouped by bucket (head
 *                   partition, tail partition), bucket (i, j) at record
 *                   bucket_off[i * p + j]; a record is four u64 (index in
 *                   the training split, head, relation, tail), in split
 *                   order within a bucket.
 *
 * An epoch. The plan is BETA's states over p partitions and c slots
 * (PO_COVER_PAIRS); bucket (i, j) trains in the first state that holds
 * both i and j, so every bucket trains exactly once an epoch. Even epochs
 * walk the states forwards, odd ones backwards: each epoch then starts in
 * the state the one before ended in, and the partitions loaded an epoch
 * are BETA's swaps, no more (after the first epoch's c). With
 * linkooc_params.comet (the GNN encoder's order) the plan is COMET's,
 * made anew every epoch, each bucket trains in a state drawn among those
 * holding both its partitions (linkooc_assign), and every epoch walks
 * forwards; with a trainer that has an encoder (link_trainer.enc) each
 * state restricts the encoder's neighbourhoods to the buffer's nodes
 * (linkenc_set_buffer). In state s the
 * run switches the buffer to s (evicted partitions are written back
 * asynchronously), queues the prefetch of the next state, reads s's
 * buckets, orders their triples
 * by split index and shuffles them with link_shuffle(seed, epoch, s), and
 * trains them as one slice (link_train_slice) with uniform negatives
 * drawn from the nodes of the partitions in the buffer and degree
 * negatives from the state's triples; batch numbers run on across the
 * epoch's states. The epoch ends with a flush: embeddings.bin then holds
 * the whole table, which is what checkpoints and evaluation read.
 * With c = p there is one state holding every partition and every
 * triple in split order: the epoch is link_train_epoch's, bit for bit.
 *
 * Crash safety. embeddings.bin changes under write-back in the middle of
 * an epoch; only checkpoints (written from it after the flush) commit
 * an epoch. --resume rebuilds the layout and overwrites its table from the
 * checkpoint (linkooc_restore).
 *
 * Errors: 0 or -errno with a message naming the file; -EINVAL for
 * impossible parameters (c < 2, c > p, p > nodes); -EDOM/-EINTR from the
 * training as link_train_slice. Threads: one caller (the buffer has its
 * own I/O thread). */
#ifndef SLUICE_STAGES_LINKOOC_H
#define SLUICE_STAGES_LINKOOC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/partorder.h"
#include "stages/embbuf.h"
#include "stages/link.h"

struct linkooc_params {
    uint32_t parts, slots; /* p >= 2, 2 <= c <= p, p <= nodes */
    unsigned depth;        /* requests in flight (embbuf.h); 0: default */
    size_t io_bytes;       /* bytes a request; 0: default */
    bool buffered;         /* page cache instead of O_DIRECT */
    bool comet;            /* COMET's plan and bucket assignment (the GNN encoder's) instead of BETA's */
};

struct linkooc_stats {
    uint64_t states, swaps;           /* this epoch: buffer states, partitions loaded */
    struct embbuf_stats buf;          /* the buffer's counters since linkooc_init */
    double read_buckets_s, train_s;   /* this epoch: reading and ordering buckets, training slices */
};

struct linkooc;
struct linkooc_view {
    struct linkooc *x;
    bool g2;
};

struct linkooc {
    struct link_opts o;
    uint64_t nodes, relations, ntrain;
    uint32_t d, parts, slots;
    uint64_t part_nodes;
    size_t part_bytes;
    uint64_t *bucket_off;   /* (p * p + 1) records */
    uint32_t *bucket_state; /* (p * p) the state that trains the bucket (this epoch's: linkooc_assign) */
    enum po_order order;
    uint32_t assigned;      /* the epoch bucket_state is for */
    struct po_plan plan;
    struct embbuf buf;
    int rfd, bfd; /* embeddings.bin (buffered, for checkpoints and evaluation), buckets.bin */
    /* a state's triples */
    uint64_t cap;
    uint64_t *rec, *tri, *perm; /* (cap, 4), (cap, 3), (cap) */
    float **part;               /* (p) frames as link_rows wants them */
    uint32_t *inbuf;            /* (c) partitions in the buffer, ascending */
    struct linkooc_stats st;
    uint64_t loads_before; /* buffer loads at the start of the epoch */
    struct linkooc_view view[2]; /* embeddings, Adagrad sums */
    char dir[4096], emb_path[4200], bkt_path[4200];
};

/* Where the training triples come from: read(arg, first, count, dst)
 * copies triples first .. first+count-1 (head, relation, tail as u64)
 * into dst; called in order, twice over, count at most 65536. 0 or
 * -errno with a message. linkooc_read_array reads an in-memory (n, 3)
 * array given as arg. */
struct linkooc_triples {
    int (*read)(void *arg, uint64_t first, uint64_t count, uint64_t *dst, char *err, size_t errlen);
    void *arg;
};
int linkooc_read_array(void *arg, uint64_t first, uint64_t count, uint64_t *dst, char *err, size_t errlen);

/* Writes the layout in dir from the ntrain training triples (read twice,
 * never held whole) and the seeded initial table, inits m's relation table
 * as link_model_init would (m->node NULL), builds the plan and opens the
 * buffer. 0 or -errno; on failure nothing is left in dir. */
int linkooc_init(struct linkooc *x, const char *dir, const struct linkooc_params *pp, const struct link_opts *o,
                 uint64_t nodes, uint64_t relations, const struct linkooc_triples *train, uint64_t ntrain,
                 struct link_model *m, char *err, size_t errlen);
/* Closes the buffer (dirty partitions not flushed are dropped: call after
 * an epoch's flush) and frees; remove: also delete the layout's files. */
void linkooc_free(struct linkooc *x, bool remove);

/* Replaces the table (embeddings and Adagrad sums, nodes x d each) with
 * these, e.g. a checkpoint's. Only between epochs (after the flush). */
int linkooc_restore(struct linkooc *x, const float *emb, const float *g2, char *err, size_t errlen);

/* Gives every bucket to the state that trains it in epoch `epoch`: BETA
 * the first state holding both its partitions (every epoch the same
 * plan and states); COMET first builds the epoch's plan (a new random
 * grouping of the partitions into logical ones, from (seed, epoch)), then
 * gives each bucket a state drawn uniformly among those holding both its
 * partitions (MariusGNN's randomised deferred assignment), from (seed,
 * epoch, bucket), so that the states train uncorrelated, balanced sets of
 * edges. Every bucket then trains in
 * exactly one state an epoch. linkooc_epoch calls it; 0, -EINVAL (a pair
 * in no state), -ENOMEM. */
int linkooc_assign(struct linkooc *x, uint32_t epoch, char *err, size_t errlen);

/* Epoch e as above, with trainer t (made with link_trainer_init(t, m, o,
 * NULL, 1)); *loss the mean batch loss. Ends flushed. */
int linkooc_epoch(struct linkooc *x, struct link_trainer *t, uint32_t epoch, double *loss, char *err, size_t errlen);

/* Copies rows first .. first+count-1 of the table (emb or, g2 true, the
 * Adagrad sums) into dst from embeddings.bin: link_eval_opts.rows for
 * evaluation, between epochs. */
int linkooc_rows(void *x, uint64_t first, uint64_t count, float *dst, char *err, size_t errlen);
/* The bytes [off, off + len) of the table as one (nodes, d) float32
 * array: arg is the struct linkooc for the embeddings, and
 * linkooc_g2_arg(x) for the Adagrad sums (ckpt_fill, .npy writers). */
int linkooc_table_bytes(void *arg, uint64_t off, void *dst, size_t len, char *err, size_t errlen);
void *linkooc_g2_arg(struct linkooc *x);

/* BETA's swaps an epoch (after the first state's loads) and Marius's
 * lower bound, for these p and c. */
uint64_t linkooc_expected_swaps(uint32_t p, uint32_t c);

#endif
