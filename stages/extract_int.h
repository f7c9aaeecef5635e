/* extract_int.h - private to the extraction engine's files: extract.c (the
 * engine and its read bookkeeping), extract_source.c (the features file),
 * and one file per I/O back end: extract_uring.c, extract_pread.c,
 * extract_mmap.c (and warm.c, the warm start, for the fault hook). The
 * protocol is at the top of extract.c.
 *
 * Staging entries. An engine has `depth` entries, each the bookkeeping of
 * one read and the staging memory it lands in (r->buf):
 *   private staging (extractor_init): the engine's memory cut into `depth`
 *              pieces of src->entry_bytes, entry e always on piece e;
 *   shared staging (extractor_init_shared): a block of the node's staging
 *              buffer (ipc/staging.h) taken when the read starts - from the
 *              thread's own portion, or borrowed - and put back when the
 *              entry returns to spare. When no block can be had the read
 *              waits for one of the thread's own reads to finish.
 * EXTRACT_IO_MMAP has no staging but uses the entries' bookkeeping all the
 * same. An entry is in exactly one of three places:
 *   spare      on xs->spare, free for the next load (and holding no block);
 *   reading    r->busy: a read into it is in flight or being handled;
 *   in the sink  r->in_sink: its row was handed to the row sink, which may
 *              still read the entry's bytes (stages/sink.h); it comes back
 *              to spare only when extract_reap sees the sink report it.
 * A back end takes entries from spare only, so a row's staging bytes are
 * never overwritten (nor its block given back) while the sink still copies
 * them. */
#ifndef SLUICE_STAGES_EXTRACT_INT_H
#define SLUICE_STAGES_EXTRACT_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/util.h"
#include "ipc/staging.h"
#include "stages/extract.h"
#include "stages/sink.h"

#define STAGING_ALIGN 4096u

/* Announcements: each kind once per process, under its own bit. */
enum {
    ANN_DIRECT = 1u << 0,
    ANN_BUFFERED = 1u << 1,
    ANN_MMAP = 1u << 2,
    ANN_NO_DIRECT = 1u << 3,
    ANN_URING = 1u << 4,
    ANN_PREAD = 1u << 5,
    ANN_NO_FIXED = 1u << 6,
    ANN_FAULT = 1u << 7,
};

void SL_PRINTF(3, 4) extract_announce(const struct extract_source *src, unsigned bit, const char *fmt, ...);

/* SLUICE_FAULT_READ_EIO (extract_source.c reads it when a source opens). */
extern _Atomic uint64_t extract_fault_read_eio;
extern _Atomic uint64_t extract_fault_reads;

/* Counts one completed read; true for the one that must fail. Unset, a
 * completion pays one relaxed load and a predictable branch. */
static inline bool extract_fault_read_fails(void)
{
    uint64_t n = atomic_load_explicit(&extract_fault_read_eio, memory_order_relaxed);
    return n && atomic_fetch_add_explicit(&extract_fault_reads, 1, memory_order_relaxed) + 1 == n;
}

struct xread {
    uint64_t start;     /* file offset of the extent (aligned) */
    uint32_t len;       /* bytes of the extent */
    uint32_t skip;      /* where the row starts inside it */
    uint32_t need;      /* skip + row_bytes: what must land */
    uint32_t got;       /* bytes landed, a prefix of the extent */
    uint32_t from;      /* start of the request in flight, inside the extent */
    uint32_t again;     /* -EAGAIN/-EINTR in a row */
    uint32_t idx;       /* batch position of its load */
    uint32_t block;     /* its block of shared staging, or STAGING_NONE */
    unsigned char *buf; /* where the extent lands (NULL for mmap) */
    bool busy;          /* a request is in flight (or being handled) */
    bool in_sink;       /* its row is the sink's: the entry is not ours yet */
};

/* Reads every listed load of the batch (xs->loads[xs->next ...]), taking
 * entries from spare; may return with rows still in the sink. */
struct xbackend {
    void (*loads)(struct extractor *x);
};

struct xstate {
    const struct xbackend *be;
    struct xread *rd; /* (depth) */
    uint32_t *spare;  /* (depth) entries with no read */
    uint32_t nspare;
    uint32_t nsink;        /* entries in the sink */
    uint32_t *loads;       /* (cap) batch positions answered FEATBUF_LOAD */
    uint32_t nloads, next; /* this batch's loads, and how many were started */
    uint32_t stg_seq;      /* the own portion's sequence before the last get (extract_wait_staging) */
    bool wedged;
    struct row_sink sink;
    struct row_sink_done *done; /* (depth) */
    /* the batch being run */
    const uint64_t *nodes;
    uint32_t *slots;
    const void *const *rows; /* extractor_run_rows: where each node's row is in memory (extract_be_memory) */
    int rc; /* its first error */
    char *err;
    size_t errlen;
    void *uring; /* extract_uring.c's state, when the ring is in use */
};

extern const struct xbackend extract_be_pread;
extern const struct xbackend extract_be_mmap;
extern const struct xbackend extract_be_uring;
extern const struct xbackend extract_be_memory; /* extractor_run_rows: rows already in memory (extract_memory.c) */

/* Sets up x's io_uring (x->ring, x->use_uring); 0, or -errno with the
 * reason in why (-ENOSYS: built without liburing). */
int extract_uring_start(struct extractor *x, char *why, size_t whylen);
/* Tears the ring down (if any). */
void extract_uring_free(struct extractor *x);

/* Keeps the batch's first error. */
void SL_PRINTF(3, 4) extract_batch_error(struct extractor *x, int rc, const char *fmt, ...);

static inline unsigned char *extract_entry_buf(const struct extractor *x, uint32_t e)
{
    return ((struct xstate *)x->inflight)->rd[e].buf;
}

/* The staging memory this engine owns for good (what its ring registers):
 * all of private staging, or its own portion of shared staging. */
void extract_own_staging(const struct extractor *x, void **base, size_t *len);

#define EXTRACT_NO_ENTRY UINT32_MAX

/* Takes a spare entry (there must be one) and its staging, and sets it up
 * for the batch's next load. EXTRACT_NO_ENTRY when shared staging has no
 * block for it now (nothing taken; the batch's error is set if the
 * staging buffer was closed). */
uint32_t extract_read_next(struct extractor *x);

/* With no read in flight and no row in the sink, the next load still has
 * no staging block (rules of ipc/staging.h say a thread holding none of its
 * own blocks always gets one, so this should not last): sleeps until a
 * block comes home to the thread's portion, at most 200 ms, then calls the
 * idle hook. Errors (closed staging, the hook's) become the batch's. */
void extract_wait_staging(struct extractor *x);

enum { READ_DONE = 0, READ_AGAIN = 1 };

/* Ends entry e's read in failure: the load fails, the error is kept, the
 * entry goes back to spare. READ_DONE. */
int extract_read_failed(struct extractor *x, uint32_t e, int rc, bool eof);

/* One request of entry e finished with res (bytes or -errno). READ_AGAIN:
 * issue the request described by the entry again (from r->from).
 * READ_DONE: the entry's row went to the sink, or its load failed. */
int extract_read_complete(struct extractor *x, uint32_t e, int res);

/* Entry e's row is at src (in e's staging, or the mapping): hands it to
 * the sink (or fails the load if the sink refuses it). */
void extract_row_landed(struct extractor *x, uint32_t e, const void *src);

/* Takes back what the sink has finished (entries to spare, errors kept);
 * with wait and rows in the sink, sleeps until at least one is. */
void extract_reap(struct extractor *x, bool wait);

#endif
