/* kernels.cu - the CUDA twins of the CPU operators (kernels.h; the
 * contracts are ops/ops.h's): the context, device memory, the GEMMs, the
 * element-wise and dense operators, feature rows, the loss and the
 * optimizers. kernels_graph.cu has those over a sampled block. Both are
 * compiled by nvcc for the device (sluice_gpu) and, through gpu/shim.h,
 * as host C++ (sluice_gpu_shim: kernels_shim.cc defines GK_SHIM and
 * includes them).
 *
 * Exactness. Every non-GEMM kernel gives the bits of its CPU twin:
 * - one thread per output element (per destination and head for the
 *   softmaxes, per row for the loss), through grid-stride loops, and each
 *   thread adds its terms in the order in which ops.c adds them into that
 *   element (kernels_graph.cu: the order over a block's edges).
 * - the per-element bodies come from ops/elem.h, as in ops.c; nvcc gets
 *   -fmad=false (no fused multiply-add contraction), -prec-div=true,
 *   -prec-sqrt=true and -ftz=false (gpu/CMakeLists.txt).
 * No kernel uses shared memory, __syncthreads, atomics or warp
 * intrinsics: threads never talk to each other, which is also what lets
 * the shim run them one after another. The price is long serial loops in
 * a few places (a bias gradient and an attention vector's gradient sum
 * every row in one thread per column; the loss total is one thread).
 *
 * GEMMs go to cuBLAS (the shim: ops_gemm), so they agree with the CPU only
 * within rounding; cuBLAS gives the same bits run to run for one handle on
 * one stream on one GPU model, which is how a context uses it. */
#include "gpu/launch.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "ops/elem.h"

/* ---- plain arrays --------------------------------------------------------------------------------------- */

static __global__ void k_scale(float *x, size_t n, float alpha)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        x[i] *= alpha;
}

/* *flag = 1 when some x[i] is NaN or infinite (exponent bits all ones, as
 * ops_count_nonfinite). Every writer stores the same value, so the race
 * between threads is benign; the flag is zeroed before the launch. */
static __global__ void k_any_nonfinite(const float *x, size_t n, float *flag)
{
    for (size_t i = gk_first(); i < n; i += gk_stride()) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        if ((u & 0x7f800000u) == 0x7f800000u)
            *flag = 1.0f;
    }
}

/* Chunk c's sum of squares into part[c], in element order. */
static __global__ void k_sumsq_chunks(const float *x, size_t n, double *part)
{
    size_t chunks = (n + GK_SUMSQ_CHUNK - 1) / GK_SUMSQ_CHUNK;
    for (size_t c = gk_first(); c < chunks; c += gk_stride()) {
        size_t end = (c + 1) * GK_SUMSQ_CHUNK < n ? (c + 1) * GK_SUMSQ_CHUNK : n;
        double s = 0.0;
        for (size_t i = c * GK_SUMSQ_CHUNK; i < end; i++) {
            double v = (double)x[i];
            double sq = v * v;
            s += sq;
        }
        part[c] = s;
    }
}

/* part[chunks] = the chunks' sums added in order, by one thread. */
static __global__ void k_sumsq_total(double *part, size_t chunks)
{
    if (gk_first() != 0)
        return;
    double t = 0.0;
    for (size_t c = 0; c < chunks; c++)
        t += part[c];
    part[chunks] = t;
}

/* C = beta C over an (m, n) matrix with row stride ldc; beta = 0 writes +0. */
static __global__ void k_gemm_k0(float *c, size_t m, size_t n, size_t ldc, float beta)
{
    for (size_t i = gk_first(); i < m * n; i += gk_stride()) {
        float *e = &c[i / n * ldc + i % n];
        *e = beta == 0.0f ? 0.0f : *e * beta;
    }
}

static __global__ void k_bias_fwd(float *y, const float *b, size_t n, uint32_t dim)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        y[i] += b[i % dim];
}

static __global__ void k_bias_bwd(float *db, const float *dy, uint32_t n, uint32_t dim)
{
    for (size_t c = gk_first(); c < (size_t)dim; c += gk_stride()) {
        float s = 0.0f;
        for (uint32_t r = 0; r < n; r++)
            s += dy[(size_t)r * dim + c];
        db[c] = s;
    }
}

static __global__ void k_relu_fwd(float *x, size_t n)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        x[i] = elem_relu(x[i]);
}

static __global__ void k_elu_fwd(float *x, size_t n)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        x[i] = elem_elu(x[i]);
}

static __global__ void k_elu_bwd(float *dx, const float *y, size_t n)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        dx[i] = elem_elu_bwd(dx[i], y[i]);
}

static __global__ void k_relu_bwd(float *dx, const float *y, size_t n)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        dx[i] = elem_relu_bwd(dx[i], y[i]);
}

/* One thread per pair of elements 2j, 2j + 1: one draw of the stream. */
static __global__ void k_dropout_fwd(float *x, uint8_t *mask, size_t n, uint64_t thr, float scale, uint64_t seed)
{
    for (size_t j = gk_first(); j < (n + 1) / 2; j += gk_stride()) {
        uint64_t r = elem_splitmix_at(seed, j);
        for (unsigned half = 0; half < 2 && 2 * j + half < n; half++) {
            size_t i = 2 * j + half;
            bool keep = elem_dropout_keep(r, half, thr);
            mask[i] = keep;
            x[i] = elem_dropout_apply(x[i], keep, scale);
        }
    }
}

static __global__ void k_dropout_bwd(float *dx, const uint8_t *mask, size_t n, float scale)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        dx[i] = elem_dropout_apply(dx[i], mask[i] != 0, scale);
}

static __global__ void k_sgd(float *p, const float *grad, size_t n, float lr)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        p[i] = elem_sgd(p[i], grad[i], lr);
}

static __global__ void k_adam(float *p, const float *grad, float *m, float *v, size_t n, struct elem_adam c)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        elem_adam_update(&p[i], &m[i], &v[i], grad[i], &c);
}

/* ---- feature rows --------------------------------------------------------------------------------------- */

static __global__ void k_gather_f16(float *x, const unsigned char *rows, size_t stride, const uint32_t *alias,
                                    uint32_t dim, size_t n)
{
    for (size_t i = gk_first(); i < n; i += gk_stride()) {
        const uint16_t *row = (const uint16_t *)(const void *)(rows + (size_t)alias[i / dim] * stride);
        x[i] = elem_f16_to_f32(row[i % dim]);
    }
}

static __global__ void k_gather_f32(float *x, const unsigned char *rows, size_t stride, const uint32_t *alias,
                                    uint32_t dim, size_t n)
{
    for (size_t i = gk_first(); i < n; i += gk_stride()) {
        const float *row = (const float *)(const void *)(rows + (size_t)alias[i / dim] * stride);
        x[i] = row[i % dim];
    }
}

static __global__ void k_f16_to_f32(float *out, const uint16_t *in, size_t n)
{
    for (size_t i = gk_first(); i < n; i += gk_stride())
        out[i] = elem_f16_to_f32(in[i]);
}

/* ---- loss ---------------------------------------------------------------------------------------------- */

/* The loss total and counts, written by k_ce_total. */
struct ce_out {
    double total;
    uint32_t labelled, correct;
};

/* Row r: flags bit 0 = labelled, bit 1 = its argmax is the label; for a
 * labelled row its lse and its loss lse - x[label]. */
static __global__ void k_ce_rows(const float *logits, const int32_t *labels, uint32_t n, uint32_t classes, double *lse,
                                 double *loss, uint8_t *flags)
{
    for (size_t r = gk_first(); r < (size_t)n; r += gk_stride()) {
        int32_t lab = labels[r];
        if (lab < 0 || (uint32_t)lab >= classes) {
            flags[r] = 0;
            continue;
        }
        const float *x = logits + r * classes;
        uint32_t arg;
        double l = elem_ce_lse(x, classes, &arg);
        lse[r] = l;
        loss[r] = l - (double)x[lab];
        flags[r] = (uint8_t)(1u | (arg == (uint32_t)lab ? 2u : 0u));
    }
}

/* One thread: the counts, and the losses of the labelled rows summed in
 * row order (ops_cross_entropy's order). */
static __global__ void k_ce_total(const double *loss, const uint8_t *flags, uint32_t n, struct ce_out *out)
{
    if (blockIdx.x != 0 || threadIdx.x != 0)
        return;
    double total = 0.0;
    uint32_t nl = 0, ok = 0;
    for (uint32_t r = 0; r < n; r++) {
        if (!(flags[r] & 1u))
            continue;
        nl++;
        ok += (flags[r] >> 1) & 1u;
        total += loss[r];
    }
    out->total = total;
    out->labelled = nl;
    out->correct = ok;
}

static __global__ void k_ce_grad(float *dlogits, const float *logits, const int32_t *labels, uint32_t classes,
                                 const double *lse, const uint8_t *flags, const struct ce_out *out, size_t n)
{
    for (size_t i = gk_first(); i < n; i += gk_stride()) {
        size_t r = i / classes, c = i % classes;
        dlogits[i] = flags[r] & 1u ? elem_ce_grad(logits[i], lse[r], c == (size_t)labels[r], out->labelled) : 0.0f;
    }
}

/* ---- context, device, memory ------------------------------------------------------------------------------ */

int gk_device_count(int *n, char *err, size_t errlen)
{
    *n = 0;
    int rc = CUDA_RC(cudaGetDeviceCount(n), err, errlen);
    if (rc) {
        *n = 0;
        return rc;
    }
    return 0;
}

int gk_ctx_init(struct gk_ctx *g, enum gk_math math, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    g->math = math;
    int n, rc = gk_device_count(&n, err, errlen);
    if (rc)
        return rc;
    if (n < 1) {
        if (err && errlen)
            snprintf(err, errlen, "no CUDA device: the runtime reports 0 devices; run with --cpu");
        return -ENODEV;
    }
    cudaStream_t s, c;
    if ((rc = CUDA_RC(cudaStreamCreateWithFlags(&s, cudaStreamDefault), err, errlen)) != 0)
        goto err;
    g->stream = s;
    if ((rc = CUDA_RC(cudaStreamCreateWithFlags(&c, cudaStreamNonBlocking), err, errlen)) != 0)
        goto err;
    g->copy = c;
#if !defined(GK_SHIM) || defined(__CUDACC__)
    {
        cublasHandle_t h;
        if ((rc = CUBLAS_RC(cublasCreate(&h), err, errlen)) != 0)
            goto err;
        g->blas = h;
        cublasMath_t mode = math == GK_MATH_TF32   ? CUBLAS_TF32_TENSOR_OP_MATH
                            : math == GK_MATH_FP32 ? CUBLAS_DEFAULT_MATH
                                                   : CUBLAS_PEDANTIC_MATH;
        if ((rc = CUBLAS_RC(cublasSetStream(h, s), err, errlen)) != 0 ||
            (rc = CUBLAS_RC(cublasSetMathMode(h, mode), err, errlen)) != 0)
            goto err;
    }
#endif
    return 0;
err:
    gk_ctx_free(g);
    return rc;
}

void gk_ctx_free(struct gk_ctx *g)
{
    if (!g)
        return;
    if (g->stream)
        cudaStreamSynchronize((cudaStream_t)g->stream);
#if !defined(GK_SHIM) || defined(__CUDACC__)
    if (g->blas)
        cublasDestroy((cublasHandle_t)g->blas);
#endif
    if (g->copy)
        cudaStreamSynchronize((cudaStream_t)g->copy);
    cudaFree(g->scratch);
    if (g->copy)
        cudaStreamDestroy((cudaStream_t)g->copy);
    if (g->stream)
        cudaStreamDestroy((cudaStream_t)g->stream);
    g->copy = NULL;
    g->stream = NULL;
    g->blas = NULL;
    g->scratch = NULL;
    g->scratch_bytes = 0;
}

void *gk_ctx_stream(const struct gk_ctx *g)
{
    return g->stream;
}

const char *gk_ctx_error(const struct gk_ctx *g)
{
    return g->err;
}

int gk_sync(struct gk_ctx *g)
{
    return GK_CUDA(g, cudaStreamSynchronize((cudaStream_t)g->stream));
}

int gk_set_device(int device, char *err, size_t errlen)
{
    int n, rc = gk_device_count(&n, err, errlen);
    if (rc)
        return rc;
    if (device < 0 || device >= n) {
        if (err && errlen && n == 0)
            snprintf(err, errlen, "CUDA device %d: the runtime reports no device; run with --cpu", device);
        else if (err && errlen)
            snprintf(err, errlen, "CUDA device %d does not exist: the runtime sees %d device%s (0 to %d)", device, n,
                     n == 1 ? "" : "s", n - 1);
        return -ENODEV;
    }
    return CUDA_RC(cudaSetDevice(device), err, errlen);
}

int gk_malloc(struct gk_ctx *g, void **p, size_t bytes)
{
    *p = NULL;
    if (bytes == 0)
        return 0;
    return GK_CUDA(g, cudaMalloc(p, bytes));
}

void gk_free(void *p)
{
    if (p)
        cudaFree(p);
}

int gk_upload(struct gk_ctx *g, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return 0;
    int rc = GK_CUDA(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)g->stream));
    return rc ? rc : gk_sync(g);
}

int gk_download(struct gk_ctx *g, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0)
        return 0;
    int rc = GK_CUDA(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)g->stream));
    return rc ? rc : gk_sync(g);
}

int gk_host_alloc(struct gk_ctx *g, void **p, size_t bytes)
{
    *p = NULL;
    if (bytes == 0)
        return 0;
    return GK_CUDA(g, cudaHostAlloc(p, bytes, cudaHostAllocDefault));
}

void gk_host_free(void *p)
{
    if (p)
        cudaFreeHost(p);
}

int gk_event_init(struct gk_ctx *g, struct gk_event *e)
{
    cudaEvent_t ev;
    e->ev = NULL;
    int rc = GK_CUDA(g, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    if (rc == 0)
        e->ev = ev;
    return rc;
}

void gk_event_free(struct gk_event *e)
{
    if (e && e->ev) {
        cudaEventDestroy((cudaEvent_t)e->ev);
        e->ev = NULL;
    }
}

int gk_event_record(struct gk_ctx *g, struct gk_event *e)
{
    return GK_CUDA(g, cudaEventRecord((cudaEvent_t)e->ev, (cudaStream_t)g->stream));
}

int gk_event_sync(struct gk_ctx *g, struct gk_event *e)
{
    return GK_CUDA(g, cudaEventSynchronize((cudaEvent_t)e->ev));
}

int gk_upload_async(struct gk_ctx *g, void *dst, const void *src, size_t bytes, const struct gk_event *after,
                    struct gk_event *done)
{
    cudaStream_t c = (cudaStream_t)g->copy, s = (cudaStream_t)g->stream;
    int rc;
    if (after && (rc = GK_CUDA(g, cudaStreamWaitEvent(c, (cudaEvent_t)after->ev, 0))) != 0)
        return rc;
    if (bytes && (rc = GK_CUDA(g, cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c))) != 0)
        return rc;
    /* done marks the copy's end for both the host and the work stream
     * (a scratch event of its own when the caller wants none) */
    cudaEvent_t ev = done ? (cudaEvent_t)done->ev : NULL;
    bool own = !ev;
    if (own && (rc = GK_CUDA(g, cudaEventCreateWithFlags(&ev, cudaEventDisableTiming))) != 0)
        return rc;
    if ((rc = GK_CUDA(g, cudaEventRecord(ev, c))) == 0)
        rc = GK_CUDA(g, cudaStreamWaitEvent(s, ev, 0));
    if (own)
        cudaEventDestroy(ev); /* released once the waits on it are done */
    return rc;
}

/* At least bytes of device scratch in g->scratch (its contents lost when
 * it grows). */
static int scratch_need(struct gk_ctx *g, size_t bytes)
{
    if (bytes <= g->scratch_bytes)
        return 0;
    size_t cap = bytes + bytes / 4 + 256;
    cudaFree(g->scratch); /* waits for the work that used it */
    g->scratch = NULL;
    g->scratch_bytes = 0;
    int rc = GK_CUDA(g, cudaMalloc(&g->scratch, cap));
    if (rc == 0)
        g->scratch_bytes = cap;
    return rc;
}

/* ---- the operators ------------------------------------------------------------------------------------------ */

int gk_gemm(struct gk_ctx *g, bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
            const float *b, size_t ldb, float beta, float *c, size_t ldc)
{
    if (m == 0 || n == 0)
        return 0;
    if (k == 0)
        return GK_RUN(g, m * n, k_gemm_k0, c, m, n, ldc, beta);
    if (m > INT_MAX || n > INT_MAX || k > INT_MAX || lda > INT_MAX || ldb > INT_MAX || ldc > INT_MAX)
        return gk_fail(g, -EINVAL, "gk_gemm: a size past INT_MAX (m %zu, n %zu, k %zu, lda %zu, ldb %zu, ldc %zu)", m,
                       n, k, lda, ldb, ldc);
#if defined(GK_SHIM) && !defined(__CUDACC__)
    ops_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return 0;
#else
    /* row-major C (m, n) is column-major C^T (n, m): C^T = op(B)^T op(A)^T,
     * and a row-major operand read column-major is already transposed */
    return CUBLAS_RC(cublasSgemm((cublasHandle_t)g->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                 ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m, (int)k, &alpha, b, (int)ldb, a,
                                 (int)lda, &beta, c, (int)ldc),
                     g->err, sizeof g->err);
#endif
}

int gk_zero(struct gk_ctx *g, float *x, size_t n)
{
    if (n == 0)
        return 0;
    return GK_CUDA(g, cudaMemsetAsync(x, 0, n * sizeof *x, (cudaStream_t)g->stream));
}

int gk_copy(struct gk_ctx *g, float *y, const float *x, size_t n)
{
    if (n == 0)
        return 0;
    return GK_CUDA(g, cudaMemcpyAsync(y, x, n * sizeof *y, cudaMemcpyDeviceToDevice, (cudaStream_t)g->stream));
}

int gk_scale(struct gk_ctx *g, float *x, size_t n, float alpha)
{
    return GK_RUN(g, n, k_scale, x, n, alpha);
}

int gk_any_nonfinite(struct gk_ctx *g, const float *x, size_t n, float *flag, bool *any)
{
    float h = 0.0f;
    int rc = gk_zero(g, flag, 1);
    if (rc == 0 && n)
        rc = GK_RUN(g, n, k_any_nonfinite, x, n, flag);
    if (rc == 0)
        rc = gk_download(g, &h, flag, sizeof h); /* waits */
    *any = h != 0.0f;
    return rc;
}

size_t gk_sumsq_scratch(size_t n)
{
    return (n + GK_SUMSQ_CHUNK - 1) / GK_SUMSQ_CHUNK + 1;
}

int gk_sumsq(struct gk_ctx *g, const float *x, size_t n, double *scratch, double *out)
{
    size_t chunks = (n + GK_SUMSQ_CHUNK - 1) / GK_SUMSQ_CHUNK;
    int rc = chunks ? GK_RUN(g, chunks, k_sumsq_chunks, x, n, scratch) : 0;
    if (rc == 0)
        rc = GK_RUN(g, 1, k_sumsq_total, scratch, chunks);
    if (rc == 0)
        rc = gk_download(g, out, scratch + chunks, sizeof *out); /* waits */
    return rc;
}

int gk_linear_fwd(struct gk_ctx *g, float *y, const float *x, const float *w, uint32_t n, uint32_t in, uint32_t out,
                  bool acc)
{
    return gk_gemm(g, false, true, n, out, in, 1.0f, x, in, w, in, acc ? 1.0f : 0.0f, y, out);
}

int gk_linear_bwd_w(struct gk_ctx *g, float *dw, const float *dy, const float *x, uint32_t n, uint32_t in, uint32_t out,
                    bool acc)
{
    return gk_gemm(g, true, false, out, in, n, 1.0f, dy, out, x, in, acc ? 1.0f : 0.0f, dw, in);
}

int gk_linear_bwd_x(struct gk_ctx *g, float *dx, const float *dy, const float *w, uint32_t n, uint32_t in, uint32_t out,
                    bool acc)
{
    return gk_gemm(g, false, false, n, in, out, 1.0f, dy, out, w, in, acc ? 1.0f : 0.0f, dx, in);
}

int gk_bias_fwd(struct gk_ctx *g, float *y, const float *b, uint32_t n, uint32_t dim)
{
    size_t total = (size_t)n * dim;
    return GK_RUN(g, total, k_bias_fwd, y, b, total, dim);
}

int gk_bias_bwd(struct gk_ctx *g, float *db, const float *dy, uint32_t n, uint32_t dim)
{
    return GK_RUN(g, dim, k_bias_bwd, db, dy, n, dim);
}

int gk_relu_fwd(struct gk_ctx *g, float *x, size_t n)
{
    return GK_RUN(g, n, k_relu_fwd, x, n);
}

int gk_elu_fwd(struct gk_ctx *g, float *x, size_t n)
{
    return GK_RUN(g, n, k_elu_fwd, x, n);
}

int gk_elu_bwd(struct gk_ctx *g, float *dx, const float *y, size_t n)
{
    return GK_RUN(g, n, k_elu_bwd, dx, y, n);
}

int gk_relu_bwd(struct gk_ctx *g, float *dx, const float *y, size_t n)
{
    return GK_RUN(g, n, k_relu_bwd, dx, y, n);
}

int gk_dropout_fwd(struct gk_ctx *g, float *x, uint8_t *mask, size_t n, float p, uint64_t seed)
{
    uint64_t thr = elem_dropout_thr(p);
    float scale = 1.0f / (1.0f - p);
    return GK_RUN(g, (n + 1) / 2, k_dropout_fwd, x, mask, n, thr, scale, seed);
}

int gk_dropout_bwd(struct gk_ctx *g, float *dx, const uint8_t *mask, size_t n, float p)
{
    float scale = 1.0f / (1.0f - p);
    return GK_RUN(g, n, k_dropout_bwd, dx, mask, n, scale);
}

int gk_gather_rows(struct gk_ctx *g, float *x, const unsigned char *rows, size_t stride, const uint32_t *alias,
                   uint32_t n, uint32_t dim, bool f16)
{
    size_t total = (size_t)n * dim;
    if (f16)
        return GK_RUN(g, total, k_gather_f16, x, rows, stride, alias, dim, total);
    return GK_RUN(g, total, k_gather_f32, x, rows, stride, alias, dim, total);
}

int gk_f16_to_f32(struct gk_ctx *g, float *out, const uint16_t *in, size_t n)
{
    return GK_RUN(g, n, k_f16_to_f32, out, in, n);
}

int gk_cross_entropy(struct gk_ctx *g, const float *logits, const int32_t *labels, uint32_t n, uint32_t classes,
                     float *dlogits, float *loss, uint32_t *labelled, uint32_t *correct)
{
    struct ce_out res = {0.0, 0, 0};
    if (n > 0) {
        /* scratch: the result, then lse and loss (n doubles each), then the flags */
        size_t off_lse = 64, off_loss = off_lse + (size_t)n * sizeof(double);
        size_t off_flags = off_loss + (size_t)n * sizeof(double);
        int rc = scratch_need(g, off_flags + n);
        if (rc)
            return rc;
        unsigned char *s = (unsigned char *)g->scratch;
        struct ce_out *dres = (struct ce_out *)(void *)s;
        double *lse = (double *)(void *)(s + off_lse), *rowloss = (double *)(void *)(s + off_loss);
        uint8_t *flags = s + off_flags;
        if ((rc = GK_RUN(g, n, k_ce_rows, logits, labels, n, classes, lse, rowloss, flags)) != 0 ||
            (rc = GK_RUN(g, 1, k_ce_total, rowloss, flags, n, dres)) != 0)
            return rc;
        if (dlogits && (rc = GK_RUN(g, (size_t)n * classes, k_ce_grad, dlogits, logits, labels, classes, lse, flags,
                                    dres, (size_t)n * classes)) != 0)
            return rc;
        if ((rc = gk_download(g, &res, dres, sizeof res)) != 0)
            return rc;
    }
    if (loss)
        *loss = res.labelled ? (float)(res.total / res.labelled) : 0.0f;
    if (labelled)
        *labelled = res.labelled;
    if (correct)
        *correct = res.correct;
    return 0;
}

int gk_adam(struct gk_ctx *g, float *p, const float *grad, float *m, float *v, size_t n, float lr, float b1, float b2,
            float eps, float wd, bool decoupled, uint64_t t)
{
    struct elem_adam c = elem_adam_prep(lr, b1, b2, eps, wd, decoupled, t);
    return GK_RUN(g, n, k_adam, p, grad, m, v, n, c);
}

int gk_sgd(struct gk_ctx *g, float *p, const float *grad, size_t n, float lr)
{
    return GK_RUN(g, n, k_sgd, p, grad, n, lr);
}

#if defined(GK_SHIM) && !defined(__CUDACC__)
void gk_shim_set_reverse(bool reverse)
{
    gk_shim_reverse = reverse;
}
#endif