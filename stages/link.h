/* link.h - link prediction with learnt node embeddings held in memory
 * (issue 23's first part; docs/link.md): the model (node and relation
 * tables with their Adagrad state), one epoch of training over a link
 * dataset's training triples, and the evaluation (MRR, Hits@1/3/10, mean
 * rank; full ranking, raw or filtered, or against sampled negatives).
 * The operators are ops/kge.h's; this module owns the batches, the
 * negatives, the sparse updates and the ranking loops.
 *
 * Epoch e: the training triples in a permutation drawn from (seed, e),
 * cut into batches of opts.batch; batch k's negatives come from a
 * generator seeded by (seed, e, k): each is, with probability
 * opts.degree_frac, an endpoint of a uniformly drawn training triple
 * (so drawn in proportion to its training degree), else a uniform node.
 * Everything is a function of the seed and the data: two runs give the
 * same bits, whatever the thread count (ops/kge.h).
 *
 * Sides (opts.sides): LINK_SIDES_BOTH corrupts heads and tails with each
 * chunk's negatives (Marius); LINK_SIDES_TAIL tails only; LINK_SIDES_PYG
 * is PyG's KGE training: one negative per positive (chunk = negs = 1),
 * heads corrupted in the batch's first half, tails in its second.
 *
 * Errors: 0 or -errno with a message; -EDOM when a loss or gradient is
 * not finite (the message names epoch and batch). Threads: one caller. */
#ifndef SLUICE_STAGES_LINK_H
#define SLUICE_STAGES_LINK_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ops/kge.h"

enum link_sides { LINK_SIDES_BOTH = 0, LINK_SIDES_TAIL = 1, LINK_SIDES_PYG = 2 };
enum link_init { LINK_INIT_XAVIER = 0, LINK_INIT_UNIFORM = 1 };

struct link_opts {
    enum kge_model model;
    enum kge_loss loss;
    float margin;           /* KGE_LOSS_MARGIN */
    uint32_t dim;           /* floats per embedding (even for ComplEx: d/2 complex numbers) */
    float lr, eps;          /* Adagrad */
    uint32_t batch;         /* positives per batch */
    uint32_t chunk, negs;   /* positives per chunk, negatives per chunk (LINK_SIDES_PYG: 1 and 1) */
    double degree_frac;     /* share of negatives drawn by degree */
    enum link_sides sides;
    enum link_init init;    /* XAVIER: torch's xavier_uniform_ per table (PyG); UNIFORM: U(-init_scale, init_scale) */
    float init_scale;
    uint64_t seed;
};

struct link_model {
    uint64_t nodes, relations;
    uint32_t d;
    float *node, *node_g2; /* (nodes, d): embeddings and Adagrad sums, one block (node_g2 = node + nodes * d);
                            * both NULL when the table lives elsewhere (link_model_init_with) */
    float *rel, *rel_g2;   /* (relations, d) */
};

/* Allocates and initialises the tables from opts (seeded). 0, -EINVAL
 * (dim 0, odd for ComplEx), -ENOMEM (the message says how much). */
int link_model_init(struct link_model *m, uint64_t nodes, uint64_t relations, const struct link_opts *o, char *err,
                    size_t errlen);
void link_model_free(struct link_model *m);
/* The initialisation's random stream and bounds for these sizes: the node
 * table is ops_uniform(nodes * d values, *node_bound, st) drawn row after
 * row, then the relation table from the same stream. */
void link_init_stream(const struct link_opts *o, uint64_t nodes, uint64_t relations, uint64_t *st, double *node_bound,
                      double *rel_bound);
/* As link_model_init, but with emit non-NULL the node table is not
 * allocated (m->node NULL): emit(arg, st, node_bound) must draw the
 * nodes * d values with ops_uniform from *st, in row order, wherever it
 * keeps them (any number of calls of ops_uniform adds up to the same
 * bits), and return 0 or -errno (message its own); the relation table is
 * then drawn from where it left *st. The out-of-core mode (stages/linkooc.h)
 * writes its partitions so, bit for bit the in-memory table. */
int link_model_init_with(struct link_model *m, uint64_t nodes, uint64_t relations, const struct link_opts *o,
                         int (*emit)(void *arg, uint64_t *st, double bound), void *arg, char *err, size_t errlen);

struct linkenc;

struct link_trainer {
    struct link_opts o;
    struct link_model *m;
    /* (may be NULL) the GNN encoder (stages/linkenc.h), borrowed: the
     * decoder then scores the encoded rows of heads, tails and negatives,
     * and the Adagrad steps go to the input rows of every sampled node */
    struct linkenc *enc;
    const uint64_t *triples; /* (n, 3) training triples, borrowed */
    uint64_t n;
    uint64_t *perm;          /* (n) this epoch's order */
    /* per batch */
    float *rows, *grads, *scratch, *gsum;
    uint64_t *ids, *uid, *neg_ids;
    uint32_t *order;
    uint8_t *side;
    /* (may be NULL) told after every batch: batches done of the epoch's,
     * and the mean loss of those done */
    void (*on_batch)(void *arg, uint64_t done, uint64_t total, double loss);
    void *on_batch_arg;
    volatile sig_atomic_t *stop; /* (may be NULL) non-zero: link_train_epoch returns -EINTR before its next batch */
    double slice_loss;           /* link_train_slice: loss summed over, and batches of, the slices since reset */
    uint64_t slice_batches;
};

/* Where node rows live for a slice: partition k's rows (part_nodes nodes,
 * the last one maybe fewer) start at part[k], d floats each, and the
 * Adagrad sums of a row sit g2_off floats after it. In memory: one
 * partition, m->node, g2_off = nodes * d. Out of core: the partition
 * buffer's frames (only the partitions of the slice's triples and
 * negatives need be there). */
struct link_rows {
    float *const *part;
    uint64_t part_nodes;
    size_t g2_off;
};
/* Where uniform negatives come from: count nodes, the concatenation of
 * the partitions parts[0 .. nparts) (ascending ids; part_nodes each, the
 * last partition of the table shorter: nodes in all), or parts NULL:
 * nodes 0 .. count-1. With every partition listed the two agree. */
struct link_negs {
    uint64_t count;
    const uint32_t *parts;
    uint32_t nparts;
    uint64_t part_nodes, nodes;
};
/* A run of batches: triples (n, 3) in the order perm, cut into batches of
 * opts.batch. A batch's number (its negatives' seed, and what on_batch
 * is told) is first_batch + t->slice_batches when it starts: slices of one
 * epoch with first_batch 0 number their batches on from each other.
 * Degree-drawn negatives are endpoints of the slice's triples (in
 * memory: all of them). */
struct link_slice {
    const struct link_rows *rows;
    const struct link_negs *negs;
    const uint64_t *triples;
    uint64_t n;
    const uint64_t *perm;
    uint32_t epoch;
    uint64_t first_batch, total_batches; /* total: for on_batch */
};
/* perm = 0..n-1 shuffled by (seed, epoch, state): state 0 is link_train_epoch's. */
void link_shuffle(uint64_t *perm, uint64_t n, uint64_t seed, uint32_t epoch, uint32_t state);
/* Trains the slice's batches; adds their losses to t->slice_loss and
 * their count to t->slice_batches (the caller zeroes both per epoch).
 * 0, -EDOM or -EINTR as link_train_epoch. link_train_epoch is one slice
 * of every triple in memory; the out-of-core mode trains one slice per
 * buffer state. t->triples and t->perm are not used: the trainer of an
 * out-of-core run is made with triples NULL and n 1. */
int link_train_slice(struct link_trainer *t, const struct link_slice *sl, char *err, size_t errlen);

/* The node rows a batch of o gathers: heads and tails (2 x batch) and
 * the chunks' negatives; what an encoder's max_ids must hold. */
uint32_t link_batch_rows(const struct link_opts *o);

/* A trainer of m over triples (borrowed: n rows of head, relation, tail,
 * all in range). 0, -EINVAL (bad opts), -ENOMEM. */
int link_trainer_init(struct link_trainer *t, struct link_model *m, const struct link_opts *o, const uint64_t *triples,
                      uint64_t n, char *err, size_t errlen);
void link_trainer_free(struct link_trainer *t);
/* Epoch e (0-based): every training triple once. *loss gets the mean of
 * the batches' losses. 0, -EDOM, or -EINTR when *stop was set (the tables
 * then hold part of the epoch: the caller goes back to a checkpoint). */
int link_train_epoch(struct link_trainer *t, uint32_t epoch, double *loss, char *err, size_t errlen);

/* The known triples of every split, sorted, for filtered ranking. */
struct link_known {
    uint64_t *t; /* (n, 3) ascending by (head, relation, tail), then by (tail, relation, head) in rev */
    uint64_t *rev;
    uint64_t n;
};
/* From up to 3 arrays of triples (ns[i] rows each). 0 or -ENOMEM. */
int link_known_init(struct link_known *k, const uint64_t *const *triples, const uint64_t *ns, int arrays, char *err,
                    size_t errlen);
void link_known_free(struct link_known *k);

struct link_metrics {
    uint64_t ranks;     /* ranked answers (tails, plus heads with heads_too) */
    double mrr, mean_rank;
    double hits1, hits3, hits10;
};

struct link_eval_opts {
    const struct link_known *filter; /* NULL: raw ranks; else filtered */
    bool heads_too;                  /* also rank heads (else tails only, as PyG's test) */
    uint32_t sampled;                /* 0: rank among all nodes; else among this many uniform nodes per triple */
    uint64_t seed;                   /* of the sampled candidates */
    volatile sig_atomic_t *stop;     /* (may be NULL) non-zero: link_evaluate returns -EINTR */
    /* m->node NULL (the table elsewhere): copies rows first .. first+count-1
     * (at most 16384 at once) into dst, 0 or -errno with a message */
    int (*rows)(void *arg, uint64_t first, uint64_t count, float *dst, char *err, size_t errlen);
    void *rows_arg;
};

/* Ranks each of the n triples' tail (and head) and averages. 0, -ENOMEM,
 * or -EINTR when *e->stop was set. */
int link_evaluate(const struct link_model *m, const struct link_opts *o, const uint64_t *triples, uint64_t n,
                  const struct link_eval_opts *e, struct link_metrics *out, char *err, size_t errlen);

#endif
