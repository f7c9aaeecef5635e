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
 * each (src, dst) pair (after the undirected mirroring). */
#ifndef SLUICE_CSC_H
#define SLUICE_CSC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/dataset.h"

typedef struct sl_csc_opts {
    uint64_t nodes;         /* ids must be < nodes */
    uint64_t mem_limit;     /* bytes for edge buffers; the builder needs at least 1 MiB */
    bool undirected;
    bool dedupe;
    bool drop_self_loops;
    const char *tmpdir;     /* directory for run files (removed by finish/free) */
} sl_csc_opts;

typedef struct sl_csc sl_csc;

/* 0 or -errno (-EINVAL for nodes == 0 or a mem_limit below the minimum). */
int sl_csc_init(sl_csc **out, const sl_csc_opts *o, char *err, size_t errlen);
/* Adds n edges. An id >= nodes fails with -ERANGE and a message naming the
 * edge's position in the stream (0-based, counting every edge added so far)
 * and the id; the caller prefixes the input file's name. */
int sl_csc_add(sl_csc *c, const uint64_t *src, const uint64_t *dst, size_t n, char *err, size_t errlen);
/* Sorts/merges and writes indptr (u64, nodes+1) and indices (sl_id_dtype)
 * to the given paths, filling their dataset entries (name = basename) and
 * the final edge count. Run files are deleted. */
int sl_csc_finish(sl_csc *c, const char *indptr_path, const char *indices_path,
                  sl_dsfile *indptr, sl_dsfile *indices, uint64_t *edges, char *err, size_t errlen);
/* Frees the builder and deletes any run files; accepts NULL. */
void sl_csc_free(sl_csc *c);

#endif
