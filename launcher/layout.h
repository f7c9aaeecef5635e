/* layout.h - the launcher's side of the run contract (ipc/run.h):
 * sizing every shared object of a run for a configuration and dataset,
 * refusing what would not fit in memory, creating the objects before any
 * stage starts, closing them to stop a run and unmapping them.
 *
 * Memory. Before anything is created, layout_arena_check() refuses arenas
 * that would take more than half of MemAvailable, or more than /dev/shm
 * has free, summed over the ranks; layout_featbuf_check() does the same
 * for the feature buffers with the arenas.
 *
 * Functions return 0 or -errno with a message in err (may be NULL). */
#ifndef SLUICE_LAUNCHER_LAYOUT_H
#define SLUICE_LAUNCHER_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/dataset.h"
#include "ipc/allreduce.h"
#include "ipc/arena.h"
#include "ipc/metrics.h"
#include "ipc/results.h"
#include "ipc/ring.h"
#include "ipc/run.h"
#include "ipc/shm.h"
#include "ipc/staging.h"
#include "stages/featbuf.h"

/* Refuses (-ENOMEM, with a message naming the keys to change) arenas of
 * `ranks` ranks that would take more than half of mem_available or more
 * than shm_free bytes; UINT64_MAX for either skips that test. */
int layout_arena_check(const struct run_arena_plan *p, int ranks, uint64_t mem_available, uint64_t shm_free, char *err,
                       size_t errlen);

/* MemAvailable from /proc/meminfo and the bytes free in /dev/shm: 0 or
 * -errno (either is then UINT64_MAX). */
int layout_memory(uint64_t *mem_available, uint64_t *shm_free, char *err, size_t errlen);

/* The feature buffer of each rank, as sized for a configuration, dataset
 * and batch shape. Slots: pipeline.feature_buffer_mb MiB over the row
 * stride (feat_dim x element size rounded up to 64 bytes), at most one per
 * node. The reserve is min(N, pipeline.extractors x the most nodes one
 * batch can hold): with fewer slots extraction could deadlock
 * (featbuf.c, "The reserve"), so such a buffer is refused. A GPU rank keeps
 * its rows on the device (layout_featbuf_use_device): the segment then
 * holds the metadata only.
 *
 * Staging (layout_staging_params): one segment for the node,
 * /sluice.<run>.staging (ipc/staging.h), of blocks that each hold one
 * row's direct read at any alignment up to 4 KiB. pipeline.staging_mb is
 * shared by all ranks: each extractor thread of each rank owns a portion
 * of staging_mb / (ranks x extractors) bytes, in whole blocks and never
 * more than pipeline.io_depth of them (a thread never has more reads in
 * flight), and may borrow blocks of idle portions when its own are busy.
 * Each portion must hold at least one block (one read), or the plan is
 * refused naming pipeline.staging_mb. */
struct layout_featbuf_plan {
    struct featbuf_params params;
    uint64_t stride;               /* bytes per slot row */
    uint64_t reserve;              /* fewest slots that cannot deadlock */
    uint64_t rank_bytes;           /* one rank's segment (featbuf_mem_size) */
    struct staging_params staging; /* the node's staging buffer */
    uint64_t staging_bytes;        /* its segment's payload (staging_mem_size) */
    uint64_t staging_per_thread;   /* one extractor thread's own portion: staging.blocks x block_bytes */
    uint64_t staging_used;         /* the most one thread has in flight, own and borrowed blocks:
                                    * min(pipeline.io_depth, all blocks) reads */
};

/* The staging buffer's geometry for `ranks` ranks of configuration c and
 * rows of row_bytes bytes laid out as docs/format.md says (what
 * layout_featbuf_plan checks the dataset against). 0, or -EINVAL naming
 * pipeline.staging_mb when a thread's share holds no block. */
int layout_staging_params(const struct config *c, int ranks, uint64_t row_bytes, struct staging_params *out, char *err,
                          size_t errlen);

/* Sizes the feature buffers. 0; -EINVAL with a message naming the keys to
 * change (buffer below the reserve, staging below one row per thread, no
 * features in the dataset); -EOVERFLOW. */
int layout_featbuf_plan(const struct config *c, const struct dataset_meta *m, const struct run_arena_plan *a,
                        struct layout_featbuf_plan *p, char *err, size_t errlen);

/* A GPU run (gnnlaunch --gpus): every rank keeps its feature rows on its
 * device, so its segment holds the metadata only (featbuf params
 * rows_on_device; rank_bytes shrinks accordingly). Call after
 * layout_featbuf_plan and before layout_featbuf_check. */
void layout_featbuf_use_device(struct layout_featbuf_plan *p, bool on);

/* pipeline.warm_start = "on" (stages/warm.h) needs a feature buffer (in
 * host memory or on GPUs: gpu says which) with a slot for every row: 0,
 * or -EINVAL naming the key and what to do.
 * "auto" and "off" always pass (auto decides in the extractor). */
int layout_warm_check(const struct config *c, const struct layout_featbuf_plan *p, bool gpu, char *err, size_t errlen);

/* Refuses (-ENOMEM, naming the keys to change) feature buffers that, with
 * the batch arenas and the staging buffer, would take more than half of
 * mem_available or more than shm_free bytes over `ranks` ranks (UINT64_MAX
 * skips a test). */
int layout_featbuf_check(const struct layout_featbuf_plan *f, const struct run_arena_plan *a, int ranks,
                         uint64_t mem_available, uint64_t shm_free, char *err, size_t errlen);

/* Ring shape of queue q for configuration c: capacity is the configured
 * pipeline.extract_queue / pipeline.train_queue (the release queue: their
 * sum, so a trainer never waits on the releaser for long) rounded up to a
 * power of two, at least 2; one producing process. */
void layout_queue_params(const struct config *c, enum run_queue q, struct ring_params *p);

/* Launcher side: every shared object of a run, mapped. */
struct layout {
    char run_id[SHM_RUN_ID_MAX];
    int ranks;
    struct metrics_page metrics;
    struct ring *queues;        /* (ranks, RUN_QUEUES) */
    struct arena *arenas;       /* (ranks) */
    struct featbuf *featbufs;   /* (ranks), or NULL when made without */
    struct staging staging;     /* the node's staging buffer, made with the feature buffers (hdr NULL without) */
    struct allreduce allreduce; /* the trainers' gradient all-reduce (sh NULL when made without) */
    struct results results;     /* the results page (hdr NULL when made without) */
};

/* What layout_create makes besides the metrics page and the queues. */
struct layout_objects {
    const struct arena_params *arena;     /* each rank's batch arena (run_arena_plan); required */
    const struct featbuf_params *featbuf; /* each rank's feature buffer (layout_featbuf_plan), or NULL; with
                                           * them, the node's staging buffer (layout_staging_params) */
    size_t allreduce_floats;              /* the trainers' all-reduce of this many floats, or 0 */
    uint64_t epochs;                      /* the results page for this many epochs, or 0 */
};

/* Creates the metrics page, the queues of every rank and the objects o
 * asks for. On failure nothing of the run is left in /dev/shm. */
int layout_create(struct layout *l, const char *run_id, const struct config *c, int ranks,
                  const struct layout_objects *o, char *err, size_t errlen);

/* Queue q of rank r (NULL out of range or not created). */
struct ring *layout_queue(const struct layout *l, int rank, enum run_queue q);

/* The batch arena of rank r (NULL out of range or not created). */
struct arena *layout_arena(const struct layout *l, int rank);

/* The feature buffer of rank r (NULL out of range or not created). */
struct featbuf *layout_featbuf(const struct layout *l, int rank);

/* The staging buffer (NULL when not created). */
struct staging *layout_staging(const struct layout *l);

/* ring_close() on every queue, arena_close() on every arena,
 * featbuf_mark_broken() on every feature buffer, staging_close() on the
 * staging buffer and allreduce_close() on the all-reduce of the run:
 * blocked stages wake (-EPIPE). Never blocks. */
void layout_close(struct layout *l);

/* Unmaps everything (never unlinks: shm_run_unlink does). Accepts NULL and
 * zeroed or half-built layouts. */
void layout_free(struct layout *l);

#endif
