/* trainer_reduce.h - the trainers' gradient collective, and what gnnlaunch
 * and gnn-trainer agree on about it (docs/training.md, docs/multinode.md).
 *
 * Within a node of R > 1 ranks the trainers meet in the shm all-reduce
 * /sluice.<run>.allreduce (ipc/allreduce.h) that the launcher creates.
 * Across the K nodes of a multi-node run, the node leaders (local rank 0)
 * chain their sums over ZeroMQ TCP (ipc/netreduce.h); the launcher writes
 * where each leader listens into <run-dir>/cluster.toml before it starts
 * the stages:
 *
 *     node = 1                       # this node
 *     nodes = 2
 *     run = "4711-6650f1c2-9e03b7aa" # the run's name, agreed by the nodes
 *     endpoints = ["tcp://10.0.0.1:29501", "tcp://10.0.0.2:29502"]
 *     unique_id = "<256 hex digits>" # node 0's 128 bytes: the NCCL unique
 *                                    # id on GPU runs (docs/gpu.md), else
 *                                    # random
 *
 * Either way every rank of every node ends a call with the same bits: the
 * float sum of all W = K*R ranks' buffers in global rank order
 * (netreduce.h). The collective is a reducer (stages/reducer.h): the
 * variant is picked here, the training loop only calls the table. Errors: 0 or -errno with a message. */
#ifndef SLUICE_STAGES_TRAINER_REDUCE_H
#define SLUICE_STAGES_TRAINER_REDUCE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/netreduce.h"
#include "ipc/run.h"
#include "stages/reducer.h"

#define TRAINER_CLUSTER_FILE "cluster.toml"
#define TRAINER_UNIQUE_ID_BYTES 128

/* <run-dir>/cluster.toml (above). */
struct trainer_cluster {
    uint32_t node, nodes;
    char run[64];
    char (*endpoints)[NETREDUCE_ENDPOINT_MAX]; /* (nodes) */
    uint8_t unique_id[TRAINER_UNIQUE_ID_BYTES];
};

/* Launcher: writes run_dir/cluster.toml (atomically: a temporary file
 * renamed). */
int trainer_cluster_write(const char *run_dir, const struct trainer_cluster *c, char *err, size_t errlen);
/* Trainer: reads and checks it (node < nodes, one endpoint per node).
 * -ENOENT, -EINVAL with a message naming the file and key. */
int trainer_cluster_read(const char *run_dir, struct trainer_cluster *c, char *err, size_t errlen);
void trainer_cluster_free(struct trainer_cluster *c);

/* Joins the collective of the run a (a stage's parsed command line)
 * describes, as the reducer it needs (stages/reducer.h): none (*out =
 * NULL) with one rank in the whole run; shm for one node of --ranks > 1;
 * net for --nodes > 1, after reading and checking cluster.toml. floats:
 * the most one call passes (checked against the node's all-reduce). tick
 * is called at least every REDUCER_TICK_MS while a sum waits
 * (heartbeats); non-zero cancels. */
int trainer_reducer_open(struct reducer **out, const struct run_args *a, size_t floats, int (*tick)(void *),
                         void *tick_arg, char *err, size_t errlen);

#endif
