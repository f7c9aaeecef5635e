/* test_ops.c - the CPU operators (ops/ops.h): every backward against
 * central finite differences of its forward, the GEMM wrapper against a
 * naive loop (all four transpose combinations, strides, beta = 0 over
 * garbage, k = 0), bit for bit across thread counts and pool restarts, half to float
 * over all 65536 halves and the row gather in both formats, edge softmax
 * rows summing to 1 (large logits included), dropout's mask, the loss's
 * value and counts, and Adam and SGD against a double-precision reference.
 *
 * Finite differences. Each check differentiates J = sum_i r_i out_i (r
 * fixed, uniform in [-1, 1); J summed in double) with respect to one input
 * at a time: num = (J(x + h) - J(x - h)) / (the float step actually
 * taken), h = 1e-2, against the backward run with dout = r. The forward
 * is float: each of the ~100 O(1) outputs is off by a few 2^-24 relative,
 * which the division by 2h turns into up to ~1e-5 of noise in num;
 * curvature adds h^2/6 |J'''|, ~1e-5 for the smooth ops (exp, log) and 0
 * for the linear ones. The bound |num - ana| <= 1e-4 + 1e-3 |num| is 4.5x
 * the worst error seen over 2000 seeds (0.22 of it), while a real mistake
 * (an index off, a missing 1/deg or 1/heads, a sign, a transposed weight)
 * is off by O(1) relative. Inputs are drawn so that no step crosses a kink
 * (ReLU at 0, LeakyReLU where el + er = 0). */
#include "t_util.h"

#include <errno.h>
#include <inttypes.h>
#include <float.h>
#include <math.h>
#include <time.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ops/elem.h"
#include "ops/ops.h"

static uint64_t g_seed;
static uint64_t g_rng;

/* uniform in [lo, hi) */
static float urand(float lo, float hi)
{
    double u = (double)(sl_splitmix64(&g_rng) >> 40) * 0x1p-24;
    return (float)(lo + (hi - lo) * u);
}

static uint32_t irand(uint32_t n)
{
    return (uint32_t)(sl_splitmix64(&g_rng) % n);
}

static float *fvec(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof *p);
    assert_non_null(p);
    return p;
}

static float *frand(size_t n, float lo, float hi)
{
    float *p = fvec(n);
    for (size_t i = 0; i < n; i++)
        p[i] = urand(lo, hi);
    return p;
}

static double dotd(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return s;
}

/* ---- finite differences -------------------------------------------------------------------- */

typedef double (*objective)(void *ctx);

struct fd_var {
    const char *name;
    float *x;          /* input perturbed in place */
    size_t n;
    const float *grad; /* the backward's gradient of J */
};

#define FD_H 1e-2f
#define FD_ATOL 1e-4
#define FD_RTOL 1e-3

static double g_worst; /* worst |num - ana| / tolerance seen (reported) */

static void fd_check(const char *op, objective J, void *ctx, const struct fd_var *v, size_t nv)
{
    for (size_t k = 0; k < nv; k++)
        for (size_t i = 0; i < v[k].n; i++) {
            float *x = &v[k].x[i], x0 = *x;
            *x = x0 + FD_H;
            double xp = *x, jp = J(ctx);
            *x = x0 - FD_H;
            double xm = *x, jm = J(ctx);
            *x = x0;
            double num = (jp - jm) / (xp - xm), ana = v[k].grad[i];
            double tol = FD_ATOL + FD_RTOL * fabs(num);
            g_worst = fmax(g_worst, fabs(num - ana) / tol);
            if (!(fabs(num - ana) <= tol))
                fail_msg("%s: d/d%s[%zu]: backward %.6g, finite difference %.6g (seed %#" PRIx64 ")", op,
                         v[k].name, i, ana, num, g_seed);
        }
}

/* ---- a random block -------------------------------------------------------------------------- */

struct tblock {
    struct ops_block b;
    uint32_t *indptr, *src;
};

/* n_dst destinations, n_src sources, in-degrees 0 .. maxdeg (destination
 * 0 has none), sources uniform with repeats. */
static void tblock_make(struct tblock *t, uint32_t n_dst, uint32_t n_src, uint32_t maxdeg)
{
    t->indptr = calloc(n_dst + 1, sizeof *t->indptr);
    assert_non_null(t->indptr);
    for (uint32_t d = 0; d < n_dst; d++)
        t->indptr[d + 1] = t->indptr[d] + (d == 0 ? 0 : irand(maxdeg + 1));
    uint32_t e = t->indptr[n_dst];
    t->src = calloc(e ? e : 1, sizeof *t->src);
    assert_non_null(t->src);
    for (uint32_t j = 0; j < e; j++)
        t->src[j] = irand(n_src);
    t->b = (struct ops_block){.n_dst = n_dst, .n_src = n_src, .indptr = t->indptr, .src = t->src};
}

static void tblock_free(struct tblock *t)
{
    free(t->indptr);
    free(t->src);
}

/* ---- plain arrays --------------------------------------------------------------------------------- */

struct scale_ctx {
    float *x, *y, *r;
    size_t n;
    float alpha;
};

static double scale_J(void *p)
{
    struct scale_ctx *c = p;
    ops_copy(c->y, c->x, c->n);
    ops_scale(c->y, c->n, c->alpha);
    return dotd(c->r, c->y, c->n);
}

/* zero over NaN garbage gives +0.0; copy is exact; scale is one float
 * multiply per element and its own backward; Glorot draws stay inside
 * (-a, a), follow the documented formula, advance the stream by one output
 * each (two calls of n/2 = one of n) and depend on nothing else. */
static void test_plain_arrays(void **state)
{
    enum { N = 37 };
    float *x = frand(N, -3, 3), *y = fvec(N);
    for (size_t i = 0; i < N; i++)
        y[i] = NAN;
    ops_zero(y, N);
    for (size_t i = 0; i < N; i++) {
        uint32_t bits;
        memcpy(&bits, &y[i], sizeof bits);
        assert_int_equal(bits, 0);
    }
    ops_zero(NULL, 0);
    ops_copy(y, x, N);
    assert_memory_equal(y, x, N * sizeof *x);
    float alpha = urand(0.1f, 2.0f);
    ops_scale(y, N, alpha);
    for (size_t i = 0; i < N; i++) {
        volatile float want = x[i] * alpha;
        assert_true(y[i] == want);
    }
    struct scale_ctx c = {.x = x, .y = y, .r = frand(N, -1, 1), .n = N, .alpha = alpha};
    float *g = fvec(N);
    ops_copy(g, c.r, N);
    ops_scale(g, N, alpha); /* dx = alpha dy */
    fd_check("scale", scale_J, &c, &(struct fd_var){"x", x, N, g}, 1);

    enum { M = 1000 };
    float *p = fvec(M), *q = fvec(M);
    uint64_t s1 = g_seed, s2 = g_seed, s3 = g_seed;
    ops_glorot_uniform(p, M, 30.0, 20.0, &s1);
    ops_glorot_uniform(q, M / 2, 30.0, 20.0, &s2);
    ops_glorot_uniform(q + M / 2, M - M / 2, 30.0, 20.0, &s2);
    assert_memory_equal(p, q, M * sizeof *p);
    assert_true(s1 == s2);
    double a = sqrt(6.0 / 50.0), mean = 0;
    for (size_t i = 0; i < M; i++) {
        double u = (double)(sl_splitmix64(&s3) >> 40) * 0x1p-24;
        assert_true(p[i] == (float)((2.0 * u - 1.0) * a));
        assert_true(fabs(p[i]) <= (float)a); /* (float)a: the draw is rounded to float */
        mean += p[i];
    }
    assert_true(s3 == s1);
    assert_true(fabs(mean / M) < 0.05); /* sd of the mean: a / sqrt(3 M) = 0.006 */
    free(x), free(y), free(c.r), free(g), free(p), free(q);
}

/* ---- GEMM ------------------------------------------------------------------------------------- */

static void test_gemm_vs_naive(void **state)
{
    for (int iter = 0; iter < 64; iter++) {
        bool ta = iter & 1, tb = iter & 2, zero_beta = iter & 4;
        size_t m = 1 + irand(40), n = 1 + irand(40), k = iter % 16 == 8 ? 0 : 1 + irand(70);
        size_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
        size_t lda = ac + irand(3), ldb = bc + irand(3), ldc = n + irand(3);
        float *a = frand(ar * lda + 1, -1, 1), *b = frand(br * ldb + 1, -1, 1), *c = frand(m * ldc, -1, 1);
        float *c0 = fvec(m * ldc);
        if (zero_beta) /* beta = 0 must ignore C, NaNs included (scratch buffers start as garbage) */
            for (size_t i = 0; i < m * ldc; i++)
                c[i] = NAN;
        memcpy(c0, c, m * ldc * sizeof *c);
        float alpha = 0.75f, beta = zero_beta ? 0.0f : -1.25f;
        ops_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < ldc; j++) {
                if (j >= n) { /* the padding between rows is not touched */
                    assert_memory_equal(&c[i * ldc + j], &c0[i * ldc + j], sizeof *c);
                    continue;
                }
                double s = 0, mag = 0;
                for (size_t p = 0; p < k; p++) {
                    double x = ta ? a[p * lda + i] : a[i * lda + p];
                    double y = tb ? b[j * ldb + p] : b[p * ldb + j];
                    s += x * y;
                    mag += fabs(x * y);
                }
                double cterm = zero_beta ? 0.0 : beta * (double)c0[i * ldc + j];
                double ref = alpha * s + cterm;
                /* float dot product error bound: gamma_k ~ (k + 2) 2^-24 times the magnitudes */
                double tol = (double)(k + 4) * 0x1p-23 * (fabs(alpha) * mag + fabs(cterm));
                if (!(fabs(c[i * ldc + j] - ref) <= tol))
                    fail_msg("gemm ta %d tb %d m %zu n %zu k %zu: C[%zu,%zu] = %.8g, expected %.8g", ta, tb, m, n, k,
                             i, j, c[i * ldc + j], ref);
            }
        free(a);
        free(b);
        free(c);
        free(c0);
    }
}

/* A product with one tile and a long reduction (the weight gradients) is
 * cut along k into pieces fixed by the shape: the same bits for 1, 2 and
 * 3 threads, with beta 0 and 1, and within float rounding of a double
 * reference. */
static void test_gemm_ksplit_threads_bitwise(void **state)
{
    (void)state;
    const size_t m = 100, n = 70, k = 9001; /* 4 pieces of 2048 and the rest */
    float *a = frand(k * m, -1, 1), *b = frand(k * n, -1, 1), *c[3], *c0 = frand(m * n, -1, 1);
    int before = ops_threads();
    for (int beta1 = 0; beta1 < 2; beta1++) {
        for (int t = 0; t < 3; t++) {
            c[t] = fvec(m * n);
            memcpy(c[t], c0, m * n * sizeof *c0);
            assert_int_equal(ops_set_threads(t + 1), 0);
            ops_gemm(true, false, m, n, k, 1.0f, a, m, b, n, beta1 ? 1.0f : 0.0f, c[t], n);
        }
        assert_memory_equal(c[0], c[1], m * n * sizeof *c[0]);
        assert_memory_equal(c[0], c[2], m * n * sizeof *c[0]);
        for (size_t i = 0; i < m; i++)
            for (size_t j = 0; j < n; j++) {
                double s = 0, mag = 0;
                for (size_t p = 0; p < k; p++) {
                    s += (double)a[p * m + i] * b[p * n + j];
                    mag += fabs((double)a[p * m + i] * b[p * n + j]);
                }
                double ref = s + (beta1 ? c0[i * n + j] : 0.0);
                double tol = (double)(k + 4) * 0x1p-23 * (mag + fabs(c0[i * n + j]));
                if (!(fabs(c[0][i * n + j] - ref) <= tol))
                    fail_msg("k-split C[%zu,%zu] = %.8g, expected %.8g", i, j, c[0][i * n + j], ref);
            }
        for (int t = 0; t < 3; t++)
            free(c[t]);
    }
    assert_int_equal(ops_set_threads(before), 0);
    free(a), free(b), free(c0);
}

/* The element-wise and per-row operators run on the pool in pieces fixed
 * by the sizes: the same bits for 1, 2 and 3 threads (sizes well past a
 * piece, and not a multiple of one: odd n for dropout's pairs). */
static void test_elementwise_threads_bitwise(void **state)
{
    (void)state;
    const size_t n = 3 * 32768 + 777;
    const uint32_t rows = 5000, dim = 33, nsrc = 9000;
    float *base = frand(n, -2, 2), *y = frand(n, -1, 1), *out[3][6];
    uint8_t *mask[3];
    uint32_t *indptr = calloc(rows + 1, sizeof *indptr), *src = calloc((size_t)rows * 7, sizeof *src);
    uint32_t *alias = calloc(nsrc, sizeof *alias);
    float *h = frand((size_t)nsrc * dim, -1, 1), *bias = frand(dim, -1, 1);
    uint64_t st = 77;
    for (uint32_t d = 0; d < rows; d++) {
        indptr[d + 1] = indptr[d] + d % 8; /* 0..7 sources */
        for (uint32_t j = indptr[d]; j < indptr[d + 1]; j++)
            src[j] = (uint32_t)(sl_splitmix64(&st) % nsrc);
    }
    for (uint32_t i = 0; i < nsrc; i++)
        alias[i] = nsrc - 1 - i;
    unsigned char *rowsbuf = calloc(nsrc, 64 * sizeof(float));
    for (uint32_t i = 0; i < nsrc; i++)
        memcpy(rowsbuf + (size_t)alias[i] * 64 * sizeof(float), h + (size_t)i * dim, dim * sizeof(float));
    struct ops_block blk = {.n_dst = rows, .n_src = nsrc, .indptr = indptr, .src = src};
    int before = ops_threads();
    for (int t = 0; t < 3; t++) {
        assert_int_equal(ops_set_threads(t + 1), 0);
        for (int o = 0; o < 4; o++) {
            out[t][o] = fvec(n);
            memcpy(out[t][o], base, n * sizeof *base);
        }
        mask[t] = calloc(n, 1);
        ops_relu_fwd(out[t][0], n);
        ops_relu_bwd(out[t][1], y, n);
        ops_dropout_fwd(out[t][2], mask[t], n, 0.4f, 1234);
        ops_dropout_bwd(out[t][3], mask[t], n, 0.4f);
        out[t][4] = fvec((size_t)rows * dim);
        out[t][5] = fvec((size_t)rows * dim);
        ops_agg_mean_fwd(out[t][4], &blk, h, dim);
        ops_bias_fwd(out[t][4], bias, rows, dim);
        ops_agg_rows_fwd(out[t][5], &blk, rowsbuf, 64 * sizeof(float), alias, dim, true);
        ops_bias_fwd(out[t][5], bias, rows, dim);
    }
    for (int t = 1; t < 3; t++) {
        for (int o = 0; o < 4; o++)
            if (memcmp(out[0][o], out[t][o], n * sizeof(float)))
                fail_msg("element-wise operator %d differs between 1 and %d threads", o, t + 1);
        assert_memory_equal(mask[0], mask[t], n);
        assert_memory_equal(out[0][4], out[t][4], (size_t)rows * dim * sizeof(float));
        assert_memory_equal(out[0][5], out[t][5], (size_t)rows * dim * sizeof(float));
    }
    /* the rows read in place give the gathered input's bits */
    assert_memory_equal(out[0][4], out[0][5], (size_t)rows * dim * sizeof(float));
    assert_int_equal(ops_set_threads(before), 0);
    for (int t = 0; t < 3; t++) {
        for (int o = 0; o < 6; o++)
            free(out[t][o]);
        free(mask[t]);
    }
    free(base), free(y), free(indptr), free(src), free(alias), free(h), free(bias), free(rowsbuf);
}

/* The operators that run on the pool over rows or elements but used to
 * be one pass on one thread (the loss, Adam, the scatter of the sum's
 * and mean's backward) give the bits of that pass, written out here, for
 * 1, 2 and 3 threads (and the bias gradient and zeroing, beside them):
 * the loss and its gradient over rows of which some are unlabelled, Adam
 * over several pieces, the scatter with repeated sources and
 * destinations without any, added to what dh held. */
static void test_pooled_vs_one_pass_bitwise(void **state)
{
    (void)state;
    const uint32_t n = 1000, classes = 16, rows = 7001, dim = 131;
    const size_t np = 3 * 8192 + 555, nz = 3 * ((size_t)1 << 17) + 99;
    float *logits = frand((size_t)n * classes, -6, 6);
    int32_t *labels = calloc(n, sizeof *labels);
    for (uint32_t i = 0; i < n; i++)
        labels[i] = i % 7 == 3 ? -1 : i % 11 == 5 ? (int32_t)classes + 2 : (int32_t)irand(classes);
    /* the loss as one pass over the rows */
    uint32_t nl = 0, ok = 0;
    for (uint32_t i = 0; i < n; i++)
        nl += labels[i] >= 0 && (uint32_t)labels[i] < classes;
    float *rg = fvec((size_t)n * classes);
    double total = 0.0;
    for (uint32_t i = 0; i < n; i++) {
        const float *x = logits + (size_t)i * classes;
        if (labels[i] < 0 || (uint32_t)labels[i] >= classes) {
            memset(rg + (size_t)i * classes, 0, classes * sizeof *rg);
            continue;
        }
        uint32_t arg;
        double lse = elem_ce_lse(x, classes, &arg);
        ok += arg == (uint32_t)labels[i];
        total += lse - (double)x[labels[i]];
        for (uint32_t c = 0; c < classes; c++)
            rg[(size_t)i * classes + c] = elem_ce_grad(x[c], lse, c == (uint32_t)labels[i], nl);
    }
    float rloss = (float)(total / nl);
    /* the bias gradient as one pass */
    float *dy = frand((size_t)rows * dim, -1, 1), *rdb = fvec(dim);
    for (uint32_t c = 0; c < dim; c++)
        rdb[c] = 0.0f;
    for (uint32_t i = 0; i < rows; i++)
        for (uint32_t c = 0; c < dim; c++)
            rdb[c] += dy[(size_t)i * dim + c];
    /* Adam as one pass, two steps */
    float *p0 = frand(np, -1, 1), *g = frand(np, -1, 1), *rp = fvec(np), *rm = fvec(np), *rv = fvec(np);
    memcpy(rp, p0, np * sizeof *rp);
    memset(rm, 0, np * sizeof *rm);
    memset(rv, 0, np * sizeof *rv);
    for (uint64_t t = 1; t <= 2; t++) {
        struct elem_adam c = elem_adam_prep(0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, false, t);
        for (size_t i = 0; i < np; i++)
            elem_adam_update(&rp[i], &rm[i], &rv[i], g[i], &c);
    }
    /* the scatters as one pass */
    struct tblock tb;
    tblock_make(&tb, 3000, 9001, 9);
    const uint32_t sd = 67;
    float *dout = frand((size_t)3000 * sd, -1, 1), *dh0 = frand((size_t)9001 * sd, -1, 1);
    float *rsum = fvec((size_t)9001 * sd), *rmean = fvec((size_t)9001 * sd);
    memcpy(rsum, dh0, (size_t)9001 * sd * sizeof *rsum);
    memcpy(rmean, dh0, (size_t)9001 * sd * sizeof *rmean);
    for (uint32_t d = 0; d < 3000; d++) {
        uint32_t j0 = tb.indptr[d], j1 = tb.indptr[d + 1];
        for (uint32_t j = j0; j < j1; j++)
            for (uint32_t c = 0; c < sd; c++) {
                float gv = dout[(size_t)d * sd + c];
                rsum[(size_t)tb.src[j] * sd + c] += gv;
                rmean[(size_t)tb.src[j] * sd + c] += 1.0f / (float)(j1 - j0) * gv;
            }
    }
    int before = ops_threads();
    for (int t = 1; t <= 3; t++) {
        assert_int_equal(ops_set_threads(t), 0);
        float *dh = fvec((size_t)9001 * sd);
        memcpy(dh, dh0, (size_t)9001 * sd * sizeof *dh);
        ops_agg_sum_bwd(dh, &tb.b, dout, sd);
        if (memcmp(dh, rsum, (size_t)9001 * sd * sizeof *dh))
            fail_msg("ops_agg_sum_bwd differs from one pass with %d threads", t);
        memcpy(dh, dh0, (size_t)9001 * sd * sizeof *dh);
        ops_agg_mean_bwd(dh, &tb.b, dout, sd);
        if (memcmp(dh, rmean, (size_t)9001 * sd * sizeof *dh))
            fail_msg("ops_agg_mean_bwd differs from one pass with %d threads", t);
        free(dh);
        float *dl = frand((size_t)n * classes, -1, 1);
        uint32_t l2 = 0, ok2 = 0;
        float loss = ops_cross_entropy(logits, labels, n, classes, dl, &l2, &ok2);
        if (memcmp(&loss, &rloss, sizeof loss) || l2 != nl || ok2 != ok ||
            memcmp(dl, rg, (size_t)n * classes * sizeof *dl))
            fail_msg("ops_cross_entropy differs from one pass with %d threads", t);
        float *db = frand(dim, -1, 1);
        ops_bias_bwd(db, dy, rows, dim);
        if (memcmp(db, rdb, dim * sizeof *db))
            fail_msg("ops_bias_bwd differs from one pass with %d threads", t);
        float *p = fvec(np), *m = fvec(np), *v = fvec(np);
        memcpy(p, p0, np * sizeof *p);
        ops_zero(m, np);
        ops_zero(v, np);
        for (uint64_t s = 1; s <= 2; s++)
            ops_adam(p, g, m, v, np, 0.01f, 0.9f, 0.999f, 1e-8f, 0.0f, false, s);
        if (memcmp(p, rp, np * sizeof *p) || memcmp(m, rm, np * sizeof *m) || memcmp(v, rv, np * sizeof *v))
            fail_msg("ops_adam differs from one pass with %d threads", t);
        float *z = frand(nz, -1, 1);
        ops_zero(z, nz);
        for (size_t i = 0; i < nz; i++)
            if (z[i] != 0.0f || signbit(z[i]))
                fail_msg("ops_zero left element %zu at %g with %d threads", i, (double)z[i], t);
        free(dl), free(db), free(p), free(m), free(v), free(z);
    }
    assert_int_equal(ops_set_threads(before), 0);
    free(logits), free(labels), free(rg), free(dy), free(rdb), free(p0), free(g), free(rp), free(rm), free(rv);
    free(dout), free(dh0), free(rsum), free(rmean);
    tblock_free(&tb);
}

/* The fused GraphSAGE forward (ops_sage_fwd) against the steps it stands
 * for, and the paired products and the fused dropout + ReLU backward
 * against their single calls: the same bits, for 1, 2 and 3 threads; on
 * sizes with a partial last tile of rows, more than one tile of columns,
 * odd widths, and (the weight products) a split reduction. */
static void test_fused_vs_steps_bitwise(void **state)
{
    (void)state;
    const uint32_t nd = 700, ns = 1500, in = 37;
    struct tblock tb;
    tblock_make(&tb, nd, ns, 12);
    const size_t stride = 48 * sizeof(float);
    float *h = frand((size_t)ns * in, -1, 1);
    uint32_t *alias = calloc(ns, sizeof *alias);
    unsigned char *rows = calloc(ns, stride);
    assert_non_null(alias);
    assert_non_null(rows);
    for (uint32_t i = 0; i < ns; i++) {
        alias[i] = (i * 7u + 3u) % ns; /* a permutation: 7 and 1500 are coprime */
        memcpy(rows + (size_t)alias[i] * stride, h + (size_t)i * in, in * sizeof(float));
    }
    int before = ops_threads();
    const uint32_t outs[2] = {33, 300};
    for (int oi = 0; oi < 2; oi++) {
        uint32_t out = outs[oi];
        float *ws = frand((size_t)out * in, -0.5f, 0.5f), *wn = frand((size_t)out * in, -0.5f, 0.5f);
        float *bias = frand(out, -0.5f, 0.5f);
        size_t ny = (size_t)nd * out, na = (size_t)nd * in;
        for (int v = 0; v < 8; v++) { /* bit 0: mean (else sum), bit 1: from the rows (else h), bit 2: ReLU + dropout */
            bool mean = v & 1, from_rows = v & 2, act = v & 4;
            float *ry = fvec(ny), *ra = fvec(na);
            uint8_t *rm = calloc(ny, 1);
            assert_int_equal(ops_set_threads(1), 0);
            if (from_rows)
                ops_agg_rows_fwd(ra, &tb.b, rows, stride, alias, in, mean);
            else if (mean)
                ops_agg_mean_fwd(ra, &tb.b, h, in);
            else
                ops_agg_sum_fwd(ra, &tb.b, h, in);
            ops_linear_fwd(ry, h, ws, nd, in, out, false);
            ops_linear_fwd(ry, ra, wn, nd, in, out, true);
            ops_bias_fwd(ry, bias, nd, out);
            if (act) {
                ops_relu_fwd(ry, ny);
                ops_dropout_fwd(ry, rm, ny, 0.3f, 99 + (uint64_t)v);
            }
            for (int t = 1; t <= 3; t++) {
                assert_int_equal(ops_set_threads(t), 0);
                float *y = fvec(ny), *a = fvec(na);
                uint8_t *mk = calloc(ny, 1);
                struct ops_sage_args sa = {.b = &tb.b, .x = h, .w_self = ws, .w_neigh = wn, .bias = bias, .in = in,
                                           .out = out, .mean = mean, .relu = act, .mask = act ? mk : NULL,
                                           .p = 0.3f, .seed = 99 + (uint64_t)v, .agg = a, .y = y};
                if (from_rows) {
                    sa.rows = rows;
                    sa.stride = stride;
                    sa.alias = alias;
                } else {
                    sa.h = h;
                }
                ops_sage_fwd(&sa);
                if (memcmp(a, ra, na * sizeof *a) || memcmp(y, ry, ny * sizeof *y) || memcmp(mk, rm, ny))
                    fail_msg("ops_sage_fwd (out %u, variant %d) differs from its steps with %d threads", out, v, t);
                if (from_rows) { /* again, gathering the destinations' own rows itself (xg) */
                    float *xg = fvec(na);
                    for (size_t i = 0; i < na; i++)
                        xg[i] = NAN;
                    memset(y, 0, ny * sizeof *y);
                    memset(a, 0, na * sizeof *a);
                    memset(mk, 0, ny);
                    sa.x = sa.xg = xg;
                    ops_sage_fwd(&sa);
                    if (memcmp(xg, h, na * sizeof *xg) || memcmp(a, ra, na * sizeof *a) ||
                        memcmp(y, ry, ny * sizeof *y) || memcmp(mk, rm, ny))
                        fail_msg("ops_sage_fwd with xg (out %u, variant %d) differs from its steps with %d threads",
                                 out, v, t);
                    free(xg);
                }
                free(y), free(a), free(mk);
            }
            free(ry), free(ra), free(rm);
        }
        free(ws), free(wn), free(bias);
    }
    tblock_free(&tb);
    free(h), free(alias), free(rows);

    /* the paired products: k = 9001 rows split for the weight gradients */
    const uint32_t n = 9001, pin = 70, pout = 100;
    float *dy = frand((size_t)n * pout, -1, 1), *x1 = frand((size_t)n * pin, -1, 1);
    float *x2 = frand((size_t)n * pin, -1, 1);
    float *w1 = frand((size_t)pout * pin, -1, 1), *w2 = frand((size_t)pout * pin, -1, 1);
    size_t nw = (size_t)pout * pin, nx = (size_t)n * pin;
    float *rw1 = fvec(nw), *rw2 = fvec(nw), *rx1 = fvec(nx), *rx2 = fvec(nx);
    assert_int_equal(ops_set_threads(1), 0);
    ops_linear_bwd_w(rw1, dy, x1, n, pin, pout, false);
    ops_linear_bwd_w(rw2, dy, x2, n, pin, pout, false);
    ops_linear_bwd_x(rx1, dy, w1, n, pin, pout, false);
    ops_linear_bwd_x(rx2, dy, w2, n, pin, pout, false);
    for (int t = 1; t <= 3; t++) {
        assert_int_equal(ops_set_threads(t), 0);
        float *a1 = fvec(nw), *a2 = fvec(nw), *b1 = fvec(nx), *b2 = fvec(nx);
        ops_linear_bwd_w2(a1, a2, dy, x1, x2, n, pin, pout);
        ops_linear_bwd_x2(b1, b2, dy, w1, w2, n, pin, pout);
        assert_memory_equal(a1, rw1, nw * sizeof *a1);
        assert_memory_equal(a2, rw2, nw * sizeof *a2);
        assert_memory_equal(b1, rx1, nx * sizeof *b1);
        assert_memory_equal(b2, rx2, nx * sizeof *b2);
        free(a1), free(a2), free(b1), free(b2);
    }
    free(dy), free(x1), free(x2), free(w1), free(w2), free(rw1), free(rw2), free(rx1), free(rx2);

    /* dropout's and ReLU's backward in one pass, with and without a mask */
    const size_t ne = 3 * 32768 + 1001;
    float *g0 = frand(ne, -2, 2), *yv = frand(ne, -1, 1), *mx = frand(ne, -1, 1);
    uint8_t *mask = calloc(ne, 1);
    assert_int_equal(ops_set_threads(1), 0);
    ops_dropout_fwd(mx, mask, ne, 0.5f, 5);
    for (int with = 0; with < 2; with++) {
        float *r = fvec(ne);
        memcpy(r, g0, ne * sizeof *r);
        assert_int_equal(ops_set_threads(1), 0);
        if (with)
            ops_dropout_bwd(r, mask, ne, 0.5f);
        ops_relu_bwd(r, yv, ne);
        for (int t = 1; t <= 3; t++) {
            assert_int_equal(ops_set_threads(t), 0);
            float *g = fvec(ne);
            memcpy(g, g0, ne * sizeof *g);
            ops_dropout_relu_bwd(g, with ? mask : NULL, yv, ne, 0.5f);
            assert_memory_equal(g, r, ne * sizeof *g);
            free(g);
        }
        free(r);
    }
    free(g0), free(yv), free(mx), free(mask);
    assert_int_equal(ops_set_threads(before), 0);
}

/* OpenBLAS splits the output between threads, never a dot product: the
 * same bits with 1 and 2 threads, on products big enough to be split. */
static void test_gemm_threads_bitwise(void **state)
{
    const size_t m = 700, n = 300, k = 257;
    float *a = frand(m * k, -1, 1), *b = frand(k * n, -1, 1), *c1 = fvec(m * n), *c2 = fvec(m * n);
    int before = ops_threads();
    for (int t = 0; t < 4; t++) {
        bool ta = t & 1, tb = t & 2;
        assert_int_equal(ops_set_threads(1), 0);
        assert_int_equal(ops_threads(), 1);
        ops_gemm(ta, tb, m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c1, n);
        assert_int_equal(ops_set_threads(2), 0);
        ops_gemm(ta, tb, m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c2, n);
        assert_memory_equal(c1, c2, m * n * sizeof *c1);
    }
    /* a product right after the pool (re)starts: workers created while no
     * job runs must take the next one (a lost wake-up hangs here) */
    for (int i = 0; i < 300; i++) {
        assert_int_equal(ops_set_threads(1 + i % 2), 0);
        assert_int_equal(ops_set_threads(2 + i % 3), 0);
        ops_gemm(false, false, 600, 5, 7, 1.0f, a, k, b, n, 0.0f, c2, 5);
        ops_gemm(false, false, 600, 5, 7, 1.0f, a, k, b, n, 0.0f, c1, 5);
        assert_memory_equal(c1, c2, 600 * 5 * sizeof *c1);
    }
    assert_int_equal(ops_set_threads(before), 0);
    free(a);
    free(b);
    free(c1);
    free(c2);
}

/* ---- dense layers ------------------------------------------------------------------------------- */

struct lin_ctx {
    uint32_t n, in, out;
    float *x, *w, *b, *y, *r;
};

static double lin_J(void *p)
{
    struct lin_ctx *c = p;
    ops_linear_fwd(c->y, c->x, c->w, c->n, c->in, c->out, false);
    ops_bias_fwd(c->y, c->b, c->n, c->out);
    return dotd(c->y, c->r, (size_t)c->n * c->out);
}

static void test_linear_bias_grad(void **state)
{
    struct lin_ctx c = {.n = 6, .in = 5, .out = 4};
    c.x = frand(c.n * c.in, -1, 1);
    c.w = frand(c.out * c.in, -1, 1);
    c.b = frand(c.out, -1, 1);
    c.y = fvec(c.n * c.out);
    c.r = frand(c.n * c.out, -1, 1);
    float *dx = frand(c.n * c.in, -1, 1), *dw = frand(c.out * c.in, -1, 1), *db = frand(c.out, -1, 1);
    float *dx0 = fvec(c.n * c.in), *dw0 = fvec(c.out * c.in);
    memcpy(dx0, dx, c.n * c.in * sizeof *dx);
    memcpy(dw0, dw, c.out * c.in * sizeof *dw);
    /* acc adds to what is there */
    ops_linear_bwd_x(dx, c.r, c.w, c.n, c.in, c.out, true);
    ops_linear_bwd_w(dw, c.r, c.x, c.n, c.in, c.out, true);
    float *gx = fvec(c.n * c.in), *gw = fvec(c.out * c.in);
    ops_linear_bwd_x(gx, c.r, c.w, c.n, c.in, c.out, false);
    ops_linear_bwd_w(gw, c.r, c.x, c.n, c.in, c.out, false);
    ops_bias_bwd(db, c.r, c.n, c.out);
    for (size_t i = 0; i < c.n * c.in; i++)
        assert_float_equal(dx[i], dx0[i] + gx[i], 1e-5);
    for (size_t i = 0; i < c.out * c.in; i++)
        assert_float_equal(dw[i], dw0[i] + gw[i], 1e-5);
    struct fd_var v[] = {{"x", c.x, c.n * c.in, gx}, {"w", c.w, c.out * c.in, gw}, {"b", c.b, c.out, db}};
    fd_check("linear+bias", lin_J, &c, v, SL_ARRAY_LEN(v));
    /* forward with acc adds too */
    float *y1 = fvec(c.n * c.out);
    ops_linear_fwd(c.y, c.x, c.w, c.n, c.in, c.out, false);
    for (size_t i = 0; i < c.n * c.out; i++)
        y1[i] = c.r[i];
    ops_linear_fwd(y1, c.x, c.w, c.n, c.in, c.out, true);
    for (size_t i = 0; i < c.n * c.out; i++)
        assert_float_equal(y1[i], c.r[i] + c.y[i], 1e-5);
    free(c.x), free(c.w), free(c.b), free(c.y), free(c.r), free(dx), free(dw), free(db), free(dx0), free(dw0);
    free(gx), free(gw), free(y1);
}

struct ew_ctx { /* element-wise ops */
    size_t n;
    float *x, *y, *r;
    uint8_t *mask;
    float p;
    uint64_t seed;
};

static double relu_J(void *p)
{
    struct ew_ctx *c = p;
    memcpy(c->y, c->x, c->n * sizeof *c->y);
    ops_relu_fwd(c->y, c->n);
    return dotd(c->y, c->r, c->n);
}

static double elu_J(void *p)
{
    struct ew_ctx *c = p;
    memcpy(c->y, c->x, c->n * sizeof *c->y);
    ops_elu_fwd(c->y, c->n);
    return dotd(c->y, c->r, c->n);
}

static double dropout_J(void *p)
{
    struct ew_ctx *c = p;
    memcpy(c->y, c->x, c->n * sizeof *c->y);
    ops_dropout_fwd(c->y, c->mask, c->n, c->p, c->seed);
    return dotd(c->y, c->r, c->n);
}

static void test_relu_dropout_grad(void **state)
{
    struct ew_ctx c = {.n = 101, .p = 0.3f, .seed = g_seed};
    c.x = fvec(c.n);
    for (size_t i = 0; i < c.n; i++) /* away from the kink: |x| >= 0.1 > h */
        c.x[i] = (irand(2) ? 1 : -1) * urand(0.1f, 1.0f);
    c.y = fvec(c.n);
    c.r = frand(c.n, -1, 1);
    c.mask = malloc(c.n);
    float *g = fvec(c.n);
    relu_J(&c);
    memcpy(g, c.r, c.n * sizeof *g);
    ops_relu_bwd(g, c.y, c.n);
    fd_check("relu", relu_J, &c, &(struct fd_var){"x", c.x, c.n, g}, 1);
    elu_J(&c);
    memcpy(g, c.r, c.n * sizeof *g);
    ops_elu_bwd(g, c.y, c.n);
    fd_check("elu", elu_J, &c, &(struct fd_var){"x", c.x, c.n, g}, 1);
    float e[4] = {2.0f, 0.0f, -1.0f, -30.0f};
    ops_elu_fwd(e, 4);
    assert_true(e[0] == 2.0f && e[1] == 0.0f);
    assert_float_equal(e[2], expm1(-1.0), 1e-6);
    assert_float_equal(e[3], -1.0, 1e-6);
    dropout_J(&c);
    memcpy(g, c.r, c.n * sizeof *g);
    ops_dropout_bwd(g, c.mask, c.n, c.p);
    fd_check("dropout", dropout_J, &c, &(struct fd_var){"x", c.x, c.n, g}, 1);
    free(c.x), free(c.y), free(c.r), free(c.mask), free(g);
}

static void test_dropout_mask(void **state)
{
    const size_t n = 200001; /* odd: the last element uses half an output */
    float *x = fvec(n), *y = fvec(n);
    uint8_t *m1 = malloc(n), *m2 = malloc(n);
    assert_true(m1 && m2);
    for (size_t i = 0; i < n; i++)
        x[i] = urand(0.5f, 1.5f);
    const float ps[] = {0.0f, 0.1f, 0.5f, 0.95f};
    for (size_t t = 0; t < SL_ARRAY_LEN(ps); t++) {
        float p = ps[t];
        memcpy(y, x, n * sizeof *y);
        ops_dropout_fwd(y, m1, n, p, g_seed + t);
        size_t kept = 0;
        for (size_t i = 0; i < n; i++) {
            kept += m1[i];
            assert_true(m1[i] <= 1);
            if (m1[i])
                assert_true(y[i] == x[i] * (1.0f / (1.0f - p)));
            else
                assert_true(y[i] == 0.0f);
        }
        /* kept ~ Binomial(n, 1 - p): within 6 standard deviations */
        double mean = n * (1.0 - p), sd = sqrt(n * p * (1.0 - p));
        if (fabs((double)kept - mean) > 6 * sd + 1e-9)
            fail_msg("p = %g: kept %zu of %zu, expected %.0f +- %.0f", p, kept, n, mean, 6 * sd);
        /* the same seed, the same mask; another seed, another (unless p = 0) */
        memcpy(y, x, n * sizeof *y);
        ops_dropout_fwd(y, m2, n, p, g_seed + t);
        assert_memory_equal(m1, m2, n);
        ops_dropout_fwd(y, m2, n, p, g_seed + t + 100);
        assert_true((memcmp(m1, m2, n) != 0) == (p > 0.0f));
    }
    /* the documented stream: element 2j from the low half of output j */
    uint64_t st = 12345;
    uint64_t r0 = sl_splitmix64(&st);
    memcpy(y, x, 2 * sizeof *y);
    ops_dropout_fwd(y, m1, 2, 0.5f, 12345);
    assert_int_equal(m1[0], (r0 & 0xffffffffu) >= 0x80000000u);
    assert_int_equal(m1[1], (r0 >> 32) >= 0x80000000u);
    free(x), free(y), free(m1), free(m2);
}

/* ---- feature rows ---------------------------------------------------------------------------------- */

static void test_f16_all_halves(void **state)
{
    uint16_t *h = malloc(65536 * sizeof *h);
    float *f = fvec(65536);
    assert_non_null(h);
    for (uint32_t i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    ops_f16_to_f32(f, h, 65536);
    for (uint32_t i = 0; i < 65536; i++) {
        float want = half_to_f32((uint16_t)i);
        if (memcmp(&f[i], &want, sizeof want) != 0)
            fail_msg("half %#06x: %a, expected %a", i, (double)f[i], (double)want);
    }
    /* a few by hand: 1, -2, the largest half, the smallest subnormal, -0 */
    const struct {
        uint16_t h;
        float f;
    } hand[] = {{0x3c00, 1.0f}, {0xc000, -2.0f}, {0x7bff, 65504.0f}, {0x0001, 0x1p-24f}, {0x8000, -0.0f}};
    for (size_t i = 0; i < SL_ARRAY_LEN(hand); i++) {
        assert_true(f[hand[i].h] == hand[i].f);
        assert_int_equal(signbit(f[hand[i].h]) != 0, signbit(hand[i].f) != 0);
    }
    assert_true(isinf(f[0x7c00]) && f[0x7c00] > 0 && isinf(f[0xfc00]) && f[0xfc00] < 0 && isnan(f[0x7e00]));
    free(h);
    free(f);
}

/* The same rows stored as f16 and as f32 (the f32 copy holds the halves'
 * exact values) gather to the same bits, through a random alias with
 * repeats and padded strides. */
static void test_gather_f16_vs_f32(void **state)
{
    const uint32_t rows = 37, dim = 13, n = 60;
    const size_t s16 = 32, s32 = 64; /* bytes per row: 26 and 52 used */
    unsigned char *b16 = aligned_alloc(64, sl_round_up(rows * s16, 64)), *b32 = aligned_alloc(64, rows * s32);
    assert_true(b16 && b32);
    memset(b16, 0xa5, rows * s16);
    memset(b32, 0xa5, rows * s32);
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < dim; c++) {
            float v = urand(-3, 3) * (r == 5 ? 1e-6f : 1.0f); /* row 5: subnormal halves */
            uint16_t h = half_from_f32(v);
            float back = half_to_f32(h);
            memcpy(b16 + r * s16 + 2 * c, &h, 2);
            memcpy(b32 + r * s32 + 4 * c, &back, 4);
        }
    uint32_t alias[60];
    for (uint32_t i = 0; i < n; i++)
        alias[i] = i < rows ? rows - 1 - i : irand(rows);
    float *x16 = fvec((size_t)n * dim), *x32 = fvec((size_t)n * dim);
    ops_gather_rows(x16, b16, s16, alias, n, dim, true);
    ops_gather_rows(x32, b32, s32, alias, n, dim, false);
    assert_memory_equal(x16, x32, (size_t)n * dim * sizeof *x16);
    for (uint32_t i = 0; i < n; i++)
        assert_memory_equal(x32 + (size_t)i * dim, b32 + alias[i] * s32, dim * sizeof(float));
    free(b16), free(b32), free(x16), free(x32);
}

/* ---- aggregation --------------------------------------------------------------------------------------- */

enum agg { AGG_SUM, AGG_MEAN, AGG_GCN, AGG_MAX };

struct agg_ctx {
    enum agg kind;
    struct tblock t;
    uint32_t dim;
    float *h, *out, *r, *ns, *nd, *ties;
};

static double agg_J(void *p)
{
    struct agg_ctx *c = p;
    if (c->kind == AGG_SUM)
        ops_agg_sum_fwd(c->out, &c->t.b, c->h, c->dim);
    else if (c->kind == AGG_MEAN)
        ops_agg_mean_fwd(c->out, &c->t.b, c->h, c->dim);
    else if (c->kind == AGG_MAX)
        ops_agg_max_fwd(c->out, c->ties, &c->t.b, c->h, c->dim);
    else
        ops_agg_gcn_fwd(c->out, &c->t.b, c->ns, c->nd, c->h, c->dim);
    return dotd(c->out, c->r, (size_t)c->t.b.n_dst * c->dim);
}

static void test_aggregation_grad(void **state)
{
    static const char *names[] = {"agg_sum", "agg_mean", "agg_gcn", "agg_max"};
    for (int kind = AGG_SUM; kind <= AGG_MAX; kind++) {
        struct agg_ctx c = {.kind = kind, .dim = 5};
        tblock_make(&c.t, 7, 15, 5);
        c.h = frand((size_t)15 * c.dim, -1, 1);
        c.out = fvec((size_t)7 * c.dim);
        c.r = frand((size_t)7 * c.dim, -1, 1);
        c.ns = fvec(15);
        c.nd = fvec(7);
        c.ties = fvec((size_t)7 * c.dim);
        if (kind == AGG_MAX) /* distinct sources at least 0.13 apart in every column: no kink within a step */
            for (uint32_t u = 0; u < 15; u++)
                for (uint32_t j = 0; j < c.dim; j++)
                    c.h[u * c.dim + j] = -1.0f + 2.0f * (float)((u * 7 + j * 11) % 15) / 15.0f + urand(-1e-3f, 1e-3f);
        uint32_t deg[15];
        ops_gcn_norm(c.ns, c.nd, deg, &c.t.b);
        float *g = fvec((size_t)15 * c.dim);
        if (kind == AGG_SUM)
            ops_agg_sum_bwd(g, &c.t.b, c.r, c.dim);
        else if (kind == AGG_MEAN)
            ops_agg_mean_bwd(g, &c.t.b, c.r, c.dim);
        else if (kind == AGG_MAX) {
            agg_J(&c); /* the maxima and ties at h */
            ops_agg_max_bwd(g, &c.t.b, c.h, c.out, c.ties, c.r, c.dim);
        } else
            ops_agg_gcn_bwd(g, &c.t.b, c.ns, c.nd, c.r, c.dim);
        fd_check(names[kind], agg_J, &c, &(struct fd_var){"h", c.h, (size_t)15 * c.dim, g}, 1);
        /* destination 0 has no sources: sum, mean and max give 0, gcn its own row */
        agg_J(&c);
        for (uint32_t j = 0; j < c.dim; j++)
            if (kind == AGG_GCN)
                assert_float_equal(c.out[j], c.h[j] * c.ns[0] * c.nd[0], 1e-6);
            else
                assert_true(c.out[j] == 0.0f);
        tblock_free(&c.t);
        free(c.h), free(c.out), free(c.r), free(c.ns), free(c.nd), free(c.ties), free(g);
    }
}

/* Forward values on a block small enough to do by hand:
 * dst 0 <- {1, 2}, dst 1 <- {2, 2}, three sources, dim 1, h = (1, 10, 100). */
static void test_aggregation_by_hand(void **state)
{
    uint32_t indptr[] = {0, 2, 4}, src[] = {1, 2, 2, 2};
    struct ops_block b = {.n_dst = 2, .n_src = 3, .indptr = indptr, .src = src};
    float h[] = {1, 10, 100}, out[2], ns[3], nd[2];
    uint32_t deg[3];
    ops_agg_sum_fwd(out, &b, h, 1);
    assert_true(out[0] == 110 && out[1] == 200);
    ops_agg_mean_fwd(out, &b, h, 1);
    assert_true(out[0] == 55 && out[1] == 100);
    /* max: dst 1's two edges both hold 100 (one source twice): they share its gradient */
    float ties[2], dh[3] = {0, 0, 0}, dout[2] = {1, 8};
    ops_agg_max_fwd(out, ties, &b, h, 1);
    assert_true(out[0] == 100 && out[1] == 100 && ties[0] == 1 && ties[1] == 2);
    ops_agg_max_bwd(dh, &b, h, out, ties, dout, 1);
    assert_true(dh[0] == 0 && dh[1] == 0 && dh[2] == 1 + 8);
    ops_gcn_norm(ns, nd, deg, &b);
    /* out-degrees 0, 1, 3 (+1 each); in-degrees 2, 2 (+1 each) */
    assert_float_equal(ns[0], 1.0, 1e-7);
    assert_float_equal(ns[1], 1 / sqrt(2.0), 1e-7);
    assert_float_equal(ns[2], 0.5, 1e-7);
    assert_float_equal(nd[0], 1 / sqrt(3.0), 1e-7);
    ops_agg_gcn_fwd(out, &b, ns, nd, h, 1);
    /* v = 0: (1 * 1 + 10 / sqrt 2 + 100 / 2) / sqrt 3; v = 1: (10 / sqrt 2 + 2 * 100 / 2) / sqrt 3 */
    assert_float_equal(out[0], (1 + 10 / sqrt(2.0) + 50) / sqrt(3.0), 1e-4);
    assert_float_equal(out[1], (10 / sqrt(2.0) + 100) / sqrt(3.0), 1e-4);
}

/* ---- attention ----------------------------------------------------------------------------------------- */

struct gat_ctx {
    struct tblock t;
    uint32_t heads, hd;
    float *z, *a, *s;     /* score: z (n_src, H*hd), a (H, hd), s (n_src, H) */
    float *el, *er;       /* edge logits */
    float *ee, *es;       /* (E, H), (n_dst, H) logits or weights */
    float *ae, *as;       /* attention weights for the weighted sum */
    float *out, *r, *rs;  /* outputs and weights of J (r for (.., H*hd) or (E, H); rs for the self part) */
};

static double score_J(void *p)
{
    struct gat_ctx *c = p;
    ops_gat_score_fwd(c->s, c->z, c->a, c->t.b.n_src, c->heads, c->hd);
    return dotd(c->s, c->r, (size_t)c->t.b.n_src * c->heads);
}

static double edge_J(void *p)
{
    struct gat_ctx *c = p;
    ops_gat_edge_fwd(c->ee, c->es, &c->t.b, c->el, c->er, c->heads, OPS_GAT_SLOPE);
    return dotd(c->ee, c->r, (size_t)ops_block_edges(&c->t.b) * c->heads) +
           dotd(c->es, c->rs, (size_t)c->t.b.n_dst * c->heads);
}

static double softmax_J(void *p)
{
    struct gat_ctx *c = p;
    size_t e = (size_t)ops_block_edges(&c->t.b) * c->heads, s = (size_t)c->t.b.n_dst * c->heads;
    memcpy(c->ae, c->ee, e * sizeof *c->ae);
    memcpy(c->as, c->es, s * sizeof *c->as);
    ops_edge_softmax_fwd(c->ae, c->as, &c->t.b, c->heads);
    return dotd(c->ae, c->r, e) + dotd(c->as, c->rs, s);
}

static double sum_J(void *p)
{
    struct gat_ctx *c = p;
    ops_gat_sum_fwd(c->out, &c->t.b, c->ae, c->as, c->z, c->heads, c->hd);
    return dotd(c->out, c->r, (size_t)c->t.b.n_dst * c->heads * c->hd);
}

static void test_gat_grad(void **state)
{
    struct gat_ctx c = {.heads = 3, .hd = 4};
    tblock_make(&c.t, 6, 11, 4);
    uint32_t H = c.heads, ns = c.t.b.n_src, nd = c.t.b.n_dst, e = ops_block_edges(&c.t.b), w = H * c.hd;
    size_t big = (size_t)(e + ns) * w + 1;
    c.r = frand(big, -1, 1);
    c.rs = frand(big, -1, 1);

    /* node scores: bilinear in z and a */
    c.z = frand((size_t)ns * w, -1, 1);
    c.a = frand((size_t)H * c.hd, -1, 1);
    c.s = fvec((size_t)ns * H);
    float *dz = fvec((size_t)ns * w), *da = fvec((size_t)H * c.hd);
    ops_gat_score_bwd(dz, da, c.r, c.z, c.a, ns, H, c.hd);
    struct fd_var vs[] = {{"z", c.z, (size_t)ns * w, dz}, {"a", c.a, (size_t)H * c.hd, da}};
    fd_check("gat_score", score_J, &c, vs, 2);

    /* edge logits: el, er kept so that no el[u] + er[v] is within 0.05 of
     * the LeakyReLU kink (the step is 0.01) */
    c.el = frand((size_t)ns * H, -1, 1);
    c.er = fvec((size_t)nd * H);
    for (uint32_t v = 0; v < nd; v++)
        for (uint32_t k = 0; k < H; k++) {
            bool ok;
            do {
                c.er[v * H + k] = urand(-1, 1);
                ok = fabsf(c.el[v * H + k] + c.er[v * H + k]) > 0.05f;
                for (uint32_t j = c.t.indptr[v]; j < c.t.indptr[v + 1]; j++)
                    ok = ok && fabsf(c.el[c.t.src[j] * H + k] + c.er[v * H + k]) > 0.05f;
            } while (!ok);
        }
    c.ee = fvec((size_t)e * H + 1);
    c.es = fvec((size_t)nd * H);
    float *del = fvec((size_t)ns * H), *der = fvec((size_t)nd * H);
    ops_gat_edge_bwd(del, der, &c.t.b, c.r, c.rs, c.el, c.er, H, OPS_GAT_SLOPE);
    struct fd_var ve[] = {{"el", c.el, (size_t)ns * H, del}, {"er", c.er, (size_t)nd * H, der}};
    fd_check("gat_edge", edge_J, &c, ve, 2);
    /* the slope: negative sums are scaled by 0.2 */
    edge_J(&c);
    for (uint32_t v = 0; v < nd; v++)
        for (uint32_t k = 0; k < H; k++) {
            float x = c.el[v * H + k] + c.er[v * H + k];
            assert_true(c.es[v * H + k] == (x < 0 ? 0.2f * x : x));
        }

    /* edge softmax: logits in [-2, 2] */
    for (size_t i = 0; i < (size_t)e * H; i++)
        c.ee[i] = urand(-2, 2);
    for (size_t i = 0; i < (size_t)nd * H; i++)
        c.es[i] = urand(-2, 2);
    c.ae = fvec((size_t)e * H + 1);
    c.as = fvec((size_t)nd * H);
    softmax_J(&c);
    float *ge = fvec((size_t)e * H + 1), *gs = fvec((size_t)nd * H);
    memcpy(ge, c.r, (size_t)e * H * sizeof *ge);
    memcpy(gs, c.rs, (size_t)nd * H * sizeof *gs);
    ops_edge_softmax_bwd(ge, gs, c.ae, c.as, &c.t.b, H);
    struct fd_var vm[] = {{"e_edge", c.ee, (size_t)e * H, ge}, {"e_self", c.es, (size_t)nd * H, gs}};
    fd_check("edge_softmax", softmax_J, &c, vm, 2);

    /* weighted sum: bilinear in the weights and z (weights need not sum to 1 here) */
    for (size_t i = 0; i < (size_t)e * H; i++)
        c.ae[i] = urand(0, 1);
    for (size_t i = 0; i < (size_t)nd * H; i++)
        c.as[i] = urand(0, 1);
    c.out = fvec((size_t)nd * w);
    float *dz2 = fvec((size_t)ns * w), *gae = fvec((size_t)e * H + 1), *gas = fvec((size_t)nd * H);
    ops_gat_sum_bwd(dz2, gae, gas, &c.t.b, c.ae, c.as, c.z, c.r, H, c.hd);
    struct fd_var vw[] = {{"z", c.z, (size_t)ns * w, dz2},
                          {"a_edge", c.ae, (size_t)e * H, gae},
                          {"a_self", c.as, (size_t)nd * H, gas}};
    fd_check("gat_sum", sum_J, &c, vw, 3);

    tblock_free(&c.t);
    free(c.r), free(c.rs), free(c.z), free(c.a), free(c.s), free(dz), free(da), free(c.el), free(c.er);
    free(c.ee), free(c.es), free(del), free(der), free(c.ae), free(c.as), free(ge), free(gs), free(c.out);
    free(dz2), free(gae), free(gas);
}

/* Every destination's weights (self loop included) sum to 1 for each
 * head, lie in [0, 1], and stay finite for logits far beyond expf's
 * range (the maximum is subtracted first). */
static void test_edge_softmax_sums_to_one(void **state)
{
    struct tblock t;
    tblock_make(&t, 200, 500, 30);
    const uint32_t H = 4;
    uint32_t e = ops_block_edges(&t.b);
    float *ae = fvec((size_t)e * H + 1), *as = fvec((size_t)200 * H);
    const float spread[] = {1.0f, 30.0f, 1e4f};
    for (size_t s = 0; s < SL_ARRAY_LEN(spread); s++) {
        for (size_t i = 0; i < (size_t)e * H; i++)
            ae[i] = urand(-spread[s], spread[s]);
        for (size_t i = 0; i < (size_t)200 * H; i++)
            as[i] = urand(-spread[s], spread[s]);
        ops_edge_softmax_fwd(ae, as, &t.b, H);
        for (uint32_t v = 0; v < 200; v++)
            for (uint32_t k = 0; k < H; k++) {
                double sum = as[v * H + k];
                assert_true(as[v * H + k] >= 0.0f && as[v * H + k] <= 1.0f);
                for (uint32_t j = t.indptr[v]; j < t.indptr[v + 1]; j++) {
                    float a = ae[(size_t)j * H + k];
                    assert_true(a >= 0.0f && a <= 1.0f);
                    sum += a;
                }
                uint32_t deg = t.indptr[v + 1] - t.indptr[v];
                /* each weight is rounded once after a float sum of deg + 1 terms */
                if (!(fabs(sum - 1.0) <= 4.0 * (deg + 2) * 0x1p-24))
                    fail_msg("spread %g: destination %u head %u: weights sum to %.9f", spread[s], v, k, sum);
                if (deg == 0)
                    assert_true(as[v * H + k] == 1.0f);
            }
    }
    tblock_free(&t);
    free(ae);
    free(as);
}

struct mean_ctx {
    uint32_t n, heads, d;
    float *in, *out, *r;
};

static double head_mean_J(void *p)
{
    struct mean_ctx *c = p;
    ops_head_mean_fwd(c->out, c->in, c->n, c->heads, c->d);
    return dotd(c->out, c->r, (size_t)c->n * c->d);
}

static void test_head_mean_grad(void **state)
{
    struct mean_ctx c = {.n = 5, .heads = 3, .d = 4};
    c.in = frand((size_t)c.n * c.heads * c.d, -1, 1);
    c.out = fvec((size_t)c.n * c.d);
    c.r = frand((size_t)c.n * c.d, -1, 1);
    float *g = frand((size_t)c.n * c.heads * c.d, -1, 1);
    ops_head_mean_bwd(g, c.r, c.n, c.heads, c.d);
    fd_check("head_mean", head_mean_J, &c, &(struct fd_var){"in", c.in, (size_t)c.n * c.heads * c.d, g}, 1);
    head_mean_J(&c);
    for (uint32_t i = 0; i < c.n; i++)
        for (uint32_t j = 0; j < c.d; j++) {
            const float *row = c.in + (size_t)i * c.heads * c.d;
            assert_float_equal(c.out[i * c.d + j], (row[j] + row[c.d + j] + row[2 * c.d + j]) / 3, 1e-6);
        }
    free(c.in), free(c.out), free(c.r), free(g);
}

/* ---- loss ------------------------------------------------------------------------------------------------ */

struct ce_ctx {
    uint32_t n, classes;
    float *logits;
    int32_t *labels;
};

static double ce_J(void *p)
{
    struct ce_ctx *c = p;
    return ops_cross_entropy(c->logits, c->labels, c->n, c->classes, NULL, NULL, NULL);
}

static void test_cross_entropy(void **state)
{
    struct ce_ctx c = {.n = 9, .classes = 5};
    c.logits = frand((size_t)c.n * c.classes, -3, 3);
    int32_t labels[] = {0, 4, -1, 2, 7, 1, 3, -1, 2}; /* -1 and 7 (>= classes): not counted */
    c.labels = labels;
    float *g = fvec((size_t)c.n * c.classes);
    uint32_t nl = 0, ok = 0;
    float loss = ops_cross_entropy(c.logits, labels, c.n, c.classes, g, &nl, &ok);
    assert_int_equal(nl, 6);
    fd_check("cross_entropy", ce_J, &c, &(struct fd_var){"logits", c.logits, (size_t)c.n * c.classes, g}, 1);
    /* the value and the counts, from scratch in double */
    double want = 0;
    uint32_t want_ok = 0;
    for (uint32_t i = 0; i < c.n; i++) {
        const float *x = c.logits + i * c.classes;
        if (labels[i] < 0 || labels[i] >= 5) {
            for (uint32_t k = 0; k < c.classes; k++)
                assert_true(g[i * c.classes + k] == 0.0f);
            continue;
        }
        double s = 0;
        uint32_t arg = 0;
        for (uint32_t k = 0; k < c.classes; k++) {
            s += exp(x[k]);
            arg = x[k] > x[arg] ? k : arg;
        }
        want += log(s) - x[labels[i]];
        want_ok += arg == (uint32_t)labels[i];
    }
    assert_float_equal(loss, want / 6, 1e-6);
    assert_int_equal(ok, want_ok);
    /* equal logits: ln(classes); a confident right answer: ~0 and correct */
    float flat[5] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f}, sure[5] = {0, 0, 40, 0, 0};
    int32_t two = 2;
    assert_float_equal(ops_cross_entropy(flat, &two, 1, 5, NULL, NULL, NULL), log(5.0), 1e-6);
    assert_float_equal(ops_cross_entropy(sure, &two, 1, 5, NULL, NULL, &ok), 0.0, 1e-6);
    assert_int_equal(ok, 1);
    /* no rows at all (the scratch never touched: UBSan caught an offset from NULL): 0 */
    nl = ok = 7;
    assert_true(ops_cross_entropy(flat, &two, 0, 5, NULL, &nl, &ok) == 0.0f);
    assert_int_equal(nl, 0);
    assert_int_equal(ok, 0);
    /* nothing labelled: 0, zero gradient */
    int32_t none[9] = {-1, -1, -1, -1, -1, -1, -1, -1, -1};
    assert_true(ops_cross_entropy(c.logits, none, c.n, c.classes, g, &nl, &ok) == 0.0f);
    assert_int_equal(nl, 0);
    for (size_t i = 0; i < (size_t)c.n * c.classes; i++)
        assert_true(g[i] == 0.0f);
    free(c.logits);
    free(g);
}

/* ---- optimizers --------------------------------------------------------------------------------------------- */

static void test_adam_sgd(void **state)
{
    const size_t n = 257;
    /* no weight decay, torch.optim.Adam's (L2 in the gradient), torch.optim.AdamW's (decoupled) */
    for (int mode = 0; mode < 3; mode++) {
        const float wd = mode ? 0.05f : 0.0f;
        const bool decoupled = mode == 2;
        float *p = frand(n, -1, 1), *m = fvec(n), *v = fvec(n), *g = fvec(n);
        double *pr = calloc(n, sizeof *pr), *mr = calloc(n, sizeof *mr), *vr = calloc(n, sizeof *vr);
        assert_true(pr && mr && vr);
        for (size_t i = 0; i < n; i++)
            pr[i] = p[i];
        const float lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
        for (uint64_t t = 1; t <= 20; t++) {
            for (size_t i = 0; i < n; i++)
                g[i] = urand(-2, 2) * (i % 7 == 0 ? 1e-3f : 1.0f);
            if (t == 1 && mode == 0) { /* first step: bias correction makes every move lr * g / |g| ~ lr */
                float p0[257];
                memcpy(p0, p, sizeof p0);
                ops_adam(p, g, m, v, n, lr, b1, b2, eps, wd, decoupled, t);
                for (size_t i = 0; i < n; i++)
                    assert_float_equal(p0[i] - p[i], lr * g[i] / (fabs(g[i]) + eps), 1e-6);
            } else {
                ops_adam(p, g, m, v, n, lr, b1, b2, eps, wd, decoupled, t);
            }
            double bc1 = 1 - pow(b1, (double)t), bc2 = 1 - pow(b2, (double)t);
            for (size_t i = 0; i < n; i++) {
                double gi = g[i];
                if (mode == 1)
                    gi += (double)wd * pr[i];
                if (mode == 2)
                    pr[i] *= 1.0 - (double)lr * wd;
                mr[i] = b1 * mr[i] + (1 - (double)b1) * gi;
                vr[i] = b2 * vr[i] + (1 - (double)b2) * gi * gi;
                pr[i] -= lr / bc1 * mr[i] / (sqrt(vr[i]) / sqrt(bc2) + eps);
            }
        }
        for (size_t i = 0; i < n; i++) /* 20 float steps of at most ~lr each */
            if (!(fabs(p[i] - pr[i]) <= 1e-5))
                fail_msg("adam (weight decay %g%s): p[%zu] = %.8g, double reference %.8g", (double)wd,
                         decoupled ? ", decoupled" : "", i, p[i], pr[i]);
        free(p), free(m), free(v), free(g), free(pr), free(mr), free(vr);
    }
    /* weight decay moves a parameter whose gradient is zero toward 0, the two ways apart */
    float a = 1.0f, b = 1.0f, zg = 0.0f, ma = 0, va = 0, mb = 0, vb = 0;
    ops_adam(&a, &zg, &ma, &va, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, false, 1);
    ops_adam(&b, &zg, &mb, &vb, 1, 0.1f, 0.9f, 0.999f, 1e-8f, 0.5f, true, 1);
    assert_float_equal(a, 1.0f - 0.1f, 1e-6); /* Adam: g = 0.5, a normalised step of lr */
    assert_float_equal(b, 1.0f - 0.1f * 0.5f, 1e-7); /* AdamW: p (1 - lr wd), no moment */
    assert_true(mb == 0.0f && vb == 0.0f);
    float q[3] = {1, 2, 3}, dq[3] = {10, -20, 0};
    ops_sgd(q, dq, 3, 0.5f);
    assert_true(q[0] == -4 && q[1] == 12 && q[2] == 3);
}

static int report(void **state)
{
    fprintf(stderr, "test_ops: worst finite-difference error %.3f of its tolerance\n", g_worst);
    return 0;
}

/* ops_count_nonfinite: NaN, both infinities, and nothing else (the
 * largest finite float, denormals, -0 are finite). */
static void test_count_nonfinite(void **state)
{
    (void)state;
    float x[9] = {0.0f, -0.0f, 1e-45f, FLT_MAX, -FLT_MAX, 1.0f, NAN, INFINITY, -INFINITY};
    assert_int_equal(ops_count_nonfinite(x, 6), 0);
    assert_int_equal(ops_count_nonfinite(x, 9), 3);
    assert_int_equal(ops_count_nonfinite(x + 6, 1), 1);
    assert_int_equal(ops_count_nonfinite(x, 0), 0);
}

int main(void)
{
    const char *seed = getenv("SLUICE_TEST_SEED");
    g_seed = seed ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL);
    g_rng = g_seed;
    fprintf(stderr, "test_ops: seed %#" PRIx64 " (SLUICE_TEST_SEED to repeat)\n", g_seed);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_count_nonfinite),
        cmocka_unit_test(test_gemm_vs_naive),
        cmocka_unit_test(test_gemm_threads_bitwise),
        cmocka_unit_test(test_gemm_ksplit_threads_bitwise),
        cmocka_unit_test(test_elementwise_threads_bitwise),
        cmocka_unit_test(test_fused_vs_steps_bitwise),
        cmocka_unit_test(test_pooled_vs_one_pass_bitwise),
        cmocka_unit_test(test_linear_bias_grad),
        cmocka_unit_test(test_relu_dropout_grad),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_f16_all_halves),
        cmocka_unit_test(test_gather_f16_vs_f32),
        cmocka_unit_test(test_aggregation_grad),
        cmocka_unit_test(test_aggregation_by_hand),
        cmocka_unit_test(test_gat_grad),
        cmocka_unit_test(test_edge_softmax_sums_to_one),
        cmocka_unit_test(test_head_mean_grad),
        cmocka_unit_test(test_cross_entropy),
        cmocka_unit_test(test_adam_sgd),
        cmocka_unit_test(test_plain_arrays),
    };
    return cmocka_run_group_tests(tests, NULL, report);
}
