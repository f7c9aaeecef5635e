/* memfit.h - fitting a run into the memory it is given (issue 24;
 * docs/architecture.md, "Memory"): the plan that sizes what the
 * configuration leaves unset, the refusal of what it sets too large, and
 * the explanation of a stage killed by the out-of-memory killer.
 *
 * The limit is the smallest of the launcher's memory cgroup limit
 * (cgroup.h) and MemAvailable. What the run needs of it:
 *   feature buffers  every rank's segment (rows and node map; metadata
 *                    only on a GPU rank), layout_featbuf_plan;
 *   staging          the node's staging segment;
 *   arenas           every rank's batch arena (run_arena_plan);
 *   topology         each rank's sampler's: indptr.bin, and by
 *                    pipeline.topology labels.bin (per rank) and
 *                    indices.bin once per node (memory: with several
 *                    ranks one shared-memory segment all the node's
 *                    samplers read), or
 *                    labels.bin, the neighbour cache and the sampler
 *                    threads' read buffers (cache), or nothing more
 *                    (mmap: the mapped pages are page cache, which the
 *                    kernel reclaims under the limit - that is mmap's
 *                    cost);
 *   margin           what is not a shared object: each trainer's working
 *                    memory for the largest batch (MEMFIT_WORKSPACE), each
 *                    stage process's own (MEMFIT_PROCESS_BYTES) and page
 *                    cache for reading (limit / MEMFIT_CACHE_DIV, at least
 *                    MEMFIT_CACHE_MIN).
 * A key left unset (config_given false) is sized to fit:
 * pipeline.feature_buffer_mb to what the limit leaves after the rest (never
 * above its default, never below the extraction reserve),
 * pipeline.staging_mb to at most an eighth of that. pipeline.topology =
 * "auto" becomes "memory" when indptr.bin and labels.bin of every rank and indices.bin
 * of the node leave of what the limit has after the arenas and the margin
 * ("the room") what the feature buffers and staging want, or a quarter of
 * the room and at least the extraction reserve (MEMFIT_TOPO_FEAT_DIV);
 * else "cache" with a neighbour cache of what the feature buffers (at
 * their size before sizing: all rows when they fit) and staging leave of
 * the room less a 32nd (MEMFIT_TOPO_SLACK_DIV), or of a quarter of it
 * (MEMFIT_TOPO_CACHE_DIV) when that is more, less indptr and the read
 * buffers ("mmap" when that is not above the cache's index); an unset
 * pipeline.neighbour_cache_mb with "cache" is sized the same way, a given
 * one with "auto" means "cache". The arenas follow from
 * train.batch_size, model.fanouts and the queue keys, which decide what is
 * computed or how deep the pipeline is, so they are counted, never
 * shrunk. The sized buffers also keep the older rules of layout.h (half
 * of MemAvailable, the space free in /dev/shm).
 * pipeline.mode = "partitions" adds the partition buffer, (c + spare) x
 * part_bytes of /dev/shm (stages/partbuf.h), to what is fixed before the
 * feature buffers are sized; an unset pipeline.buffer_partitions (0) is
 * auto-tuned (po_tune with the layout's p, as gnnprep partition-plan) to
 * the largest c whose buffer, spare frames included, fits half of the
 * room, and written back into the configuration.
 * pipeline.mode = "packed" adds, per rank, what reading the pack holds
 * (pack_bytes: the extractor threads' chunk and cache extent buffers, the
 * tiers' bitmaps, the index in the extractor and the sampler, the
 * sampler threads' image buffers; stages/pack_rows.h, "Memory"), fixed
 * like the topology before the feature buffers are sized; its hot tier
 * is pinned inside the feature buffer, counted there. */
#ifndef SLUICE_LAUNCHER_MEMFIT_H
#define SLUICE_LAUNCHER_MEMFIT_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/dataset.h"
#include "core/partition.h"
#include "ipc/run.h"
#include "launcher/cgroup.h"
#include "launcher/layout.h"

#define MEMFIT_PROCESS_BYTES ((uint64_t)16 << 20) /* one stage process's own memory: code, heap, libraries */
#define MEMFIT_CACHE_MIN ((uint64_t)32 << 20)     /* page cache allowance, at least */
#define MEMFIT_CACHE_DIV 32                       /* ... and a 32nd of the limit */
#define MEMFIT_TOPO_FEAT_DIV 4   /* topology "auto" is "memory" when it leaves the features this share */
#define MEMFIT_TOPO_CACHE_DIV 4  /* ... else a neighbour cache of at least this share */
#define MEMFIT_TOPO_SLACK_DIV 32 /* ... or of what the feature buffers leave, less this share: a guard beside the
                                    margin's own allowances (an eighth left 151 MiB of a 1 GiB limit unused,
                                    bench/results/topology-2026-11-25.md) */

struct memfit_plan {
    struct cgroup_mem cg;          /* the launcher's memory cgroup (version 0: none) */
    uint64_t limit;                /* the effective limit, bytes; CGROUP_NONE when nothing could be read */
    char limit_what[PATH_MAX + 64]; /* "cgroup /a memory.max", "MemAvailable" */
    uint64_t featbuf;              /* all ranks' feature buffer segments */
    uint64_t staging;              /* the staging segment */
    uint64_t arenas;               /* all ranks' batch arenas */
    uint64_t topology;             /* the samplers' topology, all ranks (see above) */
    uint64_t topology_shm;         /* of which in /dev/shm (memory with several ranks) */
    uint64_t partbuf;              /* the partition buffer (pipeline.mode = "partitions"), else 0 */
    uint64_t pack;                 /* the packed reads' buffers, all ranks (pipeline.mode = "packed"), else 0 */
    uint32_t partbuf_spare;        /* ... its spare frames beside pipeline.buffer_partitions */
    bool partbuf_sized;            /* pipeline.buffer_partitions was auto and chosen here */
    bool topology_auto;            /* pipeline.topology was "auto" and chosen here */
    bool neighbour_cache_sized;    /* pipeline.neighbour_cache_mb was unset and chosen here */
    uint64_t workspace;            /* the trainers' working memory, all ranks (an estimate) */
    uint64_t processes;            /* the stage processes' own memory, all ranks */
    uint64_t cache;                /* page cache allowance */
    uint64_t margin;               /* workspace + processes + cache */
    bool featbuf_sized;            /* pipeline.feature_buffer_mb was unset and chosen here */
    bool staging_sized;            /* pipeline.staging_mb likewise */
    bool gpu;                      /* the rows are on the ranks' GPUs: featbuf is their slot tables only */
};

/* One trainer's working memory for the largest batch of plan a, in bytes:
 * 4-byte floats for the gathered input rows twice (rows, their
 * aggregation) and four arrays per hop of max(feat_dim, model.hidden)
 * columns (outputs, activations, gradients, masks). An upper bound of
 * what a batch of a->batch.n_max nodes can need, not a measurement. */
uint64_t memfit_workspace(const struct config *c, const struct dataset_meta *m, const struct run_arena_plan *a);

/* Makes the plan: reads nothing but c, m, a, f, parts (the layout of a
 * partitions run, else NULL), pack_bytes (a packed run's reading
 * buffers per rank, else 0) and cg; sets the unset
 * memory keys of c (recording them as not given), replanning *f to
 * match. gpu: the ranks keep their feature rows on their devices (f's
 * segments hold metadata only), so pipeline.feature_buffer_mb is device
 * memory and not sized here. 0; -ENOMEM naming the keys, their sizes and
 * the limit when the keys the configuration gives, or the least the run
 * can do with, exceed the limit (exit 2); -EINVAL or -EOVERFLOW from
 * layout_featbuf_plan. */
int memfit_plan_make(struct memfit_plan *p, struct config *c, const struct dataset_meta *m,
                     const struct run_arena_plan *a, struct layout_featbuf_plan *f, const struct parts_meta *parts,
                     uint64_t pack_bytes, const struct cgroup_mem *cg, int ranks, bool gpu, uint64_t mem_available, uint64_t shm_free,
                     char *err, size_t errlen);

/* The plan in one line, without a newline: "memory: limit X (cgroup /a
 * memory.max), plan: feature buffer A (sized to fit), staging B, arenas
 * C, topology D (pipeline.topology = "memory", chosen), margin E (...)". */
void memfit_plan_describe(const struct memfit_plan *p, const struct config *c, char *buf, size_t len);

/* A stage died of SIGKILL that the launcher did not send: when the
 * cgroup's OOM count rose since the plan was made, writes into buf that
 * `who` was killed by the out-of-memory killer, the cgroup's peak usage
 * against the limit, and which key to lower, and returns true; else
 * false (buf untouched). Reads the cgroup's counters. */
bool memfit_oom_explain(const struct memfit_plan *p, const struct config *c, const char *who, char *buf, size_t len);

#endif
