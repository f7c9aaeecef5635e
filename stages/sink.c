/* sink.c - the row sink's generic layer (contract in sink.h): argument
 * checks, the queue of outstanding copies, publishing finished rows, the
 * choice of variant and the SLUICE_FAULT_COPY_EIO test hook.
 *
 * The queue is a ring of cap entries: put appends at (head + count) % cap
 * after the variant has started the copy; poll asks the variant how many
 * of the oldest have finished and pops exactly those, publishing each
 * before the next, so rows are published in put order. */
#include "stages/sink.h"

#include <errno.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/util.h"

static atomic_bool fault_announced;

static uint64_t fault_copy_eio(void)
{
    const char *s = getenv("SLUICE_FAULT_COPY_EIO");
    uint64_t n = 0;
    if (!s || !*s)
        return 0;
    bool bad = sl_parse_u64(s, false, &n) != 0 || n == 0;
    if (!atomic_exchange(&fault_announced, true)) {
        if (bad)
            fprintf(stderr, "%srow sink: SLUICE_FAULT_COPY_EIO=%s is not a positive integer; no copy will fail\n",
                    sl_err_line_start(), s);
        else
            fprintf(stderr,
                    "%srow sink: SLUICE_FAULT_COPY_EIO=%" PRIu64 ": copy %" PRIu64
                    " of each extractor thread will fail (a test hook)\n",
                    sl_err_line_start(), n, n);
    }
    return bad ? 0 : n;
}

const struct row_sink_ops *row_sink_pick(const struct featbuf *fb, char *err, size_t errlen)
{
    if (fb->rows)
        return &row_sink_host;
#ifdef SLUICE_HAVE_CUDA
    if (fb->dev_rows)
        return &row_sink_cuda;
    sl_errf(err, errlen, -EINVAL,
            "the feature buffer keeps its rows on the device, and this process has not opened the device rows "
            "(extractor_use_device) for the CUDA row sink to copy into");
#else
    sl_errf(err, errlen, -EINVAL,
            "the feature buffer keeps its rows on the device, and this build has no CUDA row sink to copy rows "
            "there; rebuild with the CUDA toolkit (SLUICE_CUDA=ON) or run this rank on the CPU (gnnlaunch --cpu)");
#endif
    return NULL;
}

int row_sink_init(struct row_sink *s, const struct row_sink_ops *ops, struct featbuf *fb, void *staging,
                  size_t staging_len, uint32_t cap, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (!ops || !fb || cap == 0)
        return sl_errf(err, errlen, -EINVAL, "row sink: no variant, no feature buffer or no room for copies");
    s->fb = fb;
    s->staging = staging;
    s->staging_len = staging_len;
    s->cap = cap;
    s->q = calloc(cap, sizeof *s->q);
    s->rc = calloc(cap, sizeof *s->rc);
    if (!s->q || !s->rc) {
        row_sink_free(s);
        return sl_errf(err, errlen, -ENOMEM, "row sink: no memory for %u copies", cap);
    }
    int rc = ops->init(s, err, errlen);
    if (rc) {
        row_sink_free(s);
        return rc;
    }
    s->ops = ops; /* set last: free calls ops->free only on an initialised variant */
    s->fault_at = fault_copy_eio();
    return 0;
}

void row_sink_free(struct row_sink *s)
{
    if (!s)
        return;
    if (s->ops) {
        struct row_sink_done d;
        while (s->count)
            row_sink_poll(s, &d, 1, true);
        s->ops->free(s);
    }
    free(s->q);
    free(s->rc);
    memset(s, 0, sizeof *s);
}

int row_sink_put(struct row_sink *s, const struct row_sink_copy *c)
{
    const struct featbuf *fb = s->fb;
    if (!c->src || c->nrows == 0 || c->slot >= fb->nslots || c->nrows > fb->nslots - c->slot || c->row_bytes == 0 ||
        c->row_bytes > fb->row_bytes)
        return -EINVAL;
    if (s->count == s->cap)
        return -EBUSY;
    uint32_t pos = (s->head + s->count) % s->cap;
    int rc = s->ops->start(s, pos, c);
    if (rc)
        return rc;
    s->q[pos] = *c;
    s->count++;
    return 0;
}

uint32_t row_sink_poll(struct row_sink *s, struct row_sink_done *done, uint32_t max, bool wait)
{
    if (!s->count || !max)
        return 0;
    if (max > s->count)
        max = s->count;
    uint32_t k = s->ops->finished(s, max, wait, s->rc);
    for (uint32_t i = 0; i < k; i++) {
        const struct row_sink_copy *c = &s->q[s->head];
        int rc = s->rc[i];
        s->finished++;
        if (rc == 0 && s->finished == s->fault_at)
            rc = -EIO;
        int frc = 0;
        for (uint32_t r = 0; r < c->nrows; r++) {
            int e = rc ? featbuf_load_failed(s->fb, c->slot + r) : featbuf_loaded(s->fb, c->slot + r);
            if (e && !frc)
                frc = e;
        }
        done[i] =
            (struct row_sink_done){.tag = c->tag, .slot = c->slot, .nrows = c->nrows, .copy_rc = rc, .fb_rc = frc};
        s->head = (s->head + 1) % s->cap;
        s->count--;
    }
    return k;
}
