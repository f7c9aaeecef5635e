/* kernels.h - the CUDA twins of the CPU operators (ops/ops.h; DESIGN.md
 * section 6, issue 15), as a C API over device pointers, and what a
 * trainer backend needs around them (device memory, copies, gathers of
 * feature rows, the loss brought back to the host, Adam and SGD).
 *
 * Convention: for each ops_X(...) the models use there is a
 * gk_X(struct gk_ctx *g, ...) with the same arguments, in the same order,
 * but device pointers (and a struct gk_block where ops_X takes a struct
 * ops_block), with the same contract: the same shapes, the same
 * overwrite-or-add rule, the same results. Every non-GEMM operator gives
 * the same bits as its CPU twin (docs/gpu.md, "Kernels": shared
 * per-element bodies from ops/elem.h, the CPU's summation order, no fused
 * multiply-adds); GEMMs go to cuBLAS and agree within rounding.
 *
 * Calls queue work on the context's stream and return without waiting,
 * except where a function says it blocks (gk_ctx_init, gk_upload,
 * gk_download, gk_sync, gk_cross_entropy, gk_malloc, gk_free,
 * gk_host_alloc, gk_event_sync). A context has a second stream for
 * copies (gk_upload_async), ordered against the first by events. They return
 * 0, or a negative errno-style code with the message in g->err
 * (gk_ctx_error): -EINVAL for arguments the kernels cannot take (a
 * backward without the block's transpose, a GEMM size past INT_MAX),
 * -ENOMEM for device memory, -ENODEV for no usable device, -EIO for any
 * other CUDA or cuBLAS failure, a failed launch included (every launch is
 * checked with cudaGetLastError). An error of a kernel that already ran
 * (an illegal address) is reported by the next blocking call. Sizes are
 * not checked beyond that (hot paths), as in ops/.
 *
 * Builds: sluice_gpu compiles kernels.cu and kernels_graph.cu with nvcc.
 * sluice_gpu_shim compiles the same sources as host C++ through
 * gpu/shim.h: "device" pointers are host memory, a launch is loops over
 * blocks and threads, and gk_gemm calls ops_gemm (there is no cuBLAS). The
 * shim is how the tests check the kernels' index arithmetic on machines
 * without a GPU (tests/test_gpu_shim.c).
 *
 * Threads: a context is used by one thread at a time. */
#ifndef SLUICE_GPU_KERNELS_H
#define SLUICE_GPU_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#define restrict __restrict__ /* ops.h is C; C++ spells it __restrict__ */
#include "ops/ops.h"
#undef restrict
#else
#include "ops/ops.h"
#endif

/* How cuBLAS may compute a GEMM: PEDANTIC (IEEE float, cuBLAS's
 * CUBLAS_PEDANTIC_MATH; what the tests use), FP32 (its default math: float
 * with its fastest float kernels), TF32 (tensor cores with 10-bit
 * mantissa inputs: faster, off from the CPU by about 1e-3 relative). The
 * shim build ignores it. */
enum gk_math {
    GK_MATH_PEDANTIC = 0,
    GK_MATH_FP32 = 1,
    GK_MATH_TF32 = 2,
};

struct gk_ctx {
    void *stream; /* cudaStream_t: all work of this context, in order */
    void *copy;   /* cudaStream_t: gk_upload_async's copies, beside the work */
    void *blas;   /* cublasHandle_t on that stream (NULL in the shim build) */
    enum gk_math math;
    void *scratch; /* device scratch (cross-entropy's per-row values); grows */
    size_t scratch_bytes;
    char err[320]; /* the last failure: statement, function, file, line, the library's message */
};

/* One sampled block on the device (the twin of struct ops_block): the
 * sizes on the host, the arrays in device memory. Forward operators read
 * indptr and src. Backward operators that scatter into sources (and
 * gk_gcn_norm, which counts out-degrees) read the transpose instead of
 * adding with atomics, so that they are deterministic and add in the
 * CPU's order: for each source u, its out-edges in increasing edge order
 * (t_indptr[u] .. t_indptr[u+1]), each with its destination t_dst and its
 * edge index t_edge (the position in src[]). gk_block_transpose_host
 * builds them; the trainer uploads them with the batch. */
struct gk_block {
    uint32_t n_dst, n_src, n_edges; /* n_edges = indptr[n_dst] */
    const uint32_t *indptr;         /* (n_dst + 1) */
    const uint32_t *src;            /* (n_edges) local source ids < n_src */
    const uint32_t *t_indptr;       /* (n_src + 1); NULL: forward only */
    const uint32_t *t_dst;          /* (n_edges) */
    const uint32_t *t_edge;         /* (n_edges) */
    const uint32_t *deg;            /* (n_src) the graph's in-degrees, or NULL (ops_block's deg) */
};

/* ---- context, device, memory ------------------------------------------------------------------------- */

/* The devices the CUDA runtime sees (1 in the shim build). 0 with *n set,
 * or -ENODEV (no driver, no device: *n = 0) / -EIO with the message in err. */
int gk_device_count(int *n, char *err, size_t errlen);

/* Makes device `device` current on the calling thread (cudaSetDevice):
 * the contexts, allocations and launches this thread makes from then on
 * use it. 0, or -ENODEV when there is no such device (the message says
 * how many there are) / -EIO, with the message in err. The shim build
 * has one device, 0. */
int gk_set_device(int device, char *err, size_t errlen);

/* Creates two streams (work, copies) and a cuBLAS handle on the current device, with the
 * given GEMM math. Blocks. 0, or -ENODEV / -ENOMEM / -EIO with the message
 * in err; g is then safe to gk_ctx_free. */
int gk_ctx_init(struct gk_ctx *g, enum gk_math math, char *err, size_t errlen);
/* Waits for the stream, frees the scratch, the handle and the stream.
 * Accepts NULL and a half-built or freed context. */
void gk_ctx_free(struct gk_ctx *g);
/* The stream as a cudaStream_t, for the caller's own work on it. */
void *gk_ctx_stream(const struct gk_ctx *g);
/* The last failure's message ("" when none). */
const char *gk_ctx_error(const struct gk_ctx *g);
/* Waits until everything queued so far has run. 0, or the code of an
 * error of a kernel that ran. */
int gk_sync(struct gk_ctx *g);

/* Device memory: *p = bytes of device memory (NULL for 0 bytes). Blocks
 * (cudaMalloc). 0 or -ENOMEM. */
int gk_malloc(struct gk_ctx *g, void **p, size_t bytes);
/* Frees p (NULL is fine); waits for the device first (cudaFree). */
void gk_free(void *p);
/* Host to device and device to host; both wait until the copy is done,
 * so the host buffer may be reused at once (pageable memory). */
int gk_upload(struct gk_ctx *g, void *dst, const void *src, size_t bytes);
int gk_download(struct gk_ctx *g, void *dst, const void *src, size_t bytes);

/* ---- asynchronous uploads -------------------------------------------------------------------------------- */

/* Page-locked host memory (cudaHostAlloc): an upload from it runs on the
 * copy engine while kernels run; from pageable memory the runtime stages
 * it and the call waits for that. Blocks. 0, or -ENOMEM with the message
 * in g->err. gk_host_free accepts NULL. */
int gk_host_alloc(struct gk_ctx *g, void **p, size_t bytes);
void gk_host_free(void *p);

/* A point in one of the context's streams, which the other stream or the
 * host can wait for. A zeroed struct is "no event" (gk_event_free accepts
 * it); an event never recorded has completed. */
struct gk_event {
    void *ev; /* cudaEvent_t, timing off */
};
int gk_event_init(struct gk_ctx *g, struct gk_event *e);
void gk_event_free(struct gk_event *e);
/* Records e behind the work queued on the context's stream so far. */
int gk_event_record(struct gk_ctx *g, struct gk_event *e);
/* Waits (the host) until e's last record has run; 0, or the code of a
 * failure in the work before it. */
int gk_event_sync(struct gk_ctx *g, struct gk_event *e);

/* Queues the copy of `bytes` from host src to device dst on the context's
 * copy stream and returns without waiting. Ordering:
 *   - the copy starts only after the work `after` was recorded behind
 *     (gk_event_record on the work stream; NULL: at once), so it cannot
 *     overwrite what that work still reads, and may run while the work
 *     queued since runs;
 *   - work queued on the context's stream after this call runs only once
 *     the copy is done (the stream waits for it);
 *   - `done` (may be NULL) is recorded behind the copy: src must not be
 *     written, nor freed, until gk_event_sync(done) returns.
 * src should be gk_host_alloc memory (see there). 0 or -EIO / -EINVAL
 * with the message in g->err. */
int gk_upload_async(struct gk_ctx *g, void *dst, const void *src, size_t bytes, const struct gk_event *after,
                    struct gk_event *done);

/* ---- blocks ---------------------------------------------------------------------------------------------- */

/* The transpose of host block b, by a counting sort over src[]: t_indptr
 * (n_src + 1), and t_dst, t_edge (indptr[n_dst] each) with each source's
 * out-edges in increasing edge order. Deterministic, O(n_src + edges).
 * 0, or -EINVAL (message in err) when a source id is >= n_src or indptr
 * is not non-decreasing from 0. */
int gk_block_transpose_host(const struct ops_block *b, uint32_t *t_indptr, uint32_t *t_dst, uint32_t *t_edge, char *err,
                            size_t errlen);

/* Device bytes gk_block_upload needs for b with its transpose. */
size_t gk_block_bytes(const struct ops_block *b);
/* Copies host block b and its transpose (from gk_block_transpose_host)
 * into dev (gk_block_bytes(b) bytes of device memory, 4-byte aligned) and
 * points *out at them (out->deg NULL: b->deg is not copied; point it at
 * device degrees yourself). Blocks until copied. */
int gk_block_upload(struct gk_ctx *g, struct gk_block *out, void *dev, const struct ops_block *b,
                    const uint32_t *t_indptr, const uint32_t *t_dst, const uint32_t *t_edge);

/* ---- the operators (ops/ops.h has each contract) ---------------------------------------------------------- */

/* Row-major C = alpha op(A) op(B) + beta C through cublasSgemm on the
 * transposed problem (C^T = op(B)^T op(A)^T in column-major), in the
 * context's math. beta = 0 ignores C (NaNs too), k = 0 gives C = beta C.
 * -EINVAL when m, n, k or a leading dimension passes INT_MAX. */
int gk_gemm(struct gk_ctx *g, bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda,
            const float *b, size_t ldb, float beta, float *c, size_t ldc);

int gk_zero(struct gk_ctx *g, float *x, size_t n);
int gk_copy(struct gk_ctx *g, float *y, const float *x, size_t n);
int gk_scale(struct gk_ctx *g, float *x, size_t n, float alpha);
/* *any = some of x (n, device) is NaN or infinite (ops_count_nonfinite's
 * test), reduced on the device into flag (one device float, scratch) and
 * downloaded: blocks until the answer is on the host. */
int gk_any_nonfinite(struct gk_ctx *g, const float *x, size_t n, float *flag, bool *any);
/* *out = the sum of squares of x (n, device) with ops_sumsq's bits: one
 * thread per chunk of GK_SUMSQ_CHUNK elements sums it in element order
 * into scratch[chunk], then one thread adds the chunks in order (double
 * throughout; the kernels build without fused multiply-add). scratch:
 * gk_sumsq_scratch(n) doubles of device memory. Waits (downloads *out). */
#define GK_SUMSQ_CHUNK 4096 /* = OPS_SUMSQ_CHUNK (ops/ops.h) */
size_t gk_sumsq_scratch(size_t n);
int gk_sumsq(struct gk_ctx *g, const float *x, size_t n, double *scratch, double *out);

int gk_linear_fwd(struct gk_ctx *g, float *y, const float *x, const float *w, uint32_t n, uint32_t in, uint32_t out,
                  bool acc);
int gk_linear_bwd_w(struct gk_ctx *g, float *dw, const float *dy, const float *x, uint32_t n, uint32_t in, uint32_t out,
                    bool acc);
int gk_linear_bwd_x(struct gk_ctx *g, float *dx, const float *dy, const float *w, uint32_t n, uint32_t in, uint32_t out,
                    bool acc);

int gk_bias_fwd(struct gk_ctx *g, float *y, const float *b, uint32_t n, uint32_t dim);
/* One thread per column sums the rows in order: exact, but serial in n. */
int gk_bias_bwd(struct gk_ctx *g, float *db, const float *dy, uint32_t n, uint32_t dim);

int gk_relu_fwd(struct gk_ctx *g, float *x, size_t n);
int gk_relu_bwd(struct gk_ctx *g, float *dx, const float *y, size_t n);
int gk_elu_fwd(struct gk_ctx *g, float *x, size_t n);
int gk_elu_bwd(struct gk_ctx *g, float *dx, const float *y, size_t n);

/* The mask is the CPU's bit for bit (ops/elem.h: counter-based splitmix64). */
int gk_dropout_fwd(struct gk_ctx *g, float *x, uint8_t *mask, size_t n, float p, uint64_t seed);
int gk_dropout_bwd(struct gk_ctx *g, float *dx, const uint8_t *mask, size_t n, float p);

/* x (n, dim) row i = row alias[i] of the device row array `rows` (byte
 * stride `stride`), f16 widened or f32 copied. */
int gk_gather_rows(struct gk_ctx *g, float *x, const unsigned char *rows, size_t stride, const uint32_t *alias,
                   uint32_t n, uint32_t dim, bool f16);
int gk_f16_to_f32(struct gk_ctx *g, float *out, const uint16_t *in, size_t n);

int gk_agg_sum_fwd(struct gk_ctx *g, float *out, const struct gk_block *b, const float *h, uint32_t dim);
int gk_agg_sum_bwd(struct gk_ctx *g, float *dh, const struct gk_block *b, const float *dout, uint32_t dim);
int gk_agg_mean_fwd(struct gk_ctx *g, float *out, const struct gk_block *b, const float *h, uint32_t dim);
int gk_agg_mean_bwd(struct gk_ctx *g, float *dh, const struct gk_block *b, const float *dout, uint32_t dim);
int gk_agg_max_fwd(struct gk_ctx *g, float *out, float *ties, const struct gk_block *b, const float *h, uint32_t dim);
int gk_agg_max_bwd(struct gk_ctx *g, float *dh, const struct gk_block *b, const float *h, const float *out,
                   const float *ties, const float *dout, uint32_t dim);

/* deg (n_src) gets the out-degrees, as ops_gcn_norm leaves them. Needs
 * the transpose, unless b->deg gives the graph's degrees (then deg is not
 * touched). */
int gk_gcn_norm(struct gk_ctx *g, float *norm_src, float *norm_dst, uint32_t *deg, const struct gk_block *b);
int gk_agg_gcn_fwd(struct gk_ctx *g, float *out, const struct gk_block *b, const float *norm_src, const float *norm_dst,
                   const float *h, uint32_t dim);
int gk_agg_gcn_bwd(struct gk_ctx *g, float *dh, const struct gk_block *b, const float *norm_src, const float *norm_dst,
                   const float *dout, uint32_t dim);

int gk_gat_score_fwd(struct gk_ctx *g, float *s, const float *z, const float *a, uint32_t n, uint32_t heads,
                     uint32_t hd);
/* da's sum over the n rows runs in one thread per column, in row order. */
int gk_gat_score_bwd(struct gk_ctx *g, float *dz, float *da, const float *ds, const float *z, const float *a,
                     uint32_t n, uint32_t heads, uint32_t hd);
int gk_gat_edge_fwd(struct gk_ctx *g, float *e_edge, float *e_self, const struct gk_block *b, const float *el,
                    const float *er, uint32_t heads, float slope);
int gk_gat_edge_bwd(struct gk_ctx *g, float *del, float *der, const struct gk_block *b, const float *de_edge,
                    const float *de_self, const float *el, const float *er, uint32_t heads, float slope);
int gk_edge_softmax_fwd(struct gk_ctx *g, float *a_edge, float *a_self, const struct gk_block *b, uint32_t heads);
int gk_edge_softmax_bwd(struct gk_ctx *g, float *g_edge, float *g_self, const float *a_edge, const float *a_self,
                        const struct gk_block *b, uint32_t heads);
int gk_gat_sum_fwd(struct gk_ctx *g, float *out, const struct gk_block *b, const float *a_edge, const float *a_self,
                   const float *z, uint32_t heads, uint32_t hd);
int gk_gat_sum_bwd(struct gk_ctx *g, float *dz, float *g_edge, float *g_self, const struct gk_block *b,
                   const float *a_edge, const float *a_self, const float *z, const float *dout, uint32_t heads,
                   uint32_t hd);
int gk_head_mean_fwd(struct gk_ctx *g, float *out, const float *in, uint32_t n, uint32_t heads, uint32_t d);
int gk_head_mean_bwd(struct gk_ctx *g, float *din, const float *dout, uint32_t n, uint32_t heads, uint32_t d);

/* ops_cross_entropy on device logits and labels (n of each): dlogits
 * (device, may be NULL) as there; the mean loss in *loss and the counts
 * in *labelled, *correct (host; each may be NULL). Blocks until they are
 * on the host. The per-row values are summed in row order by one thread,
 * as the CPU does. */
int gk_cross_entropy(struct gk_ctx *g, const float *logits, const int32_t *labels, uint32_t n, uint32_t classes,
                     float *dlogits, float *loss, uint32_t *labelled, uint32_t *correct);

/* The bias corrections are computed on the host from t, as ops_adam does
 * (ops/elem.h's elem_adam_prep), and reach the kernel as scalars. */
int gk_adam(struct gk_ctx *g, float *p, const float *grad, float *m, float *v, size_t n, float lr, float b1, float b2,
            float eps, float wd, bool decoupled, uint64_t t);
int gk_sgd(struct gk_ctx *g, float *p, const float *grad, size_t n, float lr);

/* Shim build only: run launches' blocks and threads in reverse order
 * (tests/test_gpu_shim.c checks that results do not depend on it). */
void gk_shim_set_reverse(bool reverse);

#ifdef __cplusplus
}
#endif

#endif
