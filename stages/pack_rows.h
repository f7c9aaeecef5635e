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
 *   3. pack_rows_batch (each extractor thread, per batch): the batch's
 *      packed rows and the chunk's tail (O_DIRECT unless pipeline.io is
 *      buffered) into the thread's buffer, and the tail's extents of
 *      cache.bin back to back into the thread's cache buffer: the rows
 *      and tail in one large read, then the extents, up to
 *      PACK_ROWS_DEPTH in flight on the thread's io_uring. With
 *      b->overlap, a batch with cache rows first reads the one or two
 *      blocks holding the tail (pack_read_tail: the extents are known),
 *      then the rows before them and every extent together, the rows'
 *      read beside up to PACK_ROWS_DEPTH extents (pread one after another
 *      without liburing, with SLUICE_NO_IO_URING set, or where a ring
 *      cannot be set up).
 *      rows[i] points at node i's row in either - NULL for hot nodes,
 *      which the buffer holds - for extractor_run_rows. The chunk must be
 *      the batch's: its node, row and cache row counts are checked
 *      against the batch.
 * A struct pack_rows is read-only after step 2 and shared by the threads
 * but for its busy clock (busy_*, under busy_mu: the time during which
 * at least one thread was reading, pack_rows_busy); a struct
 * pack_rows_buf is one thread's. Errors: 0 or -errno with a message.
 *
 * Memory (pack_rows_memory, counted by gnnlaunch's memory plan): the
 * bitmaps (a bit a node per tier), the index, the hot tier's ids and one
 * piece of rows while it loads, and per thread a chunk's rows and tail
 * (rows_max), a batch's cache extents (cache_max), its read list and a
 * row pointer per node of the largest batch. The hot rows themselves
 * are pinned in the feature buffer, which the plan counts already. */
#ifndef SLUICE_STAGES_PACK_ROWS_H
#define SLUICE_STAGES_PACK_ROWS_H

#include <pthread.h>
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
    uint32_t ext_max;      /* the most cache extents of a batch */
    pthread_mutex_t busy_mu; /* guards busy_* */
    bool mu_init;
    uint32_t busy_active;  /* threads reading now */
    uint64_t busy_since;   /* when busy_active last became nonzero (sl_now_ns) */
    uint64_t busy_ns;      /* time with busy_active > 0 before that */
};

#define PACK_ROWS_DEPTH 16u /* cache extents in flight per thread */

struct pack_rows_buf {
    unsigned char *buf;  /* (cap) aligned to PACK_ALIGN */
    size_t cap;
    unsigned char *cbuf; /* (ccap) aligned: a batch's cache extents back to back */
    size_t ccap;
    const void **rows;   /* (nrows) */
    uint32_t nrows;
    struct pack_rows_rd *rd; /* (rdcap) a batch's read list */
    uint32_t rdcap;
    void *ring;          /* struct io_uring, set up at the first cache read; NULL without one */
    bool ring_tried;
    bool overlap;        /* read the tail's blocks, then the rows and the extents together (see step 3),
                            instead of the rows and tail, then the extents; gnn-extractor with
                            SLUICE_PACK_OVERLAP=1, bench/pack_read_bench */
    uint64_t reads, bytes; /* what this thread read (chunks and cache extents) */
    uint64_t read_ns;      /* ... and the time its reads took */
    uint64_t cache_reads, cache_bytes; /* of them, the cache extents */
    uint64_t cache_ns;   /* the time of the reads that had cache extents in flight: the extents alone
                            (serial), or the extents with the chunk's rows beside them (overlapped) */
};

int pack_rows_open(struct pack_rows *pr, const char *dir, const struct config *c, uint32_t rank, uint32_t ranks,
                   const struct schedule *run, const struct dataset_meta *m, bool buffered, char *err, size_t errlen);
void pack_rows_free(struct pack_rows *pr);

/* Opens the pack in dir for pack_rows_read alone (measuring, tests):
 * neither checked against a run nor with its tiers' bitmaps (hot and
 * cache stay NULL: pack_rows_batch and pack_rows_load_hot need
 * pack_rows_open). Freed by pack_rows_free. */
int pack_rows_open_reads(struct pack_rows *pr, const char *dir, bool buffered, char *err, size_t errlen);

/* Step 2 with engine x over the rank's buffer; *loaded gets the rows
 * loaded. 0, -ENOSPC (pin budget too small, with the feature_buffer_mb
 * that would do), or the engine's or a read's error. */
int pack_rows_load_hot(struct pack_rows *pr, struct extractor *x, uint64_t *loaded, char *err, size_t errlen);

/* Step 3 for batch g (the run's numbering) of n nodes. */
int pack_rows_batch(struct pack_rows *pr, struct pack_rows_buf *b, uint64_t g, const uint64_t *nodes, uint32_t n,
                    char *err, size_t errlen);
void pack_rows_buf_free(struct pack_rows_buf *b);

/* Step 3's reads alone for the chunk of entry e (no batch: for measuring
 * and testing): its rows and tail into b->buf, its cache extents into
 * b->cbuf, as pack_rows_batch reads them (b->overlap as set). */
int pack_rows_read(struct pack_rows *pr, struct pack_rows_buf *b, const struct pack_entry *e, char *err,
                   size_t errlen);

/* The time during which at least one thread of pr was in step 3's reads,
 * so far (ns): the bytes the threads read over it is the rate the disk
 * gave the rank, however many threads read at once. Any thread. */
uint64_t pack_rows_busy(struct pack_rows *pr);

/* The largest chunk's rows and tail, batch's cache extents (bytes) and
 * batch's extent count of the open pack p. */
void pack_rows_sizes(const struct pack *p, uint64_t *rows_max, uint64_t *cache_max, uint32_t *ext_max);

/* Bytes a rank's extractor holds for the pack p with `threads` extractor
 * threads, the feature buffer aside (see "Memory" above). */
uint64_t pack_rows_memory(const struct pack *p, uint32_t threads);

#endif
