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
 *     /sluice.<run>.r<R>.arena     batch arena of rank R (ipc/arena.h)
 *     /sluice.<run>.r<R>.featbuf   feature buffer of rank R (stages/featbuf.h)
 *     /sluice.<run>.allreduce      the trainers' gradient all-reduce (ipc/allreduce.h)
 *     /sluice.<run>.results        per-epoch results of every rank (ipc/results.h)
 *
 * Batch arena. Each slot holds one sampled batch (ipc/batch.h) and is
 * sized for the worst case of the run's batch shape: train.batch_size,
 * model.fanouts, and the dataset's node and edge counts and, only when a
 * fanout is -1, its largest in-degree (streamed from indptr.bin). The
 * launcher and the sampler both get that shape from layout_arena_plan(),
 * so a batch the sampler writes always fits. The slot count is
 * batch_arena_slots() of the pipeline's queue depths and thread counts.
 * The sampler takes a slot (arena_alloc), writes the batch and pushes its
 * index in a descriptor; the extractor fills the batch's alias[]; the
 * releaser gives the slot back (arena_release) after the trainer is done.
 * Before anything is created, layout_arena_check() refuses arenas that
 * would take more than half of MemAvailable, or more than /dev/shm has
 * free, summed over the ranks.
 *
 * Each ring carries struct layout_desc entries and is created for one
 * producing process: the producing stage calls ring_producer_done() once,
 * when it will push no more, which closes the ring so the consumer drains
 * it and sees -EPIPE (end of stream). When the launcher stops a run it
 * closes every ring and every arena (layout_close), so blocked stages
 * wake up with -EPIPE, a sampler waiting in arena_alloc included.
 *
 * Stage command line (built by layout_args_build, read by
 * layout_args_parse; `--key value` is accepted as well as `--key=value`):
 *
 *     gnn-<stage> --run=<run-id> --rank=<r> --ranks=<n> --run-dir=<dir>
 *                 --config=<dir>/config.toml --metrics-block=<i>
 *                 [--start-epoch=<e>] [--resume] [--trace]
 *                 [--node=<I> --nodes=<K>]
 *
 * Ranks. --rank and --ranks are the rank's place on its node: they name
 * the node's shared objects and metrics blocks. A multi-node run (gnnlaunch
 * --nodes K, docs/multinode.md) adds the node; what a rank trains on (its
 * share of every split, its batches' seeds, its dropout masks) depends on
 * its global rank node * ranks + rank of nodes * ranks
 * (layout_global_rank, layout_world), so K nodes of R ranks train what one
 * node of K*R ranks would.
 *
 * Functions return 0 or -errno with a message in err (may be NULL). */
#ifndef SLUICE_LAUNCHER_LAYOUT_H
#define SLUICE_LAUNCHER_LAYOUT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"
#include "ipc/allreduce.h"
#include "ipc/arena.h"
#include "ipc/batch.h"
#include "ipc/metrics.h"
#include "ipc/results.h"
#include "ipc/ring.h"
#include "ipc/shm.h"
#include "launcher/config.h"
#include "stages/featbuf.h"

#define LAYOUT_RANKS_MAX 1024 /* pipeline.ranks' upper bound */
#define LAYOUT_WORLD_MAX 65536 /* ranks over all nodes */

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

/* One span of a stage's work on one batch, as stages append them to
 * <run-dir>/trace.<stage>.<rank> under --trace (CLOCK_MONOTONIC ns; t1 is
 * taken before the batch is handed on, so the spans of one batch never
 * overlap from stage to stage). 32 bytes, host byte order. */
struct layout_span {
    uint64_t batch;
    uint64_t t0_ns, t1_ns;
    uint32_t tid;
    uint32_t split; /* enum batch_split, where the stage knows it; else 0 */
};
_Static_assert(sizeof(struct layout_span) == 32, "spans are 32 bytes");

/* "trace.<stage>.<rank>" (the file's name inside the run directory). */
void layout_trace_name(char *out, size_t len, enum layout_stage s, int rank);

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

/* Segment names: "/sluice.<run>.metrics", "/sluice.<run>.r<R>.<queue>"
 * and "/sluice.<run>.r<R>.arena". */
int layout_metrics_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen);
int layout_queue_segname(char *out, size_t len, const char *run_id, enum layout_queue q, int rank, char *err,
                         size_t errlen);
int layout_arena_segname(char *out, size_t len, const char *run_id, int rank, char *err, size_t errlen);
int layout_featbuf_segname(char *out, size_t len, const char *run_id, int rank, char *err, size_t errlen);
/* "/sluice.<run>.allreduce" and "/sluice.<run>.results". */
int layout_allreduce_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen);
int layout_results_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen);

/* The batch arena of each rank, as sized for a configuration and dataset. */
struct layout_arena_plan {
    struct batch_shape shape;   /* bounds every batch of the run (batch_init takes it) */
    struct batch_plan batch;    /* the worst case of that shape */
    struct arena_params params; /* slot_size = batch.max_bytes; nslots = batch_arena_slots() */
    uint64_t rank_bytes;        /* one rank's arena segment, header page included */
};

/* Sizes the arenas: the shape from c (train.batch_size, model.fanouts)
 * and m (nodes, edges; the max in-degree only when a fanout is -1, read
 * from c->dataset.path's indptr), its worst case and the slot count.
 * Reads the whole indptr.bin when a fanout is -1 (streamed in 512 KiB
 * reads), else no file. 0; -EOVERFLOW or -EINVAL with a message naming
 * the keys to change; -errno if indptr.bin cannot be read. */
int layout_arena_plan(const sl_config *c, const sl_dataset_meta *m, struct layout_arena_plan *p, char *err,
                      size_t errlen);

/* The largest in-degree of a dataset, streaming its indptr.bin (in dir)
 * and checking it as it goes (starts at 0, never decreases, ends at the
 * edge count). 0, -EINVAL (damaged file: run gnnprep check) or -errno. */
int layout_max_in_degree(const char *dir, const sl_dataset_meta *m, uint64_t *out, char *err, size_t errlen);

/* Refuses (-ENOMEM, with a message naming the keys to change) arenas of
 * `ranks` ranks that would take more than half of mem_available or more
 * than shm_free bytes; UINT64_MAX for either skips that test. */
int layout_arena_check(const struct layout_arena_plan *p, int ranks, uint64_t mem_available, uint64_t shm_free,
                       char *err, size_t errlen);

/* MemAvailable from /proc/meminfo and the bytes free in /dev/shm: 0 or
 * -errno (either is then UINT64_MAX). */
int layout_memory(uint64_t *mem_available, uint64_t *shm_free, char *err, size_t errlen);

/* The feature buffer of each rank, as sized for a configuration, dataset
 * and batch shape. Slots: pipeline.feature_buffer_mb MiB over the row
 * stride (feat_dim x element size rounded up to 64 bytes), at most one per
 * node. The reserve is min(N, pipeline.extractors x the most nodes one
 * batch can hold): with fewer slots extraction could deadlock
 * (featbuf.c, "The reserve"), so such a buffer is refused. Staging:
 * pipeline.staging_mb is shared by all ranks and, within a rank, split
 * evenly between its extractor threads; each needs room for at least one
 * row's read (the row stride in the file rounded out to 4 KiB blocks, plus
 * one block for a row that straddles two). */
struct layout_featbuf_plan {
    struct featbuf_params params;
    uint64_t stride;             /* bytes per slot row */
    uint64_t reserve;            /* fewest slots that cannot deadlock */
    uint64_t rank_bytes;         /* one rank's segment (featbuf_mem_size) */
    uint64_t staging_per_thread; /* staging bytes of one extractor thread: its share of pipeline.staging_mb */
    uint64_t staging_used;       /* at most what a thread uses of it: pipeline.io_depth reads of one row
                                  * each (an upper bound of the read's size, alignment included) */
};

/* Sizes the feature buffers. 0; -EINVAL with a message naming the keys to
 * change (buffer below the reserve, staging below one row per thread, no
 * features in the dataset); -EOVERFLOW. */
int layout_featbuf_plan(const sl_config *c, const sl_dataset_meta *m, const struct layout_arena_plan *a,
                        struct layout_featbuf_plan *p, char *err, size_t errlen);

/* Refuses (-ENOMEM, naming the keys to change) feature buffers that, with
 * the batch arenas, would take more than half of mem_available or more than
 * shm_free bytes over `ranks` ranks (UINT64_MAX skips a test). */
int layout_featbuf_check(const struct layout_featbuf_plan *f, const struct layout_arena_plan *a, int ranks,
                         uint64_t mem_available, uint64_t shm_free, char *err, size_t errlen);

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
    struct ring *queues;  /* (ranks, LAYOUT_QUEUES) */
    struct arena *arenas; /* (ranks) */
    struct featbuf *featbufs; /* (ranks), or NULL when made without */
    struct allreduce allreduce; /* the trainers' gradient all-reduce (sh NULL when made without) */
    struct results results;     /* the results page (hdr NULL when made without) */
};

/* What layout_create makes besides the metrics page and the queues. */
struct layout_objects {
    const struct arena_params *arena;     /* each rank's batch arena (layout_arena_plan); required */
    const struct featbuf_params *featbuf; /* each rank's feature buffer (layout_featbuf_plan), or NULL */
    size_t allreduce_floats;              /* the trainers' all-reduce of this many floats, or 0 */
    uint64_t epochs;                      /* the results page for this many epochs, or 0 */
};

/* Creates the metrics page, the queues of every rank and the objects o
 * asks for. On failure nothing of the run is left in /dev/shm. */
int layout_create(struct layout *l, const char *run_id, const sl_config *c, int ranks, const struct layout_objects *o,
                  char *err, size_t errlen);

/* Queue q of rank r (NULL out of range or not created). */
struct ring *layout_queue(const struct layout *l, int rank, enum layout_queue q);

/* The batch arena of rank r (NULL out of range or not created). */
struct arena *layout_arena(const struct layout *l, int rank);

/* The feature buffer of rank r (NULL out of range or not created). */
struct featbuf *layout_featbuf(const struct layout *l, int rank);

/* ring_close() on every queue, arena_close() on every arena,
 * featbuf_mark_broken() on every feature buffer and allreduce_close() on
 * the all-reduce of the run: blocked stages wake (-EPIPE). Never blocks. */
void layout_close(struct layout *l);

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
    uint32_t start_epoch; /* first epoch to run (epochs before it are in the checkpoint resumed from) */
    bool resume;
    bool trace; /* record per-batch spans in <run-dir>/trace.<stage>.<rank> (gnnlaunch --trace) */
    int node, nodes; /* this node and the node count (1 node: 0, 1) */
};

/* The global rank and the world size (see Ranks above). */
static inline uint32_t layout_global_rank(const struct layout_args *a)
{
    return (uint32_t)a->node * (uint32_t)a->ranks + (uint32_t)a->rank;
}
static inline uint32_t layout_world(const struct layout_args *a)
{
    return (uint32_t)a->nodes * (uint32_t)a->ranks;
}

/* Launcher side: writes the argv of a stage into buf (strings packed one
 * after another) and argv[0 .. n) with argv[n] = NULL; argv[0] is the stage
 * program's name. max is the room in argv (LAYOUT_ARGV_MAX suffices). */
#define LAYOUT_ARGV_MAX 16
int layout_args_build(const struct layout_args *a, char *buf, size_t len, char **argv, int max, char *err,
                      size_t errlen);

/* Stage side: parses argv (argv[0] names the stage) and checks it: a known
 * stage, a valid run id, 0 <= rank < ranks, 0 <= node < nodes (nodes *
 * ranks at most LAYOUT_WORLD_MAX), the block that belongs to
 * (rank, stage), a run directory and a config. -EINVAL with a message
 * that names the argument otherwise. */
int layout_args_parse(int argc, char **argv, struct layout_args *a, char *err, size_t errlen);

#endif
