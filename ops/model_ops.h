/* model_ops.h - the operator table a model runs on (ops/model.h; DESIGN.md
 * section 6, issue 15): buffer management and every operator ops/model.c
 * calls, so that one model description drives the CPU operators (ops.h,
 * model_ops_cpu below) and their CUDA twins (gpu/kernels.h, through the
 * table in stages/trainer_cuda_ops.c).
 *
 * Memory spaces. A table owns a memory space: the CPU table's is host
 * memory, the CUDA table's device memory. Everything a model allocates
 * (parameters, gradients, Adam's moments, activations, scratch) comes from
 * its table's alloc, and every pointer an operator takes is in that space;
 * upload and download are the only ways across. A model never dereferences
 * such a pointer itself.
 *
 * Blocks. A sampled block reaches the table as a struct model_block: its
 * sizes on the host (what the model needs to size buffers and check that
 * layers chain) and an opaque pointer to the table's own description of
 * it (CPU: struct ops_block with host arrays; CUDA: struct gk_block with
 * device arrays and the transpose). The model passes the struct through
 * and reads only the sizes, so it never reads a block's arrays, wherever
 * they live.
 *
 * Contracts. Each operator has the contract of its ops_X twin in ops.h
 * (same arguments in the same order, a context first, blocks as above),
 * and returns 0 or -errno with a message that error(ctx) then returns. A
 * table may queue work and return before it ran (CUDA: on its stream, in
 * call order); alloc, upload, download and cross_entropy (which hands
 * values to the host) have finished when they return. The CPU table
 * never fails except in alloc, and gives exactly the bits of the ops_X
 * calls it wraps.
 *
 * Threads: a table's context is used by one thread at a time. */
#ifndef SLUICE_OPS_MODEL_OPS_H
#define SLUICE_OPS_MODEL_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One sampled block of a layer (ops.h's struct ops_block for the shapes):
 * n_dst destinations, a prefix of the n_src sources, n_edges entries in
 * the source list. impl is the table's own block (the table's
 * ops_blocks says when that is a struct ops_block); NULL for the mlp's
 * edgeless stand-in. */
struct ops_sage_args; /* ops/ops.h */

struct model_block {
    uint32_t n_dst, n_src; /* n_dst <= n_src */
    uint32_t n_edges;
    const void *impl;
};

struct model_ops {
    const char *name; /* "cpu", "cuda", ... */
    bool ops_blocks;  /* model_block.impl is a const struct ops_block * (model_forward takes ops_block arrays) */

    /* ---- memory of the table's space ---- */
    /* *p = bytes (64-byte aligned; a valid pointer even for 0 bytes);
     * contents undefined. -ENOMEM or another -errno. */
    int (*alloc)(void *ctx, void **p, size_t bytes);
    /* Frees p from alloc; accepts NULL. */
    void (*free)(void *ctx, void *p);
    /* Host src to dst in the table's space, and back; finished on return. */
    int (*upload)(void *ctx, void *dst, const void *src, size_t bytes);
    int (*download)(void *ctx, void *dst, const void *src, size_t bytes);
    /* The message of the last failure ("" when none). */
    const char *(*error)(void *ctx);

    /* ---- operators (ops.h has each contract) ---- */
    int (*zero)(void *ctx, float *x, size_t n);
    int (*copy)(void *ctx, float *y, const float *x, size_t n);
    int (*scale)(void *ctx, float *x, size_t n, float alpha);
    int (*linear_fwd)(void *ctx, float *y, const float *x, const float *w, uint32_t n, uint32_t in, uint32_t out,
                      bool acc);
    int (*linear_bwd_w)(void *ctx, float *dw, const float *dy, const float *x, uint32_t n, uint32_t in, uint32_t out,
                        bool acc);
    int (*linear_bwd_x)(void *ctx, float *dx, const float *dy, const float *w, uint32_t n, uint32_t in, uint32_t out,
                        bool acc);
    int (*bias_fwd)(void *ctx, float *y, const float *b, uint32_t n, uint32_t dim);
    int (*bias_bwd)(void *ctx, float *db, const float *dy, uint32_t n, uint32_t dim);
    int (*relu_fwd)(void *ctx, float *x, size_t n);
    int (*relu_bwd)(void *ctx, float *dx, const float *y, size_t n);
    int (*elu_fwd)(void *ctx, float *x, size_t n);
    int (*elu_bwd)(void *ctx, float *dx, const float *y, size_t n);
    int (*dropout_fwd)(void *ctx, float *x, uint8_t *mask, size_t n, float p, uint64_t seed);
    int (*dropout_bwd)(void *ctx, float *dx, const uint8_t *mask, size_t n, float p);
    int (*agg_mean_fwd)(void *ctx, float *out, const struct model_block *b, const float *h, uint32_t dim);
    int (*agg_mean_bwd)(void *ctx, float *dh, const struct model_block *b, const float *dout, uint32_t dim);
    int (*agg_sum_fwd)(void *ctx, float *out, const struct model_block *b, const float *h, uint32_t dim);
    int (*agg_sum_bwd)(void *ctx, float *dh, const struct model_block *b, const float *dout, uint32_t dim);
    int (*agg_max_fwd)(void *ctx, float *out, float *ties, const struct model_block *b, const float *h, uint32_t dim);
    int (*agg_max_bwd)(void *ctx, float *dh, const struct model_block *b, const float *h, const float *out,
                       const float *ties, const float *dout, uint32_t dim);
    int (*gcn_norm)(void *ctx, float *norm_src, float *norm_dst, uint32_t *deg, const struct model_block *b);
    /* Optional (NULL: the table's model gathers every input row first):
     * ops_agg_rows_fwd, layer 0's aggregation read from the feature rows
     * where they lie (model_forward_rows). */
    int (*agg_rows_fwd)(void *ctx, float *out, const struct model_block *b, const unsigned char *rows, size_t stride,
                        const uint32_t *alias, uint32_t dim, bool mean);
    /* ops_gather_rows of f32 rows, set whenever agg_rows_fwd is: layer 0's
     * destination rows when model_forward_rows gathers them itself. */
    int (*gather_rows)(void *ctx, float *x, const unsigned char *rows, size_t stride, const uint32_t *alias,
                       uint32_t n, uint32_t dim);
    /* Optional fused steps (NULL: the model calls the steps one by one;
     * tables with ops_blocks only, as they take struct ops_block):
     * ops_sage_fwd (s->b is the layer's ops_block), ops_linear_bwd_w2,
     * ops_linear_bwd_x2 and ops_dropout_relu_bwd, with the bits of the
     * steps they stand for. */
    int (*sage_fwd)(void *ctx, const struct ops_sage_args *s);
    int (*linear_bwd_w2)(void *ctx, float *dw1, float *dw2, const float *dy, const float *x1, const float *x2,
                         uint32_t n, uint32_t in, uint32_t out);
    int (*linear_bwd_x2)(void *ctx, float *dx1, float *dx2, const float *dy, const float *w1, const float *w2,
                         uint32_t n, uint32_t in, uint32_t out);
    int (*dropout_relu_bwd)(void *ctx, float *dx, const uint8_t *mask, const float *y, size_t n, float p);
    int (*agg_gcn_fwd)(void *ctx, float *out, const struct model_block *b, const float *norm_src, const float *norm_dst,
                       const float *h, uint32_t dim);
    int (*agg_gcn_bwd)(void *ctx, float *dh, const struct model_block *b, const float *norm_src, const float *norm_dst,
                       const float *dout, uint32_t dim);
    int (*gat_score_fwd)(void *ctx, float *s, const float *z, const float *a, uint32_t n, uint32_t heads, uint32_t hd);
    int (*gat_score_bwd)(void *ctx, float *dz, float *da, const float *ds, const float *z, const float *a, uint32_t n,
                         uint32_t heads, uint32_t hd);
    int (*gat_edge_fwd)(void *ctx, float *e_edge, float *e_self, const struct model_block *b, const float *el,
                        const float *er, uint32_t heads, float slope);
    int (*gat_edge_bwd)(void *ctx, float *del, float *der, const struct model_block *b, const float *de_edge,
                        const float *de_self, const float *el, const float *er, uint32_t heads, float slope);
    int (*edge_softmax_fwd)(void *ctx, float *a_edge, float *a_self, const struct model_block *b, uint32_t heads);
    int (*edge_softmax_bwd)(void *ctx, float *g_edge, float *g_self, const float *a_edge, const float *a_self,
                            const struct model_block *b, uint32_t heads);
    int (*gat_sum_fwd)(void *ctx, float *out, const struct model_block *b, const float *a_edge, const float *a_self,
                       const float *z, uint32_t heads, uint32_t hd);
    int (*gat_sum_bwd)(void *ctx, float *dz, float *g_edge, float *g_self, const struct model_block *b,
                       const float *a_edge, const float *a_self, const float *z, const float *dout, uint32_t heads,
                       uint32_t hd);
    int (*head_mean_fwd)(void *ctx, float *out, const float *in, uint32_t n, uint32_t heads, uint32_t d);
    int (*head_mean_bwd)(void *ctx, float *din, const float *dout, uint32_t n, uint32_t heads, uint32_t d);
    /* ops_cross_entropy: logits, labels, dlogits (may be NULL) in the
     * table's space; the mean loss and the counts to the host (each may be
     * NULL). Finished on return. */
    int (*cross_entropy)(void *ctx, const float *logits, const int32_t *labels, uint32_t n, uint32_t classes,
                         float *dlogits, float *loss, uint32_t *labelled, uint32_t *correct);
    int (*adam)(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                float eps, float wd, bool decoupled, uint64_t t);
    int (*sgd)(void *ctx, float *p, const float *g, size_t n, float lr);
};

/* The CPU table (model_ops.c): host memory, the ops.h operators, blocks
 * as struct ops_block; its context is unused (pass NULL). */
extern const struct model_ops model_ops_cpu;

#endif
