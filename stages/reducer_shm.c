/* reducer_shm.c - the reducer of one node (reducer.h): the node's
 * shared-memory all-reduce (ipc/allreduce.h), waited on tick by tick. Its
 * rank-order sum is already the run's global one (one node: global rank =
 * local rank). */
#include "stages/reducer.h"

#include <errno.h>
#include <stdlib.h>

#include "core/util.h"

struct reducer_shm {
    struct reducer r;
    struct allreduce ar;
    int (*tick)(void *arg);
    void *tick_arg;
    bool broken;
};

int reducer_attach_node(struct allreduce *ar, const char *name, uint32_t rank, size_t floats, char *err,
                        size_t errlen)
{
    int rc = allreduce_attach(ar, name, rank, err, errlen);
    if (rc)
        return rc;
    if (ar->max_floats < floats) {
        rc = sl_errf(err, errlen, -EINVAL, "the all-reduce holds %zu floats, the model needs %zu", ar->max_floats,
                     floats);
        allreduce_free(ar);
        return rc;
    }
    return 0;
}

static int shm_allreduce(struct reducer *r, float *buf, size_t n)
{
    struct reducer_shm *s = (struct reducer_shm *)r;
    if (s->broken)
        return -EPIPE;
    int rc;
    for (;;) {
        rc = allreduce_sum(&s->ar, buf, n, REDUCER_TICK_MS);
        if (rc != -ETIMEDOUT && rc != -EINTR)
            break;
        if (s->tick && s->tick(s->tick_arg) != 0) {
            rc = -ECANCELED;
            break;
        }
    }
    if (rc)
        s->broken = true;
    return rc;
}

static void shm_abort(struct reducer *r)
{
    allreduce_close(&((struct reducer_shm *)r)->ar);
}

static void shm_free(struct reducer *r)
{
    struct reducer_shm *s = (struct reducer_shm *)r;
    allreduce_free(&s->ar);
    free(s);
}

static const struct reducer_ops shm_ops = {
    .name = "shm", .device = false, .allreduce = shm_allreduce, .abort = shm_abort, .free = shm_free};

int reducer_shm_open(struct reducer **out, const struct reducer_params *p, char *err, size_t errlen)
{
    *out = NULL;
    if (p->ranks < 2 || p->nodes != 1 || p->rank >= p->ranks || !p->allreduce_name)
        return sl_errf(err, errlen, -EINVAL, "shm reducer: one node of 2 or more ranks (rank %u of %u, %u nodes)",
                       p->rank, p->ranks, p->nodes);
    struct reducer_shm *s = calloc(1, sizeof *s);
    if (!s)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    int rc = reducer_attach_node(&s->ar, p->allreduce_name, p->rank, p->floats, err, errlen);
    if (rc) {
        free(s);
        return rc;
    }
    s->r.ops = &shm_ops;
    s->tick = p->tick;
    s->tick_arg = p->tick_arg;
    *out = &s->r;
    return 0;
}
