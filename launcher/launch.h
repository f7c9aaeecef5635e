/* launch.h - one gnnlaunch run: what it was asked to do, what it created
 * and where it stands. main.c fills and tears it down; supervise.c drives
 * it; control.c reports it. Single-threaded: only the launcher's main
 * thread touches it. */
#ifndef SLUICE_LAUNCHER_LAUNCH_H
#define SLUICE_LAUNCHER_LAUNCH_H

#include <limits.h>
#include <stdbool.h>
#include <stdio.h>

#include "ipc/shm.h"
#include "launcher/cluster.h"
#include "core/config.h"
#include "launcher/control.h"
#include "launcher/layout.h"
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
};

struct launch {
    /* what was asked */
    sl_config cfg;                  /* effective configuration */
    char config_path[PATH_MAX];     /* CONFIG, absolute */
    char stage_dir[PATH_MAX];       /* where the stage programs are */
    char metrics_file[PATH_MAX];    /* --metrics, absolute, or "" */
    char trace_file[PATH_MAX];      /* --trace, absolute, or "" */
    char run_name[RUNDIR_NAME_MAX]; /* --run-name, or "" */
    bool resume;
    uint32_t start_epoch; /* with --resume: epochs the checkpoint already holds */
    int ranks;
    struct run_arena_plan arena; /* each rank's batch arena */
    struct layout_featbuf_plan featbuf; /* each rank's feature buffer */
    size_t reduce_floats;               /* the trainers' all-reduce size (0: none) */

    /* what was made */
    char run_id[SHM_RUN_ID_MAX];
    struct rundir dir;
    struct layout layout;
    struct control ctl;
    struct cluster cl;            /* a multi-node run's side (cluster.h); cl.on false on one node */
    struct spawn_child *children; /* (nchildren): rank-major, pipeline order */
    int nchildren;
    int sigfd, timerfd, devnull; /* -1 when not open */
    bool watch_hup;              /* SIGHUP was not ignored when we started */

    /* where it stands */
    double t_start; /* sl_now() when the run was created */
    enum launch_phase phase;
    enum launch_outcome outcome;
    char cause[1024]; /* why it failed or stopped, for the final message */
    double kill_at;   /* sl_now() deadline for SIGKILL while stopping */
    bool hurry;       /* a second interrupt asked for SIGKILL at once */

    /* training progress (progress.c) */
    uint64_t next_epoch;  /* the next epoch line to print */
    uint64_t epochs_done; /* epochs printed (resumed ones included) */
    double val_acc, test_acc;
    bool have_test;
    double busy0[RUN_STAGES], wait0[RUN_STAGES]; /* stage seconds at the last epoch line */
    uint64_t bytes0, io0;                              /* extractor bytes and reads at the last epoch line */
    uint64_t batches_total;                            /* batches the trainers handle in this run */
    bool tty, live;                                    /* stdout is a terminal; a live line is showing */
    double t_plain, t_last, rate;                      /* progress line timing, batches/s (smoothed) */
    double plain_every;                                /* seconds between plain progress lines */
    uint64_t items_last, bytes_last;
    FILE *metrics_out; /* --metrics, while open */
    uint64_t *fb_found0, *fb_loaded0;     /* (ranks) last feature-buffer counts read */
    uint64_t fb_found_sum, fb_loaded_sum; /* their sums as of the last epoch line */
};

/* Supervises a running launch until every stage has been reaped (the loop
 * is described in supervise.c). Returns the exit status for the outcome. */
int supervise(struct launch *l);

/* Starts a clean stop: closes every queue, unlinks the run's segments,
 * SIGTERMs every stage, arms the SIGKILL deadline. Only the first call has
 * an effect; it records outcome and cause. */
void launch_stop(struct launch *l, enum launch_outcome outcome, const char *cause);

/* Before the supervision loop: counts the run's batches, opens --metrics. */
void progress_start(struct launch *l);
/* Prints the epoch lines every rank has published (stdout), the progress
 * line and the --metrics records. */
void progress_poll(struct launch *l);
/* At the end: the remaining epoch lines and, for a run that completed,
 * the final test_acc=... line. */
void progress_final(struct launch *l);

/* --trace: merges the stages' span files into the Chrome trace (trace.c).
 * 0 or -errno with a message. */
int trace_write(struct launch *l, char *err, size_t errlen);

/* Exit status for an outcome: 0, 3 or 130. */
int launch_exit_code(enum launch_outcome o);

#endif
