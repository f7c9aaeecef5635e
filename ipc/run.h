/* run.h - the run contract below the stages: what gnnlaunch and every
 * stage process agree on to find each other (docs/architecture.md). The
 * launcher creates and sizes the objects (launcher/layout.h); a stage only
 * needs this header to attach to them.
 *
 * Processes. Per rank r (0 <= r < ranks) four stage processes, in pipeline
 * order: gnn-sampler, gnn-extractor, gnn-trainer, gnn-releaser. Process
 * (r, s) owns metrics block r * RUN_STAGES + s of the run's metrics page.
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
 * launcher and the sampler both get that shape from run_arena_plan(),
 * so a batch the sampler writes always fits. The slot count is
 * batch_arena_slots() of the pipeline's queue depths and thread counts.
 * The sampler takes a slot (arena_alloc), writes the batch and pushes its
 * index in a descriptor; the extractor fills the batch's alias[]; the
 * releaser gives the slot back (arena_release) after the trainer is done.
 *
 * Each ring carries struct run_desc entries and is created for one
 * producing process: the producing stage calls ring_producer_done() once,
 * when it will push no more, which closes the ring so the consumer drains
 * it and sees -EPIPE (end of stream). When the launcher stops a run it
 * closes every ring and every arena (layout_close), so blocked stages
 * wake up with -EPIPE, a sampler waiting in arena_alloc included.
 *
 * Stage command line (built by run_args_build, read by
 * run_args_parse; `--key value` is accepted as well as `--key=value`):
 *
 *     gnn-<stage> --run=<run-id> --rank=<r> --ranks=<n> --run-dir=<dir>
 *                 --config=<dir>/config.toml --metrics-block=<i>
 *                 [--start-epoch=<e>] [--resume] [--trace]
 *                 [--node=<I> --nodes=<K>] [--device=<d> [--nccl-id=<hex>]]
 *
 * Ranks. --rank and --ranks are the rank's place on its node: they name
 * the node's shared objects and metrics blocks. A multi-node run (gnnlaunch
 * --nodes K, docs/multinode.md) adds the node; what a rank trains on (its
 * share of every split, its batches' seeds, its dropout masks) depends on
 * its global rank node * ranks + rank of nodes * ranks
 * (run_global_rank, run_world), so K nodes of R ranks train what one
 * node of K*R ranks would.
 *
 * Devices. A rank of `gnnlaunch --gpus N` runs on a GPU: every stage of
 * rank r gets --device=r, the CUDA ordinal of its GPU among those
 * CUDA_VISIBLE_DEVICES leaves visible (the stages inherit the launcher's
 * environment); without --device a rank runs on the CPU (device -1).
 * When the run has more than one GPU in all, the trainers also get
 * --nccl-id: the 128 bytes of the NCCL unique id (256 hex digits) that
 * the launcher of node 0 made and every rank of every node joins with
 * (docs/gpu.md).
 *
 * Functions return 0 or -errno with a message in err (may be NULL). */
#ifndef SLUICE_IPC_RUN_H
#define SLUICE_IPC_RUN_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/dataset.h"
#include "ipc/arena.h"
#include "ipc/batch.h"
#include "ipc/metrics.h"
#include "ipc/shm.h"

#define RUN_RANKS_MAX 1024 /* pipeline.ranks' upper bound */
#define RUN_WORLD_MAX 65536 /* ranks over all nodes */
#define RUN_NCCL_ID_BYTES 128 /* an NCCL unique id (sizeof(ncclUniqueId)) */

enum run_stage {
    RUN_SAMPLER = 0,
    RUN_EXTRACTOR = 1,
    RUN_TRAINER = 2,
    RUN_RELEASER = 3,
    RUN_STAGES = 4,
};

enum run_queue {
    RUN_Q_EXTRACT = 0, /* sampler -> extractor */
    RUN_Q_TRAIN = 1,   /* extractor -> trainer */
    RUN_Q_RELEASE = 2, /* trainer -> releaser */
    RUN_QUEUES = 3,
};

/* One queue entry: a batch descriptor. Queues never carry feature data,
 * only which batch and where it lives. 32 bytes. */
struct run_desc {
    uint64_t batch;  /* batch number in the rank's stream (all epochs) */
    uint32_t slot;   /* batch arena slot holding the sampled batch */
    uint32_t epoch;  /* epoch the batch belongs to */
    uint64_t aux[2]; /* stage-defined (tests put a check value here) */
};
_Static_assert(sizeof(struct run_desc) == 32, "descriptors are 32 bytes");

/* One span of a stage's work on one batch, as stages append them to
 * <run-dir>/trace.<stage>.<rank> under --trace (CLOCK_MONOTONIC ns; t1 is
 * taken before the batch is handed on, so the spans of one batch never
 * overlap from stage to stage). 32 bytes, host byte order. */
struct run_span {
    uint64_t batch;
    uint64_t t0_ns, t1_ns;
    uint32_t tid;
    uint32_t split; /* enum batch_split, where the stage knows it; else 0 */
};
_Static_assert(sizeof(struct run_span) == 32, "spans are 32 bytes");

/* A span that is not a batch's but one of a stage's phases: split is
 * RUN_SPAN_PHASE | enum run_phase, batch is 0. */
#define RUN_SPAN_PHASE 0x100u
enum run_phase {
    RUN_PHASE_STARTUP,  /* from the stage's first line to its first batch's wait (any stage) */
    RUN_PHASE_TOPOLOGY, /* the sampler opening (reading) the topology */
    RUN_PHASE_WARM,     /* the extractor's warm start (stages/warm.h), claims to the last row */
    RUN_PHASES
};

/* "start-up", "topology", "warm start"; "?" past the end. */
const char *run_phase_name(uint32_t phase);

/* "trace.<stage>.<rank>" (the file's name inside the run directory). */
void run_trace_name(char *out, size_t len, enum run_stage s, int rank);

/* "gnn-sampler", ... (the executable) and "sampler", ... (the metrics
 * block name); "?" when out of range. */
const char *run_stage_program(enum run_stage s);
const char *run_stage_name(enum run_stage s);

/* The stage an argv[0] or program name denotes (its last path component
 * is "gnn-<stage>" or "<stage>"), or -1. */
int run_stage_from_program(const char *prog);

/* The trainer built with the CUDA backend (stages/CMakeLists.txt), next to
 * gnn-trainer where CUDA and NCCL were found: gnnlaunch runs it for GPU
 * ranks (argv[0] stays "gnn-trainer"); run_stage_from_program takes its
 * name for the trainer too. */
#define RUN_TRAINER_GPU_PROGRAM "gnn-trainer-gpu"

/* "extract", "train", "release"; "?" when out of range. */
const char *run_queue_name(enum run_queue q);

/* The queue a stage pops from / pushes to, or -1 (the sampler has no input,
 * the releaser no output). */
int run_stage_input(enum run_stage s);
int run_stage_output(enum run_stage s);

/* Metrics block of stage s of rank r. */
static inline uint32_t run_block(int rank, enum run_stage s)
{
    return (uint32_t)rank * RUN_STAGES + s;
}

/* Segment names: "/sluice.<run>.metrics", "/sluice.<run>.r<R>.<queue>"
 * and "/sluice.<run>.r<R>.arena". */
int run_metrics_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen);
int run_queue_segname(char *out, size_t len, const char *run_id, enum run_queue q, int rank, char *err,
                         size_t errlen);
int run_arena_segname(char *out, size_t len, const char *run_id, int rank, char *err, size_t errlen);
int run_featbuf_segname(char *out, size_t len, const char *run_id, int rank, char *err, size_t errlen);
/* "/sluice.<run>.allreduce" and "/sluice.<run>.results". */
int run_allreduce_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen);
int run_results_segname(char *out, size_t len, const char *run_id, char *err, size_t errlen);

/* The object part of those names ("r<R>.extract", "r<R>.arena",
 * "r<R>.featbuf"), which shm_create/shm_attach take with the run id. */
void run_queue_object(char *out, size_t len, enum run_queue q, int rank);
void run_arena_object(char *out, size_t len, int rank);
void run_featbuf_object(char *out, size_t len, int rank);

/* The batch arena of each rank, as sized for a configuration and dataset. */
struct run_arena_plan {
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
int run_arena_plan(const struct config *c, const struct dataset_meta *m, struct run_arena_plan *p, char *err,
                   size_t errlen);

/* The largest in-degree of a dataset, streaming its indptr.bin (in dir)
 * and checking it as it goes (starts at 0, never decreases, ends at the
 * edge count). 0, -EINVAL (damaged file: run gnnprep check) or -errno. */
int run_max_in_degree(const char *dir, const struct dataset_meta *m, uint64_t *out, char *err, size_t errlen);

/* A stage's command line, parsed. */
/* gnnlaunch --predict: the nodes a prediction run evaluates (none: a
 * training run). */
enum run_predict { RUN_PREDICT_NONE = 0, RUN_PREDICT_ALL, RUN_PREDICT_TRAIN, RUN_PREDICT_VAL, RUN_PREDICT_TEST };
const char *run_predict_name(enum run_predict p); /* "all", "train", "val", "test" ("" for none) */
int run_predict_parse(const char *s);           /* an enum run_predict other than none, or -EINVAL */

struct run_args {
    enum run_stage stage;
    char run_id[SHM_RUN_ID_MAX];
    int rank, ranks;
    uint32_t metrics_block;
    char run_dir[PATH_MAX];
    char config[PATH_MAX];
    uint32_t start_epoch; /* first epoch to run (epochs before it are in the checkpoint resumed from) */
    bool resume;
    bool trace; /* record per-batch spans in <run-dir>/trace.<stage>.<rank> (gnnlaunch --trace) */
    enum run_predict predict; /* --predict=all|train|val|test: a prediction run over those nodes */
    int node, nodes; /* this node and the node count (1 node: 0, 1) */
    int device;      /* the rank's GPU (CUDA ordinal among the visible devices), or -1: the CPU */
    bool has_nccl_id; /* nccl_id holds the run's NCCL unique id (trainers of a run of more than one GPU) */
    uint8_t nccl_id[RUN_NCCL_ID_BYTES];
};

/* The global rank and the world size (see Ranks above). */
static inline uint32_t run_global_rank(const struct run_args *a)
{
    return (uint32_t)a->node * (uint32_t)a->ranks + (uint32_t)a->rank;
}
static inline uint32_t run_world(const struct run_args *a)
{
    return (uint32_t)a->nodes * (uint32_t)a->ranks;
}

/* Launcher side: writes the argv of a stage into buf (strings packed one
 * after another) and argv[0 .. n) with argv[n] = NULL; argv[0] is the stage
 * program's name. max is the room in argv (RUN_ARGV_MAX suffices; buf
 * needs the three paths plus RUN_ARGV_SLACK). --device goes out when
 * device >= 0, --nccl-id when has_nccl_id. */
#define RUN_ARGV_SLACK 1024
#define RUN_ARGV_MAX 16
int run_args_build(const struct run_args *a, char *buf, size_t len, char **argv, int max, char *err,
                      size_t errlen);

/* Stage side: parses argv (argv[0] names the stage) and checks it: a known
 * stage, a valid run id, 0 <= rank < ranks, 0 <= node < nodes (nodes *
 * ranks at most RUN_WORLD_MAX), the block that belongs to
 * (rank, stage), a run directory and a config; --nccl-id only with
 * --device. device is -1 without --device. -EINVAL with a message that
 * names the argument otherwise. */
int run_args_parse(int argc, char **argv, struct run_args *a, char *err, size_t errlen);

#endif
