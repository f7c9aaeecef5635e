/* device.h - the launcher's side of the GPUs (docs/gpu.md): which GPUs a
 * node has, which one each rank of `gnnlaunch --gpus N` uses, and the
 * NCCL unique id that the ranks of a run of more than one GPU join with.
 *
 * CUDA is never initialised in the calling process. The launcher forks
 * its stages after it has started ZeroMQ's threads, and a process that has
 * initialised CUDA cannot use it in a child after fork; so everything
 * that calls CUDA or NCCL runs in a forked child of its own:
 *
 *   probe      device_probe_run() forks a child that calls
 *              cudaGetDeviceCount (and reads each device's name), writes
 *              the answer or CUDA's error to a pipe and _exits; the parent
 *              reads it, reaps the child and never calls CUDA itself.
 *   NCCL root  device_nccl_root_start() forks a helper that calls
 *              ncclGetUniqueId, which opens NCCL's bootstrap root (a
 *              listening socket served by a thread of its own), writes the
 *              128-byte id to a pipe and then waits to be killed: the ranks
 *              connect to that root while they create their communicator,
 *              so it must outlive their joining. The helper is in its own
 *              process group (a terminal's Ctrl-C goes to the launcher
 *              only), dies with the caller (PR_SET_PDEATHSIG) and writes
 *              only to stderr (stdout belongs to the trainers).
 *
 * Both fork, so call them before the process has any thread: a child of a
 * threaded process may only call async-signal-safe functions, and CUDA
 * and NCCL are not. (ncclGetUniqueId needs no GPU and does not load the
 * CUDA driver, but it starts a thread; docs/gpu.md has the evidence.)
 *
 * The decision is apart and pure: device_plan_make() takes how many GPUs
 * were asked for, what the probe found and CUDA_VISIBLE_DEVICES, and
 * gives the plan (rank r uses device r of those CUDA sees) or the message
 * that names the flag and what to do. Tests run it on made-up probes.
 *
 * SLUICE_FAKE_GPUS=N (tests only): the probe reports N devices named
 * "fake GPU <i>" without forking, and in a build without NCCL the root's
 * id is 128 random bytes with no helper; no GPU is touched.
 *
 * Functions return 0 or -errno with a message in err. Only the launcher's
 * main thread calls them. */
#ifndef SLUICE_GPU_DEVICE_H
#define SLUICE_GPU_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define DEVICE_NCCL_ID_BYTES 128 /* sizeof(ncclUniqueId) */
#define DEVICE_NAMES_MAX 16      /* devices the probe names */
#define DEVICE_NAME_MAX 96
#define DEVICE_PROBE_TIMEOUT_S 60.0 /* cudaGetDeviceCount on many GPUs without persistence mode takes seconds */

/* What the probe found. */
struct device_probe {
    bool cuda;       /* this build has CUDA (false: count 0, error says how to get it) */
    bool fake;       /* SLUICE_FAKE_GPUS */
    int count;       /* devices CUDA sees (CUDA_VISIBLE_DEVICES applied); 0 when error is set */
    int driver;      /* cudaDriverGetVersion (13000 = 13.0), 0 when there is no driver */
    int runtime;     /* cudaRuntimeGetVersion: the CUDA this build runs on */
    char error[256]; /* why no device count could be read (CUDA's words), or "" */
    char names[DEVICE_NAMES_MAX][DEVICE_NAME_MAX]; /* the first devices' names */
};

/* Finds the GPUs in a forked child (above); blocks until it answers, at
 * most DEVICE_PROBE_TIMEOUT_S (then kills it). 0 with p filled, also when
 * CUDA answered with an error (p->error); -errno when the probe itself
 * could not run or died (fork failed, the child crashed or hung), with a
 * message. */
int device_probe_run(struct device_probe *p, char *err, size_t errlen);

/* Which device each rank uses: rank r uses device r / per_device of
 * those visible (per_device = 1: one rank per GPU; more with gnnlaunch
 * --ranks-per-gpu, device_plan_share). */
struct device_plan {
    int ranks;
    int per_device; /* ranks on each device, >= 1 */
};

/* The decision for --gpus `asked` given what the probe found and
 * CUDA_VISIBLE_DEVICES (`visible`, NULL when unset). 0 with the plan;
 * -ENOTSUP (no CUDA in this build), -ENODEV (no usable GPU) or -ERANGE
 * (more asked than visible), each with one message that starts
 * "--gpus N: " and says what to do. Pure: no system calls. */
int device_plan_make(int asked, const struct device_probe *p, const char *visible, struct device_plan *plan, char *err,
                     size_t errlen);

/* Puts per_device (>= 1) ranks on every device of a plan that
 * device_plan_make made: its ranks become ranks * per_device, rank r on
 * device r / per_device. */
static inline void device_plan_share(struct device_plan *plan, int per_device)
{
    plan->per_device = per_device > 1 ? per_device : 1;
    plan->ranks *= plan->per_device;
}

/* The device ordinal (CUDA's, among the visible devices) of a rank. */
static inline int device_of_rank(const struct device_plan *plan, int rank)
{
    return rank >= 0 && rank < plan->ranks ? rank / (plan->per_device > 1 ? plan->per_device : 1) : -1;
}

/* One line for the launcher: "rank 0 on GPU 0 (NVIDIA H100 80GB HBM3),
 * rank 1 on GPU 1 (...)", with each device's CUDA_VISIBLE_DEVICES entry
 * when that is set. Cut with "..." when it does not fit. */
void device_plan_describe(const struct device_plan *plan, const struct device_probe *p, const char *visible, char *out,
                          size_t len);

/* The helper holding a run's NCCL bootstrap root. */
struct device_nccl_root {
    pid_t pid; /* the helper, 0 when none runs (also: a fake id) */
    uint8_t id[DEVICE_NCCL_ID_BYTES];
};

/* Makes the run's NCCL unique id in a helper process (above) and leaves
 * the helper running. Blocks until the id is made (NCCL reads its
 * configuration and picks a network interface; NCCL_SOCKET_IFNAME
 * chooses it). 0; -ENOTSUP when this build has no NCCL; -EIO with NCCL's
 * message; -errno when the helper could not run. */
int device_nccl_root_start(struct device_nccl_root *r, char *err, size_t errlen);

/* Kills and reaps the helper, unless it has been reaped already (by a
 * waitpid(-1) elsewhere: then only forgets it). Idempotent; accepts a
 * zeroed struct. */
void device_nccl_root_stop(struct device_nccl_root *r);

#endif
