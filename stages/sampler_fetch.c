/* sampler_fetch.c - a sampling thread's direct reads of uncached
 * in-neighbour lists (protocol in sampler_fetch.h). */
#include "stages/sampler_fetch.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/util.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#endif

/* One read: the aligned span [off, off + len) of indices.bin into dst, of
 * which the first `need` bytes hold the list (the rest is alignment). */
struct fread {
    uint64_t off;
    uint64_t len, need, done;
    unsigned char *dst;
};

/* One round: the destinations it covers, where their lists are, its reads. */
struct round {
    unsigned char *buf; /* its half of the thread's buffer */
    const void **lists; /* (SAMPLER_FETCH_DSTS) */
    struct fread *rd;   /* (SAMPLER_FETCH_DSTS) */
    uint32_t ndst, nr;
    uint32_t next;     /* reads handed to the kernel so far */
    uint32_t complete; /* reads finished */
    uint64_t bytes;
};

struct sampler_fetch {
    const struct sampler_topo *t;
    uint64_t align; /* t->read_align: the reads' offset and length granule */
    size_t es;          /* bytes per id */
    unsigned char *buf; /* (2 x half) SAMPLER_IO_ALIGN-aligned */
    size_t half;
    struct round r[2];
    unsigned head, count; /* the oldest round started and not yet waited for; rounds outstanding (0..2) */
    uint32_t max_reads;   /* per round */
    uint32_t inflight;
    int failed;
#ifdef SLUICE_HAVE_URING
    struct io_uring ring;
    struct io_uring_cqe *cqes[SAMPLER_FETCH_DEPTH];
#endif
    bool uring;
};

int sampler_fetch_init(struct sampler_fetch **out, const struct sampler_topo *t, size_t bytes, uint32_t max_reads,
                       char *err, size_t errlen)
{
    *out = NULL;
    struct sampler_fetch *f = calloc(1, sizeof *f);
    if (!f)
        return sl_errf(err, errlen, -ENOMEM, "sampler: no memory for a topology reader");
    f->t = t;
    f->max_reads = max_reads ? max_reads : UINT32_MAX;
    f->es = t->indices_u64 ? 8 : 4;
    f->align = t->read_align ? t->read_align : SAMPLER_IO_ALIGN;
    /* each round's half holds the longest list's aligned span at least */
    uint64_t span = sl_round_up(t->max_in_degree * f->es, SAMPLER_IO_ALIGN) + SAMPLER_IO_ALIGN;
    f->half = (size_t)sl_round_up(SL_MAX((uint64_t)bytes / 2, span), SAMPLER_IO_ALIGN);
    f->buf = aligned_alloc(SAMPLER_IO_ALIGN, 2 * f->half);
    bool ok = f->buf != NULL;
    for (int i = 0; i < 2 && ok; i++) {
        f->r[i].buf = f->buf + i * f->half;
        f->r[i].lists = malloc(SAMPLER_FETCH_DSTS * sizeof *f->r[i].lists);
        f->r[i].rd = malloc(SAMPLER_FETCH_DSTS * sizeof *f->r[i].rd);
        ok = f->r[i].lists && f->r[i].rd;
    }
    if (!ok) {
        size_t want = 2 * f->half;
        sampler_fetch_free(f);
        return sl_errf(err, errlen, -ENOMEM, "sampler: no memory for a %zu-byte topology read buffer", want);
    }
#ifdef SLUICE_HAVE_URING
    struct io_uring_params p = {0};
#ifdef IORING_SETUP_COOP_TASKRUN
    p.flags = IORING_SETUP_COOP_TASKRUN; /* this thread reaps its own completions */
#endif
    int rc = io_uring_queue_init_params(SAMPLER_FETCH_DEPTH, &f->ring, &p);
    if (rc == -EINVAL && p.flags) {
        memset(&p, 0, sizeof p);
        rc = io_uring_queue_init_params(SAMPLER_FETCH_DEPTH, &f->ring, &p);
    }
    f->uring = rc == 0; /* else pread(2), one list at a time */
#endif
    *out = f;
    return 0;
}

void sampler_fetch_free(struct sampler_fetch *f)
{
    if (!f)
        return;
#ifdef SLUICE_HAVE_URING
    if (f->uring) {
        sampler_fetch_cancel(f); /* no read may land in freed memory */
        io_uring_queue_exit(&f->ring);
    }
#endif
    free(f->buf);
    for (int i = 0; i < 2; i++) {
        free(f->r[i].lists);
        free(f->r[i].rd);
    }
    free(f);
}

/* Accounts res bytes of read r: 1 when the list is complete, 0 when more
 * is to be read, -errno on failure. */
static int read_done(struct fread *r, int64_t res, uint64_t align)
{
    if (res == -EAGAIN || res == -EINTR)
        return 0;
    if (res < 0)
        return (int)res;
    if (res == 0) /* end of file */
        return r->done >= r->need ? 1 : -EIO;
    r->done += (uint64_t)res;
    if (r->done >= r->need)
        return 1;
    return r->done % align ? -EIO : 0; /* ended mid-block: the end of the file, before the list's */
}

static int read_all_pread(struct sampler_fetch *f, struct round *r)
{
    for (uint32_t k = 0; k < r->nr; k++) {
        struct fread *x = &r->rd[k];
        for (;;) {
            ssize_t got = pread(f->t->fd, x->dst + x->done, x->len - x->done, (off_t)(x->off + x->done));
            int rc = read_done(x, got < 0 ? -errno : got, f->align);
            if (rc < 0)
                return rc;
            if (rc == 1)
                break;
        }
    }
    r->complete = r->next = r->nr;
    return 0;
}

#ifdef SLUICE_HAVE_URING
static void queue_read(struct sampler_fetch *f, unsigned ri, uint32_t k)
{
    struct fread *x = &f->r[ri].rd[k];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
    if (!sqe) { /* cannot happen: at most DEPTH prepared or in flight */
        io_uring_submit(&f->ring);
        sqe = io_uring_get_sqe(&f->ring);
    }
    io_uring_prep_read(sqe, f->t->fd, x->dst + x->done, (unsigned)(x->len - x->done), x->off + x->done);
    io_uring_sqe_set_data64(sqe, (uint64_t)ri << 32 | k);
}

/* Hands reads to the kernel up to DEPTH in flight, the oldest round's first. */
static void pump(struct sampler_fetch *f)
{
    for (unsigned j = 0; j < f->count && !f->failed; j++) {
        unsigned ri = (f->head + j) % 2;
        struct round *r = &f->r[ri];
        while (r->next < r->nr && f->inflight < SAMPLER_FETCH_DEPTH) {
            queue_read(f, ri, r->next++);
            f->inflight++;
        }
    }
}

/* Waits for one completion or more and accounts them. */
static void reap(struct sampler_fetch *f)
{
    int rc = io_uring_submit_and_wait(&f->ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
        if (!f->failed)
            f->failed = rc; /* the reads in flight are still the kernel's: wait for them */
        if (io_uring_wait_cqe(&f->ring, &f->cqes[0]) < 0)
            return;
    }
    unsigned n = io_uring_peek_batch_cqe(&f->ring, f->cqes, SAMPLER_FETCH_DEPTH);
    for (unsigned i = 0; i < n; i++) {
        uint64_t data = io_uring_cqe_get_data64(f->cqes[i]);
        unsigned ri = (unsigned)(data >> 32);
        uint32_t k = (uint32_t)data;
        int x = read_done(&f->r[ri].rd[k], f->cqes[i]->res, f->align);
        if (x < 0 && !f->failed)
            f->failed = x;
        if (x == 0 && !f->failed) {
            queue_read(f, ri, k); /* the rest of a short read; stays in flight */
        } else {
            f->inflight--;
            f->r[ri].complete++;
        }
    }
    io_uring_cq_advance(&f->ring, n);
}
#endif

void sampler_fetch_cancel(struct sampler_fetch *f)
{
#ifdef SLUICE_HAVE_URING
    if (f->uring) {
        for (unsigned j = 0; j < f->count; j++) { /* nothing more is handed on */
            struct round *r = &f->r[(f->head + j) % 2];
            r->complete += r->nr - r->next;
            r->nr = r->next;
        }
        while (f->inflight)
            reap(f);
    }
#endif
    f->count = 0;
    f->failed = 0;
}

int64_t sampler_fetch_start(struct sampler_fetch *f, const uint64_t *dsts, const void *const *known, uint32_t n,
                            char *err, size_t errlen)
{
    if (f->count == 2 || n == 0)
        return sl_errf(err, errlen, -EINVAL, "sampler: topology reader misused (%u rounds out, %u destinations)",
                       f->count, n);
    const struct sampler_topo *t = f->t;
    const size_t es = f->es;
    struct round *r = &f->r[(f->head + f->count) % 2];
    size_t used = 0;
    uint32_t nr = 0, i;
    for (i = 0; i < n && i < SAMPLER_FETCH_DSTS; i++) {
        uint64_t v = dsts[i], beg = t->indptr[v], d = t->indptr[v + 1] - beg;
        uint64_t co = t->cache_off[v];
        if (d == 0) {
            r->lists[i] = r->buf; /* never read */
            continue;
        }
        if (co != SAMPLER_UNCACHED) {
            r->lists[i] = (const unsigned char *)t->cache + co * es;
            continue;
        }
        if (known && known[i]) {
            r->lists[i] = known[i];
            continue;
        }
        uint64_t b0 = beg * es, b1 = (beg + d) * es;
        uint64_t a0 = b0 / f->align * f->align, a1 = sl_round_up(b1, f->align);
        if (used + (a1 - a0) > f->half || nr == f->max_reads)
            break; /* i >= 1: the half holds any one list, max_reads >= 1 */
        r->rd[nr++] = (struct fread){.off = a0, .len = a1 - a0, .need = b1 - a0, .dst = r->buf + used};
        r->lists[i] = r->buf + used + (b0 - a0);
        used += (size_t)(a1 - a0);
    }
    r->ndst = i;
    r->nr = nr;
    r->next = r->complete = 0;
    r->bytes = used;
    f->count++;
    int rc = 0;
#ifdef SLUICE_HAVE_URING
    if (f->uring)
        pump(f); /* reads start now; the caller samples the round before while they run */
    else
#endif
        rc = read_all_pread(f, r);
    if (rc < 0) {
        sampler_fetch_cancel(f);
        return sl_errf(err, errlen, rc, "sampler: reading in-neighbour lists from indices.bin: %s%s", strerror(-rc),
                       rc == -EIO ? " (the file is shorter than indptr.bin says; run gnnprep check)" : "");
    }
    return i;
}

int64_t sampler_fetch_wait(struct sampler_fetch *f, const void *const **lists, uint64_t *reads, uint64_t *bytes,
                           char *err, size_t errlen)
{
    if (f->count == 0)
        return sl_errf(err, errlen, -EINVAL, "sampler: topology reader misused (no round started)");
    struct round *r = &f->r[f->head];
#ifdef SLUICE_HAVE_URING
    while (f->uring && r->complete < r->nr && !f->failed) {
        pump(f);
        reap(f);
    }
#endif
    if (f->failed) {
        int rc = f->failed;
        sampler_fetch_cancel(f);
        return sl_errf(err, errlen, rc, "sampler: reading in-neighbour lists from indices.bin: %s%s", strerror(-rc),
                       rc == -EIO ? " (the file is shorter than indptr.bin says; run gnnprep check)" : "");
    }
    f->head = (f->head + 1) % 2;
    f->count--;
#ifdef SLUICE_HAVE_URING
    if (f->uring)
        pump(f); /* the next round's reads that waited for room */
#endif
    *lists = r->lists;
    *reads += r->nr;
    *bytes += r->bytes;
    return r->ndst;
}
