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
 * What happens then is the caller's: cluster_poll reports why another
 * node stops this one (struct cluster_stop) and never stops anything
 * itself. Only the launcher's main thread calls these. */
#ifndef SLUICE_LAUNCHER_CLUSTER_H
#define SLUICE_LAUNCHER_CLUSTER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/results.h"
#include "core/config.h"
#include "launcher/mesh.h"

#define CLUSTER_TIMEOUT_S 120.0   /* --rendezvous-timeout's default */
#define CLUSTER_WINDOW 128u       /* epochs of records held at once */
#define CLUSTER_NAME_MAX 40       /* --run-name with --nodes (room for "-n<I>") */

/* The flags as given (nodes 1: a single-node run; the rest unused). */
struct cluster_opts {
    long nodes, node;    /* --nodes, --node-rank (-1: not given) */
    const char *master;  /* --master HOST:PORT */
    double timeout_s;    /* --rendezvous-timeout (<= 0: the default) */
    long gpus;           /* --gpus N, 0 on the CPU: every node must say the same */
};

struct cluster {
    bool on; /* --nodes > 1 */
    uint32_t node, nodes, ranks;
    uint32_t gpus; /* --gpus N, 0 on the CPU */
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

/* Why the other nodes stop this one (cluster_poll). */
enum cluster_stop_kind {
    CLUSTER_GO_ON = 0,    /* nothing: the run goes on */
    CLUSTER_NODE_FAILED,  /* a node sent FAIL: its run stopped (a stage failed, Ctrl-C, ...) */
    CLUSTER_NODE_GONE,    /* a node went silent (the mesh's verdict, or node 0's) */
    CLUSTER_NODE_INVALID, /* a node sent results this one cannot take */
};

struct cluster_stop {
    enum cluster_stop_kind kind;
    uint32_t node;  /* the node it concerns */
    char msg[1024]; /* "node K (HOST): why", the cause to report */
};

/* Checks the flags before anything starts (exit 2 territory): node rank
 * in range, --master parsed and resolved, the gradient port free, a
 * --run-name short enough. ranks: pipeline.ranks. Fills c. 0 or -EINVAL
 * etc. with a message naming the flag. */
int cluster_check(struct cluster *c, const struct cluster_opts *o, int ranks, const char *run_name, char *err,
                  size_t errlen);

/* The rendezvous (mesh_rendezvous; cancel_fd readable interrupts it),
 * then the mesh thread. cfg, start_epoch and --gpus go into the facts
 * every node must share. blob: node 0's MESH_BLOB_BYTES for every node
 * (on a GPU run the NCCL unique id it made), or NULL for random bytes;
 * other nodes pass NULL and read node 0's with cluster_blob. run_name:
 * in, --run-name or "" (node 0 names the run after it); out, this node's
 * run directory's name "<agreed name>-n<I>". 0; -EINTR (interrupted:
 * exit 130); else exit 2. No-op on a single node. */
int cluster_join(struct cluster *c, const struct config *cfg, uint32_t start_epoch, const uint8_t *blob, int cancel_fd,
                 char *run_name, size_t name_len, char *err, size_t errlen);

/* Node 0's blob, as every node received it (after cluster_join). */
const uint8_t *cluster_blob(const struct cluster *c);

/* Writes <run_dir>/cluster.toml for the trainers. No-op on a single node. */
int cluster_write(const struct cluster *c, const char *run_dir, char *err, size_t errlen);

/* Tells the other nodes this one stops, and why: a setup error, a failed
 * stage, Ctrl-C. Only the first call sends; none when this node stops
 * because of another one (cluster_poll reported it). */
void cluster_abort(struct cluster *c, const char *cause);

/* Sends this node's newly complete epochs (from res, this node's results
 * page) and takes in what the other nodes sent. first: the first epoch
 * not printed yet (the window starts there); epochs: train.epochs. Returns
 * true and fills *stop when a node stops the run (the first such message
 * of this call; the rest are taken in too); the caller decides what that
 * does. Call when cluster_pollable() is readable and on every tick. */
bool cluster_poll(struct cluster *c, const struct results *res, uint64_t first, uint64_t epochs,
                  struct cluster_stop *stop);

/* The socket the supervision loop polls, or NULL on a single node. */
void *cluster_pollable(const struct cluster *c);

/* Whether epoch e's results of every rank of every node are in; *sum then
 * holds them added in global rank order. first as for cluster_poll. A
 * single node: results_epoch(res). Reads only. */
bool cluster_epoch(const struct cluster *c, const struct results *res, uint64_t first, uint64_t e,
                   struct results_rec *sum);

/* This node's stages all finished after `seconds`: counts it as ended.
 * Then cluster_poll (the last epochs go out), then cluster_send_end. */
void cluster_mark_end(struct cluster *c, double seconds);
/* Sends END with this node's run time; the final line's seconds are now
 * the largest of every node's (cluster_seconds). */
void cluster_send_end(struct cluster *c, double seconds);

/* Every node sent END. Its epoch records went out before its END on the
 * same path, so every record there will be is then in. */
bool cluster_all_ended(const struct cluster *c);

/* Whether this node takes part in a multi-node run (joined the others). */
bool cluster_joined(const struct cluster *c);

/* The final line's seconds (local, this node's run time, on a single
 * node or before END went out). */
double cluster_seconds(const struct cluster *c, double local);

/* Stops the mesh thread and frees. Idempotent. */
void cluster_free(struct cluster *c);

#endif
