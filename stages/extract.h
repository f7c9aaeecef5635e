/* extract.h - the extraction engine behind gnn-extractor (DESIGN.md
 * section 4, steps 1-3; issue 4, gnn-extractor): reads the feature rows of
 * a batch's nodes from features.bin into the rank's feature buffer.
 *
 * Source. struct extract_source is the features file, opened once per
 * process and shared read-only by every extractor thread:
 *   EXTRACT_IO_DIRECT    O_DIRECT reads through io_uring. Each read covers
 *                        the row's extent rounded out to the file's direct
 *                        I/O alignment (statx STATX_DIOALIGN, else 512):
 *                        the format pads rows to a power of two <= 512 B
 *                        or a multiple of 512 B, so a row never costs
 *                        more blocks than the format requires. A file
 *                        system that refuses O_DIRECT (EINVAL at open)
 *                        falls back to EXTRACT_IO_BUFFERED, announced.
 *   EXTRACT_IO_BUFFERED  the same reads through the page cache (no
 *                        alignment needed; exactly the row's bytes).
 *   EXTRACT_IO_MMAP      the file mapped read-only (MADV_RANDOM); a load is
 *                        a copy out of the mapping.
 * Announcements (what mode is in use, and each fallback) go to stderr,
 * prefixed with the program name, once per process.
 *
 * Engine. struct extractor is one thread's: a long-lived io_uring of
 * `depth` entries (or, when io_uring is unavailable - not built with
 * liburing, or io_uring_queue_init fails at run time, or the environment
 * sets SLUICE_NO_IO_URING=1 - pread(2), announced once per process), and
 * its staging: either memory of its own (extractor_init), or its portion
 * of the node's shared staging buffer (extractor_init_shared,
 * ipc/staging.h), from which it may also borrow blocks of idle portions
 * when its own are all busy. What it owns is registered with the ring
 * (fixed-buffer reads; a borrowed block is read into without). A read
 * lands in staging; its row is then handed to the thread's row sink
 * (stages/sink.h), which copies it into the feature-buffer slot and marks
 * the slot valid once the copy has finished. The sink is chosen by where
 * the buffer keeps its rows: the host sink (a memcpy) for rows in shared
 * memory; for rows on the device the CUDA sink (cudaMemcpyAsync from the
 * staging memory, which it registers once per process), in a build with
 * CUDA and once the process has opened the device rows
 * (extractor_use_device).
 *
 * One batch (extractor_run):
 *   1. featbuf_acquire_many over the batch's nodes (all or nothing); on
 *      -EAGAIN (every slot referenced) sleep in featbuf_wait_standby and
 *      retry, calling the idle hook at least every 200 ms.
 *   2. Reads for every FEATBUF_LOAD answer, up to `depth` in flight,
 *      submitted in batches and reaped in batches; as each completes its
 *      row goes to the sink, which publishes it (featbuf_loaded()) when its
 *      copy is done; the sink is drained before step 3. Short reads
 *      are completed with a follow-up read of the rest; -EAGAIN / -EINTR
 *      are resubmitted; any other error, or end of file (the file shrank
 *      under us), fails the batch.
 *   3. featbuf_wait_valid on every FEATBUF_WAIT answer (rows another
 *      extractor is loading).
 * On success slots[i] is the slot of nodes[i] and the caller holds one
 * reference per node (released later, by the releaser, with
 * featbuf_release_many over the same slots) - except when the buffer is
 * resident (featbuf_set_resident: every row in for good): then the batch
 * is one lock-free lookup per node (featbuf_lookup_resident, counted as
 * hits), no reference is taken, x->unreferenced says so, and there is
 * nothing to release. On failure every load still
 * outstanding is failed (featbuf_load_failed), every reference taken is
 * dropped, and -EIO (or the error) returns with a message naming the node
 * id, the file offset and the errno text.
 *
 * Fault injection (a test hook, docs/reliability.md): with
 * SLUICE_FAULT_READ_EIO=N in the environment when the source is opened, the
 * Nth read the process completes (any engine, any backend) fails with -EIO
 * as if the kernel had returned it; unset, it costs nothing measurable.
 * SLUICE_FAULT_COPY_EIO=N, read when an engine is initialised, fails the
 * Nth row copy of that engine's sink (stages/sink.h) the same way.
 *
 * Thread safety: an extract_source is shared; a struct extractor belongs
 * to one thread. Errors: 0 or -errno with a message in err (may be NULL).
 * -EPIPE: the feature buffer is broken (run torn down). */
#ifndef SLUICE_STAGES_EXTRACT_H
#define SLUICE_STAGES_EXTRACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/config.h"
#include "core/dataset.h"
#include "stages/featbuf.h"

/* enum extract_io, its names and extract_io_parse are in core/config.h
 * (pipeline.io). */

struct extract_source {
    int fd;                 /* features.bin; O_DIRECT when io == DIRECT */
    enum extract_io io;     /* what is in use (after any fallback) */
    uint64_t rows;          /* N */
    uint64_t row_bytes;     /* feat_dim x element size: bytes a slot needs */
    uint64_t row_stride;    /* bytes between rows in the file */
    uint64_t file_bytes;    /* size recorded in dataset.toml */
    uint32_t align;         /* read alignment: direct I/O's (the larger of
                             * statx's offset and memory alignments), else 1 */
    uint64_t extent_max;    /* most bytes one row's read covers */
    uint64_t entry_bytes;   /* staging bytes per read in flight: extent_max
                             * rounded up to 64 */
    const unsigned char *map; /* EXTRACT_IO_MMAP: the mapping */
    size_t map_len;
    const char *prog;       /* announcement prefix ("gnn-extractor") */
    char path[4096];        /* dir/features.bin, for messages */
};

/* Opens dir/features.bin of the dataset m (as from dataset_meta_read) for io.
 * 0; -ENOENT (no features); -EINVAL (file size differs from dataset.toml:
 * run gnnprep check); -errno. prog prefixes announcements. */
int extract_source_open(struct extract_source *src, const char *dir, const struct dataset_meta *m, enum extract_io io,
                        const char *prog, char *err, size_t errlen);
void extract_source_free(struct extract_source *src);

/* Staging bytes one engine of this depth needs: depth x entry_bytes,
 * rounded up to 4096 (EXTRACT_IO_MMAP needs none but answers the same). */
size_t extract_staging_bytes(const struct extract_source *src, unsigned depth);

/* Counters of one engine, cumulative over its batches. */
struct extract_stats {
    uint64_t batches;
    uint64_t rows;      /* nodes handed out (hits + waits + loads) */
    uint64_t hits;      /* rows already valid in the buffer */
    uint64_t waits;     /* rows another extractor was loading */
    uint64_t loads;     /* rows this engine read */
    uint64_t io_ops;    /* read requests completed (follow-ups included) */
    uint64_t io_bytes;  /* bytes read from the file (aligned extents) */
    uint64_t retries;   /* -EAGAIN / -EINTR resubmissions and short-read follow-ups */
    uint64_t copies;    /* rows handed to the row sink (one per load read whole) */
    uint64_t copies_overlapped; /* of those, started while other reads of the engine were outstanding
                                 * (submitted, not yet handled): the copy runs beside them */
    uint64_t wait_ns;   /* time asleep for buffer room or others' rows */
};

/* Adds every counter of src to dst (threads' totals). */
void extract_stats_add(struct extract_stats *dst, const struct extract_stats *src);

/* Called while extractor_run sleeps (at least every 200 ms): the stage
 * heartbeats here. A nonzero return aborts the batch with that error. */
typedef int (*extract_idle_fn)(void *arg);

/* Called from a batch's read loop (every backend, between reaps of
 * completed reads) at most every EXTRACT_TICK_MS, when set: out of core
 * one batch can read for many seconds, and a stage that heartbeats and
 * publishes its counters only between batches looks stalled meanwhile
 * (gnnstat shows 0 reads a second, the supervisor's stall clock runs).
 * The stage heartbeats and publishes x->st so far here. Never called
 * while the engine sleeps on a wait (that is idle's). A nonzero return
 * fails the batch with that error, as idle's does. */
#define EXTRACT_TICK_MS 100
struct extractor;
typedef int (*extract_tick_fn)(void *arg, const struct extractor *x);

struct staging;

struct extractor {
    const struct extract_source *src;
    struct featbuf *fb;
    unsigned depth;
    unsigned char *staging; /* where reads land: private, depth x entry_bytes aligned to 4096;
                             * shared: every block of the staging buffer */
    size_t staging_len;
    bool own_staging;
    struct staging *stg; /* shared staging, or NULL */
    uint32_t portion;    /* this thread's portion of stg */
    bool use_uring;
    void *ring;             /* struct io_uring *, when use_uring */
    extract_idle_fn idle;
    void *idle_arg;
    extract_tick_fn tick; /* NULL: none */
    void *tick_arg;
    uint64_t tick_ns; /* when tick was last called (sl_now_ns) */
    uint64_t batch; /* the schedule number of the batch extractor_run gets next (featbuf_acquire_batch tells
                     * the buffer's policy); FEATBUF_NO_BATCH (the default) when none */
    struct extract_stats st;
    bool unreferenced; /* the last batch was served by a resident buffer: no references to release */
    /* per-batch scratch, grown as needed */
    uint8_t *action;
    uint32_t cap;
    void *inflight;         /* private bookkeeping of reads in flight */
};

/* Prepares one thread's engine over src and fb with `depth` reads in
 * flight (1..4096). staging: extract_staging_bytes(src, depth) bytes
 * aligned to 4096 that the engine may use (registered with its ring), or
 * NULL to allocate its own (EXTRACT_IO_MMAP uses none). 0; -EINVAL (bad
 * depth, fb rows smaller than a row or on the device with no CUDA row
 * sink in this build, fb with fewer nodes
 * than the file, staging too small or misaligned); -ENOMEM. */
int extractor_init(struct extractor *x, const struct extract_source *src, struct featbuf *fb, unsigned depth,
                   void *staging, size_t staging_len, char *err, size_t errlen);

/* The same over shared staging: reads land in blocks of stg, the thread's
 * own portion `portion` first, borrowed blocks when those are busy (rules
 * in ipc/staging.h); `depth` reads in flight at most, own or borrowed.
 * -EINVAL also for a portion out of range or blocks smaller than one
 * read's extent (src->entry_bytes). EXTRACT_IO_MMAP reads no staging. */
int extractor_init_shared(struct extractor *x, const struct extract_source *src, struct featbuf *fb, unsigned depth,
                          struct staging *stg, uint32_t portion, char *err, size_t errlen);
void extractor_free(struct extractor *x);

/* A GPU rank (the feature buffer keeps its rows on the device): opens the
 * rank's device rows in this process with featbuf_cuda_import - waiting,
 * calling idle(arg) at least every 200 ms, until the trainer has published
 * them (timeout_ms < 0: until then or until the run stops) - so that every
 * engine made afterwards copies rows there with the CUDA row sink. device:
 * the CUDA ordinal this rank was given, or EXTRACT_DEVICE_ANY for the one
 * the trainer published (found by PCI bus id). Once per process, before
 * the engines; extractor_unuse_device after every engine is freed. 0;
 * -ENOTSUP (a build without CUDA); -EPIPE (the run is stopping);
 * -ETIMEDOUT; or featbuf_cuda_import's error, with a message. */
#define EXTRACT_DEVICE_ANY (-1)
struct featbuf_cuda;
int extractor_use_device(struct featbuf_cuda *dev, struct featbuf *fb, int device, int timeout_ms,
                         extract_idle_fn idle, void *arg, char *err, size_t errlen);
void extractor_unuse_device(struct featbuf_cuda *dev);

/* Replaces the engine's row sink (extractor_init picks it from where fb
 * keeps its rows) with a new one of variant ops over the same buffer and
 * staging, `depth` copies deep: for a variant the choice does not know yet
 * (tests use one whose copies finish late). Between batches only. 0, or
 * the error of row_sink_init (the old sink is kept). */
struct row_sink_ops;
int extractor_set_sink(struct extractor *x, const struct row_sink_ops *ops, char *err, size_t errlen);

/* Extracts one batch of n nodes (any ids < rows, repeats allowed) as
 * described above. slots has room for n. Blocks on the reads, on room in
 * the buffer and on rows other extractors load. -EINVAL: a node >= rows
 * (nothing taken). An engine whose ring failed with reads still in flight
 * fails every later batch with -EIO. */
int extractor_run(struct extractor *x, const uint64_t *nodes, uint32_t n, uint32_t *slots, char *err, size_t errlen);

/* The same for a batch whose rows the caller already holds in memory
 * (a packed run: each batch's rows read from its chunk, stages/pack.h):
 * a load of nodes[i] copies rows[i] (row_bytes of the dataset's layout)
 * through the row sink instead of reading features.bin; nothing is read,
 * no staging is used. rows[i] may be NULL for a node the caller expects
 * to be in the buffer already (a pinned hot row): if the buffer answers
 * LOAD for it after all, the batch fails with -ENODATA naming the node.
 * Errors and references as extractor_run. */
int extractor_run_rows(struct extractor *x, const uint64_t *nodes, uint32_t n, const void *const *rows,
                       uint32_t *slots, char *err, size_t errlen);

#endif
