/* clusterenv.h - a multi-node run's flags taken from the environment that
 * torchrun and SLURM set (docs/multinode.md, "From torchrun's and SLURM's
 * environment"), for what the command line left out. Flags always win;
 * what was taken is described for the launcher to print. */
#ifndef SLUICE_LAUNCHER_CLUSTERENV_H
#define SLUICE_LAUNCHER_CLUSTERENV_H

#include <stdbool.h>
#include <stddef.h>

/* What the flags gave, and the values to fill. */
struct clusterenv {
    long nodes;          /* --nodes (or --nnodes); 0: not given */
    long node;           /* --node-rank; -1: not given */
    const char *master;  /* --master HOST:PORT; NULL: not given */
    const char *addr;    /* --master-addr; NULL: not given */
    const char *port;    /* --master-port; NULL: not given */
};

/* The port torchrun uses when MASTER_PORT is unset. */
#define CLUSTERENV_DEFAULT_PORT "29500"

/* The node count, node rank and HOST:PORT for e, the flags first, then
 *   nodes:  NNODES, WORLD_SIZE (one gnnlaunch per node), SLURM_NNODES,
 *           SLURM_JOB_NUM_NODES;
 *   rank:   NODE_RANK, GROUP_RANK, SLURM_NODEID;
 *   master: MASTER_ADDR (else the first host of SLURM_JOB_NODELIST) and
 *           MASTER_PORT (else 29500), each half from its flag when given.
 * get reads a variable (getenv in gnnlaunch; tests pass their own).
 * Fills *nodes (1 when nothing says), *node (-1 when nothing says) and
 * master (empty when nothing says; cap bytes); said gets "" or a line
 * naming each value taken from the environment and its variable. 0, or
 * -EINVAL with a message naming the variable or flag (a value that is
 * not a number, --master with --master-addr, a node list it cannot
 * read). */
int clusterenv_resolve(const struct clusterenv *e, const char *(*get)(const char *name), long *nodes, long *node,
                       char *master, size_t cap, char *said, size_t said_len, char *err, size_t errlen);

/* The first host name of a SLURM node list ("gpu[03-08,11],cpu1" ->
 * "gpu03") into out: 0, or -EINVAL when it is not one. */
int clusterenv_first_host(const char *list, char *out, size_t len);

#endif
