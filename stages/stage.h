/* stage.h - what every stage program does to join a run (the stage
 * contract of docs/architecture.md): parse the command line gnnlaunch
 * built, load the effective config and the dataset's metadata, claim its
 * metrics block, attach its rank's batch arena, queues and feature buffer,
 * and move descriptors with bounded waits that keep the heartbeat fresh.
 *
 * Ends of a stream. A pop that returns -EPIPE means the input ring is
 * closed and drained: end of stream after the producer's
 * ring_producer_done, or the launcher stopping the run (it then also sends
 * SIGTERM). A push or arena_alloc that returns -EPIPE means the run is
 * being stopped. Either way the stage finishes without error; a stage that
 * cannot go on calls stage_fail (exit 3, state FAILED, one line on stderr
 * naming the stage and rank, which the launcher's log keeps).
 *
 * Threads. After stage_open, stage_pop/stage_push/stage_alloc and the
 * metrics counters may be used from any number of threads of the stage.
 * stage_end and stage_close run once, on the main thread, after the others
 * have stopped. */
#ifndef SLUICE_STAGES_STAGE_H
#define SLUICE_STAGES_STAGE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/dataset.h"
#include "core/util.h"
#include "ipc/arena.h"
#include "ipc/metrics.h"
#include "ipc/ring.h"
#include "core/config.h"
#include "ipc/run.h"
#include "stages/featbuf.h"

#define STAGE_POLL_MS 200 /* longest sleep between heartbeats */

enum stage_needs {
    STAGE_NEED_FEATBUF = 1u << 0, /* attach the rank's feature buffer */
    STAGE_HINTS_FEATBUF = 1u << 1, /* attach it when its policy may want hints (pipeline.cache_policy lookahead*,
                                    * auto: the buffer's policy id says) */
};

struct stage {
    struct run_args args;
    const char *prog;   /* "gnn-sampler", ... */
    struct config cfg;  /* the run's effective configuration */
    struct dataset_meta meta;
    struct run_arena_plan plan; /* the batch shape, as the launcher sized it */
    struct metrics_page page;
    struct metrics_block *block; /* this process's counters */
    struct arena arena;
    struct ring in, out; /* input / output queue (zeroed when the stage has none) */
    bool has_in, has_out;
    struct featbuf fb; /* when STAGE_NEED_FEATBUF */
    bool has_fb;
    int trace_fd; /* --trace: the span file, else -1 */
    uint64_t t_open_ns; /* sl_now_ns at stage_open's start: the start-up phase's beginning */
    bool ready;         /* stage_ready ran */
    void *fault_mem; /* SLUICE_FAULT_ALLOC_MB: memory held on purpose (a test setting) */
};

/* Whether a stage program's command line asks for its stage-only mode
 * (--bench, --help, or no arguments) rather than the stage of a run. */
bool stage_bench_mode(int argc, char **argv);

/* Joins the run: everything listed above. Bad arguments or segments exit
 * 2 with a message (the launcher reports it); nothing to undo. */
void stage_open(struct stage *s, int argc, char **argv, unsigned needs);

/* Unmaps everything; marks the block DONE (unless it failed). */
void stage_close(struct stage *s);

/* Pops a descriptor from the input queue, heartbeating while it waits
 * (counted as wait time). 0, or -EPIPE at the end of the stream. */
int stage_pop(struct stage *s, struct run_desc *d);

/* Pushes into the output queue the same way. 0 or -EPIPE (stopping). */
int stage_push(struct stage *s, const struct run_desc *d);

/* Takes a free arena slot the same way. 0 or -EPIPE (stopping). */
int stage_alloc(struct stage *s, uint32_t *slot);

/* The output queue will see no more pushes from this process
 * (ring_producer_done), so its consumer drains it and ends. */
void stage_end_output(struct stage *s);

/* Reports a run-time failure and exits 3. Thread-safe (the first caller
 * wins; the message names stage and rank). */
_Noreturn void stage_fail(struct stage *s, const char *fmt, ...) SL_PRINTF(2, 3);

/* The announcement prefix "gnn-<stage> rank <r>: " helpers print before a
 * line of their own. */
void stage_note(const struct stage *s, const char *fmt, ...) SL_PRINTF(2, 3);

/* A batch arena slot and its checked view; fails the stage when the batch
 * in it is damaged or is not the one the descriptor names. flags as
 * batch_view. */
void stage_view(struct stage *s, const struct run_desc *d, unsigned flags, struct batch_view *v);

/* The rank's batch schedule for this run (schedule.h, the default
 * schedule), laid out from the config and the dataset's split sizes
 * (counting only: schedule_load adds the targets); fails the stage when it
 * cannot be built. The first batch of the run is
 * schedule_epoch_start(out, args.start_epoch). */
struct schedule;
void stage_schedule(struct stage *s, struct schedule *out);

/* Under --trace, appends the span [t0_ns, t1_ns) (sl_now_ns) of this
 * stage's work on a batch; else nothing. Thread-safe (one O_APPEND write
 * of 32 bytes). A failed write turns tracing off with one warning. */
void stage_trace(struct stage *s, uint64_t batch, uint32_t split, uint64_t t0_ns, uint64_t t1_ns);

/* The same for one of the stage's phases (RUN_PHASE_*, on the calling
 * thread's track). */
void stage_trace_phase(struct stage *s, enum run_phase ph, uint64_t t0_ns, uint64_t t1_ns);

/* The stage has set up and starts on its batches: under --trace, the
 * start-up phase's span from stage_open to now. Once; later calls do
 * nothing. */
void stage_ready(struct stage *s);

/* Keeps the heartbeat fresh; for loops that wait outside the calls above. */
static inline void stage_heartbeat(struct stage *s)
{
    metrics_heartbeat(s->block);
}
/* The same as an idle callback (arg: the struct stage) for waits that take
 * one, e.g. featbuf_cuda's; never asks the wait to end. */
static inline int stage_idle(void *arg)
{
    stage_heartbeat(arg);
    return 0;
}

/* In-order hand-off for pipeline.ordered: threads that finish batches out
 * of order wait in turn_wait until every earlier batch (in the stage's
 * sequence first, first + 1, ...) has passed turn_done. */
struct stage_turn {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* CLOCK_MONOTONIC */
    uint64_t next;     /* the sequence number whose turn it is */
    bool aborted;
};
void stage_turn_init(struct stage_turn *t, uint64_t first); /* first: the first sequence number */
void stage_turn_destroy(struct stage_turn *t);
/* Sleeps (heartbeating) until it is seq's turn. 0 or -EPIPE when
 * stage_turn_abort was called. */
int stage_turn_wait(struct stage *s, struct stage_turn *t, uint64_t seq);
/* Passes the turn to seq + 1. */
void stage_turn_done(struct stage_turn *t, uint64_t seq);
/* Wakes every waiter for good (a thread failed or the run stops). */
void stage_turn_abort(struct stage_turn *t);

#endif
