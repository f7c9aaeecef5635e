/* cachesim.h - the feature buffer's yardstick (issue 18): row traces, the
 * hot set of the static policy, and an offline replay of a trace against
 * the buffer's policies and against Belady's optimum at the same number
 * of slots (gnnprep cache-sim, tests/test_featbuf_policy.c).
 *
 * Row trace (pipeline.trace_rows = FILE; the extractor of rank R writes
 * FILE.rank<R>). Little-endian binary:
 *   header, 32 bytes: "SLROWTR1" (8 bytes), u32 version (1), u32 rank,
 *                     u64 nodes (the dataset's node count), u64 0;
 *   records, one per batch in the order the extractor threads acquired
 *   them: u64 batch (schedule number), u32 n, u32 0, u64 node[n] (the
 *   batch's nodes in acquisition order).
 * A run that stops early leaves whole records only (each is one write
 * under the writer's lock); a reader stops at the first partial record and
 * says so.
 *
 * Replay. Batches are replayed one at a time in trace order: a batch's
 * nodes are acquired together (all of them resident at once, as the
 * extractor needs them) and released before the next batch. A miss is a
 * row that was not resident when its batch asked for it (a FEATBUF_LOAD):
 *   lru, static, lookahead-W run the live policy code on a private buffer
 *     of S slots (static: the hot set pinned; lookahead: batch i + W
 *     hinted before batch i is replayed, batches 0..W-1 first);
 *   belady is the optimum for this batch-at-a-time model: at a miss, evict
 *     the resident row (not of the current batch) whose next use is
 *     farthest, or that has none (max-heap with lazy deletion,
 *     O(log) per access).
 * Every replay needs S >= the largest batch's distinct nodes.
 *
 * Errors: 0 or -errno with a message in err (may be NULL). */
#ifndef SLUICE_STAGES_CACHESIM_H
#define SLUICE_STAGES_CACHESIM_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "core/dataset.h"

#define ROWTRACE_MAGIC "SLROWTR1"
#define ROWTRACE_VERSION 1u
#define ROWTRACE_HDR_BYTES 32u

/* ---- writing (the extractor) -------------------------------------------- */

struct rowtrace {
    FILE *f;
    pthread_mutex_t mu; /* records from several threads stay whole */
    char path[4096];
    int rc; /* first write error, sticky */
};

/* Creates base.rank<rank> (truncating) and writes the header. */
int rowtrace_open(struct rowtrace *t, const char *base, int rank, uint64_t nodes, char *err, size_t errlen);
/* Appends one batch's record; thread safe. 0 or the (sticky) -errno. */
int rowtrace_add(struct rowtrace *t, uint64_t batch, const uint64_t *nodes, uint32_t n);
/* Flushes and closes: 0 or the first write error. Accepts a zeroed one. */
int rowtrace_close(struct rowtrace *t, char *err, size_t errlen);

/* ---- reading ------------------------------------------------------------ */

struct cachesim_trace {
    uint32_t rank;
    uint64_t n_nodes;
    uint64_t batches; /* records */
    uint64_t *batch;  /* (batches) schedule numbers */
    uint64_t *off;    /* (batches + 1) record i's nodes are nodes[off[i] .. off[i+1]) */
    uint64_t *nodes;  /* (accesses) */
    uint64_t accesses;
    uint32_t max_batch; /* most nodes in one record */
    bool truncated;     /* the file ended inside a record (dropped) */
};

int cachesim_trace_read(struct cachesim_trace *t, const char *path, char *err, size_t errlen);
void cachesim_trace_free(struct cachesim_trace *t);

/* ---- the hot set (static policy, PaGraph's rule) ------------------------- */

/* The k nodes with the highest out-degree in the sampled direction (how
 * often a node is an in-neighbour: its count in indices.bin), ties to the
 * lower id, into hot (room for k; sorted by id). One pass over indices.bin
 * and 4 bytes a node (the counts; the k-th largest is found from a
 * histogram of them, not from a copy). 0, -EINVAL, -ENOMEM or the read's error. */
int cachesim_hot_set(const char *dir, const struct dataset_meta *m, uint64_t k, uint64_t *hot, char *err,
                     size_t errlen);

/* ---- replay --------------------------------------------------------------- */

enum cachesim_policy {
    CACHESIM_LRU,
    CACHESIM_STATIC,    /* LRU with hot[] pinned */
    CACHESIM_LOOKAHEAD, /* window W; with hot[] pinned too when nhot > 0 */
    CACHESIM_BELADY,
};

struct cachesim_run {
    enum cachesim_policy policy;
    uint32_t slots;
    uint32_t window;       /* lookahead */
    const uint64_t *hot;   /* static (and lookahead over a hot set) */
    uint32_t nhot;         /* < slots */
    uint64_t hint_entries; /* lookahead's log (0: every access of the trace) */
};

/* Replays t; *misses = rows loaded (also the evictions + slots filled). */
int cachesim_replay(const struct cachesim_trace *t, const struct cachesim_run *r, uint64_t *misses, char *err,
                    size_t errlen);

const char *cachesim_policy_name(enum cachesim_policy p);

#endif
