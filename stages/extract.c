/* extract.c - the extraction engine (API and behaviour in extract.h): the
 * batch, the bookkeeping of reads and staging entries, and the hand-off
 * of landed rows to the row sink. The features file is extract_source.c;
 * the I/O back ends are extract_uring.c, extract_pread.c, extract_mmap.c
 * (private declarations and the life of a staging entry: extract_int.h).
 *
 * Protocol of one batch on one engine (one thread; DESIGN.md section 4)
 * ---------------------------------------------------------------------
 * 1. featbuf_acquire_many takes a reference per node and answers HIT,
 *    WAIT or LOAD for each. The LOAD positions are listed in `loads`.
 * 2. The backend reads every listed row. The engine's staging memory is
 *    cut into `depth` entries of src->entry_bytes; an entry serves one read
 *    at a time (struct xread), so at most `depth` reads are in flight.
 *    A read covers the row's extent: [off & ~(A-1), round_up(off + row, A))
 *    with A = src->align (1 for buffered I/O: exactly the row). It may end
 *    in several requests: a short read continues from the last aligned
 *    byte it reached (direct I/O needs aligned offsets, so a few bytes may
 *    be read twice); -EAGAIN / -EINTR repeat the request (AGAIN_MAX times
 *    in a row at most). When the bytes up to the row's end have landed the
 *    row goes to the row sink (stages/sink.h), chosen by where the buffer
 *    keeps its rows: the host sink copies it into its slot, and the next
 *    poll of the sink publishes it with featbuf_loaded(); a CUDA sink will
 *    cudaMemcpyAsync it from registered staging instead. The entry is the
 *    sink's until a poll reports its copy finished; only then does it take
 *    another read. Before step 3 the sink is drained.
 *    A read that makes no progress (0 bytes, or a follow-up that ends
 *    where the last one did) hit the end of the file: the file shrank.
 *    Backends: io_uring (depth reads kept in flight: an entry whose read
 *    completes takes the next row at once; requests are submitted
 *    SUBMIT_BATCH at a time and with each io_uring_submit_and_wait, which
 *    sleeps for at least one completion; every ready completion is reaped
 *    with io_uring_peek_batch_cqe + io_uring_cq_advance; fixed buffer and
 *    fixed file when registration works), pread(2) (one read at a time),
 *    mmap (each row handed to the sink straight from the mapping).
 * 3. featbuf_wait_valid for every WAIT answer, in 200 ms slices with the
 *    idle hook between them.
 *
 * Failure. The first error of a batch is kept (code and message). After
 *   it no new read starts, reads in flight are drained (their rows are
 *   still published if they complete, otherwise their loads fail), the
 *   sink is drained (a copy that fails has its load failed by the sink; a
 *   row the sink refuses is failed here), every load never started is
 *   failed with featbuf_load_failed, step 3 is
 *   skipped, and all n references the batch took are released. So no slot
 *   is left LOADING and the caller holds nothing. If io_uring itself fails
 *   with reads in flight (no way to know when the kernel is done with the
 *   staging memory) the engine is "wedged": their loads are failed, the
 *   batch and every later one fail, and extractor_free leaks the staging
 *   memory rather than hand pages the kernel may still write to malloc
 *   (with shared staging, the blocks it held are never put back).
 *
 * Ownership. The source (fd, mapping) is shared read-only by every thread
 *   of the process. An engine (ring, staging, scratch) belongs to one
 *   thread; only rows of slots it was answered LOAD for are written by it.
 *   Its sink is its own too (one per thread), and a staging entry is
 *   written by a read only while neither a read nor the sink holds it.
 *
 * Announcements go to stderr once per process (extract_source.c). */
#include "stages/extract.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/util.h"
#include "stages/extract_int.h"
#include "stages/featbuf_cuda.h"

#define DEPTH_MAX 4096u
#define AGAIN_MAX 64u     /* -EAGAIN/-EINTR repeats of one request in a row */
#define WAIT_SLICE_MS 200 /* longest sleep between calls of the idle hook */

/* ---- reads and the row sink ------------------------------------------------ */

/* Keeps the batch's first error. */
void extract_batch_error(struct extractor *x, int rc, const char *fmt, ...)
{
    struct xstate *xs = x->inflight;
    if (xs->rc)
        return;
    xs->rc = rc;
    if (xs->err && xs->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(xs->err, xs->errlen, fmt, ap);
        va_end(ap);
    }
}
/* Entry e has no read and no row in the sink: back to spare, and its
 * block of shared staging back to its portion. */
static void entry_spare(struct extractor *x, uint32_t e)
{
    struct xstate *xs = x->inflight;
    struct xread *r = &xs->rd[e];
    r->busy = false;
    if (r->block != STAGING_NONE) {
        if (!xs->wedged) /* else the kernel may still write into it: it stays taken */
            staging_put(x->stg, x->portion, r->block);
        r->block = STAGING_NONE;
        r->buf = NULL;
    }
    xs->spare[xs->nspare++] = e;
}

uint32_t extract_read_next(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    uint32_t e = xs->spare[xs->nspare - 1];
    struct xread *r = &xs->rd[e];
    if (x->stg && s->io != EXTRACT_IO_MMAP && !xs->rows) {
        xs->stg_seq = staging_seq(x->stg, x->portion);
        int rc = staging_get(x->stg, x->portion, STAGING_BORROW, &r->block);
        if (rc == -EPIPE)
            extract_batch_error(x, rc, "the staging buffer was closed (the run is stopping)");
        if (rc)
            return EXTRACT_NO_ENTRY;
        r->buf = staging_block(x->stg, r->block);
    }
    xs->nspare--;
    uint32_t idx = xs->loads[xs->next++];
    uint64_t off = xs->nodes[idx] * s->row_stride, a = s->align;
    r->start = off & ~(a - 1);
    r->len = (uint32_t)(sl_round_up(off + s->row_bytes, a) - r->start);
    r->skip = (uint32_t)(off - r->start);
    r->need = r->skip + (uint32_t)s->row_bytes;
    r->got = r->from = r->again = 0;
    r->idx = idx;
    r->busy = true;
    return e;
}

int extract_read_failed(struct extractor *x, uint32_t e, int rc, bool eof)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    struct xread *r = &xs->rd[e];
    uint64_t node = xs->nodes[r->idx];
    int frc = featbuf_load_failed(x->fb, xs->slots[r->idx]);
    if (eof)
        extract_batch_error(
            x, -EIO,
            "%s: read of node %" PRIu64 " at offset %" PRIu64
            " hit the end of the file after %u of %u bytes: features.bin shrank under us; run gnnprep check",
            s->path, node, node * s->row_stride, r->got, r->need);
    else
        extract_batch_error(x, rc, "%s: read of node %" PRIu64 " at offset %" PRIu64 " failed: %s", s->path, node,
                            node * s->row_stride, strerror(-rc));
    if (frc == -EPIPE)
        xs->rc = -EPIPE;
    entry_spare(x, e);
    return READ_DONE;
}

int extract_read_complete(struct extractor *x, uint32_t e, int res)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    struct xread *r = &xs->rd[e];
    if (extract_fault_read_fails())
        res = -EIO;
    if (res < 0) {
        if ((res == -EAGAIN || res == -EINTR) && r->again < AGAIN_MAX && !xs->rc) {
            r->again++;
            x->st.retries++;
            return READ_AGAIN;
        }
        return extract_read_failed(x, e, res, false);
    }
    x->st.io_ops++;
    x->st.io_bytes += (uint64_t)res;
    uint32_t end = r->from + (uint32_t)res;
    if (end <= r->got) /* nothing new: the file ends before the row does */
        return extract_read_failed(x, e, -EIO, true);
    r->got = end;
    r->again = 0;
    if (r->got < r->need) {
        if (xs->rc)
            return extract_read_failed(x, e, -EIO, false); /* the batch is failing: no follow-ups */
        r->from = r->got & ~(s->align - 1);
        x->st.retries++;
        return READ_AGAIN;
    }
    extract_row_landed(x, e, extract_entry_buf(x, e) + r->skip);
    return READ_DONE;
}

void extract_row_landed(struct extractor *x, uint32_t e, const void *src)
{
    struct xstate *xs = x->inflight;
    struct xread *r = &xs->rd[e];
    uint32_t slot = xs->slots[r->idx];
    struct row_sink_copy c = {.slot = slot, .nrows = 1, .src = src, .row_bytes = (size_t)x->src->row_bytes, .tag = e};
    int rc = row_sink_put(&xs->sink, &c);
    if (rc) { /* nothing started: the load is still ours to fail */
        int frc = featbuf_load_failed(x->fb, slot);
        extract_batch_error(x, rc, "feature buffer: the %s row sink refused node %" PRIu64 " for slot %u: %s",
                            xs->sink.ops->name, xs->nodes[r->idx], slot, strerror(-rc));
        if (frc == -EPIPE)
            xs->rc = -EPIPE;
        entry_spare(x, e);
        return;
    }
    /* entries are spare, in the sink, or reading: this one is still
     * counted as reading, so the others reading are the rest minus one */
    uint32_t reading = x->depth - xs->nspare - xs->nsink - 1;
    x->st.copies++;
    x->st.copies_overlapped += reading > 0;
    r->busy = false;
    r->in_sink = true;
    xs->nsink++;
}

void extract_reap(struct extractor *x, bool wait)
{
    struct xstate *xs = x->inflight;
    uint32_t n = row_sink_poll(&xs->sink, xs->done, x->depth, wait);
    for (uint32_t i = 0; i < n; i++) {
        const struct row_sink_done *d = &xs->done[i];
        uint32_t e = (uint32_t)d->tag;
        uint64_t node = xs->nodes[xs->rd[e].idx];
        if (d->copy_rc)
            extract_batch_error(x, d->copy_rc,
                                "%s: copying node %" PRIu64 " (offset %" PRIu64
                                ") into feature-buffer slot %u failed: %s",
                                x->src->path, node, node * x->src->row_stride, d->slot, strerror(-d->copy_rc));
        else if (d->fb_rc)
            extract_batch_error(x, d->fb_rc, "feature buffer: publishing node %" PRIu64 " in slot %u: %s", node,
                                d->slot, strerror(-d->fb_rc));
        if (d->copy_rc && d->fb_rc == -EPIPE)
            xs->rc = -EPIPE;
        xs->rd[e].in_sink = false;
        xs->nsink--;
        entry_spare(x, e);
    }
    if (x->tick) {
        uint64_t now = sl_now_ns();
        if (now - x->tick_ns >= (uint64_t)EXTRACT_TICK_MS * 1000000u) {
            x->tick_ns = now;
            int irc = x->tick(x->tick_arg, x);
            if (irc)
                extract_batch_error(x, irc, "stopped while reading the batch's rows");
        }
    }
}

void extract_own_staging(const struct extractor *x, void **base, size_t *len)
{
    if (x->stg) {
        staging_portion_span(x->stg, x->portion, base, len);
        return;
    }
    *base = x->staging;
    *len = x->staging_len;
}

void extract_wait_staging(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    uint64_t t0 = sl_now_ns();
    int rc = staging_wait(x->stg, x->portion, xs->stg_seq, WAIT_SLICE_MS);
    x->st.wait_ns += sl_now_ns() - t0;
    if (rc == -EPIPE) {
        extract_batch_error(x, rc, "the staging buffer was closed (the run is stopping)");
        return;
    }
    int irc = rc == -ETIMEDOUT && x->idle ? x->idle(x->idle_arg) : 0;
    if (irc)
        extract_batch_error(x, irc, "stopped while waiting for a staging block");
}

/* Reaps until the sink holds no row of this batch. */
static void drain(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    while (xs->nsink)
        extract_reap(x, true);
}

/* ---- the engine --------------------------------------------------------------- */

/* The staging memory (shared, the caller's or our own) and the reader:
 * io_uring, or pread(2) when that is unavailable. */
static int reader_init(struct extractor *x, void *staging, size_t staging_len, char *err, size_t errlen)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *src = x->src;
    unsigned depth = x->depth;
    int rc;
    size_t need = extract_staging_bytes(src, depth);
    if (x->stg) {
        if (src->entry_bytes > x->stg->block_bytes)
            return sl_errf(err, errlen, -EINVAL,
                           "%s: a read of one row takes up to %" PRIu64
                           " bytes, more than the staging buffer's %" PRIu64
                           "-byte blocks (the launcher sized them for the dataset's row stride); run gnnprep check",
                           src->path, src->entry_bytes, x->stg->block_bytes);
        x->staging = staging_data(x->stg, &x->staging_len);
    } else if (staging) {
        if ((uintptr_t)staging % STAGING_ALIGN || staging_len < need) {
            return sl_errf(err, errlen, -EINVAL,
                           "staging memory: %zu bytes at %p; %u reads need %zu bytes aligned to %u", staging_len,
                           staging, depth, need, STAGING_ALIGN);
        }
        x->staging = staging;
        x->staging_len = staging_len;
    } else {
        x->staging = aligned_alloc(STAGING_ALIGN, need);
        if (!x->staging)
            return sl_errf(err, errlen, -ENOMEM, "no memory for %zu bytes of staging", need);
        memset(x->staging, 0, need);
        x->staging_len = need;
        x->own_staging = true;
    }
    char why[128];
    if (sl_env_on("SLUICE_NO_IO_URING")) {
        snprintf(why, sizeof why, "SLUICE_NO_IO_URING is set");
        rc = -ENOSYS;
    } else {
        rc = extract_uring_start(x, why, sizeof why);
    }
    if (rc) {
        extract_announce(src, ANN_PREAD,
                         "io_uring unavailable (%s); extracting with pread(2), one read at a time per thread", why);
        xs->be = &extract_be_pread;
    } else {
        xs->be = &extract_be_uring;
    }
    return 0;
}

/* extractor_init and extractor_init_shared: staging is private (the
 * caller's memory, or NULL for our own) when stg is NULL. */
static int engine_init(struct extractor *x, const struct extract_source *src, struct featbuf *fb, unsigned depth,
                       void *staging, size_t staging_len, struct staging *stg, uint32_t portion, char *err,
                       size_t errlen)
{
    memset(x, 0, sizeof *x);
    x->src = src;
    x->fb = fb;
    x->batch = FEATBUF_NO_BATCH;
    x->depth = depth;
    x->stg = stg;
    x->portion = portion;
    int rc;
    if (depth < 1 || depth > DEPTH_MAX)
        return sl_errf(err, errlen, -EINVAL, "I/O depth %u is outside 1..%u", depth, DEPTH_MAX);
    if (stg && portion >= stg->portions)
        return sl_errf(err, errlen, -EINVAL, "staging portion %u is outside the staging buffer's %u", portion,
                       stg->portions);
    const struct row_sink_ops *sink = row_sink_pick(fb, err, errlen); /* by where the rows live */
    if (!sink)
        return -EINVAL;
    if (fb->row_bytes < src->row_bytes)
        return sl_errf(err, errlen, -EINVAL, "feature buffer rows hold %zu bytes, %s's rows %" PRIu64, fb->row_bytes,
                       src->path, src->row_bytes);
    if (fb->n_nodes < src->rows)
        return sl_errf(err, errlen, -EINVAL, "feature buffer maps %" PRIu64 " nodes, %s has %" PRIu64 " rows",
                       fb->n_nodes, src->path, src->rows);
    struct xstate *xs = calloc(1, sizeof *xs);
    if (!xs)
        return sl_errf(err, errlen, -ENOMEM, "out of memory");
    x->inflight = xs;
    xs->rd = calloc(depth, sizeof *xs->rd);
    xs->spare = calloc(depth, sizeof *xs->spare);
    xs->done = calloc(depth, sizeof *xs->done);
    if (!xs->rd || !xs->spare || !xs->done) {
        rc = sl_errf(err, errlen, -ENOMEM, "out of memory");
        goto err;
    }
    for (uint32_t e = 0; e < depth; e++) {
        xs->spare[e] = depth - 1 - e;
        xs->rd[e].block = STAGING_NONE;
    }
    xs->nspare = depth;
    if (src->io == EXTRACT_IO_MMAP)
        xs->be = &extract_be_mmap;
    else if ((rc = reader_init(x, staging, staging_len, err, errlen)) != 0)
        goto err;
    if (!x->stg && x->staging) /* private staging: entry e always reads into piece e */
        for (uint32_t e = 0; e < depth; e++)
            xs->rd[e].buf = x->staging + (size_t)e * src->entry_bytes;
    rc = row_sink_init(&xs->sink, sink, fb, x->staging, x->staging_len, depth, err, errlen);
    if (rc)
        goto err;
    return 0;
err:
    extractor_free(x);
    return rc;
}

int extractor_init(struct extractor *x, const struct extract_source *src, struct featbuf *fb, unsigned depth,
                   void *staging, size_t staging_len, char *err, size_t errlen)
{
    return engine_init(x, src, fb, depth, staging, staging_len, NULL, 0, err, errlen);
}

int extractor_init_shared(struct extractor *x, const struct extract_source *src, struct featbuf *fb, unsigned depth,
                          struct staging *stg, uint32_t portion, char *err, size_t errlen)
{
    if (!stg)
        return sl_errf(err, errlen, -EINVAL, "no staging buffer");
    return engine_init(x, src, fb, depth, NULL, 0, stg, portion, err, errlen);
}

void extractor_free(struct extractor *x)
{
    if (!x)
        return;
    struct xstate *xs = x->inflight;
    bool wedged = xs && xs->wedged;
    if (xs)
        row_sink_free(&xs->sink); /* empty between batches */
    extract_uring_free(x);
    if (x->own_staging && !wedged)
        free(x->staging);
    if (xs) {
        free(xs->rd);
        free(xs->spare);
        free(xs->done);
        free(xs->loads);
        free(xs);
    }
    free(x->action);
    memset(x, 0, sizeof *x);
}

int extractor_set_sink(struct extractor *x, const struct row_sink_ops *ops, char *err, size_t errlen)
{
    struct xstate *xs = x->inflight;
    struct row_sink s;
    int rc = row_sink_init(&s, ops, x->fb, x->staging, x->staging_len, x->depth, err, errlen);
    if (rc)
        return rc;
    row_sink_free(&xs->sink); /* empty between batches */
    xs->sink = s;
    return 0;
}

static int grow(struct extractor *x, uint32_t n, char *err, size_t errlen)
{
    struct xstate *xs = x->inflight;
    if (n <= x->cap)
        return 0;
    uint8_t *a = realloc(x->action, n);
    if (a)
        x->action = a;
    uint32_t *l = realloc(xs->loads, (size_t)n * sizeof *l);
    if (l)
        xs->loads = l;
    if (!a || !l)
        return sl_errf(err, errlen, -ENOMEM, "no memory for a batch of %u nodes", n);
    x->cap = n;
    return 0;
}

/* Step 1: references on every node, waiting for room while the buffer is
 * full. Nothing is held on error. */
static int acquire(struct extractor *x, const uint64_t *nodes, uint32_t n, uint32_t *slots, char *err, size_t errlen)
{
    struct featbuf *fb = x->fb;
    uint32_t seq = featbuf_standby_seq(fb);
    int rc;
    while ((rc = featbuf_acquire_batch(fb, x->batch, nodes, n, slots, x->action)) == -EAGAIN) {
        do {
            uint64_t t0 = sl_now_ns();
            rc = featbuf_wait_standby(fb, seq, WAIT_SLICE_MS);
            x->st.wait_ns += sl_now_ns() - t0;
            if (rc == -ETIMEDOUT && x->idle) {
                int irc = x->idle(x->idle_arg);
                if (irc)
                    return sl_errf(err, errlen, irc, "stopped while waiting for room for %u rows in the feature buffer",
                                   n);
            }
        } while (rc == -ETIMEDOUT);
        if (rc)
            break;
        seq = featbuf_standby_seq(fb);
    }
    if (rc == -EPIPE)
        return sl_errf(err, errlen, rc, "the feature buffer is broken (the run is stopping)");
    if (rc)
        return sl_errf(err, errlen, rc, "feature buffer: acquiring %u rows: %s", n, strerror(-rc));
    return 0;
}

/* Step 3: waits for a row another extractor (or this batch) loads. */
static void wait_row(struct extractor *x, uint32_t i)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    uint64_t node = xs->nodes[i];
    for (;;) {
        uint64_t t0 = sl_now_ns();
        int rc = featbuf_wait_valid(x->fb, xs->slots[i], WAIT_SLICE_MS);
        x->st.wait_ns += sl_now_ns() - t0;
        if (rc == 0)
            return;
        if (rc == -ETIMEDOUT) {
            int irc = x->idle ? x->idle(x->idle_arg) : 0;
            if (irc) {
                extract_batch_error(x, irc, "stopped while waiting for node %" PRIu64 ", which another extractor reads",
                                    node);
                return;
            }
            continue;
        }
        if (rc == -EIO)
            extract_batch_error(x, -EIO,
                                "%s: node %" PRIu64 " at offset %" PRIu64 ": the extractor that was reading it failed",
                                s->path, node, node * s->row_stride);
        else if (rc == -EPIPE)
            extract_batch_error(x, rc, "the feature buffer is broken (the run is stopping)");
        else
            extract_batch_error(x, rc, "feature buffer: waiting for node %" PRIu64 ": %s", node, strerror(-rc));
        return;
    }
}

static int run_batch(struct extractor *x, const uint64_t *nodes, uint32_t n, const void *const *rows, uint32_t *slots,
                     char *err, size_t errlen);

int extractor_run(struct extractor *x, const uint64_t *nodes, uint32_t n, uint32_t *slots, char *err, size_t errlen)
{
    return run_batch(x, nodes, n, NULL, slots, err, errlen);
}

int extractor_run_rows(struct extractor *x, const uint64_t *nodes, uint32_t n, const void *const *rows,
                       uint32_t *slots, char *err, size_t errlen)
{
    return run_batch(x, nodes, n, rows, slots, err, errlen);
}

static int run_batch(struct extractor *x, const uint64_t *nodes, uint32_t n, const void *const *rows, uint32_t *slots,
                     char *err, size_t errlen)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    if (err && errlen)
        err[0] = '\0';
    if (xs->wedged)
        return sl_errf(err, errlen, -EIO, "%s: this extractor's io_uring failed earlier; it cannot read any more",
                       s->path);
    if (n == 0)
        return 0;
    for (uint32_t i = 0; i < n; i++)
        if (nodes[i] >= s->rows)
            return sl_errf(err, errlen, -EINVAL, "node %" PRIu64 " is out of range: %s has %" PRIu64 " rows", nodes[i],
                           s->path, s->rows);
    x->unreferenced = false;
    int rc = featbuf_lookup_resident(x->fb, nodes, n, slots);
    if (rc < 0)
        return sl_errf(err, errlen, rc, "the feature buffer is broken (the run is stopping)");
    if (rc == 1) { /* every row is in for good: no references, nothing to read */
        x->unreferenced = true;
        x->st.rows += n;
        x->st.hits += n;
        x->st.batches++;
        return 0;
    }
    rc = grow(x, n, err, errlen);
    if (rc)
        return rc;
    rc = acquire(x, nodes, n, slots, err, errlen);
    if (rc)
        return rc;

    xs->nodes = nodes;
    xs->slots = slots;
    xs->rows = rows;
    xs->rc = 0;
    xs->err = err;
    xs->errlen = errlen;
    xs->nloads = xs->next = 0;
    uint32_t nwait = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (x->action[i] == FEATBUF_LOAD)
            xs->loads[xs->nloads++] = i;
        else if (x->action[i] == FEATBUF_WAIT)
            nwait++;
    }
    x->st.rows += n;
    x->st.loads += xs->nloads;
    x->st.waits += nwait;
    x->st.hits += n - xs->nloads - nwait;

    if (xs->nloads) {
        (rows ? &extract_be_memory : xs->be)->loads(x);
        if (x->stg)
            staging_idle(x->stg, x->portion); /* no more reads to start: our blocks may be lent */
        drain(x);                             /* every load finished before waiting on others' rows */
    }
    for (uint32_t k = xs->next; k < xs->nloads; k++) /* never started: the batch failed first */
        featbuf_load_failed(x->fb, slots[xs->loads[k]]);
    for (uint32_t i = 0; i < n && nwait && !xs->rc; i++)
        if (x->action[i] == FEATBUF_WAIT)
            wait_row(x, i);

    rc = xs->rc;
    xs->nodes = NULL;
    xs->slots = NULL;
    xs->rows = NULL;
    xs->err = NULL;
    if (rc) {
        featbuf_release_many(x->fb, slots, n);
        return rc;
    }
    x->st.batches++;
    return 0;
}

int extractor_use_device(struct featbuf_cuda *dev, struct featbuf *fb, int device, int timeout_ms, extract_idle_fn idle,
                         void *arg, char *err, size_t errlen)
{
#ifdef SLUICE_HAVE_CUDA
    return featbuf_cuda_import(dev, fb, device, timeout_ms, idle, arg, err, errlen);
#else
    memset(dev, 0, sizeof *dev);
    (void)fb;
    (void)device;
    (void)timeout_ms;
    (void)idle;
    (void)arg;
    return sl_errf(err, errlen, -ENOTSUP,
                   "this rank keeps its feature rows on a GPU, and this gnn-extractor was built without CUDA; rebuild "
                   "with the CUDA toolkit (SLUICE_CUDA=ON) or run on the CPU (gnnlaunch --cpu)");
#endif
}

void extractor_unuse_device(struct featbuf_cuda *dev)
{
#ifdef SLUICE_HAVE_CUDA
    featbuf_cuda_unimport(dev);
#else
    (void)dev;
#endif
}

void extract_stats_add(struct extract_stats *dst, const struct extract_stats *src)
{
    dst->batches += src->batches;
    dst->rows += src->rows;
    dst->hits += src->hits;
    dst->waits += src->waits;
    dst->loads += src->loads;
    dst->io_ops += src->io_ops;
    dst->io_bytes += src->io_bytes;
    dst->retries += src->retries;
    dst->copies += src->copies;
    dst->copies_overlapped += src->copies_overlapped;
    dst->wait_ns += src->wait_ns;
}
