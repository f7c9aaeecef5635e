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
    float *node, *node_g2; /* (nodes, d): embeddings and Adagrad sums */
    float *rel, *rel_g2;   /* (relations, d) */
};

/* Allocates and initialises the tables from opts (seeded). 0, -EINVAL
 * (dim 0, odd for ComplEx), -ENOMEM (the message says how much). */
int link_model_init(struct link_model *m, uint64_t nodes, uint64_t relations, const struct link_opts *o, char *err,
                    size_t errlen);
void link_model_free(struct link_model *m);

struct link_trainer {
    struct link_opts o;
    struct link_model *m;
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
};

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
};

/* Ranks each of the n triples' tail (and head) and averages. 0, -ENOMEM,
 * or -EINTR when *e->stop was set. */
int link_evaluate(const struct link_model *m, const struct link_opts *o, const uint64_t *triples, uint64_t n,
                  const struct link_eval_opts *e, struct link_metrics *out, char *err, size_t errlen);

#endif
