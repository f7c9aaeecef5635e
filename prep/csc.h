/* csc.h - memory-bounded conversion of an edge stream into the dataset's
 * CSC topology (indptr.bin + indices.bin, docs/format.md).
 *
 * An edge (src, dst) makes src an in-neighbour of dst. Edges are added in
 * any order; the builder keeps at most `mem_limit` bytes of them in memory,
 * sorting each full buffer by (dst, src) and spilling it as a run file into
 * `tmpdir`; finish() merges the runs (k-way, streaming) and writes indptr and
 * indices sequentially. When everything fits, no run file is written. The
 * result is canonical — neighbours ascending per node — so an out-of-core
 * conversion equals the in-memory one byte for byte.
 *
 * Options apply during add/finish: `undirected` also adds (dst, src) for
 * every edge; `drop_self_loops` discards (v, v); `dedupe` keeps one copy of
 * each (src, dst) pair (after the undirected mirroring).
 *
 * Memory. Every buffer the builder allocates comes out of mem_limit M:
 *   io      clamp(M/256, 256 KiB, 8 MiB): run write buffer, radix histograms
 *           while sorting, indptr/indices staging in finish()
 *   edges   cap records, grown by doubling as edges arrive
 *   scratch cap records: the radix sort's second buffer; in finish() the
 *           read buffers of the run files being merged
 * with cap = (M - io) / (2 * record size). A record is one u64
 * (dst << b | src, b = bits of nodes-1) when nodes <= 2^32, else 16 bytes
 * (dst, src). Outside M: the two output writers' buffers (struct file_writer, 4 MiB
 * each), the list of run file names and a second thread's stack. At 2 GiB
 * one buffer holds ~134M edges (~67M undirected). */
#ifndef SLUICE_CSC_H
#define SLUICE_CSC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"

struct csc_opts {
    uint64_t nodes;         /* ids must be < nodes */
    uint64_t mem_limit;     /* bytes for edge buffers; the builder needs at least 1 MiB */
    bool undirected;
    bool dedupe;
    bool drop_self_loops;
    const char *tmpdir;     /* directory for run files (removed by finish/free);
                               NULL: $TMPDIR, else /tmp */
    /* Testing knobs; leave zero. */
    bool force_wide;        /* 16-byte records even when nodes <= 2^32 */
    unsigned max_fanin;     /* most run files merged at once (0: 128; at least 2) */
};

/* What a builder did, for tests and progress lines. */
struct csc_stats {
    uint64_t edges;         /* edges added (positions in the input stream) */
    uint64_t records;       /* records buffered (after mirroring, self-loops dropped) */
    uint64_t runs;          /* run files written, intermediate merges included */
    uint64_t merges;        /* intermediate merge steps (0: one final merge pass) */
    uint64_t peak_bytes;    /* most bytes held at once in buffers counted in mem_limit */
    bool wide;              /* 16-byte records */
};

struct csc;

#define CSC_MIN_MEM (1ull << 20)

/* 0 or -errno (-EINVAL for nodes == 0 or a mem_limit below the minimum). */
int csc_init(struct csc **out, const struct csc_opts *o, char *err, size_t errlen);
/* Adds n edges. An id >= nodes fails with -ERANGE and a message naming the
 * edge's position in the stream (0-based, counting every edge added so far)
 * and the id; the caller prefixes the input file's name. The batch is
 * checked before any of it is added, so after -ERANGE the builder holds
 * exactly the edges of earlier calls. Blocks while a full buffer is sorted
 * and spilled; a failed spill (-errno, message names the run file) leaves
 * the builder good only for csc_free. */
int csc_add(struct csc *c, const uint64_t *src, const uint64_t *dst, size_t n, char *err, size_t errlen);
/* Sorts/merges and writes indptr (u64, nodes+1) and indices (dtype_for_ids)
 * to the given paths, filling their dataset entries (name = basename) and
 * the final edge count. Run files are deleted. Call once; on failure
 * (-errno, message names the file) the outputs may be partial. */
int csc_finish(struct csc *c, const char *indptr_path, const char *indices_path, struct dataset_file *indptr,
               struct dataset_file *indices, uint64_t *edges, char *err, size_t errlen);
/* Frees the builder and deletes any run files; accepts NULL. */
void csc_free(struct csc *c);
/* Fills *st; valid before and after finish(). */
void csc_stats_get(const struct csc *c, struct csc_stats *st);

#endif
