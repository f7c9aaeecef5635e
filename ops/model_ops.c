/* model_ops.c - the CPU operator table (model_ops.h): host memory from
 * aligned_alloc, each operator one call of its ops.h twin with the
 * context dropped and the block unwrapped, so a model on this table
 * computes exactly what the ops_X calls compute. Nothing here fails but
 * alloc. */
#include "ops/model_ops.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "ops/ops.h"

#define OB(b) ((const struct ops_block *)(b)->impl)

static int cpu_alloc(void *ctx, void **p, size_t bytes)
{
    (void)ctx;
    size_t cap = sl_round_up(bytes ? bytes : 1, 64);
    if (cap < bytes) {
        *p = NULL;
        return -ENOMEM;
    }
    *p = aligned_alloc(64, cap);
    return *p ? 0 : -ENOMEM;
}

static void cpu_free(void *ctx, void *p)
{
    (void)ctx;
    free(p);
}

static int cpu_move(void *ctx, void *dst, const void *src, size_t bytes)
{
    (void)ctx;
    if (bytes)
        memcpy(dst, src, bytes);
    return 0;
}

static const char *cpu_error(void *ctx)
{
    (void)ctx;
    return "out of host memory"; /* alloc is the only call that fails */
}

static int cpu_zero(void *ctx, float *x, size_t n)
{
    (void)ctx;
    ops_zero(x, n);
    return 0;
}

static int cpu_copy(void *ctx, float *y, const float *x, size_t n)
{
    (void)ctx;
    ops_copy(y, x, n);
    return 0;
}

static int cpu_scale(void *ctx, float *x, size_t n, float alpha)
{
    (void)ctx;
    ops_scale(x, n, alpha);
    return 0;
}

static int cpu_linear_fwd(void *ctx, float *y, const float *x, const float *w, uint32_t n, uint32_t in, uint32_t out,
                          bool acc)
{
    (void)ctx;
    ops_linear_fwd(y, x, w, n, in, out, acc);
    return 0;
}

static int cpu_linear_bwd_w(void *ctx, float *dw, const float *dy, const float *x, uint32_t n, uint32_t in,
                            uint32_t out, bool acc)
{
    (void)ctx;
    ops_linear_bwd_w(dw, dy, x, n, in, out, acc);
    return 0;
}

static int cpu_linear_bwd_x(void *ctx, float *dx, const float *dy, const float *w, uint32_t n, uint32_t in,
                            uint32_t out, bool acc)
{
    (void)ctx;
    ops_linear_bwd_x(dx, dy, w, n, in, out, acc);
    return 0;
}

static int cpu_linear_bwd_w2(void *ctx, float *dw1, float *dw2, const float *dy, const float *x1, const float *x2,
                             uint32_t n, uint32_t in, uint32_t out)
{
    (void)ctx;
    ops_linear_bwd_w2(dw1, dw2, dy, x1, x2, n, in, out);
    return 0;
}

static int cpu_linear_bwd_x2(void *ctx, float *dx1, float *dx2, const float *dy, const float *w1, const float *w2,
                             uint32_t n, uint32_t in, uint32_t out)
{
    (void)ctx;
    ops_linear_bwd_x2(dx1, dx2, dy, w1, w2, n, in, out);
    return 0;
}

static int cpu_gather_rows(void *ctx, float *x, const unsigned char *rows, size_t stride, const uint32_t *alias,
                           uint32_t n, uint32_t dim)
{
    (void)ctx;
    ops_gather_rows(x, rows, stride, alias, n, dim, false);
    return 0;
}

static int cpu_sage_fwd(void *ctx, const struct ops_sage_args *s)
{
    (void)ctx;
    ops_sage_fwd(s);
    return 0;
}

static int cpu_dropout_relu_bwd(void *ctx, float *dx, const uint8_t *mask, const float *y, size_t n, float p)
{
    (void)ctx;
    ops_dropout_relu_bwd(dx, mask, y, n, p);
    return 0;
}

static int cpu_bias_fwd(void *ctx, float *y, const float *b, uint32_t n, uint32_t dim)
{
    (void)ctx;
    ops_bias_fwd(y, b, n, dim);
    return 0;
}

static int cpu_bias_bwd(void *ctx, float *db, const float *dy, uint32_t n, uint32_t dim)
{
    (void)ctx;
    ops_bias_bwd(db, dy, n, dim);
    return 0;
}

static int cpu_relu_fwd(void *ctx, float *x, size_t n)
{
    (void)ctx;
    ops_relu_fwd(x, n);
    return 0;
}

static int cpu_elu_fwd(void *ctx, float *x, size_t n)
{
    (void)ctx;
    ops_elu_fwd(x, n);
    return 0;
}

static int cpu_elu_bwd(void *ctx, float *dx, const float *y, size_t n)
{
    (void)ctx;
    ops_elu_bwd(dx, y, n);
    return 0;
}

static int cpu_relu_bwd(void *ctx, float *dx, const float *y, size_t n)
{
    (void)ctx;
    ops_relu_bwd(dx, y, n);
    return 0;
}

static int cpu_dropout_fwd(void *ctx, float *x, uint8_t *mask, size_t n, float p, uint64_t seed)
{
    (void)ctx;
    ops_dropout_fwd(x, mask, n, p, seed);
    return 0;
}

static int cpu_dropout_bwd(void *ctx, float *dx, const uint8_t *mask, size_t n, float p)
{
    (void)ctx;
    ops_dropout_bwd(dx, mask, n, p);
    return 0;
}

static int cpu_agg_mean_fwd(void *ctx, float *out, const struct model_block *b, const float *h, uint32_t dim)
{
    (void)ctx;
    ops_agg_mean_fwd(out, OB(b), h, dim);
    return 0;
}

static int cpu_agg_rows_fwd(void *ctx, float *out, const struct model_block *b, const unsigned char *rows,
                            size_t stride, const uint32_t *alias, uint32_t dim, bool mean)
{
    (void)ctx;
    ops_agg_rows_fwd(out, OB(b), rows, stride, alias, dim, mean);
    return 0;
}

static int cpu_agg_sum_fwd(void *ctx, float *out, const struct model_block *b, const float *h, uint32_t dim)
{
    (void)ctx;
    ops_agg_sum_fwd(out, OB(b), h, dim);
    return 0;
}

static int cpu_agg_sum_bwd(void *ctx, float *dh, const struct model_block *b, const float *dout, uint32_t dim)
{
    (void)ctx;
    ops_agg_sum_bwd(dh, OB(b), dout, dim);
    return 0;
}

static int cpu_agg_max_fwd(void *ctx, float *out, float *ties, const struct model_block *b, const float *h,
                           uint32_t dim)
{
    (void)ctx;
    ops_agg_max_fwd(out, ties, OB(b), h, dim);
    return 0;
}

static int cpu_agg_max_bwd(void *ctx, float *dh, const struct model_block *b, const float *h, const float *out,
                           const float *ties, const float *dout, uint32_t dim)
{
    (void)ctx;
    ops_agg_max_bwd(dh, OB(b), h, out, ties, dout, dim);
    return 0;
}

static int cpu_agg_mean_bwd(void *ctx, float *dh, const struct model_block *b, const float *dout, uint32_t dim)
{
    (void)ctx;
    ops_agg_mean_bwd(dh, OB(b), dout, dim);
    return 0;
}

static int cpu_gcn_norm(void *ctx, float *norm_src, float *norm_dst, uint32_t *deg, const struct model_block *b)
{
    (void)ctx;
    ops_gcn_norm(norm_src, norm_dst, deg, OB(b));
    return 0;
}

static int cpu_agg_gcn_fwd(void *ctx, float *out, const struct model_block *b, const float *norm_src,
                           const float *norm_dst, const float *h, uint32_t dim)
{
    (void)ctx;
    ops_agg_gcn_fwd(out, OB(b), norm_src, norm_dst, h, dim);
    return 0;
}

static int cpu_agg_gcn_bwd(void *ctx, float *dh, const struct model_block *b, const float *norm_src,
                           const float *norm_dst, const float *dout, uint32_t dim)
{
    (void)ctx;
    ops_agg_gcn_bwd(dh, OB(b), norm_src, norm_dst, dout, dim);
    return 0;
}

static int cpu_gat_score_fwd(void *ctx, float *s, const float *z, const float *a, uint32_t n, uint32_t heads,
                             uint32_t hd)
{
    (void)ctx;
    ops_gat_score_fwd(s, z, a, n, heads, hd);
    return 0;
}

static int cpu_gat_score_bwd(void *ctx, float *dz, float *da, const float *ds, const float *z, const float *a,
                             uint32_t n, uint32_t heads, uint32_t hd)
{
    (void)ctx;
    ops_gat_score_bwd(dz, da, ds, z, a, n, heads, hd);
    return 0;
}

static int cpu_gat_edge_fwd(void *ctx, float *e_edge, float *e_self, const struct model_block *b, const float *el,
                            const float *er, uint32_t heads, float slope)
{
    (void)ctx;
    ops_gat_edge_fwd(e_edge, e_self, OB(b), el, er, heads, slope);
    return 0;
}

static int cpu_gat_edge_bwd(void *ctx, float *del, float *der, const struct model_block *b, const float *de_edge,
                            const float *de_self, const float *el, const float *er, uint32_t heads, float slope)
{
    (void)ctx;
    ops_gat_edge_bwd(del, der, OB(b), de_edge, de_self, el, er, heads, slope);
    return 0;
}

static int cpu_edge_softmax_fwd(void *ctx, float *a_edge, float *a_self, const struct model_block *b, uint32_t heads)
{
    (void)ctx;
    ops_edge_softmax_fwd(a_edge, a_self, OB(b), heads);
    return 0;
}

static int cpu_edge_softmax_bwd(void *ctx, float *g_edge, float *g_self, const float *a_edge, const float *a_self,
                                const struct model_block *b, uint32_t heads)
{
    (void)ctx;
    ops_edge_softmax_bwd(g_edge, g_self, a_edge, a_self, OB(b), heads);
    return 0;
}

static int cpu_gat_sum_fwd(void *ctx, float *out, const struct model_block *b, const float *a_edge, const float *a_self,
                           const float *z, uint32_t heads, uint32_t hd)
{
    (void)ctx;
    ops_gat_sum_fwd(out, OB(b), a_edge, a_self, z, heads, hd);
    return 0;
}

static int cpu_gat_sum_bwd(void *ctx, float *dz, float *g_edge, float *g_self, const struct model_block *b,
                           const float *a_edge, const float *a_self, const float *z, const float *dout, uint32_t heads,
                           uint32_t hd)
{
    (void)ctx;
    ops_gat_sum_bwd(dz, g_edge, g_self, OB(b), a_edge, a_self, z, dout, heads, hd);
    return 0;
}

static int cpu_head_mean_fwd(void *ctx, float *out, const float *in, uint32_t n, uint32_t heads, uint32_t d)
{
    (void)ctx;
    ops_head_mean_fwd(out, in, n, heads, d);
    return 0;
}

static int cpu_head_mean_bwd(void *ctx, float *din, const float *dout, uint32_t n, uint32_t heads, uint32_t d)
{
    (void)ctx;
    ops_head_mean_bwd(din, dout, n, heads, d);
    return 0;
}

static int cpu_cross_entropy(void *ctx, const float *logits, const int32_t *labels, uint32_t n, uint32_t classes,
                             float *dlogits, float *loss, uint32_t *labelled, uint32_t *correct)
{
    (void)ctx;
    float l = ops_cross_entropy(logits, labels, n, classes, dlogits, labelled, correct);
    if (loss)
        *loss = l;
    return 0;
}

static int cpu_adam(void *ctx, float *p, const float *g, float *m, float *v, size_t n, float lr, float b1, float b2,
                    float eps, float wd, bool decoupled, uint64_t t)
{
    (void)ctx;
    ops_adam(p, g, m, v, n, lr, b1, b2, eps, wd, decoupled, t);
    return 0;
}

static int cpu_sgd(void *ctx, float *p, const float *g, size_t n, float lr)
{
    (void)ctx;
    ops_sgd(p, g, n, lr);
    return 0;
}

const struct model_ops model_ops_cpu = {
    .name = "cpu",
    .ops_blocks = true,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_move,
    .download = cpu_move,
    .error = cpu_error,
    .zero = cpu_zero,
    .copy = cpu_copy,
    .scale = cpu_scale,
    .linear_fwd = cpu_linear_fwd,
    .linear_bwd_w = cpu_linear_bwd_w,
    .linear_bwd_x = cpu_linear_bwd_x,
    .bias_fwd = cpu_bias_fwd,
    .bias_bwd = cpu_bias_bwd,
    .relu_fwd = cpu_relu_fwd,
    .relu_bwd = cpu_relu_bwd,
    .elu_fwd = cpu_elu_fwd,
    .elu_bwd = cpu_elu_bwd,
    .dropout_fwd = cpu_dropout_fwd,
    .dropout_bwd = cpu_dropout_bwd,
    .agg_mean_fwd = cpu_agg_mean_fwd,
    .agg_rows_fwd = cpu_agg_rows_fwd,
    .agg_mean_bwd = cpu_agg_mean_bwd,
    .agg_sum_fwd = cpu_agg_sum_fwd,
    .agg_sum_bwd = cpu_agg_sum_bwd,
    .agg_max_fwd = cpu_agg_max_fwd,
    .agg_max_bwd = cpu_agg_max_bwd,
    .gcn_norm = cpu_gcn_norm,
    .gather_rows = cpu_gather_rows,
    .sage_fwd = cpu_sage_fwd,
    .linear_bwd_w2 = cpu_linear_bwd_w2,
    .linear_bwd_x2 = cpu_linear_bwd_x2,
    .dropout_relu_bwd = cpu_dropout_relu_bwd,
    .agg_gcn_fwd = cpu_agg_gcn_fwd,
    .agg_gcn_bwd = cpu_agg_gcn_bwd,
    .gat_score_fwd = cpu_gat_score_fwd,
    .gat_score_bwd = cpu_gat_score_bwd,
    .gat_edge_fwd = cpu_gat_edge_fwd,
    .gat_edge_bwd = cpu_gat_edge_bwd,
    .edge_softmax_fwd = cpu_edge_softmax_fwd,
    .edge_softmax_bwd = cpu_edge_softmax_bwd,
    .gat_sum_fwd = cpu_gat_sum_fwd,
    .gat_sum_bwd = cpu_gat_sum_bwd,
    .head_mean_fwd = cpu_head_mean_fwd,
    .head_mean_bwd = cpu_head_mean_bwd,
    .cross_entropy = cpu_cross_entropy,
    .adam = cpu_adam,
    .sgd = cpu_sgd,
};
