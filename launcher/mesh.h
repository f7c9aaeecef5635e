/* mesh.h - how the launchers of a multi-node run find and watch each
 * other over ZeroMQ TCP (docs/multinode.md; DESIGN.md sections 2 and 8).
 *
 * One launcher per node, node ranks 0..K-1. Node 0 binds a ROUTER socket
 * on the master endpoint; every other node connects a DEALER to it. All
 * traffic goes through node 0 (a star): what one node says for the others
 * node 0 relays.
 *
 * Rendezvous (mesh_rendezvous, blocking, bounded by timeout_s):
 *     node I -> 0   HELLO      its facts (below)
 *     0 -> joined   WAIT       "missing = 2,3": who has not joined yet, on
 *                              every join and every hb_interval_s
 *     joined -> 0   HEARTBEAT  the answer to each WAIT: still here
 *     0 -> all      WELCOME    the run: its name, the opaque blob, every
 *                              node's host and gradient endpoint
 *     0 -> one      REFUSE     arg 1: this HELLO is refused, and why; the
 *                              others go on waiting for the right node
 *     0 -> joined   REFUSE     arg 2, 3: the rendezvous failed for everyone
 *                              (the timeout, node 0 interrupted)
 *     node I -> 0   LEAVE      node I gives up (interrupted)
 * Facts are "key = value" lines that must be equal on every node (the
 * effective configuration, the dataset's identity, ranks per node, ...):
 * they are the job's identity (mesh_facts_token, its short name). Lines
 * starting with '@' describe the node itself and are not compared (@host,
 * @pid, @endpoint). Node 0 answers each HELLO on its own:
 *   - facts that differ from node 0's (another job pointed at the same
 *     master, or a misconfigured node of this one): refused, naming the
 *     first key that differs;
 *   - a node rank outside 1..K-1 or a bad endpoint: refused;
 *   - a node rank held by another connection: the holder keeps it while
 *     it is there (its connection open, and it answered a WAIT within
 *     peer_timeout_s) and the newcomer is refused, naming both; else the
 *     holder is gone (killed, its machine or network down) and the
 *     newcomer takes its place (a node restarted during the rendezvous);
 *   - else the node joins.
 * Node 0 notes every refusal, and its timeout message names the first
 * ones, so a node of the job refused for a mismatch is named there too.
 * After the rendezvous (mesh_start) every HELLO is refused alone: the run
 * has all its nodes (node 0's mesh_recv hands the refusal over as a
 * MESH_REFUSE event, to be printed).
 *
 * Running (mesh_start: a thread of its own owns the TCP socket, so
 * heartbeats flow whatever the launcher's main thread is doing):
 *     HEARTBEAT  every hb_interval_s, node 0 -> each node, node I -> 0
 *     EPOCH      a node's per-rank results of one epoch (arg = epoch)
 *     FAIL       a node stops the run, and why (text)
 *     END        a node's stages finished; payload its run time (double)
 * The main thread sends EPOCH, FAIL and END with mesh_send and reads what
 * the other nodes sent with mesh_recv; both talk to the thread through an
 * inproc pipe (mesh_pollable() goes into the main thread's zmq_poll).
 * A peer from which nothing came for peer_timeout_s is reported as a FAIL
 * with `lost` set (and node 0 tells the others). Node 0 stops watching a
 * node once it sent END; node I watches node 0 until every node has sent
 * END (node 0 relays the last ENDs before it exits).
 *
 * Message: one frame (after the ROUTER's routing-id frame), a 24-byte
 * header and a payload, host byte order: u32 magic "SLMN" | u16 version |
 * u16 type | u32 from (sending node) | u32 about (the node it concerns) |
 * u64 arg. Messages of another magic or version are refused by name.
 *
 * Errors: 0 or -errno with a message in err naming the node, the address
 * and what to do. Only the launcher's main thread calls these. */
#ifndef SLUICE_LAUNCHER_MESH_H
#define SLUICE_LAUNCHER_MESH_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MESH_NODES_MAX 256
#define MESH_BLOB_BYTES 128 /* an NCCL unique id */
#define MESH_NAME_MAX 48
#define MESH_HOST_MAX 64
#define MESH_ENDPOINT_MAX 128
#define MESH_HB_INTERVAL_S 0.5
#define MESH_PEER_TIMEOUT_S 5.0

enum mesh_type {
    MESH_HELLO = 1,
    MESH_WAIT = 2,
    MESH_WELCOME = 3,
    MESH_REFUSE = 4,
    MESH_LEAVE = 5,
    MESH_HEARTBEAT = 6,
    MESH_EPOCH = 7,
    MESH_FAIL = 8,
    MESH_END = 9,
    MESH_QUIT = 10, /* main thread -> mesh thread only */
};

struct mesh_params {
    uint32_t node, nodes;
    const char *master;   /* "tcp://IP:PORT": node 0 binds it, the others connect to it */
    double timeout_s;     /* the rendezvous' bound */
    const char *facts;    /* this node's facts (above) */
    const char *host;     /* this node, for messages (its hostname) */
    const char *endpoint; /* this node's gradient endpoint (netreduce.h) */
    const char *name;     /* node 0: the run's name */
    const uint8_t *blob;  /* node 0: MESH_BLOB_BYTES every node receives (NULL: zeros) */
    int cancel_fd;        /* readable: the rendezvous gives up with -EINTR; -1: none */
    double hb_interval_s, peer_timeout_s; /* 0: the defaults above */
    /* progress notes ("node 1 joined from ..."); may be NULL */
    void (*note)(void *arg, const char *msg);
    void *note_arg;
};

/* One message from another node, as mesh_recv hands it over; or, on
 * node 0, MESH_REFUSE: a launcher that said HELLO after the start was
 * refused (data: the line to print; about 0). */
struct mesh_event {
    enum mesh_type type; /* MESH_EPOCH, MESH_FAIL, MESH_END or MESH_REFUSE */
    uint32_t about;      /* the node it concerns */
    uint64_t arg;        /* EPOCH: the epoch */
    const void *data;    /* payload (NUL-terminated), valid until the next mesh_recv */
    size_t len;
    bool lost; /* FAIL: the node went silent (this node's or node 0's verdict) */
};

struct mesh {
    uint32_t node, nodes;
    char master[MESH_ENDPOINT_MAX];
    char name[MESH_NAME_MAX];       /* the run's name (node 0's) */
    uint8_t blob[MESH_BLOB_BYTES];  /* node 0's blob */
    char (*endpoints)[MESH_ENDPOINT_MAX]; /* (nodes) gradient endpoints */
    char (*hosts)[MESH_HOST_MAX];         /* (nodes) */
    double hb_interval_s, peer_timeout_s;
    void *ctx;
    void *net;                /* ROUTER (node 0) or DEALER; the mesh thread's once started */
    void *pipe_main, *pipe_thread; /* inproc PAIR */
    pthread_t thread;
    bool running;
    /* node 0: every node's routing id */
    uint8_t (*rid)[256];
    size_t *rid_len;
    char *ev_buf; /* the last event's payload */
    size_t ev_cap;
};

/* Meets the other nodes (above). Blocks at most timeout_s (plus a few
 * seconds' grace on nodes other than 0, so node 0's verdict arrives
 * first). 0: every node joined, m->name, m->blob, m->endpoints and
 * m->hosts are filled. -ETIMEDOUT (the message names the master, the
 * missing node ranks and, on node 0, the refusals seen), -EINVAL (node 0
 * refused this node: a mismatch or a node rank already held, named),
 * -ECONNABORTED (node 0 gave up: interrupted), -EINTR (cancel_fd),
 * -EADDRINUSE or another -errno (the master cannot be bound). */
int mesh_rendezvous(struct mesh *m, const struct mesh_params *p, char *err, size_t errlen);

/* Starts the mesh thread (heartbeats, relaying, watching). 0 or -errno. */
int mesh_start(struct mesh *m, char *err, size_t errlen);

/* The socket to poll (ZMQ_POLLIN) for mesh_recv. */
void *mesh_pollable(const struct mesh *m);

/* Hands a message for the other nodes to the mesh thread: node 0 sends it
 * to every node, the others to node 0, which relays it. Never blocks.
 * type: MESH_EPOCH, MESH_FAIL or MESH_END. 0 or -errno. */
int mesh_send(struct mesh *m, enum mesh_type type, uint64_t arg, const void *payload, size_t len);

/* The next message from the other nodes without blocking: 1 (*ev
 * filled), 0 (none), or -errno. */
int mesh_recv(struct mesh *m, struct mesh_event *ev);

/* Stops the thread, closes the sockets (messages already sent get up to
 * 1 s to leave) and frees. Accepts a zeroed or half-built mesh. */
void mesh_free(struct mesh *m);

/* The first fact on which a and b differ: 0 when none, else 1 with the
 * key and both values (or "(none)") in the buffers. */
int mesh_facts_diff(const char *a, const char *b, char *key, size_t klen, char *va, size_t valen, char *vb,
                    size_t vblen);

/* The job's token: a 64-bit hash of the facts that must match (the '@'
 * lines and the order of the lines do not count). Equal facts, equal
 * tokens; the launchers print it so that the nodes of one job can be told
 * from another's at a glance. */
uint64_t mesh_facts_token(const char *facts);

#endif
