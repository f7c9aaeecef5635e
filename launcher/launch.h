/* launch.h - one gnnlaunch run: what it was asked to do, what it created
 * and where it stands. main.c fills and tears it down; supervise.c drives
 * it (its event loop calls control, cluster and progress, which never call
 * back: cluster reports why other nodes stop this one, progress gets its
 * epoch results through a callback); control.c and trace.c read it.
 * Single-threaded: only the launcher's main thread touches it. */
#ifndef SLUICE_LAUNCHER_LAUNCH_H
#define SLUICE_LAUNCHER_LAUNCH_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/config.h"
#include "core/partition.h"
#include "core/dataset_verify.h"
#include "gpu/device.h"
#include "ipc/shm.h"
#include "launcher/ckptdir.h"
#include "launcher/cluster.h"
#include "launcher/control.h"
#include "launcher/layout.h"
#include "launcher/link.h"
#include "launcher/memfit.h"
#include "launcher/predict.h"
#include "launcher/progress.h"
#include "launcher/rundir.h"
#include "launcher/spawn.h"

#define LAUNCH_GRACE_S 2.0 /* SIGTERM -> SIGKILL grace period when stopping */

enum launch_phase {
    LAUNCH_SETUP,    /* creating the run; no stage started yet */
    LAUNCH_RUNNING,  /* stages running */
    LAUNCH_STOPPING, /* queues closed, SIGTERM sent, waiting (then SIGKILL) */
    LAUNCH_ENDED,    /* every stage reaped */
};

enum launch_outcome {
    LAUNCH_OK,             /* every stage exited 0 on its own: exit 0 */
    LAUNCH_FAILED,         /* a stage failed or could not start: exit 3 */
    LAUNCH_INTERRUPTED,    /* SIGINT, SIGTERM or SIGHUP: exit 130 */
    LAUNCH_STOP_REQUESTED, /* "stop" on the control socket: exit 130 */
    LAUNCH_STOPPED_EARLY,  /* train.early_stop_patience ran out: exit 0 */
};

struct launch {
    /* what was asked */
    struct config cfg;              /* effective configuration */
    char config_path[PATH_MAX];     /* CONFIG, absolute */
    char stage_dir[PATH_MAX];       /* where the stage programs are */
    char metrics_file[PATH_MAX];    /* --metrics, absolute, or "" */
    char trace_file[PATH_MAX];      /* --trace, absolute, or "" */
    char csv_file[PATH_MAX];        /* --metrics-csv, absolute, or "" */
    char tboard_dir[PATH_MAX];      /* --tensorboard, absolute, or "" */
    char run_name[RUNDIR_NAME_MAX]; /* --run-name, or "" */
    bool resume;          /* --resume or --resume-from */
    bool strict_outputs;  /* --strict-outputs: a failed --metrics or --trace write fails the run */
    struct ckptdir ckd;   /* train.checkpoint_dir, locked for the run's life (node 0) */
    uint32_t start_epoch; /* with --resume: epochs the checkpoint already holds */
    int ranks;
    struct run_arena_plan arena; /* each rank's batch arena */
    struct layout_featbuf_plan featbuf; /* each rank's feature buffer */
    struct memfit_plan mem;             /* the memory limit and what the run takes of it (memfit.h) */
    uint64_t pack_mem;                  /* pipeline.mode = "packed": a rank's buffers for the pack (check_pack) */
    size_t reduce_floats;               /* the trainers' all-reduce size (0: none) */
    int gpus;                           /* --gpus N (0: the CPU) */
    bool gpu_trainer;                   /* RUN_TRAINER_GPU_PROGRAM is in stage_dir: GPU ranks run it */
    int ranks_per_gpu;                  /* --ranks-per-gpu K (1: one rank per GPU) */
    struct device_probe gpu_probe;      /* what the GPU probe found (--gpus) */
    struct device_plan gpu_plan;        /* which GPU each rank uses (--gpus) */
    struct dataset_verify_stamp data_stamp; /* the dataset's files as verified at launch (verify.c) */
    struct parts_meta parts;                /* pipeline.mode = "partitions": the layout (checked) */
    char parts_dir[PATH_MAX];               /* ... and its directory */

    /* what was made */
    char run_id[SHM_RUN_ID_MAX];
    struct rundir dir;
    struct layout layout;
    struct control ctl;
    struct cluster cl;            /* a multi-node run's side (cluster.h); cl.on false on one node */
    struct device_nccl_root nccl; /* node 0 of a run of more than one GPU: the helper holding NCCL's root */
    bool has_nccl_id;             /* the trainers get nccl_id (a run of more than one GPU in all) */
    uint8_t nccl_id[RUN_NCCL_ID_BYTES]; /* node 0's NCCL unique id */
    struct spawn_child *children; /* (nchildren): rank-major, pipeline order */
    int nchildren;
    int sigfd, devnull;          /* -1 when not open */
    bool watch_hup;              /* SIGHUP was not ignored when we started */

    /* where it stands */
    double t_start; /* sl_now() when the run was created */
    enum launch_phase phase;
    enum launch_outcome outcome;
    char cause[1024]; /* why it failed or stopped, for the final message */
    double kill_at;   /* sl_now() deadline for SIGKILL while stopping */

    struct progress prog; /* epoch lines, progress line, --metrics (progress.h) */
    struct launch_predict predict; /* --predict (predict.h); which = RUN_PREDICT_NONE when training */
    struct dataset_meta meta;      /* the dataset's, as checked at the start */
    bool link;                     /* model.kind distmult/complex: a link-prediction run in this process (link.h) */
    struct launch_link link_run;
};

/* Supervises a started launch (supervise.c describes the loop): reports
 * progress while the stages run, stops them on a failure, an interrupt or
 * a request, reaps them all; on a multi-node run then waits for the other
 * nodes to finish; prints the last epoch lines and the final line. Returns
 * the exit status for the outcome. */
int supervise(struct launch *l);

/* Starts a clean stop: closes every queue, unlinks the run's segments,
 * SIGTERMs every stage, sets the SIGKILL deadline (kill_at), tells the
 * other nodes of a multi-node run. Only the first call has an effect; it
 * records outcome and cause. Before supervise() runs (a stage could not
 * start) or from within it. */
void launch_stop(struct launch *l, enum launch_outcome outcome, const char *cause);

/* Verifies the dataset m describes in dir before the run (verify.c): a
 * recorded earlier check of the same files, else a full pass with its
 * duration announced and progress on stderr; skip (--skip-verify) reads
 * nothing and warns. Sets l->data_stamp. 0, or -errno with the message
 * naming the file and the offending elements. Blocks for the pass. */
int launch_verify_dataset(struct launch *l, const char *dir, const struct dataset_meta *m, bool skip, char *err,
                          size_t errlen);
/* Writes l->data_stamp into the run directory (DATASET_VERIFY_RUN_STAMP),
 * where gnn-trainer reads it. 0 or -errno with a message. */
int launch_write_stamp(const struct launch *l, char *err, size_t errlen);

/* --trace: merges the stages' span files into the Chrome trace (trace.c).
 * 0 or -errno with a message. */
int trace_write(struct launch *l, char *err, size_t errlen);

#endif
