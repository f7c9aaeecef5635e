/* pack_rows.c - the hot tier and the per-batch rows of a packed run, for
 * gnn-extractor (protocol: pack_rows.h). */
#include "stages/pack_rows.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

#define HOT_PIECE 4096u /* hot rows loaded per engine call, at most */

static inline bool hot_has(const struct pack_rows *pr, uint64_t v)
{
    return pr->hot[v >> 3] >> (v & 7) & 1;
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
    for (uint64_t i = 0; i < pr->pack.m.batches; i++)
        pr->rows_max = SL_MAX(pr->rows_max, pack_round((uint64_t)pr->pack.ent[i].rows * pr->pack.m.row_bytes));
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
    pr->hot = NULL;
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
    if (e->rows) {
        b->reads++;
        b->bytes += pack_round((uint64_t)e->rows * p->m.row_bytes);
    }
    uint32_t j = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (hot_has(pr, nodes[i])) {
            b->rows[i] = NULL;
            continue;
        }
        if (j == e->rows)
            return sl_errf(err, errlen, -EINVAL,
                           "batch %" PRIu64 ": more rows outside the hot tier than its chunk in %s holds (%" PRIu32
                           "); the batch did not come from this pack",
                           g, p->dir, e->rows);
        b->rows[i] = b->buf + (size_t)j++ * p->m.row_bytes;
    }
    if (j != e->rows)
        return sl_errf(err, errlen, -EINVAL, "batch %" PRIu64 ": %" PRIu32 " rows outside the hot tier, its chunk holds %" PRIu32, g, j, e->rows);
    return 0;
}

void pack_rows_buf_free(struct pack_rows_buf *b)
{
    if (!b)
        return;
    free(b->buf);
    free(b->rows);
    memset(b, 0, sizeof *b);
}
