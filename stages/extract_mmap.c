/* extract_mmap.c - the mmap back end of the extraction engine (protocol at
 * the top of extract.c): the features file is mapped read-only, so a load
 * hands the row straight from the mapping to the row sink; no staging is
 * read, but each row in the sink still holds an entry (its bookkeeping),
 * so at most `depth` rows are in the sink at once. A real I/O error here
 * would be SIGBUS; the SLUICE_FAULT_READ_EIO hook counts each row as a
 * read and fails it as a read would. */
#include <errno.h>

#include "stages/extract_int.h"

static void mmap_loads(struct extractor *x)
{
    struct xstate *xs = x->inflight;
    const struct extract_source *s = x->src;
    while (xs->next < xs->nloads && !xs->rc) {
        if (!xs->nspare) {
            extract_reap(x, true);
            continue;
        }
        uint32_t e = extract_read_next(x);
        if (extract_fault_read_fails()) { /* as a read would report it */
            extract_read_failed(x, e, -EIO, false);
            break;
        }
        x->st.io_ops++;
        x->st.io_bytes += s->row_bytes;
        extract_row_landed(x, e, s->map + xs->nodes[xs->rd[e].idx] * s->row_stride);
        extract_reap(x, false);
    }
}

const struct xbackend extract_be_mmap = {mmap_loads};
