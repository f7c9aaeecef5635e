/* extract_pread.c - the pread(2) back end of the extraction engine, used
 * when io_uring is unavailable (protocol at the top of extract.c): one
 * read at a time, each into a spare staging entry, its row handed to the
 * row sink when the bytes up to its end have landed. When the sink holds
 * every entry, the engine sleeps on the sink for one (the host sink gives
 * each back at once, so one entry serves every row). With shared staging,
 * a read that finds no block waits for the sink, or for a block to come
 * home. */
#include <errno.h>
#include <unistd.h>

#include "stages/extract_int.h"

static void pread_loads(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    while (xs->next < xs->nloads && !xs->rc) {
        if (!xs->nspare) {
            extract_reap(x, true);
            continue;
        }
        uint32_t e = extract_read_next(x);
        if (e == EXTRACT_NO_ENTRY) { /* no staging block: wait for one of ours */
            if (xs->nsink)
                extract_reap(x, true);
            else if (!xs->rc)
                extract_wait_staging(x);
            continue;
        }
        struct xread *r = &xs->rd[e];
        unsigned char *buf = extract_entry_buf(x, e);
        int more;
        do {
            ssize_t got = pread(s->fd, buf + r->from, r->len - r->from, (off_t)(r->start + r->from));
            more = extract_read_complete(x, e, got < 0 ? -errno : (int)got);
        } while (more == READ_AGAIN);
        extract_reap(x, false);
    }
}

const struct xbackend extract_be_pread = {pread_loads};
