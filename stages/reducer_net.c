/* reducer_net.c - the reducer of a multi-node run (reducer.h): each node's
 * shared-memory all-reduce and the ZeroMQ TCP chain between the node
 * leaders, composed by ipc/netreduce.h (which also gives the global rank
 * order sum and the protocol). */
#include "stages/reducer.h"

#include <errno.h>
#include <stdlib.h>

#include "core/util.h"
#include "ipc/netreduce.h"

struct reducer_net {
    struct reducer r;
    struct allreduce ar; /* the node's (R > 1) */
    bool has_ar;
    struct netreduce nr;
    bool aborted;
};

static int net_allreduce(struct reducer *r, float *buf, size_t n)
{
    struct reducer_net *s = (struct reducer_net *)r;
    return s->aborted ? -EPIPE : netreduce_sum(&s->nr, buf, n); /* broken after an error: -EPIPE then */
}

/* Closing the node's all-reduce fails every rank of the node, leaders
 * waiting on the network included (netreduce.h); the other nodes learn it
 * from their launchers. */
static void net_abort(struct reducer *r)
{
    struct reducer_net *s = (struct reducer_net *)r;
    if (s->has_ar)
        allreduce_close(&s->ar);
    s->aborted = true;
}

static void net_free(struct reducer *r)
{
    struct reducer_net *s = (struct reducer_net *)r;
    netreduce_free(&s->nr);
    if (s->has_ar)
        allreduce_free(&s->ar);
    free(s);
}

static const struct reducer_ops net_ops = {
    .name = "net", .device = false, .allreduce = net_allreduce, .abort = net_abort, .free = net_free};

int reducer_net_open(struct reducer **out, const struct reducer_params *p, char *err, size_t errlen)
{
    *out = NULL;
    if (p->nodes < 2 || p->ranks < 1 || (p->ranks > 1 && !p->allreduce_name))
        return sl_errf(err, errlen, -EINVAL, "net reducer: 2 or more nodes (%u nodes of %u ranks)", p->nodes,
                       p->ranks);
    struct reducer_net *s = calloc(1, sizeof *s);
    if (!s)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    int rc;
    if (p->ranks > 1) {
        if ((rc = reducer_attach_node(&s->ar, p->allreduce_name, p->rank, p->floats, err, errlen)) != 0) {
            free(s);
            return rc;
        }
        s->has_ar = true;
    }
    struct netreduce_params np = {.local = s->has_ar ? &s->ar : NULL,
                                  .rank = p->rank,
                                  .ranks = p->ranks,
                                  .node = p->node,
                                  .nodes = p->nodes,
                                  .endpoints = p->endpoints,
                                  .tick_ms = REDUCER_TICK_MS,
                                  .tick = p->tick,
                                  .tick_arg = p->tick_arg,
                                  .max_floats = SL_MAX(p->floats, (size_t)REDUCER_HOST_FLOATS)};
    if ((rc = netreduce_init(&s->nr, &np, err, errlen)) != 0) {
        net_free(&s->r);
        return rc;
    }
    s->r.ops = &net_ops;
    *out = &s->r;
    return 0;
}
