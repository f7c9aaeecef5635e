/* warm.h - the warm start (issue 27): one sequential pass over
 * features.bin that fills a rank's feature buffer at launch with large
 * reads, many in flight, instead of one small random read per row as the
 * first batches ask for them.
 *
 * When. When every row of the file can have a slot of its own (nslots
 * >= rows), in host memory or on the device once this process has
 * opened the rows (fb->dev_rows; warm_fits); or, for a buffer too small
 * for the file, a hot set of at most nslots rows (warm_params.nodes,
 * warm_fits_set: the static policy's pinned rows). Either way no row the
 * pass loads is ever evicted by it: the pass never takes a slot another
 * batch would need.
 *
 * Memory: 5 bytes per row loaded (its slot and the claim's answer: the
 * file's rows, or the hot set's), 8 bytes per row of one chunk (every
 * row) or per chunk of the file (a hot set: where each chunk's rows of
 * the set start), and staging of at most 16 chunks, all freed when the
 * pass returns.
 *
 * Protocol (stages/featbuf.h; runs beside the extractor threads, in one
 * thread of gnn-extractor):
 *   1. Claim: featbuf_acquire_many over every row, one chunk of
 *      params.chunk_bytes worth of rows at a time, in file order: the
 *      first params.depth chunks before any read, the rest 16 chunks at a
 *      time between the reads (the disk works meanwhile), always ahead of
 *      the reads. Rows a batch already holds or loads come back HIT or WAIT
 *      and are left alone; the others come back LOAD, so from now on an
 *      extractor that needs one of them waits on its slot (FEATBUF_WAIT)
 *      instead of reading it at random.
 *   2. Read: the claimed chunks in file order, params.depth reads in
 *      flight (io_uring, or pread(2) one at a time without it: not built
 *      with liburing, io_uring_queue_init failed, or SLUICE_NO_IO_URING=1),
 *      at most 16 of them into staging (the rest wait for a piece). A chunk
 *      whose rows are all LOAD in consecutive slots, with the buffer's
 *      stride equal to the file's and the direct I/O alignment kept, is
 *      read straight into the slots' memory (host rows only); any other
 *      chunk lands in the pass's own staging and its LOAD rows go into
 *      their slots through a row sink of the pass's own (stages/sink.h:
 *      host or CUDA, by where the rows live), one copy per run of
 *      consecutive slots, every copy finished before the chunk is done.
 *   3. As each chunk lands: its LOAD rows published (featbuf_loaded, by
 *      the pass or by the sink once the copy finished: waiters wake, the
 *      row is usable as soon as its chunk is in), then
 *      featbuf_release_many over the whole chunk, so every row ends on
 *      standby, VALID, unreferenced.
 * Huge pages. Before a chunk's read is sent, the slot memory it lands in
 * has been offered to shm_huge (ipc/shm.h) by two helper threads that
 * start with the pass and go through the rows in slot order, 8 MiB per
 * call, so the read lands in huge pages and the trainer's random row
 * reads miss the TLB once per 2 MiB instead of once per 4 KiB. A hint
 * only: where the kernel refuses (before Linux 6.1, shmem huge pages
 * "deny", none free) the rows stay in small pages and the pass goes on;
 * st->huge_rc says why. p->no_huge (pipeline.huge_pages = false) or
 * SLUICE_NO_HUGE_PAGES=1 in the environment turns
 * it off (for measuring it). The helpers are joined before warm_fill
 * returns, on every path.
 * The pass finishes (loaded or load_failed) every LOAD it claimed before
 * it returns, on every path, so no extractor waits for ever. It never
 * waits on a slot itself.
 *
 * Errors: 0, or -errno with a message naming the file, offset and errno:
 * a read's own -errno, or -EIO when the file ended early (the chunk's
 * rows' loads fail either way; a failed io_uring leaves the rows of the
 * reads it held referenced, for good),
 * -EPIPE (the buffer broke, or idle() asked to stop), -ENOMEM. */
#ifndef SLUICE_STAGES_WARM_H
#define SLUICE_STAGES_WARM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stages/extract.h"
#include "stages/featbuf.h"

#define WARM_CHUNK_BYTES_DEFAULT (1u << 20) /* one read */
#define WARM_DEPTH_DEFAULT 64u              /* reads in flight: an SSD streams at its full rate with 16-64 MiB queued
                                             * (bench/results/warm-2026-11-28.md); chunks read straight into their
                                             * slots need no staging, so this costs no memory */

struct warm_params {
    size_t chunk_bytes; /* bytes of rows per read (rounded down to whole rows, at least one); 0: default */
    unsigned depth;     /* reads in flight, 1..256; 0: default */
    bool no_huge;       /* small pages only (pipeline.huge_pages = false), as SLUICE_NO_HUGE_PAGES */
    /* a hot set instead of every row: these nodes' rows only (ids strictly
     * rising, < the file's rows, at most the buffer's slots; warm_fits_set),
     * read in the same sequential pass - chunks holding none are skipped,
     * the others read whole and the set's rows copied out of staging (a
     * chunk the set covers whole may go straight into its slots) */
    const uint64_t *nodes;
    uint64_t nnodes;
};

struct warm_stats {
    uint64_t rows;       /* rows to load: the file's, or the hot set's */
    uint64_t loaded;     /* rows this pass put in the buffer */
    uint64_t skipped;    /* rows a batch held or loaded first (HIT or WAIT at the claim) */
    uint64_t bytes;      /* bytes read */
    uint64_t reads;      /* read requests completed */
    uint64_t chunks_direct; /* chunks read straight into their slots */
    uint64_t chunks_copied; /* chunks read into staging and copied (a chunk with no row to load is not read:
                             * in neither count) */
    uint64_t huge_bytes; /* bytes of slot memory made huge pages (shm_huge) */
    uint64_t huge_ns;    /* from the pass's start to the helpers' last offer */
    int huge_rc;         /* 0, or why huge pages stopped: shm_huge's -errno; -ECANCELED: turned off (no_huge,
                          * SLUICE_NO_HUGE_PAGES) */
    uint64_t chunk_bytes; /* bytes of rows per read (whole rows) */
    unsigned depth;      /* the most reads in flight at once: at most params.depth, 16 while chunks go through
                          * staging, 1 with pread(2) */
    uint64_t claim_ns;   /* step 1 */
    uint64_t total_ns;   /* the whole pass */
};

/* Called between reads and between slices of claims (at least every 200
 * ms while the pass sleeps on the disk: not a clock); nonzero stops the
 * pass with -EPIPE. */
typedef int (*warm_idle_fn)(void *arg);

/* True when the pass applies: rows in host memory, or on the device and
 * opened in this process, a slot for every row of src, and no node but
 * the rows of src (n_nodes == rows, as gnnlaunch makes every buffer). */
bool warm_fits(const struct featbuf *fb, const struct extract_source *src);

/* The same for a hot set of n rows (warm_params.nodes): rows in host
 * memory or opened on the device, n <= the buffer's slots, no node but
 * the rows of src. */
bool warm_fits_set(const struct featbuf *fb, const struct extract_source *src, uint64_t n);

/* Runs the pass over src into fb (protocol above). Blocks until every
 * chunk landed or the pass failed. Statistics in *st (filled on errors
 * too). Rows on the device: every chunk lands in staging and goes up
 * through the CUDA row sink (stages/sink.h), which makes the device
 * current on the calling thread; -ENODEV when no sink can reach the rows
 * (a build without CUDA, or the rows not opened). */
int warm_fill(const struct extract_source *src, struct featbuf *fb, const struct warm_params *p, warm_idle_fn idle,
              void *arg, struct warm_stats *st, char *err, size_t errlen);

#endif
