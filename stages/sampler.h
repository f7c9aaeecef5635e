/* sampler.h - node-wise neighbour sampling over the CSC topology into the
 * batch layout of ipc/batch.h (DESIGN.md section 4; issue 4, gnn-sampler).
 *
 * Topology. struct sampler_topo holds indptr (u64[N+1]) in memory - it is
 * touched for every destination - and maps indices.bin read-only with
 * MADV_RANDOM, so the page cache keeps the hot part of the edge list and
 * cold parts cost one page each. labels.bin is mapped the same way (a
 * target's label is one 4-byte read). The handle is read-only once open
 * and may be shared by any number of sampler threads.
 *
 * Sampling. For every destination of block k (all nodes found up to hop k,
 * so every block samples its destinations afresh, see batch.h), with
 * in-degree d and fanout f: all d in-neighbours when f < 0 or d <= f, else
 * f distinct positions in [0, d) drawn uniformly without replacement by
 * Floyd's algorithm (f random draws, never a rejection loop whose cost
 * grows as f approaches d). Each in-neighbour is then included with
 * probability exactly f/d. Sources not met before in the batch get the
 * next local id through an open-addressing hash map global -> local sized
 * for the batch's worst case and cleared in O(1) by an epoch stamp.
 *
 * Randomness. One splitmix64 stream per batch, seeded by
 * sampler_batch_seed(seed, epoch, rank, batch) (the schedule says which
 * numbers): a batch's contents depend on its targets and seed only, never
 * on which thread samples it. Bounded integers use Lemire's
 * multiply-shift with rejection (exactly uniform).
 *
 * Batches. Which targets batch g holds, its epoch, split and seed come
 * from the rank's schedule (stages/schedule.h); the sampler only samples.
 *
 * Memory. struct sampler is one thread's scratch (the hash map and Floyd's
 * pick set); it is reused across batches and must not be shared between
 * threads. The slot a batch is written into belongs to the caller.
 *
 * Errors: 0 or -errno with a message in err (may be NULL). Nothing blocks
 * except the page faults of the mapped files. */
#ifndef SLUICE_STAGES_SAMPLER_H
#define SLUICE_STAGES_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"
#include "ipc/batch.h"

/* The graph as the sampler reads it. */
struct sampler_topo {
    uint64_t nodes, edges;
    uint64_t max_in_degree;
    uint64_t *indptr;      /* (nodes + 1), in memory */
    const void *indices;   /* (edges) u32 or u64, mapped read-only */
    bool indices_u64;      /* ids are u64 (N >= 2^32) */
    size_t indices_len;    /* bytes mapped (0: no mapping) */
    const int32_t *labels; /* (nodes), mapped read-only, or NULL */
    size_t labels_len;
};

/* Opens the topology of the dataset in dir (described by m, as from
 * dataset_meta_read with check_files): reads and checks indptr (starts at 0,
 * never decreases, ends at the edge count) and maps indices and labels.
 * 0, -EINVAL (inconsistent files: run gnnprep check), -ENOMEM or -errno. */
int sampler_topo_open(struct sampler_topo *t, const char *dir, const struct dataset_meta *m, char *err, size_t errlen);
/* Unmaps and frees; accepts a zeroed or half-opened handle. */
void sampler_topo_free(struct sampler_topo *t);

/* Reads a split file (DATASET_TRAIN, DATASET_VAL or DATASET_TEST; see
 * schedule_split_file) of the dataset into a new array of u64 ids (*ids,
 * freed by the caller with free()), checking every id is below m->nodes. 0, -ENOENT (split absent), -EINVAL
 * or -errno. */
int sampler_split_load(const char *dir, const struct dataset_meta *m, int split, uint64_t **ids, uint64_t *n, char *err,
                       size_t errlen);

/* The seed of batch `batch` of (epoch, rank) for run seed `seed`. */
uint64_t sampler_batch_seed(uint64_t seed, uint32_t epoch, uint32_t rank, uint64_t batch);

/* A uniformly distributed integer in [0, range) (range >= 1) from the
 * splitmix64 stream *state (Lemire's method, unbiased). */
uint64_t sampler_rand_below(uint64_t *state, uint64_t range);

/* One sampler thread's reusable state. */
struct sampler {
    const struct sampler_topo *topo;
    struct batch_shape shape;
    struct batch_plan plan; /* for a full batch of shape.batch_size */
    /* global -> local map: entry i is live when map[i].stamp == cur; key,
     * value and stamp side by side, so a probe touches one cache line */
    struct sampler_ent {
        uint64_t key;
        uint32_t val;
        uint32_t stamp;
    } *map;
    uint64_t mask;  /* capacity - 1 (a power of two) */
    unsigned shift; /* 64 - log2(capacity) */
    uint32_t cur;
    /* Floyd's pick set for fanouts above the linear-scan threshold */
    uint64_t *pick_keys;
    uint32_t *pick_stamp;
    uint64_t pick_mask;
    unsigned pick_shift;
    uint32_t pick_cur;
    uint64_t *picks; /* (largest finite fanout) positions drawn */
};

/* Prepares a sampler for batches of `shape` (fanouts, batch size; its
 * nodes, edges and max_in_degree are taken from t) over t. shape->layers
 * and fanouts as in batch.h. 0, -EINVAL / -EOVERFLOW (from batch_plan),
 * -ENOMEM. */
int sampler_init(struct sampler *s, const struct sampler_topo *t, const struct batch_shape *shape, char *err,
                 size_t errlen);
void sampler_free(struct sampler *s);

/* The shape a sampler uses (the caller's, completed from the topology):
 * what an arena slot is sized for (batch_plan / batch_max_bytes). */
static inline const struct batch_shape *sampler_shape(const struct sampler *s)
{
    return &s->shape;
}

/* Samples one batch of the n_targets targets (1 .. batch_size, distinct
 * node ids) into slot[0 .. size) with id *id and RNG seed `seed` (use
 * schedule_batch's seed), then seals it (batch_finish). Labels come from the
 * dataset (-1 without labels.bin). *edges (may be NULL) receives the
 * sampled edges of all blocks. 0 or the writer's error (-ENOSPC: slot too
 * small for this shape). Never blocks. */
int sampler_sample(struct sampler *s, void *slot, size_t size, const uint64_t *targets, uint32_t n_targets,
                   const struct batch_id *id, uint64_t seed, uint64_t *edges, char *err, size_t errlen);

#endif
