/* sink_host.c - the host row sink (contract in sink.h): the feature
 * buffer's rows are in shared memory, so a copy is a memcpy per row done
 * inside put; the copy has finished (and its staging bytes are free) when
 * put returns, and the rows are published by the next poll. The order of
 * work is the one the extractor had before the sink existed: copy, then
 * featbuf_loaded, row by row. */
#include "stages/sink.h"

#include <errno.h>
#include <string.h>

#include "core/util.h"

static int host_init(struct row_sink *s, char *err, size_t errlen)
{
    if (!s->fb->rows)
        return sl_errf(err, errlen, -EINVAL, "row sink \"host\": the feature buffer has no rows in host memory");
    return 0;
}

static int host_start(struct row_sink *s, uint32_t pos, const struct row_sink_copy *c)
{
    (void)pos;
    const unsigned char *src = c->src;
    for (uint32_t r = 0; r < c->nrows; r++)
        memcpy(featbuf_row(s->fb, c->slot + r), src + (size_t)r * c->src_pitch, c->row_bytes);
    return 0;
}

/* Every outstanding copy finished inside its put. */
static uint32_t host_finished(struct row_sink *s, uint32_t max, bool wait, int *rc)
{
    (void)s;
    (void)wait;
    for (uint32_t i = 0; i < max; i++)
        rc[i] = 0;
    return max;
}

static void host_free(struct row_sink *s)
{
    (void)s;
}

const struct row_sink_ops row_sink_host = {
    .name = "host",
    .init = host_init,
    .start = host_start,
    .finished = host_finished,
    .free = host_free,
};
