/* ops.h - the CPU operators the trainer's models are built from (DESIGN.md
 * section 6, issue 5): dense products through BLAS, gathers of feature
 * rows, aggregation over a sampled block (mean, sum, GCN-normalised), the
 * pieces of graph attention, bias, ReLU, dropout, log-softmax with
 * cross-entropy, the Adam and SGD updates, and the plain array steps
 * around them (zero, copy, scale, Glorot initialisation). Each
 * differentiable operator has a forward and a backward; docs/training.md
 * gives their equations. ops/model.c does all its arithmetic through
 * these, so a backend with twins of them (CUDA kernels, tested against
 * these) runs the same model description.
 *
 * Layout. Matrices are row-major float; a tensor pointer's comment gives
 * its shape, e.g. (n, dim). A block (struct ops_block) is the CSC of one
 * sampled block (a plain description: the trainer points it into a batch
 * of ipc/batch.h without copying; ops/ knows nothing of that layout):
 * destination d's sources are
 * src[indptr[d] .. indptr[d+1]), local ids below n_src, and destination d
 * is also source d (destinations are a prefix of sources). Edge-valued
 * tensors (GAT) have one row per entry of src[], in that order.
 *
 * Conventions. Forward functions overwrite their output. Backward
 * functions say whether they overwrite or add into each gradient: those
 * that scatter into a source-side gradient (dh, dz, del) add, so several
 * paths can meet in one buffer; the caller zeroes it first. Pointers
 * marked restrict must not overlap. Sizes are not checked (hot paths):
 * the caller passes a checked block (the trainer's come from a batch that
 * batch_view() has checked).
 *
 * Determinism. Every reduction has a fixed summation order whatever the
 * thread count: element-wise loops, the loss's per-row terms and Adam run
 * on the pool in pieces that each own their outputs (the loss's terms then
 * summed in row order by one thread), the sum/mean backward scatter in
 * pieces that each own a range of source rows and walk every edge in
 * order, and the rest on one thread. GEMMs run on a small thread pool (ops_set_threads) with OpenBLAS itself
 * single-threaded: C is cut into tiles of a fixed size, whatever the
 * thread count, and each tile is one sgemm call on one thread, so every
 * element comes from the same call and the results are bit-identical for
 * any thread count (tests/test_ops.c checks it). (Letting OpenBLAS thread
 * a call does not give that: its partition, and so which kernel computes
 * an element, depends on the thread count.)
 *
 * Threads: the ops are not reentrant - one thread of a process calls them
 * at a time (the pool is process-wide). Nothing blocks but the pool's
 * wait for its own workers. */
#ifndef SLUICE_OPS_OPS_H
#define SLUICE_OPS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/util.h"

#define OPS_GAT_SLOPE 0.2f /* LeakyReLU negative slope of the attention scores */

/* One sampled block as a GNN layer sees it: n_dst destinations, each with
 * its sampled in-neighbours among n_src sources (for a batch of
 * ipc/batch.h, layer i's is the batch's block L-1-i). Pointers only: the
 * arrays belong to the caller. */
struct ops_block {
    uint32_t n_dst, n_src;  /* n_dst <= n_src */
    const uint32_t *indptr; /* (n_dst + 1), indptr[0] = 0 */
    const uint32_t *src;    /* (indptr[n_dst]) local source ids < n_src */
    const uint32_t *deg;    /* (n_src) in-degrees in the graph (destinations first), or NULL: the block's */
};

static inline uint32_t ops_block_edges(const struct ops_block *b)
{
    return b->indptr[b->n_dst];
}

/* ---- BLAS ------------------------------------------------------------------------------ */

/* Threads the GEMMs of this process use (n < 1 counts as 1; the default
 * is 1), the caller included: starts or stops pool workers. The trainer
 * sets it so that stage processes do not oversubscribe the cores. Not
 * while another thread is inside an op. 0, or -errno when a worker cannot
 * be started (the pool then keeps 1 thread). */
int ops_set_threads(int n);
int ops_threads(void);

/* C (m, n) = alpha * op(A) * op(B) + beta * C, row-major, through
 * cblas_sgemm on tiles of C (above). op(A) is (m, k): A is (m, k) with row
 * stride lda, or with ta its transpose, stored (k, m). Likewise op(B)
 * (k, n) from B (k, n) or, with tb, (n, k). beta = 0 ignores what C held
 * (NaNs included); k = 0 gives C = beta * C. Leading dimensions must fit
 * an int; a k past INT_MAX is summed in pieces. */
void ops_gemm(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda, const float *b,
              size_t ldb, float beta, float *c, size_t ldc);

/* ---- plain arrays ------------------------------------------------------------------------ */

/* x (n) = 0 (+0.0 everywhere). */
void ops_zero(float *x, size_t n);
/* y (n) = x (n); no overlap. */
void ops_copy(float *restrict y, const float *restrict x, size_t n);
/* x (n) *= alpha in place, one float multiply per element. Linear: its
 * backward is the same call on the gradient (dx = alpha dy). */
void ops_scale(float *x, size_t n, float alpha);
/* How many of x (n) are NaN or infinite (exponent bits all ones: the
 * answer does not depend on floating-point compiler flags). The CPU twin
 * of gpu/kernels.h's gk_any_nonfinite. */
size_t ops_count_nonfinite(const float *x, size_t n);
/* The sum of squares of x (n) in double, in a fixed order: chunk c holds
 * elements [c OPS_SUMSQ_CHUNK, (c + 1) OPS_SUMSQ_CHUNK); each chunk is
 * summed in element order (x[i] widened, squared, added: no fused
 * multiply-add), then the chunks' sums in chunk order. gk_sumsq, the
 * device twin, keeps the same order and gives the same bits. */
#define OPS_SUMSQ_CHUNK 4096
double ops_sumsq(const float *x, size_t n);

/* Glorot/Xavier uniform into p (n): U(-a, a), a = sqrt(6 / (fan_in +
 * fan_out)), value i = (2u - 1) a in double rounded to float, with u the
 * top 24 bits of the next SplitMix64 output of *state over 2^24 (so in
 * [0, 1)); *state advances by n outputs. No backward (initialisation). */
void ops_glorot_uniform(float *p, size_t n, double fan_in, double fan_out, uint64_t *state);
/* U(-bound, bound) into p (n), drawn as ops_glorot_uniform draws. */
void ops_uniform(float *p, size_t n, double bound, uint64_t *state);

/* ---- dense layers ----------------------------------------------------------------------- */

/* y (n, out) = x (n, in) w^T, w (out, in) (PyTorch's Linear layout); with
 * acc, added to y instead. */
void ops_linear_fwd(float *y, const float *x, const float *w, uint32_t n, uint32_t in, uint32_t out, bool acc);
/* dw (out, in) = dy^T x (overwrites, or adds with acc). */
void ops_linear_bwd_w(float *dw, const float *dy, const float *x, uint32_t n, uint32_t in, uint32_t out, bool acc);
/* dx (n, in) = dy (n, out) w (overwrites, or adds with acc). */
void ops_linear_bwd_x(float *dx, const float *dy, const float *w, uint32_t n, uint32_t in, uint32_t out, bool acc);
/* Two products of one shape as one job on the pool (GraphSAGE's self and
 * neighbour weights), each with exactly the bits of its call alone:
 * ops_linear_bwd_w2 is ops_linear_bwd_w(dw1, dy, x1, ...) and
 * ops_linear_bwd_w(dw2, dy, x2, ...), ops_linear_bwd_x2 is
 * ops_linear_bwd_x(dx1, dy, w1, ...) and ops_linear_bwd_x(dx2, dy, w2,
 * ...), all overwriting. Outputs must not overlap each other or the
 * inputs. */
void ops_linear_bwd_w2(float *dw1, float *dw2, const float *dy, const float *x1, const float *x2, uint32_t n,
                       uint32_t in, uint32_t out);
void ops_linear_bwd_x2(float *dx1, float *dx2, const float *dy, const float *w1, const float *w2, uint32_t n,
                       uint32_t in, uint32_t out);

/* y (n, dim) += b (dim) on every row. */
void ops_bias_fwd(float *restrict y, const float *restrict b, uint32_t n, uint32_t dim);
/* db (dim) = sum over rows of dy (n, dim) (overwrites; rows in order). */
void ops_bias_bwd(float *restrict db, const float *restrict dy, uint32_t n, uint32_t dim);

/* x = max(x, 0) in place. */
void ops_relu_fwd(float *x, size_t n);
/* dx = 0 where the forward's output y <= 0, in place. */
void ops_relu_bwd(float *restrict dx, const float *restrict y, size_t n);
/* x = ELU(x) (alpha 1: exp(x) - 1 below 0) in place. */
void ops_elu_fwd(float *x, size_t n);
/* dx *= (y > 0 ? 1 : y + 1), y the forward's output, in place. */
void ops_elu_bwd(float *restrict dx, const float *restrict y, size_t n);

/* Inverted dropout in place: element i is kept with probability 1 - p and
 * scaled by 1 / (1 - p), else multiplied by 0; mask[i] = 1 if kept. The mask comes
 * from a SplitMix64 stream seeded with seed: output j decides elements 2j
 * (low 32 bits) and 2j + 1 (high 32 bits), dropped when those bits are
 * below round(p * 2^32). p in [0, 1): p = 0 keeps everything. */
void ops_dropout_fwd(float *restrict x, uint8_t *restrict mask, size_t n, float p, uint64_t seed);
/* dx = mask ? dx / (1 - p) : 0, in place. */
void ops_dropout_bwd(float *restrict dx, const uint8_t *restrict mask, size_t n, float p);
/* ops_dropout_bwd (skipped when mask is NULL) then ops_relu_bwd with the
 * forward's output y, in one pass: the same bits. */
void ops_dropout_relu_bwd(float *restrict dx, const uint8_t *restrict mask, const float *restrict y, size_t n, float p);

/* ---- feature rows ----------------------------------------------------------------------- */

/* x (n, dim) row i = feature row alias[i] of the buffer `rows`: the row at
 * rows + alias[i] * stride (bytes), dim values, IEEE half (f16, little
 * endian; inf, NaN and subnormals kept) or float. Rows must be aligned to
 * their element size and every alias below the buffer's row count (the
 * extractor's aliases are, for a checked batch). No backward: features are
 * inputs. */
void ops_gather_rows(float *x, const unsigned char *rows, size_t stride, const uint32_t *alias, uint32_t n,
                     uint32_t dim, bool f16);

/* IEEE half to float, exactly (the same results as core/dataset.h's
 * half_to_f32, written to vectorise). */
void ops_f16_to_f32(float *restrict out, const uint16_t *restrict in, size_t n);

/* ---- aggregation over a block ------------------------------------------------------------ */

/* out (n_dst, dim)[d] = sum of h (n_src, dim) over d's sources. */
void ops_agg_sum_fwd(float *restrict out, const struct ops_block *b, const float *restrict h, uint32_t dim);
/* dh (n_src, dim)[s] += dout[d] for every edge s -> d. */
void ops_agg_sum_bwd(float *restrict dh, const struct ops_block *b, const float *restrict dout, uint32_t dim);
/* out (n_dst, dim)[d, c] = the largest h[s, c] over d's sources s (0 for a
 * destination without sources; NaN only when the first source's is), and
 * ties (n_dst, dim)[d, c] = how many of d's edges hold that value (0
 * without sources), as a float. */
void ops_agg_max_fwd(float *restrict out, float *restrict ties, const struct ops_block *b, const float *restrict h,
                     uint32_t dim);
/* dh (n_src, dim)[s, c] += dout[d, c] / ties[d, c] for every edge s -> d
 * where h[s, c] == out[d, c] (ties share the gradient equally, as torch's
 * scatter_reduce "amax"), out and ties from ops_agg_max_fwd over h. Each
 * source's terms in edge order. */
void ops_agg_max_bwd(float *restrict dh, const struct ops_block *b, const float *restrict h, const float *out,
                     const float *ties, const float *restrict dout, uint32_t dim);

/* The same, divided by d's source count (0 for a destination without). */
void ops_agg_mean_fwd(float *restrict out, const struct ops_block *b, const float *restrict h, uint32_t dim);

/* ops_agg_sum_fwd (mean: ops_agg_mean_fwd) with the sources read where
 * they lie instead of gathered first: source s is the f32 row at rows +
 * alias[s] * stride (bytes; dim floats, aligned to 4), as ops_gather_rows
 * would copy it into h. The same bits as gathering, then aggregating. */
void ops_agg_rows_fwd(float *restrict out, const struct ops_block *b, const unsigned char *rows, size_t stride,
                      const uint32_t *alias, uint32_t dim, bool mean);
void ops_agg_mean_bwd(float *restrict dh, const struct ops_block *b, const float *restrict dout, uint32_t dim);

/* GraphSAGE's layer forward (mean or sum) in one pass: with xg, the
 * destinations' own feature rows gathered into xg (ops_gather_rows); agg = the
 * aggregation of d's sources (ops_agg_mean_fwd or ops_agg_sum_fwd over h,
 * or ops_agg_rows_fwd from the feature rows when h is NULL), y = x w_self^T
 * + agg w_neigh^T + bias (two ops_linear_fwd, the second accumulating,
 * then ops_bias_fwd), then with relu ops_relu_fwd, then with a mask
 * ops_dropout_fwd(y, mask, n_dst * out, p, seed). Exactly the bits of
 * those calls in that order, for any thread count; but each tile of
 * destinations goes from its aggregation to its dropout on one thread
 * while it is in that thread's cache, and the pool meets once instead of
 * six times. */
struct ops_sage_args {
    const struct ops_block *b;
    const float *h;              /* (n_src, in) the sources, or NULL: */
    const unsigned char *rows;   /* source s is the f32 row at rows + alias[s] * stride (ops_agg_rows_fwd) */
    size_t stride;
    const uint32_t *alias;
    const float *x;              /* (n_dst, in) the destinations' own rows (h itself when h is set) */
    float *xg;                   /* NULL, or with rows (h NULL): (n_dst, in) out, and then x must be xg: the
                                  * destinations' own rows gathered here (ops_gather_rows(xg, rows, stride,
                                  * alias, n_dst, in, false)), each tile gathering its own before its products */
    const float *w_self, *w_neigh; /* (out, in) */
    const float *bias;           /* (out) */
    uint32_t in, out;
    bool mean;                   /* mean, else sum */
    bool relu;
    uint8_t *mask;               /* (n_dst * out) dropout's mask, or NULL: no dropout */
    float p;                     /* dropout's probability, in [0, 1) */
    uint64_t seed;
    float *agg;                  /* (n_dst, in) out: the aggregation */
    float *y;                    /* (n_dst, out) out */
};
void ops_sage_fwd(const struct ops_sage_args *s);

/* GCN's symmetric normalisation with self loops: norm_dst (n_dst)[v] =
 * 1 / sqrt(1 + in-degree of v), norm_src (n_src)[u] = 1 / sqrt(1 +
 * out-degree of u), degrees counted in the block (an edge listed twice
 * counts twice); deg (n_src) is scratch. With b->deg (the graph's
 * in-degrees, as PyG's gcn_norm on the whole graph), norm_src[u] = 1 /
 * sqrt(1 + deg[u]) and norm_dst[v] = 1 / sqrt(1 + deg[v]) instead, and
 * deg is not touched. */
void ops_gcn_norm(float *restrict norm_src, float *restrict norm_dst, uint32_t *restrict deg,
                  const struct ops_block *b);
/* out (n_dst, dim)[v] = norm_dst[v] * (norm_src[v] h[v] + sum over v's
 * sources u of norm_src[u] h[u]). */
void ops_agg_gcn_fwd(float *restrict out, const struct ops_block *b, const float *norm_src, const float *norm_dst,
                     const float *restrict h, uint32_t dim);
/* dh (n_src, dim) += the transpose of that map applied to dout (n_dst, dim). */
void ops_agg_gcn_bwd(float *restrict dh, const struct ops_block *b, const float *norm_src, const float *norm_dst,
                     const float *restrict dout, uint32_t dim);

/* ---- graph attention ---------------------------------------------------------------------- */

/* Per-node head scores: s (n, heads)[i, k] = a (heads, hd)[k] .
 * z (n, heads * hd)[i, k*hd .. (k+1)*hd). */
void ops_gat_score_fwd(float *restrict s, const float *restrict z, const float *restrict a, uint32_t n, uint32_t heads,
                       uint32_t hd);
/* dz (n, heads * hd) += ds[i, k] a[k] (dz may be NULL); da (heads, hd) +=
 * sum over i of ds[i, k] z[i, k]. */
void ops_gat_score_bwd(float *restrict dz, float *restrict da, const float *restrict ds, const float *restrict z,
                       const float *restrict a, uint32_t n, uint32_t heads, uint32_t hd);

/* Edge logits: e_edge (edges, heads)[j] = LeakyReLU(el[u] + er[v]) for
 * edge j = u -> v, e_self (n_dst, heads)[v] = LeakyReLU(el[v] + er[v])
 * (the self loop); el (n_src, heads), er (n_dst, heads). */
void ops_gat_edge_fwd(float *restrict e_edge, float *restrict e_self, const struct ops_block *b,
                      const float *restrict el, const float *restrict er, uint32_t heads, float slope);
/* del (n_src, heads) += and der (n_dst, heads) += the gradients of el and
 * er given those of e_edge and e_self (slope where el + er < 0). */
void ops_gat_edge_bwd(float *restrict del, float *restrict der, const struct ops_block *b,
                      const float *restrict de_edge, const float *restrict de_self, const float *restrict el,
                      const float *restrict er, uint32_t heads, float slope);

/* Softmax per destination and head over its in-edges and its self loop,
 * in place: logits in, attention weights out (a_edge (edges, heads),
 * a_self (n_dst, heads)); each destination's weights sum to 1. */
void ops_edge_softmax_fwd(float *restrict a_edge, float *restrict a_self, const struct ops_block *b,
                          uint32_t heads);
/* In place: gradients of the weights in, of the logits out,
 * g_j = a_j (g_j - sum_i a_i g_i) per destination and head. */
void ops_edge_softmax_bwd(float *restrict g_edge, float *restrict g_self, const float *restrict a_edge,
                          const float *restrict a_self, const struct ops_block *b, uint32_t heads);

/* Attention-weighted sum per head: out (n_dst, heads * hd)[v, k] =
 * a_self[v, k] z[v, k] + sum over edges j = u -> v of a_edge[j, k] z[u, k]
 * (z (n_src, heads * hd); head k is columns k*hd .. (k+1)*hd). */
void ops_gat_sum_fwd(float *restrict out, const struct ops_block *b, const float *restrict a_edge,
                     const float *restrict a_self, const float *restrict z, uint32_t heads, uint32_t hd);
/* dz (n_src, heads * hd) += the weights times dout (n_dst, heads * hd);
 * g_edge, g_self (overwritten) = dout . z per edge and head. */
void ops_gat_sum_bwd(float *restrict dz, float *restrict g_edge, float *restrict g_self, const struct ops_block *b,
                     const float *restrict a_edge, const float *restrict a_self, const float *restrict z,
                     const float *restrict dout, uint32_t heads, uint32_t hd);

/* Mean of the heads: out (n, d) = (1 / heads) sum_k in (n, heads * d)[:, k];
 * backward spreads dout / heads to every head (din overwritten). (Concat
 * needs no operator: it is the (n, heads * d) layout itself.) */
void ops_head_mean_fwd(float *restrict out, const float *restrict in, uint32_t n, uint32_t heads, uint32_t d);
void ops_head_mean_bwd(float *restrict din, const float *restrict dout, uint32_t n, uint32_t heads, uint32_t d);

/* ---- loss ---------------------------------------------------------------------------------- */

/* Log-softmax and cross-entropy over logits (n, classes), averaged over
 * the rows whose label is in [0, classes) (label -1 = unlabelled; other
 * labels outside the range are counted as unlabelled too). Returns the
 * mean loss (0 when no row is labelled); dlogits (n, classes), when not
 * NULL, gets its gradient (softmax - one-hot) / labelled, zero rows for
 * unlabelled ones. labelled and correct (argmax, first index on ties,
 * equals the label) may be NULL. Sums in double. Keeps a process-wide
 * scratch of 9 bytes a row (the largest n seen) between calls. */
float ops_cross_entropy(const float *logits, const int32_t *labels, uint32_t n, uint32_t classes, float *dlogits,
                        uint32_t *labelled, uint32_t *correct);

/* ---- optimizers ---------------------------------------------------------------------------- */

/* One Adam step (bias-corrected, as torch.optim.Adam) at step t >= 1:
 * m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
 * p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
 * Weight decay wd >= 0 as torch.optim.Adam's weight_decay (g + wd p
 * in place of g), or, decoupled, as torch.optim.AdamW's (p *= 1 - lr wd
 * first, g unchanged). */
void ops_adam(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n, float lr,
              float b1, float b2, float eps, float wd, bool decoupled, uint64_t t);
/* p -= lr * g. */
void ops_sgd(float *restrict p, const float *restrict g, size_t n, float lr);

#endif
