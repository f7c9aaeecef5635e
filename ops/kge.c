/* kge.c - link-prediction operators (ops/kge.h). */
#include "ops/kge.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "ops/ops.h"

void kge_query_tail(enum kge_model m, float *restrict q, const float *h, const float *r, uint32_t n, uint32_t d)
{
    if (m == KGE_DISTMULT) {
        for (size_t i = 0; i < (size_t)n * d; i++)
            q[i] = h[i] * r[i];
        return;
    }
    uint32_t k = d / 2;
    for (size_t i = 0; i < n; i++) {
        const float *hr = h + i * d, *hi = hr + k, *rr = r + i * d, *ri = rr + k;
        float *qr = q + i * d, *qi = qr + k;
        for (uint32_t j = 0; j < k; j++) {
            qr[j] = hr[j] * rr[j] - hi[j] * ri[j];
            qi[j] = hr[j] * ri[j] + hi[j] * rr[j];
        }
    }
}

void kge_query_head(enum kge_model m, float *restrict p, const float *r, const float *t, uint32_t n, uint32_t d)
{
    if (m == KGE_DISTMULT) {
        kge_query_tail(m, p, r, t, n, d);
        return;
    }
    uint32_t k = d / 2;
    for (size_t i = 0; i < n; i++) {
        const float *rr = r + i * d, *ri = rr + k, *tr = t + i * d, *ti = tr + k;
        float *pr = p + i * d, *pi = pr + k;
        for (uint32_t j = 0; j < k; j++) {
            pr[j] = rr[j] * tr[j] + ri[j] * ti[j];
            pi[j] = rr[j] * ti[j] - ri[j] * tr[j];
        }
    }
}

void kge_query_tail_bwd(enum kge_model m, float *restrict dh, float *restrict dr, const float *dq, const float *h,
                        const float *r, uint32_t n, uint32_t d)
{
    if (m == KGE_DISTMULT) {
        for (size_t i = 0; i < (size_t)n * d; i++) {
            dh[i] += dq[i] * r[i];
            dr[i] += dq[i] * h[i];
        }
        return;
    }
    uint32_t k = d / 2;
    for (size_t i = 0; i < n; i++) {
        const float *hr = h + i * d, *hi = hr + k, *rr = r + i * d, *ri = rr + k, *gr = dq + i * d, *gi = gr + k;
        float *dhr = dh + i * d, *dhi = dhr + k, *drr = dr + i * d, *dri = drr + k;
        for (uint32_t j = 0; j < k; j++) {
            /* qr = hr rr - hi ri, qi = hr ri + hi rr */
            dhr[j] += gr[j] * rr[j] + gi[j] * ri[j];
            dhi[j] += gi[j] * rr[j] - gr[j] * ri[j];
            drr[j] += gr[j] * hr[j] + gi[j] * hi[j];
            dri[j] += gi[j] * hr[j] - gr[j] * hi[j];
        }
    }
}

void kge_query_head_bwd(enum kge_model m, float *restrict dr, float *restrict dt, const float *dp, const float *r,
                        const float *t, uint32_t n, uint32_t d)
{
    if (m == KGE_DISTMULT) {
        kge_query_tail_bwd(m, dr, dt, dp, r, t, n, d);
        return;
    }
    uint32_t k = d / 2;
    for (size_t i = 0; i < n; i++) {
        const float *rr = r + i * d, *ri = rr + k, *tr = t + i * d, *ti = tr + k, *gr = dp + i * d, *gi = gr + k;
        float *drr = dr + i * d, *dri = drr + k, *dtr = dt + i * d, *dti = dtr + k;
        for (uint32_t j = 0; j < k; j++) {
            /* pr = rr tr + ri ti, pi = rr ti - ri tr */
            drr[j] += gr[j] * tr[j] + gi[j] * ti[j];
            dri[j] += gr[j] * ti[j] - gi[j] * tr[j];
            dtr[j] += gr[j] * rr[j] - gi[j] * ri[j];
            dti[j] += gr[j] * ri[j] + gi[j] * rr[j];
        }
    }
}

static inline int sides(const struct kge_batch *b, uint32_t c)
{
    return b->side ? b->side[c] & (KGE_TAIL | KGE_HEAD) : KGE_TAIL | KGE_HEAD;
}

static inline bool any_head(const struct kge_batch *b)
{
    for (uint32_t c = 0; c < kge_chunks(b); c++)
        if (sides(b, c) & KGE_HEAD)
            return true;
    return false;
}

size_t kge_step_scratch(const struct kge_batch *b)
{
    size_t nd = (size_t)b->n * b->d, s = (size_t)b->chunk * b->negs;
    return 4 * nd + 2 * (size_t)b->n + 2 * s;
}

static inline double softplus(double x)
{
    return (x > 0 ? x : 0) + log1p(exp(-fabs(x)));
}

static inline double sigmoid(double x)
{
    return x >= 0 ? 1 / (1 + exp(-x)) : exp(x) / (1 + exp(x));
}

static inline float dot(const float *a, const float *b, uint32_t d)
{
    float s = 0;
    for (uint32_t j = 0; j < d; j++)
        s += a[j] * b[j];
    return s;
}

float kge_step(const struct kge_batch *b, float *dh, float *dr, float *dt, float *dneg, float *scratch,
               uint64_t *terms)
{
    const uint32_t n = b->n, d = b->d, chunks = kge_chunks(b);
    const size_t nd = (size_t)n * d;
    float *q = scratch, *p = q + nd, *dq = p + nd, *dp = dq + nd, *pos = dp + nd, *dpos = pos + n;
    float *S = dpos + n, *dS = S + (size_t)b->chunk * b->negs;
    const bool grads = dh != NULL, head = any_head(b);
    kge_query_tail(b->model, q, b->h, b->r, n, d);
    if (head)
        kge_query_head(b->model, p, b->r, b->t, n, d);
    for (uint32_t i = 0; i < n; i++) {
        pos[i] = dot(q + (size_t)i * d, b->t + (size_t)i * d, d);
        if (!isfinite(pos[i]))
            return NAN;
    }
    /* how many terms the loss averages */
    uint64_t count = b->loss == KGE_LOSS_LOGISTIC ? n : 0;
    for (uint32_t c = 0; c < chunks; c++) {
        uint64_t m = SL_MIN(b->chunk, n - (uint64_t)c * b->chunk);
        int ns = __builtin_popcount((unsigned)sides(b, c));
        count += b->loss == KGE_LOSS_SOFTMAX ? (b->negs ? m * (uint64_t)ns : 0) : m * b->negs * (uint64_t)ns;
    }
    if (terms)
        *terms = count;
    if (grads) {
        ops_zero(dq, nd);
        if (head)
            ops_zero(dp, nd);
        ops_zero(dneg, (size_t)chunks * b->negs * d);
    }
    memset(dpos, 0, n * sizeof *dpos);
    const double inv = count ? 1.0 / (double)count : 0.0;
    double loss = 0;
    if (b->loss == KGE_LOSS_LOGISTIC)
        for (uint32_t i = 0; i < n; i++) {
            loss += softplus(-(double)pos[i]);
            dpos[i] += (float)(-sigmoid(-(double)pos[i]) * inv);
        }
    for (uint32_t c = 0; c < chunks && b->negs; c++) {
        const uint32_t i0 = c * b->chunk, m = (uint32_t)SL_MIN(b->chunk, n - i0), k = b->negs;
        const float *N = b->neg + (size_t)c * k * d;
        float *dN = grads ? dneg + (size_t)c * k * d : NULL;
        for (int s = KGE_TAIL; s <= KGE_HEAD; s <<= 1) {
            if (!(sides(b, c) & s))
                continue;
            const float *Q = (s == KGE_TAIL ? q : p) + (size_t)i0 * d;
            float *dQ = (s == KGE_TAIL ? dq : dp) + (size_t)i0 * d;
            ops_gemm(false, true, m, k, d, 1.0f, Q, d, N, d, 0.0f, S, k);
            for (uint32_t i = 0; i < m; i++) {
                const float *Si = S + (size_t)i * k;
                float *dSi = dS + (size_t)i * k, ps = pos[i0 + i];
                for (uint32_t j = 0; j < k; j++)
                    if (!isfinite(Si[j]))
                        return NAN;
                if (b->loss == KGE_LOSS_SOFTMAX) {
                    /* one exp per score: e_j = exp(s_j - max) into dSi, z
                     * their sum (with the positive's); in float, summed in
                     * order */
                    float mx = ps;
                    for (uint32_t j = 0; j < k; j++)
                        mx = Si[j] > mx ? Si[j] : mx;
                    const float e0 = expf(ps - mx);
                    float z = e0;
                    for (uint32_t j = 0; j < k; j++) {
                        dSi[j] = expf(Si[j] - mx);
                        z += dSi[j];
                    }
                    loss += (double)mx + log((double)z) - ps;
                    const float g = (float)inv / z;
                    dpos[i0 + i] += (float)(((double)e0 / z - 1.0) * inv);
                    for (uint32_t j = 0; j < k; j++)
                        dSi[j] *= g;
                } else if (b->loss == KGE_LOSS_LOGISTIC) {
                    for (uint32_t j = 0; j < k; j++) {
                        loss += softplus(Si[j]);
                        dSi[j] = (float)(sigmoid(Si[j]) * inv);
                    }
                } else {
                    for (uint32_t j = 0; j < k; j++) {
                        double v = (double)b->margin - ps + Si[j];
                        if (v > 0) {
                            loss += v;
                            dpos[i0 + i] -= (float)inv;
                            dSi[j] = (float)inv;
                        } else {
                            dSi[j] = 0;
                        }
                    }
                }
            }
            if (grads) {
                ops_gemm(false, false, m, d, k, 1.0f, dS, k, N, d, 1.0f, dQ, d);
                ops_gemm(true, false, k, d, m, 1.0f, dS, k, Q, d, 1.0f, dN, d);
            }
        }
    }
    if (grads) {
        for (uint32_t i = 0; i < n; i++) {
            const float g = dpos[i], *qi = q + (size_t)i * d, *ti = b->t + (size_t)i * d;
            float *dqi = dq + (size_t)i * d, *dti = dt + (size_t)i * d;
            for (uint32_t j = 0; j < d; j++) {
                dqi[j] += g * ti[j];
                dti[j] = g * qi[j];
            }
        }
        ops_zero(dh, nd);
        ops_zero(dr, nd);
        kge_query_tail_bwd(b->model, dh, dr, dq, b->h, b->r, n, d);
        if (head)
            kge_query_head_bwd(b->model, dr, dt, dp, b->r, b->t, n, d);
    }
    return (float)(loss * inv);
}

/* ---- sparse updates ---------------------------------------------------------------------- */

static int cmp_by_id(const void *a, const void *b, void *arg)
{
    const uint64_t *ids = arg;
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (ids[x] != ids[y])
        return ids[x] < ids[y] ? -1 : 1;
    return (x > y) - (x < y);
}

uint32_t kge_coalesce(const uint64_t *ids, const float *grad, uint32_t k, uint32_t d, uint64_t *uid, float *gsum,
                      uint32_t *order)
{
    for (uint32_t i = 0; i < k; i++)
        order[i] = i;
    qsort_r(order, k, sizeof *order, cmp_by_id, (void *)ids);
    uint32_t u = 0;
    for (uint32_t a = 0; a < k; a++) {
        uint32_t i = order[a];
        const float *g = grad + (size_t)i * d;
        if (u && uid[u - 1] == ids[i]) {
            float *s = gsum + (size_t)(u - 1) * d;
            for (uint32_t j = 0; j < d; j++)
                s[j] += g[j];
        } else {
            uid[u] = ids[i];
            memcpy(gsum + (size_t)u * d, g, d * sizeof *g);
            u++;
        }
    }
    return u;
}

void kge_adagrad(float *restrict w, float *restrict state, const float *restrict g, uint32_t d, float lr, float eps)
{
    for (uint32_t j = 0; j < d; j++) {
        state[j] += g[j] * g[j];
        w[j] -= lr * g[j] / (sqrtf(state[j]) + eps);
    }
}

/* ---- evaluation ---------------------------------------------------------------------------- */

void kge_score_all(float *scores, const float *q, uint32_t nq, const float *emb, uint64_t cand, uint32_t d)
{
    ops_gemm(false, true, nq, (size_t)cand, d, 1.0f, q, d, emb, d, 0.0f, scores, (size_t)cand);
}

double kge_rank(const float *scores, uint64_t cand, uint64_t truth, const uint64_t *skip, size_t nskip)
{
    const float st = scores[truth];
    if (!isfinite(st))
        return (double)cand;
    uint64_t higher = 0, same = 0;
    size_t k = 0;
    for (uint64_t x = 0; x < cand; x++) {
        while (k < nskip && skip[k] < x)
            k++;
        if (x == truth || (k < nskip && skip[k] == x))
            continue;
        higher += scores[x] > st;
        same += scores[x] == st;
    }
    return 1.0 + (double)higher + 0.5 * (double)same;
}
