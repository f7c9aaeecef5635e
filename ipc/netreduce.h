/* netreduce.h - sum of float32 arrays across the ranks of several nodes:
 * the shared-memory all-reduce (allreduce.h) within each node, a ZeroMQ
 * TCP chain between the nodes' leaders (local rank 0) across them
 * (DESIGN.md sections 2 and 6; docs/multinode.md). Every trainer calls
 * netreduce_sum() on its [gradients, weight] once a step; when the call
 * returns, every rank of every node holds the same sum.
 *
 * Ranks. K nodes of R ranks each; rank r of node I is global rank
 * G = I*R + r of W = K*R.
 *
 * Determinism. Each element of the result is
 *
 *     ((buf_0[i] + buf_1[i]) + buf_2[i]) + ... + buf_{W-1}[i]
 *
 * in float32, added in global rank order, on every rank of every node: the
 * same bits as the single-node all-reduce of W ranks (allreduce.h), so K
 * nodes of R ranks train exactly like one node of K*R ranks. The chain
 * makes it so (the protocol is at the top of netreduce.c): node I's leader
 * receives node I-1's partial sum P, adds its own buffer to it (P + b, the
 * next term of the sum above), and the node's shm all-reduce adds the
 * rest of its ranks in order; the last node holds the total and sends it
 * back to every other leader, which hands it to its ranks through a second
 * shm all-reduce in which the others contribute -0.0 (the additive
 * identity of IEEE floats: x + -0.0 == x for every x, -0.0 included).
 * Nodes must share the float format (little-endian IEEE 754); messages
 * from another byte order fail the magic check.
 *
 * Calls. Every rank of every node makes the same sequence of calls with
 * the same n in each (n may change from call to call); n = 0 is a barrier
 * over all W ranks. A call returns 0 on success. Any other return leaves
 * the collective broken: the run is being torn down, and the only thing
 * left to do with the handle is netreduce_free.
 *
 * Waiting and cancelling. A call blocks until the sum is back. While it
 * waits (on the local collective or the network) it calls p->tick at
 * least every tick_ms; a tick that returns non-zero cancels the call
 * (-ECANCELED). A leader waiting on the network also returns -EPIPE as
 * soon as the local collective is closed (the supervisor stops the run);
 * with timeout_ms > 0, any wait (for a message, or for the node's other
 * ranks) that lasts that long ends the call with -ETIMEDOUT.
 * So no wait is unbounded unless the caller wants it to be (trainers use
 * no timeout: the launcher watches the other nodes and stops the trainer).
 *
 * Errors: 0 or -errno (with a message in err for init). One struct
 * netreduce is used by one thread. */
#ifndef SLUICE_IPC_NETREDUCE_H
#define SLUICE_IPC_NETREDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/allreduce.h"

#define NETREDUCE_MAGIC 0x314e444552434c53ull /* "SLCREDN1" little endian */
#define NETREDUCE_NODES_MAX 1024u
#define NETREDUCE_ENDPOINT_MAX 256
#define NETREDUCE_TICK_MS 200

struct netreduce_params {
    struct allreduce *local; /* the node's shm all-reduce, bound to this rank; NULL when R == 1 */
    uint32_t rank, ranks;    /* local rank and ranks per node (R) */
    uint32_t node, nodes;    /* this node and the node count (K) */
    /* (nodes) every leader's receiving endpoint ("tcp://10.0.0.2:29501");
     * used by local rank 0 only (may be NULL elsewhere). A leader binds its
     * own and connects to the ones it sends to. */
    const char *const *endpoints;
    void *zmq_ctx;            /* a ZeroMQ context to use (inproc tests); NULL: make one */
    int tick_ms;              /* 0: NETREDUCE_TICK_MS */
    int (*tick)(void *arg);   /* may be NULL; non-zero cancels the call */
    void *tick_arg;
    int timeout_ms;           /* the longest one wait (network or node) lasts; 0: none */
    size_t max_floats;        /* the most floats one call sums: a received frame larger than that is refused
                               * before it is read into memory (a stray peer announcing gigabytes); 0: no limit */
};

struct netreduce {
    struct allreduce *local;
    uint32_t rank, ranks, node, nodes;
    void *ctx;
    bool own_ctx;
    void *pull;   /* leader: partial sums from node - 1, the total from the last node */
    void **push;  /* leader: (nodes) push[k] sends to node k (NULL where it sends nothing) */
    uint64_t step; /* calls so far */
    /* A partial sum of the next call that came in while this leader waited
     * for the total of the current one (middle nodes; see netreduce.c). */
    float *stash;
    size_t stash_cap, stash_n; /* floats */
    uint64_t strays;           /* received frames that were no message of ours (short, bad magic or length): dropped */
    bool stashed;
    float *scratch; /* a received partial sum, before it is added */
    size_t scratch_cap;
    int tick_ms, timeout_ms;
    int (*tick)(void *arg);
    void *tick_arg;
    bool broken;
};

/* Sets up this rank's part: a leader of a multi-node run binds its
 * endpoint and connects to those it sends to (connections complete in the
 * background; nothing here waits for the other nodes). 0; -EINVAL (bad
 * parameters); -EADDRINUSE and other -errno from ZeroMQ, the message
 * naming the endpoint. */
int netreduce_init(struct netreduce *nr, const struct netreduce_params *p, char *err, size_t errlen);

/* Replaces buf[0..n) with the global sum (see Determinism). Blocks. 0;
 * -EINVAL (n differs between the ranks of a node), -EPIPE (local
 * collective closed), -ECANCELED (tick), -ETIMEDOUT (timeout_ms),
 * -EPROTO (a well-formed message out of step: another kind, sender, step
 * or count than expected), or another -errno from ZeroMQ. Frames that are
 * no message of ours at all (too short, another magic, a length that does
 * not match: a port scanner, another program) are dropped and counted in
 * strays; ZeroMQ refuses frames above params.max_floats before reading
 * them. */
int netreduce_sum(struct netreduce *nr, float *buf, size_t n);

/* Closes the sockets (a message still queued gets up to 2 s to reach its
 * node) and frees. Accepts NULL and zeroed or half-built handles. */
void netreduce_free(struct netreduce *nr);

#endif
