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

struct sampler_fetch {
    const struct sampler_topo *t;
    size_t es;          /* bytes per id */
    unsigned char *buf; /* (buf_len) SAMPLER_IO_ALIGN-aligned */
    size_t buf_len;
    struct fread *rd; /* (SAMPLER_FETCH_DSTS) */
#ifdef SLUICE_HAVE_URING
    struct io_uring ring;
    struct io_uring_cqe *cqes[SAMPLER_FETCH_DEPTH];
#endif
    bool uring;
};

int sampler_fetch_init(struct sampler_fetch **out, const struct sampler_topo *t, char *err, size_t errlen)
{
    *out = NULL;
    struct sampler_fetch *f = calloc(1, sizeof *f);
    if (!f)
        return sl_errf(err, errlen, -ENOMEM, "sampler: no memory for a topology reader");
    f->t = t;
    f->es = t->indices_u64 ? 8 : 4;
    /* the longest list's aligned span, twice, so that a round always
     * covers at least one list whatever its alignment */
    uint64_t span = sl_round_up(t->max_in_degree * f->es, SAMPLER_IO_ALIGN) + SAMPLER_IO_ALIGN;
    f->buf_len = (size_t)SL_MAX((uint64_t)SAMPLER_FETCH_BUF, 2 * span);
    f->buf = aligned_alloc(SAMPLER_IO_ALIGN, f->buf_len);
    f->rd = calloc(SAMPLER_FETCH_DSTS, sizeof *f->rd);
    if (!f->buf || !f->rd) {
        sampler_fetch_free(f);
        return sl_errf(err, errlen, -ENOMEM, "sampler: no memory for a %zu-byte topology read buffer", f->buf_len);
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
    if (f->uring)
        io_uring_queue_exit(&f->ring);
#endif
    free(f->buf);
    free(f->rd);
    free(f);
}

/* Accounts res bytes of read r: 1 when the list is complete, 0 when more
 * is to be read, -errno on failure. */
static int read_done(struct fread *r, int64_t res)
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
    return r->done % SAMPLER_IO_ALIGN ? -EIO : 0; /* ended mid-block: the end of the file, before the list's */
}

static int read_all_pread(struct sampler_fetch *f, uint32_t nr)
{
    for (uint32_t k = 0; k < nr; k++) {
        struct fread *r = &f->rd[k];
        for (;;) {
            ssize_t got = pread(f->t->fd, r->dst + r->done, r->len - r->done, (off_t)(r->off + r->done));
            int rc = read_done(r, got < 0 ? -errno : got);
            if (rc < 0)
                return rc;
            if (rc == 1)
                break;
        }
    }
    return 0;
}

#ifdef SLUICE_HAVE_URING
static void queue_read(struct sampler_fetch *f, uint32_t k)
{
    struct fread *r = &f->rd[k];
    struct io_uring_sqe *sqe = io_uring_get_sqe(&f->ring);
    if (!sqe) { /* cannot happen: at most DEPTH prepared or in flight */
        io_uring_submit(&f->ring);
        sqe = io_uring_get_sqe(&f->ring);
    }
    io_uring_prep_read(sqe, f->t->fd, r->dst + r->done, (unsigned)(r->len - r->done), r->off + r->done);
    io_uring_sqe_set_data64(sqe, k);
}

static int read_all_uring(struct sampler_fetch *f, uint32_t nr)
{
    uint32_t next = 0, inflight = 0, complete = 0;
    int failed = 0;
    while (complete < nr) {
        while (!failed && next < nr && inflight < SAMPLER_FETCH_DEPTH) {
            queue_read(f, next++);
            inflight++;
        }
        if (inflight == 0)
            return failed;
        int rc = io_uring_submit_and_wait(&f->ring, 1);
        if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            failed = rc; /* the reads in flight are still the kernel's: wait for them below */
            if (io_uring_wait_cqe(&f->ring, &f->cqes[0]) < 0)
                return failed;
        }
        unsigned n = io_uring_peek_batch_cqe(&f->ring, f->cqes, SAMPLER_FETCH_DEPTH);
        for (unsigned i = 0; i < n; i++) {
            uint32_t k = (uint32_t)io_uring_cqe_get_data64(f->cqes[i]);
            int r = read_done(&f->rd[k], f->cqes[i]->res);
            if (r < 0 && !failed)
                failed = r;
            if (r == 0 && !failed)
                queue_read(f, k); /* the rest of a short read; stays in flight */
            else {
                inflight--;
                complete++;
            }
        }
        io_uring_cq_advance(&f->ring, n);
        if (failed && inflight == 0)
            return failed;
    }
    return failed;
}
#endif

int64_t sampler_fetch_lists(struct sampler_fetch *f, const uint64_t *dsts, uint32_t n, const void **lists,
                            uint64_t *reads, uint64_t *bytes, char *err, size_t errlen)
{
    const struct sampler_topo *t = f->t;
    const size_t es = f->es;
    size_t used = 0;
    uint32_t nr = 0, i;
    for (i = 0; i < n && i < SAMPLER_FETCH_DSTS; i++) {
        uint64_t v = dsts[i], beg = t->indptr[v], d = t->indptr[v + 1] - beg;
        uint64_t co = t->cache_off[v];
        if (d == 0) {
            lists[i] = f->buf; /* never read */
            continue;
        }
        if (co != SAMPLER_UNCACHED) {
            lists[i] = (const unsigned char *)t->cache + co * es;
            continue;
        }
        uint64_t b0 = beg * es, b1 = (beg + d) * es;
        uint64_t a0 = b0 / SAMPLER_IO_ALIGN * SAMPLER_IO_ALIGN, a1 = sl_round_up(b1, SAMPLER_IO_ALIGN);
        if (used + (a1 - a0) > f->buf_len)
            break; /* i >= 1: the buffer holds any one list */
        f->rd[nr++] = (struct fread){.off = a0, .len = a1 - a0, .need = b1 - a0, .dst = f->buf + used};
        lists[i] = f->buf + used + (b0 - a0);
        used += (size_t)(a1 - a0);
    }
    int rc = 0;
#ifdef SLUICE_HAVE_URING
    if (f->uring && nr > 1)
        rc = read_all_uring(f, nr);
    else
#endif
        rc = read_all_pread(f, nr);
    if (rc < 0)
        return sl_errf(err, errlen, rc, "sampler: reading in-neighbour lists from indices.bin: %s%s", strerror(-rc),
                       rc == -EIO ? " (the file is shorter than indptr.bin says; run gnnprep check)" : "");
    *reads += nr;
    *bytes += used;
    return i;
}
