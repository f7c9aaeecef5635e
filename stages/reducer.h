/* reducer.h - the trainers' gradient sum as a table of operations, so that
 * the training loop calls one collective whatever carries it (DESIGN.md
 * section 6; docs/multinode.md). Variants, one file each:
 *
 *   shm  (reducer_shm.c)  the node's shared-memory all-reduce
 *                         (ipc/allreduce.h): one node of R > 1 ranks
 *   net  (reducer_net.c)  that all-reduce within each node and the ZeroMQ
 *                         TCP chain between the node leaders
 *                         (ipc/netreduce.h): K > 1 nodes of R >= 1 ranks
 *   nccl (reducer_nccl.c) an NCCL communicator over device buffers, for
 *                         the CUDA trainer (library sluice_reducer_nccl,
 *                         built with CUDA and NCCL)
 *
 * stages/trainer_reduce.c picks the variant a run needs from the stage's
 * command line (trainer_reducer_open); a run of one rank has no reducer.
 *
 * Contract of every variant.
 *   init    each variant's own reducer_<name>_open(out, params, err):
 *           joins the collective (attaches, binds, connects; waits for no
 *           peer). 0 or -errno with a message.
 *   allreduce(r, buf, n)
 *           replaces buf[0..n) with the float32 sum over all W ranks of
 *           the run, added in global rank order:
 *               ((buf_0[i] + buf_1[i]) + buf_2[i]) + ... + buf_{W-1}[i]
 *           so every rank ends with the same bits, and every variant
 *           gives the bits of the shm all-reduce of W ranks. Every rank
 *           makes the same sequence of calls with the same n in each (n
 *           <= the params' floats; n = 0 is a barrier). Blocks until the
 *           sum is back, calling params.tick at least every
 *           REDUCER_TICK_MS (heartbeats; non-zero cancels: -ECANCELED).
 *           0; -EPIPE when the collective was aborted or closed by the
 *           supervisor (the run is being torn down); another -errno for a
 *           broken collective. After any non-zero return the reducer is
 *           broken: later calls return -EPIPE and only free is left.
 *   start(r, buf, n, after) and finish(r)   (optional; reducer_start and
 *           reducer_finish stand in for variants without them)
 *           the same sum, split in two so that it can run beside the
 *           caller's work: start queues the sum of buf[0..n) and returns
 *           without waiting for it, not before `after` (a cudaEvent_t the
 *           caller recorded on its stream behind the work that completes
 *           buf; NULL: buf is complete now) has run; finish waits, ticking,
 *           until every sum started since the last finish is in its
 *           buffer. A variant without them sums at once in start (the
 *           allreduce; buf must then be complete: host variants) and
 *           finish returns 0. Calls count as allreduce calls: every rank
 *           makes the same sequence of starts with the same n in each,
 *           and no allreduce comes between a start and its finish. An
 *           error of a started sum is returned by start or by finish,
 *           with the codes and the broken state of allreduce.
 *   allreduce_host(r, buf, n)   (device variants; host variants leave it
 *           NULL and reducer_allreduce_host calls allreduce)
 *           the same sum of a small array in host memory (n <=
 *           REDUCER_HOST_FLOATS), through a device scratch buffer of the
 *           variant's own: for the few numbers the loop itself compares
 *           across ranks (the parameters' digest after an epoch). Counts
 *           as an allreduce call; waits, ticking, with allreduce's codes.
 *   abort(r)
 *           makes every rank's waiting and later allreduce return -EPIPE
 *           (what the supervisor's close does), from this rank; never
 *           blocks; idempotent.
 *   free(r) leaves the collective and frees r (never unlinks what the
 *           launcher created). Accepts NULL (reducer_free).
 *
 * Memory. ops->device says where buf lives: false, host memory (shm, net);
 * true, device memory of the backend's GPU (NCCL). The trainer backend
 * passes its own reduce buffer and checks that the two agree.
 *
 * Threads: one thread calls a reducer at a time. */
#ifndef SLUICE_STAGES_REDUCER_H
#define SLUICE_STAGES_REDUCER_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/allreduce.h"

#define REDUCER_TICK_MS 200 /* = NETREDUCE_TICK_MS */
#define REDUCER_HOST_FLOATS 64 /* the most floats allreduce_host sums */

struct reducer;

struct reducer_ops {
    const char *name; /* "shm", "net", ... */
    bool device;      /* buffers are device pointers */
    int (*allreduce)(struct reducer *r, float *buf, size_t n);
    int (*start)(struct reducer *r, float *buf, size_t n, void *after); /* may be NULL */
    int (*finish)(struct reducer *r);                                   /* NULL with start */
    int (*allreduce_host)(struct reducer *r, float *buf, size_t n);      /* NULL: host buffers */
    void (*abort)(struct reducer *r);
    void (*free)(struct reducer *r);
};

/* Every variant's handle begins with this. */
struct reducer {
    const struct reducer_ops *ops;
};

/* What a variant's open takes (each says which fields it reads). */
struct reducer_params {
    const char *allreduce_name; /* the node's shm all-reduce segment (when ranks > 1) */
    size_t floats;              /* the most floats one call passes */
    uint32_t rank, ranks;       /* local rank and ranks per node (R) */
    uint32_t node, nodes;       /* this node and the node count (K) */
    const char *const *endpoints; /* net: (nodes) the leaders' endpoints (netreduce.h) */
    int (*tick)(void *arg);       /* may be NULL */
    void *tick_arg;
};

/* shm: ranks > 1, nodes == 1. Attaches allreduce_name as `rank`; -EINVAL
 * when the segment holds fewer than `floats` floats. */
int reducer_shm_open(struct reducer **out, const struct reducer_params *p, char *err, size_t errlen);

/* net: nodes > 1. Attaches the node's all-reduce when ranks > 1 (as shm),
 * then sets up the chain (netreduce_init). */
int reducer_net_open(struct reducer **out, const struct reducer_params *p, char *err, size_t errlen);

/* nccl: joins the NCCL communicator of `world` ranks named by id (an
 * ncclUniqueId's 128 bytes, made once for the run by ncclGetUniqueId) as
 * `rank`, on CUDA device `device` (made current on the calling thread;
 * the buffers allreduce takes are device memory there). Does not wait for
 * the other ranks: the first allreduce does, ticking. tick as in struct
 * reducer_params. 0, -EINVAL (arguments), or -ENODEV / -ENOMEM / -EIO
 * from CUDA or NCCL, with a message. Sums in NCCL's order, not rank order
 * (the same bits as shm for world <= 2; reducer_nccl.c has the details). */
#define REDUCER_NCCL_ID_BYTES 128
int reducer_nccl_open(struct reducer **out, const unsigned char id[REDUCER_NCCL_ID_BYTES], int rank, int world,
                      int device, int (*tick)(void *), void *tick_arg, char *err, size_t errlen);

/* Attaches the node's all-reduce `name` as `rank` and checks it holds
 * `floats` (shared by the variants that sum within a node). */
int reducer_attach_node(struct allreduce *ar, const char *name, uint32_t rank, size_t floats, char *err,
                        size_t errlen);

static inline int reducer_allreduce(struct reducer *r, float *buf, size_t n)
{
    return r->ops->allreduce(r, buf, n);
}

static inline int reducer_start(struct reducer *r, float *buf, size_t n, void *after)
{
    return r->ops->start ? r->ops->start(r, buf, n, after) : r->ops->allreduce(r, buf, n);
}

static inline int reducer_finish(struct reducer *r)
{
    return r->ops->finish ? r->ops->finish(r) : 0;
}

/* The sum of buf[0..n) in host memory over all ranks, whatever memory
 * the variant sums in (allreduce_host above); -EINVAL for n above
 * REDUCER_HOST_FLOATS or a device variant without it. */
static inline int reducer_allreduce_host(struct reducer *r, float *buf, size_t n)
{
    if (n > REDUCER_HOST_FLOATS)
        return -EINVAL;
    if (!r->ops->device)
        return r->ops->allreduce(r, buf, n);
    return r->ops->allreduce_host ? r->ops->allreduce_host(r, buf, n) : -EINVAL;
}

static inline void reducer_abort(struct reducer *r)
{
    r->ops->abort(r);
}

static inline void reducer_free(struct reducer *r)
{
    if (r)
        r->ops->free(r);
}

#endif
