/* extract_uring.c - the io_uring back end of the extraction engine
 * (protocol at the top of extract.c, entries in extract_int.h): one
 * long-lived ring per engine, `depth` reads kept in flight, the staging
 * memory the engine owns (its private staging, or its portion of shared
 * staging) and the file registered when the kernel lets us (fixed-buffer,
 * fixed-file reads; a borrowed block is read into without), completions
 * reaped in batches. With shared staging, fewer reads than `depth` are in
 * flight while no staging block can be had; each completion gives one back.
 *
 * An entry whose read completes hands its row to the row sink; as soon as
 * the sink gives the entry back (the host sink: at once) it takes the
 * batch's next row. Prepared requests go to the kernel SUBMIT_BATCH at a
 * time, and with each io_uring_submit_and_wait, which sleeps for at least
 * one completion. When no read is in flight but rows are still in the sink
 * and loads remain, the engine sleeps on the sink instead.
 *
 * Without liburing extract_uring_start answers -ENOSYS and the engine uses
 * pread(2). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "stages/extract_int.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>

#define SUBMIT_BATCH 4u /* io_uring requests handed to the kernel per io_uring_submit */

struct xuring {
    struct io_uring_cqe **cqes; /* (depth) */
    bool fixed_buf, fixed_file;
    unsigned char *fixed_base; /* what is registered: the staging the engine owns */
    size_t fixed_len;
};

/* Queues entry e's request (submitted by the next io_uring_submit*).
 * false if the ring had no room (cannot happen: requests prepared or in
 * flight never exceed depth <= sq entries); the load has then failed. */
static bool uring_queue(struct extractor *x, uint32_t e)
{
    struct xstate *xs = x->inflight;
    struct xuring *u = xs->uring;
    struct io_uring *ring = x->ring;
    struct xread *r = &xs->rd[e];
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) {
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    if (!sqe) {
        extract_read_failed(x, e, -EBUSY, false);
        return false;
    }
    void *buf = extract_entry_buf(x, e) + r->from;
    unsigned len = r->len - r->from;
    uint64_t off = r->start + r->from;
    int fd = u->fixed_file ? 0 : x->src->fd;
    /* a borrowed block lies outside what the ring registered */
    if (u->fixed_buf && (unsigned char *)buf >= u->fixed_base &&
        (unsigned char *)buf + len <= u->fixed_base + u->fixed_len)
        io_uring_prep_read_fixed(sqe, fd, buf, len, off, 0);
    else
        io_uring_prep_read(sqe, fd, buf, len, off);
    if (u->fixed_file)
        sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data64(sqe, e);
    return true;
}

/* Queues entry e, submitting every SUBMIT_BATCH requests. */
static void uring_queue_counted(struct extractor *x, uint32_t e, unsigned *queued)
{
    if (!uring_queue(x, e))
        return;
    if (++*queued == SUBMIT_BATCH) {
        io_uring_submit(x->ring);
        *queued = 0;
    }
}

/* Every spare entry takes the batch's next row, while staging has room. */
static void uring_fill(struct extractor *x, unsigned *queued)
{
    struct xstate *xs = x->inflight;
    while (xs->nspare && xs->next < xs->nloads && !xs->rc) {
        uint32_t e = extract_read_next(x);
        if (e == EXTRACT_NO_ENTRY)
            return; /* no staging block now: one comes back with a completion */
        uring_queue_counted(x, e, queued);
    }
}

/* Submitting a few at a time as completions are handled, rather than all
 * of a round at once, keeps the device busy evenly; measured in
 * bench/results/extractor-fio-2026-11-22.md. */
static void uring_loads(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    struct xuring *u = xs->uring;
    struct io_uring *ring = x->ring;
    unsigned queued = 0; /* prepared since the last submission */
    for (;;) {
        uring_fill(x, &queued);
        if (xs->nspare + xs->nsink == x->depth) { /* no read in flight */
            if (xs->next >= xs->nloads || xs->rc)
                return; /* extractor_run drains the sink */
            if (xs->nsink)
                extract_reap(x, true);
            else
                extract_wait_staging(x); /* holds no block, yet got none */
            continue;
        }
        int rc = io_uring_submit_and_wait(ring, 1);
        queued = 0;
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            /* the ring is unusable with reads in flight: give their loads up */
            extract_batch_error(x, rc, "%s: io_uring_submit_and_wait failed: %s", x->src->path, strerror(-rc));
            xs->wedged = true; /* first: their staging must not be handed out again */
            for (uint32_t e = 0; e < x->depth; e++)
                if (xs->rd[e].busy)
                    extract_read_failed(x, e, rc, false);
            return;
        }
        unsigned n = io_uring_peek_batch_cqe(ring, u->cqes, x->depth);
        for (unsigned i = 0; i < n; i++) {
            uint32_t e = (uint32_t)io_uring_cqe_get_data64(u->cqes[i]);
            if (extract_read_complete(x, e, u->cqes[i]->res) == READ_AGAIN) {
                uring_queue_counted(x, e, &queued);
                continue;
            }
            /* the entry is in the sink (or failed): what the sink gives
             * back takes the next rows at once */
            extract_reap(x, false);
            uring_fill(x, &queued);
        }
        io_uring_cq_advance(ring, n);
    }
}

const struct xbackend extract_be_uring = {uring_loads};

int extract_uring_start(struct extractor *x, char *why, size_t whylen)
{
    struct xstate *xs = x->inflight;
    struct io_uring *ring = calloc(1, sizeof *ring);
    struct xuring *u = calloc(1, sizeof *u);
    if (u)
        u->cqes = calloc(x->depth, sizeof *u->cqes);
    if (!ring || !u || !u->cqes) {
        free(ring);
        if (u)
            free(u->cqes);
        free(u);
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    struct io_uring_params p = {0};
#ifdef IORING_SETUP_COOP_TASKRUN
    p.flags = IORING_SETUP_COOP_TASKRUN; /* no IPI to run completions: this thread reaps them itself */
#endif
    int rc = io_uring_queue_init_params(x->depth, ring, &p);
    if (rc == -EINVAL && p.flags) {
        memset(&p, 0, sizeof p);
        rc = io_uring_queue_init_params(x->depth, ring, &p);
    }
    if (rc) {
        free(ring);
        free(u->cqes);
        free(u);
        snprintf(why, whylen, "io_uring_queue_init: %s", strerror(-rc));
        return rc;
    }
    x->ring = ring;
    x->use_uring = true;
    xs->uring = u;
    struct iovec iov;
    extract_own_staging(x, &iov.iov_base, &iov.iov_len);
    u->fixed_base = iov.iov_base;
    u->fixed_len = iov.iov_len;
    rc = io_uring_register_buffers(ring, &iov, 1);
    u->fixed_buf = rc == 0;
    if (rc)
        extract_announce(x->src, ANN_NO_FIXED,
                         "io_uring cannot register the %zu-byte staging buffer (%s); using unregistered reads (raise "
                         "ulimit -l)",
                         iov.iov_len, strerror(-rc));
    u->fixed_file = io_uring_register_files(ring, &x->src->fd, 1) == 0;
    extract_announce(x->src, ANN_URING, "extracting with io_uring: %u reads in flight per thread, %s buffers, %s file",
                     x->depth, u->fixed_buf ? "registered" : "unregistered",
                     u->fixed_file ? "registered" : "unregistered");
    return 0;
}

void extract_uring_free(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    if (x->ring) {
        io_uring_queue_exit(x->ring);
        free(x->ring);
        x->ring = NULL;
    }
    if (xs && xs->uring) {
        struct xuring *u = xs->uring;
        free(u->cqes);
        free(u);
        xs->uring = NULL;
    }
}
#else
const struct xbackend extract_be_uring = {NULL};

int extract_uring_start(struct extractor *x, char *why, size_t whylen)
{
    (void)x;
    snprintf(why, whylen, "built without liburing");
    return -ENOSYS;
}

void extract_uring_free(struct extractor *x)
{
    (void)x;
}
#endif
