/* kernels_graph.cu - the CUDA twins of the operators over a sampled
 * block (kernels.h): sum, mean and GCN aggregation, the graph-attention
 * pieces, and the block's transpose that their backward passes read.
 * Built like kernels.cu (nvcc, or host C++ through gpu/shim.h), which
 * says how exactness is kept; here the order of a thread's sum is the
 * whole point: a forward output adds its destination's edges in edge
 * order, a source-side gradient its out-edges in edge order (the
 * transpose lists them so), with the self loop placed where the CPU's
 * loop over destinations meets it. */
#include "gpu/launch.h"

#include <errno.h>
#include <string.h>

#include "ops/elem.h"

/* ---- aggregation ---------------------------------------------------------------------------------------- */

/* out[d, c] = the sum over d's edges in order (then times 1 / deg for the
 * mean when deg > 1, as ops_agg_mean_fwd scales). */
static __global__ void k_agg_fwd(float *out, struct gk_block b, const float *h, uint32_t dim, bool mean)
{
    for (size_t i = gk_first(); i < (size_t)b.n_dst * dim; i += gk_stride()) {
        size_t d = i / dim, c = i % dim;
        uint32_t j0 = b.indptr[d], j1 = b.indptr[d + 1];
        float s = 0.0f;
        for (uint32_t j = j0; j < j1; j++)
            s += h[(size_t)b.src[j] * dim + c];
        if (mean && j1 - j0 > 1)
            s *= 1.0f / (float)(j1 - j0);
        out[i] = s;
    }
}

/* ops_agg_max_fwd, one thread per (d, c), the CPU's comparisons in edge order. */
static __global__ void k_agg_max_fwd(float *out, float *ties, struct gk_block b, const float *h, uint32_t dim)
{
    for (size_t i = gk_first(); i < (size_t)b.n_dst * dim; i += gk_stride()) {
        size_t d = i / dim, c = i % dim;
        uint32_t j0 = b.indptr[d], j1 = b.indptr[d + 1];
        if (j0 == j1) {
            out[i] = 0.0f;
            ties[i] = 0.0f;
            continue;
        }
        float o = h[(size_t)b.src[j0] * dim + c], t = 1.0f;
        for (uint32_t j = j0 + 1; j < j1; j++) {
            float x = h[(size_t)b.src[j] * dim + c];
            if (x > o) {
                o = x;
                t = 1.0f;
            } else if (x == o) {
                t += 1.0f;
            }
        }
        out[i] = o;
        ties[i] = t;
    }
}

/* ops_agg_max_bwd over the transpose: one thread per (s, c), s's
 * out-edges in edge order. */
static __global__ void k_agg_max_bwd(float *dh, struct gk_block b, const float *h, const float *out,
                                     const float *ties, const float *dout, uint32_t dim)
{
    for (size_t i = gk_first(); i < (size_t)b.n_src * dim; i += gk_stride()) {
        size_t s = i / dim, c = i % dim;
        float acc = dh[i], x = h[i];
        for (uint32_t p = b.t_indptr[s]; p < b.t_indptr[s + 1]; p++) {
            size_t k = (size_t)b.t_dst[p] * dim + c;
            if (x == out[k])
                acc += dout[k] / ties[k];
        }
        dh[i] = acc;
    }
}

/* dh[s, c] += dout[d, c] (times 1 / deg(d) for the mean) over s's
 * out-edges in edge order. */
static __global__ void k_agg_bwd(float *dh, struct gk_block b, const float *dout, uint32_t dim, bool mean)
{
    for (size_t i = gk_first(); i < (size_t)b.n_src * dim; i += gk_stride()) {
        size_t s = i / dim, c = i % dim;
        float acc = dh[i];
        for (uint32_t p = b.t_indptr[s]; p < b.t_indptr[s + 1]; p++) {
            uint32_t d = b.t_dst[p];
            float g = dout[(size_t)d * dim + c];
            if (mean)
                acc += 1.0f / (float)(b.indptr[d + 1] - b.indptr[d]) * g;
            else
                acc += g;
        }
        dh[i] = acc;
    }
}

static __global__ void k_gcn_norm(float *norm_src, float *norm_dst, uint32_t *deg, struct gk_block b)
{
    for (size_t u = gk_first(); u < (size_t)b.n_src; u += gk_stride()) {
        if (b.deg) { /* the graph's in-degrees (ops_gcn_norm) */
            norm_src[u] = elem_gcn_norm(b.deg[u]);
            if (u < b.n_dst)
                norm_dst[u] = elem_gcn_norm(b.deg[u]);
            continue;
        }
        uint32_t du = b.t_indptr[u + 1] - b.t_indptr[u];
        deg[u] = du;
        norm_src[u] = elem_gcn_norm(du);
        if (u < b.n_dst)
            norm_dst[u] = elem_gcn_norm(b.indptr[u + 1] - b.indptr[u]);
    }
}

static __global__ void k_gcn_fwd(float *out, struct gk_block b, const float *ns, const float *nd, const float *h,
                                 uint32_t dim)
{
    for (size_t i = gk_first(); i < (size_t)b.n_dst * dim; i += gk_stride()) {
        size_t v = i / dim, c = i % dim;
        float ndv = nd[v];
        float o = ndv * ns[v] * h[v * dim + c];
        for (uint32_t j = b.indptr[v]; j < b.indptr[v + 1]; j++) {
            uint32_t u = b.src[j];
            o += ndv * ns[u] * h[(size_t)u * dim + c];
        }
        out[i] = o;
    }
}

/* dh[s] gets, in the CPU's order, the edges from destinations below s,
 * then its self loop (when s is a destination), then the rest. */
static __global__ void k_gcn_bwd(float *dh, struct gk_block b, const float *ns, const float *nd, const float *dout,
                                 uint32_t dim)
{
    for (size_t i = gk_first(); i < (size_t)b.n_src * dim; i += gk_stride()) {
        size_t s = i / dim, c = i % dim;
        float acc = dh[i];
        bool self = s < b.n_dst;
        for (uint32_t p = b.t_indptr[s]; p < b.t_indptr[s + 1]; p++) {
            uint32_t d = b.t_dst[p];
            if (self && d >= s) {
                acc += nd[s] * ns[s] * dout[s * dim + c];
                self = false;
            }
            acc += nd[d] * ns[s] * dout[(size_t)d * dim + c];
        }
        if (self)
            acc += nd[s] * ns[s] * dout[s * dim + c];
        dh[i] = acc;
    }
}

/* ---- graph attention ------------------------------------------------------------------------------------- */

static __global__ void k_gat_score_fwd(float *s, const float *z, const float *a, uint32_t n, uint32_t heads,
                                       uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (size_t i = gk_first(); i < (size_t)n * heads; i += gk_stride()) {
        size_t r = i / heads, k = i % heads;
        s[i] = elem_dot(z + r * w + k * hd, a + k * hd, hd);
    }
}

static __global__ void k_gat_score_bwd_dz(float *dz, const float *ds, const float *a, uint32_t n, uint32_t heads,
                                          uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (size_t i = gk_first(); i < (size_t)n * w; i += gk_stride()) {
        size_t r = i / w, col = i % w;
        dz[i] += ds[r * heads + col / hd] * a[col];
    }
}

/* da[col] += ds[r, k] z[r, col] over the rows in order. */
static __global__ void k_gat_score_bwd_da(float *da, const float *ds, const float *z, uint32_t n, uint32_t heads,
                                          uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (size_t col = gk_first(); col < w; col += gk_stride()) {
        size_t k = col / hd;
        float acc = da[col];
        for (uint32_t r = 0; r < n; r++)
            acc += ds[(size_t)r * heads + k] * z[(size_t)r * w + col];
        da[col] = acc;
    }
}

static __global__ void k_gat_edge_fwd(float *e_edge, float *e_self, struct gk_block b, const float *el, const float *er,
                                      uint32_t heads, float slope)
{
    for (size_t i = gk_first(); i < (size_t)b.n_dst * heads; i += gk_stride()) {
        size_t v = i / heads, k = i % heads;
        float rv = er[i];
        e_self[i] = elem_leaky(el[i] + rv, slope);
        for (uint32_t j = b.indptr[v]; j < b.indptr[v + 1]; j++)
            e_edge[(size_t)j * heads + k] = elem_leaky(el[(size_t)b.src[j] * heads + k] + rv, slope);
    }
}

static __global__ void k_gat_edge_bwd_dst(float *der, struct gk_block b, const float *de_edge, const float *de_self,
                                          const float *el, const float *er, uint32_t heads, float slope)
{
    for (size_t i = gk_first(); i < (size_t)b.n_dst * heads; i += gk_stride()) {
        size_t v = i / heads, k = i % heads;
        float rv = er[i];
        float acc = der[i];
        acc += elem_leaky_bwd(de_self[i], el[i] + rv, slope);
        for (uint32_t j = b.indptr[v]; j < b.indptr[v + 1]; j++)
            acc += elem_leaky_bwd(de_edge[(size_t)j * heads + k], el[(size_t)b.src[j] * heads + k] + rv, slope);
        der[i] = acc;
    }
}

static __global__ void k_gat_edge_bwd_src(float *del, struct gk_block b, const float *de_edge, const float *de_self,
                                          const float *el, const float *er, uint32_t heads, float slope)
{
    for (size_t i = gk_first(); i < (size_t)b.n_src * heads; i += gk_stride()) {
        size_t s = i / heads, k = i % heads;
        float ls = el[i];
        float acc = del[i];
        bool self = s < b.n_dst;
        for (uint32_t p = b.t_indptr[s]; p < b.t_indptr[s + 1]; p++) {
            uint32_t d = b.t_dst[p], j = b.t_edge[p];
            if (self && d >= s) {
                acc += elem_leaky_bwd(de_self[i], ls + er[i], slope);
                self = false;
            }
            acc += elem_leaky_bwd(de_edge[(size_t)j * heads + k], ls + er[(size_t)d * heads + k], slope);
        }
        if (self)
            acc += elem_leaky_bwd(de_self[i], ls + er[i], slope);
        del[i] = acc;
    }
}

static __global__ void k_softmax_fwd(float *a_edge, float *a_self, struct gk_block b, uint32_t heads)
{
    for (size_t i = gk_first(); i < (size_t)b.n_dst * heads; i += gk_stride()) {
        size_t v = i / heads, k = i % heads;
        elem_softmax_fwd(a_edge + k, a_self + i, b.indptr[v], b.indptr[v + 1], heads);
    }
}

static __global__ void k_softmax_bwd(float *g_edge, float *g_self, const float *a_edge, const float *a_self,
                                     struct gk_block b, uint32_t heads)
{
    for (size_t i = gk_first(); i < (size_t)b.n_dst * heads; i += gk_stride()) {
        size_t v = i / heads, k = i % heads;
        elem_softmax_bwd(g_edge + k, g_self + i, a_edge + k, a_self + i, b.indptr[v], b.indptr[v + 1], heads);
    }
}

static __global__ void k_gat_sum_fwd(float *out, struct gk_block b, const float *a_edge, const float *a_self,
                                     const float *z, uint32_t heads, uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (size_t i = gk_first(); i < (size_t)b.n_dst * w; i += gk_stride()) {
        size_t v = i / w, col = i % w, k = col / hd;
        float o = a_self[v * heads + k] * z[v * w + col];
        for (uint32_t j = b.indptr[v]; j < b.indptr[v + 1]; j++)
            o += a_edge[(size_t)j * heads + k] * z[(size_t)b.src[j] * w + col];
        out[i] = o;
    }
}

/* g_self[v, k] = dout[v, k] . z[v, k] for the destinations, then g_edge
 * per edge (entry p of the transpose: edge t_edge[p] = src[...] -> t_dst[p]). */
static __global__ void k_gat_sum_bwd_g(float *g_edge, float *g_self, struct gk_block b, const float *z,
                                       const float *dout, uint32_t heads, uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (size_t i = gk_first(); i < ((size_t)b.n_dst + b.n_edges) * heads; i += gk_stride()) {
        size_t r = i / heads, k = i % heads;
        if (r < b.n_dst) {
            g_self[i] = elem_dot(dout + r * w + k * hd, z + r * w + k * hd, hd);
        } else {
            size_t p = r - b.n_dst;
            uint32_t j = b.t_edge[p], d = b.t_dst[p], u = b.src[j];
            g_edge[(size_t)j * heads + k] = elem_dot(dout + d * w + k * hd, z + u * w + k * hd, hd);
        }
    }
}

static __global__ void k_gat_sum_bwd_dz(float *dz, struct gk_block b, const float *a_edge, const float *a_self,
                                        const float *dout, uint32_t heads, uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (size_t i = gk_first(); i < (size_t)b.n_src * w; i += gk_stride()) {
        size_t s = i / w, col = i % w, k = col / hd;
        float acc = dz[i];
        bool self = s < b.n_dst;
        for (uint32_t p = b.t_indptr[s]; p < b.t_indptr[s + 1]; p++) {
            uint32_t d = b.t_dst[p], j = b.t_edge[p];
            if (self && d >= s) {
                acc += a_self[s * heads + k] * dout[s * w + col];
                self = false;
            }
            acc += a_edge[(size_t)j * heads + k] * dout[(size_t)d * w + col];
        }
        if (self)
            acc += a_self[s * heads + k] * dout[s * w + col];
        dz[i] = acc;
    }
}

static __global__ void k_head_mean_fwd(float *out, const float *in, uint32_t n, uint32_t heads, uint32_t d, float inv)
{
    size_t w = (size_t)heads * d;
    for (size_t i = gk_first(); i < (size_t)n * d; i += gk_stride()) {
        const float *row = in + i / d * w + i % d;
        float o = row[0];
        for (uint32_t k = 1; k < heads; k++)
            o += row[(size_t)k * d];
        out[i] = o * inv;
    }
}

static __global__ void k_head_mean_bwd(float *din, const float *dout, uint32_t n, uint32_t heads, uint32_t d, float inv)
{
    size_t w = (size_t)heads * d;
    for (size_t i = gk_first(); i < (size_t)n * w; i += gk_stride()) {
        din[i] = inv * dout[i / w * d + i % d];
    }
}

/* ---- blocks --------------------------------------------------------------------------------------------- */

int gk_block_transpose_host(const struct ops_block *b, uint32_t *t_indptr, uint32_t *t_dst, uint32_t *t_edge, char *err,
                            size_t errlen)
{
    if (b->indptr[0] != 0) {
        if (err && errlen)
            snprintf(err, errlen, "block transpose: indptr[0] = %u, not 0", b->indptr[0]);
        return -EINVAL;
    }
    for (uint32_t d = 0; d < b->n_dst; d++)
        if (b->indptr[d + 1] < b->indptr[d]) {
            if (err && errlen)
                snprintf(err, errlen, "block transpose: indptr decreases at destination %u (%u -> %u)", d, b->indptr[d],
                         b->indptr[d + 1]);
            return -EINVAL;
        }
    uint32_t e = b->indptr[b->n_dst];
    memset(t_indptr, 0, ((size_t)b->n_src + 1) * sizeof *t_indptr);
    for (uint32_t j = 0; j < e; j++) {
        if (b->src[j] >= b->n_src) {
            if (err && errlen)
                snprintf(err, errlen, "block transpose: edge %u's source %u is not below n_src = %u", j, b->src[j],
                         b->n_src);
            return -EINVAL;
        }
        t_indptr[b->src[j] + 1]++;
    }
    for (uint32_t u = 0; u < b->n_src; u++)
        t_indptr[u + 1] += t_indptr[u];
    /* place each edge at its source's cursor (t_indptr[u] moves from u's
     * start to its end), destinations and edges in increasing order */
    for (uint32_t d = 0; d < b->n_dst; d++)
        for (uint32_t j = b->indptr[d]; j < b->indptr[d + 1]; j++) {
            uint32_t p = t_indptr[b->src[j]]++;
            t_dst[p] = d;
            t_edge[p] = j;
        }
    for (uint32_t u = b->n_src; u > 0; u--) /* each end is the next start: shift back */
        t_indptr[u] = t_indptr[u - 1];
    t_indptr[0] = 0;
    return 0;
}

size_t gk_block_bytes(const struct ops_block *b)
{
    size_t e = ops_block_edges(b);
    return ((size_t)b->n_dst + 1 + e + (size_t)b->n_src + 1 + 2 * e) * sizeof(uint32_t);
}

int gk_block_upload(struct gk_ctx *g, struct gk_block *out, void *dev, const struct ops_block *b,
                    const uint32_t *t_indptr, const uint32_t *t_dst, const uint32_t *t_edge)
{
    uint32_t e = ops_block_edges(b);
    uint32_t *p = (uint32_t *)dev;
    struct gk_block k = {b->n_dst, b->n_src, e, NULL, NULL, NULL, NULL, NULL, NULL}; /* deg: the caller's */
    const uint32_t *from[5] = {b->indptr, b->src, t_indptr, t_dst, t_edge};
    size_t count[5] = {(size_t)b->n_dst + 1, e, (size_t)b->n_src + 1, e, e};
    const uint32_t **to[5] = {&k.indptr, &k.src, &k.t_indptr, &k.t_dst, &k.t_edge};
    for (int i = 0; i < 5; i++) {
        int rc = gk_upload(g, p, from[i], count[i] * sizeof *p);
        if (rc)
            return rc;
        *to[i] = p;
        p += count[i];
    }
    *out = k;
    return 0;
}

static int need_transpose(struct gk_ctx *g, const struct gk_block *b, const char *func)
{
    if (b->n_src && !b->t_indptr)
        return gk_fail(g, -EINVAL, "%s: the block has no transpose (t_indptr); build it with gk_block_transpose_host",
                       func);
    return 0;
}

/* ---- the operators ------------------------------------------------------------------------------------------ */

int gk_agg_sum_fwd(struct gk_ctx *g, float *out, const struct gk_block *b, const float *h, uint32_t dim)
{
    return GK_RUN(g, (size_t)b->n_dst * dim, k_agg_fwd, out, *b, h, dim, false);
}

int gk_agg_sum_bwd(struct gk_ctx *g, float *dh, const struct gk_block *b, const float *dout, uint32_t dim)
{
    int rc = need_transpose(g, b, __func__);
    return rc ? rc : GK_RUN(g, (size_t)b->n_src * dim, k_agg_bwd, dh, *b, dout, dim, false);
}

int gk_agg_mean_fwd(struct gk_ctx *g, float *out, const struct gk_block *b, const float *h, uint32_t dim)
{
    return GK_RUN(g, (size_t)b->n_dst * dim, k_agg_fwd, out, *b, h, dim, true);
}

int gk_agg_mean_bwd(struct gk_ctx *g, float *dh, const struct gk_block *b, const float *dout, uint32_t dim)
{
    int rc = need_transpose(g, b, __func__);
    return rc ? rc : GK_RUN(g, (size_t)b->n_src * dim, k_agg_bwd, dh, *b, dout, dim, true);
}

int gk_agg_max_fwd(struct gk_ctx *g, float *out, float *ties, const struct gk_block *b, const float *h, uint32_t dim)
{
    return GK_RUN(g, (size_t)b->n_dst * dim, k_agg_max_fwd, out, ties, *b, h, dim);
}

int gk_agg_max_bwd(struct gk_ctx *g, float *dh, const struct gk_block *b, const float *h, const float *out,
                   const float *ties, const float *dout, uint32_t dim)
{
    int rc = need_transpose(g, b, __func__);
    return rc ? rc : GK_RUN(g, (size_t)b->n_src * dim, k_agg_max_bwd, dh, *b, h, out, ties, dout, dim);
}

int gk_gcn_norm(struct gk_ctx *g, float *norm_src, float *norm_dst, uint32_t *deg, const struct gk_block *b)
{
    int rc = b->deg ? 0 : need_transpose(g, b, __func__);
    return rc ? rc : GK_RUN(g, b->n_src, k_gcn_norm, norm_src, norm_dst, deg, *b);
}

int gk_agg_gcn_fwd(struct gk_ctx *g, float *out, const struct gk_block *b, const float *norm_src, const float *norm_dst,
                   const float *h, uint32_t dim)
{
    return GK_RUN(g, (size_t)b->n_dst * dim, k_gcn_fwd, out, *b, norm_src, norm_dst, h, dim);
}

int gk_agg_gcn_bwd(struct gk_ctx *g, float *dh, const struct gk_block *b, const float *norm_src, const float *norm_dst,
                   const float *dout, uint32_t dim)
{
    int rc = need_transpose(g, b, __func__);
    return rc ? rc : GK_RUN(g, (size_t)b->n_src * dim, k_gcn_bwd, dh, *b, norm_src, norm_dst, dout, dim);
}

int gk_gat_score_fwd(struct gk_ctx *g, float *s, const float *z, const float *a, uint32_t n, uint32_t heads,
                     uint32_t hd)
{
    return GK_RUN(g, (size_t)n * heads, k_gat_score_fwd, s, z, a, n, heads, hd);
}

int gk_gat_score_bwd(struct gk_ctx *g, float *dz, float *da, const float *ds, const float *z, const float *a,
                     uint32_t n, uint32_t heads, uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    int rc = dz ? GK_RUN(g, (size_t)n * w, k_gat_score_bwd_dz, dz, ds, a, n, heads, hd) : 0;
    return rc ? rc : GK_RUN(g, w, k_gat_score_bwd_da, da, ds, z, n, heads, hd);
}

int gk_gat_edge_fwd(struct gk_ctx *g, float *e_edge, float *e_self, const struct gk_block *b, const float *el,
                    const float *er, uint32_t heads, float slope)
{
    return GK_RUN(g, (size_t)b->n_dst * heads, k_gat_edge_fwd, e_edge, e_self, *b, el, er, heads, slope);
}

int gk_gat_edge_bwd(struct gk_ctx *g, float *del, float *der, const struct gk_block *b, const float *de_edge,
                    const float *de_self, const float *el, const float *er, uint32_t heads, float slope)
{
    int rc = need_transpose(g, b, __func__);
    if (rc == 0)
        rc = GK_RUN(g, (size_t)b->n_dst * heads, k_gat_edge_bwd_dst, der, *b, de_edge, de_self, el, er, heads, slope);
    if (rc == 0)
        rc = GK_RUN(g, (size_t)b->n_src * heads, k_gat_edge_bwd_src, del, *b, de_edge, de_self, el, er, heads, slope);
    return rc;
}

int gk_edge_softmax_fwd(struct gk_ctx *g, float *a_edge, float *a_self, const struct gk_block *b, uint32_t heads)
{
    return GK_RUN(g, (size_t)b->n_dst * heads, k_softmax_fwd, a_edge, a_self, *b, heads);
}

int gk_edge_softmax_bwd(struct gk_ctx *g, float *g_edge, float *g_self, const float *a_edge, const float *a_self,
                        const struct gk_block *b, uint32_t heads)
{
    return GK_RUN(g, (size_t)b->n_dst * heads, k_softmax_bwd, g_edge, g_self, a_edge, a_self, *b, heads);
}

int gk_gat_sum_fwd(struct gk_ctx *g, float *out, const struct gk_block *b, const float *a_edge, const float *a_self,
                   const float *z, uint32_t heads, uint32_t hd)
{
    return GK_RUN(g, (size_t)b->n_dst * heads * hd, k_gat_sum_fwd, out, *b, a_edge, a_self, z, heads, hd);
}

int gk_gat_sum_bwd(struct gk_ctx *g, float *dz, float *g_edge, float *g_self, const struct gk_block *b,
                   const float *a_edge, const float *a_self, const float *z, const float *dout, uint32_t heads,
                   uint32_t hd)
{
    int rc = need_transpose(g, b, __func__);
    if (rc == 0)
        rc =
            GK_RUN(g, ((size_t)b->n_dst + b->n_edges) * heads, k_gat_sum_bwd_g, g_edge, g_self, *b, z, dout, heads, hd);
    if (rc == 0)
        rc = GK_RUN(g, (size_t)b->n_src * heads * hd, k_gat_sum_bwd_dz, dz, *b, a_edge, a_self, dout, heads, hd);
    return rc;
}

int gk_head_mean_fwd(struct gk_ctx *g, float *out, const float *in, uint32_t n, uint32_t heads, uint32_t d)
{
    return GK_RUN(g, (size_t)n * d, k_head_mean_fwd, out, in, n, heads, d, 1.0f / (float)heads);
}

int gk_head_mean_bwd(struct gk_ctx *g, float *din, const float *dout, uint32_t n, uint32_t heads, uint32_t d)
{
    return GK_RUN(g, (size_t)n * heads * d, k_head_mean_bwd, din, dout, n, heads, d, 1.0f / (float)heads);
}
