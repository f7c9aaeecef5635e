/* reducer_nccl.c - the reducer of GPU trainers (reducer.h, device = true):
 * an NCCL communicator of `world` ranks, one per trainer process, and a
 * float sum all-reduce of the CUDA backend's reduce buffer in device
 * memory, on a stream of its own.
 *
 * Protocol. Whoever starts the run (the launcher) makes one NCCL unique id
 * (ncclGetUniqueId: 128 opaque bytes naming the bootstrap root, which lives
 * in the process that made it, so that process stays up until every rank
 * has joined) and hands it to every trainer with its rank and device.
 * reducer_nccl_open makes the device current, creates the stream and
 * starts joining the communicator without blocking (NCCL's non-blocking
 * mode); the first allreduce waits, ticking, until every rank has joined.
 * Each start then makes the reducer's stream wait for the caller's event
 * (the backward work that completes the bucket) and queues ncclAllReduce
 * (sum, float) there; finish polls, every 100 us or so, the stream and
 * the communicator's asynchronous error, calling tick at least every
 * REDUCER_TICK_MS. So the CUDA backend starts a bucket's sum as soon as
 * the backward pass has queued the bucket's last gradient, and the sums
 * run beside the rest of the pass. allreduce is start (no event: the
 * buffer must be complete) then finish; when it returns 0 the sum is in
 * the buffer.
 *
 * Failure and teardown. Any failure (an NCCL or CUDA error, an
 * asynchronous error such as a peer that went away, a tick that says stop)
 * aborts the communicator (ncclCommAbort): the kernels waiting on it stop
 * and its connections close, so the other ranks' NCCL reports a remote
 * error and their waiting allreduce returns -EPIPE instead of hanging. abort
 * does the same from outside (the run being torn down). After either,
 * every call returns -EPIPE. free on a healthy reducer leaves the
 * collective gracefully (ncclCommFinalize, which waits, ticking, until
 * every rank has finalised - a rank's last sends may still be in flight
 * when its last allreduce returns - then ncclCommDestroy); on a broken one,
 * or when the tick says stop while finalising, it aborts.
 *
 * Bits. Every rank ends a call with the same bits (NCCL reduces each
 * element once and then copies it). The order of the sum is NCCL's (ring
 * or tree), not rank order: the same bits as the shm all-reduce for one or
 * two ranks (a + b = b + a), and for more the same bits run to run for a
 * fixed world, topology and NCCL version, but not the shm all-reduce's.
 *
 * n = 0 is a barrier: one float of scratch is summed. Threads: one thread
 * calls a reducer at a time; the device is made current on that thread. */
#include <nccl.h> /* before gpu/check.h, which then defines NCCL_RC */

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"
#include "gpu/check.h"
#include "stages/reducer.h"

_Static_assert(NCCL_UNIQUE_ID_BYTES == REDUCER_NCCL_ID_BYTES, "an NCCL unique id is 128 bytes");

struct reducer_nccl {
    struct reducer r;
    ncclComm_t comm;
    cudaStream_t stream;
    float *one;     /* device: the barrier's float */
    float *scratch; /* device: REDUCER_HOST_FLOATS floats for allreduce_host */
    int device, rank, world;
    bool joined;  /* the communicator's initialisation has completed */
    bool broken;  /* a call failed, or abort: later calls return -EPIPE */
    bool aborted; /* ncclCommAbort done; comm is gone */
    int (*tick)(void *arg);
    void *tick_arg;
};

static void nccl_do_abort(struct reducer_nccl *s)
{
    s->broken = true;
    if (s->comm && !s->aborted) {
        ncclCommAbort(s->comm);
        s->aborted = true;
    }
}

/* One line on stderr for a failure the caller only sees as a code. */
static void say(const struct reducer_nccl *s, const char *what, const char *detail)
{
    fprintf(stderr, "%snccl reducer, rank %d of %d on device %d: %s: %s\n", sl_err_line_start(), s->rank, s->world,
            s->device, what, detail);
}

/* Waits until the communicator has no operation in progress and, with
 * stream, the reducer's stream has run everything queued. 0; -EPIPE for
 * an asynchronous remote error (a peer failed or aborted); -ECANCELED when
 * the tick says stop; -EIO for any other error. Does not abort. */
static int nccl_wait(struct reducer_nccl *s, bool stream, const char *what)
{
    uint64_t next_tick = sl_now_ns() + (uint64_t)REDUCER_TICK_MS * 1000000u;
    for (unsigned spin = 0;; spin++) {
        ncclResult_t st = ncclSuccess, q = ncclCommGetAsyncError(s->comm, &st);
        if (q != ncclSuccess) {
            say(s, what, ncclGetErrorString(q));
            return -EIO;
        }
        if (st != ncclSuccess && st != ncclInProgress) {
            if (st == ncclRemoteError)
                return -EPIPE;
            say(s, what, ncclGetLastError(s->comm));
            return -EIO;
        }
        if (st == ncclSuccess) {
            if (!stream)
                return 0;
            cudaError_t e = cudaStreamQuery(s->stream);
            if (e == cudaSuccess)
                return 0;
            if (e != cudaErrorNotReady) {
                (void)cudaGetLastError();
                say(s, what, cudaGetErrorString(e));
                return -EIO;
            }
        }
        uint64_t now = sl_now_ns();
        if (now >= next_tick) {
            if (s->tick && s->tick(s->tick_arg) != 0)
                return -ECANCELED;
            next_tick = now + (uint64_t)REDUCER_TICK_MS * 1000000u;
        }
        if (spin < 64)
            sched_yield();
        else
            usleep(100);
    }
}

/* Queues the sum of buf[0..n) on the reducer's stream behind `after`
 * (NULL: at once), joining the communicator first if it has not yet
 * (waits, ticking). Returns once NCCL has queued it (a non-blocking
 * communicator may answer ncclInProgress while it does: that is waited
 * for, as no other call may come before). Aborts on failure. */
static int nccl_start(struct reducer *r, float *buf, size_t n, void *after)
{
    struct reducer_nccl *s = (struct reducer_nccl *)r;
    if (s->broken)
        return -EPIPE;
    int rc = 0;
    char msg[320];
    if ((rc = CUDA_RC(cudaSetDevice(s->device), msg, sizeof msg)) != 0) {
        say(s, "allreduce", msg);
        goto fail;
    }
    if (!s->joined) {
        if ((rc = nccl_wait(s, false, "joining the communicator")) != 0)
            goto fail;
        s->joined = true;
    }
    if (after && (rc = CUDA_RC(cudaStreamWaitEvent(s->stream, (cudaEvent_t)after, 0), msg, sizeof msg)) != 0) {
        say(s, "allreduce", msg);
        goto fail;
    }
    if (n == 0) { /* a barrier */
        buf = s->one;
        n = 1;
    }
    ncclResult_t q = ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, s->comm, s->stream);
    if (q != ncclSuccess && q != ncclInProgress) {
        rc = q == ncclRemoteError ? -EPIPE : -EIO;
        if (rc == -EIO)
            say(s, "ncclAllReduce", ncclGetLastError(s->comm));
        goto fail;
    }
    if (q == ncclInProgress && (rc = nccl_wait(s, false, "allreduce")) != 0)
        goto fail;
    return 0;
fail:
    nccl_do_abort(s); /* the peers see it and stop too */
    return rc;
}

/* Waits, ticking, until the reducer's stream has run every sum queued. */
static int nccl_finish(struct reducer *r)
{
    struct reducer_nccl *s = (struct reducer_nccl *)r;
    if (s->broken)
        return -EPIPE;
    int rc = nccl_wait(s, true, "allreduce");
    if (rc)
        nccl_do_abort(s);
    return rc;
}

static int nccl_allreduce(struct reducer *r, float *buf, size_t n)
{
    int rc = nccl_start(r, buf, n, NULL);
    return rc ? rc : nccl_finish(r);
}

/* A host array's sum: up to the scratch buffer on the reducer's stream,
 * summed there, waited for (ticking), and back once the stream is idle
 * (so the copy down never blocks on a peer). */
static int nccl_allreduce_host(struct reducer *r, float *buf, size_t n)
{
    struct reducer_nccl *s = (struct reducer_nccl *)r;
    if (s->broken)
        return -EPIPE;
    if (n == 0 || n > REDUCER_HOST_FLOATS)
        return n == 0 ? nccl_allreduce(r, NULL, 0) : -EINVAL;
    char msg[320];
    int rc;
    if ((rc = CUDA_RC(cudaSetDevice(s->device), msg, sizeof msg)) != 0 ||
        (rc = CUDA_RC(cudaMemcpyAsync(s->scratch, buf, n * sizeof *buf, cudaMemcpyHostToDevice, s->stream), msg,
                      sizeof msg)) != 0) {
        say(s, "allreduce of host values", msg);
        nccl_do_abort(s);
        return rc;
    }
    if ((rc = nccl_allreduce(r, s->scratch, n)) != 0)
        return rc;
    if ((rc = CUDA_RC(cudaMemcpy(buf, s->scratch, n * sizeof *buf, cudaMemcpyDeviceToHost), msg, sizeof msg)) != 0) {
        say(s, "allreduce of host values", msg);
        nccl_do_abort(s);
    }
    return rc;
}

static void nccl_abort(struct reducer *r)
{
    nccl_do_abort((struct reducer_nccl *)r);
}

static void nccl_free(struct reducer *r)
{
    struct reducer_nccl *s = (struct reducer_nccl *)r;
    if (s->comm && !s->aborted) {
        (void)cudaSetDevice(s->device);
        /* a communicator still joining takes no other call; then finalise (collective), or abort */
        bool ok = !s->broken && (s->joined || nccl_wait(s, false, "joining the communicator") == 0);
        if (ok) {
            ncclResult_t q = ncclCommFinalize(s->comm);
            ok = (q == ncclSuccess || q == ncclInProgress) && nccl_wait(s, false, "leaving the communicator") == 0;
        }
        if (ok)
            ncclCommDestroy(s->comm);
        else
            ncclCommAbort(s->comm);
    }
    if (s->one)
        cudaFree(s->one);
    if (s->scratch)
        cudaFree(s->scratch);
    if (s->stream)
        cudaStreamDestroy(s->stream);
    free(s);
}

static const struct reducer_ops nccl_ops = {.name = "nccl",
                                           .device = true,
                                           .allreduce = nccl_allreduce,
                                           .start = nccl_start,
                                           .finish = nccl_finish,
                                           .allreduce_host = nccl_allreduce_host,
                                           .abort = nccl_abort,
                                           .free = nccl_free};

int reducer_nccl_open(struct reducer **out, const unsigned char id[REDUCER_NCCL_ID_BYTES], int rank, int world,
                      int device, int (*tick)(void *), void *tick_arg, char *err, size_t errlen)
{
    *out = NULL;
    if (world < 1 || rank < 0 || rank >= world || device < 0 || !id)
        return sl_errf(err, errlen, -EINVAL,
                       "nccl reducer: rank %d of %d on device %d: need 0 <= rank < world, a "
                       "device ordinal and a unique id",
                       rank, world, device);
    struct reducer_nccl *s = calloc(1, sizeof *s);
    if (!s)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    s->r.ops = &nccl_ops;
    s->device = device;
    s->rank = rank;
    s->world = world;
    s->tick = tick;
    s->tick_arg = tick_arg;
    char msg[320];
    int rc;
    if ((rc = CUDA_RC(cudaSetDevice(device), msg, sizeof msg)) != 0 ||
        (rc = CUDA_RC(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking), msg, sizeof msg)) != 0 ||
        (rc = CUDA_RC(cudaMalloc((void **)&s->one, sizeof(float)), msg, sizeof msg)) != 0 ||
        (rc = CUDA_RC(cudaMemset(s->one, 0, sizeof(float)), msg, sizeof msg)) != 0 ||
        (rc = CUDA_RC(cudaMalloc((void **)&s->scratch, REDUCER_HOST_FLOATS * sizeof(float)), msg, sizeof msg)) != 0) {
        rc = sl_errf(err, errlen, rc, "nccl reducer, rank %d of %d on device %d: %s", rank, world, device, msg);
        goto fail;
    }
    ncclUniqueId uid;
    memcpy(uid.internal, id, sizeof uid.internal);
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0; /* joining must not block: the first allreduce waits, ticking */
    ncclResult_t q = ncclCommInitRankConfig(&s->comm, world, uid, rank, &cfg);
    if (q != ncclSuccess && q != ncclInProgress) {
        rc = sl_errf(err, errlen, q == ncclInvalidArgument || q == ncclInvalidUsage ? -EINVAL : -EIO,
                     "nccl reducer, rank %d of %d on device %d: ncclCommInitRankConfig: %s (%s)", rank, world, device,
                     ncclGetErrorString(q), s->comm ? ncclGetLastError(s->comm) : "no communicator");
        if (s->comm) {
            ncclCommAbort(s->comm);
            s->comm = NULL;
        }
        goto fail;
    }
    *out = &s->r;
    return 0;
fail:
    nccl_free(&s->r);
    return rc;
}
