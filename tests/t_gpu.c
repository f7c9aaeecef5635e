/* t_gpu.c - every gk_ operator against its ops_ twin (t_gpu.h), on
 * seeded random inputs, through the public API only: inputs are uploaded
 * with gk_upload, outputs brought back with gk_download.
 *
 * Exactness. Every non-GEMM result must equal the CPU's bit for bit
 * (memcmp). The inputs make that a strong check: values spread over 2^-6
 * .. 2^6 (so that adding the same terms in another order almost always
 * changes the last bits), random blocks with repeated sources, sources
 * with no out-edges, destinations with none (destination 0 never has
 * any), and backward buffers that start non-zero (they are added into).
 *
 * GEMM tolerance. Against a double-precision loop: |gpu - ref| <=
 * (k + 2) 2^-23 S (pedantic or FP32 math), or (2^-10 + (k + 2) 2^-23) S
 * (TF32: inputs rounded to 10-bit mantissas), S = sum_p |alpha a_ip b_pj|
 * + |beta c_ij|. A float sum of k terms is within k 2^-24 S of the exact
 * one, whatever the order (Higham's bound, first order), so this is twice
 * that; a wrong transpose, stride or beta is off by O(S). */
#include "t_gpu.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ops/ops.h"

uint64_t t_gpu_seed;
enum gk_math t_gpu_math = GK_MATH_PEDANTIC;
uint64_t t_gpu_exact, t_gpu_tol;

static struct gk_ctx g_gk;
static uint64_t g_rng;
static char g_case[200]; /* what the current comparison runs on, for failure messages */

#define T_OK(call)                                                                                                     \
    do {                                                                                                               \
        int t_rc_ = (call);                                                                                            \
        if (t_rc_ != 0)                                                                                                \
            fail_msg("%s returned %d (%s) [%s]", #call, t_rc_, gk_ctx_error(&g_gk), g_case);                           \
    } while (0)

static void set_case(const char *fmt, ...) SL_PRINTF(1, 2);
static void set_case(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_case, sizeof g_case, fmt, ap);
    va_end(ap);
}

int t_gpu_setup(void **state)
{
    char err[320];
    g_rng = t_gpu_seed;
    if (gk_ctx_init(&g_gk, t_gpu_math, err, sizeof err) != 0) {
        fprintf(stderr, "gk_ctx_init: %s\n", err);
        return -1;
    }
    return 0;
}

int t_gpu_teardown(void **state)
{
    gk_ctx_free(&g_gk);
    return 0;
}

/* ---- random inputs -------------------------------------------------------------------------------------------- */

static uint32_t irand(uint32_t n)
{
    return n ? (uint32_t)(sl_splitmix64(&g_rng) % n) : 0;
}

static double urand(void) /* [0, 1) */
{
    return (double)(sl_splitmix64(&g_rng) >> 11) * 0x1p-53;
}

/* A value of either sign with magnitude in [2^-6, 2^6). */
static float spread(void)
{
    double m = ldexp(1.0 + urand(), (int)irand(12) - 6);
    return (float)(irand(2) ? m : -m);
}

static void *hmem(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

static float *hrand(size_t n)
{
    float *p = hmem(n * sizeof *p);
    for (size_t i = 0; i < n; i++)
        p[i] = spread();
    return p;
}

static float *hcopy(const float *x, size_t n)
{
    float *p = hmem(n * sizeof *p);
    memcpy(p, x, n * sizeof *p);
    return p;
}

/* ---- device memory: every allocation of a test is freed by dev_release ---------------------------------------- */

enum { DEV_MAX = 64 };
static void *g_dev[DEV_MAX];
static size_t g_ndev;

static void *dev_alloc(size_t bytes)
{
    void *p;
    assert_true(g_ndev < DEV_MAX);
    T_OK(gk_malloc(&g_gk, &p, bytes ? bytes : 4)); /* never NULL, even for nothing */
    g_dev[g_ndev++] = p;
    return p;
}

static void *dev_of(const void *host, size_t bytes)
{
    void *p = dev_alloc(bytes);
    T_OK(gk_upload(&g_gk, p, host, bytes));
    return p;
}

static void dev_get(void *host, const void *dev, size_t bytes)
{
    T_OK(gk_sync(&g_gk));
    T_OK(gk_download(&g_gk, host, dev, bytes));
}

static void dev_release(void)
{
    while (g_ndev)
        gk_free(g_dev[--g_ndev]);
}

/* ---- comparisons ---------------------------------------------------------------------------------------------- */

/* n floats of the device array dev must be cpu's bits. */
static void same_f32(const char *what, const float *cpu, const float *dev, size_t n)
{
    float *got = hmem(n * sizeof *got);
    dev_get(got, dev, n * sizeof *got);
    for (size_t i = 0; i < n; i++)
        if (memcmp(&cpu[i], &got[i], sizeof *got) != 0)
            fail_msg("%s: element %zu of %zu: CPU %a, GPU %a [%s; seed %#" PRIx64 "]", what, i, n, (double)cpu[i],
                     (double)got[i], g_case, t_gpu_seed);
    t_gpu_exact += n;
    free(got);
}

static void same_bytes(const char *what, const void *cpu, const void *dev, size_t bytes)
{
    unsigned char *got = hmem(bytes);
    dev_get(got, dev, bytes);
    for (size_t i = 0; i < bytes; i++)
        if (((const unsigned char *)cpu)[i] != got[i])
            fail_msg("%s: byte %zu of %zu: CPU %u, GPU %u [%s; seed %#" PRIx64 "]", what, i, bytes,
                     ((const unsigned char *)cpu)[i], got[i], g_case, t_gpu_seed);
    t_gpu_exact += bytes;
    free(got);
}

/* ---- blocks ----------------------------------------------------------------------------------------------------- */

struct tblk {
    struct ops_block b;
    uint32_t *indptr, *src, *t_indptr, *t_dst, *t_edge;
    struct gk_block d;     /* on the device, with its transpose */
    struct gk_block d_fwd; /* the same without the transpose */
};

/* n_dst destinations, n_src sources, in-degrees 0 .. maxdeg (destination 0
 * has none), sources uniform with repeats. */
static void tblk_make(struct tblk *t, uint32_t n_dst, uint32_t n_src, uint32_t maxdeg)
{
    t->indptr = hmem(((size_t)n_dst + 1) * sizeof *t->indptr);
    for (uint32_t d = 0; d < n_dst; d++)
        t->indptr[d + 1] = t->indptr[d] + (d == 0 ? 0 : irand(maxdeg + 1));
    uint32_t e = t->indptr[n_dst];
    t->src = hmem((size_t)e * sizeof *t->src);
    for (uint32_t j = 0; j < e; j++)
        t->src[j] = irand(n_src);
    t->b = (struct ops_block){.n_dst = n_dst, .n_src = n_src, .indptr = t->indptr, .src = t->src};
    t->t_indptr = hmem(((size_t)n_src + 1) * sizeof *t->t_indptr);
    t->t_dst = hmem((size_t)e * sizeof *t->t_dst);
    t->t_edge = hmem((size_t)e * sizeof *t->t_edge);
    char err[200];
    if (gk_block_transpose_host(&t->b, t->t_indptr, t->t_dst, t->t_edge, err, sizeof err) != 0)
        fail_msg("gk_block_transpose_host: %s", err);
    void *dev = dev_alloc(gk_block_bytes(&t->b));
    T_OK(gk_block_upload(&g_gk, &t->d, dev, &t->b, t->t_indptr, t->t_dst, t->t_edge));
    t->d_fwd = t->d;
    t->d_fwd.t_indptr = t->d_fwd.t_dst = t->d_fwd.t_edge = NULL;
}

static void tblk_free(struct tblk *t)
{
    free(t->indptr), free(t->src), free(t->t_indptr), free(t->t_dst), free(t->t_edge);
}

/* Block shapes: empty, sources only, one node, self loops only, small and
 * odd, larger with high degrees. */
static const struct {
    uint32_t n_dst, n_src, maxdeg;
} SHAPES[] = {{0, 0, 0}, {0, 4, 0}, {1, 1, 0}, {1, 1, 3}, {5, 5, 2}, {7, 13, 3}, {33, 71, 9}, {130, 301, 25}};

/* ---- plain arrays ---------------------------------------------------------------------------------------------- */

static const size_t SIZES[] = {0, 1, 7, 1000, 4097};

void t_gpu_plain(void **state)
{
    for (size_t si = 0; si < SL_ARRAY_LEN(SIZES); si++) {
        size_t n = SIZES[si];
        set_case("n = %zu", n);
        float *x = hrand(n), *y = hmem(n * sizeof *y);
        for (size_t i = 0; i < n; i++)
            y[i] = NAN;
        float *dx = dev_of(x, n * sizeof *x), *dy = dev_of(y, n * sizeof *y);
        ops_zero(y, n);
        T_OK(gk_zero(&g_gk, dy, n));
        same_f32("zero", y, dy, n);
        ops_copy(y, x, n);
        T_OK(gk_copy(&g_gk, dy, dx, n));
        same_f32("copy", y, dy, n);
        float alpha = spread();
        ops_scale(x, n, alpha);
        T_OK(gk_scale(&g_gk, dx, n, alpha));
        same_f32("scale", x, dx, n);
        /* any_nonfinite against the CPU twin's count: none, then one
         * infinity at the end (the last element a grid covers) */
        float zero = 0.0f;
        float *flag = dev_of(&zero, sizeof zero);
        bool any = true;
        T_OK(gk_any_nonfinite(&g_gk, dx, n, flag, &any));
        assert_int_equal(any, ops_count_nonfinite(x, n) != 0);
        if (n) {
            x[n - 1] = INFINITY;
            float *dxi = dev_of(x, n * sizeof *x);
            T_OK(gk_any_nonfinite(&g_gk, dxi, n, flag, &any));
            assert_true(any);
            assert_int_equal(ops_count_nonfinite(x, n), 1);
        }
        /* the sum of squares: the same bits as the CPU's fixed order,
         * also across several chunks (n past GK_SUMSQ_CHUNK) */
        size_t big = n * 3 + GK_SUMSQ_CHUNK + 7;
        float *z = hrand(big);
        float *dz = dev_of(z, big * sizeof *z);
        double *scratch = dev_alloc(gk_sumsq_scratch(big) * sizeof(double));
        double want = ops_sumsq(z, big), got = -1.0;
        T_OK(gk_sumsq(&g_gk, dz, big, scratch, &got));
        assert_memory_equal(&want, &got, sizeof want);
        T_OK(gk_sumsq(&g_gk, dz, n, scratch, &got));
        want = ops_sumsq(z, n);
        assert_memory_equal(&want, &got, sizeof want);
        free(z);
        free(x), free(y);
        dev_release();
    }
}

/* ---- GEMM -------------------------------------------------------------------------------------------------------- */

/* c (m, n, row stride ldc) against alpha op(A) op(B) + beta c0 in double,
 * within the tolerance above. */
static void gemm_check(const char *what, bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float *a,
                       size_t lda, const float *b, size_t ldb, float beta, const float *c0, const float *dev_c,
                       size_t ldc)
{
    float *c = hmem(m * ldc * sizeof *c);
    dev_get(c, dev_c, m * ldc * sizeof *c);
    double tf32 = t_gpu_math == GK_MATH_TF32 ? 0x1p-10 : 0.0;
    for (size_t i = 0; i < m; i++)
        for (size_t j = 0; j < n; j++) {
            double ref = 0, mag = 0;
            for (size_t p = 0; p < k; p++) {
                double t =
                    (double)alpha * (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
                ref += t;
                mag += fabs(t);
            }
            double c_in = beta == 0.0f ? 0.0 : (double)beta * c0[i * ldc + j];
            ref += c_in;
            mag += fabs(c_in);
            double tol = (tf32 + (double)(k + 2) * 0x1p-23) * mag;
            double got = c[i * ldc + j];
            if (!(fabs(got - ref) <= tol))
                fail_msg("%s: C[%zu, %zu] = %.9g, reference %.9g, tolerance %.3g [%s; seed %#" PRIx64 "]", what, i, j,
                         got, ref, tol, g_case, t_gpu_seed);
        }
    t_gpu_tol += m * n;
    free(c);
}

void t_gpu_gemm(void **state)
{
    static const size_t dims[][3] = {{1, 1, 1}, {3, 5, 2}, {37, 29, 53}, {64, 1, 17}, {300, 17, 260}, {5, 4, 0}};
    static const float betas[] = {0.0f, 1.0f, -0.5f};
    for (size_t di = 0; di < SL_ARRAY_LEN(dims); di++)
        for (unsigned flags = 0; flags < 4; flags++)
            for (size_t bi = 0; bi < SL_ARRAY_LEN(betas); bi++) {
                bool ta = flags & 1, tb = flags & 2;
                size_t m = dims[di][0], n = dims[di][1], k = dims[di][2];
                size_t pad = irand(3); /* leading dimensions past the minimum */
                size_t lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
                size_t ra = ta ? k : m, rb = tb ? n : k;
                float alpha = bi == 2 ? -0.75f : 1.0f, beta = betas[bi];
                set_case("gemm ta %d tb %d m %zu n %zu k %zu lda %zu ldb %zu ldc %zu alpha %g beta %g", ta, tb, m, n, k,
                         lda, ldb, ldc, (double)alpha, (double)beta);
                float *a = hrand(ra * lda), *b = hrand(rb * ldb), *c0 = hrand(m * ldc);
                if (beta == 0.0f)
                    for (size_t i = 0; i < m * ldc; i++)
                        c0[i] = NAN; /* must be ignored */
                float *da = dev_of(a, ra * lda * sizeof *a), *db = dev_of(b, rb * ldb * sizeof *b);
                float *dc = dev_of(c0, m * ldc * sizeof *c0);
                T_OK(gk_gemm(&g_gk, ta, tb, m, n, k, alpha, da, lda, db, ldb, beta, dc, ldc));
                gemm_check("gemm", ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c0, dc, ldc);
                if (k == 0) { /* C = beta C exactly, as the CPU does */
                    float *c = hcopy(c0, m * ldc);
                    ops_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
                    same_f32("gemm k = 0", c, dc, m * ldc);
                    free(c);
                }
                free(a), free(b), free(c0);
                dev_release();
            }
    /* the linear layers map onto the GEMM as ops_linear_* do */
    static const uint32_t lin[][3] = {{0, 3, 4}, {1, 1, 1}, {57, 33, 10}, {200, 64, 47}};
    for (size_t li = 0; li < SL_ARRAY_LEN(lin); li++)
        for (int acc = 0; acc < 2; acc++) {
            uint32_t n = lin[li][0], in = lin[li][1], out = lin[li][2];
            set_case("linear n %u in %u out %u acc %d", n, in, out, acc);
            float *x = hrand((size_t)n * in), *w = hrand((size_t)out * in), *dy = hrand((size_t)n * out);
            float *y0 = hrand((size_t)n * out), *dw0 = hrand((size_t)out * in), *dx0 = hrand((size_t)n * in);
            float *dX = dev_of(x, (size_t)n * in * 4), *dW = dev_of(w, (size_t)out * in * 4);
            float *dDY = dev_of(dy, (size_t)n * out * 4), *dY = dev_of(y0, (size_t)n * out * 4);
            float *dDW = dev_of(dw0, (size_t)out * in * 4), *dDX = dev_of(dx0, (size_t)n * in * 4);
            float beta = acc ? 1.0f : 0.0f;
            T_OK(gk_linear_fwd(&g_gk, dY, dX, dW, n, in, out, acc));
            gemm_check("linear_fwd", false, true, n, out, in, 1.0f, x, in, w, in, beta, y0, dY, out);
            T_OK(gk_linear_bwd_w(&g_gk, dDW, dDY, dX, n, in, out, acc));
            gemm_check("linear_bwd_w", true, false, out, in, n, 1.0f, dy, out, x, in, beta, dw0, dDW, in);
            T_OK(gk_linear_bwd_x(&g_gk, dDX, dDY, dW, n, in, out, acc));
            gemm_check("linear_bwd_x", false, false, n, in, out, 1.0f, dy, out, w, in, beta, dx0, dDX, in);
            free(x), free(w), free(dy), free(y0), free(dw0), free(dx0);
            dev_release();
        }
}

/* ---- dense layers, activations ------------------------------------------------------------------------------------
 */

static const uint32_t DIMS[] = {1, 3, 17, 40};

void t_gpu_bias(void **state)
{
    static const uint32_t rows[] = {0, 1, 9, 333};
    for (size_t ri = 0; ri < SL_ARRAY_LEN(rows); ri++)
        for (size_t di = 0; di < SL_ARRAY_LEN(DIMS); di++) {
            uint32_t n = rows[ri], dim = DIMS[di];
            size_t len = (size_t)n * dim;
            set_case("bias n %u dim %u", n, dim);
            float *y = hrand(len), *b = hrand(dim), *db = hrand(dim);
            float *dY = dev_of(y, len * 4), *dB = dev_of(b, dim * 4), *dDB = dev_of(db, dim * 4);
            ops_bias_fwd(y, b, n, dim);
            T_OK(gk_bias_fwd(&g_gk, dY, dB, n, dim));
            same_f32("bias_fwd", y, dY, len);
            ops_bias_bwd(db, y, n, dim);
            T_OK(gk_bias_bwd(&g_gk, dDB, dY, n, dim));
            same_f32("bias_bwd", db, dDB, dim);
            free(y), free(b), free(db);
            dev_release();
        }
}

/* The activations, each a CPU and a device forward and backward. */
static const struct act {
    const char *name;
    void (*ops_fwd)(float *x, size_t n);
    void (*ops_bwd)(float *restrict dx, const float *restrict y, size_t n);
    int (*gk_fwd)(struct gk_ctx *g, float *x, size_t n);
    int (*gk_bwd)(struct gk_ctx *g, float *dx, const float *y, size_t n);
} ACTS[] = {
    {"relu", ops_relu_fwd, ops_relu_bwd, gk_relu_fwd, gk_relu_bwd},
    {"elu", ops_elu_fwd, ops_elu_bwd, gk_elu_fwd, gk_elu_bwd},
};

void t_gpu_act(void **state)
{
    static const float ps[] = {0.0f, 0.1f, 0.5f, 0.95f};
    for (size_t si = 0; si < SL_ARRAY_LEN(SIZES); si++) {
        size_t n = SIZES[si];
        for (size_t ai = 0; ai < SL_ARRAY_LEN(ACTS); ai++) {
            const struct act *a = &ACTS[ai];
            set_case("%s n %zu", a->name, n);
            float *x = hrand(n), *dx = hrand(n);
            if (n > 3) /* signed zeros, NaN */
                x[1] = -0.0f, x[2] = 0.0f, x[3] = NAN;
            if (n > 4) /* and a value whose exp underflows */
                x[4] = -100.0f;
            float *dX = dev_of(x, n * 4), *dDX = dev_of(dx, n * 4);
            a->ops_fwd(x, n);
            T_OK(a->gk_fwd(&g_gk, dX, n));
            same_f32("activation forward", x, dX, n);
            a->ops_bwd(dx, x, n);
            T_OK(a->gk_bwd(&g_gk, dDX, dX, n));
            same_f32("activation backward", dx, dDX, n);
            free(x), free(dx);
            dev_release();
        }
        for (size_t pi = 0; pi < SL_ARRAY_LEN(ps); pi++) {
            float p = ps[pi];
            uint64_t seed = sl_splitmix64(&g_rng);
            set_case("dropout n %zu p %g seed %#" PRIx64, n, (double)p, seed);
            float *x = hrand(n), *dx = hrand(n);
            uint8_t *mask = hmem(n);
            float *dX = dev_of(x, n * 4), *dDX = dev_of(dx, n * 4);
            uint8_t *dM = dev_alloc(n);
            ops_dropout_fwd(x, mask, n, p, seed);
            T_OK(gk_dropout_fwd(&g_gk, dX, dM, n, p, seed));
            same_bytes("dropout mask", mask, dM, n);
            same_f32("dropout_fwd", x, dX, n);
            ops_dropout_bwd(dx, mask, n, p);
            T_OK(gk_dropout_bwd(&g_gk, dDX, dM, n, p));
            same_f32("dropout_bwd", dx, dDX, n);
            free(x), free(dx), free(mask);
            dev_release();
        }
    }
}

/* ---- feature rows ------------------------------------------------------------------------------------------------ */

void t_gpu_rows(void **state)
{
    /* every half, including subnormals, infinities and NaNs */
    enum { NH = 65536 };
    uint16_t *h = hmem(NH * sizeof *h);
    for (uint32_t i = 0; i < NH; i++)
        h[i] = (uint16_t)i;
    float *f = hmem(NH * sizeof *f);
    set_case("all halves");
    uint16_t *dH = dev_of(h, NH * sizeof *h);
    float *dF = dev_alloc(NH * sizeof *f);
    ops_f16_to_f32(f, h, NH);
    T_OK(gk_f16_to_f32(&g_gk, dF, dH, NH));
    same_f32("f16_to_f32", f, dF, NH);
    for (uint32_t i = 0; i < NH; i += 997) /* and the CPU agrees with the dataset's converter */
        if (!isnan(f[i]))
            assert_true(f[i] == half_to_f32((uint16_t)i));
    free(h), free(f);
    dev_release();

    static const uint32_t ns[] = {0, 1, 50, 301};
    for (size_t ni = 0; ni < SL_ARRAY_LEN(ns); ni++)
        for (size_t di = 0; di < SL_ARRAY_LEN(DIMS); di++)
            for (int f16 = 0; f16 < 2; f16++) {
                uint32_t n = ns[ni], dim = DIMS[di], nrows = 37;
                size_t elem = f16 ? 2 : 4, stride = (dim + irand(5)) * elem; /* padded rows */
                set_case("gather n %u dim %u %s stride %zu", n, dim, f16 ? "f16" : "f32", stride);
                unsigned char *rows = hmem(nrows * stride);
                for (size_t i = 0; i < nrows * stride; i++)
                    rows[i] = (unsigned char)sl_splitmix64(&g_rng); /* any bits: NaNs and subnormals too */
                uint32_t *alias = hmem((size_t)n * sizeof *alias);
                for (uint32_t i = 0; i < n; i++)
                    alias[i] = irand(nrows);
                float *x = hmem((size_t)n * dim * 4);
                unsigned char *dR = dev_of(rows, nrows * stride);
                uint32_t *dA = dev_of(alias, (size_t)n * 4);
                float *dX = dev_alloc((size_t)n * dim * 4);
                ops_gather_rows(x, rows, stride, alias, n, dim, f16);
                T_OK(gk_gather_rows(&g_gk, dX, dR, stride, dA, n, dim, f16));
                same_bytes("gather_rows", x, dX, (size_t)n * dim * 4);
                free(rows), free(alias), free(x);
                dev_release();
            }
}

/* ---- aggregation ---------------------------------------------------------------------------------------------------
 */

void t_gpu_agg(void **state)
{
    for (size_t si = 0; si < SL_ARRAY_LEN(SHAPES); si++)
        for (size_t di = 0; di < SL_ARRAY_LEN(DIMS); di++)
            for (int mean = 0; mean < 3; mean++) { /* sum, mean, max */
                struct tblk t;
                tblk_make(&t, SHAPES[si].n_dst, SHAPES[si].n_src, SHAPES[si].maxdeg);
                uint32_t dim = DIMS[di], nd = t.b.n_dst, ns = t.b.n_src;
                set_case("agg %s n_dst %u n_src %u edges %u dim %u", mean == 2 ? "max" : mean ? "mean" : "sum", nd, ns,
                         t.d.n_edges, dim);
                float *h = hrand((size_t)ns * dim), *out = hrand((size_t)nd * dim);
                float *dout = hrand((size_t)nd * dim), *dh = hrand((size_t)ns * dim);
                float *dH = dev_of(h, (size_t)ns * dim * 4), *dO = dev_of(out, (size_t)nd * dim * 4);
                float *dDO = dev_of(dout, (size_t)nd * dim * 4), *dDH = dev_of(dh, (size_t)ns * dim * 4);
                if (mean == 2) {
                    for (size_t i = 0; i < (size_t)ns * dim; i += 7)
                        h[i] = h[i / 7 % ns * dim]; /* some equal values: ties */
                    T_OK(gk_upload(&g_gk, dH, h, (size_t)ns * dim * 4));
                    float *ties = hmem((size_t)nd * dim * 4), *dT = dev_alloc((size_t)nd * dim * 4);
                    ops_agg_max_fwd(out, ties, &t.b, h, dim);
                    T_OK(gk_agg_max_fwd(&g_gk, dO, dT, &t.d_fwd, dH, dim));
                    same_f32("agg max ties", ties, dT, (size_t)nd * dim);
                    ops_agg_max_bwd(dh, &t.b, h, out, ties, dout, dim);
                    T_OK(gk_agg_max_bwd(&g_gk, dDH, &t.d, dH, dO, dT, dDO, dim));
                    free(ties);
                } else if (mean) {
                    ops_agg_mean_fwd(out, &t.b, h, dim);
                    T_OK(gk_agg_mean_fwd(&g_gk, dO, &t.d_fwd, dH, dim));
                    ops_agg_mean_bwd(dh, &t.b, dout, dim);
                    T_OK(gk_agg_mean_bwd(&g_gk, dDH, &t.d, dDO, dim));
                } else {
                    ops_agg_sum_fwd(out, &t.b, h, dim);
                    T_OK(gk_agg_sum_fwd(&g_gk, dO, &t.d_fwd, dH, dim));
                    ops_agg_sum_bwd(dh, &t.b, dout, dim);
                    T_OK(gk_agg_sum_bwd(&g_gk, dDH, &t.d, dDO, dim));
                }
                same_f32("agg fwd", out, dO, (size_t)nd * dim);
                same_f32("agg bwd", dh, dDH, (size_t)ns * dim);
                free(h), free(out), free(dout), free(dh);
                tblk_free(&t);
                dev_release();
            }
}

void t_gpu_gcn(void **state)
{
    for (size_t si = 0; si < SL_ARRAY_LEN(SHAPES); si++)
        for (size_t di = 0; di < SL_ARRAY_LEN(DIMS); di++) {
            struct tblk t;
            tblk_make(&t, SHAPES[si].n_dst, SHAPES[si].n_src, SHAPES[si].maxdeg);
            uint32_t dim = DIMS[di], nd = t.b.n_dst, ns = t.b.n_src;
            set_case("gcn n_dst %u n_src %u edges %u dim %u", nd, ns, t.d.n_edges, dim);
            float *nsrc = hmem((size_t)ns * 4), *ndst = hmem((size_t)nd * 4);
            uint32_t *deg = hmem((size_t)ns * 4);
            float *dNS = dev_alloc((size_t)ns * 4), *dND = dev_alloc((size_t)nd * 4);
            uint32_t *dDeg = dev_alloc((size_t)ns * 4);
            ops_gcn_norm(nsrc, ndst, deg, &t.b);
            T_OK(gk_gcn_norm(&g_gk, dNS, dND, dDeg, &t.d));
            same_f32("gcn_norm src", nsrc, dNS, ns);
            same_f32("gcn_norm dst", ndst, dND, nd);
            same_bytes("gcn_norm degrees", deg, dDeg, (size_t)ns * 4);
            { /* with the graph's degrees (model.gcn_norm = "graph"): no transpose needed */
                uint32_t *gd = hmem((size_t)ns * 4);
                for (size_t u = 0; u < ns; u++)
                    gd[u] = (uint32_t)irand(1000) + (u % 7 == 0 ? UINT32_MAX - 1000 : 0);
                struct ops_block hb = t.b;
                struct gk_block db = t.d_fwd;
                hb.deg = gd;
                db.deg = dev_of(gd, (size_t)ns * 4);
                float *gs = hmem((size_t)ns * 4), *gn = hmem((size_t)nd * 4);
                ops_gcn_norm(gs, gn, deg, &hb);
                T_OK(gk_gcn_norm(&g_gk, dNS, dND, dDeg, &db));
                same_f32("gcn_norm src (graph degrees)", gs, dNS, ns);
                same_f32("gcn_norm dst (graph degrees)", gn, dND, nd);
                for (size_t u = 0; u < ns; u++)
                    if (gs[u] != (float)(1.0 / sqrt(1.0 + (double)gd[u])) || (u < nd && gn[u] != gs[u]))
                        fail_msg("gcn_norm with graph degrees: node %zu (degree %u): %g / %g", u, gd[u],
                                 (double)gs[u], u < nd ? (double)gn[u] : 0.0);
                T_OK(gk_gcn_norm(&g_gk, dNS, dND, dDeg, &t.d)); /* back to the block's, for the checks below */
                free(gd), free(gs), free(gn);
            }
            float *h = hrand((size_t)ns * dim), *out = hrand((size_t)nd * dim);
            float *dout = hrand((size_t)nd * dim), *dh = hrand((size_t)ns * dim);
            float *dH = dev_of(h, (size_t)ns * dim * 4), *dO = dev_of(out, (size_t)nd * dim * 4);
            float *dDO = dev_of(dout, (size_t)nd * dim * 4), *dDH = dev_of(dh, (size_t)ns * dim * 4);
            ops_agg_gcn_fwd(out, &t.b, nsrc, ndst, h, dim);
            T_OK(gk_agg_gcn_fwd(&g_gk, dO, &t.d_fwd, dNS, dND, dH, dim));
            same_f32("agg_gcn_fwd", out, dO, (size_t)nd * dim);
            ops_agg_gcn_bwd(dh, &t.b, nsrc, ndst, dout, dim);
            T_OK(gk_agg_gcn_bwd(&g_gk, dDH, &t.d, dNS, dND, dDO, dim));
            same_f32("agg_gcn_bwd", dh, dDH, (size_t)ns * dim);
            free(nsrc), free(ndst), free(deg), free(h), free(out), free(dout), free(dh);
            tblk_free(&t);
            dev_release();
        }
}

/* ---- graph attention -----------------------------------------------------------------------------------------------
 */

void t_gpu_gat(void **state)
{
    static const uint32_t hs[][2] = {{1, 1}, {1, 16}, {3, 5}, {2, 17}}; /* heads, head dim */
    for (size_t si = 0; si < SL_ARRAY_LEN(SHAPES); si++)
        for (size_t hi = 0; hi < SL_ARRAY_LEN(hs); hi++) {
            struct tblk t;
            tblk_make(&t, SHAPES[si].n_dst, SHAPES[si].n_src, SHAPES[si].maxdeg);
            uint32_t H = hs[hi][0], hd = hs[hi][1], nd = t.b.n_dst, ns = t.b.n_src, e = t.d.n_edges;
            size_t w = (size_t)H * hd;
            set_case("gat n_dst %u n_src %u edges %u heads %u hd %u", nd, ns, e, H, hd);
            const float slope = OPS_GAT_SLOPE;

            /* scores */
            float *z = hrand(ns * w), *as = hrand(w), *ad = hrand(w); /* attention vectors of sources, destinations */
            float *el = hmem((size_t)ns * H * 4), *er = hmem((size_t)nd * H * 4);
            float *dZ = dev_of(z, ns * w * 4), *dAs = dev_of(as, w * 4), *dAd = dev_of(ad, w * 4);
            float *dEl = dev_alloc((size_t)ns * H * 4), *dEr = dev_alloc((size_t)nd * H * 4);
            ops_gat_score_fwd(el, z, as, ns, H, hd);
            T_OK(gk_gat_score_fwd(&g_gk, dEl, dZ, dAs, ns, H, hd));
            same_f32("gat_score_fwd", el, dEl, (size_t)ns * H);
            ops_gat_score_fwd(er, z, ad, nd, H, hd);
            T_OK(gk_gat_score_fwd(&g_gk, dEr, dZ, dAd, nd, H, hd));
            same_f32("gat_score_fwd (dst)", er, dEr, (size_t)nd * H);

            /* edge logits and their softmax */
            float *ae = hmem((size_t)e * H * 4), *aself = hmem((size_t)nd * H * 4);
            float *dAe = dev_alloc((size_t)e * H * 4), *dAself = dev_alloc((size_t)nd * H * 4);
            ops_gat_edge_fwd(ae, aself, &t.b, el, er, H, slope);
            T_OK(gk_gat_edge_fwd(&g_gk, dAe, dAself, &t.d_fwd, dEl, dEr, H, slope));
            same_f32("gat_edge_fwd (edges)", ae, dAe, (size_t)e * H);
            same_f32("gat_edge_fwd (self)", aself, dAself, (size_t)nd * H);
            ops_edge_softmax_fwd(ae, aself, &t.b, H);
            T_OK(gk_edge_softmax_fwd(&g_gk, dAe, dAself, &t.d_fwd, H));
            same_f32("edge_softmax_fwd (edges)", ae, dAe, (size_t)e * H);
            same_f32("edge_softmax_fwd (self)", aself, dAself, (size_t)nd * H);

            /* weighted sum, head mean */
            float *out = hmem((size_t)nd * w * 4), *dOut = dev_alloc((size_t)nd * w * 4);
            ops_gat_sum_fwd(out, &t.b, ae, aself, z, H, hd);
            T_OK(gk_gat_sum_fwd(&g_gk, dOut, &t.d_fwd, dAe, dAself, dZ, H, hd));
            same_f32("gat_sum_fwd", out, dOut, (size_t)nd * w);
            float *mean = hmem((size_t)nd * hd * 4), *dMean = dev_alloc((size_t)nd * hd * 4);
            ops_head_mean_fwd(mean, out, nd, H, hd);
            T_OK(gk_head_mean_fwd(&g_gk, dMean, dOut, nd, H, hd));
            same_f32("head_mean_fwd", mean, dMean, (size_t)nd * hd);

            /* backward, in the model's order */
            float *gmean = hrand((size_t)nd * hd), *gout = hmem((size_t)nd * w * 4);
            float *dGmean = dev_of(gmean, (size_t)nd * hd * 4), *dGout = dev_of(gout, (size_t)nd * w * 4);
            ops_head_mean_bwd(gout, gmean, nd, H, hd);
            T_OK(gk_head_mean_bwd(&g_gk, dGout, dGmean, nd, H, hd));
            same_f32("head_mean_bwd", gout, dGout, (size_t)nd * w);
            float *dz = hrand(ns * w), *ge = hmem((size_t)e * H * 4), *gs = hmem((size_t)nd * H * 4);
            float *dDz = dev_of(dz, ns * w * 4), *dGe = dev_alloc((size_t)e * H * 4),
                  *dGs = dev_alloc((size_t)nd * H * 4);
            ops_gat_sum_bwd(dz, ge, gs, &t.b, ae, aself, z, gout, H, hd);
            T_OK(gk_gat_sum_bwd(&g_gk, dDz, dGe, dGs, &t.d, dAe, dAself, dZ, dGout, H, hd));
            same_f32("gat_sum_bwd (dz)", dz, dDz, ns * w);
            same_f32("gat_sum_bwd (edges)", ge, dGe, (size_t)e * H);
            same_f32("gat_sum_bwd (self)", gs, dGs, (size_t)nd * H);
            ops_edge_softmax_bwd(ge, gs, ae, aself, &t.b, H);
            T_OK(gk_edge_softmax_bwd(&g_gk, dGe, dGs, dAe, dAself, &t.d_fwd, H));
            same_f32("edge_softmax_bwd (edges)", ge, dGe, (size_t)e * H);
            same_f32("edge_softmax_bwd (self)", gs, dGs, (size_t)nd * H);
            float *gel = hrand((size_t)ns * H), *ger = hrand((size_t)nd * H);
            float *dGel = dev_of(gel, (size_t)ns * H * 4), *dGer = dev_of(ger, (size_t)nd * H * 4);
            ops_gat_edge_bwd(gel, ger, &t.b, ge, gs, el, er, H, slope);
            T_OK(gk_gat_edge_bwd(&g_gk, dGel, dGer, &t.d, dGe, dGs, dEl, dEr, H, slope));
            same_f32("gat_edge_bwd (src)", gel, dGel, (size_t)ns * H);
            same_f32("gat_edge_bwd (dst)", ger, dGer, (size_t)nd * H);
            float *da = hrand(w), *dDa = dev_of(da, w * 4);
            ops_gat_score_bwd(dz, da, gel, z, as, ns, H, hd);
            T_OK(gk_gat_score_bwd(&g_gk, dDz, dDa, dGel, dZ, dAs, ns, H, hd));
            same_f32("gat_score_bwd (dz)", dz, dDz, ns * w);
            same_f32("gat_score_bwd (da)", da, dDa, w);
            ops_gat_score_bwd(NULL, da, ger, z, ad, nd, H, hd);
            T_OK(gk_gat_score_bwd(&g_gk, NULL, dDa, dGer, dZ, dAd, nd, H, hd));
            same_f32("gat_score_bwd (da, no dz)", da, dDa, w);
            free(z), free(as), free(ad), free(el), free(er), free(ae), free(aself), free(out);
            free(mean), free(gmean), free(gout), free(dz), free(ge), free(gs), free(gel), free(ger), free(da);
            tblk_free(&t);
            dev_release();
        }
}

/* ---- loss and optimizers ------------------------------------------------------------------------------------------
 */

void t_gpu_loss(void **state)
{
    static const uint32_t ns[] = {0, 1, 37, 500};
    static const uint32_t cs[] = {1, 2, 47};
    for (size_t ni = 0; ni < SL_ARRAY_LEN(ns); ni++)
        for (size_t ci = 0; ci < SL_ARRAY_LEN(cs); ci++)
            for (int with_grad = 0; with_grad < 2; with_grad++) {
                uint32_t n = ns[ni], C = cs[ci];
                set_case("cross_entropy n %u classes %u%s", n, C, with_grad ? "" : " (no gradient)");
                float *x = hrand((size_t)n * C);
                for (size_t i = 0; i < (size_t)n * C; i += 3)
                    x[i] = roundf(x[i]); /* ties for the argmax */
                int32_t *lab = hmem((size_t)n * 4);
                for (uint32_t i = 0; i < n; i++)
                    lab[i] = (int32_t)irand(C + 3) - 1; /* -1, 0 .. C-1, C, C+1 */
                float *dl = hrand((size_t)n * C);
                float *dX = dev_of(x, (size_t)n * C * 4), *dDl = dev_of(dl, (size_t)n * C * 4);
                int32_t *dLab = dev_of(lab, (size_t)n * 4);
                uint32_t nl = 0, ok = 0, gnl = 99, gok = 99;
                float loss = ops_cross_entropy(x, lab, n, C, with_grad ? dl : NULL, &nl, &ok), gloss = NAN;
                T_OK(gk_cross_entropy(&g_gk, dX, dLab, n, C, with_grad ? dDl : NULL, &gloss, &gnl, &gok));
                if (memcmp(&loss, &gloss, sizeof loss) != 0 || nl != gnl || ok != gok)
                    fail_msg("cross_entropy: CPU loss %a labelled %u correct %u, GPU %a %u %u [%s; seed %#" PRIx64 "]",
                             (double)loss, nl, ok, (double)gloss, gnl, gok, g_case, t_gpu_seed);
                t_gpu_exact += 3;
                same_f32("cross_entropy gradient", dl, dDl, (size_t)n * C);
                free(x), free(lab), free(dl);
                dev_release();
            }
}

void t_gpu_optim(void **state)
{
    static const uint64_t steps[] = {1, 2, 1000};
    for (size_t si = 0; si < SL_ARRAY_LEN(SIZES); si++)
        for (size_t ti = 0; ti < SL_ARRAY_LEN(steps); ti++) {
            size_t n = SIZES[si];
            uint64_t t = steps[ti];
            float lr = (float)(1e-3 * (1.0 + urand()));
            /* no weight decay, Adam's (L2) and AdamW's (decoupled) in turn */
            float wd = ti == 0 ? 0.0f : 5e-4f * (float)(1.0 + urand());
            bool decoupled = ti == 2;
            set_case("adam n %zu t %" PRIu64 " lr %g wd %g%s", n, t, (double)lr, (double)wd,
                     decoupled ? " decoupled" : "");
            float *p = hrand(n), *g = hrand(n), *m = hrand(n), *v = hrand(n);
            for (size_t i = 0; i < n; i++)
                v[i] *= v[i];
            float *dP = dev_of(p, n * 4), *dG = dev_of(g, n * 4), *dM = dev_of(m, n * 4), *dV = dev_of(v, n * 4);
            ops_adam(p, g, m, v, n, lr, 0.9f, 0.999f, 1e-8f, wd, decoupled, t);
            T_OK(gk_adam(&g_gk, dP, dG, dM, dV, n, lr, 0.9f, 0.999f, 1e-8f, wd, decoupled, t));
            same_f32("adam p", p, dP, n);
            same_f32("adam m", m, dM, n);
            same_f32("adam v", v, dV, n);
            ops_sgd(p, g, n, lr);
            T_OK(gk_sgd(&g_gk, dP, dG, n, lr));
            same_f32("sgd", p, dP, n);
            free(p), free(g), free(m), free(v);
            dev_release();
        }
}

/* ---- the transpose and the error paths -----------------------------------------------------------------------------
 */

void t_gpu_transpose(void **state)
{
    for (size_t si = 0; si < SL_ARRAY_LEN(SHAPES); si++) {
        struct tblk t;
        tblk_make(&t, SHAPES[si].n_dst, SHAPES[si].n_src, SHAPES[si].maxdeg);
        /* brute force: for each source, scan the edges in order */
        uint32_t p = 0;
        for (uint32_t u = 0; u < t.b.n_src; u++) {
            assert_int_equal(t.t_indptr[u], p);
            for (uint32_t d = 0; d < t.b.n_dst; d++)
                for (uint32_t j = t.indptr[d]; j < t.indptr[d + 1]; j++)
                    if (t.src[j] == u) {
                        assert_int_equal(t.t_dst[p], d);
                        assert_int_equal(t.t_edge[p], j);
                        p++;
                    }
        }
        assert_int_equal(t.t_indptr[t.b.n_src], p);
        assert_int_equal(p, t.d.n_edges);
        tblk_free(&t);
        dev_release();
    }
    /* a source id out of range, an indptr that decreases or does not start at 0 */
    uint32_t indptr[] = {0, 2, 3}, src[] = {0, 4, 1}, ti[6], td[3], te[3];
    struct ops_block b = {.n_dst = 2, .n_src = 4, .indptr = indptr, .src = src};
    char err[200] = "";
    assert_int_equal(gk_block_transpose_host(&b, ti, td, te, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "source 4"));
    src[1] = 3;
    assert_int_equal(gk_block_transpose_host(&b, ti, td, te, err, sizeof err), 0);
    indptr[1] = 4;
    assert_int_equal(gk_block_transpose_host(&b, ti, td, te, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "decreases"));
    indptr[1] = 2, indptr[0] = 1;
    assert_int_equal(gk_block_transpose_host(&b, ti, td, te, err, sizeof err), -EINVAL);
    assert_non_null(strstr(err, "indptr[0]"));
}

void t_gpu_errors(void **state)
{
    struct tblk t;
    tblk_make(&t, 7, 13, 3);
    set_case("errors");
    float *buf = dev_alloc(13 * 8 * 4);
    static const char *const ops[] = {"agg_sum_bwd", "agg_mean_bwd", "gcn_norm",
                                      "agg_gcn_bwd", "gat_edge_bwd", "gat_sum_bwd"};
    for (size_t i = 0; i < SL_ARRAY_LEN(ops); i++) {
        int rc = -1;
        g_gk.err[0] = '\0';
        switch (i) {
        case 0:
            rc = gk_agg_sum_bwd(&g_gk, buf, &t.d_fwd, buf, 2);
            break;
        case 1:
            rc = gk_agg_mean_bwd(&g_gk, buf, &t.d_fwd, buf, 2);
            break;
        case 2:
            rc = gk_gcn_norm(&g_gk, buf, buf, (uint32_t *)buf, &t.d_fwd);
            break;
        case 3:
            rc = gk_agg_gcn_bwd(&g_gk, buf, &t.d_fwd, buf, buf, buf, 2);
            break;
        case 4:
            rc = gk_gat_edge_bwd(&g_gk, buf, buf, &t.d_fwd, buf, buf, buf, buf, 1, 0.2f);
            break;
        case 5:
            rc = gk_gat_sum_bwd(&g_gk, buf, buf, buf, &t.d_fwd, buf, buf, buf, buf, 1, 1);
            break;
        }
        if (rc != -EINVAL || !strstr(gk_ctx_error(&g_gk), "transpose"))
            fail_msg("gk_%s without a transpose: %d (%s), want -EINVAL naming the transpose", ops[i], rc,
                     gk_ctx_error(&g_gk));
    }
    /* a GEMM past cuBLAS's int sizes is refused before anything runs */
    assert_int_equal(gk_gemm(&g_gk, false, false, (size_t)1 << 31, 1, 1, 1.0f, buf, 1, buf, 1, 0.0f, buf, 1), -EINVAL);
    assert_non_null(strstr(gk_ctx_error(&g_gk), "INT_MAX"));
    /* an allocation no machine has */
    void *p = (void *)1;
    int rc = gk_malloc(&g_gk, &p, (size_t)1 << 62);
    assert_int_equal(rc, -ENOMEM);
    assert_null(p);
    assert_non_null(strstr(gk_ctx_error(&g_gk), "cudaMalloc"));
    /* the context still works afterwards */
    T_OK(gk_zero(&g_gk, buf, 8));
    T_OK(gk_sync(&g_gk));
    tblk_free(&t);
    dev_release();
}

/* ---- devices, page-locked memory, events, asynchronous uploads --------------------------------------------------- */

void t_gpu_async(void **state)
{
    (void)state;
    set_case("async");
    char err[320] = "";
    int n = 0;
    T_OK(gk_device_count(&n, err, sizeof err));
    assert_true(n >= 1);
    /* the device the context was made on, again; one past the last is refused, naming the count */
    assert_int_equal(gk_set_device(0, err, sizeof err), 0);
    assert_int_equal(gk_set_device(n, err, sizeof err), -ENODEV);
    char want[64];
    snprintf(want, sizeof want, "sees %d device", n);
    if (!strstr(err, want))
        fail_msg("gk_set_device(%d): \"%s\", want it to say it %s", n, err, want);
    assert_int_equal(gk_set_device(-1, err, sizeof err), -ENODEV);
    T_OK(gk_set_device(0, err, sizeof err));
    /* large enough that a copy racing the kernels would show */
    const size_t N = (size_t)4 << 20;
    float *src = NULL, *out = hmem(N * sizeof *out);
    T_OK(gk_host_alloc(&g_gk, (void **)&src, N * sizeof *src));
    assert_non_null(src);
    for (size_t i = 0; i < N; i++)
        src[i] = (float)(i % 1000) + 0.5f;
    float *dst = dev_alloc(N * sizeof *dst);
    struct gk_event after = {0}, done = {0};
    T_OK(gk_event_init(&g_gk, &after));
    T_OK(gk_event_init(&g_gk, &done));
    T_OK(gk_event_sync(&g_gk, &done)); /* never recorded: complete */
    /* the copy waits for the work before `after` (which writes dst), and
     * the work queued after it waits for the copy: dst ends as 3 src */
    T_OK(gk_zero(&g_gk, dst, N));
    for (int k = 0; k < 8; k++)
        T_OK(gk_scale(&g_gk, dst, N, 2.0f));
    T_OK(gk_event_record(&g_gk, &after));
    T_OK(gk_upload_async(&g_gk, dst, src, N * sizeof *src, &after, &done));
    T_OK(gk_scale(&g_gk, dst, N, 3.0f));
    T_OK(gk_event_sync(&g_gk, &done));
    for (size_t i = 0; i < N; i++) /* the copy is done: src may change */
        src[i] = -1.0f;
    dev_get(out, dst, N * sizeof *out);
    for (size_t i = 0; i < N; i++)
        if (out[i] != 3.0f * ((float)(i % 1000) + 0.5f))
            fail_msg("element %zu after the asynchronous upload: %g, want %g", i, (double)out[i],
                     3.0 * ((double)(i % 1000) + 0.5));
    /* no events given: still ordered before the work after it */
    T_OK(gk_upload_async(&g_gk, dst, src, N * sizeof *src, NULL, NULL));
    T_OK(gk_scale(&g_gk, dst, N, 2.0f));
    dev_get(out, dst, N * sizeof *out);
    for (size_t i = 0; i < N; i++)
        if (out[i] != -2.0f)
            fail_msg("element %zu after an upload without events: %g, want -2", i, (double)out[i]);
    T_OK(gk_upload_async(&g_gk, dst, src, 0, NULL, &done)); /* nothing to copy */
    T_OK(gk_event_sync(&g_gk, &done));
    gk_event_free(&after);
    gk_event_free(&done);
    gk_event_free(&done); /* freed twice, and a zeroed one: nothing happens */
    gk_host_free(src);
    gk_host_free(NULL);
    free(out);
    dev_release();
}
