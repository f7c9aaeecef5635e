/* cluster.h - gnnlaunch's side of a multi-node run (docs/multinode.md):
 * the --nodes, --node-rank, --master and --rendezvous-timeout flags, the
 * facts every node must share, the rendezvous, the trainers'
 * cluster.toml, and while the run lasts the per-epoch results, failures
 * and ends that travel between the launchers (launcher/mesh.h).
 *
 * Addresses. --master HOST:PORT: node 0 listens there for the other
 * launchers. The leader trainer (local rank 0) of node I listens for the
 * gradient chain (ipc/netreduce.h) on port PORT + 1 + I of this node's
 * address: node 0's is HOST, another node's is the one it reaches HOST
 * from. So a firewall opens PORT on node 0 and PORT + 1 + I on node I.
 *
 * Results. Every node's launcher sends each epoch's per-rank records from
 * its results page (ipc/results.h) to the others once all its ranks have
 * published it, and prints an epoch's line once it holds every node's
 * records, summed in global rank order (results_rec_add): every node
 * prints the same training numbers, equal to those of one node with all
 * the ranks. A node whose stages all finished sends END with its run time
 * and waits for every other node's END; the final line's seconds are the
 * largest of them, so every node prints the same final line.
 *
 * Failure. A node that stops its run (a stage failed, Ctrl-C, a setup
 * error) sends FAIL with its cause; a node that goes silent is reported
 * lost. Every other node then stops its own stages and exits 3, naming the
 * node and the cause.
 *
 * Only the launcher's main thread calls these. */
#ifndef SLUICE_LAUNCHER_CLUSTER_H
#define SLUICE_LAUNCHER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/results.h"
#include "launcher/mesh.h"

#define CLUSTER_TIMEOUT_S 120.0   /* --rendezvous-timeout's default */
#define CLUSTER_WINDOW 128u       /* epochs of records held at once */
#define CLUSTER_NAME_MAX 40       /* --run-name with --nodes (room for "-n<I>") */

struct launch;

/* The flags as given (nodes 1: a single-node run; the rest unused). */
struct cluster_opts {
    long nodes, node;    /* --nodes, --node-rank (-1: not given) */
    const char *master;  /* --master HOST:PORT */
    double timeout_s;    /* --rendezvous-timeout (<= 0: the default) */
};

struct cluster {
    bool on; /* --nodes > 1 */
    uint32_t node, nodes, ranks;
    double timeout_s;
    char master_arg[256];             /* HOST:PORT as given */
    char master[MESH_ENDPOINT_MAX];   /* tcp://IP:PORT */
    char ip[64];                      /* this node's address, as the others reach it */
    char endpoint[MESH_ENDPOINT_MAX]; /* tcp://ip:PORT+1+node, this node's gradient endpoint */
    struct mesh mesh;
    bool joined;
    /* records of the epochs in the window, per node and rank */
    struct results_rec *recs; /* (CLUSTER_WINDOW, nodes, ranks) */
    uint64_t *have;           /* (CLUSTER_WINDOW, nodes): epoch + 1 whose records the slot holds */
    uint64_t sent;            /* this node's epochs sent so far (from the start epoch on) */
    bool *ended;              /* (nodes) sent END */
    double seconds;           /* the largest END time */
    bool end_sent, fail_sent;
    bool remote_stop; /* the run stops because of another node */
};

/* Checks the flags before anything starts (exit 2 territory): node rank
 * in range, --master parsed and resolved, the gradient port free, a
 * --run-name short enough. Fills l->cl. 0 or -EINVAL etc. with a message
 * naming the flag. */
int cluster_check(struct launch *l, const struct cluster_opts *o, const char *run_name, char *err, size_t errlen);

/* The rendezvous (mesh_rendezvous), then the mesh thread. Sets the run
 * name of this node's run directory ("<agreed name>-n<I>"). 0; -EINTR
 * (interrupted: exit 130); else exit 2. No-op on a single node. */
int cluster_join(struct launch *l, char *err, size_t errlen);

/* Writes <run dir>/cluster.toml for the trainers. No-op on a single node. */
int cluster_write(struct launch *l, char *err, size_t errlen);

/* Tells the other nodes this one gives up before its stages started
 * (a setup error). */
void cluster_abort(struct launch *l, const char *cause);

/* Sends this node's newly complete epochs and handles what the other nodes
 * sent (a FAIL stops the run). Call when mesh_pollable() is readable and
 * on every tick. */
void cluster_poll(struct launch *l);

/* The socket the supervision loop polls, or NULL on a single node. */
void *cluster_pollable(const struct launch *l);

/* Whether epoch e's results of every rank of every node are in; *sum then
 * holds them added in global rank order. A single node: results_epoch. */
bool cluster_epoch(struct launch *l, uint64_t e, struct results_rec *sum);

/* launch_stop's hook: the other nodes learn why this one stops (unless it
 * stops because of them). */
void cluster_stopping(struct launch *l);

/* After the supervision loop: a node whose stages all finished sends END
 * and waits for every other node's END (printing epoch lines meanwhile),
 * or for a failure, Ctrl-C. Returns the exit status (code when single). */
int cluster_finish(struct launch *l, int code);

/* The final line's seconds (this node's run time on a single node). */
double cluster_seconds(const struct launch *l, double local);

/* Stops the mesh thread and frees. Idempotent. */
void cluster_free(struct cluster *c);

#endif
