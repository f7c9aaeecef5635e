/* netreduce.c - the all-reduce across nodes (API and guarantees in
 * netreduce.h).
 *
 * Protocol
 * --------
 * Sockets (leaders only, i.e. local rank 0 of each node I of K):
 *     pull      PULL bound at endpoints[I]; receives node I-1's partial
 *               sums (I > 0) and the last node's totals (I < K-1)
 *     push[I+1] PUSH connected to endpoints[I+1] (I < K-1): partial sums
 *     push[k]   on the last node, PUSH connected to every endpoints[k],
 *               k < K-1: totals
 * Each PUSH has one peer and each sender one PUSH, so ZeroMQ keeps every
 * sender's messages in order; connections are made in the background and
 * messages queue until they are up.
 *
 * Message: one frame, a 32-byte header and n floats, host byte order:
 *     u64 magic (NETREDUCE_MAGIC) | u32 kind (1 partial, 2 total) |
 *     u32 from (sending node) | u64 step (0, 1, ... calls) | u64 n
 * A receiver checks all of it against what it expects (kind and sender
 * for its position in the chain, its own step count, its own n) and fails
 * the call with -EPROTO on anything else.
 *
 * One call, rank r of node I (b: this rank's buffer):
 *   1. leader, I > 0: receive node I-1's partial P of this step;
 *      b := P + b, elementwise, in that order;
 *   2. all ranks of the node: shm all-reduce of b (R > 1), which adds the
 *      ranks in local order: every rank now holds P_I, the sum of global
 *      ranks 0 .. (I+1)R-1 in order;
 *   3. leader, I < K-1: send P_I to node I+1 as this step's partial;
 *   4. last node: P_{K-1} is the total T; its leader sends T to every
 *      other leader, and its ranks are done. Other nodes: the leader
 *      receives T (b := T), the other ranks set b := -0.0, and a second
 *      shm all-reduce gives every rank T + -0.0 + ... = T.
 * Step 1's addition continues exactly the left-to-right sum the previous
 * node ended with, so the result is the global rank-order sum of
 * netreduce.h, bit for bit.
 *
 * Ordering. A middle node (0 < I < K-1) receives both kinds on one
 * socket, from two senders. While it waits for the total of step s, node
 * I-1 may already have the total of s and send its partial of s+1, which
 * can overtake it; it is kept (one message at most: node I-1 cannot send
 * the partial of s+2 before the total of s+1 exists, which needs node I's
 * part of s+1) and used by the next call. No other message can come
 * early: a total of s needs this node's part of s first.
 *
 * Waits poll the socket every tick_ms, calling tick, checking the local
 * collective's close flag and the silence timeout; the shm all-reduce is
 * waited on the same way through its resumable timeouts. */
#include "ipc/netreduce.h"

#include <errno.h>
#include <float.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "core/util.h"

#if defined(__FAST_MATH__)
#error "netreduce.c must not be built with -ffast-math: its sums must be bit-reproducible"
#endif
#if FLT_EVAL_METHOD != 0
#error "netreduce.c needs float arithmetic evaluated in float (FLT_EVAL_METHOD 0)"
#endif

#define NR_PARTIAL 1u
#define NR_TOTAL 2u
#define NR_LINGER_MS 2000

struct nr_hdr {
    uint64_t magic;
    uint32_t kind;
    uint32_t from;
    uint64_t step;
    uint64_t n;
};
_Static_assert(sizeof(struct nr_hdr) == 32, "netreduce header is 32 bytes");

static bool leader(const struct netreduce *nr)
{
    return nr->rank == 0 && nr->nodes > 1;
}

static int zerr(void)
{
    int e = zmq_errno();
    return e > 0 ? -e : -EIO;
}

static void *open_socket(void *ctx, int type, int linger)
{
    void *s = zmq_socket(ctx, type);
    if (s)
        zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof linger);
    return s;
}

int netreduce_init(struct netreduce *nr, const struct netreduce_params *p, char *err, size_t errlen)
{
    memset(nr, 0, sizeof *nr);
    if (!p || p->ranks == 0 || p->rank >= p->ranks || p->nodes == 0 || p->nodes > NETREDUCE_NODES_MAX ||
        p->node >= p->nodes || (p->ranks > 1 && (!p->local || p->local->ranks != p->ranks)) ||
        (p->ranks == 1 && p->local && p->local->ranks != 1))
        return sl_errf(err, errlen, -EINVAL, "netreduce: bad parameters (rank %u of %u, node %u of %u, local %s)",
                       p ? p->rank : 0, p ? p->ranks : 0, p ? p->node : 0, p ? p->nodes : 0,
                       p && p->local ? "given" : "none");
    nr->local = p->ranks > 1 ? p->local : NULL;
    nr->rank = p->rank;
    nr->ranks = p->ranks;
    nr->node = p->node;
    nr->nodes = p->nodes;
    nr->tick_ms = p->tick_ms > 0 ? p->tick_ms : NETREDUCE_TICK_MS;
    nr->timeout_ms = p->timeout_ms > 0 ? p->timeout_ms : 0;
    nr->tick = p->tick;
    nr->tick_arg = p->tick_arg;
    if (!leader(nr))
        return 0;
    if (!p->endpoints)
        return sl_errf(err, errlen, -EINVAL, "netreduce: node %u's leader needs the nodes' endpoints", p->node);
    for (uint32_t k = 0; k < p->nodes; k++)
        if (!p->endpoints[k] || !*p->endpoints[k] || strlen(p->endpoints[k]) >= NETREDUCE_ENDPOINT_MAX)
            return sl_errf(err, errlen, -EINVAL, "netreduce: node %u has no usable endpoint", k);
    int rc;
    nr->ctx = p->zmq_ctx;
    if (!nr->ctx) {
        nr->ctx = zmq_ctx_new();
        if (!nr->ctx)
            return sl_errf(err, errlen, zerr(), "netreduce: zmq_ctx_new: %s", zmq_strerror(zmq_errno()));
        nr->own_ctx = true;
    }
    nr->push = calloc(p->nodes, sizeof *nr->push);
    if (!nr->push) {
        rc = sl_errf(err, errlen, -ENOMEM, "netreduce: out of memory");
        goto err;
    }
    nr->pull = open_socket(nr->ctx, ZMQ_PULL, 0);
    if (nr->pull && p->max_floats) {
        int64_t max = (int64_t)(sizeof(struct nr_hdr) + 4 * p->max_floats);
        zmq_setsockopt(nr->pull, ZMQ_MAXMSGSIZE, &max, sizeof max);
    }
    if (!nr->pull || zmq_bind(nr->pull, p->endpoints[p->node]) != 0) {
        rc = zerr();
        sl_errf(err, errlen, rc,
                "node %u cannot listen on %s for the gradient exchange: %s; another program may hold the port (the "
                "gradient port of node I is the --master port + 1 + I)",
                p->node, p->endpoints[p->node], zmq_strerror(-rc));
        goto err;
    }
    for (uint32_t k = 0; k < p->nodes; k++) {
        bool sends = (k == p->node + 1) || (p->node == p->nodes - 1 && k < p->node);
        if (!sends)
            continue;
        nr->push[k] = open_socket(nr->ctx, ZMQ_PUSH, NR_LINGER_MS);
        if (!nr->push[k] || zmq_connect(nr->push[k], p->endpoints[k]) != 0) {
            rc = zerr();
            sl_errf(err, errlen, rc, "node %u cannot connect to node %u at %s: %s", p->node, k, p->endpoints[k],
                    zmq_strerror(-rc));
            goto err;
        }
    }
    return 0;
err:
    netreduce_free(nr);
    return rc;
}

void netreduce_free(struct netreduce *nr)
{
    if (!nr)
        return;
    if (nr->pull)
        zmq_close(nr->pull);
    for (uint32_t k = 0; nr->push && k < nr->nodes; k++)
        if (nr->push[k])
            zmq_close(nr->push[k]);
    free(nr->push);
    if (nr->own_ctx && nr->ctx)
        zmq_ctx_term(nr->ctx);
    free(nr->stash);
    free(nr->scratch);
    memset(nr, 0, sizeof *nr);
}

/* The node's shm all-reduce, waiting tick by tick (R = 1: nothing to do). */
static int local_sum(struct netreduce *nr, float *buf, size_t n)
{
    if (!nr->local)
        return 0;
    double t0 = (sl_now() * 1e3);
    for (;;) {
        int rc = allreduce_sum(nr->local, buf, n, nr->tick_ms);
        if (rc != -ETIMEDOUT && rc != -EINTR)
            return rc;
        if (nr->tick && nr->tick(nr->tick_arg) != 0)
            return -ECANCELED;
        if (nr->timeout_ms > 0 && (sl_now() * 1e3) - t0 >= nr->timeout_ms)
            return -ETIMEDOUT;
    }
}

/* Waits until s is ready for `events`, tick by tick. 0 or -errno. */
static int wait_socket(struct netreduce *nr, void *s, short events)
{
    double t0 = (sl_now() * 1e3);
    for (;;) {
        zmq_pollitem_t it = {.socket = s, .events = events};
        int n = zmq_poll(&it, 1, nr->tick_ms);
        if (n < 0 && zmq_errno() != EINTR)
            return zerr();
        if (n > 0 && (it.revents & events))
            return 0;
        if (nr->tick && nr->tick(nr->tick_arg) != 0)
            return -ECANCELED;
        if (nr->local && allreduce_is_closed(nr->local))
            return -EPIPE;
        if (nr->timeout_ms > 0 && (sl_now() * 1e3) - t0 >= nr->timeout_ms)
            return -ETIMEDOUT;
    }
}

static int send_sum(struct netreduce *nr, uint32_t to, uint32_t kind, const float *buf, size_t n)
{
    struct nr_hdr h = {.magic = NETREDUCE_MAGIC, .kind = kind, .from = nr->node, .step = nr->step, .n = n};
    zmq_msg_t m;
    if (zmq_msg_init_size(&m, sizeof h + n * sizeof(float)) != 0)
        return zerr();
    memcpy(zmq_msg_data(&m), &h, sizeof h);
    if (n)
        memcpy((char *)zmq_msg_data(&m) + sizeof h, buf, n * sizeof(float));
    for (;;) {
        if (zmq_msg_send(&m, nr->push[to], ZMQ_DONTWAIT) >= 0)
            return 0;
        int e = zmq_errno();
        if (e != EAGAIN && e != EINTR) {
            zmq_msg_close(&m);
            return -e;
        }
        int rc = wait_socket(nr, nr->push[to], ZMQ_POLLOUT);
        if (rc) {
            zmq_msg_close(&m);
            return rc;
        }
    }
}

static int grow(float **p, size_t *cap, size_t n)
{
    if (n <= *cap)
        return 0;
    float *q = realloc(*p, SL_MAX(n, 1) * sizeof *q);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* Receives this step's message of `kind` (n floats) into out, keeping an
 * early partial sum of the next step aside (see Ordering). */
static int recv_sum(struct netreduce *nr, uint32_t kind, float *out, size_t n)
{
    if (kind == NR_PARTIAL && nr->stashed) {
        nr->stashed = false;
        if (nr->stash_n != n)
            return -EPROTO;
        if (n)
            memcpy(out, nr->stash, n * sizeof *out);
        return 0;
    }
    uint32_t want_from = kind == NR_PARTIAL ? nr->node - 1 : nr->nodes - 1;
    for (;;) {
        int rc = wait_socket(nr, nr->pull, ZMQ_POLLIN);
        if (rc)
            return rc;
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, nr->pull, ZMQ_DONTWAIT) < 0) {
            int e = zmq_errno();
            zmq_msg_close(&m);
            if (e == EAGAIN || e == EINTR)
                continue;
            return -e;
        }
        struct nr_hdr h;
        size_t len = zmq_msg_size(&m);
        if (len < sizeof h) { /* not a message of ours (a stray peer on the port): dropped */
            zmq_msg_close(&m);
            nr->strays++;
            continue;
        }
        memcpy(&h, zmq_msg_data(&m), sizeof h);
        const char *data = (const char *)zmq_msg_data(&m) + sizeof h;
        bool sane = h.magic == NETREDUCE_MAGIC && h.n <= (len - sizeof h) / sizeof(float) &&
                    len == sizeof h + h.n * sizeof(float);
        if (!sane) { /* likewise: only a well-formed message of this run can be out of step */
            zmq_msg_close(&m);
            nr->strays++;
            continue;
        }
        if (sane && h.kind == kind && h.from == want_from && h.step == nr->step && h.n == n) {
            if (n) /* a barrier's message carries nothing (out may be NULL) */
                memcpy(out, data, n * sizeof *out);
            zmq_msg_close(&m);
            return 0;
        }
        /* a middle node waiting for a total: the next step's partial (of
         * that call's n) may overtake it */
        if (sane && kind == NR_TOTAL && h.kind == NR_PARTIAL && h.from == nr->node - 1 && nr->node > 0 &&
            h.step == nr->step + 1 && !nr->stashed) {
            rc = grow(&nr->stash, &nr->stash_cap, h.n);
            if (rc == 0) {
                if (h.n) /* a barrier's partial: nothing to keep, and no stash may exist yet */
                    memcpy(nr->stash, data, h.n * sizeof *nr->stash);
                nr->stash_n = h.n;
                nr->stashed = true;
            }
            zmq_msg_close(&m);
            if (rc)
                return rc;
            continue;
        }
        zmq_msg_close(&m);
        return -EPROTO;
    }
}

static int sum_call(struct netreduce *nr, float *buf, size_t n)
{
    if (nr->nodes == 1)
        return local_sum(nr, buf, n);
    int rc;
    bool lead = nr->rank == 0, last = nr->node == nr->nodes - 1;
    /* 1. continue the previous node's left-to-right sum */
    if (lead && nr->node > 0) {
        if ((rc = grow(&nr->scratch, &nr->scratch_cap, n)) != 0 || (rc = recv_sum(nr, NR_PARTIAL, nr->scratch, n)) != 0)
            return rc;
        const float *p = nr->scratch;
        for (size_t i = 0; i < n; i++)
            buf[i] = p[i] + buf[i];
    }
    /* 2. the node's ranks, in order */
    if ((rc = local_sum(nr, buf, n)) != 0)
        return rc;
    /* 3. on to the next node */
    if (lead && !last && (rc = send_sum(nr, nr->node + 1, NR_PARTIAL, buf, n)) != 0)
        return rc;
    /* 4. the total, from the last node to everyone */
    if (last) {
        for (uint32_t k = 0; lead && k + 1 < nr->nodes; k++)
            if ((rc = send_sum(nr, k, NR_TOTAL, buf, n)) != 0)
                return rc;
        return 0;
    }
    if (lead) {
        if ((rc = recv_sum(nr, NR_TOTAL, buf, n)) != 0)
            return rc;
    } else {
        for (size_t i = 0; i < n; i++)
            buf[i] = -0.0f;
    }
    return local_sum(nr, buf, n);
}

int netreduce_sum(struct netreduce *nr, float *buf, size_t n)
{
    if (!nr || nr->ranks == 0 || (n > 0 && !buf))
        return -EINVAL;
    if (nr->broken)
        return -EPIPE;
    int rc = sum_call(nr, buf, n);
    if (rc) {
        nr->broken = true;
        return rc;
    }
    nr->step++;
    return 0;
}
