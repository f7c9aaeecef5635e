/* sampler.h - node-wise neighbour sampling over the CSC topology into the
 * batch layout of ipc/batch.h (DESIGN.md section 4; issue 4, gnn-sampler).
 *
 * Topology. struct sampler_topo holds indptr (u64[N+1]) in memory - it is
 * touched for every destination - and reaches indices.bin in one of three
 * ways (pipeline.topology; the choice and its memory in docs/architecture.md,
 * "Topology"):
 *   SAMPLER_TOPO_MMAP    mapped read-only with MADV_RANDOM: the page cache
 *                        keeps the hot part, a cold list costs a page fault;
 *   SAMPLER_TOPO_MEMORY  read whole into private memory at open with large
 *                        sequential (direct) reads: no fault ever after;
 *   SAMPLER_TOPO_CACHE   Ginex's neighbour cache (sampler_topo.c): at open
 *                        the in-neighbour lists of the nodes with the
 *                        highest out-degree / in-degree ratio are loaded
 *                        into a fixed budget; every other list is read by
 *                        the sampling thread itself with O_DIRECT (io_uring,
 *                        many reads in flight, all the lists a hop needs at
 *                        once; sampler_fetch.c), so the sampler never page-
 *                        faults on indices.bin and its memory is bounded.
 * Sampling draws the same random numbers in the same order in all three
 * modes, so a batch is bit for bit the same whatever the mode. In CACHE a
 * batch reads each list once: block k + 1's destinations begin with block
 * k's, whose lists the thread keeps (up to SAMPLER_KNOWN_STORE bytes of
 * copies) for it.
 * labels.bin is read into memory at open in MEMORY and CACHE (4 bytes a
 * node), mapped in MMAP: a target's label is one 4-byte read, and outside
 * MMAP never a page fault on the disk the extractor keeps busy. The handle
 * is read-only once open and may be shared by any number of sampler
 * threads; each thread's reads go through its own struct sampler.
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
 * except the page faults of the mapped files and, in SAMPLER_TOPO_CACHE,
 * the thread's own reads of the lists it needs. */
#ifndef SLUICE_STAGES_SAMPLER_H
#define SLUICE_STAGES_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"
#include "ipc/batch.h"
#include "ipc/shm.h"

/* How indices.bin is reached (see the top of this file). */
enum sampler_topo_mode { SAMPLER_TOPO_MMAP = 0, SAMPLER_TOPO_MEMORY = 1, SAMPLER_TOPO_CACHE = 2 };

/* cache_off[v] of a node whose list is not in the neighbour cache */
#define SAMPLER_UNCACHED UINT64_MAX
/* Alignment of the direct reads and their buffers (covers 512 and 4096-byte sectors). */
#define SAMPLER_IO_ALIGN 4096u

struct sampler_topo_opts {
    enum sampler_topo_mode mode;
    uint64_t cache_bytes; /* SAMPLER_TOPO_CACHE: the budget, index included (sampler_cache_index_bytes) */
    bool buffered;        /* read through the page cache instead of O_DIRECT (pipeline.io = "buffered") */
    size_t load_chunk;    /* bytes per sequential read at open, a multiple of SAMPLER_IO_ALIGN; 0: 8 MiB */
    size_t fetch_buf;     /* CACHE: each sampling thread's read buffer; 0: SAMPLER_FETCH_BUF (sampler_fetch.h) */
    uint32_t round_reads; /* CACHE: reads per round of a hop, at most; 0: SAMPLER_FETCH_ROUND_READS (sampler_fetch.h) */
    const char *shm_run;  /* MEMORY: share one copy between the node's samplers in the run's segment
                             "topology" (NULL: private memory); see sampler_topo_load_shared */
};

/* The graph as the sampler reads it. */
struct sampler_topo {
    uint64_t nodes, edges;
    uint64_t max_in_degree;
    uint64_t *indptr;      /* (nodes + 1), in memory */
    const void *indices;   /* (edges) u32 or u64: mapped read-only (MMAP), in memory (MEMORY), NULL (CACHE) */
    bool indices_u64;      /* ids are u64 (N >= 2^32) */
    size_t indices_len;    /* bytes mapped (0: no mapping) */
    void *indices_mem;     /* MEMORY: the SAMPLER_IO_ALIGN-aligned copy indices points to */
    struct shm_seg *shm;   /* MEMORY shared: the run's segment indices points into, or NULL */
    bool shm_loader;       /* this process loaded the shared segment (else it attached to it) */
    const int32_t *labels; /* (nodes): labels_mem, or mapped read-only (MMAP), or NULL */
    size_t labels_len;     /* bytes mapped (0: no mapping) */
    int32_t *labels_mem;   /* MEMORY, CACHE: labels.bin read at open */
    enum sampler_topo_mode mode;
    /* SAMPLER_TOPO_CACHE */
    int fd;                /* indices.bin for the sampling threads' reads; -1 when not open */
    bool direct;           /* fd (and the loads at open) use O_DIRECT */
    uint32_t read_align;   /* CACHE: offset and length granule of the list reads (the file's direct I/O
                              alignment from statx, 512 .. SAMPLER_IO_ALIGN; 512 when buffered) */
    size_t fetch_buf;      /* from sampler_topo_opts */
    uint32_t round_reads;  /* from sampler_topo_opts, 0 made SAMPLER_FETCH_ROUND_READS */
    uint64_t *cache_off;   /* (nodes) element offset of v's list in cache, or SAMPLER_UNCACHED */
    void *cache;           /* the cached lists, in node order */
    uint64_t cache_nodes;  /* lists in the cache (in-degree > 0) */
    uint64_t cache_edges;  /* ids in the cache */
    /* what opening cost: bytes read sequentially from indices.bin and the seconds it took */
    uint64_t load_bytes;
    double load_s;
};

/* Opens the topology of the dataset in dir (described by m, as from
 * dataset_meta_read with check_files): reads and checks indptr (starts at 0,
 * never decreases, ends at the edge count) and maps indices and labels
 * (MMAP; the other modes read labels into memory).
 * 0, -EINVAL (inconsistent files: run gnnprep check), -ENOMEM or -errno. */
int sampler_topo_open(struct sampler_topo *t, const char *dir, const struct dataset_meta *m, char *err, size_t errlen);
/* The same in the mode *o says (NULL: SAMPLER_TOPO_MMAP). MEMORY and CACHE
 * read indices.bin at open in large sequential reads (CACHE twice: once
 * to count out-degrees, once to load the chosen lists), recorded in
 * load_bytes and load_s. Errors as sampler_topo_open; CACHE also -EINVAL
 * when o->cache_bytes is below the cache's index
 * (sampler_cache_index_bytes) or holds the whole of indices.bin (use
 * MEMORY), naming the budget and the sizes. Direct reads that the
 * filesystem refuses (EINVAL) fall back to the page cache (direct false). */
int sampler_topo_open_mode(struct sampler_topo *t, const char *dir, const struct dataset_meta *m,
                           const struct sampler_topo_opts *o, char *err, size_t errlen);
/* Bytes of the neighbour cache's index for a graph of `nodes` nodes (one
 * u64 offset per node): the least a budget can be. */
static inline uint64_t sampler_cache_index_bytes(uint64_t nodes)
{
    return nodes * 8;
}
/* Whether node v's list is in memory (MMAP and MEMORY: always true, as
 * are lists of in-degree 0). */
static inline bool sampler_topo_cached(const struct sampler_topo *t, uint64_t v)
{
    return t->mode != SAMPLER_TOPO_CACHE || t->cache_off[v] != SAMPLER_UNCACHED;
}
/* The mode's name as pipeline.topology spells it. */
const char *sampler_topo_mode_name(enum sampler_topo_mode m);

/* Chooses the neighbour cache (Ginex's rule): nodes with in-degree > 0 in
 * decreasing order of out-degree / in-degree (ties: the smaller node id
 * first), each taken while its list fits in `bytes` (es bytes per id); the
 * first that does not fit ends the choice. Writes into off[v] the element
 * offset of v's list in a cache laid out in node order, SAMPLER_UNCACHED
 * for nodes not chosen (and 0 for in-degree 0); *n_nodes and *n_edges
 * receive what was chosen. outdeg: (nodes) occurrences of each node in
 * indices.bin. 0 or -ENOMEM. */
int sampler_cache_choose(const uint64_t *indptr, const uint32_t *outdeg, uint64_t nodes, uint64_t bytes, size_t es,
                         uint64_t *off, uint64_t *n_nodes, uint64_t *n_edges);

/* The loads behind sampler_topo_open_mode (sampler_topo.c), on a handle
 * whose indptr is read: indices.bin at path (bytes long) into memory, or
 * its neighbour cache of `budget` bytes and the file kept open in t->fd. */
int sampler_topo_load_memory(struct sampler_topo *t, const char *path, uint64_t bytes, size_t chunk, bool buffered,
                             char *err, size_t errlen);
/* MEMORY shared by a node's samplers (one process per rank): the first to
 * create the run's segment "topology" (SHM_KIND_RAW: a SAMPLER_IO_ALIGN
 * header page with the load's state, then indices.bin) loads it and
 * publishes its state (release); the others attach read-only and wait
 * for it (polling every millisecond; the launcher stops the run if the
 * loader dies). The launcher removes the segment with the run's others. */
int sampler_topo_load_shared(struct sampler_topo *t, const char *path, uint64_t bytes, size_t chunk, bool buffered,
                             const char *run_id, char *err, size_t errlen);
int sampler_topo_load_cache(struct sampler_topo *t, const char *path, uint64_t bytes, uint64_t budget, size_t chunk,
                            bool buffered, char *err, size_t errlen);

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

/* Which nodes exist for sampling in the partition mode (sampler_set_filter). */
struct sampler_filter {
    const void *node_pos;   /* (nodes) u32 or u64: each node's position (a layout's node_pos.bin) */
    bool pos_u64;
    uint64_t part_nodes;    /* S: positions per partition */
    uint64_t parts;         /* entries of part_in */
    const uint8_t *part_in; /* (parts) nonzero: the partition is in the buffer */
};

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
    uint64_t *picks;     /* (2, pick_cap) positions drawn: two destinations' (sample_block_mem) */
    uint64_t pick_cap;   /* the largest finite fanout (at least 1) */
    struct sampler_fetch *fetch; /* SAMPLER_TOPO_CACHE: this thread's reads of uncached lists, else NULL */
    /* CACHE: the lists of the batch's destinations so far, so that block
     * k + 1 (whose destinations begin with block k's) reads none of them
     * again: known[i] is local node i's list (in the neighbour cache, or
     * copied into store), valid for i < the previous block's destinations */
    const void **known;  /* (plan.n_max[layers - 1]) */
    unsigned char *store; /* (SAMPLER_KNOWN_STORE) copies of lists read in this batch */
    size_t store_used;
    /* CACHE: the targets of the batches this thread samples next
     * (sampler_prefetch): a second reader whose rounds (at most two, in
     * order) hold those lists; pre_ids[i] and pre_n[i] are round i's
     * targets, the oldest at pre_head */
    struct sampler_fetch *pre;
    uint64_t *pre_ids[2]; /* (shape.batch_size) each */
    uint32_t pre_n[2];
    unsigned pre_head, pre_count;
    /* counters of the reads (CACHE): lists read, bytes read (prefetched ones included) */
    uint64_t lists_read, bytes_read;
    uint64_t lists_prefetched; /* of lists_read: targets' lists a sampler_sample found read ahead */
    /* the partition mode's restriction (sampler_set_filter), when on */
    struct sampler_filter filter;
    bool filtered;
    uint64_t *kept; /* (2, max in-degree) two destinations' in-buffer in-neighbours (the memory path's pend) */
};

/* Bytes of read lists a thread keeps for the next block of a batch. */
#define SAMPLER_KNOWN_STORE ((size_t)16 << 20)
/* Destinations whose lists one round of reads covers at most. */
#define SAMPLER_FETCH_DSTS 8192u

/* Prepares a sampler for batches of `shape` (fanouts, batch size; its
 * nodes, edges and max_in_degree are taken from t) over t; with a CACHE
 * topology also the thread's two readers (sampler_fetch.h: each an io_uring
 * of SAMPLER_FETCH_DEPTH entries when liburing is there, else pread(2),
 * and an aligned read buffer of SAMPLER_FETCH_BUF and SAMPLER_PREFETCH_BUF
 * bytes, or t->fetch_buf and a quarter of it). shape->layers and fanouts
 * as in batch.h. 0, -EINVAL / -EOVERFLOW (from batch_plan), -ENOMEM. */
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

/* The partition mode (issue 22, docs/partitions.md): from now on the
 * sampler sees only the subgraph of the nodes whose partition is in the
 * buffer. Node v is in when f->part_in[node_pos[v] / part_nodes] is
 * nonzero; every destination's in-neighbours are first cut to those that
 * are in, and its fanout is drawn among them exactly as among a whole
 * list (so with every partition in, a batch is bit for bit the unfiltered
 * one); degrees (GCN) are in-degrees within the subgraph. A target that is
 * not in is refused (-EINVAL: the schedule and the buffer disagree). The
 * arrays are borrowed; the caller may change part_in between batches (a
 * buffer state's switch), never during one. f = NULL turns the filter
 * off. 0, -ENOMEM, or -EINVAL (part_nodes 0; degrees with a CACHE
 * topology, whose lists are not all in memory to count). */
int sampler_set_filter(struct sampler *s, const struct sampler_filter *f, char *err, size_t errlen);

/* Cross-batch prefetch (CACHE; a no-op returning 0 in the other modes):
 * starts reading the uncached in-neighbour lists of targets[0 .. n) (a
 * batch this thread will sample soon: the schedule knows its targets)
 * while the thread goes on sampling the batch before. The next
 * sampler_sample whose targets are exactly these ids in this order takes
 * the lists from the prefetch instead of reading them in its first block;
 * a sample of other targets leaves the prefetch for later. At most two
 * prefetches are outstanding: a third drops the oldest (its reads are
 * waited for and wasted). The batch sampled is the same, bit for bit,
 * with or without a prefetch (only where the lists come from changes).
 * As many targets as the prefetch buffer holds are covered, the rest are
 * read by sampler_sample as usual. 0, -EINVAL (n is 0 or above the batch
 * size), -ERANGE (a target not below the node count) or a read's -errno,
 * with a message. Does not block with io_uring, except when dropping. */
int sampler_prefetch(struct sampler *s, const uint64_t *targets, uint32_t n, char *err, size_t errlen);

#endif
