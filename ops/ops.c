/* ops.c - the CPU operators (see ops.h; equations in docs/training.md).
 *
 * Dense products go to OpenBLAS. Everything else is a loop over rows with
 * an inner loop over the feature dimension through the small restrict
 * helpers below, which the compiler vectorises. All sums run in a fixed
 * order (dot products in 8 interleaved partial sums, combined in a fixed
 * tree), so results never depend on threads or timing. The GEMMs and the
 * loops whose every output element is computed by one iteration on its
 * own (element-wise operators, per-row aggregation and gathers) run on the
 * pool below, cut into pieces whose bounds depend on the sizes only: each
 * element gets the same arithmetic in the same order whatever the thread
 * count. Reductions across rows run on the pool only where each output
 * still gets its terms in one fixed order: the loss as per-row terms
 * summed in row order afterwards, the scatter of the sum's and mean's
 * backward by ranges of source rows, each piece walking every edge in
 * order. The bias gradient (a stream through memory, as fast on one
 * thread) and the other scatters into shared rows (max, GCN, GAT) stay on
 * one thread.
 *
 * The per-element bodies (ReLU, LeakyReLU, the dropout keep bit, half to
 * float, the dot product, the edge softmax of one destination and head,
 * a row's cross-entropy, Adam, GCN's norm) and exp/log come from
 * ops/elem.h, which the CUDA kernels (gpu/kernels.cu) share: the softmaxes
 * use elem_expf/elem_exp/elem_log, not the C library's, so that a kernel
 * gets the same bits. */
#include "ops/ops.h"

#include "ops/elem.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ops_gather_rows reads little-endian feature rows in place: a little-endian host is required"
#endif

/* ---- inner loops over the feature dimension ------------------------------------------------ */

/* y += x */
static inline void vadd(float *restrict y, const float *restrict x, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        y[i] += x[i];
}

/* y += a x */
static inline void vaxpy(float *restrict y, const float *restrict x, float a, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* y = a x */
static inline void vscale_to(float *restrict y, const float *restrict x, float a, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        y[i] = a * x[i];
}

/* y *= a */
static inline void vscale(float *restrict y, float a, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        y[i] *= a;
}

/* x . y: elem_dot (8 partial sums, then a fixed tree). */
static inline float vdot(const float *restrict x, const float *restrict y, uint32_t n)
{
    return elem_dot(x, y, n);
}

/* ---- BLAS and the thread pool ------------------------------------------------------------------ */

/* OpenBLAS gives different bits for the same product under different
 * thread counts, and even for the same rows computed in a differently
 * sized call: which micro-kernel (full tile, edge tile, or the AVX-512
 * "direct" path for small products) computes an element depends on how
 * the call is partitioned. So OpenBLAS always runs single-threaded here,
 * and ops_gemm cuts C into tiles of fixed size (GEMM_TILE x GEMM_TILE,
 * independent of the thread count), each computed by one sgemm call on
 * one thread of a small pool: every element then comes from the same call
 * shape whatever the thread count. */
#define GEMM_TILE 256

/* The pool: threads - 1 workers plus the calling thread take tasks
 * 0 .. ntasks-1 of one job from an atomic counter; the caller returns
 * when all are done. One job at a time (ops_* are not reentrant).
 *
 * A job lives on the caller's stack and is published in `job` under the
 * mutex. A worker that wakes for it joins it under the mutex (active++)
 * only while it is still published, takes tasks, and leaves (active--).
 * The caller, once the counter is past the last task, unpublishes the job
 * and waits only for the workers that joined it - never for one that has
 * not been scheduled yet: on a machine whose other core is busy with
 * other stages, a late worker would otherwise hold up every operator of
 * the batch for a time slice. A worker that wakes late finds no job (or a
 * newer one, which it may join) and goes back to sleep. */
struct pool_job {
    void (*fn)(void *arg, size_t task);
    void *arg;
    size_t ntasks;
    atomic_size_t next;
    int active; /* workers inside the job (mutex) */
};

static struct pool {
    int threads; /* including the caller; 1 = no workers */
    pthread_t *tid;
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    uint64_t gen;       /* job number, bumped to start one */
    uint64_t start_gen; /* gen when the workers were created (no job runs then) */
    struct pool_job *job; /* the published job, or NULL (mutex) */
    bool quit;
} g_pool = {.threads = 1, .mu = PTHREAD_MUTEX_INITIALIZER, .go = PTHREAD_COND_INITIALIZER,
            .done = PTHREAD_COND_INITIALIZER};

static void pool_work(struct pool_job *j)
{
    for (size_t t; (t = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->ntasks;)
        j->fn(j->arg, t);
}

static void *pool_main(void *arg)
{
    struct pool *p = arg;
    pthread_mutex_lock(&p->mu);
    uint64_t seen = p->start_gen; /* jobs before this worker was created are not its business */
    for (;;) {
        while (p->gen == seen && !p->quit)
            pthread_cond_wait(&p->go, &p->mu);
        if (p->quit)
            break;
        seen = p->gen;
        struct pool_job *j = p->job; /* NULL: that job is over already */
        if (!j)
            continue;
        j->active++;
        pthread_mutex_unlock(&p->mu);
        pool_work(j);
        pthread_mutex_lock(&p->mu);
        if (--j->active == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* Runs fn(arg, t) for t = 0 .. ntasks-1 on the pool; returns when all ran. */
static void pool_run(void (*fn)(void *, size_t), void *arg, size_t ntasks)
{
    struct pool *p = &g_pool;
    if (p->threads <= 1 || ntasks <= 1) {
        for (size_t t = 0; t < ntasks; t++)
            fn(arg, t);
        return;
    }
    struct pool_job j = {.fn = fn, .arg = arg, .ntasks = ntasks};
    atomic_init(&j.next, 0);
    pthread_mutex_lock(&p->mu);
    p->job = &j;
    p->gen++;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    pool_work(&j);
    pthread_mutex_lock(&p->mu);
    p->job = NULL; /* every task is taken: workers not in yet stay out */
    while (j.active > 0)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

static void pool_stop(struct pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->quit = true;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->threads - 1; i++)
        pthread_join(p->tid[i], NULL);
    free(p->tid);
    p->tid = NULL;
    p->threads = 1;
    p->quit = false;
}

static pthread_once_t g_blas_once = PTHREAD_ONCE_INIT;

static void blas_single(void)
{
    openblas_set_num_threads(1);
}

int ops_set_threads(int n)
{
    pthread_once(&g_blas_once, blas_single);
    if (n < 1)
        n = 1;
    if (n == g_pool.threads)
        return 0;
    pool_stop(&g_pool);
    if (n == 1)
        return 0;
    g_pool.start_gen = g_pool.gen;
    g_pool.tid = calloc((size_t)n - 1, sizeof *g_pool.tid);
    if (!g_pool.tid)
        return -ENOMEM;
    for (int i = 0; i < n - 1; i++) {
        int rc = pthread_create(&g_pool.tid[i], NULL, pool_main, &g_pool);
        if (rc) {
            g_pool.threads = i + 1; /* the i workers started */
            pool_stop(&g_pool);
            return -rc;
        }
        g_pool.threads = i + 2;
    }
    return 0;
}

int ops_threads(void)
{
    return g_pool.threads;
}

/* ---- parallel loops ------------------------------------------------------------------------------------- */

/* fn(arg, lo, hi) over [0, n) in pieces of `grain` items (the last one
 * shorter), on the pool. The pieces depend on n and grain only, and fn
 * must compute each item on its own, so the result is the same for any
 * thread count. */
struct range_job {
    void (*fn)(void *arg, size_t lo, size_t hi);
    void *arg;
    size_t n, grain;
};

static void range_task(void *a, size_t t)
{
    const struct range_job *j = a;
    size_t lo = t * j->grain, hi = j->n - lo < j->grain ? j->n : lo + j->grain;
    j->fn(j->arg, lo, hi);
}

static void par_for(size_t n, size_t grain, void (*fn)(void *, size_t, size_t), void *arg)
{
    if (g_pool.threads <= 1 || n <= grain) {
        if (n)
            fn(arg, 0, n);
        return;
    }
    struct range_job j = {.fn = fn, .arg = arg, .n = n, .grain = grain};
    pool_run(range_task, &j, (n + grain - 1) / grain);
}

#define ELEM_GRAIN ((size_t)1 << 15) /* items per piece of an element-wise loop (even: dropout draws pairs) */
#define ROW_GRAIN_FLOATS ((size_t)1 << 14) /* row loops: about this many output floats per piece */

/* rows per piece of a loop over rows of `dim` floats */
static size_t row_grain(uint32_t dim)
{
    size_t g = ROW_GRAIN_FLOATS / (dim ? dim : 1);
    return g ? g : 1;
}

/* cblas takes int sizes: a reduction longer than this is cut into pieces
 * added into C (beta = 1 after the first). Tiles bound m and n, and
 * leading dimensions are feature widths, which always fit. */
#define GEMM_KPIECE ((size_t)1 << 30)

/* A product with few tiles and a long reduction (the weight gradients:
 * out x in, summed over thousands of rows) would run on one thread: its
 * reduction is then cut into P pieces (a function of the shape only: when
 * the tiles are fewer than GEMM_KSPLIT_TILES and k is at least 2 x
 * GEMM_KSPLIT): P = k / GEMM_KSPLIT rounded up to a multiple of
 * GEMM_KSPLIT_ALIGN, piece p the rows [p k / P, (p + 1) k / P), so that
 * the pieces are of one length and their count divides among 1, 2 or 4
 * threads. Piece 0 is computed into C with beta, piece p > 0 into scratch,
 * and the scratch added to C in piece order afterwards (each row of C on
 * its own, on the pool). */
#define GEMM_KSPLIT ((size_t)2048)
#define GEMM_KSPLIT_TILES 4
#define GEMM_KSPLIT_ALIGN ((size_t)4)

struct gemm_job { /* one product */
    bool ta, tb;
    size_t m, n, k;
    float alpha, beta;
    const float *a, *b;
    float *c;
    size_t lda, ldb, ldc;
    size_t tiles_n; /* tiles across n */
    size_t tiles;   /* tiles of C */
    size_t ksplit;  /* reduction pieces (1: none) */
    float *part;    /* (ksplit - 1, m, n) partial products of pieces 1.. */
};

/* One sgemm call per GEMM_KPIECE of C's tile at (i0, j0), rows [k0, k1) of
 * the reduction, beta for the first, into c (ldc). */
static void gemm_call(const struct gemm_job *j, size_t i0, size_t j0, size_t mi, size_t nj, size_t k0, size_t k1,
                      float beta, float *c, size_t ldc)
{
    for (size_t p0 = k0; p0 < k1; p0 += GEMM_KPIECE) {
        size_t kp = k1 - p0 < GEMM_KPIECE ? k1 - p0 : GEMM_KPIECE;
        const float *ap = j->ta ? j->a + p0 * j->lda + i0 : j->a + i0 * j->lda + p0;
        const float *bp = j->tb ? j->b + j0 * j->ldb + p0 : j->b + p0 * j->ldb + j0;
        cblas_sgemm(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans, (int)mi,
                    (int)nj, (int)kp, j->alpha, ap, (int)j->lda, bp, (int)j->ldb, p0 > k0 ? 1.0f : beta, c, (int)ldc);
    }
}

static void gemm_tile(const struct gemm_job *j, size_t task)
{
    size_t t = task % j->tiles, piece = task / j->tiles;
    size_t i0 = t / j->tiles_n * GEMM_TILE, j0 = t % j->tiles_n * GEMM_TILE;
    size_t mi = j->m - i0 < GEMM_TILE ? j->m - i0 : GEMM_TILE;
    size_t nj = j->n - j0 < GEMM_TILE ? j->n - j0 : GEMM_TILE;
    size_t k0 = 0, k1 = j->k;
    float beta = j->beta, *c = j->c + i0 * j->ldc + j0;
    size_t ldc = j->ldc;
    if (j->ksplit > 1) {
        k0 = piece * j->k / j->ksplit;
        k1 = (piece + 1) * j->k / j->ksplit;
        if (piece > 0) {
            beta = 0.0f;
            c = j->part + (piece - 1) * j->m * j->n + i0 * j->n + j0;
            ldc = j->n;
        }
    }
    gemm_call(j, i0, j0, mi, nj, k0, k1, beta, c, ldc);
}

/* Tiles and reduction pieces of j (its sizes set); returns the scratch
 * floats its pieces need. */
static size_t gemm_plan(struct gemm_job *j)
{
    j->tiles_n = (j->n + GEMM_TILE - 1) / GEMM_TILE;
    j->tiles = (j->m + GEMM_TILE - 1) / GEMM_TILE * j->tiles_n;
    j->ksplit = 1;
    j->part = NULL;
    if (j->tiles < GEMM_KSPLIT_TILES && j->k >= 2 * GEMM_KSPLIT)
        j->ksplit = (j->k / GEMM_KSPLIT + GEMM_KSPLIT_ALIGN - 1) / GEMM_KSPLIT_ALIGN * GEMM_KSPLIT_ALIGN;
    return (j->ksplit - 1) * j->m * j->n;
}

/* C = beta C where k = 0 */
static void gemm_k0(const struct gemm_job *j)
{
    for (size_t i = 0; i < j->m; i++) {
        float *restrict row = j->c + i * j->ldc;
        if (j->beta == 0.0f)
            memset(row, 0, j->n * sizeof *row);
        else
            vscale(row, j->beta, (uint32_t)j->n);
    }
}

#define GEMM_SET_MAX 4

/* Several independent products run as one job on the pool: their tasks
 * back to back (first[i] = product i's first task). */
struct gemm_set {
    struct gemm_job *j;
    size_t n;
    size_t first[GEMM_SET_MAX + 1];
};

static void gemm_set_task(void *arg, size_t task)
{
    const struct gemm_set *s = arg;
    size_t i = 0;
    while (task >= s->first[i + 1])
        i++;
    gemm_tile(&s->j[i], task - s->first[i]);
}

static void gemm_reduce_rows(void *arg, size_t lo, size_t hi)
{
    const struct gemm_job *j = arg;
    for (size_t p = 1; p < j->ksplit; p++) /* in piece order */
        for (size_t i = lo; i < hi; i++)
            vadd(j->c + i * j->ldc, j->part + (p - 1) * j->m * j->n + i * j->n, (uint32_t)j->n);
}

static float *g_gemm_part; /* scratch of split reductions (ops_* are not reentrant) */
static size_t g_gemm_part_cap;

/* Runs products jobs[0 .. n) (n <= GEMM_SET_MAX, no two writing the same
 * C) as one job on the pool; each gets the bits ops_gemm gives it alone. */
static void gemm_run(struct gemm_job *jobs, size_t n)
{
    pthread_once(&g_blas_once, blas_single);
    struct gemm_set s = {.j = jobs, .n = n};
    size_t need = 0;
    for (size_t i = 0; i < n; i++) {
        struct gemm_job *j = &jobs[i];
        if (j->m == 0 || j->n == 0) {
            j->tiles = j->ksplit = 0;
            j->tiles_n = 1;
            continue;
        }
        if (j->k == 0) {
            gemm_k0(j);
            j->tiles = j->ksplit = 0;
            j->tiles_n = 1;
            continue;
        }
        need += gemm_plan(j);
    }
    if (need > g_gemm_part_cap) {
        float *p = realloc(g_gemm_part, need * sizeof *p);
        if (p) {
            g_gemm_part = p;
            g_gemm_part_cap = need;
        }
    }
    size_t off = 0, tasks = 0;
    for (size_t i = 0; i < n; i++) {
        struct gemm_job *j = &jobs[i];
        if (j->ksplit > 1) {
            if (need <= g_gemm_part_cap) {
                j->part = g_gemm_part + off;
                off += (j->ksplit - 1) * j->m * j->n;
            } else {
                j->ksplit = 1; /* no memory: one piece, slower and different bits, never wrong */
            }
        }
        s.first[i] = tasks;
        tasks += j->tiles * j->ksplit;
    }
    s.first[n] = tasks;
    pool_run(gemm_set_task, &s, tasks);
    for (size_t i = 0; i < n; i++)
        if (jobs[i].ksplit > 1)
            par_for(jobs[i].m, row_grain((uint32_t)jobs[i].n), gemm_reduce_rows, &jobs[i]);
}

void ops_gemm(bool ta, bool tb, size_t m, size_t n, size_t k, float alpha, const float *a, size_t lda, const float *b,
              size_t ldb, float beta, float *c, size_t ldc)
{
    struct gemm_job j = {.ta = ta, .tb = tb, .m = m, .n = n, .k = k, .alpha = alpha, .beta = beta, .a = a, .b = b,
                         .c = c, .lda = lda, .ldb = ldb, .ldc = ldc};
    gemm_run(&j, 1);
}

/* ---- dense layers ------------------------------------------------------------------------------ */

void ops_linear_fwd(float *y, const float *x, const float *w, uint32_t n, uint32_t in, uint32_t out, bool acc)
{
    ops_gemm(false, true, n, out, in, 1.0f, x, in, w, in, acc ? 1.0f : 0.0f, y, out);
}

void ops_linear_bwd_w(float *dw, const float *dy, const float *x, uint32_t n, uint32_t in, uint32_t out, bool acc)
{
    ops_gemm(true, false, out, in, n, 1.0f, dy, out, x, in, acc ? 1.0f : 0.0f, dw, in);
}

void ops_linear_bwd_x(float *dx, const float *dy, const float *w, uint32_t n, uint32_t in, uint32_t out, bool acc)
{
    ops_gemm(false, false, n, in, out, 1.0f, dy, out, w, in, acc ? 1.0f : 0.0f, dx, in);
}

void ops_linear_bwd_w2(float *dw1, float *dw2, const float *dy, const float *x1, const float *x2, uint32_t n,
                       uint32_t in, uint32_t out)
{
    struct gemm_job j[2] = {
        {.ta = true, .m = out, .n = in, .k = n, .alpha = 1.0f, .a = dy, .lda = out, .b = x1, .ldb = in, .c = dw1,
         .ldc = in},
        {.ta = true, .m = out, .n = in, .k = n, .alpha = 1.0f, .a = dy, .lda = out, .b = x2, .ldb = in, .c = dw2,
         .ldc = in}};
    gemm_run(j, 2);
}

void ops_linear_bwd_x2(float *dx1, float *dx2, const float *dy, const float *w1, const float *w2, uint32_t n,
                       uint32_t in, uint32_t out)
{
    struct gemm_job j[2] = {
        {.m = n, .n = in, .k = out, .alpha = 1.0f, .a = dy, .lda = out, .b = w1, .ldb = in, .c = dx1, .ldc = in},
        {.m = n, .n = in, .k = out, .alpha = 1.0f, .a = dy, .lda = out, .b = w2, .ldb = in, .c = dx2, .ldc = in}};
    gemm_run(j, 2);
}

struct rows_arg { /* a loop over rows: most operators below */
    float *y;
    const float *x, *z;
    const void *p;
    const uint32_t *idx;
    const unsigned char *bytes;
    size_t stride;
    uint32_t dim;
    bool flag;
};

static void bias_rows(void *a, size_t lo, size_t hi)
{
    const struct rows_arg *r = a;
    for (size_t i = lo; i < hi; i++)
        vadd(r->y + i * r->dim, r->x, r->dim);
}

void ops_bias_fwd(float *restrict y, const float *restrict b, uint32_t n, uint32_t dim)
{
    struct rows_arg r = {.y = y, .x = b, .dim = dim};
    par_for(n, row_grain(dim), bias_rows, &r);
}

/* One thread: the pass streams dy in order at the memory's full rate,
 * which pieces of columns on several threads (each column still summed
 * in row order) only slowed (trainer-bench, issue 27). */
void ops_bias_bwd(float *restrict db, const float *restrict dy, uint32_t n, uint32_t dim)
{
    memset(db, 0, (size_t)dim * sizeof *db);
    for (uint32_t i = 0; i < n; i++)
        vadd(db, dy + (size_t)i * dim, dim);
}

struct elem_arg {
    float *x;
    const float *y;
    uint8_t *mask;
    uint64_t seed, thr;
    float scale;
};

static void relu_fwd_piece(void *a, size_t lo, size_t hi)
{
    float *restrict x = ((const struct elem_arg *)a)->x;
    for (size_t i = lo; i < hi; i++)
        x[i] = elem_relu(x[i]); /* NaN passes through */
}

void ops_relu_fwd(float *x, size_t n)
{
    struct elem_arg e = {.x = x};
    par_for(n, ELEM_GRAIN, relu_fwd_piece, &e);
}

static void elu_fwd_piece(void *a, size_t lo, size_t hi)
{
    float *restrict x = ((const struct elem_arg *)a)->x;
    for (size_t i = lo; i < hi; i++)
        x[i] = elem_elu(x[i]);
}

void ops_elu_fwd(float *x, size_t n)
{
    struct elem_arg e = {.x = x};
    par_for(n, ELEM_GRAIN, elu_fwd_piece, &e);
}

static void elu_bwd_piece(void *a, size_t lo, size_t hi)
{
    const struct elem_arg *e = a;
    float *restrict dx = e->x;
    const float *restrict y = e->y;
    for (size_t i = lo; i < hi; i++)
        dx[i] = elem_elu_bwd(dx[i], y[i]);
}

void ops_elu_bwd(float *restrict dx, const float *restrict y, size_t n)
{
    struct elem_arg e = {.x = dx, .y = y};
    par_for(n, ELEM_GRAIN, elu_bwd_piece, &e);
}

static void relu_bwd_piece(void *a, size_t lo, size_t hi)
{
    const struct elem_arg *e = a;
    float *restrict dx = e->x;
    const float *restrict y = e->y;
    for (size_t i = lo; i < hi; i++)
        dx[i] = elem_relu_bwd(dx[i], y[i]);
}

void ops_relu_bwd(float *restrict dx, const float *restrict y, size_t n)
{
    struct elem_arg e = {.x = dx, .y = y};
    par_for(n, ELEM_GRAIN, relu_bwd_piece, &e);
}

/* The keep bits of whole pairs j0 .. j1-1 (items 2j and 2j + 1 from draw
 * j): integer arithmetic only, so it may be compiled for the wider vector
 * units the host has with the same bits. Its two bytes per draw are
 * stored as one little-endian 16-bit word, which lets the loop vectorise.
 * GCC on x86-64: an AVX2 and an AVX-512 build of it beside the baseline
 * one, picked once by __builtin_cpu_supports (not an ifunc: a resolver
 * runs before a sanitizer's runtime is up). */
static inline __attribute__((always_inline)) void mask_pairs_body(uint8_t *restrict mask, size_t j0, size_t j1,
                                                                   uint64_t seed, uint64_t thr)
{
    for (size_t j = j0; j < j1; j++) {
        uint64_t r = elem_splitmix_at(seed, j);
        uint16_t v = (uint16_t)((unsigned)elem_dropout_keep(r, 0, thr) | (unsigned)elem_dropout_keep(r, 1, thr) << 8);
        memcpy(mask + 2 * j, &v, sizeof v);
    }
}

typedef void mask_pairs_fn(uint8_t *restrict mask, size_t j0, size_t j1, uint64_t seed, uint64_t thr);

static void mask_pairs_base(uint8_t *restrict mask, size_t j0, size_t j1, uint64_t seed, uint64_t thr)
{
    mask_pairs_body(mask, j0, j1, seed, thr);
}

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target("avx2"), optimize("vect-cost-model=dynamic"))) static void
mask_pairs_avx2(uint8_t *restrict mask, size_t j0, size_t j1, uint64_t seed, uint64_t thr)
{
    mask_pairs_body(mask, j0, j1, seed, thr);
}

__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"), optimize("vect-cost-model=dynamic"))) static void
mask_pairs_avx512(uint8_t *restrict mask, size_t j0, size_t j1, uint64_t seed, uint64_t thr)
{
    mask_pairs_body(mask, j0, j1, seed, thr);
}
#endif

static mask_pairs_fn *g_mask_pairs = mask_pairs_base;
static pthread_once_t g_mask_pairs_once = PTHREAD_ONCE_INIT;

static void mask_pairs_pick(void)
{
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
        g_mask_pairs = mask_pairs_avx512;
    else if (__builtin_cpu_supports("avx2"))
        g_mask_pairs = mask_pairs_avx2;
#endif
}

static void dropout_mask_pairs(uint8_t *restrict mask, size_t j0, size_t j1, uint64_t seed, uint64_t thr)
{
    pthread_once(&g_mask_pairs_once, mask_pairs_pick);
    g_mask_pairs(mask, j0, j1, seed, thr);
}

/* Draw i / 2 gives items i and i + 1, as in one pass, wherever a piece
 * starts. */
static void dropout_fwd_piece(void *a, size_t lo, size_t hi)
{
    const struct elem_arg *e = a;
    float *restrict x = e->x;
    uint8_t *restrict mask = e->mask;
    size_t i0 = lo;
    if (i0 & 1) { /* an odd start (none here start odd, but nothing relies on it): the high half of its draw */
        mask[i0] = elem_dropout_keep(elem_splitmix_at(e->seed, i0 / 2), 1, e->thr);
        i0++;
    }
    if (i0 < hi)
        dropout_mask_pairs(mask, i0 / 2, hi / 2, e->seed, e->thr);
    if (hi & 1 && hi - 1 >= i0) /* an odd end: the low half of its pair's draw */
        mask[hi - 1] = elem_dropout_keep(elem_splitmix_at(e->seed, (hi - 1) / 2), 0, e->thr);
    for (size_t i = lo; i < hi; i++)
        x[i] = elem_dropout_apply(x[i], mask[i], e->scale);
}

void ops_dropout_fwd(float *restrict x, uint8_t *restrict mask, size_t n, float p, uint64_t seed)
{
    struct elem_arg e = {.x = x, .mask = mask, .seed = seed, .thr = elem_dropout_thr(p), .scale = 1.0f / (1.0f - p)};
    par_for(n, ELEM_GRAIN, dropout_fwd_piece, &e);
}

static void dropout_bwd_piece(void *a, size_t lo, size_t hi)
{
    const struct elem_arg *e = a;
    float *restrict dx = e->x;
    const uint8_t *restrict mask = e->mask;
    for (size_t i = lo; i < hi; i++)
        dx[i] = elem_dropout_apply(dx[i], mask[i], e->scale);
}

void ops_dropout_bwd(float *restrict dx, const uint8_t *restrict mask, size_t n, float p)
{
    struct elem_arg e = {.x = dx, .mask = (uint8_t *)mask, .scale = 1.0f / (1.0f - p)};
    par_for(n, ELEM_GRAIN, dropout_bwd_piece, &e);
}

#define DROPOUT_RELU_RUN ((size_t)1024)

static void dropout_relu_bwd_piece(void *a, size_t lo, size_t hi)
{
    const struct elem_arg *e = a;
    float *restrict dx = e->x;
    const float *restrict y = e->y;
    const uint8_t *restrict mask = e->mask;
    /* two loops over short runs, each of which vectorises (one loop of
     * both would branch on y for every element), the run in L1 between */
    for (size_t r = lo; r < hi; r += DROPOUT_RELU_RUN) {
        size_t end = hi - r < DROPOUT_RELU_RUN ? hi : r + DROPOUT_RELU_RUN;
        if (mask)
            for (size_t i = r; i < end; i++)
                dx[i] = elem_dropout_apply(dx[i], mask[i], e->scale);
        for (size_t i = r; i < end; i++)
            dx[i] = elem_relu_bwd(dx[i], y[i]);
    }
}

void ops_dropout_relu_bwd(float *restrict dx, const uint8_t *restrict mask, const float *restrict y, size_t n, float p)
{
    struct elem_arg e = {.x = dx, .y = y, .mask = (uint8_t *)mask, .scale = mask ? 1.0f / (1.0f - p) : 1.0f};
    par_for(n, ELEM_GRAIN, dropout_relu_bwd_piece, &e);
}

/* ---- feature rows ------------------------------------------------------------------------------ */

/* Half to float without branches (elem_f16_to_f32). Needs subnormals
 * honoured (no FTZ/DAZ, which only -ffast-math programs set). */
void ops_f16_to_f32(float *restrict out, const uint16_t *restrict in, size_t n)
{
    for (size_t i = 0; i < n; i++)
        out[i] = elem_f16_to_f32(in[i]);
}

/* Asks for the cache lines of `bytes` bytes at q ahead of their use. */
static inline void prefetch_bytes(const unsigned char *q, size_t bytes)
{
    for (size_t l = 0; l < bytes; l += 64)
        __builtin_prefetch(q + l);
}

#define GATHER_PREFETCH 8 /* rows ahead: the rows lie at random in the buffer */

/* Rows lo..hi-1 of ops_gather_rows (f16: flag), each asked for
 * GATHER_PREFETCH rows before it is copied. */
static void gather_piece(void *a, size_t lo, size_t hi)
{
    const struct rows_arg *r = a;
    size_t bytes = (size_t)r->dim * (r->flag ? sizeof(uint16_t) : sizeof(float));
    for (size_t i = lo; i < hi && i < lo + GATHER_PREFETCH; i++)
        prefetch_bytes(r->bytes + (size_t)r->idx[i] * r->stride, bytes);
    for (size_t i = lo; i < hi; i++) {
        if (i + GATHER_PREFETCH < hi)
            prefetch_bytes(r->bytes + (size_t)r->idx[i + GATHER_PREFETCH] * r->stride, bytes);
        const unsigned char *row = r->bytes + (size_t)r->idx[i] * r->stride;
        float *out = r->y + i * r->dim;
        if (r->flag)
            ops_f16_to_f32(out, (const uint16_t *)(const void *)row, r->dim);
        else
            memcpy(out, row, (size_t)r->dim * sizeof(float));
    }
}

void ops_gather_rows(float *x, const unsigned char *rows, size_t stride, const uint32_t *alias, uint32_t n,
                     uint32_t dim, bool f16)
{
    struct rows_arg r = {.y = x, .bytes = rows, .stride = stride, .idx = alias, .dim = dim, .flag = f16};
    par_for(n, row_grain(dim), gather_piece, &r);
}

/* ---- aggregation over a block --------------------------------------------------------------------- */

/* Destinations lo..hi-1 of a sum (mean: flag, scaled by 1 / degree). */
static void agg_sum_piece(void *a, size_t lo, size_t hi)
{
    const struct rows_arg *r = a;
    const struct ops_block *b = r->p;
    uint32_t dim = r->dim;
    for (size_t d = lo; d < hi; d++) {
        float *o = r->y + d * dim;
        memset(o, 0, (size_t)dim * sizeof *o);
        for (uint32_t j = b->indptr[d]; j < b->indptr[d + 1]; j++)
            vadd(o, r->x + (size_t)b->src[j] * dim, dim);
        uint32_t deg = b->indptr[d + 1] - b->indptr[d];
        if (r->flag && deg > 1)
            vscale(o, 1.0f / (float)deg, dim);
    }
}

void ops_agg_sum_fwd(float *restrict out, const struct ops_block *b, const float *restrict h, uint32_t dim)
{
    struct rows_arg r = {.y = out, .x = h, .p = b, .dim = dim};
    par_for(b->n_dst, row_grain(dim), agg_sum_piece, &r);
}

/* The scatter of a sum's or mean's backward on the pool: piece p owns
 * the source rows [p n_src / P, (p + 1) n_src / P) and walks every edge
 * in order, adding only into its own rows, so that each source row gets
 * its terms in edge order, as in one pass, whatever P is (P = the
 * threads). */
struct scatter_arg {
    float *dh;
    const struct ops_block *b;
    const float *dout;
    uint32_t dim, pieces;
    bool mean;
};

static void agg_bwd_piece(void *a, size_t p)
{
    const struct scatter_arg *r = a;
    const struct ops_block *b = r->b;
    uint32_t dim = r->dim;
    uint32_t lo = (uint32_t)((uint64_t)p * b->n_src / r->pieces), hi = (uint32_t)((uint64_t)(p + 1) * b->n_src / r->pieces);
    for (uint32_t d = 0; d < b->n_dst; d++) {
        uint32_t j0 = b->indptr[d], j1 = b->indptr[d + 1];
        if (j0 == j1)
            continue;
        const float *g = r->dout + (size_t)d * dim;
        float inv = 1.0f / (float)(j1 - j0);
        for (uint32_t j = j0; j < j1; j++) {
            uint32_t s = b->src[j];
            if (s < lo || s >= hi)
                continue;
            if (r->mean)
                vaxpy(r->dh + (size_t)s * dim, g, inv, dim);
            else
                vadd(r->dh + (size_t)s * dim, g, dim);
        }
    }
}

/* One piece when the pool has one thread or the work is small. */
static void agg_bwd(float *dh, const struct ops_block *b, const float *dout, uint32_t dim, bool mean)
{
    struct scatter_arg r = {.dh = dh, .b = b, .dout = dout, .dim = dim, .mean = mean, .pieces = 1};
    size_t work = (size_t)ops_block_edges(b) * dim;
    if (work >= ELEM_GRAIN && b->n_src > 1) /* every piece walks all edges: no more pieces than grains of work */
        r.pieces = (uint32_t)SL_MIN(SL_MIN((size_t)g_pool.threads, (size_t)b->n_src), work / ELEM_GRAIN);
    pool_run(agg_bwd_piece, &r, r.pieces);
}

void ops_agg_sum_bwd(float *restrict dh, const struct ops_block *b, const float *restrict dout, uint32_t dim)
{
    agg_bwd(dh, b, dout, dim, false);
}

void ops_agg_max_fwd(float *restrict out, float *restrict ties, const struct ops_block *b, const float *restrict h,
                     uint32_t dim)
{
    for (uint32_t d = 0; d < b->n_dst; d++) {
        float *o = out + (size_t)d * dim, *t = ties + (size_t)d * dim;
        uint32_t j0 = b->indptr[d], j1 = b->indptr[d + 1];
        if (j0 == j1) {
            memset(o, 0, (size_t)dim * sizeof *o);
            memset(t, 0, (size_t)dim * sizeof *t);
            continue;
        }
        memcpy(o, h + (size_t)b->src[j0] * dim, (size_t)dim * sizeof *o);
        for (uint32_t c = 0; c < dim; c++)
            t[c] = 1.0f;
        for (uint32_t j = j0 + 1; j < j1; j++) {
            const float *x = h + (size_t)b->src[j] * dim;
            for (uint32_t c = 0; c < dim; c++) {
                if (x[c] > o[c]) {
                    o[c] = x[c];
                    t[c] = 1.0f;
                } else if (x[c] == o[c]) {
                    t[c] += 1.0f;
                }
            }
        }
    }
}

void ops_agg_max_bwd(float *restrict dh, const struct ops_block *b, const float *restrict h, const float *out,
                     const float *ties, const float *restrict dout, uint32_t dim)
{
    for (uint32_t d = 0; d < b->n_dst; d++) {
        const float *o = out + (size_t)d * dim, *t = ties + (size_t)d * dim, *g = dout + (size_t)d * dim;
        for (uint32_t j = b->indptr[d]; j < b->indptr[d + 1]; j++) {
            uint32_t s = b->src[j];
            const float *x = h + (size_t)s * dim;
            float *y = dh + (size_t)s * dim;
            for (uint32_t c = 0; c < dim; c++)
                if (x[c] == o[c])
                    y[c] += g[c] / t[c];
        }
    }
}

#define AGG_PREFETCH 8 /* edges ahead */

static void agg_rows_piece(void *a, size_t lo, size_t hi)
{
    const struct rows_arg *r = a;
    const struct ops_block *b = r->p;
    uint32_t dim = r->dim;
    for (size_t d = lo; d < hi; d++) {
        float *o = r->y + d * dim;
        memset(o, 0, (size_t)dim * sizeof *o);
        uint32_t j1 = b->indptr[d + 1], e_end = b->indptr[b->n_dst];
        for (uint32_t j = b->indptr[d]; j < j1; j++) {
            if (j + AGG_PREFETCH < e_end) /* rows lie at random in the buffer: ask for one ahead of time */
                prefetch_bytes(r->bytes + (size_t)r->idx[b->src[j + AGG_PREFETCH]] * r->stride,
                               (size_t)dim * sizeof(float));
            vadd(o, (const float *)(const void *)(r->bytes + (size_t)r->idx[b->src[j]] * r->stride), dim);
        }
        uint32_t deg = b->indptr[d + 1] - b->indptr[d];
        if (r->flag && deg > 1)
            vscale(o, 1.0f / (float)deg, dim);
    }
}

void ops_agg_rows_fwd(float *restrict out, const struct ops_block *b, const unsigned char *rows, size_t stride,
                      const uint32_t *alias, uint32_t dim, bool mean)
{
    struct rows_arg r = {.y = out, .bytes = rows, .stride = stride, .idx = alias, .p = b, .dim = dim, .flag = mean};
    par_for(b->n_dst, row_grain(dim), agg_rows_piece, &r);
}

void ops_agg_mean_fwd(float *restrict out, const struct ops_block *b, const float *restrict h, uint32_t dim)
{
    struct rows_arg r = {.y = out, .x = h, .p = b, .dim = dim, .flag = true};
    par_for(b->n_dst, row_grain(dim), agg_sum_piece, &r);
}

/* ---- GraphSAGE's layer forward, fused --------------------------------------------------------------- */

/* Row tile t of ops_sage_fwd: GEMM_TILE destinations (ops_gemm's row
 * tiles of y), from their aggregation to their dropout, on one thread
 * while they are in its cache. Each step gives its elements the
 * arithmetic of the unfused operator: the aggregation and the element-wise
 * steps work row by row or element by element, and the products are the
 * sgemm calls ops_gemm makes for these tiles of y (self with beta 0, then
 * neighbours with beta 1, column tile by column tile). */
struct sage_job {
    const struct ops_sage_args *s;
    struct gemm_job self, neigh;
    struct elem_arg drop;
};

static void sage_tile(void *arg, size_t t)
{
    const struct sage_job *j = arg;
    const struct ops_sage_args *s = j->s;
    size_t i0 = t * GEMM_TILE, mi = s->b->n_dst - i0 < GEMM_TILE ? s->b->n_dst - i0 : GEMM_TILE;
    struct rows_arg r = {.y = s->agg, .x = s->h, .bytes = s->rows, .stride = s->stride, .idx = s->alias, .p = s->b,
                         .dim = s->in, .flag = s->mean};
    if (s->xg) { /* the tile's own rows first: the self product below reads them from this core's cache */
        struct rows_arg g = {.y = s->xg, .bytes = s->rows, .stride = s->stride, .idx = s->alias, .dim = s->in};
        gather_piece(&g, i0, i0 + mi);
    }
    if (s->h)
        agg_sum_piece(&r, i0, i0 + mi);
    else
        agg_rows_piece(&r, i0, i0 + mi);
    for (size_t j0 = 0; j0 < s->out; j0 += GEMM_TILE) {
        size_t nj = s->out - j0 < GEMM_TILE ? s->out - j0 : GEMM_TILE;
        float *c = s->y + i0 * s->out + j0;
        gemm_call(&j->self, i0, j0, mi, nj, 0, s->in, 0.0f, c, s->out);
        gemm_call(&j->neigh, i0, j0, mi, nj, 0, s->in, 1.0f, c, s->out);
    }
    struct rows_arg rb = {.y = s->y, .x = s->bias, .dim = s->out};
    bias_rows(&rb, i0, i0 + mi);
    size_t e0 = i0 * s->out, e1 = (i0 + mi) * s->out;
    if (s->relu) {
        struct elem_arg e = {.x = s->y};
        relu_fwd_piece(&e, e0, e1);
    }
    if (s->mask)
        dropout_fwd_piece((void *)&j->drop, e0, e1);
}

void ops_sage_fwd(const struct ops_sage_args *s)
{
    const struct ops_block *b = s->b;
    uint32_t nd = b->n_dst, in = s->in, out = s->out;
    struct sage_job j = {.s = s,
                         .self = {.tb = true, .m = nd, .n = out, .k = in, .alpha = 1.0f, .a = s->x, .lda = in,
                                  .b = s->w_self, .ldb = in, .c = s->y, .ldc = out},
                         .neigh = {.tb = true, .m = nd, .n = out, .k = in, .alpha = 1.0f, .beta = 1.0f, .a = s->agg,
                                   .lda = in, .b = s->w_neigh, .ldb = in, .c = s->y, .ldc = out}};
    if (nd == 0)
        return;
    /* where ops_gemm would not make one call per tile: the steps one by one */
    if (in == 0 || out == 0 || gemm_plan(&j.self) > 0) {
        if (s->xg)
            ops_gather_rows(s->xg, s->rows, s->stride, s->alias, nd, in, false);
        if (s->h && s->mean)
            ops_agg_mean_fwd(s->agg, b, s->h, in);
        else if (s->h)
            ops_agg_sum_fwd(s->agg, b, s->h, in);
        else
            ops_agg_rows_fwd(s->agg, b, s->rows, s->stride, s->alias, in, s->mean);
        ops_linear_fwd(s->y, s->x, s->w_self, nd, in, out, false);
        ops_linear_fwd(s->y, s->agg, s->w_neigh, nd, in, out, true);
        ops_bias_fwd(s->y, s->bias, nd, out);
        if (s->relu)
            ops_relu_fwd(s->y, (size_t)nd * out);
        if (s->mask)
            ops_dropout_fwd(s->y, s->mask, (size_t)nd * out, s->p, s->seed);
        return;
    }
    pthread_once(&g_blas_once, blas_single);
    if (s->mask)
        j.drop = (struct elem_arg){.x = s->y, .mask = s->mask, .seed = s->seed, .thr = elem_dropout_thr(s->p),
                                   .scale = 1.0f / (1.0f - s->p)};
    pool_run(sage_tile, &j, (nd + GEMM_TILE - 1) / GEMM_TILE);
}

void ops_agg_mean_bwd(float *restrict dh, const struct ops_block *b, const float *restrict dout, uint32_t dim)
{
    agg_bwd(dh, b, dout, dim, true);
}

void ops_gcn_norm(float *restrict norm_src, float *restrict norm_dst, uint32_t *restrict deg, const struct ops_block *b)
{
    if (b->deg) {
        for (uint32_t u = 0; u < b->n_src; u++)
            norm_src[u] = elem_gcn_norm(b->deg[u]);
        for (uint32_t v = 0; v < b->n_dst; v++)
            norm_dst[v] = elem_gcn_norm(b->deg[v]);
        return;
    }
    memset(deg, 0, (size_t)b->n_src * sizeof *deg);
    uint32_t e = ops_block_edges(b);
    for (uint32_t j = 0; j < e; j++)
        deg[b->src[j]]++;
    for (uint32_t u = 0; u < b->n_src; u++)
        norm_src[u] = elem_gcn_norm(deg[u]);
    for (uint32_t v = 0; v < b->n_dst; v++)
        norm_dst[v] = elem_gcn_norm(b->indptr[v + 1] - b->indptr[v]);
}

/* Both directions use the coefficient norm_dst[v] * norm_src[u] per edge
 * (self loop included), the same float in forward and backward. */
void ops_agg_gcn_fwd(float *restrict out, const struct ops_block *b, const float *norm_src, const float *norm_dst,
                     const float *restrict h, uint32_t dim)
{
    for (uint32_t v = 0; v < b->n_dst; v++) {
        float *o = out + (size_t)v * dim;
        float nd = norm_dst[v];
        vscale_to(o, h + (size_t)v * dim, nd * norm_src[v], dim);
        for (uint32_t j = b->indptr[v]; j < b->indptr[v + 1]; j++) {
            uint32_t u = b->src[j];
            vaxpy(o, h + (size_t)u * dim, nd * norm_src[u], dim);
        }
    }
}

void ops_agg_gcn_bwd(float *restrict dh, const struct ops_block *b, const float *norm_src, const float *norm_dst,
                     const float *restrict dout, uint32_t dim)
{
    for (uint32_t v = 0; v < b->n_dst; v++) {
        const float *g = dout + (size_t)v * dim;
        float nd = norm_dst[v];
        vaxpy(dh + (size_t)v * dim, g, nd * norm_src[v], dim);
        for (uint32_t j = b->indptr[v]; j < b->indptr[v + 1]; j++) {
            uint32_t u = b->src[j];
            vaxpy(dh + (size_t)u * dim, g, nd * norm_src[u], dim);
        }
    }
}

/* ---- graph attention --------------------------------------------------------------------------------- */

void ops_gat_score_fwd(float *restrict s, const float *restrict z, const float *restrict a, uint32_t n, uint32_t heads,
                       uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < heads; k++)
            s[(size_t)i * heads + k] = vdot(z + i * w + (size_t)k * hd, a + (size_t)k * hd, hd);
}

void ops_gat_score_bwd(float *restrict dz, float *restrict da, const float *restrict ds, const float *restrict z,
                       const float *restrict a, uint32_t n, uint32_t heads, uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < heads; k++) {
            float g = ds[(size_t)i * heads + k];
            if (dz)
                vaxpy(dz + i * w + (size_t)k * hd, a + (size_t)k * hd, g, hd);
            vaxpy(da + (size_t)k * hd, z + i * w + (size_t)k * hd, g, hd);
        }
}

void ops_gat_edge_fwd(float *restrict e_edge, float *restrict e_self, const struct ops_block *b,
                      const float *restrict el, const float *restrict er, uint32_t heads, float slope)
{
    for (uint32_t v = 0; v < b->n_dst; v++) {
        const float *rv = er + (size_t)v * heads;
        const float *lv = el + (size_t)v * heads;
        float *sv = e_self + (size_t)v * heads;
        for (uint32_t k = 0; k < heads; k++)
            sv[k] = elem_leaky(lv[k] + rv[k], slope);
        for (uint32_t j = b->indptr[v]; j < b->indptr[v + 1]; j++) {
            const float *lu = el + (size_t)b->src[j] * heads;
            float *ej = e_edge + (size_t)j * heads;
            for (uint32_t k = 0; k < heads; k++)
                ej[k] = elem_leaky(lu[k] + rv[k], slope);
        }
    }
}

void ops_gat_edge_bwd(float *restrict del, float *restrict der, const struct ops_block *b,
                      const float *restrict de_edge, const float *restrict de_self, const float *restrict el,
                      const float *restrict er, uint32_t heads, float slope)
{
    for (uint32_t v = 0; v < b->n_dst; v++) {
        const float *rv = er + (size_t)v * heads;
        float *drv = der + (size_t)v * heads;
        {
            const float *lv = el + (size_t)v * heads;
            const float *gv = de_self + (size_t)v * heads;
            float *dlv = del + (size_t)v * heads;
            for (uint32_t k = 0; k < heads; k++) {
                float g = elem_leaky_bwd(gv[k], lv[k] + rv[k], slope);
                dlv[k] += g;
                drv[k] += g;
            }
        }
        for (uint32_t j = b->indptr[v]; j < b->indptr[v + 1]; j++) {
            uint32_t u = b->src[j];
            const float *lu = el + (size_t)u * heads;
            const float *gj = de_edge + (size_t)j * heads;
            float *dlu = del + (size_t)u * heads;
            for (uint32_t k = 0; k < heads; k++) {
                float g = elem_leaky_bwd(gj[k], lu[k] + rv[k], slope);
                dlu[k] += g;
                drv[k] += g;
            }
        }
    }
}

void ops_edge_softmax_fwd(float *restrict a_edge, float *restrict a_self, const struct ops_block *b, uint32_t heads)
{
    for (uint32_t v = 0; v < b->n_dst; v++)
        for (uint32_t k = 0; k < heads; k++)
            elem_softmax_fwd(a_edge + k, a_self + (size_t)v * heads + k, b->indptr[v], b->indptr[v + 1], heads);
}

void ops_edge_softmax_bwd(float *restrict g_edge, float *restrict g_self, const float *restrict a_edge,
                          const float *restrict a_self, const struct ops_block *b, uint32_t heads)
{
    for (uint32_t v = 0; v < b->n_dst; v++)
        for (uint32_t k = 0; k < heads; k++) {
            size_t sk = (size_t)v * heads + k;
            elem_softmax_bwd(g_edge + k, g_self + sk, a_edge + k, a_self + sk, b->indptr[v], b->indptr[v + 1], heads);
        }
}

void ops_gat_sum_fwd(float *restrict out, const struct ops_block *b, const float *restrict a_edge,
                     const float *restrict a_self, const float *restrict z, uint32_t heads, uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (uint32_t v = 0; v < b->n_dst; v++) {
        float *o = out + v * w;
        for (uint32_t k = 0; k < heads; k++)
            vscale_to(o + (size_t)k * hd, z + v * w + (size_t)k * hd, a_self[(size_t)v * heads + k], hd);
        for (uint32_t j = b->indptr[v]; j < b->indptr[v + 1]; j++) {
            const float *zu = z + b->src[j] * w;
            for (uint32_t k = 0; k < heads; k++)
                vaxpy(o + (size_t)k * hd, zu + (size_t)k * hd, a_edge[(size_t)j * heads + k], hd);
        }
    }
}

void ops_gat_sum_bwd(float *restrict dz, float *restrict g_edge, float *restrict g_self, const struct ops_block *b,
                     const float *restrict a_edge, const float *restrict a_self, const float *restrict z,
                     const float *restrict dout, uint32_t heads, uint32_t hd)
{
    size_t w = (size_t)heads * hd;
    for (uint32_t v = 0; v < b->n_dst; v++) {
        const float *g = dout + v * w;
        for (uint32_t k = 0; k < heads; k++) {
            size_t off = v * w + (size_t)k * hd;
            g_self[(size_t)v * heads + k] = vdot(g + (size_t)k * hd, z + off, hd);
            vaxpy(dz + off, g + (size_t)k * hd, a_self[(size_t)v * heads + k], hd);
        }
        for (uint32_t j = b->indptr[v]; j < b->indptr[v + 1]; j++) {
            size_t u = b->src[j];
            for (uint32_t k = 0; k < heads; k++) {
                size_t off = u * w + (size_t)k * hd;
                g_edge[(size_t)j * heads + k] = vdot(g + (size_t)k * hd, z + off, hd);
                vaxpy(dz + off, g + (size_t)k * hd, a_edge[(size_t)j * heads + k], hd);
            }
        }
    }
}

void ops_head_mean_fwd(float *restrict out, const float *restrict in, uint32_t n, uint32_t heads, uint32_t d)
{
    float inv = 1.0f / (float)heads;
    size_t w = (size_t)heads * d;
    for (uint32_t i = 0; i < n; i++) {
        float *o = out + (size_t)i * d;
        memcpy(o, in + i * w, (size_t)d * sizeof *o);
        for (uint32_t k = 1; k < heads; k++)
            vadd(o, in + i * w + (size_t)k * d, d);
        vscale(o, inv, d);
    }
}

void ops_head_mean_bwd(float *restrict din, const float *restrict dout, uint32_t n, uint32_t heads, uint32_t d)
{
    float inv = 1.0f / (float)heads;
    size_t w = (size_t)heads * d;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < heads; k++)
            vscale_to(din + i * w + (size_t)k * d, dout + (size_t)i * d, inv, d);
}

/* ---- loss -------------------------------------------------------------------------------------------- */

/* Rows are independent up to the mean: pieces of rows on the pool write
 * each row's loss term and whether its argmax hit; one thread then sums
 * the terms in row order (the sum of a single pass). */
#define CE_GRAIN ((size_t)128) /* rows per piece */

struct ce_arg {
    const float *logits;
    const int32_t *labels;
    uint32_t classes, nl;
    float *dlogits;
    double *term; /* row i's at [i - base]: a labelled row's lse - logit of its label */
    uint8_t *hit; /* row i's at [i - base]: argmax == label */
    size_t base;
};

static void ce_rows(void *a, size_t lo, size_t hi)
{
    const struct ce_arg *e = a;
    uint32_t classes = e->classes;
    for (size_t i = lo; i < hi; i++) {
        const float *x = e->logits + i * classes;
        float *dx = e->dlogits ? e->dlogits + i * classes : NULL;
        int32_t lab = e->labels[i];
        e->hit[i - e->base] = 0;
        if (lab < 0 || (uint32_t)lab >= classes) {
            if (dx)
                memset(dx, 0, (size_t)classes * sizeof *dx);
            continue;
        }
        uint32_t arg;
        double lse = elem_ce_lse(x, classes, &arg);
        e->hit[i - e->base] = arg == (uint32_t)lab;
        e->term[i - e->base] = lse - (double)x[lab];
        if (dx) {
            for (uint32_t c = 0; c < classes; c++)
                dx[c] = elem_ce_grad(x[c], lse, c == (uint32_t)lab, e->nl);
        }
    }
}

static void *g_ce_scratch; /* (n) terms, then (n) hits (ops_* are not reentrant) */
static size_t g_ce_cap;    /* rows */

float ops_cross_entropy(const float *logits, const int32_t *labels, uint32_t n, uint32_t classes, float *dlogits,
                        uint32_t *labelled, uint32_t *correct)
{
    uint32_t nl = 0, ok = 0;
    for (uint32_t i = 0; i < n; i++)
        nl += labels[i] >= 0 && (uint32_t)labels[i] < classes;
    double total = 0.0, term[CE_GRAIN];
    uint8_t hit[CE_GRAIN];
    struct ce_arg e = {.logits = logits, .labels = labels, .classes = classes, .nl = nl, .dlogits = dlogits};
    if (n > g_ce_cap) {
        void *p = realloc(g_ce_scratch, (size_t)n * (sizeof(double) + 1));
        if (p) {
            g_ce_scratch = p;
            g_ce_cap = n;
        }
    }
    if (n > 0 && n <= g_ce_cap) {
        e.term = g_ce_scratch;
        e.hit = (uint8_t *)(e.term + n);
        par_for(n, CE_GRAIN, ce_rows, &e);
        for (uint32_t i = 0; i < n; i++) {
            if (labels[i] < 0 || (uint32_t)labels[i] >= classes)
                continue;
            total += e.term[i];
            ok += e.hit[i];
        }
    } else { /* no memory for the terms: a piece at a time on this thread, the same bits */
        e.term = term;
        e.hit = hit;
        for (size_t lo = 0; lo < n; lo += CE_GRAIN) {
            size_t hi = SL_MIN((size_t)n, lo + CE_GRAIN);
            e.base = lo;
            ce_rows(&e, lo, hi);
            for (size_t i = lo; i < hi; i++) {
                if (labels[i] < 0 || (uint32_t)labels[i] >= classes)
                    continue;
                total += term[i - lo];
                ok += hit[i - lo];
            }
        }
    }
    if (labelled)
        *labelled = nl;
    if (correct)
        *correct = ok;
    return nl ? (float)(total / nl) : 0.0f;
}

/* ---- plain arrays ------------------------------------------------------------------------------------ */

void ops_zero(float *x, size_t n)
{
    if (n)
        memset(x, 0, n * sizeof *x);
}

void ops_copy(float *restrict y, const float *restrict x, size_t n)
{
    if (n)
        memcpy(y, x, n * sizeof *y);
}

void ops_scale(float *x, size_t n, float alpha)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= alpha;
}

size_t ops_count_nonfinite(const float *x, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        bad += (u & 0x7f800000u) == 0x7f800000u;
    }
    return bad;
}

double ops_sumsq(const float *x, size_t n)
{
    double total = 0.0;
    for (size_t c = 0; c < n; c += OPS_SUMSQ_CHUNK) {
        double part = 0.0;
        for (size_t i = c; i < SL_MIN(n, c + OPS_SUMSQ_CHUNK); i++) {
            double v = (double)x[i];
            double sq = v * v; /* a separate statement: never contracted with the add */
            part += sq;
        }
        total += part;
    }
    return total;
}

void ops_glorot_uniform(float *p, size_t n, double fan_in, double fan_out, uint64_t *state)
{
    ops_uniform(p, n, sqrt(6.0 / (fan_in + fan_out)), state);
}

void ops_uniform(float *p, size_t n, double a, uint64_t *state)
{
    for (size_t i = 0; i < n; i++) {
        double u = (double)(sl_splitmix64(state) >> 40) * 0x1p-24; /* [0, 1) */
        p[i] = (float)((2.0 * u - 1.0) * a);
    }
}

/* ---- optimizers -------------------------------------------------------------------------------------- */

#define ADAM_GRAIN ((size_t)1 << 13) /* parameters per piece */

struct adam_arg {
    float *p, *m, *v;
    const float *g;
    struct elem_adam c;
};

static void adam_piece(void *a, size_t lo, size_t hi)
{
    const struct adam_arg *r = a;
    float *restrict p = r->p, *restrict m = r->m, *restrict v = r->v;
    const float *restrict g = r->g;
    for (size_t i = lo; i < hi; i++)
        elem_adam_update(&p[i], &m[i], &v[i], g[i], &r->c);
}

void ops_adam(float *restrict p, const float *restrict g, float *restrict m, float *restrict v, size_t n, float lr,
              float b1, float b2, float eps, float wd, bool decoupled, uint64_t t)
{
    struct adam_arg r = {.p = p, .m = m, .v = v, .g = g, .c = elem_adam_prep(lr, b1, b2, eps, wd, decoupled, t)};
    par_for(n, ADAM_GRAIN, adam_piece, &r);
}

void ops_sgd(float *restrict p, const float *restrict g, size_t n, float lr)
{
    for (size_t i = 0; i < n; i++)
        p[i] = elem_sgd(p[i], g[i], lr);
}
