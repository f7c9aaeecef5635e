/* extract_int.h - private to the extraction engine's files: extract.c (the
 * engine and its read bookkeeping), extract_source.c (the features file),
 * and one file per I/O back end: extract_uring.c, extract_pread.c,
 * extract_mmap.c. The protocol is at the top of extract.c.
 *
 * Staging entries. An engine's staging memory is cut into `depth` entries
 * of src->entry_bytes (EXTRACT_IO_MMAP has no staging but uses the entries'
 * bookkeeping all the same). An entry is in exactly one of three places:
 *   spare      on xs->spare, free for the next load;
 *   reading    r->busy: a read into it is in flight or being handled;
 *   in the sink  r->in_sink: its row was handed to the row sink, which may
 *              still read the entry's bytes (stages/sink.h); it comes back
 *              to spare only when extract_reap sees the sink report it.
 * A back end takes entries from spare only, so a row's staging bytes are
 * never overwritten while the sink still copies them. */
#ifndef SLUICE_STAGES_EXTRACT_INT_H
#define SLUICE_STAGES_EXTRACT_INT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/util.h"
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
    uint64_t start; /* file offset of the extent (aligned) */
    uint32_t len;   /* bytes of the extent */
    uint32_t skip;  /* where the row starts inside it */
    uint32_t need;  /* skip + row_bytes: what must land */
    uint32_t got;   /* bytes landed, a prefix of the extent */
    uint32_t from;  /* start of the request in flight, inside the extent */
    uint32_t again; /* -EAGAIN/-EINTR in a row */
    uint32_t idx;   /* batch position of its load */
    bool busy;      /* a request is in flight (or being handled) */
    bool in_sink;   /* its row is the sink's: the entry is not ours yet */
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
    bool wedged;
    struct row_sink sink;
    struct row_sink_done *done; /* (depth) */
    /* the batch being run */
    const uint64_t *nodes;
    uint32_t *slots;
    int rc; /* its first error */
    char *err;
    size_t errlen;
    void *uring; /* extract_uring.c's state, when the ring is in use */
};

extern const struct xbackend extract_be_pread;
extern const struct xbackend extract_be_mmap;
extern const struct xbackend extract_be_uring;

/* Sets up x's io_uring (x->ring, x->use_uring); 0, or -errno with the
 * reason in why (-ENOSYS: built without liburing). */
int extract_uring_start(struct extractor *x, char *why, size_t whylen);
/* Tears the ring down (if any). */
void extract_uring_free(struct extractor *x);

/* Keeps the batch's first error. */
void SL_PRINTF(3, 4) extract_batch_error(struct extractor *x, int rc, const char *fmt, ...);

static inline unsigned char *extract_entry_buf(const struct extractor *x, uint32_t e)
{
    return x->staging + (size_t)e * x->src->entry_bytes;
}

/* Takes a spare entry and sets it up for the batch's next load. */
uint32_t extract_read_next(struct extractor *x);

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
