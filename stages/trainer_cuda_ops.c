/* trainer_cuda_ops.c - the CUDA operator table of the model
 * (ops/model_ops.h): device memory from gk_malloc, every operator its
 * gpu/kernels.h twin on the context's stream. The context is a struct
 * gk_ctx; a block's impl is a struct gk_block (device CSC and its
 * transpose, built by the CUDA backend, trainer_cuda.c). Calls queue work
 * and return, except alloc, free, upload, download and cross_entropy,
 * which wait (kernels.h). Linked with sluice_gpu_shim the same code runs
 * on the host, with the shim's bits (exactly the CPU's: gk_gemm is
 * ops_gemm there).
 *
 * Only gpu/kernels.h is called here, no CUDA runtime, so that the one
 * source builds against either library. */
#include <errno.h>

#include "gpu/kernels.h"
#include "ops/model_ops.h"
#include "stages/trainer_backend.h"

#define G(ctx) ((struct gk_ctx *)(ctx))
#define GB(b) ((const struct gk_block *)(b)->impl)

static int dev_alloc(void *ctx, void **p, size_t bytes)
{
    /* gk_malloc hands out NULL for 0 bytes; the table promises a pointer */
    int rc = gk_malloc(G(ctx), p, bytes ? bytes : 1);
    if (rc == 0 && !*p)
        rc = -ENOMEM;
    return rc;
}

static void dev_free(void *ctx, void *p)
{
    (void)ctx;
    gk_free(p);
}

static int dev_upload(void *ctx, void *dst, const void *src, size_t bytes)
{
    return gk_upload(G(ctx), dst, src, bytes);
}

static int dev_download(void *ctx, void *dst, const void *src, size_t bytes)
{
    return gk_download(G(ctx), dst, src, bytes);
}

static const char *dev_error(void *ctx)
{
    return gk_ctx_error(G(ctx));
}

static int dev_zero(void *ctx, float *x, size_t n)
{
    return gk_zero(G(ctx), x, n);
}

static int dev_copy(void *ctx, float *y, const float *x, size_t n)
{
    return gk_copy(G(ctx), y, x, n);
}

static int dev_scale(void *ctx, float *x, size_t n, float alpha)
{
    return gk_scale(G(ctx), x, n, alpha);
}

static int dev_linear_fwd(void *ctx, float *y, const float *x, const float *w, uint32_t n, uint32_t in, uint32_t out,
                          bool acc)
{
    return gk_linear_fwd(G(ctx), y, x, w, n, in, out, acc);
}

static int dev_linear_bwd_w(void *ctx, float *dw, const float *dy, const float *x, uint32_t n, uint32_t in,
                            uint32_t out, bool acc)
{
    return gk_linear_bwd_w(G(ctx), dw, dy, x, n, in, out, acc);
}

static int dev_linear_bwd_x(void *ctx, float *dx, const float *dy, const float *w, uint32_t n, uint32_t in,
                            uint32_t out, bool acc)
{
    return gk_linear_bwd_x(G(ctx), dx, dy, w, n, in, out, acc);
}

static int dev_bias_fwd(void *ctx, float *y, const float *b, uint32_t n, uint32_t dim)
{
    return gk_bias_fwd(G(ctx), y, b, n, dim);
}

static int dev_bias_bwd(void *ctx, float *db, const float *dy, uint32_t n, uint32_t dim)
{
    return gk_bias_bwd(G(ctx), db, dy, n, dim);
}

static int dev_relu_fwd(void *ctx, float *x, size_t n)
{
    return gk_relu_fwd(G(ctx), x, n);
}

static int dev_elu_fwd(void *ctx, float *x, size_t n)
{
    return gk_elu_fwd(G(ctx), x, n);
}

static int dev_elu_bwd(void *ctx, float *dx, const float *y, size_t n)
{
    return gk_elu_bwd(G(ctx), dx, y, n);
}

static int dev_relu_bwd(void *ctx, float *dx, const float *y, size_t n)
{
    return gk_relu_bwd(G(ctx), dx, y, n);
}

static int dev_dropout_fwd(void *ctx, float *x, uint8_t *mask, size_t n, float p, uint64_t seed)
{
    return gk_dropout_fwd(G(ctx), x, mask, n, p, seed);
}

static int dev_dropout_bwd(void *ctx, float *dx, const uint8_t *mask, size_t n, float p)
{
    return gk_dropout_bwd(G(ctx), dx, mask, n, p);
}

static int dev_agg_mean_fwd(void *ctx, float *out, const struct model_block *b, const float *h, uint32_t dim)
{
    return gk_agg_mean_fwd(G(ctx), out, GB(b), h, dim);
}

static int dev_agg_sum_fwd(void *ctx, float *out, const struct model_block *b, const float *h, uint32_t dim)
{
    return gk_agg_sum_fwd(G(ctx), out, GB(b), h, dim);
}

static int dev_agg_sum_bwd(void *ctx, float *dh, const struct model_block *b, const float *dout, uint32_t dim)
{
    return gk_agg_sum_bwd(G(ctx), dh, GB(b), dout, dim);
}

static int dev_agg_max_fwd(void *ctx, float *out, float *ties, const struct model_block *b, const float *h,
                           uint32_t dim)
{
    return gk_agg_max_fwd(G(ctx), out, ties, GB(b), h, dim);
}

static int dev_agg_max_bwd(void *ctx, float *dh, const struct model_block *b, const float *h, const float *out,
                           const float *ties, const float *dout, uint32_t dim)
{
    return gk_agg_max_bwd(G(ctx), dh, GB(b), h, out, ties, dout, dim);
}

static int dev_agg_mean_bwd(void *ctx, float *dh, const struct model_block *b, const float *dout, uint32_t dim)
{
    return gk_agg_mean_bwd(G(ctx), dh, GB(b), dout, dim);
}

static int dev_gcn_norm(void *ctx, float *norm_src, float *norm_dst, uint32_t *deg, const struct model_block *b)
{
    return gk_gcn_norm(G(ctx), norm_src, norm_dst, deg, GB(b));
}

static int dev_agg_gcn_fwd(void *ctx, float *out, const struct model_block *b, const float *norm_src,
                           const float *norm_dst, const float *h, uint32_t dim)
{
    return gk_agg_gcn_fwd(G(ctx), out, GB(b), norm_src, norm_dst, h, dim);
}

static int dev_agg_gcn_bwd(void *ctx, float *dh, const struct model_block *b, const float *norm_src,
                           const float *norm_dst, const float *dout, uint32_t dim)
{
    return gk_agg_gcn_bwd(G(ctx), dh, GB(b), norm_src, norm_dst, dout, dim);
}

static int dev_gat_score_fwd(void *ctx, float *s, const float *z, const float *a, uint32_t n, uint32_t heads,
                             uint32_t hd)
{
    return gk_gat_score_fwd(G(ctx), s, z, a, n, heads, hd);
}

static int dev_gat_score_bwd(void *ctx, float *dz, float *da, const float *ds, const float *z, const float *a,
                             uint32_t n, uint32_t heads, uint32_t hd)
{
    return gk_gat_score_bwd(G(ctx), dz, da, ds, z, a, n, heads, hd);
}

static int dev_gat_edge_fwd(void *ctx, float *e_edge, float *e_self, const struct model_block *b, const float *el,
                            const float *er, uint32_t heads, float slope)
{
    return gk_gat_edge_fwd(G(ctx), e_edge, e_self, GB(b), el, er, heads, slope);
}

static int dev_gat_edge_bwd(void *ctx, float *del, float *der, const struct model_block *b, const float *de_edge,
                            const float *de_self, const float *el, const float *er, uint32_t heads, float slope)
{
    return gk_gat_edge_bwd(G(ctx), del, der, GB(b), de_edge, de_self, el, er, heads, slope);
}

static int dev_edge_softmax_fwd(void *ctx, float *a_edge, float *a_self, const struct model_block *b, uint32_t heads)
{
    return gk_edge_softmax_fwd(G(ctx), a_edge, a_self, GB(b), heads);
}

static int dev_edge_softmax_bwd(void *ctx, float *g_edge, float *g_self, const float *a_edge, const float *a_self,
                                const struct model_block *b, uint32_t heads)
{
    return gk_edge_softmax_bwd(G(ctx), g_edge, g_self, a_edge, a_self, GB(b), heads);
}

static int dev_gat_sum_fwd(void *ctx, float *out, const struct model_block *b, const float *a_edge, const float *a_self,
                           const float *z, uint32_t heads, uint32_t hd)
{
    return gk_gat_sum_fwd(G(ctx), out, GB(b), a_edge, a_self, z, heads, hd);
}

static int dev_gat_sum_bwd(void *ctx, float *dz, float *g_edge, float *g_self, const struct model_block *b,
                           const float *a_edge, const float *a_self, const float *z, const float *dout, uint32_t heads,
                           uint32_t hd)
{
    return gk_gat_sum_bwd(G(ctx), dz, g_edge, g_self, GB(b), a_edge, a_self, z, dout, heads, hd);
}

static int dev_head_mean_fwd(void *ctx, float *out, const float *in, uint32_t n, uint32_t heads, uint32_t d)
{
    return gk_head_mean_fwd(G(ctx), out, in, n, heads, d);
}

static int dev_head_mean_bwd(void *ctx, float *din, const float *dout, uint32_t n, uint32_t heads, uint32_t d)
{
    return gk_head_mean_bwd(G(ctx), din, dout, n, heads, d);
}

static int dev_cross_entropy(void *ctx, const float *logits, const int32_t *labels, uint32_t n, uint32_t classes,
                             float *dlogits, float *loss, uint32_t *labelled, uint32_t *correct)
{
    return gk_cross_entropy(G(ctx), logits, labels, n, classes, dlogits, loss, labelled, correct);
}

static int dev_adam(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                    float eps, float wd, bool decoupled, uint64_t t)
{
    return gk_adam(G(ctx), p, g, m, v, n, lr, b1, b2, eps, wd, decoupled, t);
}

static int dev_sgd(void *ctx, float *p, const float *g, size_t n, float lr)
{
    return gk_sgd(G(ctx), p, g, n, lr);
}

const struct model_ops trainer_cuda_model_ops = {
    .name = "cuda",
    .ops_blocks = false,
    .alloc = dev_alloc,
    .free = dev_free,
    .upload = dev_upload,
    .download = dev_download,
    .error = dev_error,
    .zero = dev_zero,
    .copy = dev_copy,
    .scale = dev_scale,
    .linear_fwd = dev_linear_fwd,
    .linear_bwd_w = dev_linear_bwd_w,
    .linear_bwd_x = dev_linear_bwd_x,
    .bias_fwd = dev_bias_fwd,
    .bias_bwd = dev_bias_bwd,
    .relu_fwd = dev_relu_fwd,
    .relu_bwd = dev_relu_bwd,
    .elu_fwd = dev_elu_fwd,
    .elu_bwd = dev_elu_bwd,
    .dropout_fwd = dev_dropout_fwd,
    .dropout_bwd = dev_dropout_bwd,
    .agg_mean_fwd = dev_agg_mean_fwd,
    .agg_mean_bwd = dev_agg_mean_bwd,
    .agg_sum_fwd = dev_agg_sum_fwd,
    .agg_sum_bwd = dev_agg_sum_bwd,
    .agg_max_fwd = dev_agg_max_fwd,
    .agg_max_bwd = dev_agg_max_bwd,
    .gcn_norm = dev_gcn_norm,
    .agg_gcn_fwd = dev_agg_gcn_fwd,
    .agg_gcn_bwd = dev_agg_gcn_bwd,
    .gat_score_fwd = dev_gat_score_fwd,
    .gat_score_bwd = dev_gat_score_bwd,
    .gat_edge_fwd = dev_gat_edge_fwd,
    .gat_edge_bwd = dev_gat_edge_bwd,
    .edge_softmax_fwd = dev_edge_softmax_fwd,
    .edge_softmax_bwd = dev_edge_softmax_bwd,
    .gat_sum_fwd = dev_gat_sum_fwd,
    .gat_sum_bwd = dev_gat_sum_bwd,
    .head_mean_fwd = dev_head_mean_fwd,
    .head_mean_bwd = dev_head_mean_bwd,
    .cross_entropy = dev_cross_entropy,
    .adam = dev_adam,
    .sgd = dev_sgd,
};
