/* sink_cuda.c - the CUDA row sink (contract in sink.h): rows on the
 * device, copied from host staging by the copy engine while the thread's
 * other reads are in flight. Built only with CUDA.
 *
 * Per sink (one extractor thread): a non-blocking stream of its own and
 * `cap` events, one per queue position of the generic layer. put
 * enqueues one cudaMemcpy2DAsync host -> device (a run of adjacent rows is
 * one call: width row_bytes, height nrows, the staging pitch on one side
 * and the buffer's stride on the other) into row `slot` of the process's
 * mapping of the device rows (fb->dev_rows, from featbuf_cuda_import), and
 * records the position's event after it. finished asks the oldest events
 * with cudaEventQuery, in order, and stops at the first not done; with
 * wait it sleeps on the oldest one (cudaEventSynchronize on an event made
 * with cudaEventBlockingSync: the thread sleeps, it does not spin). Only
 * the sink's own stream and events are ever waited on: never the device.
 * The generic layer then publishes the rows (featbuf_loaded) and hands the
 * staging bytes back, so a row is VALID only after its bytes are on the
 * device and staging is reused only after the copy engine read it.
 *
 * Staging registration. Copies from pinned host memory are the ones that
 * run asynchronously on the copy engine, so the staging region a sink is
 * given (the node's whole staging segment, which borrowed blocks may come
 * from) is registered with cudaHostRegister - once per process, however
 * many sinks use it: a small table of registered ranges with a count of
 * sinks each, under a mutex; the last sink to go unregisters. A range
 * someone else in the process registered already is used as it is. Rows
 * from outside any registered range (the mmap I/O mode copies straight
 * from the file's mapping) still copy correctly: CUDA stages pageable
 * memory itself, synchronously with respect to the host.
 *
 * Errors. A copy that cannot be enqueued fails its put (nothing started).
 * An error from an event means the context is broken (a failed copy on
 * the device is sticky) and the bytes of every copy in flight are in
 * doubt: the sink fails fast (prints the call, file and line, then abort),
 * as sink.h asks of a variant that loses its device. */
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"
#include "stages/sink.h"

#define REGS_MAX 16 /* staging ranges one process registers (one per run, in practice) */

_Noreturn static void die(const char *call, cudaError_t e, const char *func, const char *file, int line)
{
    fprintf(stderr, "%srow sink \"cuda\": %s failed in %s (%s:%d): %s (%s); the device copies are in doubt, stopping\n",
            sl_err_line_start(), call, func, file, line, cudaGetErrorString(e), cudaGetErrorName(e));
    abort();
}

#define SINK_CUDA_CHECK(call)                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (call);                                                                                       \
        if (e_ != cudaSuccess)                                                                                         \
            die(#call, e_, __func__, __FILE__, __LINE__);                                                              \
    } while (0)

/* ---- staging registered once per process ------------------------------------------ */

struct reg {
    unsigned char *base;
    size_t len;
    unsigned sinks; /* 0: the entry is free */
    bool ours;      /* registered by us (else by someone else in the process): unregister at 0 */
};

static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct reg regs[REGS_MAX];

/* Counts a sink in on the registered range holding [p, p + len), making one. */
static int reg_get(void *p, size_t len, struct reg **out, char *err, size_t errlen)
{
    unsigned char *b = p;
    int rc = 0;
    pthread_mutex_lock(&reg_mu);
    struct reg *free_entry = NULL;
    for (int i = 0; i < REGS_MAX; i++) {
        struct reg *r = &regs[i];
        if (r->sinks && b >= r->base && b + len <= r->base + r->len) {
            r->sinks++;
            *out = r;
            goto out;
        }
        if (!r->sinks && !free_entry)
            free_entry = r;
    }
    if (!free_entry) {
        rc = sl_errf(err, errlen, -ENOSPC, "row sink \"cuda\": more than %d staging regions registered", REGS_MAX);
        goto out;
    }
    cudaError_t e = cudaHostRegister(p, len, cudaHostRegisterPortable);
    bool ours = e == cudaSuccess;
    if (e == cudaErrorHostMemoryAlreadyRegistered) {
        (void)cudaGetLastError(); /* not sticky: clear it */
    } else if (e != cudaSuccess) {
        (void)cudaGetLastError();
        rc = sl_errf(err, errlen, -EIO,
                     "row sink \"cuda\": cudaHostRegister of the %zu-byte staging buffer failed: %s (%s); raise the "
                     "locked-memory limit (ulimit -l) or lower pipeline.staging_mb",
                     len, cudaGetErrorString(e), cudaGetErrorName(e));
        goto out;
    }
    *free_entry = (struct reg){.base = b, .len = len, .sinks = 1, .ours = ours};
    *out = free_entry;
out:
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

static void reg_put(struct reg *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&reg_mu);
    if (--r->sinks == 0) {
        if (r->ours)
            cudaHostUnregister(r->base);
        memset(r, 0, sizeof *r);
    }
    pthread_mutex_unlock(&reg_mu);
}

unsigned row_sink_cuda_registered(void)
{
    unsigned n = 0;
    pthread_mutex_lock(&reg_mu);
    for (int i = 0; i < REGS_MAX; i++)
        n += regs[i].sinks != 0;
    pthread_mutex_unlock(&reg_mu);
    return n;
}

/* ---- the variant ---------------------------------------------------------------- */

struct cuda_sink {
    cudaStream_t stream;
    cudaEvent_t *ev;    /* (cap) one per queue position */
    uint32_t nev;       /* events created (init may stop half way) */
    unsigned char *dst; /* row 0 on the device */
    size_t stride;      /* bytes between device rows */
    int device;
    bool has_stream;
    struct reg *reg; /* the registered staging range, or NULL */
};

static void cuda_release(struct cuda_sink *k)
{
    if (!k)
        return;
    for (uint32_t i = 0; i < k->nev; i++)
        cudaEventDestroy(k->ev[i]);
    if (k->has_stream)
        cudaStreamDestroy(k->stream);
    reg_put(k->reg);
    free(k->ev);
    free(k);
}

static int cuda_init(struct row_sink *s, char *err, size_t errlen)
{
    struct featbuf *fb = s->fb;
    if (fb->rows || !fb->dev_rows)
        return sl_errf(err, errlen, -EINVAL,
                       "row sink \"cuda\": the feature buffer's rows are not on the device, or this process has not "
                       "opened them (featbuf_cuda_import)");
    struct cuda_sink *k = calloc(1, sizeof *k);
    if (!k || !(k->ev = calloc(s->cap, sizeof *k->ev))) {
        free(k);
        return sl_errf(err, errlen, -ENOMEM, "row sink \"cuda\": out of memory");
    }
    k->dst = fb->dev_rows;
    k->stride = fb->stride;
    k->device = fb->dev_ordinal;
    int rc;
    cudaError_t e = cudaSetDevice(k->device); /* this thread's device from now on */
    const char *what = "cudaSetDevice";
    if (e != cudaSuccess)
        goto cuda_err;
    if (s->staging && (rc = reg_get(s->staging, s->staging_len, &k->reg, err, errlen)) != 0)
        goto err;
    what = "cudaStreamCreateWithFlags";
    if ((e = cudaStreamCreateWithFlags(&k->stream, cudaStreamNonBlocking)) != cudaSuccess)
        goto cuda_err;
    k->has_stream = true;
    what = "cudaEventCreateWithFlags";
    for (; k->nev < s->cap; k->nev++)
        if ((e = cudaEventCreateWithFlags(&k->ev[k->nev], cudaEventDisableTiming | cudaEventBlockingSync)) !=
            cudaSuccess)
            goto cuda_err;
    s->impl = k;
    return 0;
cuda_err:
    rc = sl_errf(err, errlen, e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO, "row sink \"cuda\": %s: %s (%s)", what,
                 cudaGetErrorString(e), cudaGetErrorName(e));
err:
    cuda_release(k);
    return rc;
}

static int cuda_start(struct row_sink *s, uint32_t pos, const struct row_sink_copy *c)
{
    struct cuda_sink *k = s->impl;
    size_t pitch = c->nrows > 1 ? c->src_pitch : c->row_bytes;
    if (pitch < c->row_bytes)
        return -EINVAL;
    cudaError_t e = cudaMemcpy2DAsync(k->dst + (size_t)c->slot * k->stride, k->stride, c->src, pitch, c->row_bytes,
                                      c->nrows, cudaMemcpyHostToDevice, k->stream);
    if (e != cudaSuccess) { /* not enqueued: nothing started */
        (void)cudaGetLastError();
        return e == cudaErrorInvalidValue || e == cudaErrorInvalidPitchValue ? -EINVAL : -EIO;
    }
    e = cudaEventRecord(k->ev[pos], k->stream);
    if (e != cudaSuccess) {
        /* the copy is enqueued but cannot be tracked: wait for the stream, so
         * that the staging bytes are the caller's again when we return */
        SINK_CUDA_CHECK(cudaStreamSynchronize(k->stream));
        (void)cudaGetLastError();
        return -EIO;
    }
    return 0;
}

static uint32_t cuda_finished(struct row_sink *s, uint32_t max, bool wait, int *rc)
{
    struct cuda_sink *k = s->impl;
    uint32_t n = 0;
    for (; n < max; n++) {
        cudaEvent_t ev = k->ev[(s->head + n) % s->cap];
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaErrorNotReady) {
            if (!wait || n > 0)
                break;
            e = cudaEventSynchronize(ev); /* the oldest: sleeps until its copy is done */
        }
        if (e != cudaSuccess)
            die("cudaEventQuery/cudaEventSynchronize", e, __func__, __FILE__, __LINE__);
        rc[n] = 0;
    }
    return n;
}

static void cuda_free(struct row_sink *s)
{
    struct cuda_sink *k = s->impl;
    if (!k)
        return;
    cudaSetDevice(k->device);
    if (k->has_stream)
        SINK_CUDA_CHECK(cudaStreamSynchronize(k->stream)); /* nothing is outstanding; the stream is ours alone */
    cuda_release(k);
    s->impl = NULL;
}

const struct row_sink_ops row_sink_cuda = {
    .name = "cuda",
    .init = cuda_init,
    .start = cuda_start,
    .finished = cuda_finished,
    .free = cuda_free,
};
