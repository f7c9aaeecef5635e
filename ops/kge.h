/* kge.h - the operators of link prediction with learnt node embeddings
 * (Marius's workload; DESIGN.md section 10, "Link prediction"): the
 * DistMult and ComplEx scores, a training step over a batch of positive
 * triples with negatives shared by chunks of it, its three losses, the
 * sparse Adagrad update of the rows a step touched, and the ranks that
 * MRR and Hits@k are made of. docs/link.md gives the equations.
 *
 * Scores. An embedding is a row of d floats. DistMult scores a triple
 * (h, r, t) as sum_j h_j r_j t_j. ComplEx reads a row as d/2 complex
 * numbers, real parts first, then imaginary parts (PyG's ComplEx keeps the
 * two halves in two tables of d/2: the same numbers) and scores
 * Re(sum_j h_j r_j conj(t_j)). Both are a dot product of a candidate
 * with a query:
 *   score(h, r, t) = <q(h, r), t> = <h, p(r, t)>
 * with q(h, r) = h * r and p(r, t) = r * t (element-wise) for DistMult, and
 * for ComplEx q = h r (complex product) and p = r conj(t) conjugated, so
 * that ranking every node as a tail (or as a head) is one GEMM of the
 * queries with the embedding table.
 *
 * Negatives. A batch of n positives is cut into chunks of `chunk`
 * consecutive positives (the last one shorter); each chunk has `negs`
 * negative nodes of its own, shared by its positives (Marius's batched
 * negatives: a chunk's negative scores are one GEMM), and a side mask:
 * KGE_TAIL corrupts tails (scores <q(h, r), n>), KGE_HEAD heads
 * (<n, p(r, t)>), both, or neither. PyG's KGE training is the case chunk =
 * 1, negs = 1, heads corrupted in the first half of the batch and tails
 * in the second.
 *
 * Losses, over the batch's scores (docs/link.md):
 *   softmax   for each positive and each corrupted side, cross-entropy of
 *             the positive among itself and the chunk's negatives; the
 *             mean over those terms (Marius's default);
 *   logistic  softplus(-s) for each positive, softplus(s) for each
 *             negative score, the mean over all of them (PyG's ComplEx:
 *             binary cross-entropy with logits);
 *   margin    max(0, margin - s_pos + s_neg) for each (positive,
 *             negative) pair, the mean over pairs (PyG's DistMult:
 *             margin ranking loss).
 *
 * Determinism: fixed summation orders, GEMMs through ops_gemm (bit-
 * identical for any thread count), sums of the loss in double. Threads:
 * as ops.h (one caller at a time). Sizes are the caller's to check. */
#ifndef SLUICE_OPS_KGE_H
#define SLUICE_OPS_KGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum kge_model { KGE_DISTMULT = 0, KGE_COMPLEX = 1 };
enum kge_loss { KGE_LOSS_SOFTMAX = 0, KGE_LOSS_LOGISTIC = 1, KGE_LOSS_MARGIN = 2 };
enum { KGE_TAIL = 1, KGE_HEAD = 2 };

/* The query vectors of n rows (row-major (n, d)): q = q(h, r), p = p(r, t). */
void kge_query_tail(enum kge_model m, float *restrict q, const float *h, const float *r, uint32_t n, uint32_t d);
void kge_query_head(enum kge_model m, float *restrict p, const float *r, const float *t, uint32_t n, uint32_t d);
/* Their backward: dq (n, d) into dh and dr (added); dp into dr and dt
 * (added). */
void kge_query_tail_bwd(enum kge_model m, float *restrict dh, float *restrict dr, const float *dq, const float *h,
                        const float *r, uint32_t n, uint32_t d);
void kge_query_head_bwd(enum kge_model m, float *restrict dr, float *restrict dt, const float *dp, const float *r,
                        const float *t, uint32_t n, uint32_t d);

/* One batch: the gathered rows of its positives and negatives. */
struct kge_batch {
    enum kge_model model;
    enum kge_loss loss;
    float margin;          /* KGE_LOSS_MARGIN */
    uint32_t n, d;         /* positives, embedding width (even for ComplEx) */
    const float *h, *r, *t; /* (n, d) each */
    uint32_t chunk, negs;  /* positives per chunk (>= 1), negatives per chunk */
    const float *neg;      /* (chunks * negs, d), chunk c's at row c * negs */
    const uint8_t *side;   /* (chunks) KGE_TAIL | KGE_HEAD, or NULL for both everywhere */
};

static inline uint32_t kge_chunks(const struct kge_batch *b)
{
    return b->chunk ? (b->n + b->chunk - 1) / b->chunk : 0;
}

/* Scratch floats kge_step needs for a batch (q, p, scores and their
 * gradients). */
size_t kge_step_scratch(const struct kge_batch *b);

/* The loss of batch b (returned) and, when dh is not NULL, its gradients
 * w.r.t. every gathered row: dh, dr, dt (n, d) and dneg (chunks * negs,
 * d), overwritten. scratch holds kge_step_scratch(b) floats. Returns NaN
 * when a score is not finite. *terms (may be NULL) gets the number of
 * terms the loss averages. */
float kge_step(const struct kge_batch *b, float *dh, float *dr, float *dt, float *dneg, float *scratch,
               uint64_t *terms);

/* ---- sparse updates ---------------------------------------------------------------------- */

/* Coalesces the gradient rows of a step: k rows (ids[i], grad row i of
 * (k, d)) into the distinct ids, ascending, in uid (room for k) with their
 * summed rows in gsum ((k, d) room), summed in ascending i for each id;
 * returns the number of distinct ids. order is scratch for k entries. */
uint32_t kge_coalesce(const uint64_t *ids, const float *grad, uint32_t k, uint32_t d, uint64_t *uid, float *gsum,
                      uint32_t *order);

/* Adagrad on one row (as torch.optim.Adagrad with lr_decay 0, weight
 * decay 0, initial accumulator 0): state += g^2; w -= lr g / (sqrt(state)
 * + eps). A row with a zero gradient is unchanged, so a sparse update of
 * the touched rows equals the dense one. */
void kge_adagrad(float *restrict w, float *restrict state, const float *restrict g, uint32_t d, float lr, float eps);

/* ---- evaluation ---------------------------------------------------------------------------- */

/* scores (nq, cand) = q (nq, d) emb (cand, d)^T: every candidate's score
 * for each query (ops_gemm). */
void kge_score_all(float *scores, const float *q, uint32_t nq, const float *emb, uint64_t cand, uint32_t d);

/* The rank of the true candidate `truth` among scores[0 .. cand):
 * 1 + the number of candidates scoring higher + half those scoring the
 * same (other than truth), leaving out the candidates of `skip` (sorted
 * ascending, nskip; the other known answers, for filtered ranking; truth
 * itself never). A non-finite true score ranks last. */
double kge_rank(const float *scores, uint64_t cand, uint64_t truth, const uint64_t *skip, size_t nskip);

#endif
