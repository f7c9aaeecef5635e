/* pack_rows.c - the hot tier and the per-batch rows of a packed run, for
 * gnn-extractor (protocol: pack_rows.h). */
#include "stages/pack_rows.h"

#include <errno.h>
#include <pthread.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#ifdef SLUICE_HAVE_URING
#include <liburing.h>
#endif

#define HOT_PIECE 4096u /* hot rows loaded per engine call, at most */

/* One read of a batch: len bytes at off of fd into dst (all aligned). */
struct pack_rows_rd {
    int fd;
    uint64_t off, len;
    unsigned char *dst;
    const char *file; /* for messages: PACK_CHUNKS or PACK_CACHE */
};

static inline bool hot_has(const struct pack_rows *pr, uint64_t v)
{
    return pr->hot[v >> 3] >> (v & 7) & 1;
}

static inline bool cache_has(const struct pack_rows *pr, uint64_t v)
{
    return pr->cache && (pr->cache[v >> 3] >> (v & 7) & 1);
}

int pack_rows_open_reads(struct pack_rows *pr, const char *dir, bool buffered, char *err, size_t errlen)
{
    memset(pr, 0, sizeof *pr);
    pr->pack.chunks_fd = -1;
    pr->pack.cache_fd = -1;
    int rc = pack_open(&pr->pack, dir, buffered, err, errlen);
    if (rc)
        return rc;
    if ((rc = pthread_mutex_init(&pr->busy_mu, NULL)) != 0) {
        pack_free(&pr->pack);
        return sl_errf(err, errlen, -rc, "pthread_mutex_init: %s", strerror(rc));
    }
    pr->mu_init = true;
    pack_rows_sizes(&pr->pack, &pr->rows_max, &pr->cache_max, &pr->ext_max);
    return 0;
}

int pack_rows_open(struct pack_rows *pr, const char *dir, const struct config *c, uint32_t rank, uint32_t ranks,
                   const struct schedule *run, const struct dataset_meta *m, bool buffered, char *err, size_t errlen)
{
    int rc = pack_rows_open_reads(pr, dir, buffered, err, errlen);
    if (rc)
        return rc;
    pr->rank = rank;
    if ((rc = pack_check(&pr->pack, c, ranks, m, err, errlen)) != 0)
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
    pr->cache = NULL;
    if (pr->mu_init)
        pthread_mutex_destroy(&pr->busy_mu);
    pr->mu_init = false;
}

void pack_rows_sizes(const struct pack *p, uint64_t *rows_max, uint64_t *cache_max, uint32_t *ext_max)
{
    *rows_max = *cache_max = 0;
    *ext_max = 0;
    for (uint64_t i = 0; i < p->m.batches; i++) {
        const struct pack_entry *e = &p->ent[i];
        *rows_max = SL_MAX(*rows_max, pack_round(pack_rows_tail_bytes(e, p->m.row_bytes)));
        *cache_max = SL_MAX(*cache_max, e->cache_bytes);
        *ext_max = SL_MAX(*ext_max, e->cache_ext);
    }
}

uint64_t pack_rows_memory(const struct pack *p, uint32_t threads)
{
    uint64_t rows_max, cache_max;
    uint32_t ext_max;
    pack_rows_sizes(p, &rows_max, &cache_max, &ext_max);
    uint64_t bitmaps = (p->m.nodes / 8 + 1) * (p->m.cache_rows ? 2 : 1);
    uint64_t index = p->m.batches * sizeof(struct pack_entry);
    uint64_t per_thread = SL_MAX(rows_max, PACK_ALIGN) + (cache_max ? SL_MAX(cache_max, PACK_ALIGN) : 0) +
                          (uint64_t)(ext_max + 1) * sizeof(struct pack_rows_rd) + p->m.max_nodes * sizeof(void *);
    uint64_t hot_load = (uint64_t)HOT_PIECE * (p->m.row_bytes + sizeof(void *) + 4) + p->m.hot_rows * 8;
    return bitmaps + index + hot_load + (uint64_t)threads * per_thread;
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

static int rd_pread(const struct pack *p, const struct pack_rows_rd *r, char *err, size_t errlen)
{
    size_t got = 0;
    int rc = sl_pread_full(r->fd, r->dst, (size_t)r->len, (off_t)r->off, &got);
    if (rc == 0 && got != r->len)
        rc = -EIO;
    if (rc)
        return sl_errf(err, errlen, rc, "%s/%s: reading %" PRIu64 " bytes at %" PRIu64 ": %s", p->dir, r->file,
                       r->len, r->off, got != r->len && rc == -EIO ? "short read (the pack changed under us?)"
                                                                   : strerror(-rc));
    return 0;
}

/* The reads r[0..n), one pread after another. */
static int reads_pread(const struct pack *p, const struct pack_rows_rd *r, uint32_t n, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < n; i++) {
        int rc = rd_pread(p, &r[i], err, errlen);
        if (rc)
            return rc;
    }
    return 0;
}

#ifdef SLUICE_HAVE_URING
#define RING_ENTRIES (2 * PACK_ROWS_DEPTH)

/* The same with up to depth reads in flight on b's ring, submitted in
 * order; a short read is done again whole by pread (aligned: direct I/O
 * allows it). On an error the reads in flight are drained first. */
static int reads_uring(const struct pack *p, struct pack_rows_buf *b, const struct pack_rows_rd *r, uint32_t n,
                       uint32_t depth, char *err, size_t errlen)
{
    struct io_uring *ring = b->ring;
    uint32_t next = 0, inflight = 0;
    int rc = 0;
    while ((next < n && rc == 0) || inflight > 0) {
        while (rc == 0 && next < n && inflight < depth) {
            struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
            if (!sqe)
                break;
            io_uring_prep_read(sqe, r[next].fd, r[next].dst, (unsigned)r[next].len, r[next].off);
            io_uring_sqe_set_data64(sqe, next);
            next++;
            inflight++;
        }
        int w = io_uring_submit_and_wait(ring, 1);
        if (w < 0 && w != -EINTR && w != -EAGAIN && w != -EBUSY && rc == 0)
            rc = sl_errf(err, errlen, w, "%s: io_uring: %s", p->dir, strerror(-w));
        struct io_uring_cqe *cqe;
        while (io_uring_peek_cqe(ring, &cqe) == 0) {
            uint32_t i = (uint32_t)io_uring_cqe_get_data64(cqe);
            int res = cqe->res;
            io_uring_cqe_seen(ring, cqe);
            inflight--;
            if (rc)
                continue;
            if (res < 0)
                rc = sl_errf(err, errlen, res, "%s/%s: reading %" PRIu64 " bytes at %" PRIu64 ": %s", p->dir,
                             r[i].file, r[i].len, r[i].off, strerror(-res));
            else if ((uint64_t)res < r[i].len)
                rc = rd_pread(p, &r[i], err, errlen);
        }
        if (w < 0 && rc && inflight == 0)
            break;
    }
    return rc;
}
#endif

/* Reads r[0..n) with up to depth in flight: on b's ring (set up at the
 * first call unless SLUICE_NO_IO_URING is set or the kernel refuses),
 * else one pread after another. */
static int reads_do(const struct pack *p, struct pack_rows_buf *b, const struct pack_rows_rd *r, uint32_t n,
                    uint32_t depth, char *err, size_t errlen)
{
#ifdef SLUICE_HAVE_URING
    if (!b->ring_tried) {
        b->ring_tried = true;
        struct io_uring *ring = calloc(1, sizeof *ring);
        if (ring && !sl_env_on("SLUICE_NO_IO_URING") && io_uring_queue_init(RING_ENTRIES, ring, 0) == 0)
            b->ring = ring;
        else
            free(ring);
    }
    if (b->ring && n > 1)
        return reads_uring(p, b, r, n, SL_MIN(depth, (uint32_t)RING_ENTRIES), err, errlen);
#else
    (void)depth;
#endif
    return reads_pread(p, r, n, err, errlen);
}

/* The busy clock: time during which at least one thread of the rank was
 * reading (pack_rows_busy). */
static void busy_enter(struct pack_rows *pr)
{
    pthread_mutex_lock(&pr->busy_mu);
    if (pr->busy_active++ == 0)
        pr->busy_since = sl_now_ns();
    pthread_mutex_unlock(&pr->busy_mu);
}

static void busy_leave(struct pack_rows *pr)
{
    pthread_mutex_lock(&pr->busy_mu);
    if (--pr->busy_active == 0)
        pr->busy_ns += sl_now_ns() - pr->busy_since;
    pthread_mutex_unlock(&pr->busy_mu);
}

uint64_t pack_rows_busy(struct pack_rows *pr)
{
    pthread_mutex_lock(&pr->busy_mu);
    uint64_t ns = pr->busy_ns + (pr->busy_active ? sl_now_ns() - pr->busy_since : 0);
    pthread_mutex_unlock(&pr->busy_mu);
    return ns;
}

/* Reads e's rows and tail into b->buf and its cache extents into b->cbuf
 * (buffers large enough), with the statistics. Serial (the default): the
 * rows and tail in one read, then the extents, up to PACK_ROWS_DEPTH in
 * flight. b->overlap: the tail's blocks first (one small read), then the
 * rows before them and every extent with up to PACK_ROWS_DEPTH + 1 in
 * flight (no faster on the disk measured, bench/results/packed-read-
 * 2026-11-27.md; kept for other disks). */
static int read_entry(struct pack_rows *pr, struct pack_rows_buf *b, const struct pack_entry *e, char *err,
                      size_t errlen)
{
    const struct pack *p = &pr->pack;
    uint64_t rb = p->m.row_bytes, t0 = sl_now_ns();
    int rc = 0;
    busy_enter(pr);
    if (e->cached == 0 || !b->overlap) {
        uint64_t t1 = 0;
        if ((rc = pack_read_rows(p, e, b->buf, err, errlen)) == 0 && e->cached) {
            t1 = sl_now_ns();
            const struct pack_extent *x = pack_tail_extents(e, rb, b->buf);
            uint64_t at = 0;
            for (uint32_t i = 0; i < e->cache_ext; i++) {
                b->rd[i] = (struct pack_rows_rd){p->cache_fd, x[i].off, x[i].len, b->cbuf + at, PACK_CACHE};
                at += x[i].len;
            }
            rc = reads_do(p, b, b->rd, e->cache_ext, PACK_ROWS_DEPTH, err, errlen);
            b->cache_ns += sl_now_ns() - t1;
        }
    } else {
        uint64_t head = pack_tail_block(e, rb);
        if ((rc = pack_read_tail(p, e, b->buf, err, errlen)) == 0) {
            uint64_t t1 = sl_now_ns();
            uint32_t n = 0;
            if (head)
                b->rd[n++] = (struct pack_rows_rd){p->chunks_fd, pack_rows_off(e), head, b->buf, PACK_CHUNKS};
            const struct pack_extent *x = pack_tail_extents(e, rb, b->buf);
            uint64_t at = 0;
            for (uint32_t i = 0; i < e->cache_ext; i++) {
                b->rd[n++] = (struct pack_rows_rd){p->cache_fd, x[i].off, x[i].len, b->cbuf + at, PACK_CACHE};
                at += x[i].len;
            }
            rc = reads_do(p, b, b->rd, n, PACK_ROWS_DEPTH + (head ? 1 : 0), err, errlen);
            b->cache_ns += sl_now_ns() - t1;
            b->reads++; /* the tail's own read */
            b->bytes += pack_round(pack_rows_tail_bytes(e, rb)) - head;
        }
    }
    busy_leave(pr);
    if (rc)
        return rc;
    b->read_ns += sl_now_ns() - t0;
    if (e->cached == 0 || !b->overlap) {
        if (e->rows || e->cached) {
            b->reads++;
            b->bytes += pack_round(pack_rows_tail_bytes(e, rb));
        }
    } else if (pack_tail_block(e, rb)) {
        b->reads++;
        b->bytes += pack_tail_block(e, rb);
    }
    b->reads += e->cache_ext;
    b->bytes += e->cache_bytes;
    b->cache_reads += e->cache_ext;
    b->cache_bytes += e->cache_bytes;
    return 0;
}

/* Makes b's buffers large enough for any batch of pr. */
static int buf_fit(const struct pack_rows *pr, struct pack_rows_buf *b, uint32_t n, char *err, size_t errlen)
{
    if (pr->cache_max && (!b->cbuf || b->ccap < pr->cache_max)) {
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
    if (b->rdcap < pr->ext_max + 1) {
        struct pack_rows_rd *r = realloc(b->rd, (size_t)(pr->ext_max + 1) * sizeof *r);
        if (!r)
            return sl_errf(err, errlen, -ENOMEM, "out of memory");
        b->rd = r;
        b->rdcap = pr->ext_max + 1;
    }
    if (b->nrows < n) {
        const void **r = realloc(b->rows, (size_t)n * sizeof *r);
        if (!r)
            return sl_errf(err, errlen, -ENOMEM, "out of memory");
        b->rows = r;
        b->nrows = n;
    }
    return 0;
}

int pack_rows_read(struct pack_rows *pr, struct pack_rows_buf *b, const struct pack_entry *e, char *err,
                   size_t errlen)
{
    int rc = buf_fit(pr, b, 0, err, errlen);
    return rc ? rc : read_entry(pr, b, e, err, errlen);
}

int pack_rows_batch(struct pack_rows *pr, struct pack_rows_buf *b, uint64_t g, const uint64_t *nodes, uint32_t n,
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
    int rc = buf_fit(pr, b, n, err, errlen);
    if (rc || (rc = read_entry(pr, b, e, err, errlen)) != 0)
        return rc;
    uint64_t rb = p->m.row_bytes;
    const uint32_t *coff = e->cached ? pack_tail_offsets(e, rb, b->buf) : NULL;
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
    free(b->rd);
#ifdef SLUICE_HAVE_URING
    if (b->ring) {
        io_uring_queue_exit(b->ring);
        free(b->ring);
    }
#endif
    memset(b, 0, sizeof *b);
}
