/* sink.h - the row sink (DESIGN.md section 10): where an extractor thread's
 * completed read goes. A read lands in the thread's staging memory; the
 * sink copies the row from there into its feature-buffer slot and
 * publishes the slot (featbuf_loaded) once the copy has finished. Variants,
 * one file each behind struct row_sink_ops:
 *   host  (sink_host.c)  rows in the feature buffer's shared memory: the
 *                        copy is a memcpy done when it is put, and the row
 *                        is published when it is polled;
 *   cuda  (sink_cuda.c)  rows on the device (featbuf params.rows_on_device:
 *                        featbuf_row() is NULL, slot i is row i of the
 *                        device array, fb->dev_rows in this process once
 *                        featbuf_cuda_import opened it): cudaMemcpy2DAsync
 *                        (one call for a run of rows) from staging that is
 *                        registered once per process, on the thread's
 *                        stream, one event per copy, finished when
 *                        cudaEventQuery says so; never a device-wide sync.
 *                        Built only with CUDA.
 *
 * Contract (for the caller, an extractor thread, and for every variant):
 *   Copies. row_sink_put(c) starts copying c->nrows rows of c->row_bytes
 *     bytes from c->src (rows c->src_pitch apart) into slots c->slot ..
 *     c->slot + c->nrows - 1. Each of those must be a FEATBUF_LOAD the
 *     caller holds and has not finished. On 0 the sink owns finishing them:
 *     the caller must not call featbuf_loaded / featbuf_load_failed on them
 *     nor touch their rows. On an error nothing was started: the staging
 *     bytes are the caller's again at once and the loads are still the
 *     caller's to finish (normally featbuf_load_failed).
 *   Staging. From a successful put until row_sink_poll reports the copy's
 *     tag, the copy may still read c->src: the caller must not overwrite
 *     those bytes (nor start a read into them). A reported tag hands them
 *     back. The host sink has copied by the time put returns, so its tags
 *     come back on the next poll, with or without waiting.
 *   Publishing. row_sink_poll reports finished copies and, before it
 *     returns, publishes their rows: featbuf_loaded for every row of a
 *     copy that succeeded, featbuf_load_failed for every row of one that
 *     failed (its waiters then see -EIO). A row is never published before
 *     its copy has finished, so no reader can see a half-copied row.
 *   Ordering. Copies finish, are reported and are published in put order
 *     (one queue, like one CUDA stream); each tag is reported exactly once.
 *   Draining. Every put copy must be polled before the caller waits on a
 *     row of the buffer (featbuf.h: a loader finishes its loads before it
 *     waits): poll with wait = true until row_sink_pending() is 0.
 *     row_sink_free drains what is left the same way, so no slot is ever
 *     left LOADING by a sink.
 *   Errors. put: -EINVAL (a slot out of range, no rows, row_bytes 0 or
 *     more than the buffer's rows, src NULL), -EBUSY (cap copies
 *     outstanding: poll first), or the variant's -errno. A copy that fails
 *     after put is reported with copy_rc (its rows already failed); fb_rc
 *     carries the first error the feature buffer answered (-EPIPE: broken).
 *     A variant that loses its device fails fast (CUDA_CHECK), as gpu/
 *     wrappers do, rather than report a copy whose bytes may still be read.
 *   Threads. One sink per extractor thread, used by that thread only; the
 *     feature-buffer calls it makes are the only shared state.
 *
 * Test hook: SLUICE_FAULT_COPY_EIO=N in the environment when a sink is
 * initialised makes the Nth copy that sink finishes fail with -EIO (its
 * rows failed, copy_rc -EIO) as a failed device copy would; announced on
 * stderr once per process. */
#ifndef SLUICE_STAGES_SINK_H
#define SLUICE_STAGES_SINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "stages/featbuf.h"

/* One copy: nrows rows into adjacent slots. */
struct row_sink_copy {
    uint32_t slot;    /* first destination slot */
    uint32_t nrows;   /* >= 1: slots slot .. slot + nrows - 1 */
    const void *src;  /* the first row's bytes (in staging, or a mapping) */
    size_t src_pitch; /* bytes between rows at src (read when nrows > 1) */
    size_t row_bytes; /* bytes of each row: 1 .. fb->row_bytes */
    uint64_t tag;     /* the caller's; reported back when the copy is done */
};

/* A finished copy, as row_sink_poll reports it (its rows are published). */
struct row_sink_done {
    uint64_t tag;
    uint32_t slot, nrows;
    int copy_rc; /* 0, or the copy's -errno: every row was failed */
    int fb_rc;   /* 0, or the first error of featbuf_loaded / _load_failed */
};

struct row_sink;

/* A variant. The generic layer (sink.c) checks arguments, keeps the queue
 * of outstanding copies (s->q, s->head, s->count) and publishes; a variant
 * only copies. */
struct row_sink_ops {
    const char *name; /* "host", "cuda" */
    /* s->fb, s->staging, s->staging_len and s->cap are set: prepare the
     * variant's state in s->impl. 0 or -errno with a message (then it
     * has freed whatever it took: ops->free is not called). */
    int (*init)(struct row_sink *s, char *err, size_t errlen);
    /* Starts copy c, queued at position pos (0 .. cap-1) once this returns
     * 0. Never waits for other copies. -errno: nothing started. */
    int (*start)(struct row_sink *s, uint32_t pos, const struct row_sink_copy *c);
    /* How many of the oldest outstanding copies (positions s->head,
     * s->head + 1, ... modulo cap; s->count >= max >= 1 of them) have
     * finished, counting from the oldest and stopping at the first that has
     * not; their results (0 or -errno) in rc[0 ..]. With wait, blocks until
     * at least the oldest has finished. */
    uint32_t (*finished)(struct row_sink *s, uint32_t max, bool wait, int *rc);
    /* Releases s->impl; no copy is outstanding. */
    void (*free)(struct row_sink *s);
};

struct row_sink {
    const struct row_sink_ops *ops;
    struct featbuf *fb;
    void *staging; /* the region copies read from (a device sink registers
                    * it); NULL when rows come from elsewhere (mmap) */
    size_t staging_len;
    uint32_t cap;            /* most copies outstanding at once */
    uint32_t head, count;    /* the queue of outstanding copies */
    struct row_sink_copy *q; /* (cap) */
    int *rc;                 /* (cap) scratch for ops->finished */
    uint64_t finished;       /* copies finished so far */
    uint64_t fault_at;       /* SLUICE_FAULT_COPY_EIO, 0 when unset */
    void *impl;              /* the variant's */
};

extern const struct row_sink_ops row_sink_host;
extern const struct row_sink_ops row_sink_cuda; /* in a build with CUDA (SLUICE_HAVE_CUDA) */

/* CUDA builds, for tests: how many staging regions this process has
 * registered (cudaHostRegister) for its CUDA sinks; each once, however
 * many sinks copy from it, until the last of them is freed. */
unsigned row_sink_cuda_registered(void);

/* The sink for fb: the host sink for rows in shared memory; for rows on
 * the device the CUDA sink, once this process has opened them
 * (fb->dev_rows). NULL with a message when it cannot be had (no CUDA in
 * this build, or the rows not opened). */
const struct row_sink_ops *row_sink_pick(const struct featbuf *fb, char *err, size_t errlen);

/* Prepares s (one extractor thread's) with ops over fb, copies reading
 * from staging (may be NULL), at most cap (>= 1) outstanding. 0; -EINVAL;
 * -ENOMEM; or the variant's error. */
int row_sink_init(struct row_sink *s, const struct row_sink_ops *ops, struct featbuf *fb, void *staging,
                  size_t staging_len, uint32_t cap, char *err, size_t errlen);

/* Drains every outstanding copy (publishing it) and frees. Accepts NULL
 * and zeroed or half-built sinks. */
void row_sink_free(struct row_sink *s);

/* Starts one copy (see the contract). Never blocks. */
int row_sink_put(struct row_sink *s, const struct row_sink_copy *c);

/* Reports up to max finished copies, oldest first, into done and publishes
 * their rows; returns how many. With wait and a copy outstanding, blocks
 * until at least one has finished; 0 only when none is outstanding (or
 * none has finished, without wait). */
uint32_t row_sink_poll(struct row_sink *s, struct row_sink_done *done, uint32_t max, bool wait);

/* Copies put and not yet reported. */
static inline uint32_t row_sink_pending(const struct row_sink *s)
{
    return s->count;
}

#endif
