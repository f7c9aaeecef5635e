/* layout.h - what gnnlaunch and the stage processes agree on: which
 * processes a run has, the shared-memory objects they meet in, and the
 * command line every stage is started with (docs/architecture.md).
 *
 * Processes. Per rank r (0 <= r < ranks) four stage processes, in pipeline
 * order: gnn-sampler, gnn-extractor, gnn-trainer, gnn-releaser. Process
 * (r, s) owns metrics block r * LAYOUT_STAGES + s of the run's metrics page.
 *
 * Shared objects (created by the launcher before any stage starts, unlinked
 * by it on every exit path; names as in ipc/shm.h):
 *
 *     /sluice.<run>.metrics        metrics page, ranks * 4 blocks
 *     /sluice.<run>.r<R>.extract   ring: sampler -> extractor of rank R
 *     /sluice.<run>.r<R>.train     ring: extractor -> trainer of rank R
 *     /sluice.<run>.r<R>.release   ring: trainer -> releaser of rank R
 *
 * Each ring carries struct layout_desc entries and is created for one
 * producing process: the producing stage calls ring_producer_done() once,
 * when it will push no more, which closes the ring so the consumer drains
 * it and sees -EPIPE (end of stream). The launcher calls ring_close() on
 * every ring when it stops a run, so blocked stages wake up.
 *
 * Stage command line (built by layout_args_build, read by
 * layout_args_parse; `--key value` is accepted as well as `--key=value`):
 *
 *     gnn-<stage> --run=<run-id> --rank=<r> --ranks=<n> --run-dir=<dir>
 *                 --config=<dir>/config.toml --metrics-block=<i> [--resume]
 *
 * Functions return 0 or -errno with a message in err (may be NULL). */
#ifndef SLUICE_LAUNCHER_LAYOUT_H
#define SLUICE_LAUNCHER_LAYOUT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/metrics.h"
#include "ipc/ring.h"
#include "ipc/shm.h"
#include "launcher/config.h"

#define LAYOUT_RANKS_MAX 1024 /* pipeline.ranks' upper bound */

enum layout_stage {
    LAYOUT_SAMPLER = 0,
    LAYOUT_EXTRACTOR = 1,
    LAYOUT_TRAINER = 2,
    LAYOUT_RELEASER = 3,
    LAYOUT_STAGES = 4,
};

enum layout_queue {
    LAYOUT_Q_EXTRACT = 0, /* sampler -> extractor */
    LAYOUT_Q_TRAIN = 1,   /* extractor -> trainer */
    LAYOUT_Q_RELEASE = 2, /* trainer -> releaser */
    LAYOUT_QUEUES = 3,
};

/* One queue entry: a batch descriptor. Queues never carry feature data,
 * only which batch and where it lives. 32 bytes. */
struct layout_desc {
    uint64_t batch;  /* batch number in the rank's stream (all epochs) */
    uint32_t slot;   /* batch arena slot holding the sampled batch */
    uint32_t epoch;  /* epoch the batch belongs to */
    uint64_t aux[2]; /* stage-defined (tests put a check value here) */
};
_Static_assert(sizeof(struct layout_desc) == 32, "descriptors are 32 bytes");

/* "gnn-sampler", ... (the executable) and "sampler", ... (the metrics
 * block name); "?" when out of range. */
const char *layout_stage_program(enum layout_stage s);
const char *layout_stage_name(enum layout_stage s);

/* The stage an argv[0] or program name denotes (its last path component
 * is "gnn-<stage>" or "<stage>"), or -1. */
int layout_stage_from_program(const char *prog);

/* "extract", "train", "release"; "?" when out of range. */
const char *layout_queue_name(enum layout_queue q);

/* The queue a stage pops from / pushes to, or -1 (the sampler has no input,
 * the releaser no output). */
int layout_stage_input(enum layout_stage s);
int layout_stage_output(enum layout_stage s);

/* Metrics block of stage s of rank r. */
static inline uint32_t layout_block(int rank, enum layout_stage s)
{
    return (uint32_t)rank * LAYOUT_STAGES + s;
}

/* Segment names: "/sluice.<run>.metrics" and "/sluice.<run>.r<R>.<queue>". */
int layout_metrics_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen);
int layout_queue_segname(char *out, size_t len, const char *run_id, enum layout_queue q, int rank, char *err,
                         size_t errlen);

/* Ring shape of queue q for configuration c: capacity is the configured
 * pipeline.extract_queue / pipeline.train_queue (the release queue: their
 * sum, so a trainer never waits on the releaser for long) rounded up to a
 * power of two, at least 2; one producing process. */
void layout_queue_params(const sl_config *c, enum layout_queue q, struct ring_params *p);

/* Launcher side: every shared object of a run, mapped. */
struct layout {
    char run_id[SHM_RUN_ID_MAX];
    int ranks;
    struct metrics_page metrics;
    struct ring *queues; /* (ranks, LAYOUT_QUEUES) */
};

/* Creates the metrics page and the queues of every rank. On failure
 * nothing of the run is left in /dev/shm. */
int layout_create(struct layout *l, const char *run_id, const sl_config *c, int ranks, char *err, size_t errlen);

/* Queue q of rank r (NULL out of range or not created). */
struct ring *layout_queue(const struct layout *l, int rank, enum layout_queue q);

/* ring_close() on every queue of the run: blocked stages wake (-EPIPE).
 * Never blocks. */
void layout_close_queues(struct layout *l);

/* Unmaps everything (never unlinks: shm_run_unlink does). Accepts NULL and
 * zeroed or half-built layouts. */
void layout_free(struct layout *l);

/* A stage's command line, parsed. */
struct layout_args {
    enum layout_stage stage;
    char run_id[SHM_RUN_ID_MAX];
    int rank, ranks;
    uint32_t metrics_block;
    char run_dir[PATH_MAX];
    char config[PATH_MAX];
    bool resume;
};

/* Launcher side: writes the argv of a stage into buf (strings packed one
 * after another) and argv[0 .. n) with argv[n] = NULL; argv[0] is the stage
 * program's name. max is the room in argv (LAYOUT_ARGV_MAX suffices). */
#define LAYOUT_ARGV_MAX 16
int layout_args_build(const struct layout_args *a, char *buf, size_t len, char **argv, int max, char *err,
                      size_t errlen);

/* Stage side: parses argv (argv[0] names the stage) and checks it: a known
 * stage, a valid run id, 0 <= rank < ranks, the block that belongs to
 * (rank, stage), a run directory and a config. -EINVAL with a message
 * that names the argument otherwise. */
int layout_args_parse(int argc, char **argv, struct layout_args *a, char *err, size_t errlen);

#endif
