/* pack_rows.h - the extractor's side of a packed run (pipeline.mode =
 * "packed"; docs/packed.md, stages/pack.h): the pack's hot tier pinned in
 * the rank's feature buffer, and each batch's rows read from its chunk
 * and, when the pack has a cache tier, from a few extents of cache.bin.
 *
 * Protocol (gnn-extractor, one rank):
 *   1. pack_rows_open (main thread): opens the pack, checks it against
 *      the run (pack_check: dataset and sampling keys), lays out the run's
 *      schedule (to find batch g's chunk by its epoch, split and k) and
 *      reads the hot and cache tiers' ids into bitmaps.
 *   2. pack_rows_load_hot (main thread, before the extractor threads):
 *      pins every hot node (featbuf_pin; refused when the buffer's pin
 *      budget, pipeline.feature_buffer_mb less the extraction reserve,
 *      is smaller than the hot tier) and loads its rows from hot.bin in
 *      large sequential reads through the engine (extractor_run_rows),
 *      then drops the references: the rows stay resident for the run.
 *   3. pack_rows_batch (each extractor thread, per batch): one large read
 *      of the batch's packed rows and the chunk's tail (O_DIRECT unless
 *      pipeline.io is buffered) into the thread's buffer; then the
 *      tail's extents of cache.bin, up to PACK_ROWS_DEPTH reads in flight
 *      on the thread's io_uring (pread one after another without
 *      liburing, with SLUICE_NO_IO_URING set, or where a ring cannot be
 *      set up), back to back into the
 *      thread's cache buffer; rows[i] points at node i's row in either -
 *      NULL for hot nodes, which the buffer holds - for
 *      extractor_run_rows. The chunk must be the batch's: its node, row
 *      and cache row counts are checked against the batch.
 * A struct pack_rows is read-only after step 2 and shared by the threads;
 * a struct pack_rows_buf is one thread's. Errors: 0 or -errno with a
 * message. */
#ifndef SLUICE_STAGES_PACK_ROWS_H
#define SLUICE_STAGES_PACK_ROWS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stages/extract.h"
#include "stages/pack.h"
#include "stages/schedule.h"

struct pack_rows {
    struct pack pack;
    const struct schedule *sched; /* the run's (counting only), the caller's: outlives this */
    uint32_t rank;         /* global rank: whose stream */
    uint8_t *hot;          /* (nodes / 8 + 1) bitmap of the hot tier */
    uint8_t *cache;        /* (nodes / 8 + 1) bitmap of the cache tier; NULL without one */
    uint64_t rows_max;     /* the largest chunk's rows and tail, bytes */
    uint64_t cache_max;    /* the largest batch's cache extents, bytes */
};

#define PACK_ROWS_DEPTH 16u /* cache extents in flight per thread */

struct pack_rows_buf {
    unsigned char *buf;  /* (cap) aligned to PACK_ALIGN */
    size_t cap;
    unsigned char *cbuf; /* (ccap) aligned: a batch's cache extents back to back */
    size_t ccap;
    const void **rows;   /* (nrows) */
    uint32_t nrows;
    void *ring;          /* struct io_uring, set up at the first cache read; NULL without one */
    bool ring_tried;
    uint64_t reads, bytes; /* what this thread read (chunks and cache extents) */
    uint64_t read_ns;      /* ... and the time its reads took */
    uint64_t cache_reads, cache_bytes, cache_ns; /* of them, the cache extents */
};

int pack_rows_open(struct pack_rows *pr, const char *dir, const struct config *c, uint32_t rank, uint32_t ranks,
                   const struct schedule *run, const struct dataset_meta *m, bool buffered, char *err, size_t errlen);
void pack_rows_free(struct pack_rows *pr);

/* Step 2 with engine x over the rank's buffer; *loaded gets the rows
 * loaded. 0, -ENOSPC (pin budget too small, with the feature_buffer_mb
 * that would do), or the engine's or a read's error. */
int pack_rows_load_hot(struct pack_rows *pr, struct extractor *x, uint64_t *loaded, char *err, size_t errlen);

/* Step 3 for batch g (the run's numbering) of n nodes. */
int pack_rows_batch(const struct pack_rows *pr, struct pack_rows_buf *b, uint64_t g, const uint64_t *nodes, uint32_t n,
                    char *err, size_t errlen);
void pack_rows_buf_free(struct pack_rows_buf *b);

#endif
