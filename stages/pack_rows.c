/* pack_rows.c - the hot tier and the per-batch rows of a packed run, for
 * gnn-extractor (protocol: pack_rows.h). */
#include "stages/pack_rows.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#endif

#define HOT_PIECE 4096u /* hot rows loaded per engine call, at most */

static inline bool hot_has(const struct pack_rows *pr, uint64_t v)
{
    return pr->hot[v >> 3] >> (v & 7) & 1;
}

static inline bool cache_has(const struct pack_rows *pr, uint64_t v)
{
    return pr->cache && (pr->cache[v >> 3] >> (v & 7) & 1);
}

int pack_rows_open(struct pack_rows *pr, const char *dir, const struct config *c, uint32_t rank, uint32_t ranks,
                   const struct schedule *run, const struct dataset_meta *m, bool buffered, char *err, size_t errlen)
{
    memset(pr, 0, sizeof *pr);
    pr->pack.chunks_fd = -1;
    pr->rank = rank;
    int rc = pack_open(&pr->pack, dir, buffered, err, errlen);
    if (rc == 0)
        rc = pack_check(&pr->pack, c, ranks, m, err, errlen);
    if (rc)
        goto fail;
    const struct dataset_file *f = &m->f[DATASET_FEATURES];
    if (pr->pack.m.row_bytes != f->cols * dtype_size(f->dtype)) {
        rc = sl_errf(err, errlen, -EINVAL, "%s: rows of %" PRIu64 " bytes, the dataset's are %" PRIu64
                     "; make the pack again", dir, pr->pack.m.row_bytes, f->cols * dtype_size(f->dtype));
        goto fail;
    }
    pr->sched = run; /* borrowed: only its epoch table is read */
    uint64_t *ids = NULL;
    if ((rc = pack_read_hot(&pr->pack, &ids, NULL, err, errlen)) != 0)
        goto fail;
    pr->hot = calloc(m->nodes / 8 + 1, 1);
    if (!pr->hot) {
        free(ids);
        rc = sl_errf(err, errlen, -ENOMEM, "no memory for the hot tier's bitmap");
        goto fail;
    }
    for (uint64_t i = 0; i < pr->pack.m.hot_rows; i++)
        pr->hot[ids[i] >> 3] |= (uint8_t)(1u << (ids[i] & 7));
    free(ids);
    if (pr->pack.m.cache_rows) {
        if ((rc = pack_read_cache_ids(&pr->pack, &ids, err, errlen)) != 0)
            goto fail;
        pr->cache = calloc(m->nodes / 8 + 1, 1);
        if (!pr->cache) {
            free(ids);
            rc = sl_errf(err, errlen, -ENOMEM, "no memory for the cache tier's bitmap");
            goto fail;
        }
        for (uint64_t i = 0; i < pr->pack.m.cache_rows; i++)
            pr->cache[ids[i] >> 3] |= (uint8_t)(1u << (ids[i] & 7));
        free(ids);
    }
    for (uint64_t i = 0; i < pr->pack.m.batches; i++) {
        const struct pack_entry *e = &pr->pack.ent[i];
        pr->rows_max = SL_MAX(pr->rows_max, pack_round(pack_rows_tail_bytes(e, pr->pack.m.row_bytes)));
        pr->cache_max = SL_MAX(pr->cache_max, e->cache_bytes);
    }
    return 0;
fail:
    pack_rows_free(pr);
    return rc;
}

void pack_rows_free(struct pack_rows *pr)
{
    if (!pr)
        return;
    pack_free(&pr->pack);
    free(pr->hot);
    free(pr->cache);
    pr->hot = NULL;
    pr->cache = NULL;
}

int pack_rows_load_hot(struct pack_rows *pr, struct extractor *x, uint64_t *loaded, char *err, size_t errlen)
{
    const struct pack *p = &pr->pack;
    uint64_t n = p->m.hot_rows, rb = p->m.row_bytes;
    struct featbuf *fb = x->fb;
    *loaded = 0;
    if (n == 0)
        return 0;
    if (n > fb->pin_slots) {
        uint64_t mb = ((n + (uint64_t)(fb->nslots - fb->pin_slots)) * fb->stride + (1ull << 20) - 1) >> 20;
        return sl_errf(err, errlen, -ENOSPC,
                       "%s: the hot tier has %" PRIu64 " rows, the feature buffer pins at most %" PRIu32
                       " beside the extraction reserve; raise pipeline.feature_buffer_mb to at least %" PRIu64
                       " (what the pack was made with) or make the pack again with this one",
                       p->dir, n, fb->pin_slots, mb);
    }
    uint64_t *ids = NULL;
    int rc = pack_read_hot(p, &ids, NULL, err, errlen);
    if (rc)
        return rc;
    uint32_t piece = (uint32_t)SL_MIN((uint64_t)HOT_PIECE, (uint64_t)(fb->nslots - fb->pin_slots));
    piece = SL_MAX(piece, 1);
    unsigned char *buf = malloc((size_t)piece * rb);
    const void **rows = malloc((size_t)piece * sizeof *rows);
    uint32_t *slots = malloc((size_t)piece * sizeof *slots);
    if (!buf || !rows || !slots)
        rc = sl_errf(err, errlen, -ENOMEM, "no memory to load the hot tier");
    for (uint64_t i = 0; rc == 0 && i < n; i += piece) {
        uint32_t k = (uint32_t)SL_MIN((uint64_t)piece, n - i);
        if ((rc = pack_read_hot_rows(p, i, k, buf, err, errlen)) != 0)
            break;
        for (uint32_t j = 0; j < k && rc == 0; j++) {
            rows[j] = buf + (size_t)j * rb;
            if ((rc = featbuf_pin(fb, ids[i + j])) != 0)
                rc = sl_errf(err, errlen, rc, "pinning hot node %" PRIu64 ": %s", ids[i + j], strerror(-rc));
        }
        if (rc || (rc = extractor_run_rows(x, ids + i, k, rows, slots, err, errlen)) != 0)
            break;
        if (!x->unreferenced && (rc = featbuf_release_many(fb, slots, k)) != 0)
            rc = sl_errf(err, errlen, rc, "releasing hot rows: %s", strerror(-rc));
        *loaded += k;
    }
    free(ids);
    free(buf);
    free(rows);
    free(slots);
    return rc;
}

/* The extents x[0..ne) of cache.bin back to back into b->cbuf, one pread
 * after another. */
static int cache_read_pread(const struct pack *p, struct pack_rows_buf *b, const struct pack_extent *x, uint32_t ne,
                            char *err, size_t errlen)
{
    uint64_t at = 0;
    for (uint32_t i = 0; i < ne; i++) {
        int rc = pack_read_cache(p, x[i].off, x[i].len, b->cbuf + at, err, errlen);
        if (rc)
            return rc;
        at += x[i].len;
    }
    return 0;
}

#ifdef SLUICE_HAVE_URING
/* The same with up to PACK_ROWS_DEPTH reads in flight on b's ring; a short
 * read is finished by pread. */
static int cache_read_uring(const struct pack *p, struct pack_rows_buf *b, const struct pack_extent *x, uint32_t ne,
                            char *err, size_t errlen)
{
    struct io_uring *ring = b->ring;
    uint64_t dst[PACK_ROWS_DEPTH];
    uint32_t next = 0, inflight = 0;
    uint64_t at = 0;
    int rc = 0;
    while ((next < ne && rc == 0) || inflight > 0) {
        while (rc == 0 && next < ne && inflight < PACK_ROWS_DEPTH) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe)
                break;
            io_uring_prep_read(sqe, p->cache_fd, b->cbuf + at, (unsigned)x[next].len, x[next].off);
            io_uring_sqe_set_data64(sqe, next);
            dst[next % PACK_ROWS_DEPTH] = at;
            at += x[next].len;
            next++;
            inflight++;
        }
        int r = io_uring_submit_and_wait(ring, 1);
        if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY && rc == 0)
            rc = sl_errf(err, errlen, r, "%s/" PACK_CACHE ": io_uring: %s", p->dir, strerror(-r));
        struct io_uring_cqe *cqe;
        while (io_uring_peek_cqe(ring, &cqe) == 0) {
            uint32_t i = (uint32_t)io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(ring, cqe);
            inflight--;
            if (rc)
                continue;
            if (res < 0)
                rc = sl_errf(err, errlen, res, "%s/" PACK_CACHE ": reading %" PRIu64 " bytes at %" PRIu64 ": %s",
                             p->dir, x[i].len, x[i].off, strerror(-res));
            else if ((uint64_t)res < x[i].len) /* short: the rest the plain way (a whole extent again: aligned) */
                rc = pack_read_cache(p, x[i].off, x[i].len, b->cbuf + dst[i % PACK_ROWS_DEPTH], err, errlen);
        }
        if (r < 0 && rc && inflight == 0)
            break;
    }
    return rc;
}
#endif

/* Reads the cache extents of a batch into b->cbuf. */
static int cache_read(const struct pack *p, struct pack_rows_buf *b, const struct pack_extent *x, uint32_t ne,
                      char *err, size_t errlen)
{
#ifdef SLUICE_HAVE_URING
    if (!b->ring_tried) {
        b->ring_tried = true;
        struct io_uring *ring = calloc(1, sizeof *ring);
        if (ring && !sl_env_on("SLUICE_NO_IO_URING") && io_uring_queue_init(PACK_ROWS_DEPTH, ring, 0) == 0)
            b->ring = ring;
        else
            free(ring);
    }
    if (b->ring && ne > 1)
        return cache_read_uring(p, b, x, ne, err, errlen);
#endif
    return cache_read_pread(p, b, x, ne, err, errlen);
}

int pack_rows_batch(const struct pack_rows *pr, struct pack_rows_buf *b, uint64_t g, const uint64_t *nodes, uint32_t n,
                    char *err, size_t errlen)
{
    const struct pack *p = &pr->pack;
    if (g >= schedule_len(pr->sched))
        return sl_errf(err, errlen, -ERANGE, "batch %" PRIu64 " is past the run's schedule", g);
    struct schedule_pos pos;
    schedule_at(pr->sched, g, &pos);
    const struct pack_entry *e = pack_find(p, pr->rank, pos.epoch, pos.split, pos.k);
    if (!e)
        return sl_errf(err, errlen, -EINVAL,
                       "batch %" PRIu64 " (epoch %" PRIu32 ", split %" PRIu32 ", batch %" PRIu64 ") is not in %s",
                       g, pos.epoch, pos.split, pos.k, p->dir);
    if (e->nodes != n)
        return sl_errf(err, errlen, -EINVAL,
                       "batch %" PRIu64 " has %" PRIu32 " nodes, its chunk in %s was packed for %" PRIu32
                       "; the batch did not come from this pack",
                       g, n, p->dir, e->nodes);
    if (e->cached && (!b->cbuf || b->ccap < pr->cache_max)) {
        free(b->cbuf);
        b->ccap = (size_t)SL_MAX(pr->cache_max, PACK_ALIGN);
        if (!(b->cbuf = aligned_alloc(PACK_ALIGN, b->ccap)))
            return sl_errf(err, errlen, -ENOMEM, "no memory for a batch's cache rows (%zu bytes)", b->ccap);
    }
    if (!b->buf || b->cap < pr->rows_max) {
        free(b->buf);
        b->cap = (size_t)SL_MAX(pr->rows_max, PACK_ALIGN);
        if (!(b->buf = aligned_alloc(PACK_ALIGN, b->cap)))
            return sl_errf(err, errlen, -ENOMEM, "no memory for a chunk's rows (%zu bytes)", b->cap);
    }
    if (b->nrows < n) {
        const void **r = realloc(b->rows, (size_t)n * sizeof *r);
        if (!r)
            return sl_errf(err, errlen, -ENOMEM, "out of memory");
        b->rows = r;
        b->nrows = n;
    }
    uint64_t t0 = sl_now_ns();
    int rc = pack_read_rows(p, e, b->buf, err, errlen);
    if (rc)
        return rc;
    b->read_ns += sl_now_ns() - t0;
    uint64_t rb = p->m.row_bytes;
    if (e->rows || e->cached) {
        b->reads++;
        b->bytes += pack_round(pack_rows_tail_bytes(e, rb));
    }
    const uint32_t *coff = NULL;
    if (e->cached) {
        uint64_t t1 = sl_now_ns();
        if ((rc = cache_read(p, b, pack_tail_extents(e, rb, b->buf), e->cache_ext, err, errlen)) != 0)
            return rc;
        uint64_t dt = sl_now_ns() - t1;
        b->read_ns += dt;
        b->cache_ns += dt;
        b->reads += e->cache_ext;
        b->bytes += e->cache_bytes;
        b->cache_reads += e->cache_ext;
        b->cache_bytes += e->cache_bytes;
        coff = pack_tail_offsets(e, rb, b->buf);
    }
    uint32_t j = 0, k = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (hot_has(pr, nodes[i])) {
            b->rows[i] = NULL;
            continue;
        }
        if (cache_has(pr, nodes[i])) {
            if (k == e->cached)
                return sl_errf(err, errlen, -EINVAL,
                               "batch %" PRIu64 ": more cache rows than its chunk in %s lists (%" PRIu32
                               "); the batch did not come from this pack",
                               g, p->dir, e->cached);
            b->rows[i] = b->cbuf + coff[k++];
            continue;
        }
        if (j == e->rows)
            return sl_errf(err, errlen, -EINVAL,
                           "batch %" PRIu64 ": more rows outside the hot tier than its chunk in %s holds (%" PRIu32
                           "); the batch did not come from this pack",
                           g, p->dir, e->rows);
        b->rows[i] = b->buf + (size_t)j++ * p->m.row_bytes;
    }
    if (j != e->rows || k != e->cached)
        return sl_errf(err, errlen, -EINVAL,
                       "batch %" PRIu64 ": %" PRIu32 " packed and %" PRIu32 " cache rows, its chunk holds %" PRIu32
                       " and %" PRIu32 "; the batch did not come from this pack",
                       g, j, k, e->rows, e->cached);
    return 0;
}

void pack_rows_buf_free(struct pack_rows_buf *b)
{
    if (!b)
        return;
    free(b->buf);
    free(b->cbuf);
    free(b->rows);
#ifdef SLUICE_HAVE_URING
    if (b->ring) {
        io_uring_queue_exit(b->ring);
        free(b->ring);
    }
#endif
    memset(b, 0, sizeof *b);
}
